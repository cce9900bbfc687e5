"""The legacy scenarios: one per ``tests/remote-test-*.sh`` script (sut-interfaces.md §10), run through the
engine's case lifecycle into ``.tmplog/<run-id>/xpushare/<cluster>/legacy/<scenario>/``.

Each scenario is a :class:`~xpushare.cases.base.CaseDef` of suite ``legacy`` (not in the matrix
registry: ``invoke cases`` and ``--suite`` never select it) whose ``act`` creates the pods the script
created -- same names (``<gen>-cross-gpu-<i>`` ...), same ``app=`` labels, same order and waits -- through
:class:`LegacyK8sBackend`, prints the script's progress lines, and whose ``judge``
(:mod:`xpushare.legacy.judgments`) reads only the stored evidence. :func:`run_scenario` is the driver
behind the ``legacy.*`` tasks: optional setup (:mod:`xpushare.legacy.deploy`), the case, the legacy tables
(:mod:`xpushare.legacy.tables`), the run reports.

Deliberate differences from the scripts (also in ``docs/legacy.md``):

* pods use ``restartPolicy: Never`` (``OnFailure`` hides failures by restarting, §11 item 13);
* workloads are the project's W1/W2/W3 (the image scripts' sizes: pytorch-add, -small, -idle-small) from
  the workloads ConfigMap; ``--set legacy_entrypoint=true`` runs the legacy images' own entrypoints;
* ``dynamic-limit`` step 4 starts a second pod annotated with the low limit instead of ``kubectl exec``
  of a new process in the running pod: both register a new client that must get the limit at
  registration (the lab serves no exec);
* the pods are removed at the end of every scenario (labelled with the run id), evidence first.
"""

from __future__ import annotations

import re
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

import yaml

from xpushare.backends.base import PodSpec
from xpushare.backends.k8s import K8sBackend, dns1123
from xpushare.cases.base import CaseDef, CaseRun, load_plan
from xpushare.collect import nvidia_smi
from xpushare.engine import driver, lifecycle, plan
from xpushare.evidence.store import Evidence
from xpushare.inventory import schema
from xpushare.inventory.schema import ClusterSpec
from xpushare.judge.quantity import parse_quantity
from xpushare.legacy import deploy, judgments, tables
from xpushare.legacy.compare import BOUND
from xpushare.model.errors import TransportError, UsageError, XpushareError
from xpushare.model.exit_status import ExitStatus
from xpushare.model.overrides import parse_overrides
from xpushare.model.verdict import Verdict
from xpushare.report import artifacts, build, summaries
from xpushare.transport import interrupt
from xpushare.transport.kube_objects import STUCK_REASONS
from xpushare.transport.kubectl import Kubectl, KubeError

SUITE = "legacy"
W1, W2, W3 = "w1_large_add", "w2_medium_add", "w3_idle_add"

#: The images the legacy manifests hard-code (sut-interfaces.md §1.5), for ``legacy_entrypoint``.
LEGACY_IMAGES: dict[str, str] = {
    W1: "registry.cn-hangzhou.aliyuncs.com/lgytest1/xpushare:pytorch-add-5fed3e5b",
    W2: "registry.cn-hangzhou.aliyuncs.com/lgytest1/xpushare:pytorch-add-small-5fed3e5b",
    W3: "registry.cn-hangzhou.aliyuncs.com/lgytest1/xpushare:pytorch-add-idle-small-5fed3e5b",
}

#: Baseline workloads of ``remote-base-test.sh``: kind -> (test name, pod name of seed 004, workload).
BASELINE_WORKLOADS: dict[str, tuple[str, str, str]] = {
    "standard": ("Standard", "pytorch-add-baseline", W1),
    "small": ("Small", "pytorch-small-baseline", W2),
    "idle-small": ("Idle-Small", "pytorch-idle-small-baseline", W3),
}


# ----------------------------------------------------------------------------------------------- backend


