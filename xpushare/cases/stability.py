"""STAB-001..004, LEAK-001..005, FAIL-001..007 (seed 000 §6 P0/P2, §10, §16.6, §17.6; seed 003 for FAIL-005..007).

STAB and LEAK cases are soaks (:mod:`xpushare.soak.loop`): rounds of a workload mix with the scheduler
sampled every ``sample_interval_s`` into append-only series under ``soak/``; they differ in the mix, the
length (``stab_duration_s``: 6 h / 24 h by default, seconds in the lab; LEAK cases: a number of rounds)
and the judgment (:mod:`xpushare.judge.stability`). FAIL cases inject a fault (:mod:`xpushare.cases.fault_acts`)
and SKIP unless ``allow_disruptive`` is set (``invoke fail --allow-disruptive``).

What each case needs (``requires``), so which run in host mode (a ``mode: host`` cluster whose inventory names
``scheduler.process_name`` and ``metrics_url``: the backend then follows that one scheduler process's ``/proc``
figures and ``/metrics``, :meth:`~xpushare.backends.base.SchedulerControl.scheduler_facts`):

* STAB-001, STAB-002, LEAK-001..005, FAIL-001: ``scheduler-process`` only; they run in both modes. STAB-001's
  50 % core limit is an annotation: where the backend has none (host mode) its pods run without it (``plan.json``
  ``core_limit_note``) and share one GPU through ``same_gpu_as``. Host-mode FAIL-001 kills the scheduler process
  (:meth:`~xpushare.backends.base.SchedulerControl.restart_scheduler`): only a supervisor (``invoke deploy``'s) brings
  it back, and without one the case FAILs saying so.
* STAB-003, STAB-004: their point is changing the running pods' quota by annotation every
  ``stab_quota_interval_s`` (STAB-004: ``stab004_quota_interval_s``); host mode has no annotations (a
  process's limits are fixed by its environment at start), so they SKIP there.

STAB-004 also judges the memory quota by what a workload could do (issue 26): every round runs the memory
probe (``workloads/mem_probe.py``, path ``cuMemAlloc``, a measurement every ``probe_interval_s``) in a pod of
its own beside the W5 pods, with the same base quota and the same annotations, so it measures each quota phase
of the soak (start, after each raise, after each decrease); the soak loop keeps its log
(``soak/probe-pods/<pod>.log``) and :func:`xpushare.judge.quota_probe.add_soak_figures` judges every phase
(held: accepted <= quota + tolerance, so after a decrease allocations past the new limit are refused; usable:
accepted >= quota - one step, so after a raise the new room can be taken) beside the log-line checks. The
probe runs without oversubscription, as the seed's pods do: the seed's cycle (``stab004_memory_cycle`` 2Gi,
6Gi, then the base 8Gi) never raises a pod past the quota it started with, and only a raise past that one
meets docs/findings.md 18 (the first allocation fixes the library's allocatable memory), so the healthy build
PASSes on cards whose base is 8Gi; on a T4 (base 4Gi) the raise to 6Gi goes past the start quota and FAILs as
finding 18 (``probe_quota_usable``), a defect of the SUT that oversubscription would hide. The lab keeps
the seed's shape (base 512Mi, 128Mi, 384Mi: ``tests/lab/env.py``).
* FAIL-002..004: the device plugin, node drains and per-node load need Kubernetes.
* FAIL-005..007 (GPU faults injected into clients, :mod:`xpushare.cases.gpu_fault_acts`, docs/faults.md):
  ``scheduler-process`` only; both modes. The fault comes from the lab's simulated GPU (``fault_injector:
  simulated-gpu``), or on a real GPU from the error-injection shim (host mode: ``fault_shim``, else the one ``invoke
  deploy`` installed); without an injector they SKIP before any pod (:mod:`xpushare.cases.gpu_fault_injector`).

The seed's cluster column (STAB-001/FAIL-003 on c1, STAB-002/FAIL-004 on c2) is advice, not a gate:
choose with ``--case`` or a playbook.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from xpushare.backends.base import CAP_ANNOTATIONS, CAP_KUBERNETES, CAP_SCHEDULER_PROCESS
from xpushare.cases import fault_acts, gpu_fault_acts
from xpushare.cases.base import CaseDef, CaseRun, register
from xpushare.cases.functional import DYNAMIC_MEMORY_PARAMS, MEM_PROBE, ample_quota, dynamic_probe_args
from xpushare.evidence.store import Evidence
from xpushare.judge import faults as judge_faults
from xpushare.judge import quota_probe
from xpushare.judge import stability as judge_stability
from xpushare.judge.quantity import parse_quantity
from xpushare.model.premises import FAULT_INJECTOR, GPU, SUT
from xpushare.model.verdict import Verdict
from xpushare.model.workload import WorkloadSpec
from xpushare.soak.act import run_soak, settings_from_params

W2 = "w2_medium_add"
W3 = "w3_idle_add"
W4 = "w4_alloc_free"
W5 = "w5_quota_probe"
GIB = 2**30
_SUT = frozenset({SUT, GPU})
_K8S = frozenset({CAP_KUBERNETES}) | _SUT
_SCHED = frozenset({CAP_SCHEDULER_PROCESS}) | _SUT
_QUOTA = frozenset({CAP_SCHEDULER_PROCESS, CAP_ANNOTATIONS}) | _SUT
_INJECTED = _SCHED | {FAULT_INJECTOR}

#: How a soak runs (seconds): shared by STAB and LEAK cases; the lab overrides them to seconds.
SOAK_PARAMS: dict[str, Any] = {
    "sample_interval_s": 30,
    "soak_poll_s": 5,
    "round_timeout_s": 3600,
    "stop_grace_s": 600,
    "progress_s": 60,
    "interim_report_s": 3600,
    "checkpoint_s": 60,
    "log_rotate_s": 3600,
    "settle_s": 120,
    "backoff_max_s": 60,
    "max_failed_logs": 50,
    "soak_plots": True,
}

#: Leak thresholds. Growth limits are the bash harness's (XP_LEAK_*: 128 MiB RSS, 200 FDs, 1 GiB GPU, 200
#: series, 0 ghosts); the trend test (alpha, noise floors) is what the seed's "no sustained upward trend,
#: small fluctuations allowed" (§10.2, §14.4) adds on top.
TREND_PARAMS: dict[str, Any] = {
    "trend_alpha": 0.01,
    "trend_min_samples": 5,
    "trend_warmup_fraction": 0.1,
    "trend_samples": "idle",
    "leak_rss_max_growth_bytes": 128 * 2**20,
    "leak_rss_noise_bytes": 8 * 2**20,
    "leak_fd_max_growth": 200,
    "leak_fd_noise": 4,
    "leak_gpu_tolerance_bytes": GIB,
    "leak_ghost_max": 0,
    "stab_max_gap_fraction": 0.5,
}

STAB_PARAMS: dict[str, Any] = {
    **SOAK_PARAMS,
    **TREND_PARAMS,
    "stab_min_success_ratio": 1.0,
    "stab_max_protocol_errors": 0,
    "stab_exit_race_s": 5,
    "stab_log_storm_floor_per_min": 1200,
    "stab_log_storm_factor": 10,
}

_QUOTA_PARAMS: dict[str, Any] = {
    "stab_quota_pods": 4,
    "stab_quota_interval_s": 300,
    "stab_pod_duration_s": 1800,
    "stab_min_update_ratio": 0.9,
    "dynamic_max_latency_s": 15,
}

LEAK_PARAMS: dict[str, Any] = {**SOAK_PARAMS, **TREND_PARAMS, "sample_interval_s": 10, "leak_pods": 2}

FAIL_PARAMS: dict[str, Any] = {
    "allow_disruptive": False,
    "fail_pods": 4,
    "fail_load_s": 120,
    "fail_pre_fault_s": 20,
    "fail_restart_timeout_s": 240,
    "fail_recovery_max_s": 240,
    "fail_pending_max_s": 600,
}


# ------------------------------------------------------------------------------------------- mixes


def _stab001(run: CaseRun) -> Callable[[int], list[WorkloadSpec]]:
    """4 x W2 at 50 % core, all on the node with the fewest GPUs ("固定 4 Pod 同卡轮转"); where the backend places
    pods on one GPU itself (host mode) they share the first pod's GPU. Without annotations no core limit."""
    node, _gpus = run.backend.parts.placement.colocation_target()
    run.plan["node"] = node
    count, core = int(run.params["stab001_pods"]), int(run.params["stab001_core"])
    limit: int | None = core
    if run.backend.parts.annotations is None:
        limit = None
        run.plan["core_limit_note"] = (f"{run.backend.mode} mode has no annotations: the pods run without the "
                                       f"{core} % core limit")

    def mix(r: int) -> list[WorkloadSpec]:
        first = run.pod(f"r{r}-w2-1", W2, core_limit=limit, node=node)
        same = None if node else first.name
        return [first, *(run.pod(f"r{r}-w2-{i}", W2, core_limit=limit, node=node, same_gpu_as=same)
                         for i in range(2, count + 1))]

    return mix


