"""The acts of the legacy scenarios: what each ``tests/remote-test-*.sh`` script did (pods, names, labels,
order, waits, progress lines) through :class:`~xpushare.legacy.backend.LegacyK8sBackend`, and the
helpers they share (monitoring, scheduler log, GPU lists, annotations). Split out of
:mod:`xpushare.legacy.scenarios`, which binds each act to its scenario.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, TextIO

from xpushare.backends.k8s_names import dns1123
from xpushare.cases.base import CaseRun
from xpushare.judge.quantity import parse_quantity
from xpushare.legacy import tables
from xpushare.legacy.backend import BASELINE_WORKLOADS, W2, PodExtra, legacy_backend
from xpushare.model.atomic_file import atomic_write_text
from xpushare.model.errors import TransportError, UsageError, XpushareError
from xpushare.model.workload import WorkloadSpec
from xpushare.parsers import nvidia_smi
from xpushare.transport.kube_errors import KubeError
from xpushare.transport.kube_objects import STUCK_REASONS

# ------------------------------------------------------------------------------------------------ helpers


#: Where acts print their progress lines: the innermost
#: :func:`~xpushare.legacy.run.run_scenario`'s ``out`` (else stdout).
STREAMS: list[TextIO] = []


def _say(text: str) -> None:
    print(text, file=STREAMS[-1] if STREAMS else sys.stdout, flush=True)


def _generation(run: CaseRun) -> str:
    return legacy_backend(run).names.generation


def _delete_label(run: CaseRun, label: str) -> None:
    """Delete the pods the script's label selects (``app=<label>``) in the workload namespace, as the script did."""
    try:
        legacy_backend(run).delete_labelled(f"app={label}", timeout_s=60)
    except KubeError as exc:
        _say(f"warning: deleting old app={label} pods: {exc}")


def _legacy_spec(run: CaseRun, name: str, workload: str, label: str, *, extra_args: Sequence[str] = (),
                 native: bool = False, resource: str | None = None, extra_labels: Mapping[str, str] | None = None,
                 **kw: Any) -> WorkloadSpec:
    spec = WorkloadSpec(name=name, workload=workload, args=(*run.workload_args(workload), *extra_args), **kw)
    labels = {"app": label, **(extra_labels or {})}
    return legacy_backend(run).add_extra(spec, PodExtra(labels=labels, resource=resource, native=native))


def _start(run: CaseRun, specs: Sequence[WorkloadSpec]) -> None:
    run.plan.setdefault("pods", [])
    run.plan["pods"] += [dns1123(s.name) for s in specs]
    run.plan.setdefault("namespace", run.namespace)
    run.plan.setdefault("gpu_model", run.cluster.gpu_model)
    run.save_plan()
    run.backend.start_pods(specs)


def monitor(run: CaseRun, names: Sequence[str], timeout_s: float, *, until: str = "terminal") -> bool:
    """Poll like the drivers (``<HH:MM:SS> [Elapsed: <n>s] <pod>: <cell> | ...``) until every pod ended
    (``until="running"``: left Pending); False on timeout or when a pod can never start. One ``get pods``
    plus one ``logs --tail=20`` per running pod per poll (``legacy_monitor_s`` apart)."""
    backend = legacy_backend(run)
    poll = float(run.params.get("legacy_monitor_s", 5.0))
    start = time.monotonic()
    while True:
        try:
            pods = {p.name: p for p in backend.pods_matching(backend.selector())}
        except KubeError as exc:
            _say(f"warning: {exc}")
            pods = {}
        cells = []
        for n in names:
            pod = pods.get(n)
            tail = None
            if pod is not None and pod.phase == "Running":
                try:
                    tail = backend.log_tail(n, 20)
                except KubeError:
                    tail = None
            cells.append((n, tables.monitor_cell(pod.phase, tail) if pod is not None else "-"))
        elapsed = time.monotonic() - start
        _say(tables.format_monitor_line(datetime.now().strftime("%H:%M:%S"), elapsed, cells))
        wanted = [pods.get(n) for n in names]
        if until == "terminal" and all(p is not None and p.is_terminal for p in wanted):
            _say("All pods finished.")
            return True
        if until == "running" and all(p is not None and p.phase not in ("Pending", "Unknown") for p in wanted):
            return True
        stuck = [p for p in wanted if p is not None and not p.is_terminal
                 and (p.waiting_reason in STUCK_REASONS or p.reason == "UnexpectedAdmissionError")]
        if stuck:
            _say("Pods can never start: " + ", ".join(f"{p.name} ({p.waiting_reason or p.reason})" for p in stuck))
            return False
        if elapsed >= timeout_s:
            _say("Timeout waiting for pods to complete.")
            return False
        run.sleep(min(poll, max(0.0, timeout_s - elapsed)))


