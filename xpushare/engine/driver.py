"""The run driver: one run of selected cases on one or more clusters (backend, progress, interrupts, exit status),
run ids and resume, and re-judging a stored run.

A run: select cases (:mod:`~xpushare.engine.plan`) -> make each cluster's backend -> for each case the lifecycle of
:mod:`~xpushare.engine.lifecycle` -> the run's reports (:mod:`xpushare.report`). Several clusters
(``--cluster c1,c2``) run concurrently, one thread each (:mod:`~xpushare.engine.clusters`), into the same run
directory (``<run>/<cluster>/...``) and one report. Ctrl-C (or SIGTERM/SIGHUP) ends the run with status 130
(143/129), resumable with ``--resume``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from xpushare import __version__
from xpushare.backends.base import Backend
from xpushare.cases import REGISTRY, CaseDef
from xpushare.engine import dry_run, lease
from xpushare.engine.cluster_params import check_cluster_params
from xpushare.engine.clusters import Budget, cluster_names, disk_full, run_concurrently
from xpushare.engine.lifecycle import judge_case, record_not_run, run_case, utc_now
from xpushare.engine.plan import Selection, case_params, check_overrides, select
from xpushare.engine.progress import Progress, expected_line
from xpushare.evidence import events
from xpushare.inventory import schema
from xpushare.inventory.schema import ClusterSpec
from xpushare.model.errors import RunDirectoryFull, UsageError, XpushareError
from xpushare.model.exit_status import ExitStatus
from xpushare.model.overrides import parse_overrides
from xpushare.report import artifacts, build, summaries
from xpushare.report.output import plain, render
from xpushare.transport import command_log, interrupt

DEBUG_LOG = "debug.log"
"""The run directory's log of every command and library record (:mod:`xpushare.transport.command_log`)."""


def make_backend(cluster: ClusterSpec) -> Backend:
    """The backend for the cluster's mode."""
    if cluster.mode == "host":
        from xpushare.backends.host import HostBackend

        return HostBackend(cluster)
    if cluster.mode == "k8s":
        from xpushare.backends.k8s import K8sBackend

        return K8sBackend(cluster)
    raise UsageError(f"cluster {cluster.name!r}: mode {cluster.mode!r} is not available in this version")


def capabilities_of(cluster: ClusterSpec) -> frozenset[str]:
    """The capabilities :func:`make_backend` 's backend will have on ``cluster``, without making it (no host is
    contacted): what a dry run needs to tell which cases SKIP."""
    if cluster.mode == "host":
        from xpushare.backends.host import host_capabilities

        return host_capabilities(cluster)
    if cluster.mode == "k8s":
        from xpushare.backends.k8s import K8sBackend

        return K8sBackend.capabilities
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


def exit_status_for(results: Sequence[Mapping[str, Any]], interrupted: bool) -> ExitStatus:
    """128 + the signal when interrupted (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP); 1 when any case is FAIL or ERROR;
    else 0 (SKIP is not a failure)."""
    if interrupted:
        return interrupt.exit_status()
    if any(r["status"] in ("FAIL", "ERROR", "INTERRUPTED") for r in results):
        return ExitStatus.FAILED
    return ExitStatus.OK


