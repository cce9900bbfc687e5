"""The suites' run (``invoke func``, ``combo``, ...), the backend of a cluster, and the stored run's re-judgment and
reports.

:func:`run`: select cases (:mod:`~xpushare.engine.plan`) -> a :class:`~xpushare.engine.run.Run` with
:class:`SuiteHooks` (leases, run directory, run.json, each cluster's cases through the lifecycle of
:mod:`~xpushare.engine.lifecycle`, signals, reports). Several clusters (``--cluster c1,c2``) run concurrently, one
thread each (:mod:`~xpushare.engine.clusters`), into the same run directory (``<run>/<cluster>/...``) and one report.
Ctrl-C (or SIGTERM/SIGHUP) ends the run with status 130 (143/129), resumable with ``--resume``.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from xpushare.backends.base import Backend
from xpushare.cases import REGISTRY, CaseDef
from xpushare.engine import dry_run, release, sut_build
from xpushare.engine.cluster_params import check_cluster_params
from xpushare.engine.clusters import cluster_names
from xpushare.engine.lifecycle import judge_case, store, utc_now
from xpushare.engine.plan import Selection, case_params, check_overrides, select
from xpushare.engine.progress import expected_line
from xpushare.engine.run import Reuse, Run, RunHooks, RunOutcome, RunSelection, exit_status_for, first_line, write_meta
from xpushare.inventory import schema
from xpushare.inventory.schema import MODE_HOST, MODE_K8S, ClusterSpec
from xpushare.model import atomic_file
from xpushare.model.case_record import CaseRecord
from xpushare.model.errors import UsageError
from xpushare.model.exit_status import ExitStatus
from xpushare.model.overrides import parse_overrides
from xpushare.report import artifacts, build, run_lock, summaries
from xpushare.report.output import plain, render


def make_backend(cluster: ClusterSpec) -> Backend:
    """The backend for the cluster's mode."""
    if cluster.mode == MODE_HOST:
        from xpushare.backends.host import HostBackend

        return HostBackend(cluster)
    if cluster.mode == MODE_K8S:
        from xpushare.backends.k8s import K8sBackend

        return K8sBackend(cluster)
    raise UsageError(f"cluster {cluster.name!r}: mode {cluster.mode!r} is not available in this version")


def capabilities_of(cluster: ClusterSpec) -> frozenset[str]:
    """The capabilities :func:`make_backend` 's backend will have on ``cluster``, without making it (no host is
    contacted): what a dry run needs to tell which cases SKIP."""
    if cluster.mode == MODE_HOST:
        from xpushare.backends.host import host_capabilities

        return host_capabilities(cluster)
    if cluster.mode == MODE_K8S:
        from xpushare.backends.k8s import k8s_capabilities

        return k8s_capabilities(cluster)
    raise UsageError(f"cluster {cluster.name!r}: mode {cluster.mode!r} is not available in this version")


@dataclass
class RunRequest:
    """Everything a ``func``/``combo``/... task asks of the engine. ``cluster``: one inventory cluster name or a
    comma list (``c1,c2``) of clusters to run concurrently."""

    cluster: str
    suites: Sequence[str] = ()
    case_ids: Sequence[str] = ()
    playbook: str | None = None
    run_id: str | None = None
    resume: bool = False
    overrides: Sequence[str] = ()
    inventory_path: str | None = None
    root: Path = Path(".")
    wait: bool = False
    """Wait for another run's lease on the cluster instead of stopping (:mod:`xpushare.engine.lease`)."""
    dry_run: bool = False
    """Print the plan (:mod:`~xpushare.engine.dry_run`) instead of running: no host is contacted, nothing stored."""
    output: str = "table"
    """The dry run's format: table | json | yaml (:mod:`xpushare.report.output`)."""
    maxfail: int | None = None
    """Stop after this many FAIL/ERROR cases, counted across all clusters of the run (None: run every case); the
    rest are recorded as not run."""
    repeat: int = 1
    """``--repeat N``: each selected case runs N times and its record says k of N; attempts that disagree make it
    INTERMITTENT (:mod:`xpushare.engine.repeat`). Below 1 is a :class:`UsageError`."""