@dataclass(frozen=True)
class PodExtra:
    """What a legacy pod has beyond a :class:`PodSpec`: ``app``-style labels, another extended resource
    (``nvidia.com/gpu`` for the native baseline) and ``native`` (no SUT environment variables)."""

    labels: Mapping[str, str] = field(default_factory=dict)
    resource: str | None = None
    native: bool = False


_PREFIX_RE = re.compile(r"^\[pod/(?P<pod>[^/\]]+)/(?P<container>[^\]]+)\] ?")


def split_prefixed(text: str) -> dict[str, str]:
    """``kubectl logs --prefix`` output split into pod -> text, on ``\n`` only.

    (:func:`xpushare.transport.kube_objects.split_prefixed_logs` uses ``str.splitlines``, which also breaks at
    ``\r`` and so drops every tqdm refresh after the first; the legacy tables need the last one.)
    """
    out: dict[str, list[str]] = {}
    for line in text.split("\n"):
        m = _PREFIX_RE.match(line)
        if m:
            out.setdefault(m.group("pod"), []).append(line[m.end():] + "\n")
    return {pod: "".join(lines) for pod, lines in out.items()}


class _Kubectl(Kubectl):
    """:class:`Kubectl` whose :meth:`logs_by_pod` keeps ``\r`` inside lines (see :func:`split_prefixed`)."""

    def logs_by_pod(self, selector: str, *, timestamps: bool = True, since_time: datetime | None = None,
                    container: str | None = None, namespace: Any = None) -> dict[str, str]:
        kw: dict[str, Any] = {} if namespace is None else {"namespace": namespace}
        text = self.logs(selector=selector, timestamps=timestamps, since_time=since_time, container=container,
                         prefix=True, **kw)
        return split_prefixed(text)


class LegacyK8sBackend(K8sBackend):
    """:class:`K8sBackend` whose pods also carry the legacy labels, and optionally run natively or with the
    legacy images' own entrypoints (``legacy_entrypoint`` / ``legacy_images`` of the case parameters)."""

    def __init__(self, cluster: ClusterSpec) -> None:
        super().__init__(cluster)
        self.kubectl = _Kubectl(self.master,
                                kubectl=cluster.kubectl, kubeconfig=cluster.kubeconfig, context=cluster.context,
                                namespace=cluster.namespace)
        self.extras: dict[str, PodExtra] = {}
        self.case_params: Mapping[str, Any] = {}

    def add_extra(self, spec: PodSpec, extra: PodExtra) -> PodSpec:
        """Remember ``extra`` for the pod of ``spec``; returns ``spec``."""
        self.extras[dns1123(spec.name)] = extra
        return spec

    def render_pod(self, spec: PodSpec) -> dict[str, Any]:
        doc = super().render_pod(spec)
        extra = self.extras.get(dns1123(spec.name), PodExtra())
        doc["metadata"]["labels"].update(extra.labels)
        container = doc["spec"]["containers"][0]
        if extra.resource:
            container["resources"]["limits"] = {extra.resource: 1}
        if extra.native:
            container["env"] = [e for e in container["env"] if not e["name"].startswith(self.names.env_prefix)]
        if self.case_params.get("legacy_entrypoint"):
            images = {**LEGACY_IMAGES, **(self.case_params.get("legacy_images") or {})}
            if spec.workload in images:
                container["image"] = images[spec.workload]
                container.pop("command", None)
                container.pop("volumeMounts", None)
                doc["spec"].pop("volumes", None)
        return doc


def _backend(run: CaseRun) -> LegacyK8sBackend:
    if not isinstance(run.backend, LegacyK8sBackend):
        raise UsageError("legacy scenarios need a Kubernetes cluster (mode: k8s)")
    return run.backend


# ------------------------------------------------------------------------------------------------ helpers


#: Where acts print their progress lines: the innermost :func:`run_scenario`'s ``out`` (else stdout).
_STREAMS: list[TextIO] = []


def _say(text: str) -> None:
    print(text, file=_STREAMS[-1] if _STREAMS else sys.stdout, flush=True)