def _run_cases(
    cases: Sequence[CaseDef],
    run_id: str,
    run_dir: Path,
    cluster: ClusterSpec,
    backend: Backend,
    selection: Selection,
    overrides: Mapping[str, Any],
    progress: Progress,
    budget: Budget,
    plans: Mapping[str, Mapping[str, Any]] | None = None,
) -> bool:
    """Run the cases in order; return True when Ctrl-C stopped the run.

    Once ``budget`` 's ``--maxfail`` is reached the remaining cases are recorded as not run (INTERRUPTED
    records, so they count against the run and ``--resume`` runs them), not left out of the reports; once the
    budget is halted (another cluster's run directory write failed) the rest is left."""
    interrupted = False
    try:
        try:
            backend.prepare_run(run_id)
        except KeyboardInterrupt:
            return True
        for number, case in enumerate(cases, 1):
            if budget.halted:
                break
            params = case_params(case, cluster, selection, overrides)
            if budget.exhausted():
                reason = (f"not run: --maxfail {budget.maxfail} reached ({budget.failures} FAIL/ERROR case(s) "
                          "before it)")
                record = record_not_run(case, run_id=run_id, run_dir=run_dir, cluster=cluster, params=params,
                                        required=case.case_id in selection.required, reason=reason)
                progress.done(f"{case.case_id} {record['status']:<11} {0.0:7.1f}s  {record['summary']}")
                continue
            planned = (plans or {}).get(case.case_id, {})
            with events.case(case.case_id), progress.case(case.case_id, case.title,
                                                          planned.get("expected_duration_s"),
                                                          position=f"{number}/{len(cases)}",
                                                          skip=planned.get("plan") == "SKIP"):
                record, interrupted = run_case(case, run_id=run_id, run_dir=run_dir, cluster=cluster,
                                               backend=backend, params=params,
                                               required=case.case_id in selection.required)
            progress.done(f"{case.case_id} {record['status']:<11} {record['duration_s']:7.1f}s  {record['summary']}")
            budget.count(record["status"])
            if interrupted:
                break
    except KeyboardInterrupt:
        interrupted = True
    finally:
        backend.close()
    return interrupted


def resolve_run_id(run_id: str | None, *, resume: bool, what: str, root: Path = Path(".")) -> str:
    """The run id to use: the given one (validated), else a new ``YYYYmmdd-HHMMSS`` id of now. With ``resume``,
    ``last`` is the latest run stored under ``root`` (:func:`xpushare.report.artifacts.resolve_run_id`).

    Raises:
        UsageError: ``resume`` without a run id, ``last`` without ``resume`` (it names a stored run, never a
        new one) or with no run stored, or a run id that cannot name a directory.
    """
    if resume and not run_id:
        raise UsageError(f"--resume needs --run-id of the {what} to continue")
    if run_id == artifacts.LAST and not resume:
        raise UsageError(f"--run-id {artifacts.LAST} names the latest stored run: use it with --resume, or a new id")
    chosen = run_id or artifacts.new_run_id(datetime.now())
    try:
        return artifacts.resolve_run_id(root, chosen)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def refuse_reuse(run_dir: Path, run_id: str, *, resume: bool) -> None:
    """A stored run is never rewritten unless asked: without ``resume``, a run id whose directory already holds
    something raises :class:`UsageError` (one line: continue it with ``--resume``, or give a new id)."""
    if resume or not run_dir.is_dir():
        return
    if any(run_dir.iterdir()):
        raise UsageError(f"run {run_id!r} is already stored in {run_dir}: continue it with --run-id {run_id} "
                         "--resume, or give a new --run-id (a stored run is never rewritten)")


