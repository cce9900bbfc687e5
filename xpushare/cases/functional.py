"""FUNC-001..012 (seed 000 sections 7, 16.2, 17.2), defined once for host and Kubernetes mode.

Host mode runs FUNC-001/002/003; FUNC-004..007 need the client library (``sut_lib`` in the
inventory) because only the library enforces oversubscription and memory quotas; FUNC-008..012 need
annotations, i.e. Kubernetes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from xpushare import judge
from xpushare.backends.base import CAP_CLIENT_LIBRARY, CAP_KUBERNETES
from xpushare.cases.base import CaseDef, CaseRun, register
from xpushare.evidence import Evidence
from xpushare.model import Verdict

W2 = "w2_medium_add"
OVERSUB = "oversub"


def _func001(run: CaseRun) -> None:
    run.run_pods([run.pod("w2", W2)])


def _judge_single(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    return judge.judge_single_pass(ev, th, pod=plan["pods"][0])


def _func002(run: CaseRun) -> None:
    first = run.pod("w2-a", W2)
    run.run_pods([first, run.pod("w2-b", W2, same_gpu_as=first.name)])


def _judge_pair(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    return judge.judge_same_gpu_pair(ev, th, pods=plan["pods"])


def _func003(run: CaseRun) -> None:
    count = int(run.params["func003_pods"])
    run.plan["gpus_available"] = _gpu_count(run)
    run.run_pods([run.pod(f"w2-{i}", W2) for i in range(1, count + 1)])


def _gpu_count(run: CaseRun) -> int:
    gpus = getattr(run.backend, "gpus", {})
    return sum(len(v) for v in gpus.values())


def _judge_spread(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    return judge.judge_spread(ev, th, pods=plan["pods"], gpus_available=int(plan.get("gpus_available", 0)))


def _oversub_args(run: CaseRun) -> tuple[str, ...]:
    return ("--factor", str(run.params["oversub_factor"]))


def _func004(run: CaseRun) -> None:
    run.run_pods([run.pod("oversub-off", OVERSUB, args=_oversub_args(run), oversub=False)])


def _func005(run: CaseRun) -> None:
    run.run_pods([run.pod("oversub-on", OVERSUB, args=_oversub_args(run), oversub=True)])


def _judge_rejected(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    return judge.judge_rejected(ev, th, pod=plan["pods"][0])


def _judge_oversub_on(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    return judge.judge_oversub_on(ev, th, pod=plan["pods"][0])


def _func006(run: CaseRun) -> None:
    run.run_pods([run.pod("w2-quota-low", W2, memory_limit_env=str(run.params["func006_memory_limit"]))])


def _func007(run: CaseRun) -> None:
    limit = run.params.get("func007_memory_limit") or _ample_quota(run)
    run.plan["memory_limit"] = limit
    run.run_pods([run.pod("w2-quota-ok", W2, memory_limit_env=str(limit))])


def _ample_quota(run: CaseRun) -> str:
    # Seed FUNC-007: 4Gi on a T4, 8Gi on an A800 (and larger cards).
    model = (run.cluster.gpu_model or "").upper()
    return "4Gi" if "T4" in model else "8Gi"


_K8S = frozenset({CAP_KUBERNETES})
_LIB = frozenset({CAP_CLIENT_LIBRARY})
_K8S_WORK = "the Kubernetes mode (FUNC-008..012 need pod annotations)"

register(CaseDef("FUNC-001", "functional", "Baseline single task", "W2",
                 "1 pod, no quota; wait until it ends", "pods/*.log (PASS, --- N seconds ---), pods.json",
                 act=_func001, judge=_judge_single))
register(CaseDef("FUNC-002", "functional", "Two tasks on one GPU", "W2",
                 "2 pods pinned to the same GPU; wait until both end",
                 "pods/*.log, pods.json (GPU, run intervals)",
                 params={"func002_min_overlap_ratio": 0.5}, act=_func002, judge=_judge_pair))
register(CaseDef("FUNC-003", "functional", "Spread across GPUs", "W2",
                 "N pods (more than one GPU holds); wait until all end", "pods/*.log, pods.json (GPU per pod)",
                 params={"func003_pods": 12}, act=_func003, judge=_judge_spread))
register(CaseDef("FUNC-004", "functional", "Oversubscription off", "W1 (oversub)",
                 "1 pod asks for oversub_factor x GPU memory without the oversub variable",
                 "pods/*.log (cuMemAlloc rejected / CUDA out of memory), pods.json",
                 requires=_LIB, params={"oversub_factor": 1.5}, act=_func004, judge=_judge_rejected))
register(CaseDef("FUNC-005", "functional", "Oversubscription on", "W1 (oversub)",
                 "the FUNC-004 workload with the oversub variable set",
                 "pods/*.log, scheduler_proc.txt (scheduler alive)",
                 requires=_LIB, params={"oversub_factor": 1.5}, act=_func005, judge=_judge_oversub_on))
register(CaseDef("FUNC-006", "functional", "Static memory quota too low", "W2",
                 "1 pod with <PREFIX>_GPU_MEMORY_LIMIT below its need (1Gi)",
                 "pods/*.log (rejection / OOM), pods.json",
                 requires=_LIB, params={"func006_memory_limit": "1Gi"}, act=_func006, judge=_judge_rejected))
register(CaseDef("FUNC-007", "functional", "Static memory quota sufficient", "W2",
                 "1 pod with <PREFIX>_GPU_MEMORY_LIMIT = 4Gi (T4) / 8Gi (A800)", "pods/*.log, pods.json",
                 requires=_LIB, params={"func007_memory_limit": None}, act=_func007, judge=_judge_single))
for _id, _title, _wl, _op in (
    ("FUNC-008", "Static compute quota, single task", "W2", "1 pod each at gpu-core-limit 25/50/75%"),
    ("FUNC-009", "Static compute quota, mixed on one GPU", "W2", "30% + 60% pods on one GPU"),
    ("FUNC-010", "Dynamic memory quota up", "W2/W5", "annotate gpu-memory-limit 2Gi -> 4Gi while running"),
    ("FUNC-011", "Dynamic memory quota down", "W2/W5", "annotate gpu-memory-limit 4Gi -> 2Gi while running"),
    ("FUNC-012", "Dynamic compute quota", "W3/W5", "annotate gpu-core-limit 30 -> 80 -> 100 while running"),
):
    register(CaseDef(_id, "functional", _title, _wl, _op, "scheduler.log, pods/*.log, metrics",
                     requires=_K8S, implemented_by=_K8S_WORK))
