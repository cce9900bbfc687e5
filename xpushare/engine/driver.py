"""The run driver: one run of selected cases on one or more clusters (backend, progress, interrupts, exit status),
run ids and resume, and re-judging a stored run.

A run: select cases (:mod:`~xpushare.engine.plan`) -> make each cluster's backend -> for each case the lifecycle of
:mod:`~xpushare.engine.lifecycle` -> the run's reports (:mod:`xpushare.report`). Several clusters (``--cluster c1,c2``)
run concurrently, one thread each (:mod:`~xpushare.engine.clusters`), into the same run directory
(``<run>/<cluster>/...``) and one report. Ctrl-C (or SIGTERM/SIGHUP) ends the run with status 130 (143/129),
resumable with ``--resume``.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console

from xpushare import __version__
from xpushare.backends.base import Backend
from xpushare.cases import REGISTRY, CaseDef
from xpushare.engine.clusters import Outcome, cluster_names, run_concurrently
from xpushare.engine.lifecycle import jsonable, judge_case, run_case, utc_now
from xpushare.engine.plan import Selection, case_params, check_overrides, select
from xpushare.inventory import schema
from xpushare.inventory.schema import ClusterSpec
from xpushare.model.errors import UsageError
from xpushare.model.exit_status import ExitStatus
from xpushare.model.overrides import parse_overrides
from xpushare.report import artifacts, build, summaries
from xpushare.transport import interrupt


def make_backend(cluster: ClusterSpec) -> Backend:
    """The backend for the cluster's mode."""
    if cluster.mode == "host":
        from xpushare.backends.host import HostBackend

        return HostBackend(cluster)
    if cluster.mode == "k8s":
        from xpushare.backends.k8s import K8sBackend

        return K8sBackend(cluster)
    raise UsageError(f"cluster {cluster.name!r}: mode {cluster.mode!r} is not available in this version")


class Progress:
    """Live progress: a rich spinner on a terminal, plain lines otherwise (CI, pipes). ``label`` (a cluster name)
    prefixes every line and turns the spinner off: several clusters print lines concurrently."""

    _lock = threading.Lock()  # one whole line at a time from the clusters' threads

    def __init__(self, out: TextIO, label: str | None = None) -> None:
        self.console = Console(file=out)
        self.live = self.console.is_terminal and label is None
        self.prefix = f"{label}: " if label else ""
        self._status: Any = None

    def _line(self, text: str) -> None:
        with self._lock:
            self.console.file.write(f"[xpushare] {self.prefix}{text}\n")
            self.console.file.flush()

    def start(self, text: str) -> None:
        if self.live:
            self._status = self.console.status(text)
            self._status.start()
        else:
            self._line(text)

    def done(self, line: str) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None
        self._line(line)


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
) -> bool:
    """Run the cases in order; return True when Ctrl-C stopped the run."""
    interrupted = False
    try:
        try:
            backend.prepare_run(run_id)
        except KeyboardInterrupt:
            return True
        for case in cases:
            params = case_params(case, cluster, selection, overrides)
            progress.start(f"{case.case_id} {case.title} ...")
            record, interrupted = run_case(
                case,
                run_id=run_id,
                run_dir=run_dir,
                cluster=cluster,
                backend=backend,
                params=params,
                required=case.case_id in selection.required,
            )
            progress.done(f"{case.case_id} {record['status']:<11} {record['duration_s']:7.1f}s  {record['summary']}")
            if interrupted:
                break
    except KeyboardInterrupt:
        interrupted = True
    finally:
        backend.close()
    return interrupted


def resolve_run_id(run_id: str | None, *, resume: bool, what: str) -> str:
    """The run id to use: the given one (validated), else a new ``YYYYmmdd-HHMMSS`` id of now.

    Raises:
        UsageError: ``resume`` without a run id, or a run id that cannot name a directory.
    """
    if resume and not run_id:
        raise UsageError(f"--resume needs --run-id of the {what} to continue")
    chosen = run_id or artifacts.new_run_id(datetime.now())
    try:
        artifacts.validate_run_id(chosen)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return chosen