def run(request: RunRequest, out: TextIO = sys.stdout) -> ExitStatus:
    """Run the selected cases on each cluster of ``request.cluster`` and write the run directory and reports.

    Several clusters run concurrently into one run directory and one report (their leases are all taken before
    anything starts); a cluster whose run raised is reported after the others finished and the report was
    written. Raises :class:`UsageError` / :class:`~xpushare.model.errors.InventoryError` for bad input (before
    anything runs), :class:`~xpushare.model.errors.LeaseHeld` when another live run holds one of the clusters
    (unless ``request.wait``), :class:`RunDirectoryFull` when the run directory fills up (every cluster stops).
    Returns the exit status over every cluster's cases (see :func:`exit_status_for`).
    """
    inventory = schema.load(request.inventory_path)
    clusters = [inventory.cluster(name) for name in cluster_names(request.cluster)]
    for cluster in clusters:
        check_cluster_params(cluster)
    selection = select(suites=request.suites, case_ids=request.case_ids, playbook=request.playbook)
    overrides = parse_overrides(request.overrides)
    check_overrides(selection.cases, overrides)
    run_id = resolve_run_id(request.run_id, resume=request.resume, what="run", root=request.root)
    run_dir = artifacts.run_dir(request.root, run_id)
    refuse_reuse(run_dir, run_id, resume=request.resume)
    todo = {c.name: list(selection.cases) for c in clusters}
    if request.resume:
        if not run_dir.exists():
            raise UsageError(f"--resume: no run {run_id!r} under {request.root}")
        latest = artifacts.latest_statuses(run_dir)
        todo = {name: [c for c in cases if latest.get((name, c.suite, c.case_id)) != "PASS"]
                for name, cases in todo.items()}
    if request.dry_run:
        plans = [dry_run.plan_run(todo[c.name], c, selection, overrides, capabilities_of(c), request.root)
                 for c in clusters]
        print(dry_run.render_all(plans, request.output), file=out)
        return ExitStatus.OK
    # --output json|yaml on a run: the progress goes to stderr, the result record alone to ``out`` (result_record)
    lines = out if request.output == "table" else sys.stderr
    with lease.held_all(clusters, run_id, wait=request.wait, out=lines):
        return _run_held(request, clusters, selection, overrides, run_id, run_dir, todo, out)


def _run_held(request: RunRequest, clusters: Sequence[ClusterSpec], selection: Selection,
              overrides: Mapping[str, Any], run_id: str, run_dir: Path, todo: Mapping[str, Sequence[CaseDef]],
              out: TextIO) -> ExitStatus:
    """The part of :func:`run` done while the run holds the clusters' leases: from the run directory on."""
    run_dir.mkdir(parents=True, exist_ok=True)
    # Every selected case, so that a report of a run that ended early still counts the ones it never reached.
    selected = [{"cluster": cluster.name, "suite": c.suite, "case_id": c.case_id, "title": c.title}
                for cluster in clusters for c in selection.cases]
    meta = {
        "run_id": run_id,
        "tool_version": __version__,
        "clusters": [c.name for c in clusters],
        "selection": selection.label,
        "required": sorted(selection.required),
        "selected": selected,
        "started": utc_now().isoformat(),
        "argv": sys.argv[1:],
        "resume": request.resume,
    }
    previous = artifacts.read_run_meta(run_dir) if request.resume else None
    if previous:
        meta["required"] = sorted(set(previous.get("required", [])) | selection.required)
        seen = {(s["cluster"], s["suite"], s["case_id"]) for s in selected}
        meta["selected"] = [s for s in previous.get("selected") or []
                            if (s.get("cluster"), s.get("suite"), s.get("case_id")) not in seen] + selected
        meta["started"] = previous.get("started", meta["started"])
        earlier = [str(name) for name in previous.get("clusters") or []]
        meta["clusters"] = earlier + [c.name for c in clusters if c.name not in earlier]
    with disk_full_stops_the_run(run_dir, run_id):
        return _run_and_report(clusters, selection, overrides, run_id, run_dir, todo, meta, out, request.maxfail,
                               request.output)


@contextmanager
def disk_full_stops_the_run(run_dir: Path, run_id: str) -> Iterator[None]:
    """Turn a full run directory (``ENOSPC``, ``EDQUOT``) into :class:`RunDirectoryFull`: one line, exit 1.

    The case that hit it has had its harvest and cleanup (the lifecycle runs them whatever happens); what was
    written before stays as written; the run can be continued with ``--resume`` once there is room.
    """
    try:
        yield
    except OSError as exc:
        if not disk_full(exc):
            raise
        where = f" writing {exc.filename}" if exc.filename else ""
        raise RunDirectoryFull(f"the run directory is full ({exc.strerror}{where}): the run stopped; what was "
                               f"written is kept in {run_dir}; free space, then continue with --run-id {run_id} "
                               "--resume") from None


