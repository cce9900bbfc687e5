"""The stored runs under ``<root>/.tmplog`` (``invoke runs``) and the comparison of two of them (``invoke diff``),
from their ``run.json`` and ``result.json`` files alone.

A listing (:func:`list_runs`) never shows a run as passed: a run that died or was interrupted is INTERRUPTED, one
with fewer results than cases selected INCOMPLETE, else its overall column is its release decision (YES, NO,
n/a).

A comparison matches the cases of run A and run B by (cluster, suite, case id); when each run covers exactly one
cluster, by (suite, case id), so a run on ``c1`` compares with one on ``c2``. It reports every case whose status
differs among the cases both runs have (a case only one run selected is listed apart, as not selected by the
other, never as a change), marking a change between two runs of the same SUT build (run.json's ``sut_build``) as
a flip, and every number of the cases' ``metrics``
that differs, nested values flattened to dotted paths (``ratios.25.error``, ``steps.0.aggregate_runs_per_s``).
"""

from __future__ import annotations

import math
import os
import socket
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from xpushare.model.case_record import CaseRecord
from xpushare.report import run_store
from xpushare.report.summaries import aggregate_status, counts, decision_of_run, record_status

#: ``overall`` of a run without any case result.
NO_CASES = "NONE"
#: ``state`` of a run: still going (its process, named in run.json, is alive on this machine).
RUNNING = "RUNNING"
#: ``state`` of a run that ended without its end in run.json (killed, crashed, a full disk) or by a signal.
INTERRUPTED = "INTERRUPTED"
#: ``state`` of a run that ended with fewer results than the cases it selected.
INCOMPLETE = "INCOMPLETE"
#: ``state`` of a run that ended with a result for every case it selected.
COMPLETE = "COMPLETE"


@dataclass(frozen=True)
class RunInfo:
    """One stored run: ``counts`` per status (every key of :data:`~xpushare.report.summaries.STATUS_ORDER`
    present), ``state`` (:data:`RUNNING`, :data:`INTERRUPTED`, :data:`INCOMPLETE` or :data:`COMPLETE`, see
    :func:`run_state`), ``release`` the release decision (``YES``, ``NO``, ``n/a (...)``;
    :func:`~xpushare.report.summaries.decision_of_run`), ``overall`` what ``invoke runs`` shows: the state when the
    run is not COMPLETE, else the release decision (:data:`NO_CASES` when no case has a result), never a
    verdict; ``verdicts`` the aggregate status of its cases (FAIL > INTERMITTENT > ERROR > INTERRUPTED > PASS >
    SKIP); ``exit_status`` run.json's (None: the run never wrote its end); ``started``/``ended`` as run.json
    has them (ISO 8601) or None, ``interrupted`` from run.json, ``selection`` what the run selected as
    run.json says it (``suite=functional``, ``case=FUNC-001``) or None; ``selected`` how many (cluster, case)
    it selected (None: run.json does not say)."""

    run_id: str
    clusters: tuple[str, ...]
    suites: tuple[str, ...]
    started: str | None
    ended: str | None
    counts: dict[str, int]
    overall: str
    interrupted: bool
    selection: str | None = None
    state: str = COMPLETE
    release: str | None = None
    verdicts: str = NO_CASES
    exit_status: int | None = None
    selected: int | None = None
    damaged: str | None = None
    """Why its run.json cannot be read (the one line of :class:`~xpushare.model.errors.StoredRunDamaged`); None
    when it can, or there is none."""

    @property
    def started_cases(self) -> bool:
        """Whether any case of the run has a result (a run refused before its first case has none)."""
        return any(self.counts.values())

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def process_alive(process: Any, *, machine: str | None = None) -> bool:
    """Whether run.json's ``process`` (``{"machine", "pid"}``) is a live process of this machine (``machine``:
    this host's name, default :func:`socket.gethostname`). A process of another machine, or none recorded, is
    not known to be alive."""
    if not isinstance(process, Mapping):
        return False
    pid = process.get("pid")
    if process.get("machine") != (machine or socket.gethostname()) or not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, another user's
        return True
    return True


