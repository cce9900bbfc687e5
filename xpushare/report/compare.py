"""The cross-SUT comparison: system x case, with what each system held and how far off, from stored runs.

Reads the isolation and functional suites' stored results (``result.json``). The isolation cases' ``metrics`` as
:func:`xpushare.judge.isolation.judge_memory_path` and ``judge_compute_path`` record them: ``sut``, ``path``,
``quota_bytes``, ``accepted_bytes``, ``outcome`` (``held`` | ``held, not usable`` | ``bypassed``),
``bypass_ratio``, ``usable_short_ratio``, ``core_limit``, ``busy_events``, ``ideal_share``, ``accuracy``); the
functional cases' as their judgments record them: ``runtime_s`` (a workload's runtime, FUNC-001/007) and
``quota_probe`` (the memory probe under a static quota, FUNC-006/007: :func:`xpushare.judge.quota_probe.
add_static_figures`: ``quota_bytes``, ``accepted_bytes``, ``step_bytes``, ``tolerance_bytes``, ``path``); PERF-012's
as :func:`xpushare.judge.noisy_neighbour.judge_noisy_neighbour` records them (``slices``: per slice its
``impact``, the throughput beside the noisy neighbour / alone - 1); PERF-013's as
:func:`xpushare.judge.context_latency.judge_context_latency` does (``median_ms``: the wait for a first context and
kernel, per step and in total). A column
is one system on one cluster of one run: ``<sut>`` when that names it alone, else ``<sut> (<cluster>, <run>)``; a
result recorded before the metrics named the system takes its cluster's name. A case not run by a system is
``·``; a SKIP or ERROR shows as such with its reason in the JSON, never as a figure.

Outputs: :meth:`Comparison.markdown` (a table, then each cell's verdict line), :meth:`Comparison.to_dict` (JSON),
:func:`plot` (held MiB per memory path and system, the quota as a line; matplotlib optional, as
:mod:`xpushare.report.plots`). Source: docs/isolation.md §cross-SUT comparison.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xpushare.model.case_record import CaseRecord
from xpushare.report import run_store
from xpushare.report.plots import PlotResult, draw_png
from xpushare.report.summaries import record_status

__all__ = ["PERFORMANCE_CASES", "SUITES", "Cell", "Comparison", "compare_results", "compare_runs", "plot"]

_MIB = 1 << 20
#: The suites whose cases the comparison shows, and the performance cases among them (those with a figure that
#: reads across systems).
SUITES = ("isolation", "functional", "performance")
PERFORMANCE_CASES = ("PERF-012", "PERF-013")


@dataclass(frozen=True)
class Cell:
    """One system's verdict on one case: ``status``, ``outcome`` (memory: held | held, not usable | bypassed;
    compute: held | bypassed/starved as ``held`` False), ``held_mib`` (memory: what the probe held), ``quota_mib``,
    ``off`` (the relative distance from the quota: accepted / quota - 1, or share / ideal - 1), ``summary``."""

    status: str
    outcome: str | None
    held_mib: float | None
    quota_mib: float | None
    off: float | None
    summary: str
    core_limit: int | None = None
    share: float | None = None
    runtime_s: float | None = None
    impacts: tuple[tuple[int, float], ...] = ()
    """PERF-012: ``(slice percent, impact)`` per slice judged."""
    latency_ms: Mapping[str, float] | None = None
    """PERF-013: the median wait per step and ``total_ms`` (milliseconds)."""

    def text(self) -> str:
        """The table cell: ``held 1024 MiB`` / ``held, not usable 448 MiB (-56.2%)`` / ``bypassed 3072 MiB
        (+200.0%)`` / ``share 0.51 of 0.50 (+2.0%)`` / ``21.94 s`` (a runtime), with a non-PASS status after it;
        SKIP and ERROR alone, and a verdict without figures as its status."""
        if self.status in ("SKIP", "ERROR", "NOT_RUN", "INTERRUPTED"):
            return self.status
        if self.impacts:
            return "impact " + ", ".join(f"{q} %: {x:+.1%}" for q, x in self.impacts) + f" {self.status}"
        if self.latency_ms:
            return (f"first kernel {self.latency_ms['total_ms']:.1f} ms (init {self.latency_ms['init_ms']:.1f}, "
                    f"context {self.latency_ms['context_ms']:.1f}) {self.status}")
        if self.held_mib is None and self.share is None:
            return f"{self.runtime_s:.2f} s {self.status}" if self.runtime_s is not None else self.status
        off = f" ({self.off:+.1%})" if self.off is not None and abs(self.off) >= 0.0005 else ""
        if self.share is not None:
            return f"share {self.share:.3f}{off} {self.status}"
        return f"{self.outcome or 'measured'} {self.held_mib:.0f} MiB{off} {self.status}"

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()}


@dataclass
class Comparison:
    """``systems``: the column labels in order; ``cases``: ``(case id, path)`` rows; ``cells[case][system]``."""

    systems: list[str] = field(default_factory=list)
    cases: list[tuple[str, str]] = field(default_factory=list)
    cells: dict[str, dict[str, Cell]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"systems": self.systems, "cases": [{"case": c, "path": p} for c, p in self.cases],
                "cells": {c: {s: cell.to_dict() for s, cell in row.items()} for c, row in self.cells.items()}}

    def rows(self) -> list[list[str]]:
        """One row per case: case id, path, then each system's :meth:`Cell.text` (``·`` when not run)."""
        rows = []
        for case, path in self.cases:
            row = self.cells.get(case, {})
            rows.append([case, path, *(row[s].text() if s in row else "·" for s in self.systems)])
        return rows

    def markdown(self) -> str:
        """The comparison as markdown: the system x case table, then the non-PASS verdict lines."""
        head = ["case", "path", *self.systems]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in self.rows()]
        notes = [f"- {case} {s}: {cell.status}: {cell.summary}" for case, _ in self.cases
                 for s, cell in self.cells.get(case, {}).items() if cell.status != "PASS" and cell.summary]
        if notes:
            lines += ["", "Verdicts other than PASS:", "", *notes]
        return "\n".join(lines) + "\n"