def _cluster_job(cluster: ClusterSpec, cases: Sequence[CaseDef], run_id: str, run_dir: Path, selection: Selection,
                 overrides: Mapping[str, Any], progress: Progress, budget: Budget,
                 plans: Mapping[str, Mapping[str, Any]] | None = None) -> Callable[[], bool]:
    """One cluster's part of a run, as a job for the thread that runs it: make the backend, run the cases (every
    event they emit carries the cluster); True when interrupted. A full run directory halts ``budget`` (every
    other cluster stops before its next case) and is raised."""

    def job() -> bool:
        with events.cluster(cluster.name):
            try:
                return _run_cases(cases, run_id, run_dir, cluster, make_backend(cluster), selection, overrides,
                                  progress, budget, plans)
            except OSError as exc:
                if disk_full(exc):
                    budget.halt(f"the run directory is full ({cluster.name})")
                raise

    return job


def _first_line(exc: BaseException) -> str:
    return (str(exc) or type(exc).__name__).splitlines()[0]


def _run_and_report(clusters: Sequence[ClusterSpec], selection: Selection, overrides: Mapping[str, Any],
                    run_id: str, run_dir: Path, todo: Mapping[str, Sequence[CaseDef]], meta: dict[str, Any],
                    out: TextIO, maxfail: int | None = None, fmt: str = "table") -> ExitStatus:
    """The rest of :func:`run` once the run directory exists: the cases, then run.json's end and the reports.
    ``fmt`` json or yaml: the progress lines on stderr, then :func:`result_record` alone on ``out``."""
    artifacts.write_run_meta(run_dir, meta)
    result_out, out = out, (out if fmt == "table" else sys.stderr)
    progress = Progress(out)
    root = run_dir.parents[2]  # run_dir is <root>/.tmplog/<run id>/xpushare (report/artifacts.run_dir)
    plans = {c.name: dry_run.plan_run(todo[c.name], c, selection, overrides, capabilities_of(c), root)["cases"]
             for c in clusters}
    for cluster in clusters:
        progress.done(f"run {run_id} on {cluster.name} ({cluster.mode} mode): {len(todo[cluster.name])} case(s) "
                      f"-> {run_dir}; {expected_line(plans[cluster.name])}")
    budget = Budget(maxfail)
    several = len(clusters) > 1
    jobs = {c.name: _cluster_job(c, todo[c.name], run_id, run_dir, selection, overrides,
                                 Progress(out, label=c.name) if several else progress, budget,
                                 {p["case_id"]: p for p in plans[c.name]})
            for c in clusters}
    errors: dict[str, BaseException] = {}
    interrupted = False
    # A signal after the last case (while run.json's end and the reports are written) is recorded, not raised:
    # the reports are written whole, then the run ends as interrupted (128 + the signal).
    with interrupt.deferred(), command_log.debug_log(run_dir / DEBUG_LOG), events.recording(run_dir):
        for cluster in clusters:
            events.emit("run_started", run_id=run_id, cluster=cluster.name, mode=cluster.mode,
                        cases=[c.case_id for c in todo[cluster.name]], resume=bool(meta.get("resume")))
        try:
            try:
                with interrupt.installed():
                    if several:
                        outcome = run_concurrently(jobs)
                        interrupted, errors = outcome.interrupted, outcome.errors
                    else:
                        interrupted = next(iter(jobs.values()))()
            except KeyboardInterrupt:  # between the last case and the end of the block
                interrupted = True
            full = [error for error in errors.values() if disk_full(error)]
            if full:
                raise full[0]
        except XpushareError as exc:
            events.emit("error", case_id=None, cluster=clusters[0].name, step="run", message=str(exc))
            raise
        for name, error in errors.items():
            events.emit("error", case_id=None, cluster=name, step="run", message=_first_line(error))
        interrupted = interrupted or interrupt.requested()
        results = artifacts.load_results(run_dir)
        status = exit_status_for(results, interrupted)
        events.emit("run_ended", run_id=run_id, exit_status=int(status), interrupted=interrupted,
                    counts=summaries.counts(results))
        meta.update(ended=utc_now().isoformat(), interrupted=interrupted, exit_status=int(status),
                    counts=summaries.counts(results))
        artifacts.write_run_meta(run_dir, meta)
        required: list[str] = meta["required"]  # run.json keeps it a sorted list
        paths = build.build(run_dir, required=set(required))
        if interrupt.requested() and not interrupted:  # the signal came while the reports were written
            interrupted, status = True, exit_status_for(results, True)
            meta.update(interrupted=True, exit_status=int(status))
            artifacts.write_run_meta(run_dir, meta)
            paths = build.build(run_dir, required=set(required))
    counts = summaries.counts(results)
    summary = ", ".join(f"{k} {v}" for k, v in counts.items() if v)
    decision = summaries.release_decision(results, set(required), clusters=meta["clusters"], interrupted=interrupted)
    ready = "YES" if decision.ready else f"NO ({len(decision.reasons)} reason(s) in run-report.md)"
    progress.done(f"done: {summary or 'no cases'}; release_ready: {ready}; report: {paths.markdown} and "
                  f"{paths.html.name}")
    if interrupted:
        progress.done(f"interrupted: continue with --run-id {run_id} --resume")
    for name, error in errors.items():  # the first is raised below; each cluster's own is named here
        progress.done(f"{name}: stopped: {_first_line(error)}")
    if fmt != "table":
        print(render(result_record(run_id, run_dir, status, results, decision, paths.markdown), fmt), file=result_out)
    if errors:
        raise next(iter(errors.values()))
    return status


