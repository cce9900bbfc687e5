"""One run: its id and directory, its clusters and their leases, run.json, signals, resume and reports.

Every kind of run goes through :meth:`Run.execute` with a :class:`RunSelection` (what to run) and
:class:`RunHooks` (what that kind adds): the suites (``invoke func`` ..., :mod:`xpushare.engine.suite_run`), a soak
(``invoke soak``, :mod:`xpushare.soak.task`) and a legacy scenario (``invoke legacy.*``,
:mod:`xpushare.legacy.run`). A run:

1. takes the lease of every cluster (:mod:`xpushare.engine.lease`, docs/leases.md) and holds it for its whole life,
   so that no other run (a suite, a soak, a legacy scenario) changes a cluster it is using; ``--wait`` waits;
2. creates the run directory (``<root>/.tmplog/<run id>/xpushare``, :func:`xpushare.report.run_store.run_dir`),
   lets the hooks prepare (:meth:`RunHooks.before_cases`: a legacy scenario's setup) and writes ``run.json``
   (:meth:`Run.write_meta` through :func:`write_meta`, its one writer: times in UTC, ``tool_version`` always);
3. runs each cluster's cases through the case lifecycle (:mod:`xpushare.engine.lifecycle`), several clusters
   concurrently (:mod:`xpushare.engine.clusters`), with ``--maxfail``'s budget, the event stream
   (``events.jsonl``) and the command log (``debug.log``);
4. writes run.json's end and the reports (:mod:`xpushare.report.build`) whole even when a signal comes; Ctrl-C
   (SIGTERM, SIGHUP) ends the run with 130 (143, 129), resumable with ``--resume``.

Run ids: a new one is ``YYYYmmdd-HHMMSS`` of now; a stored run is never rewritten unless the run resumes it
(:attr:`Reuse.RESUME`) or adds to it (:attr:`Reuse.EXTEND`: legacy scenarios, one after the other under one id).
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from pathlib import Path
from typing import Any, TextIO

from xpushare import __version__
from xpushare.backends.base import Backend
from xpushare.cases import CaseDef
from xpushare.engine import lease, partial
from xpushare.engine.clusters import Budget, disk_full, run_concurrently
from xpushare.engine.lifecycle import SUT_JUDGING_SUITES, record_not_run, run_case, utc_now
from xpushare.engine.progress import Progress
from xpushare.engine.repeat import run_repeated
from xpushare.evidence import events
from xpushare.inventory.schema import ClusterSpec
from xpushare.model import atomic_file
from xpushare.model.case_record import CaseRecord
from xpushare.model.errors import HostUnreachable, RunDirectoryFull, UsageError, XpushareError
from xpushare.model.exit_status import ExitStatus, decide_exit_status
from xpushare.model.unreached import Unreached
from xpushare.model.verdict import Status
from xpushare.report import build, run_lock, run_store, summaries
from xpushare.transport import command_log, interrupt

__all__ = ["DEBUG_LOG", "Reuse", "Run", "RunHooks", "RunOutcome", "RunSelection", "disk_full_stops_the_run",
           "exit_status_for", "refuse_reuse", "resolve_run_id"]

DEBUG_LOG = "debug.log"
"""The run directory's log of every command and library record (:mod:`xpushare.transport.command_log`)."""


class Reuse(Enum):
    """What a run may do with a run id that is already stored."""

    REFUSE = "refuse"
    """A new run: a stored run id is refused (one line: continue it with ``--resume`` or give another id)."""
    RESUME = "resume"
    """``--resume``: the run id must be stored; run.json keeps what it said and adds this part."""
    EXTEND = "extend"
    """A legacy scenario: a stored run id gets this scenario beside its earlier ones (run.json accumulates)."""