def run(request: RunRequest, out: TextIO = sys.stdout) -> ExitStatus:
    """Run the selected cases on each cluster of ``request.cluster`` and write the run directory and reports.

    A :class:`~xpushare.engine.run.Run` with :class:`SuiteHooks`. Several clusters run concurrently into one run
    directory and one report (their leases are all taken before anything starts); a cluster whose run raised is
    reported after the others finished and the report was written. Raises :class:`UsageError` /
    :class:`~xpushare.model.errors.InventoryError` for bad input (before anything runs),
    :class:`~xpushare.model.errors.LeaseHeld` when another live run holds one of the clusters (unless
    ``request.wait``), :class:`~xpushare.model.errors.RunDirectoryFull` when the run directory fills up (every
    cluster stops). Returns the exit status over every cluster's cases (see :func:`exit_status_for`).
    """
    if isinstance(request.repeat, bool) or not isinstance(request.repeat, int) or request.repeat < 1:
        raise UsageError(f"--repeat {request.repeat!r}: expected a whole number of 1 or more (each case's runs)")
    inventory = schema.load(request.inventory_path)
    clusters = [inventory.cluster(name) for name in cluster_names(request.cluster)]
    for cluster in clusters:
        check_cluster_params(cluster)
    selection = select(suites=request.suites, case_ids=request.case_ids, playbook=request.playbook)
    overrides = parse_overrides(request.overrides)
    check_overrides(selection.cases, overrides)
    # --output json|yaml on a run: the progress goes to stderr, the result record alone to ``out`` (result_record)
    lines = out if request.output == "table" else sys.stderr
    the_run = Run(root=request.root, clusters=clusters, run_id=request.run_id,
                  reuse=Reuse.RESUME if request.resume else Reuse.REFUSE, wait=request.wait, out=lines,
                  maxfail=request.maxfail)
    todo = {c.name: list(selection.cases) for c in clusters}
    if request.resume:
        latest = artifacts.latest_statuses(the_run.dir)
        todo = {name: [c for c in cases if latest.get((name, c.suite, c.case_id)) != "PASS"]
                for name, cases in todo.items()}
    if request.dry_run:
        plans = [dry_run.plan_run(todo[c.name], c, selection, overrides, capabilities_of(c), request.root)
                 for c in clusters]
        print(dry_run.render_all(plans, request.output), file=out)
        return ExitStatus.OK

    def params(case: CaseDef, cluster: ClusterSpec) -> dict[str, Any]:
        return case_params(case, cluster, selection, overrides)

    label = selection.label + (f" repeat={request.repeat}" if request.repeat > 1 else "")
    chosen = RunSelection(label=label, cases=selection.cases, required=frozenset(selection.required),
                          todo=todo, params=params, repeat=request.repeat,
                          release_profiles=release.profile_records(clusters, selection, request.playbook))
    return the_run.execute(chosen, SuiteHooks(selection, overrides, request.output, out))


class SuiteHooks(RunHooks):
    """The suites' run (``invoke func``, ``combo``, ...): each cluster's opening line with the expected time
    (:mod:`~xpushare.engine.dry_run`), a progress line per running case and its verdict line, the ``done:`` line,
    and with ``--output json|yaml`` the :func:`result_record` alone on ``result_out``."""

    def __init__(self, selection: Selection, overrides: Mapping[str, Any], fmt: str, result_out: TextIO) -> None:
        self.selection = selection
        self.overrides = overrides
        self.fmt = fmt
        self.result_out = result_out
        self.plans: dict[str, dict[str, Mapping[str, Any]]] = {}

    def backend(self, cluster: ClusterSpec) -> Backend:
        return make_backend(cluster)

    def started(self, run: Run) -> None:
        for cluster in run.clusters:
            todo = run.todo(cluster)
            plan = dry_run.plan_run(todo, cluster, self.selection, self.overrides, capabilities_of(cluster),
                                    run.root)["cases"]
            self.plans[cluster.name] = {p["case_id"]: p for p in plan}
            run.progress.done(f"run {run.id} on {cluster.name} ({cluster.mode} mode): {len(todo)} case(s) "
                              f"-> {run.dir}; {expected_line(plan)}")

    def prepared(self, run: Run, cluster: ClusterSpec, backend: Backend) -> None:
        # The SUT build judged (run.json's sut_build): `invoke diff` tells a flip of one build from a change
        run.meta.setdefault("sut_build", {})[cluster.name] = sut_build.fingerprint(cluster, backend)

    def case_scope(self, run: Run, cluster: ClusterSpec, case: CaseDef,
                   position: str) -> contextlib.AbstractContextManager[Any]:
        planned = self.plans.get(cluster.name, {}).get(case.case_id, {})
        return run.progress_for(cluster).case(case.case_id, planned.get("title") or case.title,
                                              planned.get("expected_duration_s"),
                                              position=position, skip=planned.get("plan") == "SKIP")

    def case_done(self, run: Run, cluster: ClusterSpec, case: CaseDef, record: CaseRecord) -> None:
        run.progress_for(cluster).done(f"{case.case_id} {record.status:<11} {record.duration_s or 0.0:7.1f}s  "
                                       f"{record.summary}")

    def finished(self, run: Run, outcome: RunOutcome) -> None:
        results, interrupted = outcome.results, outcome.interrupted
        counts = summaries.counts(results)
        summary = ", ".join(f"{k} {v}" for k, v in counts.items() if v)
        decision = summaries.decision_of_run(results, run.meta, interrupted=interrupted)
        ready = decision.label
        if decision.answer == summaries.NO:
            ready += f" ({len(decision.reasons)} reason(s) in run-report.md)"
        profiles = ", ".join(f"{name}={info.get('profile')}" for name, info in
                             (run.meta.get("release_profiles") or {}).items())
        decided = f" (profile {profiles})" if profiles else ""
        run.progress.done(f"done: {summary or 'no cases'}; release_ready: {ready}{decided}; report: "
                          f"{outcome.paths.markdown} and {outcome.paths.html.name}")
        if interrupted:
            by = summaries.interrupted_by(run.meta)
            run.progress.done(f"interrupted{f' ({by})' if by else ''}: continue with --run-id {run.id} --resume")
        for name, error in outcome.errors.items():  # the first is raised by the run; each cluster's own is here
            run.progress.done(f"{name}: stopped: {first_line(error)}")
        if self.fmt != "table":
            print(render(result_record(run.id, run.dir, outcome.status, results, decision, outcome.paths.markdown),
                         self.fmt), file=self.result_out)