def _generation(run: CaseRun) -> str:
    return _backend(run).names.generation


def _delete_label(run: CaseRun, label: str) -> None:
    """Delete the pods the script's label selects (``app=<label>``) in the workload namespace, as the script did."""
    try:
        _backend(run).kubectl.delete(f"app={label}", wait=True, timeout_s=60)
    except KubeError as exc:
        _say(f"warning: deleting old app={label} pods: {exc}")


def _legacy_spec(run: CaseRun, name: str, workload: str, label: str, *, extra_args: Sequence[str] = (),
                 native: bool = False, resource: str | None = None, extra_labels: Mapping[str, str] | None = None,
                 **kw: Any) -> PodSpec:
    spec = PodSpec(name=name, workload=workload, args=(*run.workload_args(workload), *extra_args), **kw)
    labels = {"app": label, **(extra_labels or {})}
    return _backend(run).add_extra(spec, PodExtra(labels=labels, resource=resource, native=native))


def _start(run: CaseRun, specs: Sequence[PodSpec]) -> None:
    run.plan.setdefault("pods", [])
    run.plan["pods"] += [dns1123(s.name) for s in specs]
    run.plan.setdefault("namespace", run.cluster.namespace)
    run.plan.setdefault("gpu_model", run.cluster.gpu_model)
    run.save_plan()
    run.backend.start_pods(run.case_dir, specs)


def monitor(run: CaseRun, names: Sequence[str], timeout_s: float, *, until: str = "terminal") -> bool:
    """Poll like the drivers (``<HH:MM:SS> [Elapsed: <n>s] <pod>: <cell> | ...``) until every pod ended
    (``until="running"``: left Pending); False on timeout or when a pod can never start. One ``get pods``
    plus one ``logs --tail=20`` per running pod per poll (``legacy_monitor_s`` apart)."""
    backend = _backend(run)
    poll = float(run.params.get("legacy_monitor_s", 5.0))
    start = time.monotonic()
    while True:
        try:
            pods = {p.name: p for p in backend.kubectl.list_pods(backend.selector())}
        except KubeError as exc:
            _say(f"warning: {exc}")
            pods = {}
        cells = []
        for n in names:
            pod = pods.get(n)
            tail = None
            if pod is not None and pod.phase == "Running":
                try:
                    tail = backend.kubectl.logs(n, timestamps=False, tail=20)
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
    run.backend.wait_terminal(run.case_dir, names, 1.0)


def _scheduler_text(run: CaseRun) -> str:
    backend = _backend(run)
    try:
        return backend.scheduler_log(prefix=False, timestamps=False)
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
    backend = _backend(run)
    try:
        nodes = sorted({p.node for p in backend.kubectl.list_pods(backend.selector()) if p.name in names and p.node})
    except KubeError:
        return
    for node in nodes:
        host = backend.host_for_node(node)
        if host is None or host not in backend.smi_hosts:
            continue
        try:
            res = backend.gpu_host(host).run(nvidia_smi.list_command(), timeout=60)
        except TransportError as exc:
            _say(f"warning: nvidia-smi -L on {host}: {exc}")
            continue
        (run.case_dir / f"nvidia_smi_L_{node}.txt").write_text(res.stdout, encoding="utf-8")


def _annotate(run: CaseRun, pod: str, key: str, value: str | None) -> float:
    return _backend(run).annotate(run.case_dir, pod, {key: value})  # type: ignore[dict-item]


def _elapsed_since_dmon(run: CaseRun) -> float:
    return time.time() - _backend(run).case_start.timestamp()


# ------------------------------------------------------------------------------------------------- acts


def _pods_run(label_suffix: str, prefix: str, workload: str, *, oversub: bool) -> Callable[[CaseRun], None]:
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
        _say(f"Test Start Time: {_backend(run).case_start.strftime('%Y-%m-%dT%H:%M:%SZ')}")
        _start(run, specs)
        _finish(run, run.plan["pods"], float(run.params["pod_timeout_s"]))

    return act


