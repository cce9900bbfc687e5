"""The soak's own report: ``soak/soak-report.md`` with trend plots (matplotlib, when importable).

Plots (PNG, under ``soak/``; ``invoke report`` embeds every PNG of a case into ``run-report.md``):

* ``rss.png``      scheduler VmRSS (MiB) per node/pid over the soak's hours (minutes when under 2 h), with the
  fitted trend lines;
* ``fd.png``       scheduler open file descriptors;
* ``gpu_memory.png`` ``gpu_memory_used_bytes`` summed per node (GiB);
* ``round_runtimes.png`` per round: mean and max pod runtime (s), failed pods marked.

STAB-004 (a ``plan.json`` with ``memory_probe_suffix``) adds a table of its memory probe's figures per quota
phase (:func:`xpushare.judge.quota_probe.soak_phase_checks`): quota, accepted and refused bytes, held, usable.

Without matplotlib (it is in the ``plots`` and ``dev`` extras) the report says so and lists the numbers.
Everything is read back from the series files, so the orchestrator's memory does not grow with the soak.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from xpushare.engine.progress import duration
from xpushare.evidence.store import Evidence
from xpushare.judge.quota_probe import soak_phase_checks
from xpushare.judge.stability import check_trend, load_soak, process_series
from xpushare.model.atomic_file import atomic_write_bytes
from xpushare.report.run_store import atomic_write_text, format_value

__all__ = ["write_report"]


def _plt() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def _axis(ts: Sequence[float], t0: float, div: float) -> list[float]:
    return [(t - t0) / div for t in ts]


def _plot_series(plt: Any, path: Path, title: str, ylabel: str, series: Mapping[str, tuple[list[float], list[float]]],
                 t0: float, scale: float, x: tuple[float, str], fits: Mapping[str, Mapping[str, Any]] | None = None
                 ) -> None:
    """One line per series (x: seconds since ``t0`` / ``x[0]``, labelled ``x[1]``), with dashed trend lines."""
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for label, (ts, vs) in sorted(series.items()):
        line = ax.plot(_axis(ts, t0, x[0]), [v / scale for v in vs], marker=".", markersize=3, linewidth=0.8,
                       label=label)[0]
        f = (fits or {}).get(label)
        if f and f.get("judged") and ts and f.get("t_start") is not None:
            start = float(f["t_start"])
            xs = [start, ts[-1]]
            ys = [f["intercept"] + f["slope"] * (x - start) for x in xs]
            ax.plot(_axis(xs, t0, x[0]), [y / scale for y in ys], linestyle="--", color=line.get_color(), linewidth=1)
    ax.set_title(title)
    ax.set_xlabel(x[1])
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    if series:
        ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    atomic_write_bytes(path, lambda fh: fig.savefig(fh, format="png", dpi=100))
    plt.close(fig)


def write_report(case_dir: Path, params: Mapping[str, Any], *, title: str, plots: bool = True) -> Path:
    """Write ``soak/soak-report.md`` (and the plots) from the stored series; return its path."""
    case_dir = Path(case_dir)
    soak = case_dir / "soak"
    ev = Evidence.load(case_dir)
    data = load_soak(ev)
    ck = data.checkpoint
    lines = [f"# Soak report: {title}", ""]
    lines += [
        f"- active time {duration(float(ck.get('active_s') or 0))}"
        f"{'' if ck.get('target_s') is None else ' of ' + duration(float(ck['target_s']))} "
        f"in {len(ck.get('segments') or [])} segment(s); "
        f"rounds {ck.get('rounds', 0)}; sampling ticks {ck.get('samples', 0)}",
        f"- gaps {ck.get('gaps', 0)}, anomalies {ck.get('anomalies', 0)}, failed-pod logs kept "
        f"{ck.get('failed_logs', 0)}",
        "",
    ]
    times = [float(r["ts"]) for r in data.samples if r.get("ts")]
    t0 = min(times) if times else 0.0
    short = bool(times) and max(times) - t0 < 7200
    x = (60.0, "minutes since the soak started") if short else (3600.0, "hours since the soak started")
    common: dict[str, Any] = {
        "alpha": float(params.get("trend_alpha", 0.01)), "min_samples": int(params.get("trend_min_samples", 5)),
        "warmup": float(params.get("trend_warmup_fraction", 0.1)),
        "prefer_phase": None if params.get("trend_samples") == "all" else "idle"}
    fits = {}
    for value, noise_key, max_key in (("rss_bytes", "leak_rss_noise_bytes", "leak_rss_max_growth_bytes"),
                                      ("fd_count", "leak_fd_noise", "leak_fd_max_growth")):
        c = check_trend(value, data.samples, value, max_growth=float(params.get(max_key, math.inf)),
                        noise=float(params.get(noise_key, 0)), **common)
        fits[value] = c.values.get("series", {})
    lines += ["## Scheduler trends", "", "| series | process | points | first | last | slope / h | trend growth | p |",
              "|---|---|---|---|---|---|---|---|"]
    for value, fitted in fits.items():
        for label, f in sorted(fitted.items()):
            if not f.get("judged"):
                lines.append(f"| {value} | {label} | {f.get('points')} | - | - | - | - | - |")
                continue
            first, last, per_hour, growth = (format_value(f[k], value) for k in ("first", "last", "per_hour", "growth"))
            lines.append(f"| {value} | {label} | {f['n']} | {first} | {last} | {per_hour} | {growth} | "
                         f"{f['p_value']:.3g} |")
    rounds = [r for r in data.rounds if r.get("status") in ("completed", "timeout")]
    lines += ["", "## Rounds", "", f"{len(rounds)} round(s) judged; other: "
              f"{sum(1 for r in data.rounds if r not in rounds)}", ""]
    if rounds:
        lines += ["| round | status | pods | succeeded | failed | not terminal | mean runtime s | max runtime s |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in rounds[-50:]:
            rt = list((r.get("runtimes_s") or {}).values())
            lines.append(
                f"| {r['round']} | {r['status']} | {r['pods']} | {(r.get('phases') or {}).get('Succeeded', 0)} | "
                f"{len(r.get('failed') or [])} | {len(r.get('not_terminal') or [])} | "
                f"{(sum(rt) / len(rt)) if rt else float('nan'):.1f} | {max(rt) if rt else float('nan'):.1f} |")
        if len(rounds) > 50:
            lines.append(f"\n(last 50 of {len(rounds)} rounds; all in rounds.jsonl)")
    lines += _probe_lines(ev, case_dir, params)
    gaps = [e for e in data.events if e.get("kind") == "gap"]
    anomalies = [e for e in data.events if e.get("kind") == "anomaly"]
    lines += ["", "## Gaps", ""]
    lines += [f"- {g.get('op')}: {float(g.get('duration_s') or 0):.1f}s ({g.get('how')}): {g.get('error', '')[:160]}"
              for g in gaps[:100]] or ["none"]
    lines += ["", "## Hosts missing", ""]
    lines += _missing_lines(data.events)
    lines += ["", "## Anomalies", ""]
    lines += [f"- at {float(a.get('elapsed_s') or 0):.0f}s: {a.get('what')}" for a in anomalies[:100]] or ["none"]
    lines += ["", "## Plots", ""]
    plt = _plt() if plots else None
    if plt is None:
        lines.append("Plots not drawn: " + ("matplotlib is not installed (pip install '.[plots]')." if plots
                                             else "disabled (soak_plots=false)."))
    else:
        drawn = _draw(plt, soak, data, t0, fits, x)
        lines += [f"![{p.stem}]({p.name})" for p in drawn]
    path = soak / "soak-report.md"
    atomic_write_text(path, "\n".join(lines) + "\n")
    return path


def _missing_lines(events: Sequence[Mapping[str, Any]]) -> list[str]:
    """Per node whose host dropped out (``host_unreachable``), for how long in all (the ``host_back`` events'
    ``missing_s``), how often, why, and whether it was still missing when the soak ended."""
    nodes: dict[str, dict[str, Any]] = {}
    for e in events:
        if e.get("kind") == "host_unreachable":
            n = nodes.setdefault(str(e.get("node")), {"times": 0, "missing_s": 0.0, "why": set(), "open": True})
            n["times"] += 1
            n["why"].add(str(e.get("why")))
            n["open"] = True
        elif e.get("kind") == "host_back" and str(e.get("node")) in nodes:
            n = nodes[str(e.get("node"))]
            n["missing_s"] += float(e.get("missing_s") or 0)
            n["open"] = str(e.get("how", "")).startswith("still missing")
    if not nodes:
        return ["none: every node answered throughout"]
    out = ["| node | missing for | times | why | at the end |", "|---|---|---|---|---|"]
    for node, n in sorted(nodes.items()):
        out.append(f"| {node} | {n['missing_s']:.0f} s | {n['times']} | {', '.join(sorted(n['why']))} | "
                   f"{'still missing' if n['open'] else 'answering'} |")
    return out


def _mib(value: Any) -> str:
    return f"{float(value) / 2**20:.0f}" if isinstance(value, (int, float)) else "-"


def _probe_lines(ev: Evidence, case_dir: Path, params: Mapping[str, Any]) -> list[str]:
    """The memory probe's table (STAB-004), or nothing for a soak without the probe."""
    try:
        plan = json.loads((case_dir / "plan.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    if not isinstance(plan, dict) or not plan.get("memory_probe_suffix"):
        return []
    _checks, phases = soak_phase_checks(ev, params, plan)
    lines = ["", "## Memory probe per quota phase", "",
             "| phase | pod | direction | quota MiB | accepted MiB | refused MiB | error | held | usable |",
             "|---|---|---|---|---|---|---|---|---|"]
    for label, p in list(phases.items())[-200:]:
        if not p.get("measured"):
            why = "not measured" + ("" if p.get("expected") else f" (window {p.get('window_s')} s)")
            lines.append(f"| {label} | {p['pod']} | {p['direction']} | {_mib(p['quota_bytes'])} | {why} "
                         "| - | - | - | - |")
            continue
        lines.append(f"| {label} | {p['pod']} | {p['direction']} | {_mib(p['quota_bytes'])} | "
                     f"{_mib(p['accepted_bytes'])} | {_mib(p['refused_bytes'])} | {p['error']} | {p['held']} | "
                     f"{p['usable']} |")
    return lines or []


def _draw(plt: Any, soak: Path, data: Any, t0: float, fits: Mapping[str, Any], x: tuple[float, str]) -> list[Path]:
    drawn = []
    for value, name, label, scale in (("rss_bytes", "rss.png", "VmRSS (MiB)", 2**20),
                                      ("fd_count", "fd.png", "open file descriptors", 1)):
        procs = process_series(data.samples, value, min_samples=10**9, prefer_phase=None)
        series = {f"{n}/pid{p}": (ts, vs) for (n, p), (ts, vs, _) in procs.items()}
        if series:
            _plot_series(plt, soak / name, f"scheduler {label}", label, series, t0, scale, x, fits.get(value))
            drawn.append(soak / name)
    gpu: dict[str, tuple[list[float], list[float]]] = {}
    for r in data.metrics:
        if r.get("ok") == "1" and r.get("gpu_used_bytes"):
            ts, vs = gpu.setdefault(r.get("node", ""), ([], []))
            ts.append(float(r["ts"]))
            vs.append(float(r["gpu_used_bytes"]))
    if gpu:
        _plot_series(plt, soak / "gpu_memory.png", "GPU memory used per node (metrics)", "GiB", gpu, t0, 2**30, x)
        drawn.append(soak / "gpu_memory.png")
    rounds = [r for r in data.rounds if r.get("status") in ("completed", "timeout") and r.get("runtimes_s")]
    if rounds:
        fig, ax = plt.subplots(figsize=(9, 4.5))
        xs = [r["round"] for r in rounds]
        means = [sum(r["runtimes_s"].values()) / len(r["runtimes_s"]) for r in rounds]
        maxes = [max(r["runtimes_s"].values()) for r in rounds]
        ax.plot(xs, means, marker="o", markersize=3, label="mean pod runtime")
        ax.plot(xs, maxes, marker="^", markersize=3, linestyle=":", label="max pod runtime")
        bad = [(r["round"], max(r["runtimes_s"].values())) for r in rounds if r.get("failed") or r.get("not_terminal")]
        if bad:
            ax.scatter([b[0] for b in bad], [b[1] for b in bad], color="red", zorder=3, label="round with failures")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.set_title("per-round pod runtimes")
        ax.set_xlabel("round")
        ax.set_ylabel("seconds")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        atomic_write_bytes(soak / "round_runtimes.png", lambda fh: fig.savefig(fh, format="png", dpi=100))
        plt.close(fig)
        drawn.append(soak / "round_runtimes.png")
    return drawn