def run(request: RunRequest, out: TextIO = sys.stdout) -> ExitStatus:
    """Run the selected cases on each cluster of ``request.cluster`` and write the run directory and reports.

    Several clusters run concurrently into one run directory and one report; a cluster whose run raised is
    reported after the others finished and the report was written. Raises :class:`UsageError` /
    :class:`~xpushare.model.errors.InventoryError` for bad input (before anything runs). Returns the exit status
    over every cluster's cases (see :func:`exit_status_for`).
    """
    inventory = schema.load(request.inventory_path)
    clusters = [inventory.cluster(name) for name in cluster_names(request.cluster)]
    selection = select(suites=request.suites, case_ids=request.case_ids, playbook=request.playbook)
    overrides = parse_overrides(request.overrides)
    check_overrides(selection.cases, overrides)
    run_id = resolve_run_id(request.run_id, resume=request.resume, what="run")
    run_dir = artifacts.run_dir(request.root, run_id)
    todo = {c.name: list(selection.cases) for c in clusters}
    if request.resume:
        if not run_dir.exists():
            raise UsageError(f"--resume: no run {run_id!r} under {request.root}")
        latest = artifacts.latest_statuses(run_dir)
        todo = {name: [c for c in cases if latest.get((name, c.suite, c.case_id)) != "PASS"]
                for name, cases in todo.items()}
    run_dir.mkdir(parents=True, exist_ok=True)
    meta = {
        "run_id": run_id,
        "tool_version": __version__,
        "clusters": [c.name for c in clusters],
        "selection": selection.label,
        "required": sorted(selection.required),
        "started": utc_now().isoformat(),
        "argv": sys.argv[1:],
        "resume": request.resume,
    }
    previous = artifacts.read_run_meta(run_dir) if request.resume else None
    if previous:
        meta["required"] = sorted(set(previous.get("required", [])) | selection.required)
        meta["started"] = previous.get("started", meta["started"])
        earlier = [str(name) for name in previous.get("clusters") or []]
        meta["clusters"] = sorted(set(earlier) | {c.name for c in clusters}, key=artifacts.natural_key)
    artifacts.write_run_meta(run_dir, meta)
    progress = Progress(out)
    for cluster in clusters:
        progress.done(f"run {run_id} on {cluster.name} ({cluster.mode} mode): {len(todo[cluster.name])} case(s) "
                      f"-> {run_dir}")

    def job(cluster: ClusterSpec, shown: Progress) -> Callable[[], bool]:
        def body() -> bool:
            return _run_cases(todo[cluster.name], run_id, run_dir, cluster, make_backend(cluster), selection,
                              overrides, shown)

        return body

    with interrupt.installed():
        if len(clusters) == 1:
            outcome = Outcome(interrupted=job(clusters[0], progress)())
        else:
            outcome = run_concurrently({c.name: job(c, Progress(out, label=c.name)) for c in clusters})
    interrupted = outcome.interrupted
    results = artifacts.load_results(run_dir)
    status = exit_status_for(results, interrupted)
    meta.update(
        ended=utc_now().isoformat(), interrupted=interrupted, exit_status=int(status), counts=summaries.counts(results)
    )
    artifacts.write_run_meta(run_dir, meta)
    required: list[str] = meta["required"]  # type: ignore[assignment]  # run.json keeps it a sorted list
    paths = build.build(run_dir, required=set(required))
    counts = summaries.counts(results)
    summary = ", ".join(f"{k} {v}" for k, v in counts.items() if v)
    progress.done(f"done: {summary or 'no cases'}; report: {paths.markdown}")
    if interrupted:
        progress.done(f"interrupted: continue with --run-id {run_id} --resume")
    if len(clusters) > 1:  # the first error is raised below; each cluster's own is named here
        for name, exc in outcome.errors.items():
            progress.done(f"{name}: stopped: {(str(exc) or type(exc).__name__).splitlines()[0]}")
    if outcome.errors:
        raise next(iter(outcome.errors.values()))
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