def _probe_outcome(probe: dict[str, Any]) -> str | None:
    """A static-quota probe's outcome by the rules of docs/isolation.md (held: at most the quota plus the
    tolerance; usable: at least the quota less one step)."""
    try:
        quota, accepted = int(probe["quota_bytes"]), int(probe["accepted_bytes"])
    except (KeyError, TypeError, ValueError):
        return None
    if accepted > quota + int(probe.get("tolerance_bytes") or 0):
        return "bypassed"
    return "held" if accepted >= quota - int(probe.get("step_bytes") or 0) else "held, not usable"


def _cell(r: CaseRecord) -> Cell:
    m: dict[str, Any] = dict(r.metrics or {})
    status = record_status(r).value
    probe = m.get("quota_probe")
    if isinstance(probe, dict):  # a functional case's memory probe under its static quota
        m.update(quota_bytes=probe.get("quota_bytes"), accepted_bytes=probe.get("accepted_bytes"),
                 outcome=_probe_outcome(probe))
    quota = m.get("quota_bytes")
    accepted = m.get("accepted_bytes")
    outcome = m.get("outcome")
    off: float | None = None
    held_mib = quota_mib = None
    if quota:
        quota_mib = int(quota) / _MIB
        if accepted is not None:
            held_mib = int(accepted) / _MIB
            off = int(accepted) / int(quota) - 1
            if outcome is None:  # a result stored before outcome was recorded
                outcome = "held" if m.get("held") is True else "bypassed" if m.get("held") is False else None
    share = m.get("busy_events")
    core = m.get("core_limit")
    if share is not None and m.get("ideal_share"):
        off = float(share) / float(m["ideal_share"]) - 1
        outcome = "held" if m.get("held") is True else "not held" if m.get("held") is False else None
    runtime = m.get("runtime_s")
    impacts = tuple((int(row["slice"]), float(row["impact"])) for row in m.get("slices") or ()
                    if isinstance(row, dict) and isinstance(row.get("impact"), (int, float)))
    latency = m.get("median_ms")
    return Cell(status, outcome, held_mib, quota_mib, off, str(r.summary or ""),
                int(core) if core is not None else None, float(share) if share is not None else None,
                float(runtime) if isinstance(runtime, (int, float)) else None, impacts,
                dict(latency) if isinstance(latency, dict) and "total_ms" in latency else None)


