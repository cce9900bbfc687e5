"""FUNC-001..012 (seed 000 sections 7, 16.2, 17.2), defined once for host and Kubernetes mode.

Host mode runs FUNC-001/002/003; FUNC-004..007 need the client library (``sut_lib`` in the
inventory) because only the library enforces oversubscription and memory quotas; FUNC-008..012 need
annotations, i.e. Kubernetes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from xpushare.backends.base import CAP_ANNOTATIONS, CAP_CLIENT_LIBRARY, CAP_KUBERNETES
from xpushare.cases.base import CaseDef, CaseRun, register
from xpushare.evidence.store import Evidence
from xpushare.judge import functional, isolation, quota, quota_probe
from xpushare.judge.quantity import parse_quantity
from xpushare.judge.thresholds import ISOLATION
from xpushare.model.premises import GPU, OVERSUBSCRIPTION, SUT, TWO_GPUS, TWO_PODS_ONE_GPU
from xpushare.model.verdict import Verdict
from xpushare.model.workload import WorkloadSpec
from xpushare.parsers.mem_probe import MEM_PROBE_PREFIX

W2 = "w2_medium_add"
OVERSUB = "oversub"


def _func001(run: CaseRun) -> None:
    run.run_pods([run.pod("w2", W2)])


def _judge_single(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    return functional.judge_single_pass(ev, th, pod=plan["pods"][0])


def colocated_pair(
    run: CaseRun, prefix: str, workload: str, first: dict[str, Any], second: dict[str, Any]
) -> list[WorkloadSpec]:
    """Pods among which ``<prefix>-a`` and the last one are meant to share one GPU (``plan["pair"]``).

    Host mode pins the second to the first's GPU. In Kubernetes the device plugin gives each pod the
    least-loaded GPU of its node, so ``gpus + 1`` pods pinned to the node with the fewest GPUs bring the
    last pod back to the first one's GPU; fillers in between carry no quota. The judgment confirms the
    placement from the scheduler's registration lines: one that did not happen is ERROR, premise two-pods-one-gpu.
    """
    node, gpus = run.backend.parts.placement.colocation_target()
    a = run.pod(f"{prefix}-a", workload, **first)
    if node is None:
        pods = [a, run.pod(f"{prefix}-b", workload, same_gpu_as=a.name, **second)]
    else:
        a = run.pod(f"{prefix}-a", workload, node=node, **first)
        fillers = [run.pod(f"{prefix}-fill{i}", workload, node=node) for i in range(1, max(1, gpus))]
        pods = [a, *fillers, run.pod(f"{prefix}-z", workload, node=node, **second)]
        run.plan["colocation"] = {"node": node, "gpus": gpus, "pods": len(pods)}
    run.plan["pair"] = [pods[0].name, pods[-1].name]
    return pods


def _func002(run: CaseRun) -> None:
    # a memory quota puts both clients under the scheduler's lock control, where its time-slicing shows
    quota = run.params["func002_memory_limit"]
    limits = {"memory_limit": str(quota)} if quota else {}
    run.run_pods(colocated_pair(run, "w2", W2, limits, dict(limits)))


def _judge_pair(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    return functional.judge_same_gpu_pair(ev, th, pods=plan["pods"], pair=plan.get("pair"))


def func003_pod_count(params: Mapping[str, Any], gpus: int | None) -> tuple[int, str]:
    """FUNC-003's pod count and the rule that gave it: ``func003_pods`` when set; else
    ``func003_pods_per_gpu`` (the seed's 12 pods for 8 cards: 1.5) x the GPUs the pods can land on, rounded up
    and at least 2 (so that on one GPU the pods share it, and on more some GPU is shared by the pigeonhole);
    2 on a node with no GPU (0: the workloads run on the CPU, where there is no spread to see and 12 pods take
    minutes on 2 cores); the seed's 12 when the GPU count is unknown (None)."""
    if params.get("func003_pods") is not None:
        return int(params["func003_pods"]), "func003_pods"
    if gpus == 0:
        return 2, "2 on a node without GPUs (CPU)"
    if not gpus:
        return 12, "the seed's 12 (GPU count unknown)"
    per_gpu = float(params["func003_pods_per_gpu"])
    return max(2, math.ceil(per_gpu * gpus)), f"ceil({per_gpu:g} x {gpus} GPUs), at least 2"


def _func003(run: CaseRun) -> None:
    gpus = run.backend.parts.placement.gpu_count()
    count, rule = func003_pod_count(run.params, gpus)
    run.plan["gpus_available"] = gpus
    run.plan["pod_count_rule"] = rule
    run.run_pods([run.pod(f"w2-{i}", W2) for i in range(1, count + 1)])


def _judge_spread(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    gpus = plan.get("gpus_available")
    return functional.judge_spread(ev, th, pods=plan["pods"], gpus_available=None if gpus is None else int(gpus))


def _oversub_args(run: CaseRun) -> tuple[str, ...]:
    return ("--factor", str(run.params["oversub_factor"]))


def _func004(run: CaseRun) -> None:
    run.run_pods([run.pod("oversub-off", OVERSUB, args=_oversub_args(run), oversub=False)])


def _func005(run: CaseRun) -> None:
    run.run_pods([run.pod("oversub-on", OVERSUB, args=_oversub_args(run), oversub=True)])


def _judge_rejected(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    return functional.judge_rejected(ev, th, pod=plan["pods"][0])


def _judge_oversub_on(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    return functional.judge_oversub_on(ev, th, pod=plan["pods"][0])


MEM_PROBE = "mem_probe"
#: The memory probe a static memory-quota case runs after its workload (FUNC-006/007, COMBO-001): the cap
#: (x the quota), the largest block (the block is at most a quarter of the quota, at least 1 MiB, so that a
#: small quota is measured in steps too), the card's memory never asked for, the wait before the first
#: allocation (an annotation quota reaches the library just after its registration: docs/findings.md 13).
QUOTA_PROBE_PARAMS: dict[str, Any] = {
    "quota_probe_cap_factor": 2,
    "quota_probe_step_mib": 64,
    "quota_probe_free_margin_mib": 512,
    "quota_probe_start_delay_s": 3,
    **ISOLATION,
}


def quota_probe_step_mib(params: Mapping[str, Any], quota_bytes: int) -> int:
    """The probe's block in MiB: ``quota_probe_step_mib``, at most a quarter of the quota, at least 1."""
    return max(1, min(int(params["quota_probe_step_mib"]), quota_bytes // (4 << 20)))


def run_quota_probe(run: CaseRun, limit: str, *, source: str, oversub: bool = False) -> None:
    """Run the memory probe (path ``cuMemAlloc``) in a pod of its own under the memory quota ``limit`` and
    wait until it ends. ``source``: ``env`` (``<PREFIX>_GPU_MEMORY_LIMIT``) or ``annotation``; ``oversub``:
    the pod runs with oversubscription on, as the case's workload did. ``plan["quota_probe"]``: pod, path,
    quota_bytes, quota_source, memory_limit (for :func:`xpushare.judge.quota_probe.add_static_figures`)."""
    quota = parse_quantity(limit)
    args = (
        "--path", "cuMemAlloc",
        "--quota-bytes", str(quota),
        "--step-mib", str(quota_probe_step_mib(run.params, quota)),
        "--cap-factor", f"{float(run.params['quota_probe_cap_factor']):g}",
        "--free-margin-mib", str(int(run.params["quota_probe_free_margin_mib"])),
        "--start-delay-s", f"{float(run.params['quota_probe_start_delay_s']):g}",
    )
    quota_kw: dict[str, Any] = {"memory_limit": limit} if source == "annotation" else run.env_memory_quota(limit)
    if oversub:
        quota_kw["oversub"] = True
    spec = run.pod("probe", MEM_PROBE, args=args, **quota_kw)
    run.plan["quota_probe"] = {"pod": spec.name, "path": "cuMemAlloc", "quota_bytes": quota,
                               "quota_source": source, "memory_limit": limit}
    run.run_pods([spec])


def _func006(run: CaseRun) -> None:
    limit = str(run.params["func006_memory_limit"])
    run.run_pods([run.pod("w2-quota-low", W2, **run.env_memory_quota(limit))])
    run_quota_probe(run, limit, source="env")


def _func007(run: CaseRun) -> None:
    limit = str(run.params.get("func007_memory_limit") or ample_quota(run))
    run.plan["memory_limit"] = limit
    run.run_pods([run.pod("w2-quota-ok", W2, **run.env_memory_quota(limit))])
    run_quota_probe(run, limit, source="env")


def _judge_rejected_probed(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    return quota_probe.add_static_figures(_judge_rejected(ev, th, plan), ev, th, plan)


def _judge_single_probed(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    return quota_probe.add_static_figures(_judge_single(ev, th, plan), ev, th, plan)


def ample_quota(run: CaseRun) -> str:
    """A memory quota the W2 workload fits in (seed FUNC-007): ``4Gi`` on a T4, ``8Gi`` on larger cards."""
    model = (run.cluster.gpu_model or "").upper()
    return "4Gi" if "T4" in model else "8Gi"


_SUT = frozenset({SUT, GPU})
_K8S = frozenset({CAP_KUBERNETES, CAP_ANNOTATIONS}) | _SUT
_LIB = frozenset({CAP_CLIENT_LIBRARY}) | _SUT
#: FUNC-004/005 switch the system's oversubscription off and on: a system without the switch has nothing to judge
_OVERSUB = _LIB | {OVERSUBSCRIPTION}

register(
    CaseDef(
        "FUNC-001",
        "functional",
        "Baseline single task",
        "W2",
        "1 pod, no quota; wait until it ends",
        "pods/*.log (PASS, --- N seconds ---), pods.json",
        requires=_SUT,
        act=_func001,
        judge=_judge_single,
    )
)
register(
    CaseDef(
        "FUNC-002",
        "functional",
        "Two tasks on one GPU",
        "W2",
        "2 pods pinned to the same GPU; wait until both end (func002_memory_limit: both get that memory "
        "quota annotation, which puts them under the scheduler's lock control: its time-slicing is judged)",
        "pods/*.log, pods.json (GPU, run intervals), scheduler.log (lock turns)",
        requires=_SUT | {TWO_PODS_ONE_GPU},
        params={"func002_min_overlap_ratio": 0.5, "func002_memory_limit": None},
        act=_func002,
        judge=_judge_pair,
    )
)
register(
    CaseDef(
        "FUNC-003",
        "functional",
        "Spread across GPUs",
        "W2",
        "ceil(1.5 x GPUs) pods, at least 2 (the seed's 12 for 8 cards; func003_pods fixes the count); wait "
        "until all end",
        "pods/*.log, pods.json (GPU per pod)",
        requires=_SUT | {TWO_GPUS},
        params={"func003_pods": None, "func003_pods_per_gpu": 1.5},
        act=_func003,
        judge=_judge_spread,
    )
)
register(
    CaseDef(
        "FUNC-004",
        "functional",
        "Oversubscription off",
        "W1 (oversub)",
        "1 pod asks for oversub_factor x GPU memory without the oversub variable",
        "pods/*.log (cuMemAlloc rejected / CUDA out of memory), pods.json",
        requires=_OVERSUB,
        params={"oversub_factor": 1.5},
        act=_func004,
        judge=_judge_rejected,
    )
)
register(
    CaseDef(
        "FUNC-005",
        "functional",
        "Oversubscription on",
        "W1 (oversub)",
        "the FUNC-004 workload with the oversub variable set",
        "pods/*.log, scheduler_proc.txt (scheduler alive)",
        requires=_OVERSUB,
        params={"oversub_factor": 1.5},
        act=_func005,
        judge=_judge_oversub_on,
    )
)
register(
    CaseDef(
        "FUNC-006",
        "functional",
        "Static memory quota too low",
        "W2",
        "1 pod with <PREFIX>_GPU_MEMORY_LIMIT below its need (1Gi); then the memory probe (cuMemAlloc) under "
        "the same quota: it holds at most the quota and can use it",
        "pods/*.log (rejection / OOM; MEM_PROBE accepted/refused bytes, cuMemGetInfo), pods.json",
        requires=_LIB,
        params={"func006_memory_limit": "1Gi", **QUOTA_PROBE_PARAMS},
        act=_func006,
        judge=_judge_rejected_probed,
    )
)
register(
    CaseDef(
        "FUNC-007",
        "functional",
        "Static memory quota sufficient",
        "W2",
        "1 pod with <PREFIX>_GPU_MEMORY_LIMIT = 4Gi (T4) / 8Gi (A800); then the memory probe (cuMemAlloc) "
        "under the same quota: it holds at most the quota and can use it",
        "pods/*.log (PASS; MEM_PROBE accepted/refused bytes, cuMemGetInfo), pods.json",
        requires=_LIB,
        params={"func007_memory_limit": None, **QUOTA_PROBE_PARAMS},
        act=_func007,
        judge=_judge_single_probed,
    )
)
W5 = "w5_quota_probe"
_DYNAMIC = {"dynamic_max_latency_s": 15, "dynamic_step_s": 30, "probe_interval_s": 10}
#: FUNC-010/011's memory probe: blocks, cap (x the largest limit), the card's memory never asked for, the wait
#: after its registration (the annotation arrives just after it: docs/findings.md 13), and how long after an
#: annotate call a measurement counts for the new limit (the seed's 15 s latency bound).
DYNAMIC_MEMORY_PARAMS = {
    **_DYNAMIC,
    "dynamic_probe_step_mib": 64,
    "dynamic_probe_cap_factor": 1.5,
    "dynamic_probe_free_margin_mib": 512,
    "dynamic_probe_start_delay_s": 3,
    "dynamic_probe_settle_s": 15,
    **ISOLATION,
}


def _func008(run: CaseRun) -> None:
    run.plan["quota_pods"] = {}
    for q in run.params["func008_quotas"]:
        spec = run.pod(f"w2-q{q}", W2, core_limit=int(q))
        run.plan["quota_pods"][str(q)] = spec.name
        run.run_pods([spec])


def _func009(run: CaseRun) -> None:
    run.run_pods(colocated_pair(run, "w2", W2, {"core_limit": 30}, {"core_limit": 60}))


def _dynamic(
    run: CaseRun,
    initial: dict[str, Any],
    changes: list[tuple[str, str, int]],
    *,
    probe: tuple[str, str, tuple[str, ...]] | None = None,
) -> None:
    """One W5 pod (or ``probe``: pod name, workload, flags); after it runs, annotate each change and hold
    ``dynamic_step_s`` before the next.

    ``plan``: pods, namespace, changes ({key, value, new}), probe_started (the first QUOTA_PROBE line, or the
    memory probe's first line, was seen within ``pod_timeout_s``; saved before the first annotate call, the
    judgment ERRORs without it).
    """
    step = float(run.params["dynamic_step_s"])
    duration = step * (len(changes) + 1) + step / 2
    marker = "[XPUSHARE][QUOTA_PROBE]"
    if probe is None:
        w5_args = ("--duration-s", f"{duration:g}", "--interval-s", str(run.params["probe_interval_s"]))
        spec = run.pod("w5", W5, args=w5_args, **initial)
    else:
        name, workload, probe_args = probe
        spec = run.pod(name, workload, args=probe_args, **initial)
        marker = MEM_PROBE_PREFIX
    run.plan.update(
        pods=[spec.name],
        namespace=run.namespace,
        changes=[{"key": k, "value": v, "new": n} for k, v, n in changes],
    )
    run.save_plan()
    run.backend.start_pods([spec])
    run.backend.wait_running([spec.name], float(run.params["pod_timeout_s"]))
    # Phases start when the probe loop runs (imports under a low quota can take a while).
    run.plan["probe_started"] = run.wait_for_line(spec.name, marker, float(run.params["pod_timeout_s"]))
    run.save_plan()
    run.sleep(step)
    for key, value, _new in changes:
        run.annotator.annotate(spec.name, {key: value})
        run.sleep(step)
    run.backend.wait_terminal([spec.name], float(run.params["pod_timeout_s"]))


def dynamic_probe_args(params: Mapping[str, Any], largest_bytes: int, duration_s: float) -> tuple[str, ...]:
    """The memory probe's flags for a quota changed while it runs: path ``cuMemAlloc``, a round every
    ``probe_interval_s`` for ``duration_s`` (s), up to ``dynamic_probe_cap_factor`` x the largest quota
    (``largest_bytes``), blocks of ``dynamic_probe_step_mib``."""
    interval = float(params["probe_interval_s"])
    return (
        "--path", "cuMemAlloc",
        "--quota-bytes", str(largest_bytes),
        "--cap-factor", f"{float(params['dynamic_probe_cap_factor']):g}",
        "--step-mib", str(int(params["dynamic_probe_step_mib"])),
        "--free-margin-mib", str(int(params["dynamic_probe_free_margin_mib"])),
        "--start-delay-s", f"{float(params['dynamic_probe_start_delay_s']):g}",
        "--rounds", str(int(duration_s // interval) + 1),
        "--interval-s", f"{interval:g}",
    )


def dynamic_memory(run: CaseRun, limits: list[str], *, oversub: bool = False) -> None:
    """The memory probe (path ``cuMemAlloc``) under ``limits[0]``, annotated with each later limit while it runs.

    The probe measures every ``probe_interval_s`` from its first line to the end of the last step (about
    ``dynamic_step_s`` x (changes + 1.5)), up to ``dynamic_probe_cap_factor`` x the largest limit, so each phase
    has measurements; ``plan["memory_limits_bytes"]`` lists the limits in bytes for the judgment. ``oversub``:
    the pod runs with oversubscription on (COMBO-005).
    """
    sizes = [parse_quantity(x) for x in limits]
    step = float(run.params["dynamic_step_s"])
    args = dynamic_probe_args(run.params, max(sizes), step * len(limits) + step / 2)
    run.plan["memory_limits_bytes"] = sizes
    changes = [("memory", v, b) for v, b in zip(limits[1:], sizes[1:], strict=True)]
    initial: dict[str, Any] = {"memory_limit": limits[0], **({"oversub": True} if oversub else {})}
    _dynamic(run, initial, changes, probe=("probe", MEM_PROBE, args))


def _func010(run: CaseRun) -> None:
    dynamic_memory(run, [str(x) for x in run.params["func010_memory_limits"]])


def _func011(run: CaseRun) -> None:
    dynamic_memory(run, [str(x) for x in run.params["func011_memory_limits"]])


def _func012(run: CaseRun) -> None:
    _dynamic(run, {"core_limit": 30}, [("core", "80", 80), ("core", "100", 100)])


def _judge_mem_up(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    return isolation.judge_dynamic_memory(ev, th, plan, require_pass=True)


def _judge_mem_down(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    # the probe takes a refusal as its measurement and ends with PASS: any other ending is a failure
    return isolation.judge_dynamic_memory(ev, th, plan, require_pass=True)


register(
    CaseDef(
        "FUNC-008",
        "functional",
        "Static compute quota, single task",
        "W2",
        "1 pod at a time with gpu-core-limit 25, 50, 75 %",
        "pods/*.log runtimes (d25 > d50 > d75)",
        requires=_K8S,
        # each lower quota at least 10 % slower: equal runtimes give a strict order by noise alone
        params={"func008_quotas": [25, 50, 75], "func008_min_step_ratio": 1.1},
        act=_func008,
        judge=quota.judge_static_compute,
    )
)
register(
    CaseDef(
        "FUNC-009",
        "functional",
        "Static compute quota, mixed on one GPU",
        "W2",
        "30 % and 60 % pods on one GPU (placement confirmed from registration lines)",
        "pods/*.log runtimes, gpu_mapping.txt",
        requires=_K8S | {TWO_PODS_ONE_GPU},
        # "clearly faster" (seed 000 §7): at least halfway from no quota effect (1) to the ideal 60/30 = 2; pods
        # that merely start a little apart on an unenforced GPU finish in start order (1.33 seen on the lab)
        params={"func009_min_ratio": 1.5},
        act=_func009,
        judge=quota.judge_mixed_compute,
    )
)
register(
    CaseDef(
        "FUNC-010",
        "functional",
        "Dynamic memory quota up",
        "mem_probe",
        "memory probe (cuMemAlloc) with gpu-memory-limit 4Gi; annotate 8Gi while it runs (func010_memory_limits); "
        "it measures what it can hold every probe_interval_s",
        "scheduler.log (Memory limit changed), pods/*.log (Memory limit updated, MEM_PROBE accepted/refused per "
        "phase), annotations.jsonl",
        requires=_K8S,
        params={**DYNAMIC_MEMORY_PARAMS, "func010_memory_limits": ["4Gi", "8Gi"]},
        act=_func010,
        judge=_judge_mem_up,
    )
)
register(
    CaseDef(
        "FUNC-011",
        "functional",
        "Dynamic memory quota down",
        "mem_probe",
        "memory probe (cuMemAlloc) with gpu-memory-limit 8Gi; annotate 2Gi while it runs (func011_memory_limits); "
        "it measures what it can hold every probe_interval_s",
        "scheduler.log, pods/*.log (MEM_PROBE accepted/refused per phase), scheduler_proc.txt, annotations.jsonl",
        requires=_K8S,
        params={**DYNAMIC_MEMORY_PARAMS, "func011_memory_limits": ["8Gi", "2Gi"]},
        act=_func011,
        judge=_judge_mem_down,
    )
)
register(
    CaseDef(
        "FUNC-012",
        "functional",
        "Dynamic compute quota",
        "W5",
        "W5 with gpu-core-limit 30; annotate 80, then 100 while it runs",
        "scheduler.log (Compute limit changed), pods/*.log (QUOTA_PROBE, Core limit updated)",
        requires=_K8S,
        params={**_DYNAMIC, "func012_min_gain": 1.3, "func012_max_drop": 0.1},
        act=_func012,
        judge=quota.judge_dynamic_compute,
    )
)
