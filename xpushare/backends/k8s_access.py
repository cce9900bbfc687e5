"""The parts of the Kubernetes backend (:class:`~xpushare.backends.base.BackendParts`): its
:class:`~xpushare.backends.base.KubeAccess` (kubectl on the master, curl from the GPU nodes), scheduler control,
annotations, placement and evidence rotation.

Each part is a view of one :class:`~xpushare.backends.k8s.K8sBackend`: it shares the backend's state (its
kubectl, master and GPU host connections, namespaces, the current case), so a part never outlives or copies it.
Source: docs/sut/kubernetes.md (names, labels, annotations), docs/sut/metrics.md (the scheduler's endpoints).
"""

from __future__ import annotations

import contextlib
import json
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from xpushare.backends import k8s_nodes, k8s_scheduler
from xpushare.backends.base import (
    Annotator,
    EvidenceRotation,
    KubeAccess,
    Placement,
    SchedulerControl,
    SchedulerFacts,
    SchedulerRestart,
)
from xpushare.backends.k8s_names import dns1123
from xpushare.model.atomic_file import atomic_write_text, open_append
from xpushare.model.errors import TransportError
from xpushare.transport.kube_errors import KubeError
from xpushare.transport.kube_objects import DaemonSetStatus, Node, Pod

if TYPE_CHECKING:  # the backend builds its parts: no import cycle at run time
    from xpushare.backends.k8s import K8sBackend
    from xpushare.transport.base import Host


class K8sAccess(KubeAccess):
    """The Kubernetes-only operations of a :class:`~xpushare.backends.k8s.K8sBackend`."""

    def __init__(self, backend: K8sBackend) -> None:
        self.backend = backend

    def kubectl_calls(self) -> int:
        return self.backend.kubectl.calls

    def kubectl_retries(self) -> int:
        return self.backend.kubectl.retries

    def pod_namespace(self, tenant: str | None = None) -> str:
        return self.backend.pod_namespace(tenant)

    @property
    def case_start(self) -> datetime:
        return self.backend.case_start

    @property
    def metrics_port(self) -> int:
        return int(self.backend.params["metrics_port"])

    @property
    def vgpus_per_gpu(self) -> int:
        return int(self.backend.params["vgpus_per_gpu"])

    def node_hosts(self) -> dict[str, str]:
        return dict(self.backend.node_host)

    def host_for_node(self, node: str | None) -> str | None:
        """The inventory GPU host of a Kubernetes node: same name, else same address as its InternalIP."""
        return None if node is None else self.backend.node_host.get(node)

    def gpu_host(self, name: str) -> Host:
        return self.backend.gpu_host(name)

    # -- the SUT's pods and DaemonSets ----------------------------------------------------------------
    def sut_pods(self, selector: str) -> list[Pod]:
        return self.backend.kubectl.list_pods(selector, namespace=self.backend.names.namespace)

    def sut_logs(self, selector: str) -> str:
        return self.backend.kubectl.logs(selector=selector, prefix=True, namespace=self.backend.names.namespace)

    def previous_log(self, pod: str) -> str:
        return self.backend.kubectl.logs(pod, previous=True, namespace=self.backend.names.namespace)

    def restart_daemonset(self, name: str) -> None:
        self.backend.kubectl.rollout_restart("daemonset", name, namespace=self.backend.names.namespace)

    def await_daemonset(self, name: str, timeout_s: float) -> str:
        return self.backend.kubectl.rollout_status("daemonset", name, namespace=self.backend.names.namespace,
                                                   timeout_s=timeout_s)

    def daemonset_status(self, name: str) -> DaemonSetStatus:
        return self.backend.kubectl.get_daemonset(name, namespace=self.backend.names.namespace)

    def daemonset_env(self, name: str, variable: str) -> str | None:
        doc = self.backend.kubectl.get_json(["get", "daemonset", name], namespace=self.backend.names.namespace)
        value = None
        for c in doc.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
            for e in c.get("env") or []:
                if e.get("name") == variable:
                    value = e.get("value")
        return value

    def set_daemonset_env(self, name: str, variable: str, value: str | None) -> None:
        setting = f"{variable}={value}" if value is not None else f"{variable}-"
        self.backend.kubectl.run(["set", "env", f"daemonset/{name}", setting], namespace=self.backend.names.namespace)

    # -- nodes --------------------------------------------------------------------------------------
    def nodes(self) -> list[Node]:
        return self.backend.kubectl.list_nodes()

    def node(self, name: str) -> Node:
        return self.backend.kubectl.get_node(name)

    def drain_node(self, node: str, *, timeout_s: float, grace_period_s: int | None = None) -> str:
        return self.backend.kubectl.drain(node, timeout_s=timeout_s, grace_period_s=grace_period_s)

    def uncordon_node(self, node: str) -> None:
        self.backend.kubectl.uncordon(node)

    # -- the scheduler pods ----------------------------------------------------------------------------
    def scheduler_pods(self) -> dict[str, Pod]:
        return k8s_scheduler.scheduler_pods(self.backend.kubectl, self.backend.names)

    def curl_scheduler(self, node: str, path: str, sched: dict[str, Pod] | None = None) -> str | None:
        return k8s_scheduler.curl_scheduler(self, node, path, sched)

    def scrape_metrics(self, name: str, node: str | None = None) -> str | None:
        """Scrape ``/metrics`` of the scheduler serving ``node`` (default: the first pod's) into ``name``."""
        case_dir = self.backend.case_dir
        if node is None:
            try:
                pods = self.backend.list_case_pods()
            except KubeError:
                return None
            nodes = sorted({p.node for p in pods if p.node})
            if not nodes:
                return None
            node = nodes[0]
        body = self.curl_scheduler(node, "/metrics")
        if body is None:
            return None
        atomic_write_text(case_dir / name, body)
        return name

    def scheduler_log(self, *, prefix: bool = True, timestamps: bool = True) -> str:
        names = self.backend.names
        return self.backend.kubectl.logs(selector=names.scheduler_label, since_time=self.case_start,
                                         timestamps=timestamps, prefix=prefix, namespace=names.namespace)

    def delete_pod(self, name: str, timeout_s: float = 60.0) -> None:
        self.backend.kubectl.delete(name=dns1123(name), wait=True, timeout_s=timeout_s)