def run_state(meta: Mapping[str, Any], results: Sequence[CaseRecord]) -> str:
    """:data:`RUNNING` while run.json has no ``exit_status`` and its ``process`` is alive on this machine;
    :data:`INTERRUPTED` when run.json has no ``exit_status`` otherwise (the run died: killed, crashed, a full
    disk) or says ``interrupted``; :data:`INCOMPLETE` when fewer cases have a result than run.json's ``selected``
    lists; else :data:`COMPLETE`."""
    if meta.get("exit_status") is None:
        return RUNNING if process_alive(meta.get("process")) else INTERRUPTED
    if meta.get("interrupted"):
        return INTERRUPTED
    selected = {(str(s.get("cluster")), str(s.get("suite")), str(s.get("case_id")))
                for s in meta.get("selected") or [] if isinstance(s, Mapping)}
    have = {(r.cluster, r.suite, r.case_id) for r in results}
    if selected - have:
        return INCOMPLETE
    return COMPLETE


def run_info(root: Path, run_id: str) -> RunInfo:
    """The :class:`RunInfo` of a stored run (``run_id`` may be ``last``). ``ValueError``: no such run, bad id,
    or a run.json that is not a JSON object."""
    run_dir = run_store.stored_run_dir(root, run_id)
    results = run_store.load_results(run_dir)
    meta = run_store.read_run_meta(run_dir) or {}
    clusters = {r.cluster for r in results} | {str(c) for c in meta.get("clusters") or []}
    state = run_state(meta, results)
    release = decision_of_run(results, meta, interrupted=bool(meta.get("interrupted")) or state != COMPLETE).label \
        if results else None
    if not results:  # refused or killed before its first case: nothing to decide (hidden unless --all)
        overall = RUNNING if state == RUNNING else NO_CASES
    else:
        overall = state if state != COMPLETE else (release or NO_CASES)
    exit_status = meta.get("exit_status")
    selected = meta.get("selected")
    return RunInfo(
        run_id=run_dir.parent.name,
        clusters=tuple(sorted(clusters, key=run_store.natural_key)),
        suites=tuple(sorted({r.suite for r in results}, key=run_store.suite_rank)),
        started=None if meta.get("started") is None else str(meta["started"]),
        ended=None if meta.get("ended") is None else str(meta["ended"]),
        counts=counts(results),
        overall=overall,
        interrupted=bool(meta.get("interrupted")),
        selection=None if meta.get("selection") is None else str(meta["selection"]),
        state=state,
        release=release,
        verdicts=aggregate_status(record_status(r) for r in results).value if results else NO_CASES,
        exit_status=exit_status if isinstance(exit_status, int) and not isinstance(exit_status, bool) else None,
        selected=len(selected) if isinstance(selected, list) else None,
    )


def list_runs(root: Path) -> list[RunInfo]:
    """Every stored run under ``root``, oldest first (:func:`~xpushare.report.run_store.stored_run_ids`), also the
    ones without any case result (:attr:`RunInfo.started_cases`: ``invoke runs`` hides those unless ``--all``).
    A run whose run.json is damaged is listed with what its results say, as :data:`INTERRUPTED` (its end cannot
    be read), and :attr:`RunInfo.damaged` says why."""
    out = []
    for run_id in run_store.stored_run_ids(root):
        try:
            out.append(run_info(root, run_id))
        except ValueError as exc:  # run.json is not an object: list the run from its results alone
            run_dir = run_store.run_dir(root, run_id)
            results = run_store.load_results(run_dir)
            verdicts = aggregate_status(record_status(r) for r in results).value if results else NO_CASES
            out.append(RunInfo(run_id, tuple(sorted({r.cluster for r in results})), (), None, None,
                               counts(results), INTERRUPTED, False, state=INTERRUPTED, verdicts=verdicts,
                               damaged=str(exc)))
    return out


# --------------------------------------------------------------------------------------------- diff