def result_record(run_id: str, run_dir: Path, status: ExitStatus, results: Sequence[Mapping[str, Any]],
                  decision: summaries.ReleaseDecision, report: Path) -> dict[str, Any]:
    """What ``--output json|yaml`` prints after a run: ``{"run_id", "run_dir", "exit_status", "counts",
    "release_ready", "release_reasons", "report", "cases": [{"cluster", "suite", "case_id", "status", "summary",
    "duration_s"}]}`` (paths as text, durations in seconds)."""
    return {
        "run_id": run_id, "run_dir": str(run_dir), "exit_status": int(status), "counts": summaries.counts(results),
        "release_ready": decision.ready, "release_reasons": list(decision.reasons), "report": str(report),
        "cases": [{key: r.get(key) for key in ("cluster", "suite", "case_id", "status", "summary", "duration_s")}
                  for r in results],
    }


def stored_result_record(run_dir: Path, paths: build.ReportPaths) -> dict[str, Any]:
    """The :func:`result_record` of a stored run as its records and run.json say now (the exit status and the
    release decision recomputed from them), plus ``"html"`` (the path of report.html): what ``invoke judge`` and
    ``invoke report`` print with ``--output json|yaml``."""
    meta = artifacts.read_run_meta(run_dir) or {}
    results = artifacts.load_results(run_dir)
    interrupted = bool(meta.get("interrupted"))
    decision = summaries.release_decision(results, set(meta.get("required") or []) or None,
                                          clusters=meta.get("clusters") or (), interrupted=interrupted)
    run_id = str(meta.get("run_id") or run_dir.parent.name)
    record = result_record(run_id, run_dir, exit_status_for(results, interrupted), results, decision, paths.markdown)
    return {**record, "html": str(paths.html)}


PLOTTED_SUITES = ("performance",)
"""Suites whose judgments draw plots (:mod:`xpushare.report.plots`) next to their evidence."""