def compare_results(runs: Sequence[tuple[str, Sequence[CaseRecord]]]) -> Comparison:
    """The comparison of the isolation and functional results of ``runs`` (``(run id, case records)`` each, in the
    order given; model/case_record.py)."""
    found: list[tuple[str, str, str, CaseRecord]] = []  # (sut, cluster, run, result)
    for run_id, results in runs:
        for r in results:
            if r.suite not in SUITES or (r.suite == "performance" and r.case_id not in PERFORMANCE_CASES):
                continue
            m = r.metrics or {}
            cluster = str(r.cluster or "?")
            found.append((str(m.get("sut") or cluster), cluster, run_id, r))
    keys = list(dict.fromkeys((sut, cluster, run) for sut, cluster, run, _ in found))
    suts = [k[0] for k in keys]
    label = {k: k[0] if suts.count(k[0]) == 1 else f"{k[0]} ({k[1]}, {k[2]})" for k in keys}
    out = Comparison(systems=[label[k] for k in keys])
    paths: dict[str, str] = {}
    for sut, cluster, run, r in found:
        case = str(r.case_id or "?")
        metrics = r.metrics or {}
        probe = metrics.get("quota_probe")
        # a SKIP records none: another system's result may; a functional case's path is its probe's
        path = metrics.get("path") or (probe.get("path") if isinstance(probe, dict) else None)
        if path or case not in paths:
            paths[case] = str(path or "-")
        out.cells.setdefault(case, {})[label[(sut, cluster, run)]] = _cell(r)
    out.cases = sorted(paths.items(), key=lambda kv: run_store.natural_key(kv[0]))
    return out


def compare_runs(root: Path, run_ids: Sequence[str]) -> Comparison:
    """:func:`compare_results` of stored runs (each a run id or ``last``). ``ValueError`` names an unknown run."""
    loaded = []
    for run_id in run_ids:
        run_dir = run_store.stored_run_dir(root, run_id)
        loaded.append((run_dir.parent.name, run_store.load_results(run_dir)))
    return compare_results(loaded)


def plot(comparison: Comparison, path: Path) -> PlotResult:
    """Grouped bars: MiB held per memory path (x) and system (one bar each), the quota as a dashed line. Returns
    the :class:`PlotResult` (``path`` None and why, without matplotlib or without a memory figure)."""
    memory = [(case, p) for case, p in comparison.cases
              if any(c.held_mib is not None for c in comparison.cells.get(case, {}).values())]
    if not memory:
        return PlotResult(None, "no memory figures to plot")

    def draw(ax: Any) -> None:
        n = max(1, len(comparison.systems))
        width = 0.8 / n
        for i, system in enumerate(comparison.systems):
            heights = [(comparison.cells.get(case, {}).get(system) or Cell("", None, None, None, None, "")).held_mib
                       or 0.0 for case, _ in memory]
            ax.bar([x + i * width for x in range(len(memory))], heights, width, label=system)
        quotas = {c.quota_mib for case, _ in memory for c in comparison.cells[case].values() if c.quota_mib}
        for q in sorted(quotas):
            ax.axhline(q, linestyle="--", color="black", linewidth=1)
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(memory))])
        ax.set_xticklabels([f"{case}\n{p}" for case, p in memory], rotation=60, fontsize=7)
        ax.set_ylabel("MiB held (probe's cap: 3 x quota)")
        ax.set_title("Memory quota per allocation path (dashed: the quota)")
        ax.legend(fontsize=7)

    return draw_png(draw, path)
