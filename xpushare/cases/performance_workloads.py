"""Helpers of the performance suite (:mod:`xpushare.cases.performance`): the workload names, the baseline
workload and pod, GPU counts, the co-located pair with live GPU checks and retries, the scheduler
/metrics scrapes of PERF-002/007 (scrape, exporter off, exported quota) and the plots the judges attach.
Split out of :mod:`xpushare.cases.performance`, which keeps the case rows, acts and judge wrappers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from xpushare.cases.base import CaseRun
from xpushare.cases.functional import colocated_pair
from xpushare.cases.sizing import fit_to_hardware
from xpushare.evidence.store import Evidence
from xpushare.judge import performance as judge_perf
from xpushare.model.atomic_file import open_append
from xpushare.model.errors import XpushareError
from xpushare.model.verdict import Verdict
from xpushare.model.workload import WorkloadSpec
from xpushare.parsers.metrics import parse_exposition
from xpushare.parsers.scheduler_log import parse_text
from xpushare.report import plots

W1 = "w1_large_add"
W2 = "w2_medium_add"
W3 = "w3_idle_add"
W5 = "w5_quota_probe"
W6 = "w6_fixed_add"
W7 = "w7_fixed_matmul"
OVERSUB = "oversub"


# ------------------------------------------------------------------------------------------------ helpers


def perf_workload(run: CaseRun) -> str:
    """``perf_workload``, or for ``auto`` W7 on an NPU cluster and W6 otherwise
    (docs/sut/bash-harness.md §performance)."""
    chosen = str(run.params.get("perf_workload") or "auto")
    if chosen != "auto":
        return chosen
    return W7 if (run.cluster.backend or "").lower() == "npu" else W6


def pod_env(run: CaseRun) -> tuple[tuple[str, str], ...]:
    """Extra environment of every PERF pod (``perf_pod_env``, e.g. ``OMP_NUM_THREADS: "1"`` in the lab)."""
    return tuple((str(k), str(v)) for k, v in (run.params.get("perf_pod_env") or {}).items())


def target_node(run: CaseRun) -> str | None:
    """The node the case pins its pods to (Kubernetes: the one with the fewest GPUs); None in host mode."""
    return run.backend.parts.placement.colocation_target()[0]


def base_plan(run: CaseRun, workload: str) -> None:
    """Put the workload and the cluster's GPU model, backend and namespace into ``run.plan`` and size the
    workload to the hardware (:func:`xpushare.cases.sizing.fit_to_hardware`, which may run calibration pods);
    saves the plan."""
    run.plan.update(
        workload=workload,
        gpu_model=run.cluster.gpu_model,
        backend=run.cluster.backend,
        namespace=run.namespace,
    )
    sizing = fit_to_hardware(run, workload)
    if run.plan["gpu_model"] is None:  # the model the calibration pods' INFO line named, where the inventory names none
        run.plan["gpu_model"] = (sizing.get("calibration") or {}).get("model")
    run.save_plan()


def run_baseline(run: CaseRun, workload: str, node: str | None, name: str = "base") -> str:
    """Run one pod of ``workload`` without a quota on ``node`` to its end; record it as a baseline pod."""
    spec = run.pod(name, workload, node=node, env=pod_env(run))
    run.plan.setdefault("baseline_pods", []).append(spec.name)
    run.run_pods([spec])
    return spec.name


def total_gpus(run: CaseRun) -> int:
    """GPUs of the cluster: Kubernetes: allocatable vGPUs / ``vgpus_per_gpu`` per schedulable node;
    host mode: the detected GPUs of the GPU hosts. 0 when unknown."""
    return run.backend.parts.placement.gpu_count() or 0


def live_gpus(run: CaseRun, pods: Sequence[str], timeout_s: float) -> dict[str, str] | None:
    """Pod -> GPU UUID from the scheduler's registration lines, read live (Kubernetes only).

    Polls ``kubectl logs -l <scheduler> --since-time=<case start>`` every 2 s until every pod registered
    or ``timeout_s`` passed; returns what was seen. None where the backend has no kubectl (host mode
    places pods on a GPU itself).
    """
    kube = run.backend.parts.kubernetes
    if kube is None:
        return None
    from xpushare.backends.k8s_names import dns1123
    from xpushare.transport.kube_errors import KubeError

    wanted = {dns1123(p): p for p in pods}
    seen: dict[str, str] = {}
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            text = kube.scheduler_log()
            mapping = parse_text(text).pod_gpu
            seen = {wanted[pod]: gpu for (ns, pod), gpu in mapping.items()
                    if ns == run.namespace and pod in wanted and gpu}
        except KubeError:
            pass
        if len(seen) == len(wanted) or time.monotonic() >= deadline:
            return seen
        run.sleep(2.0)


def start_colocated(
    run: CaseRun, prefix: str, workload: str, first: dict[str, Any], second: dict[str, Any]
) -> list[WorkloadSpec] | None:
    """Start a pair meant to share one GPU (``plan["pair"]``) and confirm it, with bounded retries.

    Uses :func:`colocated_pair`; fillers run ``perf_filler_workload`` (default: the same workload) with
    ``perf_filler_args``. After the pods run, the pair's GPUs are read from the registration lines
    (:func:`live_gpus`); a pair on two GPUs is deleted and started again under new names, at most
    ``perf_placement_retries`` times. Every attempt goes to ``plan["attempts"]``. Returns the started pods,
    or None (``plan["colocation_failed"] = True``) when no attempt put the pair on one GPU.
    """
    retries = max(1, int(run.params["perf_placement_retries"]))
    filler = str(run.params.get("perf_filler_workload") or "")
    filler_args = tuple(str(a) for a in run.params.get("perf_filler_args") or ())
    env = pod_env(run)
    run.plan.setdefault("attempts", [])
    for attempt in range(1, retries + 1):
        name = prefix if attempt == 1 else f"{prefix}-r{attempt}"
        pods = colocated_pair(run, name, workload, {**first, "env": env}, {**second, "env": env})
        if filler:
            pods = [p if p.name in run.plan["pair"] else dataclasses.replace(p, workload=filler, args=filler_args)
                    for p in pods]
        run.plan.setdefault("pods", [])
        run.plan["pods"] += [p.name for p in pods]
        run.save_plan()
        run.backend.start_pods(pods)
        run.backend.wait_running([p.name for p in pods], float(run.params["pod_timeout_s"]))
        gpus = live_gpus(run, run.plan["pair"], float(run.params["perf_placement_timeout_s"]))
        a, z = run.plan["pair"]
        record = {"attempt": attempt, "pair": [a, z], "gpus": gpus}
        run.plan["attempts"].append(record)
        run.save_plan()
        if gpus is None or (a in gpus and z in gpus and gpus[a] == gpus[z]):
            return pods
        if a not in (gpus or {}) or z not in (gpus or {}):
            record["note"] = "pair not registered in time; judged from the harvested registration lines"
            return pods
        _delete_attempt(run, [p.name for p in pods])  # wrong GPUs: remove this attempt's pods, try again
        run.plan["pods"] = [p for p in run.plan["pods"] if p not in {q.name for q in pods}]
        run.save_plan()
    run.plan["colocation_failed"] = True
    run.save_plan()
    return None


def _delete_attempt(run: CaseRun, names: Sequence[str]) -> None:
    """Delete one placement attempt's pods by name (Kubernetes), leaving the case's log streams and samplers
    running; without kubectl, the backend's cleanup of the whole case."""
    kube = run.backend.parts.kubernetes
    if kube is None:
        run.backend.cleanup()
        return
    for name in names:
        kube.delete_pod(name, timeout_s=60)


