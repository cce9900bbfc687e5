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
from xpushare.cases import CaseDef
from xpushare.engine import dry_run, release, sut_build
from xpushare.engine.backend_factory import capabilities_of, make_backend
from xpushare.engine.cluster_params import check_cluster_params
from xpushare.engine.clusters import cluster_names
from xpushare.engine.output_record import result_record
from xpushare.engine.plan import Selection, case_params, check_overrides, select
from xpushare.engine.progress import expected_line
from xpushare.engine.run import Reuse, Run, RunHooks, RunOutcome, RunSelection, first_line
from xpushare.inventory import schema
from xpushare.inventory.schema import ClusterSpec
from xpushare.model.case_record import CaseRecord
from xpushare.model.errors import UsageError
from xpushare.model.exit_status import ExitStatus
from xpushare.model.overrides import parse_overrides
from xpushare.report import run_store, summaries
from xpushare.report.output import render


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
        latest = run_store.latest_statuses(the_run.dir)
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