def _stab002(run: CaseRun) -> Callable[[int], list[WorkloadSpec]]:
    """Odd rounds ``stab002_pods_large`` pods, even rounds ``stab002_pods_small``; W2 and W3 alternate."""
    small, large = int(run.params["stab002_pods_small"]), int(run.params["stab002_pods_large"])

    def mix(r: int) -> list[WorkloadSpec]:
        n = large if r % 2 else small
        return [run.pod(f"r{r}-{'w2' if i % 2 else 'w3'}-{i}", W2 if i % 2 else W3) for i in range(1, n + 1)]

    return mix


def _w5_args(run: CaseRun, key: str = "stab_pod_duration_s") -> tuple[str, ...]:
    return ("--duration-s", f"{float(run.params[key]):g}")


def _stab003(run: CaseRun) -> Callable[[int], list[WorkloadSpec]]:
    count = int(run.params["stab_quota_pods"])
    return lambda r: [run.pod(f"r{r}-w5-{i}", W5, core_limit=30, args=_w5_args(run)) for i in range(1, count + 1)]


def _memory_base(run: CaseRun) -> str:
    base = run.params.get("stab004_memory_base")
    return str(base) if base else ample_quota(run)


#: The name suffix of STAB-004's memory probe pods (the soak loop keeps their logs).
PROBE_SUFFIX = "-probe"