def _finish(run: CaseRun, names: Sequence[str], timeout_s: float) -> None:
    """Monitor the pods to the end, then record them (``pods.json``)."""
    monitor(run, names, timeout_s)
    run.backend.wait_terminal(names, 1.0)


def _scheduler_text(run: CaseRun) -> str:
    backend = legacy_backend(run)
    try:
        return backend.kube.scheduler_log(prefix=False, timestamps=False)
    except KubeError:
        return ""


def wait_scheduler_line(run: CaseRun, pattern: str, timeout_s: float) -> float | None:
    """Poll the scheduler log (since the case start, every 2 s) for ``pattern``; unix time found, or None.

    Prints ``Found log: <pattern>`` / ``Timeout waiting for log: <pattern>`` like ``remote-test-complex.sh``.
    """
    rx = re.compile(pattern)
    deadline = time.monotonic() + timeout_s
    while True:
        if rx.search(_scheduler_text(run)):
            _say(f"Found log: {pattern}")
            return time.time()
        if time.monotonic() >= deadline:
            _say(f"Timeout waiting for log: {pattern}")
            return None
        run.sleep(2.0)


def _print_scheduler_tail(run: CaseRun, lines: int) -> None:
    tail = [line for line in _scheduler_text(run).splitlines() if "JSON" not in line][-lines:]
    _say("\n".join(f"  | {line}" for line in tail) if tail else "  | (no scheduler lines yet)")


def _capture_gpu_lists(run: CaseRun, names: Sequence[str]) -> None:
    """``nvidia-smi -L`` of the nodes the pods run on, as ``nvidia_smi_L_<node>.txt`` (GPU UUID -> index)."""
    backend = legacy_backend(run)
    try:
        nodes = sorted({p.node for p in backend.pods_matching(backend.selector()) if p.name in names and p.node})
    except KubeError:
        return
    for node in nodes:
        host = backend.kube.host_for_node(node)
        if host is None or host not in backend.smi_hosts:
            continue
        try:
            res = backend.gpu_host(host).run(backend.nvidia_smi_argv(host, *nvidia_smi.list_command()[1:]), timeout=60)
        except TransportError as exc:
            _say(f"warning: nvidia-smi -L on {host}: {exc}")
            continue
        atomic_write_text(run.case_dir / f"nvidia_smi_L_{node}.txt", res.stdout)


def _annotate(run: CaseRun, pod: str, key: str, value: str | None) -> float:
    return legacy_backend(run).annotator.annotate(pod, {key: value})  # type: ignore[dict-item]


def _elapsed_since_dmon(run: CaseRun) -> float:
    return time.time() - legacy_backend(run).case_start.timestamp()


# ------------------------------------------------------------------------------------------------- acts