def draw_missing_plots(run_dir: Path) -> list[str]:
    """Draw the plots a stored run lacks: each PASS/FAIL case of :data:`PLOTTED_SUITES` without a PNG in its case
    directory is judged again on its evidence with its stored thresholds (the judgment draws them; the stored
    verdict is left as it is). Nothing when matplotlib is not installed. Returns the case ids drawn for."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        return []
    drawn = []
    for record in artifacts.load_results(run_dir):
        case = REGISTRY.get(record["case_id"])
        if (case is None or case.judge is None or case.suite not in PLOTTED_SUITES
                or record["status"] not in ("PASS", "FAIL") or record.get("error")):
            continue
        case_dir = artifacts.case_dir(run_dir, record["cluster"], record["suite"], record["case_id"])
        if any(case_dir.glob("*.png")):
            continue
        judge_case(case, case_dir, dict(record.get("thresholds") or {}), record.get("mode"))
        if any(case_dir.glob("*.png")):
            drawn.append(str(record["case_id"]))
    return drawn


def rebuild_reports(run_id: str, *, root: Path = Path(".")) -> build.ReportPaths:
    """``invoke report``: draw the plots a stored run lacks (:func:`draw_missing_plots`), then rebuild its summaries
    and reports from the stored records. Raises :class:`UsageError` for an unknown run."""
    try:
        run_dir = artifacts.stored_run_dir(root, run_id)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    draw_missing_plots(run_dir)
    meta = artifacts.read_run_meta(run_dir) or {}
    return build.build(run_dir, required=set(meta.get("required") or []) or None)


def rejudge(run_id: str, overrides: Sequence[str], *, root: Path = Path("."), out: TextIO = sys.stdout,
            fmt: str = "table") -> ExitStatus:
    """Re-judge a stored run with other parameters, offline (no cluster is touched), and rebuild reports.

    Cases that ended SKIP, ERROR (harness) or INTERRUPTED keep their status: there is no evidence to judge. The
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
        that cannot be read.
    """
    try:
        run_dir = artifacts.stored_run_dir(root, run_id)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    values = parse_overrides(overrides)
    meta = artifacts.read_run_meta(run_dir) or {}
    results = artifacts.load_results(run_dir)
    check_overrides([REGISTRY[r["case_id"]] for r in results if r["case_id"] in REGISTRY], values)
    at = utc_now().isoformat()
    entry = {"at": at, "overrides": plain(values)}
    lines = out if fmt == "table" else sys.stderr
    changes: list[dict[str, Any]] = []
    for record in results:
        case = REGISTRY.get(record["case_id"])
        if case is None or case.judge is None or record["status"] in ("SKIP", "INTERRUPTED") or record.get("error"):
            continue
        case_dir = artifacts.case_dir(run_dir, record["cluster"], record["suite"], record["case_id"])
        original = artifacts.keep_original_result(case_dir)
        first = artifacts.load_one_result(run_dir, original) if original else record
        params = dict(first.get("thresholds") or record.get("thresholds") or {})
        params.update({k: v for k, v in values.items() if k in params})
        verdict = judge_case(case, case_dir, params, record.get("mode"))
        old = record["status"]
        history = [*(record.get("rejudgments") or []),
                   {**entry, "status_before": old, "status": verdict.status.value,
                    "original_status": first.get("status")}]
        record.update(
            status=verdict.status.value,
            summary=f"{artifacts.rejudgment_label(history)}: {verdict.summary}",
            thresholds=plain(params),
            metrics=plain(verdict.metrics),
            checks=plain(verdict.to_dict()["checks"]),
            evidence=sorted(set(record.get("evidence") or []) | set(verdict.evidence)),
            rejudged=at,
            rejudgments=history,
        )
        record.pop("case_log_dir", None)
        artifacts.write_result(case_dir, record)
        artifacts.write_analysis(case_dir, record)
        change = "" if old == record["status"] else f" (was {old})"
        if change:
            changes.append({"cluster": record["cluster"], "case_id": record["case_id"], "before": old,
                            "after": record["status"]})
        print(f"[xpushare] {record['case_id']} {record['status']}{change}  {verdict.summary}", file=lines)
    status = exit_status_for(artifacts.load_results(run_dir), False)
    if meta:
        meta["rejudgments"] = [*(meta.get("rejudgments") or []), {**entry, "exit_status": int(status)}]
        artifacts.write_run_meta(run_dir, meta)
    paths = build.build(run_dir, required=set(meta.get("required") or []) or None)
    if fmt != "table":
        record = {**stored_result_record(run_dir, paths), "overrides": plain(values), "changes": changes}
        print(render(record, fmt), file=out)
    return status