def _memory_cycle(run: CaseRun) -> tuple[str, ...]:
    """STAB-004's annotation values in order: ``stab004_memory_cycle``, then the base."""
    return (*(str(v) for v in run.params["stab004_memory_cycle"]), _memory_base(run))


def _stab004(run: CaseRun) -> Callable[[int], list[WorkloadSpec]]:
    """``stab_quota_pods`` x W5 and the memory probe (``r<round>-probe``), all under the base quota, running
    ``stab004_pod_duration_s``; the probe measures up to ``dynamic_probe_cap_factor`` x the largest quota of
    the cycle. ``plan``: ``memory_probe_suffix``, ``memory_base_bytes``, ``memory_cycle``."""
    count, base = int(run.params["stab_quota_pods"]), _memory_base(run)
    cycle = _memory_cycle(run)
    duration = float(run.params["stab004_pod_duration_s"])
    probe_args = dynamic_probe_args(run.params, max(parse_quantity(v) for v in cycle), duration)
    run.plan.update(memory_probe_suffix=PROBE_SUFFIX, memory_base_bytes=parse_quantity(base), memory_cycle=cycle)

    def mix(r: int) -> list[WorkloadSpec]:
        w5 = [run.pod(f"r{r}-w5-{i}", W5, memory_limit=base, args=_w5_args(run, "stab004_pod_duration_s"))
              for i in range(1, count + 1)]
        return [*w5, run.pod(f"r{r}{PROBE_SUFFIX}", MEM_PROBE, memory_limit=base, args=probe_args)]

    return mix


