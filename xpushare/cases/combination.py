"""COMBO-001..008 (seed 000 sections 8, 16.3, 17.3): combinations of oversubscription, static and dynamic
memory and compute quotas, and several GPUs. Kubernetes only (annotations deliver the quotas).

Judgments: :mod:`xpushare.judge.combination` (what each one requires, and how it is stricter than the bash harness).

Scope of COMBO-001 and COMBO-005: the seed runs them on C1 (Tesla T4) only. Nothing in what they prove is
T4-specific (the oversubscription workload asks for ``oversub_factor`` x the card's memory, more than the
quota on any card), so they run on every cluster and the verdict notes the seed's scope. Set the parameter
``combo_c1_only: true`` (playbook or inventory) to SKIP them on clusters whose GPU model is not a T4.

Metrics taken while pods run (``metrics_mid*.txt``, COMBO-003/007/008): every scheduler is per node, so the
case scrapes the scheduler of **each node** its pods run on (``metrics_mid.txt`` for the first node,
``metrics_mid_<node>.txt`` for the others; ``plan["metrics_mid"]`` lists them), repeating every
``metrics_mid_poll_s`` until every pod of the case has a series or ``metrics_mid_timeout_s`` passes.

Dynamic cases (COMBO-004/005/006) annotate on an absolute schedule anchored on the W5 loop's start
(:func:`dynamic_schedule`): change ``i`` at ``dynamic_step_s`` x (i + 1), whatever the annotate calls and
the probe detection cost, and W5 runs long enough for the last change to reach the pod.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from xpushare.backends.base import CAP_ANNOTATIONS, CAP_KUBERNETES
from xpushare.cases.base import CaseDef, CaseRun, Judge, register
from xpushare.cases.functional import (
    DYNAMIC_MEMORY_PARAMS,
    MEM_PROBE,
    OVERSUB,
    QUOTA_PROBE_PARAMS,
    W2,
    W5,
    ample_quota,
    colocated_pair,
    dynamic_memory,
    dynamic_probe_args,
    run_quota_probe,
)
from xpushare.evidence.store import Evidence
from xpushare.judge import combination as judge_combo
from xpushare.judge import quota_probe, thresholds
from xpushare.judge.metrics import read_capture
from xpushare.judge.quantity import annotation_bytes
from xpushare.model.errors import XpushareError
from xpushare.model.premises import GPU, SUT, TWO_GPUS, TWO_PODS_ONE_GPU
from xpushare.model.verdict import Verdict
from xpushare.model.workload import WorkloadRecord, WorkloadSpec
from xpushare.parsers import pod_log
from xpushare.parsers.metrics import parse_exposition

W3 = "w3_idle_add"
_K8S = frozenset({CAP_KUBERNETES, CAP_ANNOTATIONS, SUT, GPU})

#: The seed's defaults of the COMBO thresholds (the one table the judgments read too).
_D = thresholds.COMBINATION
#: Parameters of the dynamic cases (FUNC-010..012 use the same names and values).
_DYNAMIC: dict[str, Any] = {"dynamic_max_latency_s": _D["dynamic_max_latency_s"], "dynamic_step_s": 30,
                            "probe_interval_s": _D["probe_interval_s"]}
#: Parameters of the cases that scrape metrics while their pods run.
_MID: dict[str, Any] = {"metrics_mid_timeout_s": 60, "metrics_mid_poll_s": 2}


# ---------------------------------------------------------------------------------------------- helpers


def _c1_gate(run: CaseRun) -> bool:
    """COMBO-001/005: note the seed's C1-only scope; False (and ``plan["skip"]``) when it is enforced here."""
    model = run.cluster.gpu_model or "unknown"
    run.plan["seed_scope"] = "C1 (Tesla T4) only"
    if run.params.get("combo_c1_only") and "T4" not in model.upper():
        run.plan["skip"] = f"seed scope is C1 (Tesla T4) only and combo_c1_only is set; this cluster's GPU: {model}"
        run.save_plan()
        return False
    return True