def act_pods_run(label_suffix: str, prefix: str, workload: str, *, oversub: bool) -> Callable[[CaseRun], None]:
    """``test-cross-gpu.sh`` / ``test-small.sh`` / ``test-idle-small.sh``: N pods at once, monitored to the end."""

    def act(run: CaseRun) -> None:
        g = _generation(run)
        label = f"{g}-{label_suffix}"
        _delete_label(run, label)
        count = int(run.params["legacy_pods"])
        specs = [_legacy_spec(run, f"{g}-{prefix}-{i}", workload, label, oversub=oversub)
                 for i in range(1, count + 1)]
        run.plan["label"] = label
        _say(f"Workload: {workload} ({count} pod(s), label app={label})")
        _say(f"Test Start Time: {legacy_backend(run).case_start.strftime('%Y-%m-%dT%H:%M:%SZ')}")
        _start(run, specs)
        _finish(run, run.plan["pods"], float(run.params["pod_timeout_s"]))

    return act


def act_baseline(run: CaseRun) -> None:
    """``remote-base-test.sh``: one native pod per baseline workload, one after the other (SUT
    DaemonSets deleted first unless ``legacy_baseline_remove_sut`` is false)."""
    backend = legacy_backend(run)
    names = backend.names
    if run.params.get("legacy_baseline_remove_sut", True):
        _say(f"Deleting the {names.generation} DaemonSets (as remote-base-test.sh does); restore them with "
             f"`invoke deploy --cluster {run.cluster.name} --skip-setup`")
        backend.delete_sut_daemonsets(timeout_s=120)
        run.plan["sut_removed"] = True
    kinds = list(run.params.get("legacy_baseline_workloads") or BASELINE_WORKLOADS)
    unknown = [k for k in kinds if k not in BASELINE_WORKLOADS]
    if unknown:
        raise UsageError(f"legacy_baseline_workloads: unknown kind(s) {unknown} (known: {list(BASELINE_WORKLOADS)})")
    run.plan["workloads"] = {}
    _delete_label(run, "baseline-test")
    for kind in kinds:
        title, pod, workload = BASELINE_WORKLOADS[kind]
        spec = _legacy_spec(run, pod, workload, "baseline-test", native=True,
                            resource=str(run.params["legacy_baseline_resource"]),
                            extra_labels={"test-case": title.lower()})
        run.plan["workloads"][pod] = kind
        _say(f"===== Baseline {title}: pod {pod} ({workload}, {run.params['legacy_baseline_resource']}: 1) =====")
        t0 = time.monotonic()
        _start(run, [spec])
        _finish(run, [pod], float(run.params["pod_timeout_s"]))
        phase = next((r.phase for r in run.backend.wait_terminal([pod], 1.0) if r.name == pod), "?")
        _say(f"Test {title} Finished. Status: {phase}. Duration ~{int(time.monotonic() - t0)}s (Includes startup)")
    run.backend.wait_terminal(run.plan["pods"], 1.0)
    _say("===== All Baseline Tests Completed =====")


def act_memlimit(run: CaseRun) -> None:
    """``remote-test-memlimit.sh``: 3 pods one after the other: low limit (must be refused), high, none."""
    g = _generation(run)
    label = f"{g}-memlimit-test"
    _delete_label(run, label)
    low, high = str(run.params["legacy_memlimit_low"]), str(run.params["legacy_memlimit_high"])
    tests = [
        (1, f"{low} limit", low, "rejected", float(run.params["legacy_memlimit_reject_timeout_s"])),
        (2, f"{high} limit", high, "pass", float(run.params["pod_timeout_s"])),
        (3, "no limit", None, "pass", float(run.params["pod_timeout_s"])),
    ]
    run.plan["tests"] = []
    for n, title, limit, expect, timeout in tests:
        pod = f"memlimit-test-{limit.lower() if limit else 'nolimit'}"
        run.plan["tests"].append({"n": n, "label": title, "pod": pod, "limit": limit, "expect": expect})
        _say(f"===== Test {n}: {title} (pod {pod}, expect {'refusal' if expect == 'rejected' else 'PASS'}) =====")
        _start(run, [_legacy_spec(run, pod, W2, label, memory_limit_env=limit)])
        _finish(run, [pod], timeout)
    run.save_plan()
    run.backend.wait_terminal(run.plan["pods"], 1.0)