def _pairs(workload: str, key: str) -> Callable[[CaseRun], Callable[[int], list[WorkloadSpec]]]:
    def make(run: CaseRun) -> Callable[[int], list[WorkloadSpec]]:
        count = int(run.params[key])
        return lambda r: [run.pod(f"r{r}-{i}", workload) for i in range(1, count + 1)]

    return make


# ------------------------------------------------------------------------------------------- acts


def _run_id(run: CaseRun) -> str:
    return run.backend.run_id or run.case_dir.parents[3].name


def soak_act(
    make_mix: Callable[[CaseRun], Callable[[int], Sequence[WorkloadSpec]]],
    *,
    duration_key: str | None = None,
    rounds_key: str | None = None,
    quota: str | None = None,
    interval_key: str = "stab_quota_interval_s",
    keep_logs_suffix: str | None = None,
    leak: str | None = None,
) -> Callable[..., None]:
    """An act that runs the soak loop with the mix ``make_mix(run)`` (``resume`` continues a checkpoint);
    ``quota``: annotate the running pods every ``params[interval_key]`` s; ``keep_logs_suffix``: keep the logs
    of the pods whose name ends with it (:class:`~xpushare.soak.loop.SoakSettings`)."""

    def act(run: CaseRun, *, resume: bool = False) -> None:
        run.plan.update(soak=True, namespace=run.namespace, quota_kind=quota, leak=leak)
        mix = make_mix(run)
        cycle: tuple[str, ...] = ()
        if quota == "core":
            cycle = ("60", "90", "30")
        elif quota == "memory":
            cycle = _memory_cycle(run)
        settings = settings_from_params(
            run.params,
            duration_s=float(run.params[duration_key]) if duration_key else None,
            max_rounds=int(run.params[rounds_key]) if rounds_key else None,
            quota_key=quota,
            quota_cycle=cycle,
            quota_interval_s=float(run.params[interval_key]) if quota else None,
            keep_logs_suffix=keep_logs_suffix,
        )
        run.plan["settings"] = {k: v for k, v in vars(settings).items()}
        run.save_plan()
        run_soak(run, settings, mix, run_id=_run_id(run), resume=resume, out=sys.stdout)

    return act


