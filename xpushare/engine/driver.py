"""The run driver: one run of selected cases on one cluster (backend, progress, interrupts, exit status), run ids
and resume, and re-judging a stored run.

A run: select cases (:mod:`~xpushare.engine.plan`) -> make the cluster's backend -> for each case the lifecycle of
:mod:`~xpushare.engine.lifecycle` -> the run's reports (:mod:`xpushare.report`). Ctrl-C (or SIGTERM/SIGHUP) ends the
run with status 130 (143/129), resumable with ``--resume``.
"""

from __future__ import annotations

import errno
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console

from xpushare import __version__
from xpushare.backends.base import Backend
from xpushare.cases import REGISTRY, CaseDef
from xpushare.engine import dry_run, lease
from xpushare.engine.lifecycle import jsonable, judge_case, record_not_run, run_case, utc_now
from xpushare.engine.plan import Selection, case_params, check_overrides, select
from xpushare.evidence import events
from xpushare.inventory import schema
from xpushare.inventory.schema import ClusterSpec
from xpushare.model.errors import RunDirectoryFull, UsageError, XpushareError
from xpushare.model.exit_status import ExitStatus
from xpushare.model.overrides import parse_overrides
from xpushare.report import artifacts, build, summaries
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


class Progress:
    """Live progress: a rich spinner on a terminal, plain lines otherwise (CI, pipes)."""

    def __init__(self, out: TextIO) -> None:
        self.console = Console(file=out)
        self.live = self.console.is_terminal
        self._status: Any = None

    def start(self, text: str) -> None:
        if self.live:
            self._status = self.console.status(text)
            self._status.start()
        else:
            print(f"[xpushare] {text}", file=self.console.file, flush=True)

    def done(self, line: str) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None
        print(f"[xpushare] {line}", file=self.console.file, flush=True)



@dataclass
class RunRequest:
    """Everything a ``func``/``combo``/... task asks of the engine."""

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
    """Stop after this many FAIL/ERROR cases (None: run every case); the rest are recorded as not run."""


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
    maxfail: int | None = None,
) -> bool:
    """Run the cases in order; return True when Ctrl-C stopped the run.

    After ``maxfail`` FAIL/ERROR cases the remaining ones are recorded as not run (INTERRUPTED records, so
    they count against the run and ``--resume`` runs them), not left out of the reports."""
    interrupted = False
    failures = 0
    try:
        try:
            backend.prepare_run(run_id)
        except KeyboardInterrupt:
            return True
        for case in cases:
            params = case_params(case, cluster, selection, overrides)
            if maxfail is not None and failures >= maxfail:
                reason = f"not run: --maxfail {maxfail} reached ({failures} FAIL/ERROR case(s) before it)"
                record = record_not_run(case, run_id=run_id, run_dir=run_dir, cluster=cluster, params=params,
                                        required=case.case_id in selection.required, reason=reason)
                progress.done(f"{case.case_id} {record['status']:<11} {0.0:7.1f}s  {record['summary']}")
                continue
            progress.start(f"{case.case_id} {case.title} ...")
            with events.case(case.case_id):
                record, interrupted = run_case(case, run_id=run_id, run_dir=run_dir, cluster=cluster,
                                               backend=backend, params=params,
                                               required=case.case_id in selection.required)
            progress.done(f"{case.case_id} {record['status']:<11} {record['duration_s']:7.1f}s  {record['summary']}")
            failures += record["status"] in ("FAIL", "ERROR")
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


def run(request: RunRequest, out: TextIO = sys.stdout) -> ExitStatus:
    """Run the selected cases on one cluster and write the run directory and reports.

    Raises :class:`UsageError` / :class:`~xpushare.model.errors.InventoryError` for bad input (before anything
    runs), :class:`~xpushare.model.errors.LeaseHeld` when another live run holds the cluster (unless
    ``request.wait``). Returns the exit status (see :func:`exit_status_for`).
    """
    cluster = schema.load(request.inventory_path).cluster(request.cluster)
    selection = select(suites=request.suites, case_ids=request.case_ids, playbook=request.playbook)
    overrides = parse_overrides(request.overrides)
    check_overrides(selection.cases, overrides)
    run_id = resolve_run_id(request.run_id, resume=request.resume, what="run", root=request.root)
    run_dir = artifacts.run_dir(request.root, run_id)
    cases = selection.cases
    if request.resume:
        if not run_dir.exists():
            raise UsageError(f"--resume: no run {run_id!r} under {request.root}")
        latest = artifacts.latest_statuses(run_dir)
        cases = [c for c in cases if latest.get((cluster.name, c.suite, c.case_id)) != "PASS"]
    if request.dry_run:
        planned = dry_run.plan_run(cases, cluster, selection, overrides, capabilities_of(cluster), request.root)
        print(dry_run.render(planned, request.output), file=out)
        return ExitStatus.OK
    with lease.held(cluster, run_id, wait=request.wait, out=out):
        return _run_held(request, cluster, selection, overrides, run_id, run_dir, cases, out)


