"""The stored runs under ``<root>/.tmplog`` (``invoke runs``) and the comparison of two of them (``invoke diff``),
from their ``run.json`` and ``result.json`` files alone.

A comparison matches the cases of run A and run B by (cluster, suite, case id); when each run covers exactly one
cluster, by (suite, case id), so a run on ``c1`` compares with one on ``c2``. It reports every case whose status
differs among the cases both runs have (a case only one run selected is listed apart, as not selected by the
other, never as a change) and every number of the cases' ``metrics``
that differs, nested values flattened to dotted paths (``ratios.25.error``, ``steps.0.aggregate_runs_per_s``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from xpushare.report import artifacts
from xpushare.report.summaries import Result, aggregate_status, counts, record_status

#: ``overall`` of a run without any case result.
NO_CASES = "NONE"


@dataclass(frozen=True)
class RunInfo:
    """One stored run: ``counts`` per status (PASS FAIL SKIP ERROR INTERRUPTED, every key present), ``overall``
    the aggregate status of its cases (FAIL > ERROR > INTERRUPTED > PASS > SKIP; :data:`NO_CASES` when none),
    ``started``/``ended`` as run.json has them (ISO 8601) or None, ``interrupted`` from run.json, ``selection``
    what the run selected as run.json says it (``suite=functional``, ``cases=FUNC-001,FUNC-002``) or None."""

    run_id: str
    clusters: tuple[str, ...]
    suites: tuple[str, ...]
    started: str | None
    ended: str | None
    counts: dict[str, int]
    overall: str
    interrupted: bool
    selection: str | None = None

    @property
    def started_cases(self) -> bool:
        """Whether any case of the run has a result (a run refused before its first case has none)."""
        return any(self.counts.values())

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_info(root: Path, run_id: str) -> RunInfo:
    """The :class:`RunInfo` of a stored run (``run_id`` may be ``last``). ``ValueError``: no such run, bad id,
    or a run.json that is not a JSON object."""
    run_dir = artifacts.stored_run_dir(root, run_id)
    results = artifacts.load_results(run_dir)
    meta = artifacts.read_run_meta(run_dir) or {}
    clusters = {str(r["cluster"]) for r in results} | {str(c) for c in meta.get("clusters") or []}
    return RunInfo(
        run_id=run_dir.parent.name,
        clusters=tuple(sorted(clusters, key=artifacts.natural_key)),
        suites=tuple(sorted({str(r["suite"]) for r in results}, key=artifacts.suite_rank)),
        started=None if meta.get("started") is None else str(meta["started"]),
        ended=None if meta.get("ended") is None else str(meta["ended"]),
        counts=counts(results),
        overall=aggregate_status(record_status(r) for r in results).value if results else NO_CASES,
        interrupted=bool(meta.get("interrupted")),
        selection=None if meta.get("selection") is None else str(meta["selection"]),
    )


def list_runs(root: Path) -> list[RunInfo]:
    """Every stored run under ``root``, oldest first (:func:`~xpushare.report.artifacts.stored_run_ids`), also the
    ones without any case result (:attr:`RunInfo.started_cases`: ``invoke runs`` hides those unless ``--all``).
    A run whose run.json is damaged is listed with what its results say."""
    out = []
    for run_id in artifacts.stored_run_ids(root):
        try:
            out.append(run_info(root, run_id))
        except ValueError:  # run.json is not an object: list the run from its results alone
            run_dir = artifacts.run_dir(root, run_id)
            results = artifacts.load_results(run_dir)
            out.append(RunInfo(run_id, tuple(sorted({str(r["cluster"]) for r in results})), (), None, None,
                               counts(results), aggregate_status(record_status(r) for r in results).value
                               if results else NO_CASES, False))
    return out


# --------------------------------------------------------------------------------------------- diff


@dataclass(frozen=True)
class VerdictChange:
    """A case whose status differs: ``before`` in run A, ``after`` in run B (None: not in that run)."""

    case: str
    before: str | None
    after: str | None


@dataclass(frozen=True)
class MetricDelta:
    """A metric number that differs: ``delta`` = after - before and ``relative`` = delta / |before| when both
    are numbers (``relative`` None when before is 0); None on the side where the metric is absent."""

    case: str
    metric: str
    before: float | None
    after: float | None
    delta: float | None
    relative: float | None


@dataclass(frozen=True)
class RunDiff:
    """The comparison of run ``a`` with run ``b``: ``verdict_changes`` and ``metric_deltas`` of the cases both runs
    have, ``unchanged`` the count of those with one status; a case only one run selected is in ``only_in_a`` or
    ``only_in_b``, never a change."""

    a: str
    b: str
    verdict_changes: list[VerdictChange] = field(default_factory=list)
    metric_deltas: list[MetricDelta] = field(default_factory=list)
    unchanged: int = 0
    only_in_a: list[str] = field(default_factory=list)
    """Cases run A has and run B did not select (not verdict changes)."""
    only_in_b: list[str] = field(default_factory=list)
    """Cases run B has and run A did not select."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def flat_numbers(value: Any, prefix: str = "") -> Iterator[tuple[str, float]]:
    """``(dotted path, number)`` of every finite int/float inside ``value`` (dicts by key, lists by index);
    bools, strings and non-finite numbers are left out."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            yield from flat_numbers(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from flat_numbers(v, f"{prefix}.{i}" if prefix else str(i))
    else:
        number = _number(value)
        if number is not None and prefix:
            yield prefix, number


def _keyed(results: Sequence[Result], by_cluster: bool) -> dict[str, Result]:
    out = {}
    for r in results:
        key = f"{r['cluster']}/{r['suite']}/{r['case_id']}" if by_cluster else f"{r['suite']}/{r['case_id']}"
        out[key] = r
    return out


def diff_results(a: Sequence[Result], b: Sequence[Result], *, a_id: str = "A", b_id: str = "B") -> RunDiff:
    """Compare two runs' results (as :func:`~xpushare.report.artifacts.load_results` gives them); see the module
    docstring for how cases are matched. Changes come in case order (cluster, suite order, natural case id)."""
    single = len({r["cluster"] for r in a}) == 1 and len({r["cluster"] for r in b}) == 1
    ka, kb = _keyed(a, not single), _keyed(b, not single)
    order = {k: artifacts.result_sort_key(r) for k, r in {**kb, **ka}.items()}
    changes: list[VerdictChange] = []
    deltas: list[MetricDelta] = []
    unchanged = 0
    only_a: list[str] = []
    only_b: list[str] = []
    for key in sorted(order, key=lambda k: order[k]):
        ra, rb = ka.get(key), kb.get(key)
        if ra is None or rb is None:
            (only_b if ra is None else only_a).append(key)
            continue
        before = None if ra is None else record_status(ra).value
        after = None if rb is None else record_status(rb).value
        if before != after:
            changes.append(VerdictChange(key, before, after))
        else:
            unchanged += 1
        ma = dict(flat_numbers(ra.get("metrics") if ra else None))
        mb = dict(flat_numbers(rb.get("metrics") if rb else None))
        for metric in sorted(set(ma) | set(mb), key=artifacts.natural_key):
            va, vb = ma.get(metric), mb.get(metric)
            if va == vb:
                continue
            delta = None if va is None or vb is None else vb - va
            relative = None if delta is None or not va else delta / abs(va)
            deltas.append(MetricDelta(key, metric, va, vb, delta, relative))
    return RunDiff(a_id, b_id, changes, deltas, unchanged, only_a, only_b)


def diff_runs(root: Path, run_a: str, run_b: str) -> RunDiff:
    """:func:`diff_results` of two stored runs (either may be ``last``). ``ValueError`` names an unknown run."""
    dir_a = artifacts.stored_run_dir(root, run_a)
    dir_b = artifacts.stored_run_dir(root, run_b)
    return diff_results(artifacts.load_results(dir_a), artifacts.load_results(dir_b),
                        a_id=dir_a.parent.name, b_id=dir_b.parent.name)