def _judge_stab(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    return judge_stability.judge_stab(ev, th, plan)


def _judge_stab004(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    return quota_probe.add_soak_figures(judge_stability.judge_stab(ev, th, plan), ev, th, plan)


def _judge_leak(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    return judge_stability.judge_leak(ev, th, plan)


def _judge_fault(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    return judge_stability.judge_fault(ev, th, plan)


_SOAK_EVIDENCE = ("soak/samples.csv (RSS, FD per scheduler pid), soak/metrics.csv, soak/schedulers.csv (restarts), "
                  "soak/rounds.jsonl, soak/events.jsonl (gaps, anomalies), soak/baseline.json, soak/final.json, "
                  "scheduler.log, soak/soak-report.md + plots")

# ------------------------------------------------------------------------------------------- registry

register(CaseDef(
    "STAB-001", "stability", "4 pods rotating on one GPU (6 h)", "W2",
    "rounds of 4 x W2 at 50 % core on the node with the fewest GPUs for stab_duration_s (6 h)",
    _SOAK_EVIDENCE, requires=_SCHED,
    params={**STAB_PARAMS, "stab_duration_s": 6 * 3600, "stab001_pods": 4, "stab001_core": 50},
    act=soak_act(_stab001, duration_key="stab_duration_s"), judge=_judge_stab,
))
register(CaseDef(
    "STAB-002", "stability", "16-32 mixed pods (24 h)", "W2/W3",
    "rounds alternating 32 and 16 pods, W2 and W3 mixed, for stab_duration_s (24 h); `invoke soak` default",
    _SOAK_EVIDENCE, requires=_SCHED,
    params={**STAB_PARAMS, "stab_duration_s": 24 * 3600, "stab002_pods_small": 16, "stab002_pods_large": 32},
    act=soak_act(_stab002, duration_key="stab_duration_s"), judge=_judge_stab,
))
register(CaseDef(
    "STAB-003", "stability", "Dynamic compute every 5 min (6 h)", "W5 (W3 in the seed table)",
    "rounds of 4 x W5 (stab_pod_duration_s) at core 30; every stab_quota_interval_s annotate the running pods "
    "60 -> 90 -> 30 ...",
    _SOAK_EVIDENCE + ", Compute limit changed lines", requires=_QUOTA,
    params={**STAB_PARAMS, **_QUOTA_PARAMS, "stab_duration_s": 6 * 3600},
    act=soak_act(_stab003, duration_key="stab_duration_s", quota="core"), judge=_judge_stab,
))
#: STAB-004's own pace (its probe needs dynamic_probe_settle_s plus a measurement in every phase) and its probe.
_STAB004_PARAMS: dict[str, Any] = {
    **{k: v for k, v in DYNAMIC_MEMORY_PARAMS.items() if k != "dynamic_step_s"},
    **{k: v for k, v in _QUOTA_PARAMS.items() if k not in ("stab_quota_interval_s", "stab_pod_duration_s")},
    "stab004_quota_interval_s": 300,
    "stab004_pod_duration_s": 1800,
    "stab004_memory_base": None,
    "stab004_memory_cycle": ["2Gi", "6Gi"],
}

register(CaseDef(
    "STAB-004", "stability", "Dynamic memory every 5 min (6 h)", "W5 (W2 in the seed table) + mem_probe",
    "rounds of 4 x W5 and the memory probe (cuMemAlloc, every probe_interval_s) with gpu-memory-limit base "
    "(4Gi T4 / 8Gi); every stab004_quota_interval_s annotate 2Gi -> 6Gi -> base ... (stab004_memory_cycle); "
    "the probe's accepted/refused bytes judged in every phase",
    _SOAK_EVIDENCE + ", Memory limit changed lines, ghost clients, soak/probe-pods/*.log (MEM_PROBE accepted/"
    "refused per phase), soak/events.jsonl annotate times",
    requires=_QUOTA,
    params={**STAB_PARAMS, **_STAB004_PARAMS, "stab_duration_s": 6 * 3600},
    act=soak_act(_stab004, duration_key="stab_duration_s", quota="memory", interval_key="stab004_quota_interval_s",
                 keep_logs_suffix=PROBE_SUFFIX),
    judge=_judge_stab004,
))

register(CaseDef(
    "LEAK-001", "stability", "Scheduler RSS trend", "W4",
    "leak_rounds rounds of 2 x W4 (alloc/free loop); scheduler VmRSS sampled during and after every round",
    "soak/samples.csv rss_bytes per scheduler pid (trend), soak/schedulers.csv", requires=_SCHED,
    params={**LEAK_PARAMS, "leak_rounds": 20},
    act=soak_act(_pairs(W4, "leak_pods"), rounds_key="leak_rounds", leak="rss"), judge=_judge_leak,
))
register(CaseDef(
    "LEAK-002", "stability", "Scheduler FD trend", "W4",
    "leak_rounds rounds of 2 x W4; scheduler open FDs sampled during and after every round",
    "soak/samples.csv fd_count per scheduler pid (trend), soak/schedulers.csv", requires=_SCHED,
    params={**LEAK_PARAMS, "leak_rounds": 20},
    act=soak_act(_pairs(W4, "leak_pods"), rounds_key="leak_rounds", leak="fd"), judge=_judge_leak,
))
register(CaseDef(
    "LEAK-003", "stability", "GPU memory back to idle baseline", "W2",
    "idle baseline of gpu_memory_used_bytes per GPU; 1 round of leak003_pods x W2; delete; settle_s",
    "soak/baseline.json, soak/final.json (per-GPU used bytes), metrics/*.txt", requires=_SCHED,
    params={**LEAK_PARAMS, "leak003_pods": 4, "leak003_rounds": 1},
    act=soak_act(_pairs(W2, "leak003_pods"), rounds_key="leak003_rounds", leak="gpu"), judge=_judge_leak,
))
register(CaseDef(
    "LEAK-004", "stability", "No ghost clients after churn", "W2",
    "leak_churn_rounds rounds of 2 x W2 created and deleted; then client_info of this case's pods",
    "soak/final.json client_info_ours, soak/metrics/final_*.txt", requires=_SCHED,
    params={**LEAK_PARAMS, "leak_churn_rounds": 20},
    act=soak_act(_pairs(W2, "leak_pods"), rounds_key="leak_churn_rounds", leak="ghosts"), judge=_judge_leak,
))
register(CaseDef(
    "LEAK-005", "stability", "Metrics series bounded", "W4",
    "series count at idle; leak_churn_rounds rounds of 2 x W4 churn; series after cleanup and between rounds",
    "soak/baseline.json, soak/final.json series_total, soak/metrics.csv (idle rows)", requires=_SCHED,
    params={**LEAK_PARAMS, "leak_churn_rounds": 20, "leak_series_max_growth": 200, "leak_series_noise": 4},
    act=soak_act(_pairs(W4, "leak_pods"), rounds_key="leak_churn_rounds", leak="series"), judge=_judge_leak,
))

_FAIL_EVIDENCE = ("plan.json (fault, recovery_s, restored), pods.json, scheduler_before_fault.log, "
                  "scheduler_after_fault.log, previous/*.previous.log, scheduler.log")

register(CaseDef(
    "FAIL-001", "stability", "Restart the scheduler under load", "W5",
    "disruptive: 4 x W5 running; k8s: rollout restart ds/<gen>-scheduler, rollout status, /healthz on every node; "
    "host: kill -TERM the scheduler process, a new one (its supervisor's) answering /healthz; probe pod",
    _FAIL_EVIDENCE + " (host: scheduler_before_fault.txt, scheduler_after_fault.txt)", requires=_SCHED,
    params=dict(FAIL_PARAMS), act=fault_acts.fail_restart_scheduler, judge=_judge_fault,
))
register(CaseDef(
    "FAIL-002", "stability", "Restart the device-plugin DaemonSet under load", "W5",
    "disruptive: 4 x W5 running; rollout restart ds/<gen>-device-plugin; rollout status; probe pod",
    _FAIL_EVIDENCE, requires=_K8S, params=dict(FAIL_PARAMS),
    act=lambda run: fault_acts.fail_restart_daemonset(run, "device-plugin"), judge=_judge_fault,
))
register(CaseDef(
    "FAIL-003", "stability", "Drain a node under load", "W5",
    "disruptive: 4 x W5 running; kubectl drain the busiest node (fail003_node); re-submit the evicted pods; "
    "uncordon in finally; probe pod on that node",
    _FAIL_EVIDENCE, requires=_K8S,
    params={**FAIL_PARAMS, "fail003_node": None, "fail_drain_timeout_s": 180, "fail_drain_grace_s": 30},
    act=fault_acts.fail_drain, judge=_judge_fault,
))
register(CaseDef(
    "FAIL-004", "stability", "Single-node heavy load and recovery", "W2",
    "disruptive: fail004_pods x W2 pinned to one node (fail004_node, default the largest); node metrics back to "
    "idle, no scheduler restart, probe pod on that node",
    _FAIL_EVIDENCE, requires=_K8S,
    params={**FAIL_PARAMS, "fail004_node": None, "fail004_pods": 8, "fail004_min_succeeded": 1,
            "leak_gpu_tolerance_bytes": GIB},
    act=fault_acts.fail_heavy_node, judge=_judge_fault,
))

#: FAIL-005..007: W5 load of fail_fault_load_s (a progress line at least every fail_probe_interval_s) with the fault
#: fail_fault_after_s into the victims' run; rates of the neighbours in windows fail_rate_margin_s away from the
#: victims' ends.
GPU_FAULT_PARAMS: dict[str, Any] = {
    "allow_disruptive": False,
    "fail_fault_load_s": 60,
    "fail_fault_after_s": 25,
    "fail_neighbours_same_gpu": 1,
    "fail_neighbours": 1,
    "fail_settle_s": 5,
    "fail_progress_min_ratio": 0.5,
    "fail_rate_margin_s": 5,
    "fail_probe_interval_s": 1.0,
    "fault_shim": None,
    "fault_injector": "auto",
}
_GPU_FAULT_EVIDENCE = ("plan.json (fault, victims, scheduler before/after, metrics_after), pods/*.log (W5 progress "
                       "lines), scheduler.log, scheduler_before_fault.txt, scheduler_after_fault.txt, "
                       "metrics_after_fault.txt")


def _judge_gpu_fault(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    return judge_faults.judge_gpu_fault(ev, th, plan)


register(CaseDef(
    "FAIL-005", "stability", "One client's GPU error under load", "W5",
    "disruptive: a victim W5 whose driver calls fail (fail005_kind, default illegal-address: CUDA error 700) "
    "fail_fault_after_s into its run, a neighbour on its GPU and one elsewhere; the scheduler survives, the "
    "neighbours keep their it/s, the victim is removed (log and /metrics), a probe runs on that GPU",
    _GPU_FAULT_EVIDENCE, requires=_INJECTED,
    params={**GPU_FAULT_PARAMS, "fail005_kind": "illegal-address"},
    act=lambda run: gpu_fault_acts.fail_gpu_fault(run, "client-error"), judge=_judge_gpu_fault,
    expects_gpu_faults=True,
))
register(CaseDef(
    "FAIL-006", "stability", "A lost GPU under load", "W5",
    "disruptive: a victim's GPU falls off the bus (Xid 79) fail_fault_after_s into its run: every client on it "
    "fails; the scheduler survives, the clients of other GPUs keep their it/s, the dead clients are removed (log and "
    "/metrics), a probe runs on another GPU, and /metrics no longer exports the GPU NVML reports lost as a present "
    "GPU (its series gone or marked lost). The lost GPU stays lost until the node is reset",
    _GPU_FAULT_EVIDENCE + ", gpu_health/<node>-before.txt and -after.txt (NVML, kernel log)", requires=_INJECTED,
    params=dict(GPU_FAULT_PARAMS),
    act=lambda run: gpu_fault_acts.fail_gpu_fault(run, "device-lost"), judge=_judge_gpu_fault,
    expects_gpu_faults=True,
))
register(CaseDef(
    "FAIL-007", "stability", "ECC storm on one GPU", "W5",
    "disruptive: every client of one GPU gets an uncorrectable ECC error (CUDA error 214, Xid 48), a second apart; "
    "the scheduler survives, the clients of other GPUs keep their it/s, the struck clients are removed, a probe "
    "runs on the stormed GPU",
    _GPU_FAULT_EVIDENCE, requires=_INJECTED, params=dict(GPU_FAULT_PARAMS),
    act=lambda run: gpu_fault_acts.fail_gpu_fault(run, "ecc-storm"), judge=_judge_gpu_fault,
    expects_gpu_faults=True,
))