def _baseline(run: CaseRun) -> None:
    backend = _backend(run)
    names = backend.names
    if run.params.get("legacy_baseline_remove_sut", True):
        _say(f"Deleting the {names.generation} DaemonSets (as remote-base-test.sh does); restore them with "
             f"`invoke deploy --cluster {run.cluster.name} --skip-setup`")
        backend.kubectl.run(["delete", "daemonset", names.scheduler_daemonset, names.device_plugin_daemonset,
                             "--ignore-not-found", "--wait=true", "--timeout=120s"],
                            namespace=names.namespace, wait_s=120)
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
        phase = next((r.phase for r in run.backend.wait_terminal(run.case_dir, [pod], 1.0) if r.name == pod), "?")
        _say(f"Test {title} Finished. Status: {phase}. Duration ~{int(time.monotonic() - t0)}s (Includes startup)")
    run.backend.wait_terminal(run.case_dir, run.plan["pods"], 1.0)
    _say("===== All Baseline Tests Completed =====")


def _memlimit(run: CaseRun) -> None:
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
    run.backend.wait_terminal(run.case_dir, run.plan["pods"], 1.0)


def _manual_pod(run: CaseRun, name: str, label: str, **kw: Any) -> PodSpec:
    """A long-running W2 pod (``manual-test-pod.yaml``): the workload args plus ``legacy_manual_args``."""
    extra = [str(a) for a in run.params.get("legacy_manual_args") or ()]
    return _legacy_spec(run, name, W2, label, extra_args=extra, **kw)


def _dynamic_limit(run: CaseRun) -> None:
    backend = _backend(run)
    g, ns = _generation(run), run.cluster.namespace
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


def _compute_limit(run: CaseRun) -> None:
    g = _generation(run)
    label, manual = f"{g}-manual-test", "manual-dynamic-test"
    _delete_label(run, label)
    _start(run, [_manual_pod(run, manual, label)])
    if not monitor(run, [manual], 60.0, until="running"):
        raise XpushareError(f"the manual test pod {manual} did not start within 60 s")
    _capture_gpu_lists(run, [manual])
    _phases(run, [("Step 1 (30%)", {manual: 30}, "collect"), ("Step 2 (80%)", {manual: 80}, "collect"),
                  ("Step 3 (removed)", {manual: None}, "final")])


def _complex(run: CaseRun) -> None:
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
    backend = _backend(run)
    ns = run.cluster.namespace
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
    run.backend.wait_running(run.case_dir, run.plan["pods"], 1.0)


def _complex2(run: CaseRun) -> None:
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
    run.backend.wait_terminal(run.case_dir, run.plan["pods"], 1.0)