@dataclass(frozen=True)
class VerdictChange:
    """A case whose status differs: ``before`` in run A, ``after`` in run B (None: not in that run).

    ``same_build``: both runs judged the same SUT build on the case's cluster (run.json's ``sut_build`` ids
    equal): the change is a **flip** of one build's verdict (an intermittent case, ``--repeat N`` measures its
    rate), not a change the build brought; False: the builds differ; None: a run did not record its build.
    ``build``: the build id when the same, else None."""

    case: str
    before: str | None
    after: str | None
    same_build: bool | None = None
    build: str | None = None

    @property
    def note(self) -> str:
        """What ``invoke diff`` prints beside the change."""
        if self.same_build:
            return f"flip: same SUT build {self.build} (intermittent? --repeat N measures it)"
        if self.same_build is False:
            return "SUT build changed"
        return ""


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


def _keyed(results: Sequence[CaseRecord], by_cluster: bool) -> dict[str, CaseRecord]:
    out = {}
    for r in results:
        key = f"{r.cluster}/{r.suite}/{r.case_id}" if by_cluster else f"{r.suite}/{r.case_id}"
        out[key] = r
    return out


def build_id(builds: Mapping[str, Any] | None, cluster: str) -> str | None:
    """The SUT build id run.json's ``sut_build`` records for ``cluster`` (None: not recorded or not read)."""
    entry = (builds or {}).get(cluster)
    value = entry.get("id") if isinstance(entry, Mapping) else None
    return str(value) if value else None


def diff_results(a: Sequence[CaseRecord], b: Sequence[CaseRecord], *, a_id: str = "A", b_id: str = "B",
                 a_builds: Mapping[str, Any] | None = None, b_builds: Mapping[str, Any] | None = None) -> RunDiff:
    """Compare two runs' case records (model/case_record.py, as :func:`~xpushare.report.run_store.load_results`
    gives them); see the module
    docstring for how cases are matched. Changes come in case order (cluster, suite order, natural case id).
    ``a_builds``/``b_builds``: each run's ``sut_build`` of run.json, which tells a flip of one SUT build from a
    change between builds (:class:`VerdictChange`)."""
    single = len({r.cluster for r in a}) == 1 and len({r.cluster for r in b}) == 1
    ka, kb = _keyed(a, not single), _keyed(b, not single)
    order = {k: run_store.result_sort_key(r) for k, r in {**kb, **ka}.items()}
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
            build_a, build_b = build_id(a_builds, ra.cluster), build_id(b_builds, rb.cluster)
            same = None if build_a is None or build_b is None else build_a == build_b
            changes.append(VerdictChange(key, before, after, same, build_a if same else None))
        else:
            unchanged += 1
        ma = dict(flat_numbers(ra.metrics if ra else None))
        mb = dict(flat_numbers(rb.metrics if rb else None))
        for metric in sorted(set(ma) | set(mb), key=run_store.natural_key):
            va, vb = ma.get(metric), mb.get(metric)
            if va == vb:
                continue
            delta = None if va is None or vb is None else vb - va
            relative = None if delta is None or not va else delta / abs(va)
            deltas.append(MetricDelta(key, metric, va, vb, delta, relative))
    return RunDiff(a_id, b_id, changes, deltas, unchanged, only_a, only_b)


def diff_runs(root: Path, run_a: str, run_b: str) -> RunDiff:
    """:func:`diff_results` of two stored runs (either may be ``last``). ``ValueError`` names an unknown run."""
    dir_a = run_store.stored_run_dir(root, run_a)
    dir_b = run_store.stored_run_dir(root, run_b)
    meta_a, meta_b = run_store.read_run_meta(dir_a) or {}, run_store.read_run_meta(dir_b) or {}
    return diff_results(run_store.load_results(dir_a), run_store.load_results(dir_b),
                        a_id=dir_a.parent.name, b_id=dir_b.parent.name, a_builds=meta_a.get("sut_build"),
                        b_builds=meta_b.get("sut_build"))