def result_record(run_id: str, run_dir: Path, status: ExitStatus, results: Sequence[CaseRecord],
                  decision: summaries.ReleaseDecision, report: Path) -> dict[str, Any]:
    """What ``--output json|yaml`` prints after a run: ``{"run_id", "run_dir", "exit_status", "counts",
    "release_ready", "release_decision", "release_profiles", "release_reasons", "report", "cases": [{"cluster",
    "suite", "case_id", "status", "summary", "duration_s", ["verdicts", "pass_count"]}]}`` (paths as text,
    durations in seconds). ``release_ready`` is true only for YES; ``release_decision`` is ``YES``, ``NO`` or
    ``n/a (partial selection: N of M required cases)``; ``release_profiles`` the profile that decided each
    cluster."""
    cases = []
    for r in results:
        case: dict[str, Any] = {"cluster": r.cluster, "suite": r.suite, "case_id": r.case_id, "status": r.status,
                                "summary": r.summary, "duration_s": r.duration_s}
        if r.verdicts is not None:
            case.update(verdicts=r.verdicts, pass_count=r.pass_count)
        cases.append(case)
    return {
        "run_id": run_id, "run_dir": str(run_dir), "exit_status": int(status), "counts": summaries.counts(results),
        "release_ready": decision.ready, "release_decision": decision.label,
        "release_profiles": list(decision.profiles), "release_reasons": list(decision.reasons),
        "report": str(report), "cases": cases,
    }


def stored_result_record(run_dir: Path, paths: build.ReportPaths) -> dict[str, Any]:
    """The :func:`result_record` of a stored run as its records and run.json say now (the exit status and the
    release decision recomputed from them), plus ``"html"`` (the path of report.html): what ``invoke judge`` and
    ``invoke report`` print with ``--output json|yaml``."""
    meta = artifacts.read_run_meta(run_dir) or {}
    results = artifacts.load_results(run_dir)
    interrupted = bool(meta.get("interrupted"))
    decision = summaries.decision_of_run(results, meta)
    run_id = str(meta.get("run_id") or run_dir.parent.name)
    record = result_record(run_id, run_dir, exit_status_for(results, interrupted), results, decision, paths.markdown)
    return {**record, "html": str(paths.html)}


PLOTTED_SUITES = ("performance",)
"""Suites whose judgments draw plots (:mod:`xpushare.report.plots`) next to their evidence."""


