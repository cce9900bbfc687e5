"""``invoke legacy.<scenario>``: one legacy scenario (:mod:`xpushare.legacy.scenarios`) as a run.

A :class:`~xpushare.engine.run.Run` (the cluster's lease for the whole scenario, setup included; run.json; signals;
reports) of the scenario's case with :class:`LegacyHooks`: the script's setup first
(:mod:`xpushare.deploy.k8s_pipeline`, unless ``--skip-setup``), the script's progress lines, then the files the
script left (:func:`~xpushare.legacy.case_report.post_process`) and its closing tables
(:func:`~xpushare.legacy.case_report.render_case_report`). Scenarios run one after the other under one ``--run-id``
share its run directory and run.json (:attr:`~xpushare.engine.run.Reuse.EXTEND`).
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from xpushare.backends.base import Backend
from xpushare.cases.base import CaseDef
from xpushare.cases.param_schema import owned_problem
from xpushare.deploy import k8s_pipeline
from xpushare.engine import plan
from xpushare.engine.cluster_params import check_cluster_params
from xpushare.engine.run import Reuse, Run, RunHooks, RunOutcome, RunSelection
from xpushare.inventory import schema
from xpushare.inventory.schema import ClusterSpec
from xpushare.legacy.acts import STREAMS
from xpushare.legacy.backend import LegacyK8sBackend
from xpushare.legacy.case_report import post_process, render_case_report
from xpushare.legacy.scenarios import SCENARIOS, SUITE, Scenario
from xpushare.model.case_record import CaseRecord
from xpushare.model.errors import UsageError
from xpushare.model.exit_status import ExitStatus
from xpushare.model.overrides import parse_overrides
from xpushare.report import run_store

__all__ = ["LegacyHooks", "LegacyRequest", "run_scenario", "scenario_params"]


@dataclass
class LegacyRequest:
    """What a ``legacy.*`` task asks for. ``count``: the script's N; ``suffix``: complex2's log suffix;
    ``keep_sut``: baseline without deleting the SUT DaemonSets; the deploy fields feed the setup pipeline."""

    scenario: str
    cluster: str
    count: int | None = None
    mode: str = "auto"
    skip_setup: bool = False
    autocommit: bool = False
    source: str | None = None
    suffix: str | None = None
    keep_sut: bool = False
    run_id: str | None = None
    overrides: Sequence[str] = ()
    inventory_path: str | None = None
    root: Path = Path(".")
    wait: bool = False
    """Wait for another run's lease on the cluster instead of stopping (:mod:`xpushare.engine.lease`)."""


_SUFFIX_RE = re.compile(r"[A-Za-z0-9._-]{0,40}")


def scenario_params(sc: Scenario, cluster: ClusterSpec, req: LegacyRequest) -> tuple[CaseDef, dict[str, Any]]:
    """The case and its parameters: defaults < inventory ``params`` < ``--set`` < the task's own flags.

    Raises :class:`UsageError` for an unknown ``--set`` name, a count below 1 or a bad suffix.
    """
    case = sc.case()
    own = [o for o in req.overrides if not o.partition("=")[0].strip().startswith("deploy_")]
    overrides = parse_overrides(own)
    plan.check_overrides([case], overrides)
    for name, value in overrides.items():
        problem = owned_problem(name, value)  # the scenarios' own rules (a memory limit is a quantity)
        if problem:
            raise UsageError(f"bad --set {name}={value!r}: {problem}")
    params = plan.case_params(case, cluster, plan.Selection(cases=[case], required={case.case_id}), overrides)
    if sc.count is not None and req.count is not None:
        if req.count < 1:
            raise UsageError(f"the pod count must be at least 1, not {req.count}")
        params["legacy_pods"] = req.count
    if req.suffix is not None:
        if not _SUFFIX_RE.fullmatch(req.suffix):
            raise UsageError(f"bad log suffix {req.suffix!r}: use up to 40 of [A-Za-z0-9._-]")
        params["legacy_log_suffix"] = req.suffix
    if req.keep_sut:
        params["legacy_baseline_remove_sut"] = False
    return case, params