def _manual_pod(run: CaseRun, name: str, label: str, **kw: Any) -> WorkloadSpec:
    """A long-running W2 pod (``manual-test-pod.yaml``): the workload args plus ``legacy_manual_args``."""
    extra = [str(a) for a in run.params.get("legacy_manual_args") or ()]
    return _legacy_spec(run, name, W2, label, extra_args=extra, **kw)


def act_dynamic_limit(run: CaseRun) -> None:
    """``remote-test-dynamic-limit.sh``: annotate 2Gi, 4Gi, remove, 1Gi on a running pod; then a new
    client under 1Gi (must be refused)."""
    backend = legacy_backend(run)
    g, ns = _generation(run), run.namespace
    label, manual = f"{g}-manual-test", "manual-dynamic-test"
    late = f"{manual}-late"
    _delete_label(run, label)
    steps: list[str | None] = [*(str(v) for v in run.params["legacy_dynamic_limits"]), None]
    low = str(run.params["legacy_dynamic_low"])
    run.plan.update(manual_pod=manual, late_pod=late, late_value=low, late_bytes=parse_quantity(low),
                    steps=[{"value": v, "bytes": parse_quantity(v) if v else None} for v in steps])
    _start(run, [_manual_pod(run, manual, label)])
    if not monitor(run, [manual], 60.0, until="running"):
        raise XpushareError(f"the manual test pod {manual} did not start within 60 s")
    _print_scheduler_tail(run, 10)
    step_s = float(run.params["legacy_step_s"])
    key = backend.names.annotation_memory_limit
    for i, value in enumerate(steps, start=1):
        _say(f"===== Step {i}: {key}={value if value else '(removed)'} =====")
        _annotate(run, manual, "memory", value)
        run.sleep(step_s)
        _print_scheduler_tail(run, 15)
    _say(f"===== Step {len(steps) + 1}: {key}={low}, then a new client under it (pod {late}) =====")
    _annotate(run, manual, "memory", low)
    run.sleep(step_s)
    _start(run, [_legacy_spec(run, late, W2, label, memory_limit=low)])
    _finish(run, [late], float(run.params["legacy_late_timeout_s"]))
    run.plan["namespace"] = ns
    run.save_plan()


def act_compute_limit(run: CaseRun) -> None:
    """``remote-test-compute-limit.sh``: annotate core 30, 80, remove on a running pod; dmon per phase."""
    g = _generation(run)
    label, manual = f"{g}-manual-test", "manual-dynamic-test"
    _delete_label(run, label)
    _start(run, [_manual_pod(run, manual, label)])
    if not monitor(run, [manual], 60.0, until="running"):
        raise XpushareError(f"the manual test pod {manual} did not start within 60 s")
    _capture_gpu_lists(run, [manual])
    _phases(run, [("Step 1 (30%)", {manual: 30}, "collect"), ("Step 2 (80%)", {manual: 80}, "collect"),
                  ("Step 3 (removed)", {manual: None}, "final")])


def act_complex(run: CaseRun) -> None:
    """``remote-test-complex.sh``: 2 pods at 30/60, then 70/20, then removed; dmon per GPU and phase."""
    g = _generation(run)
    label = f"{g}-complex-test"
    _delete_label(run, label)
    pods = ["complex-test-1", "complex-test-2"]
    _start(run, [_manual_pod(run, p, label) for p in pods])
    if not monitor(run, pods, 60.0, until="running"):
        raise XpushareError("the complex test pods did not start within 60 s")
    _capture_gpu_lists(run, pods)
    _phases(run, [("Scenario 1", {pods[0]: 30, pods[1]: 60}, "collect"),
                  ("Scenario 2", {pods[0]: 70, pods[1]: 20}, "collect"),
                  ("Final (removed)", {pods[0]: None, pods[1]: None}, "final")])