def _run_held(request: RunRequest, cluster: ClusterSpec, selection: Selection, overrides: Mapping[str, Any],
              run_id: str, run_dir: Path, cases: Sequence[CaseDef], out: TextIO) -> ExitStatus:
    """The part of :func:`run` done while the run holds the cluster's lease: from the run directory on."""
    run_dir.mkdir(parents=True, exist_ok=True)
    # Every selected case, so that a report of a run that ended early still counts the ones it never reached.
    selected = [{"cluster": cluster.name, "suite": c.suite, "case_id": c.case_id, "title": c.title}
                for c in selection.cases]
    meta = {
        "run_id": run_id,
        "tool_version": __version__,
        "clusters": [cluster.name],
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
    with disk_full_stops_the_run(run_dir, run_id):
        return _run_and_report(cluster, selection, overrides, run_id, run_dir, cases, meta, out, request.maxfail)


@contextmanager
def disk_full_stops_the_run(run_dir: Path, run_id: str) -> Iterator[None]:
    """Turn a full run directory (``ENOSPC``, ``EDQUOT``) into :class:`RunDirectoryFull`: one line, exit 1.

    The case that hit it has had its harvest and cleanup (the lifecycle runs them whatever happens); what was
    written before stays as written; the run can be continued with ``--resume`` once there is room.
    """
    try:
        yield
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        where = f" writing {exc.filename}" if exc.filename else ""
        raise RunDirectoryFull(f"the run directory is full ({exc.strerror}{where}): the run stopped; what was "
                               f"written is kept in {run_dir}; free space, then continue with --run-id {run_id} "
                               "--resume") from None


def _run_and_report(cluster: ClusterSpec, selection: Selection, overrides: Mapping[str, Any],
                    run_id: str, run_dir: Path, cases: Sequence[CaseDef], meta: dict[str, Any],
                    out: TextIO, maxfail: int | None = None) -> ExitStatus:
    """The rest of :func:`run` once the run directory exists: the cases, then run.json's end and the reports."""
    artifacts.write_run_meta(run_dir, meta)
    progress = Progress(out)
    progress.done(f"run {run_id} on {cluster.name} ({cluster.mode} mode): {len(cases)} case(s) -> {run_dir}")
    with command_log.debug_log(run_dir / DEBUG_LOG), events.recording(run_dir):
        events.emit("run_started", run_id=run_id, cluster=cluster.name, mode=cluster.mode,
                    cases=[c.case_id for c in cases], resume=bool(meta.get("resume")))
        try:
            backend = make_backend(cluster)
            with interrupt.installed():
                interrupted = _run_cases(cases, run_id, run_dir, cluster, backend, selection, overrides, progress,
                                         maxfail)
        except XpushareError as exc:
            events.emit("error", case_id=None, step="run", message=str(exc))
            raise
        results = artifacts.load_results(run_dir)
        status = exit_status_for(results, interrupted)
        events.emit("run_ended", run_id=run_id, exit_status=int(status), interrupted=interrupted,
                    counts=summaries.counts(results))
    meta.update(
        ended=utc_now().isoformat(), interrupted=interrupted, exit_status=int(status), counts=summaries.counts(results)
    )
    artifacts.write_run_meta(run_dir, meta)
    required: list[str] = meta["required"]  # run.json keeps it a sorted list
    paths = build.build(run_dir, required=set(required))
    counts = summaries.counts(results)
    summary = ", ".join(f"{k} {v}" for k, v in counts.items() if v)
    progress.done(f"done: {summary or 'no cases'}; report: {paths.markdown} and {paths.html.name}")
    if interrupted:
        progress.done(f"interrupted: continue with --run-id {run_id} --resume")
    return status


def rejudge(run_id: str, overrides: Sequence[str], *, root: Path = Path("."), out: TextIO = sys.stdout) -> ExitStatus:
    """Re-judge a stored run with other parameters, offline (no cluster is touched), and rebuild reports.

    Cases that ended SKIP, ERROR (harness) or INTERRUPTED keep their status: there is no evidence to judge.
    """
    try:
        run_dir = artifacts.stored_run_dir(root, run_id)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    values = parse_overrides(overrides)
    results = artifacts.load_results(run_dir)
    check_overrides([REGISTRY[r["case_id"]] for r in results if r["case_id"] in REGISTRY], values)
    for record in results:
        case = REGISTRY.get(record["case_id"])
        if case is None or case.judge is None or record["status"] in ("SKIP", "INTERRUPTED") or record.get("error"):
            continue
        params = dict(record.get("thresholds") or {})
        params.update({k: v for k, v in values.items() if k in params})
        case_dir = artifacts.case_dir(run_dir, record["cluster"], record["suite"], record["case_id"])
        verdict = judge_case(case, case_dir, params, record.get("mode"))
        old = record["status"]
        record.update(
            status=verdict.status.value,
            summary=verdict.summary,
            thresholds=jsonable(params),
            metrics=jsonable(verdict.metrics),
            checks=jsonable(verdict.to_dict()["checks"]),
            evidence=sorted(set(record.get("evidence") or []) | set(verdict.evidence)),
            rejudged=utc_now().isoformat(),
        )
        artifacts.write_result(case_dir, record)
        artifacts.write_analysis(case_dir, record)
        change = "" if old == record["status"] else f" (was {old})"
        print(f"[xpushare] {record['case_id']} {record['status']}{change}  {record['summary']}", file=out)
    meta = artifacts.read_run_meta(run_dir) or {}
    build.build(run_dir, required=set(meta.get("required") or []) or None)
    return exit_status_for(artifacts.load_results(run_dir), False)