class K8sScheduler(SchedulerControl):
    """The scheduler DaemonSet's pods as processes (:mod:`xpushare.backends.k8s_scheduler`)."""

    def __init__(self, kube: K8sAccess) -> None:
        self.kube = kube

    def scheduler_facts(self, *, metrics: bool = False) -> list[SchedulerFacts]:
        """One entry per node running a scheduler pod (:func:`k8s_scheduler.scheduler_facts`)."""
        return k8s_scheduler.scheduler_facts(self.kube, self.kube.backend.names, metrics=metrics)

    def restart_scheduler(self) -> SchedulerRestart:
        """``kubectl rollout restart daemonset/<scheduler>``; returns at once (watch the rollout yourself)."""
        return k8s_scheduler.restart_scheduler(self.kube, self.kube.backend.names)


class K8sAnnotator(Annotator):
    """``kubectl annotate`` of the case's pods."""

    def __init__(self, backend: K8sBackend) -> None:
        self.backend = backend

    def annotate(self, pod: str, annotations: dict[str, str]) -> float:
        """Annotate a running pod; the call time (unix s) goes to ``annotations.jsonl`` for latency checks."""
        case_dir = self.backend.case_dir
        names = self.backend.names
        keys = {"core": names.annotation_core_limit, "memory": names.annotation_memory_limit}
        full = {keys.get(k, k): v for k, v in annotations.items()}
        when = time.time()
        self.backend.kubectl.annotate(dns1123(pod), full)
        with open_append(case_dir / "annotations.jsonl") as fh:
            fh.write(json.dumps({"time": when, "pod": dns1123(pod), "annotations": full}) + "\n")
        return when


class K8sPlacement(Placement):
    """The cluster's nodes as places for pods: allocatable vGPUs per node (:mod:`xpushare.backends.k8s_nodes`)."""

    def __init__(self, backend: K8sBackend) -> None:
        self.backend = backend

    def gpu_node_hosts(self) -> dict[str, Host]:
        b = self.backend
        return {name: b.gpu_host(name) for name in sorted(set(b.node_host.values())) if name in b.gpu_specs}

    def gpu_count(self) -> int | None:
        """GPUs of the schedulable, ready nodes: their allocatable vGPUs / ``vgpus_per_gpu`` (at least 1 per
        node that offers the resource)."""
        b = self.backend
        return k8s_nodes.gpu_count(b.kubectl.list_nodes(), b.names.resource, int(b.params["vgpus_per_gpu"]))

    def colocation_target(self) -> tuple[str | None, int]:
        """The schedulable node with the fewest GPUs and its GPU count (:func:`k8s_nodes.colocation_target`)."""
        b = self.backend
        return k8s_nodes.colocation_target(b.kubectl.list_nodes(), b.names.resource, int(b.params["vgpus_per_gpu"]))


class K8sRotation(EvidenceRotation):
    """The case-long streams on the master (``kubectl logs -f`` of the scheduler) and the GPU hosts (dmon)."""

    def __init__(self, backend: K8sBackend) -> None:
        self.backend = backend

    def forget_pod_specs(self) -> None:
        self.backend.pods.clear()

    def restart_log_streams(self, dest: Path, tag: str, *, since: datetime | None = None) -> list[Path]:
        b = self.backend
        dest.mkdir(parents=True, exist_ok=True)
        got: list[Path] = []
        if b.stream_name:
            start = datetime.now(timezone.utc) if since is None else since
            log = b.master.stop(b.stream_name)
            local = dest / f"scheduler-{tag}.log"
            try:
                b.master.get(log, local)
                got.append(local)
            finally:
                argv = b.kubectl.logs_follow_argv(b.names.scheduler_label, start, namespace=b.names.namespace)
                b.master.spawn(b.stream_name, argv)
        for name in sorted(b.smi_hosts):
            host = b.gpu_host(name)
            spawn = b.dmon_spawn(name)
            with contextlib.suppress(TransportError):
                log = host.stop(spawn)
                local = dest / f"dmon-{name}-{tag}.txt"
                host.get(log, local)
                got.append(local)
            host.spawn(spawn, b.nvidia_smi_argv(name, "dmon", "-s", "u", "-d", "1"))
        return got
