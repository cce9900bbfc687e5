"""The legacy scenarios: one per ``tests/remote-test-*.sh`` script (docs/sut/legacy-scripts.md), run through the
engine's case lifecycle into ``.tmplog/<run-id>/xpushare/<cluster>/legacy/<scenario>/``.

Each scenario is a :class:`~xpushare.cases.base.CaseDef` of suite ``legacy`` (not in the matrix
registry: ``invoke cases`` and ``--suite`` never select it) whose ``act`` creates the pods the script
created -- same names (``<gen>-cross-gpu-<i>`` ...), same ``app=`` labels, same order and waits -- through
:class:`~xpushare.legacy.backend.LegacyK8sBackend`, prints the script's progress lines, and whose ``judge``
(:mod:`xpushare.legacy.judgments`) reads only the stored evidence. :func:`run_scenario` is the driver
behind the ``legacy.*`` tasks: optional setup (:mod:`xpushare.legacy.deploy`), the case, the legacy tables
(:mod:`xpushare.legacy.tables`), the run reports.

Deliberate differences from the scripts (also in ``docs/legacy.md``):

* pods use ``restartPolicy: Never`` (``OnFailure`` hides failures by restarting, docs/sut/README.md §pitfalls item 13);
* workloads are the project's W1/W2/W3 (the image scripts' sizes: pytorch-add, -small, -idle-small) from
  the workloads ConfigMap; ``--set legacy_entrypoint=true`` runs the legacy images' own entrypoints;
* ``dynamic-limit`` step 4 starts a second pod annotated with the low limit instead of ``kubectl exec``
  of a new process in the running pod: both register a new client that must get the limit at
  registration (the lab serves no exec);
* the pods are removed at the end of every scenario (labelled with the run id), evidence first.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from xpushare.cases.base import CaseDef, CaseRun
from xpushare.engine import driver, lifecycle, plan
from xpushare.evidence.store import Evidence
from xpushare.inventory import schema
from xpushare.inventory.schema import ClusterSpec
from xpushare.legacy import deploy, judgments
from xpushare.legacy.acts import (
    STREAMS,
    act_baseline,
    act_complex,
    act_complex2,
    act_compute_limit,
    act_dynamic_limit,
    act_memlimit,
    act_pods_run,
    act_smoke,
)
from xpushare.legacy.backend import (
    BASELINE_WORKLOADS,
    W1,
    W2,
    W3,
    LegacyK8sBackend,
)
from xpushare.legacy.case_report import post_process, render_case_report, write_meta
from xpushare.model.errors import UsageError
from xpushare.model.exit_status import ExitStatus
from xpushare.model.overrides import parse_overrides
from xpushare.model.verdict import Verdict
from xpushare.report import artifacts, build

SUITE = "legacy"


# -------------------------------------------------------------------------------------------- scenarios

_POD_RUN = {"legacy_monitor_s": 5.0, "pod_timeout_s": 6000, "legacy_entrypoint": False, "legacy_images": {}}
_PHASED = {"legacy_monitor_s": 5.0, "legacy_manual_args": ["--iters", "4000000"], "legacy_step_s": 10,
           "legacy_collect_s": 30, "legacy_final_collect_s": 10, "legacy_log_wait_s": 30,
           "legacy_util_tolerance": 15, "legacy_entrypoint": False, "legacy_images": {}}


@dataclass(frozen=True)
class Scenario:
    """One legacy script and its mirror: task name, script, title, parameters, act and judgment.

    ``count`` is the script's default pod count when the scenario takes ``N`` (None: it takes none);
    ``setup``: the script runs the deploy pipeline unless ``-s``/``--skip-setup``.
    """

    name: str
    script: str
    title: str
    workload: str
    operation: str
    sampling: str
    act: Callable[[CaseRun], None]
    judge: Callable[[Evidence, Mapping[str, Any], Mapping[str, Any]], Verdict]
    params: Mapping[str, Any] = field(default_factory=dict)
    count: int | None = None
    setup: bool = True

    def case(self) -> CaseDef:
        """The scenario as a (non-registered) case of suite ``legacy``, id = scenario name."""
        return CaseDef(self.name, SUITE, self.title, self.workload, self.operation, self.sampling,
                       params=dict(self.params), act=self.act, judge=self.judge)


SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("cross-gpu", "remote-test.sh (tests/scripts/test-cross-gpu.sh)", "Cross-GPU distribution (pytorch-add)",
             "W1 (pytorch-add, oversub on)", "N pods <gen>-cross-gpu-<i> at once; wait until all end",
             "pods/*.log (PASS, runtime, tqdm), scheduler.log (registrations)",
             act_pods_run("cross-gpu", "cross-gpu", W1, oversub=True), judgments.judge_all_pass,
             {**_POD_RUN, "legacy_pods": 3}, count=3),
    Scenario("small", "remote-test-small.sh (tests/scripts/test-small.sh)", "Small workload (pytorch-add-small)",
             "W2 (pytorch-add-small)", "N pods <gen>-small-<i> at once; wait until all end",
             "pods/*.log, scheduler.log", act_pods_run("small-workload", "small", W2, oversub=False),
             judgments.judge_all_pass, {**_POD_RUN, "legacy_pods": 10}, count=10),
    Scenario("idle-small", "remote-test-idle-small.sh (tests/scripts/test-idle-small.sh)",
             "Idle small workload (pytorch-add-idle-small)", "W3 (pytorch-add-idle-small)",
             "N pods <gen>-idle-small-<i> at once; wait until all end", "pods/*.log, scheduler.log",
             act_pods_run("idle-small-workload", "idle-small", W3, oversub=False), judgments.judge_all_pass,
             {**_POD_RUN, "legacy_pods": 10}, count=10),
    Scenario("baseline", "remote-base-test.sh", "Native baseline (nvidia.com/gpu, no SUT)", "W1, W2, W3",
             "one native pod per workload, one after the other (SUT DaemonSets deleted first)",
             "pods/*.log, pods.json (durations)", act_baseline, judgments.judge_baseline,
             {**_POD_RUN, "legacy_baseline_resource": "nvidia.com/gpu", "legacy_baseline_remove_sut": True,
              "legacy_baseline_workloads": list(BASELINE_WORKLOADS)}, setup=False),
    Scenario("memlimit", "remote-test-memlimit.sh", "Static memory limit (env)", "W2",
             "3 pods one after the other: low limit (must be refused), high limit, no limit",
             "pods/*.log (rejection / OOM lines, PASS)", act_memlimit, judgments.judge_memlimit,
             {"legacy_monitor_s": 3.0, "pod_timeout_s": 600, "legacy_memlimit_low": "1Gi",
              "legacy_memlimit_high": "4Gi", "legacy_memlimit_reject_timeout_s": 60,
              "legacy_entrypoint": False, "legacy_images": {}}),
    Scenario("dynamic-limit", "remote-test-dynamic-limit.sh", "Dynamic memory limit (annotations)", "W2 (long)",
             "annotate 2Gi, 4Gi, remove, 1Gi on a running pod; a new client under 1Gi must be refused",
             "scheduler.log (Memory limit changed, Sending UPDATE_LIMIT), pods/*.log", act_dynamic_limit,
             judgments.judge_dynamic_limit,
             {"legacy_monitor_s": 2.0, "legacy_manual_args": ["--iters", "4000000"], "legacy_step_s": 10,
              "legacy_dynamic_limits": ["2Gi", "4Gi"], "legacy_dynamic_low": "1Gi", "legacy_late_timeout_s": 300,
              "legacy_entrypoint": False, "legacy_images": {}}),
    Scenario("compute-limit", "remote-test-compute-limit.sh", "Dynamic compute limit with dmon", "W2 (long)",
             "annotate core 30, 80, remove on a running pod; dmon sm per phase vs the limit",
             "scheduler.log (Compute limit changed), remote_<node>_dmon.txt, nvidia_smi_L_<node>.txt",
             act_compute_limit, judgments.judge_compute, dict(_PHASED)),
    Scenario("complex", "remote-test-complex.sh", "Two pods, changing compute limits", "W2 (long) x 2",
             "2 pods: 30/60, then 70/20, then removed; dmon sm per GPU and phase vs the limits",
             "scheduler.log, remote_<node>_dmon.txt, nvidia_smi_L_<node>.txt", act_complex, judgments.judge_compute,
             dict(_PHASED)),
    Scenario("complex2", "remote-test-complex2.sh", "Four pods at a 50% core limit", "W2 x 4",
             "pods 1-2, settle, pods 3-4, each annotated core 50; wait until all end",
             "pods/*.log, scheduler.log (copied to scheduler<suffix>.log)", act_complex2, judgments.judge_complex2,
             {"legacy_monitor_s": 10.0, "pod_timeout_s": 1800, "legacy_core_limit": 50, "legacy_settle_s": 8,
              "legacy_log_suffix": "", "legacy_entrypoint": False, "legacy_images": {}}),
    Scenario("smoke", "remote-test-smoke.sh", "Smoke: probe pod and metrics endpoint", "W2 (short)",
             "one probe pod; /healthz and /metrics of the scheduler on its node",
             "pods/*.log, metrics.txt, metrics_health.txt", act_smoke, judgments.judge_smoke,
             {"legacy_monitor_s": 5.0, "legacy_smoke_args": ["--iters", "2000"], "legacy_smoke_timeout_s": 900,
              "legacy_entrypoint": False, "legacy_images": {}}),
)}


# ----------------------------------------------------------------------------------------------- driver


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


_SUFFIX_RE = re.compile(r"[A-Za-z0-9._-]{0,40}")


def scenario_params(sc: Scenario, cluster: ClusterSpec, req: LegacyRequest) -> tuple[CaseDef, dict[str, Any]]:
    """The case and its parameters: defaults < inventory ``params`` < ``--set`` < the task's own flags.

    Raises :class:`UsageError` for an unknown ``--set`` name, a count below 1 or a bad suffix.
    """
    case = sc.case()
    own = [o for o in req.overrides if not o.partition("=")[0].strip().startswith("deploy_")]
    overrides = parse_overrides(own)
    plan.check_overrides([case], overrides)
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

    Raises :class:`UsageError` / :class:`~xpushare.model.errors.InventoryError` for bad input. Returns 0 when
    the scenario PASSed, 1 for FAIL/ERROR (or a failed setup step), 130 when interrupted.
    """
    out = out or sys.stdout
    sc = SCENARIOS.get(req.scenario)
    if sc is None:
        raise UsageError(f"unknown legacy scenario {req.scenario!r} (known: {', '.join(SCENARIOS)})")
    cluster = schema.load(req.inventory_path).cluster(req.cluster)
    if cluster.mode != "k8s":
        raise UsageError(f"cluster {cluster.name!r} runs in {cluster.mode} mode; the legacy scripts need Kubernetes")
    case, params = scenario_params(sc, cluster, req)
    run_id = driver.resolve_run_id(req.run_id, resume=False, what="run")
    run_dir = artifacts.run_dir(req.root, run_id)
    run_dir.mkdir(parents=True, exist_ok=True)
    if sc.setup and not req.skip_setup:
        status = deploy.run_deploy(deploy.DeployRequest(
            cluster=req.cluster, mode=req.mode, autocommit=req.autocommit, source=req.source, run_id=run_id,
            overrides=req.overrides, inventory_path=req.inventory_path, root=req.root, label=sc.script,
            lenient=True), out)
        if status != ExitStatus.OK:
            print(f"setup failed: {sc.name} not run", file=out)
            return status
    write_meta(run_dir, run_id, cluster.name, case.case_id, started=True)
    print(f"===== Running Test: {sc.title} ({sc.script}) -> {run_dir} =====", file=out, flush=True)
    backend = LegacyK8sBackend(cluster)
    backend.case_params = params
    STREAMS.append(out)
    try:
        record, interrupted = lifecycle.run_alone(case, run_id=run_id, run_dir=run_dir, cluster=cluster,
                                                  backend=backend, params=params)
    finally:
        STREAMS.pop()
    case_dir = artifacts.case_dir(run_dir, cluster.name, SUITE, case.case_id)
    if record is not None:
        post_process(sc, case_dir, record, params, cluster)
        print(render_case_report(sc, case_dir, record, params), file=out, flush=True)
    status = driver.exit_status_for([record] if record else [], interrupted)
    meta = write_meta(run_dir, run_id, cluster.name, case.case_id, started=False, interrupted=interrupted,
                       exit_status=int(status))
    paths = build.build(run_dir, required=set(meta.get("required") or []))
    print(f"[xpushare] legacy/{sc.name}: {record['status'] if record else 'INTERRUPTED'}; report: {paths.markdown}",
          file=out, flush=True)
    if interrupted:
        print(f"[xpushare] interrupted: run again with --run-id {run_id}", file=out)
    return status


