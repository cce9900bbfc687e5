"""The legacy scenarios: one per ``tests/remote-test-*.sh`` script (docs/sut/legacy-scripts.md), run through the
engine's case lifecycle into ``.tmplog/<run-id>/xpushare/<cluster>/legacy/<scenario>/``.

Each scenario is a :class:`~xpushare.cases.base.CaseDef` of suite ``legacy`` (not in the matrix
registry: ``invoke cases`` and ``--suite`` never select it) whose ``act`` creates the pods the script
created -- same names (``<gen>-cross-gpu-<i>`` ...), same ``app=`` labels, same order and waits -- through
:class:`~xpushare.legacy.backend.LegacyK8sBackend`, prints the script's progress lines, and whose ``judge``
(:mod:`xpushare.legacy.judgments`) reads only the stored evidence. :func:`xpushare.legacy.run.run_scenario` runs
one behind the ``legacy.*`` tasks: a run with the legacy hooks (optional setup, :mod:`xpushare.deploy.k8s_pipeline`; the
legacy tables, :mod:`xpushare.legacy.tables`).

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

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from xpushare.cases.base import CaseDef, CaseRun
from xpushare.evidence.store import Evidence
from xpushare.judge.quantity import parse_quantity
from xpushare.legacy import judgments
from xpushare.legacy.acts import (
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
)
from xpushare.model import param_owners
from xpushare.model.verdict import Verdict

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


def legacy_param_defaults() -> dict[str, list[Any]]:
    """Each ``legacy_*`` parameter of the scenarios with every default it has among them."""
    defaults: dict[str, list[Any]] = {}
    for sc in SCENARIOS.values():
        for name, value in sc.params.items():
            if name.startswith("legacy_") and value not in defaults.setdefault(name, []):
                defaults[name].append(value)
    return defaults


#: The scenarios' memory limits (a quantity the scheduler accepts, or a list of them).
MEMORY_PARAMS = ("legacy_memlimit_low", "legacy_memlimit_high", "legacy_dynamic_low", "legacy_dynamic_limits")


def legacy_value_problem(name: str, value: Any) -> str | None:
    """The legacy rules beyond the parameter schema's: a memory limit of :data:`MEMORY_PARAMS` is a quantity such as
    ``4Gi`` (:func:`xpushare.judge.quantity.parse_quantity`); None when ``value`` keeps them."""
    if name not in MEMORY_PARAMS or value is None:
        return None
    for item in value if isinstance(value, list) else [value]:
        try:
            if isinstance(item, bool) or parse_quantity(str(item)) <= 0:
                return f"a memory limit above 0 such as 4Gi, got {item!r}"
        except ValueError as exc:
            return f"{exc} (a memory limit: a number and Gi, Mi, Ki or B, e.g. 4Gi)"
    return None


# The scenarios' own parameters, checked at the edge by the parameter schema (inventory and playbook params;
# a scenario's --set is checked against its case and these rules, xpushare/legacy/run.py).
param_owners.declare("legacy_", legacy_param_defaults(), check=legacy_value_problem)