def exit_status_for(results: Sequence[CaseRecord], interrupted: bool, *,
                    unreachable: bool = False) -> ExitStatus:
    """128 + the signal when interrupted (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP); 3 when a host of the run did not
    answer (``unreachable``: the cases that needed it are ERROR, the others ran); 1 when any case is FAIL,
    INTERMITTENT, ERROR or INTERRUPTED; else 0 (SKIP is not a failure). The exit status is over the cases'
    verdicts, not the release decision: 0 never says release_ready (docs/release.md)."""
    failures = {s.value for s in summaries.FAILURE_STATUSES}
    return decide_exit_status(failed=any(r.status in failures for r in results), unreachable=unreachable,
                              interrupted=interrupt.exit_status() if interrupted else None)


def resolve_run_id(run_id: str | None, *, resume: bool, what: str, root: Path = Path(".")) -> str:
    """The run id to use: the given one (validated), else a new ``YYYYmmdd-HHMMSS`` id of now. With ``resume``,
    ``last`` is the latest run stored under ``root`` (:func:`xpushare.report.run_store.resolve_run_id`).

    Raises:
        UsageError: ``resume`` without a run id, ``last`` without ``resume`` (it names a stored run, never a
        new one) or with no run stored, or a run id that cannot name a directory.
    """
    if resume and not run_id:
        raise UsageError(f"--resume needs --run-id of the {what} to continue")
    if run_id == run_store.LAST and not resume:
        raise UsageError(f"--run-id {run_store.LAST} names the latest stored run: use it with --resume, or a new id")
    chosen = run_id or run_store.new_run_id(datetime.now())
    try:
        return run_store.resolve_run_id(root, chosen)
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


@dataclass(frozen=True)
class RunSelection:
    """What a run runs. ``label``: run.json's ``selection``; ``cases``: every case selected (run.json's
    ``selected``, on each cluster); ``required``: the case ids the release decision requires; ``todo``: cluster
    name -> the cases to run now (a resumed run leaves out those that PASSed); ``params``: a case's parameters
    on a cluster (defaults < inventory < playbook < ``--set``, :func:`xpushare.engine.plan.case_params`);
    ``release_profiles``: per cluster the release profile that decides it (run.json's ``release_profiles``,
    :mod:`xpushare.engine.release`; empty: ``required`` decides); ``repeat``: how many times each case runs
    (``--repeat N``, :mod:`xpushare.engine.repeat`)."""

    label: str
    cases: Sequence[CaseDef]
    required: frozenset[str]
    todo: Mapping[str, Sequence[CaseDef]]
    params: Callable[[CaseDef, ClusterSpec], dict[str, Any]]
    release_profiles: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    repeat: int = 1

    def required_on(self, cluster: str) -> frozenset[str]:
        """The case ids a release requires on ``cluster``: its profile's, else :attr:`required`."""
        info = self.release_profiles.get(cluster)
        return frozenset(info.get("required") or ()) if info is not None else self.required


@dataclass
class RunOutcome:
    """How a run ended, for :meth:`RunHooks.finished`: the stored records of the run (``results``, as
    :func:`xpushare.report.run_store.load_results` reads them), this part's records, the exit status, whether a
    signal ended it, the reports' paths, and each cluster whose thread raised with what."""

    results: list[CaseRecord]
    records: list[CaseRecord]
    status: ExitStatus
    interrupted: bool
    paths: build.ReportPaths
    errors: dict[str, BaseException] = field(default_factory=dict)


class RunHooks:
    """What a kind of run adds to :meth:`Run.execute`. Every method but :meth:`backend` does nothing here."""

    def backend(self, cluster: ClusterSpec) -> Backend:
        """The backend that runs the cases on ``cluster``."""
        raise NotImplementedError

    def before_cases(self, run: Run) -> ExitStatus | None:
        """Called holding the leases, with the run directory made and before run.json: a status ends the run
        there (nothing more is written)."""
        return None

    def started(self, run: Run) -> None:
        """Called once run.json is written, before the first case (the run's opening lines)."""

    def prepared(self, run: Run, cluster: ClusterSpec, backend: Backend) -> None:
        """Called on ``cluster``'s thread once its backend prepared the run, before its first case."""

    def case_scope(self, run: Run, cluster: ClusterSpec, case: CaseDef,
                   position: str) -> contextlib.AbstractContextManager[Any]:
        """The context a case runs in (``position``: ``3/12``)."""
        return contextlib.nullcontext()

    def case_done(self, run: Run, cluster: ClusterSpec, case: CaseDef, record: CaseRecord) -> None:
        """Called after each case's record is stored (a case not run because of ``--maxfail`` too)."""

    def finished(self, run: Run, outcome: RunOutcome) -> None:
        """Called once run.json's end and the reports are written (the run's closing lines)."""