def attach_plot(ev: Evidence, verdict: Verdict, made: plots.PlotResult) -> Verdict:
    """Add a plot to the verdict's evidence, or its note to the metrics when it was not drawn."""
    if made.path is not None and ev.case_dir is not None:
        verdict.evidence.append(made.path.relative_to(ev.case_dir).as_posix())
    elif made.note:
        verdict.metrics.setdefault("plot_notes", []).append(made.note)
    return verdict


def plot_runtime(ev: Evidence, verdict: Verdict, title: str, points: Mapping[str, Any], tol: Any) -> Verdict:
    """``verdict`` with ``runtime_vs_quota.png`` (runtime s per quota %, baseline, tolerance) attached;
    unchanged without a case dir."""
    if ev.case_dir is None:
        return verdict
    base = verdict.metrics.get("baseline_s")
    made = plots.runtime_vs_quota(ev.case_dir / "runtime_vs_quota.png", baseline_s=base,
                                  runtimes={float(q): v for q, v in points.items()},
                                  tolerance=float(tol) if tol is not None else None, title=title)
    return attach_plot(ev, verdict, made)


# ------------------------------------------------------------------------------------------------ scrapes


def scrape_once(run: CaseRun, name: str, index: str) -> dict[str, Any]:
    """One scrape of the scheduler's /metrics into ``name``; appends ``{t0, t1, file}`` to ``index``."""
    (run.case_dir / name).parent.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    kube = run.backend.parts.kubernetes
    got = kube.scrape_metrics(name) if kube is not None else None
    rec = {"t0": t0, "t1": time.time(), "file": got}
    with open_append(run.case_dir / index) as fh:
        fh.write(json.dumps(rec) + "\n")
    return rec