def draw_missing_plots(run_dir: Path) -> list[str]:
    """Draw the plots a stored run lacks: each PASS/FAIL case of :data:`PLOTTED_SUITES` without a PNG in its case
    directory is judged again on its evidence with its stored parameters (the judgment draws them; the stored
    verdict is left as it is). Nothing when matplotlib is not installed. Returns the case ids drawn for."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        return []
    drawn = []
    for record in artifacts.load_results(run_dir):
        case = REGISTRY.get(record.case_id)
        if (case is None or case.judge is None or case.suite not in PLOTTED_SUITES
                or record.status not in ("PASS", "FAIL") or record.error):
            continue
        case_dir = artifacts.case_dir(run_dir, record.cluster, record.suite, record.case_id)
        if any(case_dir.glob("*.png")):
            continue
        judge_case(case, case_dir, record.replay_params, record.mode)
        if any(case_dir.glob("*.png")):
            drawn.append(record.case_id)
    return drawn


def rebuild_reports(run_id: str, *, root: Path = Path("."), force: bool = False) -> build.ReportPaths:
    """``invoke report``: draw the plots a stored run lacks (:func:`draw_missing_plots`), then rebuild its summaries
    and reports from the stored records. Raises :class:`UsageError` for an unknown run, :class:`LeaseHeld` for a
    live run (:mod:`xpushare.report.run_lock`; it writes the same files) unless ``force``."""
    try:
        run_dir = artifacts.stored_run_dir(root, run_id)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if not force:
        run_lock.refuse_live(run_dir, what="its reports are written by the run itself at its end", force_hint=True)
    draw_missing_plots(run_dir)
    meta = artifacts.read_run_meta(run_dir) or {}
    return build.build(run_dir, required=set(meta.get("required") or []) or None)


def rejudge(run_id: str, overrides: Sequence[str], *, root: Path = Path("."), out: TextIO = sys.stdout,
            fmt: str = "table") -> ExitStatus:
    """Re-judge a stored run with other parameters, offline (no cluster is touched), and rebuild reports.

    Cases that ended SKIP, ERROR (harness) or INTERRUPTED keep their status: there is no evidence to judge; a case
    run several times (``--repeat``) keeps its verdicts over its attempts. The
    run's own verdicts are never lost: the first re-judgment of a case keeps its ``result.json`` whole as
    ``result.original.json``; each re-judgment starts from those original parameters with this call's
    ``overrides`` (never from an earlier re-judgment's), is listed in the case's ``rejudgments`` (when, the
    overrides, the status before and after) and in run.json's ``rejudgments`` (when, the overrides, the exit
    status it gives), and every report says the verdicts were re-judged and with what. run.json's own
    ``exit_status`` stays the run's.

    ``fmt`` table: one line per re-judged case on ``out``. json or yaml: those lines on stderr, then one record alone
    on ``out``: :func:`stored_result_record` plus ``"overrides"`` (name -> value) and ``"changes"`` (``[{"cluster",
    "case_id", "before", "after"}]``, the cases whose status the re-judgment changed).

    Raises:
        UsageError: no such run, a bad override; :class:`~xpushare.model.errors.StoredRunDamaged` for a run.json
        that cannot be read; :class:`~xpushare.model.errors.LeaseHeld` for a live run (no ``--force``).
    """
    try:
        run_dir = artifacts.stored_run_dir(root, run_id)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    # its cases' records are still being written: a re-judgment now would race the run and lose one or the other
    run_lock.refuse_live(run_dir, what="it is not re-judged", force_hint=False)
    atomic_file.claim_tree(run_dir)  # no link planted in the stored run is written through
    values = parse_overrides(overrides)
    meta = artifacts.read_run_meta(run_dir) or {}
    results = artifacts.load_results(run_dir)
    check_overrides([REGISTRY[r.case_id] for r in results if r.case_id in REGISTRY], values)
    at = utc_now().isoformat()
    entry = {"at": at, "overrides": plain(values)}
    lines = out if fmt == "table" else sys.stderr
    changes: list[dict[str, Any]] = []
    for record in results:
        case = REGISTRY.get(record.case_id)
        if case is None or case.judge is None or record.status in ("SKIP", "INTERRUPTED") or record.error:
            continue
        if len(record.verdicts or []) > 1:  # --repeat: one verdict over several attempts' evidence, kept
            continue
        case_dir = artifacts.case_dir(run_dir, record.cluster, record.suite, record.case_id)
        original = artifacts.keep_original_result(case_dir)
        first = artifacts.load_one_result(run_dir, original) if original else record
        params = first.replay_params or record.replay_params
        params.update({k: v for k, v in values.items() if k in params})
        verdict = judge_case(case, case_dir, params, record.mode)
        old = record.status
        history = [*(record.rejudgments or []),
                   {**entry, "status_before": old, "status": verdict.status.value, "original_status": first.status}]
        record = record.replace(
            status=verdict.status.value,
            summary=f"{artifacts.rejudgment_label(history)}: {verdict.summary}",
            thresholds=plain(verdict.thresholds),
            params=plain(params),
            metrics=plain(verdict.metrics),
            checks=plain(verdict.to_dict()["checks"]),
            evidence=sorted(set(record.evidence) | set(verdict.evidence)),
            rejudged=at,
            rejudgments=history,
        )
        store(case_dir, record)
        change = "" if old == record.status else f" (was {old})"
        if change:
            changes.append({"cluster": record.cluster, "case_id": record.case_id, "before": old,
                            "after": record.status})
        print(f"[xpushare] {record.case_id} {record.status}{change}  {verdict.summary}", file=lines)
    status = exit_status_for(artifacts.load_results(run_dir), False)
    if meta:
        meta["rejudgments"] = [*(meta.get("rejudgments") or []), {**entry, "exit_status": int(status)}]
        write_meta(run_dir, meta)
    paths = build.build(run_dir, required=set(meta.get("required") or []) or None)
    if fmt != "table":
        result = {**stored_result_record(run_dir, paths), "overrides": plain(values), "changes": changes}
        print(render(result, fmt), file=out)
    return status