def _pods_seen(path_text: str, namespace: str) -> set[str]:
    text, _note = judge_combo.split_capture(path_text)
    return judge_combo.pods_in_capture(parse_exposition(read_capture(text).body), namespace)


def scrape_until_seen(run: CaseRun, pods: Sequence[str], records: Sequence[WorkloadRecord], base: str) -> list[str]:
    """Scrape the scheduler of every node the pods run on into ``<base>.txt`` / ``<base>_<node>.txt``.

    Repeats every ``metrics_mid_poll_s`` until every pod has a series in some capture or
    ``metrics_mid_timeout_s`` passes; returns the capture file names (empty when nothing could be scraped:
    the judgment then says ERROR).
    """
    kube = run.backend.parts.kubernetes
    nodes = sorted({r.node for r in records if r.node})
    if kube is None or not nodes:
        return []
    ns = run.namespace
    deadline = time.monotonic() + float(run.params["metrics_mid_timeout_s"])
    while True:
        files: list[str] = []
        seen: set[str] = set()
        for i, node in enumerate(nodes):
            name = kube.scrape_metrics(f"{base}.txt" if i == 0 else f"{base}_{node}.txt", node=node)
            if name:
                files.append(name)
                seen |= _pods_seen((run.case_dir / name).read_text(encoding="utf-8", errors="replace"), ns)
        if set(pods) <= seen or time.monotonic() >= deadline:
            return files
        run.sleep(float(run.params["metrics_mid_poll_s"]))


def run_with_mid(run: CaseRun, specs: Sequence[WorkloadSpec]) -> None:
    """Start the pods, scrape ``metrics_mid`` once they run (see :func:`scrape_until_seen`), wait for the end."""
    names = [s.name for s in specs]
    run.plan.setdefault("pods", [])
    run.plan["pods"] += names
    run.plan["namespace"] = run.namespace
    run.save_plan()
    timeout = float(run.params["pod_timeout_s"])
    run.backend.start_pods(specs)
    records = run.backend.wait_running(names, timeout)
    run.plan["metrics_mid"] = scrape_until_seen(run, names, records, "metrics_mid")
    run.save_plan()
    run.backend.wait_terminal(names, timeout)


def _scrape_one(run: CaseRun, name: str, node: str | None, attempts: int = 3) -> str | None:
    """Scrape the scheduler of ``node`` into ``name``; a failed scrape (curl error, no 200) is retried."""
    kube = run.backend.parts.kubernetes
    if kube is None or not node:
        return None
    got = None
    for attempt in range(attempts):
        got = kube.scrape_metrics(name, node=node)
        if got is not None:
            text, note = judge_combo.split_capture((run.case_dir / got).read_text(encoding="utf-8", errors="replace"))
            if note is None and read_capture(text).http_code in (200, None):
                return got
        if attempt + 1 < attempts:
            run.sleep(1.0)
    return got


def _gpus_available(run: CaseRun) -> int | None:
    """GPUs the cluster offers (schedulable nodes' ``<gen>.com/gpu`` / ``vgpus_per_gpu``); None if unknown."""
    if run.backend.parts.kubernetes is None:
        return None
    try:
        return run.backend.parts.placement.gpu_count()
    except XpushareError:
        return None


def _quota(core: Any, memory: Any) -> dict[str, Any]:
    return {"core": int(core), "memory": str(memory)}


# ---------------------------------------------------------------------------------------------- COMBO-001


def _combo001(run: CaseRun) -> None:
    if not _c1_gate(run):
        return
    limit = str(run.params["combo001_memory_limit"])
    run.plan.update(memory_limit=limit, namespace=run.namespace)
    args = ("--factor", str(run.params["oversub_factor"]))
    run.run_pods([run.pod("oversub-quota", OVERSUB, args=args, oversub=True, memory_limit=limit)])
    run_quota_probe(run, limit, source="annotation", oversub=True)