def _smoke(run: CaseRun) -> None:
    backend = _backend(run)
    g = _generation(run)
    label = f"{g}-remote-smoke"
    _delete_label(run, label)
    pod = f"{g}-smoke-{dns1123(run.cluster.name, 40)}"
    run.plan.update(metric_prefix=backend.names.metric_prefix, backend=run.cluster.backend)
    extra = [str(a) for a in run.params.get("legacy_smoke_args") or ()]
    spec = _legacy_spec(run, pod, W2, label, extra_args=extra, extra_labels={"smoke-cluster": run.cluster.name})
    _start(run, [spec])
    _finish(run, [pod], float(run.params["legacy_smoke_timeout_s"]))


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
             _pods_run("cross-gpu", "cross-gpu", W1, oversub=True), judgments.judge_all_pass,
             {**_POD_RUN, "legacy_pods": 3}, count=3),
    Scenario("small", "remote-test-small.sh (tests/scripts/test-small.sh)", "Small workload (pytorch-add-small)",
             "W2 (pytorch-add-small)", "N pods <gen>-small-<i> at once; wait until all end",
             "pods/*.log, scheduler.log", _pods_run("small-workload", "small", W2, oversub=False),
             judgments.judge_all_pass, {**_POD_RUN, "legacy_pods": 10}, count=10),
    Scenario("idle-small", "remote-test-idle-small.sh (tests/scripts/test-idle-small.sh)",
             "Idle small workload (pytorch-add-idle-small)", "W3 (pytorch-add-idle-small)",
             "N pods <gen>-idle-small-<i> at once; wait until all end", "pods/*.log, scheduler.log",
             _pods_run("idle-small-workload", "idle-small", W3, oversub=False), judgments.judge_all_pass,
             {**_POD_RUN, "legacy_pods": 10}, count=10),
    Scenario("baseline", "remote-base-test.sh", "Native baseline (nvidia.com/gpu, no SUT)", "W1, W2, W3",
             "one native pod per workload, one after the other (SUT DaemonSets deleted first)",
             "pods/*.log, pods.json (durations)", _baseline, judgments.judge_baseline,
             {**_POD_RUN, "legacy_baseline_resource": "nvidia.com/gpu", "legacy_baseline_remove_sut": True,
              "legacy_baseline_workloads": list(BASELINE_WORKLOADS)}, setup=False),
    Scenario("memlimit", "remote-test-memlimit.sh", "Static memory limit (env)", "W2",
             "3 pods one after the other: low limit (must be refused), high limit, no limit",
             "pods/*.log (rejection / OOM lines, PASS)", _memlimit, judgments.judge_memlimit,
             {"legacy_monitor_s": 3.0, "pod_timeout_s": 600, "legacy_memlimit_low": "1Gi",
              "legacy_memlimit_high": "4Gi", "legacy_memlimit_reject_timeout_s": 60,
              "legacy_entrypoint": False, "legacy_images": {}}),
    Scenario("dynamic-limit", "remote-test-dynamic-limit.sh", "Dynamic memory limit (annotations)", "W2 (long)",
             "annotate 2Gi, 4Gi, remove, 1Gi on a running pod; a new client under 1Gi must be refused",
             "scheduler.log (Memory limit changed, Sending UPDATE_LIMIT), pods/*.log", _dynamic_limit,
             judgments.judge_dynamic_limit,
             {"legacy_monitor_s": 2.0, "legacy_manual_args": ["--iters", "4000000"], "legacy_step_s": 10,
              "legacy_dynamic_limits": ["2Gi", "4Gi"], "legacy_dynamic_low": "1Gi", "legacy_late_timeout_s": 300,
              "legacy_entrypoint": False, "legacy_images": {}}),
    Scenario("compute-limit", "remote-test-compute-limit.sh", "Dynamic compute limit with dmon", "W2 (long)",
             "annotate core 30, 80, remove on a running pod; dmon sm per phase vs the limit",
             "scheduler.log (Compute limit changed), remote_<node>_dmon.txt, nvidia_smi_L_<node>.txt",
             _compute_limit, judgments.judge_compute, dict(_PHASED)),
    Scenario("complex", "remote-test-complex.sh", "Two pods, changing compute limits", "W2 (long) x 2",
             "2 pods: 30/60, then 70/20, then removed; dmon sm per GPU and phase vs the limits",
             "scheduler.log, remote_<node>_dmon.txt, nvidia_smi_L_<node>.txt", _complex, judgments.judge_compute,
             dict(_PHASED)),
    Scenario("complex2", "remote-test-complex2.sh", "Four pods at a 50% core limit", "W2 x 4",
             "pods 1-2, settle, pods 3-4, each annotated core 50; wait until all end",
             "pods/*.log, scheduler.log (copied to scheduler<suffix>.log)", _complex2, judgments.judge_complex2,
             {"legacy_monitor_s": 10.0, "pod_timeout_s": 1800, "legacy_core_limit": 50, "legacy_settle_s": 8,
              "legacy_log_suffix": "", "legacy_entrypoint": False, "legacy_images": {}}),
    Scenario("smoke", "remote-test-smoke.sh", "Smoke: probe pod and metrics endpoint", "W2 (short)",
             "one probe pod; /healthz and /metrics of the scheduler on its node",
             "pods/*.log, metrics.txt, metrics_health.txt", _smoke, judgments.judge_smoke,
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
    run_id = req.run_id or artifacts.new_run_id(datetime.now())
    try:
        artifacts.validate_run_id(run_id)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
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
    _write_meta(run_dir, run_id, cluster.name, case.case_id, started=True)
    print(f"===== Running Test: {sc.title} ({sc.script}) -> {run_dir} =====", file=out, flush=True)
    backend = LegacyK8sBackend(cluster)
    backend.case_params = params
    record: dict[str, Any] | None = None
    interrupted = False
    _STREAMS.append(out)
    try:
        with interrupt.installed():
            try:
                backend.prepare_run(run_id)
                record, interrupted = lifecycle.run_case(case, run_id=run_id, run_dir=run_dir, cluster=cluster,
                                                      backend=backend, params=params, required=True)
            except KeyboardInterrupt:
                interrupted = True
            finally:
                backend.close()
    finally:
        _STREAMS.pop()
    case_dir = artifacts.case_dir(run_dir, cluster.name, SUITE, case.case_id)
    if record is not None:
        _post_process(sc, case_dir, record, params, cluster)
        print(render_case_report(sc, case_dir, record, params), file=out, flush=True)
    status = driver.exit_status_for([record] if record else [], interrupted)
    meta = _write_meta(run_dir, run_id, cluster.name, case.case_id, started=False, interrupted=interrupted,
                       exit_status=int(status))
    paths = build.build(run_dir, required=set(meta.get("required") or []))
    print(f"[xpushare] legacy/{sc.name}: {record['status'] if record else 'INTERRUPTED'}; report: {paths.markdown}",
          file=out, flush=True)
    if interrupted:
        print(f"[xpushare] interrupted: run again with --run-id {run_id}", file=out)
    return status


def _write_meta(run_dir: Path, run_id: str, cluster: str, case_id: str, *, started: bool,
                **extra: Any) -> dict[str, Any]:
    """Create or extend ``run.json`` (clusters and required case ids accumulate across scenarios of one run)."""
    meta = artifacts.read_run_meta(run_dir) or {"run_id": run_id, "started": datetime.now().astimezone().isoformat(),
                                                "selection": "legacy"}
    meta["clusters"] = sorted(set(meta.get("clusters") or []) | {cluster})
    meta["required"] = sorted(set(meta.get("required") or []) | {case_id})
    meta["argv"] = sys.argv[1:]
    if not started:
        meta.update(ended=datetime.now().astimezone().isoformat(), **extra)
        meta["counts"] = summaries.counts(artifacts.load_results(run_dir))
    artifacts.write_run_meta(run_dir, meta)
    return meta


def _post_process(sc: Scenario, case_dir: Path, record: Mapping[str, Any], params: Mapping[str, Any],
                  cluster: ClusterSpec) -> None:
    """Files the scripts left beside their output: complex2's ``scheduler<suffix>.log``, the baseline file."""
    if sc.name == "complex2" and (case_dir / "scheduler.log").exists():
        suffix = str(params.get("legacy_log_suffix") or "")
        if suffix:
            shutil.copyfile(case_dir / "scheduler.log", case_dir / f"scheduler{suffix}.log")
    if sc.name == "baseline":
        write_baseline_file(case_dir, record, cluster)


def write_baseline_file(case_dir: Path, record: Mapping[str, Any], cluster: ClusterSpec) -> Path | None:
    """``baseline.yaml`` in the case dir from the passed native pods, usable as ``baseline-compare --baseline``.

    Returns its path, or None when no pod passed (nothing measured, nothing written).
    """
    plan = load_plan(case_dir)
    ev = Evidence.load(case_dir)
    rows = {r.name: r for r in tables.pod_rows(list(plan.get("pods") or []), ev.pods, ev.logs)}
    workloads = {}
    for pod, kind in (plan.get("workloads") or {}).items():
        row = rows.get(pod)
        if row is not None and row.passed and row.duration_s is not None and not row.estimated:
            workloads[kind] = {"duration_s": row.duration_s, "pod": pod, "bound": BOUND.get(kind, "compute")}
    if not workloads:
        return None
    doc = {"description": f"native baseline measured by invoke legacy.baseline, run {record.get('run_id')}",
           "gpu_model": cluster.gpu_model, "cluster": cluster.name, "source": f"run {record.get('run_id')}",
           "unit": "seconds (container start to finish)", "workloads": workloads}
    path = case_dir / "baseline.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return path


def format_checks(checks: Sequence[Mapping[str, Any]]) -> str:
    """The verdict's checks as ``[PASS]``/``[FAIL]``/``[N/A]`` lines with their details."""
    lines = ["Checks:"]
    for c in checks:
        mark = "[PASS]" if c.get("ok") is True else "[FAIL]" if c.get("ok") is False else "[N/A] "
        lines.append(f"  {mark} {c.get('name')}: {c.get('expression')}")
        if c.get("detail"):
            lines.append(f"         {c['detail']}")
    return "\n".join(lines)


def memlimit_blocks(plan: Mapping[str, Any], ev: Evidence, results: Mapping[str, str]) -> str:
    """Per test of ``remote-test-memlimit.sh``: the outcome line and the last log lines (20 for test 1, else 10)."""
    out = []
    for test in plan.get("tests") or []:
        key = f"Test {test['n']} ({test['label']})"
        status = results.get(key, "ERROR")
        mark = "[INFO] ✅" if status == "PASS" else "[ERROR] ❌"
        want = "refused" if test["expect"] == "rejected" else "passed"
        out.append(f"{mark} Test {test['n']} {'PASSED' if status == 'PASS' else status}: {test['label']} "
                   f"(pod {test['pod']} must be {want})")
        log = ev.logs.get(str(test["pod"]))
        tail = (log or "(no log)").rstrip("\n").split("\n")[-(20 if test["n"] == 1 else 10):]
        out += [f"    {line}" for line in tail]
    return "\n".join(out)


def render_case_report(sc: Scenario, case_dir: Path, record: Mapping[str, Any], params: Mapping[str, Any]) -> str:
    """The script's closing output, rebuilt from the stored evidence and verdict of the case."""
    plan = load_plan(case_dir)
    ev = Evidence.load(case_dir)
    pods = list(plan.get("pods") or [])
    parts: list[str] = []
    metrics = record.get("metrics") or {}
    if sc.name not in ("baseline", "memlimit"):
        log = ev.text("scheduler.log")
        parts.append(tables.format_distribution(tables.distribution(log)) if log is not None
                     else f"{tables.DISTRIBUTION_TITLE}\n(no scheduler log captured)")
    if sc.name == "memlimit":
        parts.append(memlimit_blocks(plan, ev, metrics.get("tests") or {}))
        parts.append(judgments.memlimit_summary(metrics.get("tests") or {}))
    elif sc.name in ("compute-limit", "complex", "dynamic-limit"):
        if sc.name != "dynamic-limit":
            parts.append(judgments.format_compute_analysis(metrics, float(params.get("legacy_util_tolerance", 15))))
        parts.append(format_checks(record.get("checks") or []))
    else:
        rows = tables.pod_rows(pods, ev.pods, ev.logs)
        parts.append(tables.format_pod_table(rows))
        parts.append(tables.format_stats(tables.stats(rows)))
        if sc.name in ("smoke", "complex2"):
            parts.append(format_checks(record.get("checks") or []))
    if sc.name == "baseline" and (case_dir / "baseline.yaml").exists():
        parts.append(f"baseline file: {case_dir / 'baseline.yaml'} (use with invoke baseline-compare --baseline)")
    status, summary = record.get("status"), record.get("summary", "")
    if status == "PASS":
        parts.append(tables.banner(f"✅ 测试通过 PASS: {sc.title}"))
    else:
        parts.append(tables.banner(f"❌ {status}: {sc.title}\n{summary}"))
    return "\n\n".join(parts)