def run_scraped(run: CaseRun, spec: WorkloadSpec, interval_s: float) -> None:
    """Start ``spec`` and scrape every ``interval_s`` until it ends (or ``pod_timeout_s``)."""
    run.plan.setdefault("pods", []).append(spec.name)
    run.save_plan()
    run.backend.start_pods([spec])
    deadline = time.monotonic() + float(run.params["pod_timeout_s"])
    n = len(list((run.case_dir / "metrics_stress").glob("*.txt"))) if (run.case_dir / "metrics_stress").exists() else 0
    while time.monotonic() < deadline:
        n += 1
        t = time.monotonic()
        scrape_once(run, f"metrics_stress/{n:05d}.txt", "metrics_stress.jsonl")
        records = run.backend.wait_terminal([spec.name], 0)
        if any(r.name == spec.name and r.terminal for r in records):
            return
        run.sleep(max(0.0, interval_s - (time.monotonic() - t)))
    run.backend.wait_terminal([spec.name], 0)


@contextlib.contextmanager
def exporter_disabled(run: CaseRun) -> Any:
    """Kubernetes: set ``<PREFIX>_METRICS_ENABLE=0`` on the scheduler DaemonSet and wait for the rollout;
    restore the original value (or remove the variable) in ``finally``. Records both in the plan."""
    kube, names = run.backend.parts.kubernetes, run.backend.names
    if kube is None:
        raise XpushareError("perf002_mode=exporter needs Kubernetes (the scheduler DaemonSet is redeployed)")
    ds, var = names.scheduler_daemonset, names.env_metrics_enable
    original = kube.daemonset_env(ds, var)
    run.plan["exporter_env"] = {"variable": var, "original": original, "off": "0"}
    run.save_plan()
    kube.set_daemonset_env(ds, var, "0")
    try:
        kube.await_daemonset(ds, timeout_s=300)
        yield
    finally:
        kube.set_daemonset_env(ds, var, original)
        kube.await_daemonset(ds, timeout_s=300)


def exported_core(path: Path, pod: str) -> int | None:
    """Last ``client_core_quota_config_percent`` of ``pod`` on the stored /metrics page ``path`` (None: absent)."""
    body, _code = judge_perf.split_http(path.read_text(encoding="utf-8", errors="replace"))
    vals = [s.value for s in parse_exposition(body).values("client_core_quota_config_percent") if s.label("pod") == pod]
    return int(vals[-1]) if vals else None