def _judge_combo001(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    return quota_probe.add_static_figures(judge_combo.judge_quota_over_oversub(ev, th, plan), ev, th, plan)


# ---------------------------------------------------------------------------------------------- COMBO-002


def _combo002(run: CaseRun) -> None:
    low, high = (int(c) for c in run.params["combo002_cores"])
    pods = colocated_pair(run, "w2", W2, {"core_limit": low, "oversub": True}, {"core_limit": high, "oversub": True})
    run.plan["cores"] = {pods[0].name: low, pods[-1].name: high}
    run.run_pods(pods)


# ---------------------------------------------------------------------------------------------- COMBO-003


def _combo003(run: CaseRun) -> None:
    specs, quotas = [], {}
    for i, q in enumerate(run.params["combo003_quotas"], start=1):
        spec = run.pod(f"w2-{i}", W2, core_limit=int(q["core"]), memory_limit=str(q["memory"]))
        specs.append(spec)
        quotas[spec.name] = _quota(q["core"], q["memory"])
    run.plan["quotas"] = quotas
    run_with_mid(run, specs)


# ---------------------------------------------------------------------------------------------- COMBO-004..006


def _changes(items: Sequence[tuple[str, str]]) -> list[tuple[str, str, int]]:
    """(key, value) -> (key, value, new): bytes as the scheduler parses the memory value, or the percent."""
    return [(k, v, annotation_bytes(v) if k == "memory" else int(v)) for k, v in items]


def probe_loop_start(run: CaseRun, pod: str, timeout_s: float) -> float | None:
    """``time.monotonic()`` at which the pod's W5 loop started, from its latest ``QUOTA_PROBE`` line.

    Polls the pod's output until a probe line appears (``timeout_s``; None when none did) and subtracts
    that line's ``elapsed=`` from now: later by at most one probe interval plus the log fetch, never
    earlier, so phases planned from it never start before the loop does.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = pod_log.quota_probes(run.backend.read_log(pod))
        if found:
            return time.monotonic() - found[-1].elapsed_s
        run.sleep(1.0)
    return None


def dynamic_schedule(run: CaseRun, initial: Mapping[str, Any], changes: Sequence[tuple[str, str, int]], *,
                     snapshots: bool = False, memory_probe: bool = False) -> None:
    """One W5 pod; change ``i`` is annotated ``dynamic_step_s`` x (i + 1) after its probe loop started.

    The schedule is absolute (anchored on the loop's start, :func:`probe_loop_start`), so the time an
    annotate call or the probe detection takes never shifts the later phases toward the end of the loop.
    W5 runs ``step x (changes + 2) + probe_interval_s``: every phase lasts a step, and the last change
    has a step (plus the probe interval) to be applied before the pod ends. ``snapshots``: scrape
    ``metrics_start.txt`` when the loop runs and ``metrics_end.txt`` one step after the last change.
    ``memory_probe``: the memory probe (:func:`xpushare.cases.functional.dynamic_probe_args`) runs as long in a
    pod beside it with the same initial quotas, and each memory change is annotated on it too, right after.
    ``plan``: pods (W5 first), namespace, initial, changes ({key, value, new}), probe_started,
    metrics_start/_end; with ``memory_probe``: memory_probe (its pod), memory_limits_bytes (initial, then one per
    memory change).
    """
    step, interval = float(run.params["dynamic_step_s"]), float(run.params["probe_interval_s"])
    duration = step * (len(changes) + 2) + interval
    args = ("--duration-s", f"{duration:g}", "--interval-s", f"{interval:g}")
    pod_kw = {"core_limit": initial.get("core"), "memory_limit": initial.get("memory"),
              "oversub": bool(initial.get("oversub"))}
    kept = {k: v for k, v in pod_kw.items() if v is not None}
    spec = run.pod("w5", W5, args=args, **kept)
    specs = [spec]
    timeout = float(run.params["pod_timeout_s"])
    run.plan.update(pods=[spec.name], namespace=run.namespace,
                    initial={k: v for k, v in initial.items() if k != "oversub"},
                    changes=[{"key": k, "value": v, "new": n} for k, v, n in changes])
    probe = None
    if memory_probe:
        sizes = [annotation_bytes(str(initial["memory"])), *[n for k, _v, n in changes if k == "memory"]]
        probe = run.pod("probe", MEM_PROBE, args=dynamic_probe_args(run.params, max(sizes), duration), **kept)
        specs.append(probe)
        run.plan.update(pods=[spec.name, probe.name], memory_probe=probe.name, memory_limits_bytes=sizes)
    names = [s.name for s in specs]
    run.save_plan()
    run.backend.start_pods(specs)
    records = run.backend.wait_running(names, timeout)
    node = next((r.node for r in records if r.name == spec.name and r.node), None)  # the W5 pod's scheduler
    start = probe_loop_start(run, spec.name, timeout)
    run.plan["probe_started"] = start is not None
    if start is None:  # the loop never ran: the judgment finds no change lines and no probes
        run.save_plan()
        run.backend.wait_terminal(names, timeout)
        return
    if snapshots:
        run.plan["metrics_start"] = _scrape_one(run, "metrics_start.txt", node)
        run.save_plan()
    for i, (key, value, _new) in enumerate(changes):
        run.sleep(max(0.0, start + step * (i + 1) - time.monotonic()))
        run.annotator.annotate(spec.name, {key: value})
        if probe is not None and key == "memory":
            run.annotator.annotate(probe.name, {key: value})
    if snapshots:
        run.sleep(max(0.0, start + step * (len(changes) + 1) - time.monotonic()))
        run.plan["metrics_end"] = _scrape_one(run, "metrics_end.txt", node)
        run.save_plan()
    run.backend.wait_terminal(names, timeout)


def _memory_steps(run: CaseRun, key: str, count: int) -> list[str]:
    """The ``count`` memory values of parameter ``key`` (the initial quota, then one per change)."""
    values = [str(v) for v in run.params[key]]
    if len(values) != count:
        raise XpushareError(f"{key} needs {count} memory values (initial, then one per change), got {values}")
    return values


def _combo004(run: CaseRun) -> None:
    """W5 with core 30 % and memory m0; alternate memory m1, core 80, memory m2, core 50 while it runs
    (m0..m2: ``combo004_memory_limits``, the seed's 2Gi, 4Gi, 3Gi); the memory probe beside it, with the same
    initial quotas and the memory changes."""
    m0, m1, m2 = _memory_steps(run, "combo004_memory_limits", 3)
    changes = _changes([("memory", m1), ("core", "80"), ("memory", m2), ("core", "50")])
    dynamic_schedule(run, {"core": 30, "memory": m0}, changes, snapshots=True, memory_probe=True)


def _combo005(run: CaseRun) -> None:
    """The memory probe (cuMemAlloc, every ``probe_interval_s``) with oversubscription on and memory m0; memory
    m1, m2, m3 while it runs, one ``dynamic_step_s`` apart (``combo005_memory_limits``, the seed's 4Gi, 8Gi,
    2Gi, 6Gi): :func:`xpushare.cases.functional.dynamic_memory`."""
    if not _c1_gate(run):
        return
    dynamic_memory(run, _memory_steps(run, "combo005_memory_limits", 4), oversub=True)


def _combo006(run: CaseRun) -> None:
    """W5 with oversubscription on and core 30 %; core 80, 40, 100 while it runs."""
    dynamic_schedule(run, {"core": 30, "oversub": True}, _changes([("core", "80"), ("core", "40"), ("core", "100")]))


def _judge_dynamic(case: str) -> Judge:
    def judge(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
        verdict = judge_combo.judge_dynamic_sequence(ev, th, plan, case=case)
        return quota_probe.add_phase_figures(verdict, ev, th, plan) if case != "COMBO-006" else verdict

    return judge


# ---------------------------------------------------------------------------------------------- COMBO-007


def _w5_args(run: CaseRun, key: str) -> tuple[str, ...]:
    value = run.params.get(key)
    return () if value is None else ("--duration-s", f"{float(value):g}")


def _combo007(run: CaseRun) -> None:
    """w2 30 % / w3 60 % / w2 80 % / w5 50 %, the same memory quota on all, oversubscription on all but #3."""
    memory = str(run.params["combo007_memory_limit"] or ample_quota(run))
    layout = [("w2-c30", W2, 30, True, ()), ("w3-c60", W3, 60, True, ()), ("w2-c80", W2, 80, False, ()),
              ("w5-c50", W5, 50, True, _w5_args(run, "combo007_w5_duration_s"))]
    specs, quotas = [], {}
    for name, workload, core, oversub, args in layout:
        spec = run.pod(name, workload, args=args, core_limit=core, memory_limit=memory, oversub=oversub)
        specs.append(spec)
        quotas[spec.name] = _quota(core, memory)
    run.plan["quotas"] = quotas
    run_with_mid(run, specs)


# ---------------------------------------------------------------------------------------------- COMBO-008


def _combo008(run: CaseRun) -> None:
    """``combo008_pods`` W5 pods: core 20 + (i mod 5) x 15 %, memory cycling ``combo008_memory_limits``,
    oversubscription on even i (the bash harness's mix, with memory quotas that differ between pods)."""
    memories = [str(m) for m in run.params["combo008_memory_limits"]]
    args = _w5_args(run, "combo008_w5_duration_s")
    specs, quotas = [], {}
    for i in range(1, int(run.params["combo008_pods"]) + 1):
        core, memory = 20 + (i % 5) * 15, memories[(i - 1) % len(memories)]
        spec = run.pod(f"w5-{i}", W5, args=args, core_limit=core, memory_limit=memory, oversub=i % 2 == 0)
        specs.append(spec)
        quotas[spec.name] = _quota(core, memory)
    run.plan.update(quotas=quotas, gpus_available=_gpus_available(run))
    run_with_mid(run, specs)


# ---------------------------------------------------------------------------------------------- registry

register(
    CaseDef(
        "COMBO-001",
        "combination",
        "Oversubscription + static memory quota",
        "W1 (oversub)",
        "1 pod asks for oversub_factor x GPU memory with oversubscription on and gpu-memory-limit "
        "combo001_memory_limit (10Gi); wait until it ends; then the memory probe (cuMemAlloc) with "
        "oversubscription on under the same quota: it holds at most the quota and can use it",
        "pods/*.log (cuMemAlloc rejected ... would exceed limit <quota>; MEM_PROBE accepted/refused bytes), "
        "scheduler.log (Applying initial memory limit), scheduler_proc.txt",
        requires=_K8S,
        params={"combo001_memory_limit": "10Gi", "oversub_factor": 1.5, "combo_c1_only": False,
                **QUOTA_PROBE_PARAMS},
        act=_combo001,
        judge=_judge_combo001,
    )
)
register(
    CaseDef(
        "COMBO-002",
        "combination",
        "Oversubscription + compute quota",
        "W2",
        "2 pods with gpu-core-limit 30 / 70 and oversubscription on, on one GPU (placement confirmed from the "
        "registration lines); wait until all end",
        "pods/*.log runtimes, gpu_mapping.txt, pods.json",
        requires=_K8S | {TWO_PODS_ONE_GPU},
        # "quota still in force, higher quota faster" (seed 000 §8): at least halfway from no quota effect (1)
        # towards the ideal 70/30 = 2.33, as FUNC-009
        params={"combo002_cores": [30, 70], "combo002_min_ratio": 1.5},
        act=_combo002,
        judge=judge_combo.judge_compute_pair,
    )
)
register(
    CaseDef(
        "COMBO-003",
        "combination",
        "Static memory + static compute quota",
        "W2",
        "2 pods with core 40 / 70 % and memory 4Gi / 8Gi; scrape metrics_mid while both run; wait until they end",
        "metrics_mid*.txt (client_memory_quota_bytes, client_core_quota_config/effective_percent per pod), "
        "scheduler.log (initial limits), pods/*.log",
        requires=_K8S,
        params={**_MID, "combo003_quotas": [{"core": 40, "memory": "4Gi"}, {"core": 70, "memory": "8Gi"}]},
        act=_combo003,
        judge=judge_combo.judge_static_both,
    )
)
register(
    CaseDef(
        "COMBO-004",
        "combination",
        "Dynamic memory + dynamic compute",
        "W5",
        "W5 with core 30 % and memory 2Gi; annotate memory 4Gi, core 80, memory 3Gi, core 50 while it runs "
        "(memory values: combo004_memory_limits); beside it the memory probe (cuMemAlloc) with the same initial "
        "quotas gets the memory changes too and measures what it can hold every probe_interval_s",
        "scheduler.log (Memory/Compute limit changed, in order), pods/*.log (update lines, QUOTA_PROBE, MEM_PROBE "
        "accepted/refused per phase), annotations.jsonl, metrics_start.txt, metrics_end.txt",
        requires=_K8S,
        params={**DYNAMIC_MEMORY_PARAMS, "max_probe_gap_s": _D["max_probe_gap_s"],
                "combo004_memory_limits": ["2Gi", "4Gi", "3Gi"]},
        act=_combo004,
        judge=_judge_dynamic("COMBO-004"),
    )
)
register(
    CaseDef(
        "COMBO-005",
        "combination",
        "Oversubscription + dynamic memory",
        "mem_probe",
        "memory probe (cuMemAlloc) with oversubscription on and memory 4Gi; annotate 8Gi, 2Gi, 6Gi while it runs "
        "(memory values: combo005_memory_limits); it measures what it can hold every probe_interval_s",
        "scheduler.log (Memory limit changed), pods/*.log (Memory limit updated, MEM_PROBE accepted/refused per "
        "phase), scheduler_proc.txt, annotations.jsonl",
        requires=_K8S,
        params={**DYNAMIC_MEMORY_PARAMS, "combo005_min_changes": _D["combo005_min_changes"], "combo_c1_only": False,
                "combo005_memory_limits": ["4Gi", "8Gi", "2Gi", "6Gi"]},
        act=_combo005,
        judge=_judge_dynamic("COMBO-005"),
    )
)
register(
    CaseDef(
        "COMBO-006",
        "combination",
        "Oversubscription + dynamic compute",
        "W5",
        "W5 with oversubscription on and core 30 %; annotate 80, 40, 100 while it runs",
        "scheduler.log (Compute limit changed), pods/*.log (Core limit updated, QUOTA_PROBE it/s per phase), "
        "annotations.jsonl",
        requires=_K8S,
        params={**_DYNAMIC, "combo006_min_changes": _D["combo006_min_changes"],
                "max_probe_gap_s": _D["max_probe_gap_s"], "combo006_min_step_ratio": _D["combo006_min_step_ratio"],
                "combo006_min_step_share": _D["combo006_min_step_share"]},
        act=_combo006,
        judge=_judge_dynamic("COMBO-006"),
    )
)
register(
    CaseDef(
        "COMBO-007",
        "combination",
        "Everything on",
        "W2/W3/W5",
        "4 pods w2/w3/w2/w5 with core 30/60/80/50 %, one memory quota (4Gi T4, 8Gi otherwise), oversubscription "
        "on 3 of them; scrape metrics_mid while they run; wait until they end",
        "pods/*.log, metrics_mid*.txt (quota series per pod), scheduler.log (no FATAL), scheduler_proc.txt",
        requires=_K8S,
        params={**_MID, "combo007_min_success": _D["combo007_min_success"], "combo007_memory_limit": None,
                "combo007_w5_duration_s": None},
        act=_combo007,
        judge=judge_combo.judge_all_on,
    )
)
register(
    CaseDef(
        "COMBO-008",
        "combination",
        "Multi-GPU mixed configuration",
        "W5",
        "8 W5 pods with different core / memory quotas and oversubscription on half; scrape metrics_mid while "
        "they run; wait until they end",
        "scheduler.log registration lines (GPU per pod), metrics_mid*.txt (quota series per pod and GPU), "
        "pods/*.log",
        requires=_K8S | {TWO_GPUS},
        params={**_MID, "combo008_pods": 8, "combo008_memory_limits": ["4Gi", "5Gi"], "combo008_w5_duration_s": 120,
                "combo008_min_gpus": _D["combo008_min_gpus"],
                "combo008_effective_tolerance_pct": _D["combo008_effective_tolerance_pct"]},
        act=_combo008,
        judge=judge_combo.judge_multi_gpu,
    )
)