def _phases(run: CaseRun, phases: Sequence[tuple[str, Mapping[str, int | None], str]]) -> None:
    """Annotate each phase's core limits (None: remove), wait for the scheduler's change lines, hold
    ``legacy_step_s`` after the annotation, then collect for ``legacy_collect_s`` (the last phase
    ``legacy_final_collect_s``); phase windows are seconds since the dmon start (the case start)."""
    backend = legacy_backend(run)
    ns = run.namespace
    key = backend.names.annotation_core_limit
    step_s, wait_s = float(run.params["legacy_step_s"]), float(run.params["legacy_log_wait_s"])
    run.plan.update(changes=[], phases=[])
    for name, targets, kind in phases:
        _say(f"===== {name}: " + ", ".join(f"{p} {key}={v if v is not None else '(removed)'}"
                                          for p, v in targets.items()) + " =====")
        t_annot = time.time()
        for pod, value in targets.items():
            _annotate(run, pod, "core", None if value is None else str(value))
        for pod, value in targets.items():
            pct = 100 if value is None else value
            run.plan["changes"].append({"pod": pod, "value": pct})
            wait_scheduler_line(run, rf"Compute limit changed for pod {re.escape(ns)}/{re.escape(pod)}: "
                                     rf"\d+% -> {pct}%", wait_s)
        run.sleep(max(0.0, step_s - (time.time() - t_annot)))
        collect = float(run.params["legacy_final_collect_s" if kind == "final" else "legacy_collect_s"])
        start = _elapsed_since_dmon(run)
        _say(f"Collecting for {collect:g} s ...")
        run.sleep(collect)
        run.plan["phases"].append({"name": name, "start_s": start, "end_s": _elapsed_since_dmon(run),
                                   "targets": {p: 100 if v is None else v for p, v in targets.items()}})
        run.save_plan()
    run.backend.wait_running(run.plan["pods"], 1.0)


def act_complex2(run: CaseRun) -> None:
    """``remote-test-complex2.sh``: 4 pods at a ``legacy_core_limit`` core limit."""
    g = _generation(run)
    label = f"{g}-complex-test"
    _delete_label(run, label)
    limit = int(run.params["legacy_core_limit"])
    run.plan["core_limit"] = limit
    specs = [_legacy_spec(run, f"complex-test-{i}", W2, label, core_limit=limit) for i in range(1, 5)]
    _start(run, specs[:2])
    settle = float(run.params["legacy_settle_s"])
    _say(f"Pods 1-2 created; waiting {settle:g} s (PLACEMENT_SETTLE_SECONDS) before pods 3-4")
    run.sleep(settle)
    _start(run, specs[2:])
    ok = monitor(run, run.plan["pods"], float(run.params["pod_timeout_s"]))
    _say("All tasks completed!" if ok else "Timeout reached!")
    run.backend.wait_terminal(run.plan["pods"], 1.0)


def act_smoke(run: CaseRun) -> None:
    """``remote-test-smoke.sh``: one probe pod; /healthz and /metrics of the scheduler on its node."""
    backend = legacy_backend(run)
    g = _generation(run)
    label = f"{g}-remote-smoke"
    _delete_label(run, label)
    pod = f"{g}-smoke-{dns1123(run.cluster.name, 40)}"
    run.plan.update(metric_prefix=backend.names.metric_prefix, backend=run.cluster.backend)
    extra = [str(a) for a in run.params.get("legacy_smoke_args") or ()]
    spec = _legacy_spec(run, pod, W2, label, extra_args=extra, extra_labels={"smoke-cluster": run.cluster.name})
    _start(run, [spec])
    _finish(run, [pod], float(run.params["legacy_smoke_timeout_s"]))