def run_scenario(req: LegacyRequest, out: TextIO | None = None) -> ExitStatus:
    """Run one legacy scenario on a k8s cluster; print the legacy tables; write the run dir and reports.

    Raises :class:`UsageError` / :class:`~xpushare.model.errors.InventoryError` for bad input,
    :class:`~xpushare.model.errors.LeaseHeld` when another live run holds the cluster (unless ``req.wait``;
    nothing is set up or written). Returns 0 when the scenario PASSed, 1 for FAIL/ERROR (or a failed setup step),
    130 when interrupted.
    """
    out = out or sys.stdout
    sc = SCENARIOS.get(req.scenario)
    if sc is None:
        raise UsageError(f"unknown legacy scenario {req.scenario!r} (known: {', '.join(SCENARIOS)})")
    cluster = schema.load(req.inventory_path).cluster(req.cluster)
    check_cluster_params(cluster)  # the inventory's params, as every run checks them (legacy_* and deploy_* too)
    if not cluster.is_kubernetes:
        raise UsageError(f"cluster {cluster.name!r} runs in {cluster.mode} mode; the legacy scripts need Kubernetes")
    case, params = scenario_params(sc, cluster, req)
    the_run = Run(root=req.root, clusters=[cluster], run_id=req.run_id, reuse=Reuse.EXTEND, wait=req.wait, out=out)
    chosen = RunSelection(label="legacy", cases=[case], required=frozenset({case.case_id}),
                          todo={cluster.name: [case]}, params=lambda _case, _cluster: dict(params))
    return the_run.execute(chosen, LegacyHooks(sc, req, params, out))


class LegacyHooks(RunHooks):
    """A legacy scenario's run: the script's setup, its opening banner, its progress lines (the acts print to
    ``out``), its closing tables, and the closing line."""

    def __init__(self, sc: Scenario, req: LegacyRequest, params: dict[str, Any], out: TextIO) -> None:
        self.sc = sc
        self.req = req
        self.params = params
        self.out = out

    def backend(self, cluster: ClusterSpec) -> Backend:
        backend = LegacyK8sBackend(cluster)
        backend.case_params = self.params
        return backend

    def before_cases(self, run: Run) -> ExitStatus | None:
        sc, req = self.sc, self.req
        if not sc.setup or req.skip_setup:
            return None
        status = k8s_pipeline.run_deploy(k8s_pipeline.DeployRequest(
            cluster=req.cluster, mode=req.mode, autocommit=req.autocommit, source=req.source, run_id=run.id,
            overrides=req.overrides, inventory_path=req.inventory_path, root=req.root, label=sc.script,
            lenient=True), self.out)
        if status != ExitStatus.OK:
            print(f"setup failed: {sc.name} not run", file=self.out)
            return status
        return None

    def started(self, run: Run) -> None:
        print(f"===== Running Test: {self.sc.title} ({self.sc.script}) -> {run.dir} =====", file=self.out, flush=True)

    @contextlib.contextmanager
    def _printing(self) -> Iterator[None]:
        STREAMS.append(self.out)
        try:
            yield
        finally:
            STREAMS.pop()

    def case_scope(self, run: Run, cluster: ClusterSpec, case: CaseDef,
                   position: str) -> contextlib.AbstractContextManager[Any]:
        return self._printing()

    def case_done(self, run: Run, cluster: ClusterSpec, case: CaseDef, record: CaseRecord) -> None:
        case_dir = run_store.case_dir(run.dir, cluster.name, SUITE, case.case_id)
        post_process(self.sc, case_dir, record, self.params, cluster)
        print(render_case_report(self.sc, case_dir, record, self.params), file=self.out, flush=True)

    def finished(self, run: Run, outcome: RunOutcome) -> None:
        status = outcome.records[-1].status if outcome.records else "INTERRUPTED"
        print(f"[xpushare] legacy/{self.sc.name}: {status}; report: {outcome.paths.markdown}", file=self.out,
              flush=True)
        if outcome.interrupted:
            print(f"[xpushare] interrupted: run again with --run-id {run.id}", file=self.out)