def write_meta(run_dir: Path, meta: Mapping[str, Any]) -> None:
    """Write ``<run_dir>/run.json`` as ``meta`` says: the one writer of it (a run's :meth:`Run.write_meta`, a
    re-judgment's ``rejudgments`` entry); ``tests/unit/test_layering.py`` keeps every other module from writing it.
    Raises ``OSError`` when it cannot be written."""
    run_store.write_run_meta(run_dir, meta)


class Run:
    """One run of ``clusters`` under ``root`` (see the module docstring).

    ``run_id``: the given id, or None for a new one (:func:`resolve_run_id`; ``what`` names the run in its
    messages). ``out``: where the run's lines go (``--output json|yaml`` passes stderr). ``maxfail``: stop after
    this many FAIL/ERROR cases over all clusters (None: run every case).

    Raises :class:`UsageError` for a bad run id, a stored one with :attr:`Reuse.REFUSE`, a missing one with
    :attr:`Reuse.RESUME`.
    """

    def __init__(self, *, root: Path, clusters: Sequence[ClusterSpec], run_id: str | None, reuse: Reuse = Reuse.REFUSE,
                 what: str = "run", wait: bool = False, out: TextIO = sys.stdout, maxfail: int | None = None) -> None:
        self.root = Path(root)
        self.clusters = list(clusters)
        self.reuse = reuse
        self.wait = wait
        self.out = out
        self.maxfail = maxfail
        self.id = resolve_run_id(run_id, resume=reuse is Reuse.RESUME, what=what, root=self.root)
        self.dir = run_store.run_dir(self.root, self.id)
        if reuse is Reuse.REFUSE:
            refuse_reuse(self.dir, self.id, resume=False)
        if reuse is Reuse.RESUME and not self.dir.exists():
            raise UsageError(f"--resume: no run {self.id!r} under {self.root}")
        self.progress = Progress(out)
        self._progress = {c.name: Progress(out, label=c.name) for c in self.clusters} if len(self.clusters) > 1 else {}
        self.meta: dict[str, Any] = {}
        self.selection: RunSelection | None = None
        self.unreached: dict[str, list[Unreached]] = {c.name: [] for c in self.clusters}
        """Cluster name -> its hosts that did not answer (docs/reliability.md §partial clusters)."""
        self.cut_off: dict[str, HostUnreachable] = {}
        """The clusters none of whose lease hosts answered (the master, or every GPU host): their cases are ERROR."""

    @property
    def resume(self) -> bool:
        return self.reuse is Reuse.RESUME

    def progress_for(self, cluster: ClusterSpec) -> Progress:
        """The progress of ``cluster``'s cases: its lines carry the cluster's name when several clusters run."""
        return self._progress.get(cluster.name, self.progress)

    def todo(self, cluster: ClusterSpec) -> list[CaseDef]:
        """The cases this run runs on ``cluster`` (empty before :meth:`execute`)."""
        return list(self.selection.todo.get(cluster.name, ())) if self.selection else []

    def write_meta(self) -> None:
        """Write ``run.json`` as :attr:`meta` says now (through :func:`write_meta`, the one writer of it)."""
        write_meta(self.dir, self.meta)

    def execute(self, selection: RunSelection, hooks: RunHooks) -> ExitStatus:
        """Run ``selection`` with ``hooks`` holding every cluster's lease; return the exit status over the run's
        cases (:func:`exit_status_for`; a run that adds to a stored one, over its own cases).

        Raises :class:`~xpushare.model.errors.LeaseHeld` when another live run holds one of the clusters (unless
        ``wait``; nothing written), :class:`RunDirectoryFull` when the run directory fills up (every cluster
        stops), and the first error a cluster's thread raised, after the others finished and the reports are
        written.
        """
        self.selection = selection
        interrupt.unsettle()  # an earlier run of this process settled: this one's signals are requests again
        found: dict[str, list[HostUnreachable]] = {}
        # Taking the leases, a signal ends the task (Ctrl-C ends a --wait) and nothing is written. From the leases
        # on, a signal is only recorded (interrupt.deferred): the run winds down and ends whole (every case
        # recorded, run.json's end, the reports), whenever it comes and however often; once run.json's end is
        # final (interrupt.settle) a later one changes nothing, the lease's release included.
        with lease.held_all(self.clusters, self.id, wait=self.wait, out=self.out, unreached=found) as renewals, \
                interrupt.deferred():
            try:
                for cluster, renewal in zip(sorted(self.clusters, key=lambda c: c.name), renewals, strict=True):
                    self._note_unreached(cluster, found.get(cluster.name) or [])
                    if renewal is None:
                        self.cut_off[cluster.name] = found[cluster.name][-1]
                self.dir.mkdir(parents=True, exist_ok=True)
                atomic_file.claim_tree(self.dir)  # no link below it is written through (docs/reliability.md)
                holder = next((r.holder for r in renewals if r is not None), None) or lease.new_holder(self.id)
                # the run directory's lock: `invoke judge`, `report`, `diff` refuse a live run (report/run_lock.py)
                with run_lock.holding(self.dir, holder):
                    try:
                        with interrupt.raising():  # a setup pipeline's commands: Ctrl-C ends them at once
                            status = hooks.before_cases(self)
                    except KeyboardInterrupt:  # the cases are recorded INTERRUPTED, not run
                        status = None
                    if status is not None:
                        return status
                    self.meta = self._start_meta(selection)
                    with disk_full_stops_the_run(self.dir, self.id):
                        return self._cases_and_reports(selection, hooks)
            finally:
                interrupt.settle()  # the outcome is what run.json says (or the error raised): final

    def _start_meta(self, selection: RunSelection) -> dict[str, Any]:
        """run.json at the start: this part's fields, merged with a stored run.json when resuming or extending
        (required case ids, selected cases and clusters accumulate; the first start time stays)."""
        # Every selected case, so that a report of a run that ended early still counts the ones it never reached.
        selected = [{"cluster": cluster.name, "suite": c.suite, "case_id": c.case_id, "title": c.title}
                    for cluster in self.clusters for c in selection.cases]
        meta: dict[str, Any] = {
            "run_id": self.id,
            "tool_version": __version__,
            "clusters": [c.name for c in self.clusters],
            "selection": selection.label,
            "required": sorted(set().union(*(selection.required_on(c.name) for c in self.clusters))),
            "selected": selected,
            "started": utc_now().isoformat(),
            "argv": sys.argv[1:],
            "resume": self.resume,
            # who runs it: `invoke runs` tells a run still going from one that died without its end
            "process": {"machine": socket.gethostname(), "pid": os.getpid()},
        }
        if selection.release_profiles:
            meta["release_profiles"] = {name: dict(info) for name, info in selection.release_profiles.items()}
            meta["sut_judging_suites"] = sorted(SUT_JUDGING_SUITES)
        if selection.repeat > 1:
            meta["repeat"] = selection.repeat
        previous = run_store.read_run_meta(self.dir) if self.reuse is not Reuse.REFUSE else None
        if previous:
            meta["required"] = sorted(set(previous.get("required") or []) | set(meta["required"]))
            seen = {(s["cluster"], s["suite"], s["case_id"]) for s in selected}
            meta["selected"] = [s for s in previous.get("selected") or []
                                if isinstance(s, dict)
                                and (s.get("cluster"), s.get("suite"), s.get("case_id")) not in seen] + selected
            meta["started"] = previous.get("started", meta["started"])
            if isinstance(previous.get("release_profiles"), dict):
                meta["release_profiles"] = {**previous["release_profiles"], **(meta.get("release_profiles") or {})}
            earlier = [str(name) for name in previous.get("clusters") or []]
            meta["clusters"] = earlier + [c.name for c in self.clusters if c.name not in earlier]
            if self.reuse is Reuse.EXTEND:
                meta["rejudgments"] = previous.get("rejudgments")
                if meta["rejudgments"] is None:
                    del meta["rejudgments"]
        return meta

    def _cluster_job(self, cluster: ClusterSpec, selection: RunSelection, hooks: RunHooks, budget: Budget,
                     records: list[CaseRecord]) -> Callable[[], bool]:
        """One cluster's part of the run, as a job for the thread that runs it: make the backend, run the cases
        (every event they emit carries the cluster); True when interrupted. A full run directory halts ``budget``
        (every other cluster stops before its next case) and is raised."""

        def job() -> bool:
            with events.cluster(cluster.name):
                try:
                    if cluster.name in self.cut_off:
                        self._record_cut_off(cluster, self.cut_off[cluster.name], selection, hooks, records)
                        return False
                    try:
                        backend = hooks.backend(cluster)
                    except KeyboardInterrupt:  # a signal before the cluster began: its cases are not run
                        for case in selection.todo.get(cluster.name, ()):
                            record = self._interrupted_before(case, cluster, selection)
                            records.append(record)
                            hooks.case_done(self, cluster, case, record)
                        return True
                    return self._run_cases(cluster, backend, selection, hooks, budget, records)
                except OSError as exc:
                    if disk_full(exc):
                        budget.halt(f"the run directory is full ({cluster.name})")
                    raise

        return job

    def _run_cases(self, cluster: ClusterSpec, backend: Backend, selection: RunSelection, hooks: RunHooks,
                   budget: Budget, records: list[CaseRecord]) -> bool:
        """Run ``cluster``'s cases in order; return True when Ctrl-C stopped the run.

        Once ``budget`` 's ``--maxfail`` is reached the remaining cases are recorded as not run (INTERRUPTED
        records, so they count against the run and ``--resume`` runs them), not left out of the reports; once the
        budget is halted (another cluster's run directory write failed) the rest is left."""
        cases = list(selection.todo.get(cluster.name, ()))
        interrupted = False
        try:
            try:
                interrupt.check()
                backend.prepare_run(self.id)
                hooks.prepared(self, cluster, backend)
            except KeyboardInterrupt:
                interrupted = True
            except HostUnreachable as exc:  # none of the hosts the cluster's cases need answers
                self._note_unreached(cluster, [*backend.unreachable(), exc])
                self._record_cut_off(cluster, exc, selection, hooks, records)
                return False
            if not interrupted:
                self._note_unreached(cluster, backend.unreachable())
            for number, case in enumerate(cases, 1):
                if budget.halted:
                    break
                params = selection.params(case, cluster)
                required = case.case_id in selection.required_on(cluster.name)
                interrupted = interrupted or interrupt.requested()
                if interrupted:  # recorded, so that every selected case has a record; --resume runs it
                    record = self._interrupted_before(case, cluster, selection)
                elif budget.exhausted():
                    reason = (f"not run: --maxfail {budget.maxfail} reached ({budget.failures} FAIL/ERROR case(s) "
                              "before it)")
                    record = record_not_run(case, run_id=self.id, run_dir=self.dir, cluster=cluster, params=params,
                                            required=required, reason=reason)
                else:
                    record, interrupted = self._run_one(cluster, backend, selection, hooks, case, params, required,
                                                        f"{number}/{len(cases)}")
                    budget.count(record.status)
                records.append(record)
                hooks.case_done(self, cluster, case, record)
        except KeyboardInterrupt:  # not from a case (each is recorded): from a hook; the run stops as interrupted
            interrupted = True
        finally:
            backend.close()
        return interrupted

    def _run_one(self, cluster: ClusterSpec, backend: Backend, selection: RunSelection, hooks: RunHooks,
                 case: CaseDef, params: dict[str, Any], required: bool, position: str) -> tuple[CaseRecord, bool]:
        """Run one case (``selection.repeat`` times) and return its stored record and whether a signal stopped
        it. A ``KeyboardInterrupt`` that reached here without a record of the case (a wait in its scope) stores
        it INTERRUPTED, not run, so that every selected case has a record."""
        case_dir = run_store.case_dir(self.dir, cluster.name, case.suite, case.case_id)
        done: list[tuple[CaseRecord, bool]] = []
        try:
            with events.case(case.case_id), hooks.case_scope(self, cluster, case, position):
                def attempt() -> tuple[CaseRecord, bool]:
                    return run_case(case, run_id=self.id, run_dir=self.dir, cluster=cluster, backend=backend,
                                    params=params, required=required, root=self.root)

                done.append(run_repeated(attempt, selection.repeat, case_dir))
        except KeyboardInterrupt:
            if not done:
                return self._interrupted_before(case, cluster, selection), True
        return done[0]

    def _interrupted_before(self, case: CaseDef, cluster: ClusterSpec, selection: RunSelection) -> CaseRecord:
        """Store ``case``'s INTERRUPTED record on ``cluster``: the run was interrupted before it (naming the
        signal), so it did not run; ``--resume`` runs it."""
        return record_not_run(case, run_id=self.id, run_dir=self.dir, cluster=cluster,
                              params=selection.params(case, cluster),
                              required=case.case_id in selection.required_on(cluster.name),
                              reason=f"not run: the run was interrupted ({interrupt.describe()}) before this case")

    def _cases_and_reports(self, selection: RunSelection, hooks: RunHooks) -> ExitStatus:
        """The rest of :meth:`execute` once the run directory exists: the cases, then run.json's end and the
        reports."""
        self.write_meta()
        hooks.started(self)
        budget = Budget(self.maxfail)
        records: list[CaseRecord] = []
        jobs = {c.name: self._cluster_job(c, selection, hooks, budget, records) for c in self.clusters}
        # Every cluster's cases run in a thread of their own, one cluster too: the main thread only waits, so a
        # signal, which Python delivers to the main thread, never lands inside a case's harvest, cleanup or record.
        with command_log.debug_log(self.dir / DEBUG_LOG), events.recording(self.dir):
            for cluster in self.clusters:
                events.emit("run_started", run_id=self.id, cluster=cluster.name, mode=cluster.mode,
                            cases=[c.case_id for c in selection.todo.get(cluster.name, ())], resume=self.resume)
                for u in self.unreached[cluster.name]:
                    events.emit("host_unreachable", cluster=cluster.name, host=u.host, role=u.role, why=u.why,
                                detail=u.detail)
            outcome = run_concurrently(jobs)
            errors = outcome.errors
            try:
                full = [error for error in errors.values() if disk_full(error)]
                if full:
                    raise full[0]
            except XpushareError as exc:
                events.emit("error", case_id=None, cluster=self.clusters[0].name, step="run", message=str(exc))
                raise
            for name, error in errors.items():
                events.emit("error", case_id=None, cluster=name, step="run", message=first_line(error))
            interrupted = outcome.interrupted or interrupt.requested()
            results = run_store.load_results(self.dir)
            unreached = [{"cluster": name, **u.to_json()} for name, hosts in self.unreached.items() for u in hosts]
            status = self._end(results, selection, interrupted, errors, unreached)
            events.emit("run_ended", run_id=self.id, exit_status=int(status), interrupted=interrupted,
                        counts=self.meta["counts"])
            paths = build.build(self.dir, required=set(self.meta["required"]))
            # The signal came while the end was written: the run ends interrupted. After settle() nothing changes.
            if interrupt.settle() and not interrupted:
                interrupted = True
                status = self._end(results, selection, interrupted, errors, unreached)
                paths = build.build(self.dir, required=set(self.meta["required"]))
        hooks.finished(self, RunOutcome(results, records, status, interrupted, paths, errors))
        if errors and not interrupted:
            raise next(iter(errors.values()))
        for name, error in errors.items():  # interrupted: run.json says 128 + the signal, and so does the process
            print(f"error: {name}: {first_line(error)}", file=sys.stderr, flush=True)
        return status

    def _end(self, results: list[CaseRecord], selection: RunSelection, interrupted: bool,
             errors: Mapping[str, BaseException], unreached: list[dict[str, Any]]) -> ExitStatus:
        """Write run.json's end (when, interrupted and by what, the exit status, counts, hosts that did not answer,
        the release decision) and return the exit status the process ends with: the interrupt's, else the error
        a cluster raised (raised after the report), else the cases' (:func:`exit_status_for`)."""
        status = exit_status_for(self._own(results, selection), interrupted, unreachable=bool(unreached))
        if errors and not interrupted:  # the process exits with the error it raises: run.json says the same
            status = raised_status(next(iter(errors.values())))
        self.meta.update(ended=utc_now().isoformat(), interrupted=interrupted, exit_status=int(status),
                         counts=summaries.counts(results), unreachable=unreached)
        if interrupted:
            self.meta["interrupted_by"] = interrupt.describe()
        self.meta["release_ready"] = summaries.decision_of_run(results, self.meta).label
        self.write_meta()
        return status

    def _note_unreached(self, cluster: ClusterSpec, errors: Sequence[HostUnreachable | Unreached]) -> None:
        """Record ``cluster``'s hosts that did not answer (each host once, the first reason kept); print each new
        one and emit it as a ``host_unreachable`` event."""
        known = self.unreached[cluster.name]
        for error in errors:
            found = error if isinstance(error, Unreached) else Unreached.of(error, partial.role_of(cluster, error.host))
            if any(u.host == found.host for u in known):
                continue
            known.append(found)
            print(f"[xpushare] {cluster.name}: {found.line()}; the run goes on without it", file=self.out, flush=True)
            events.emit("host_unreachable", cluster=cluster.name, host=found.host, role=found.role, why=found.why,
                        detail=found.detail)  # those found taking the leases: at run_started

    def _record_cut_off(self, cluster: ClusterSpec, error: HostUnreachable, selection: RunSelection,
                        hooks: RunHooks, records: list[CaseRecord]) -> None:
        """Every case of ``cluster`` ERROR naming the host that did not answer (none of the hosts its cases need
        does): stored, reported, and run again by ``--resume``."""
        reason = partial.cut_off_reason(cluster, error)
        for case in selection.todo.get(cluster.name, ()):
            record = record_not_run(case, run_id=self.id, run_dir=self.dir, cluster=cluster,
                                    params=selection.params(case, cluster),
                                    required=case.case_id in selection.required, reason=reason, status=Status.ERROR)
            records.append(record)
            hooks.case_done(self, cluster, case, record)

    def _own(self, results: list[CaseRecord], selection: RunSelection) -> list[CaseRecord]:
        """The results the exit status is over: the run's, or for a run that extends a stored one, its own."""
        if self.reuse is not Reuse.EXTEND:
            return results
        mine = {(name, c.suite, c.case_id) for name, cases in selection.todo.items() for c in cases}
        return [r for r in results if (r.cluster, r.suite, r.case_id) in mine]


def raised_status(exc: BaseException) -> ExitStatus:
    """The exit status a run ends with when it raises ``exc`` (its own for an xpushare error, else 1), so that
    run.json's ``exit_status`` is the process's."""
    return exc.exit_status if isinstance(exc, XpushareError) else ExitStatus.FAILED


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type's name when it has none)."""
    return (str(exc) or type(exc).__name__).splitlines()[0]
