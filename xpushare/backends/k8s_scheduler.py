"""The SUT's scheduler on a Kubernetes cluster, as the k8s backend reaches it: its pods (one per node), a GET
of its HTTP endpoint at the pod IP from the GPU host of that node, its processes, and a rollout restart.

The scheduler pod's IP is reachable from the nodes, not necessarily from the master, so every request runs
``curl`` on the node's inventory GPU host (:meth:`KubeAccess.host_for_node`); the capture's format is
:mod:`xpushare.evidence.scrape_capture`'s. Source: docs/sut/kubernetes.md (names, labels), docs/sut/metrics.md
(endpoints).
"""

from __future__ import annotations

import time

from xpushare.backends import scheduler_proc
from xpushare.backends.base import KubeAccess, SchedulerFacts, SchedulerRestart
from xpushare.evidence.scrape_capture import capture_on, endpoint_url
from xpushare.inventory.sut import SutNames
from xpushare.model.errors import TransportError, XpushareError
from xpushare.transport.kube_errors import KubeError
from xpushare.transport.kube_objects import Pod
from xpushare.transport.kubectl import Kubectl

__all__ = ["curl_scheduler", "restart_scheduler", "scheduler_facts", "scheduler_pods"]


def scheduler_pods(kubectl: Kubectl, names: SutNames) -> dict[str, Pod]:
    """Node name -> the scheduler pod on it (``-l <scheduler label> -n <SUT namespace>``); empty when kubectl
    fails (never raises)."""
    try:
        pods = kubectl.list_pods(names.scheduler_label, namespace=names.namespace)
    except KubeError:
        return {}
    return {p.node: p for p in pods if p.node}


def curl_scheduler(kube: KubeAccess, node: str, path: str, sched: dict[str, Pod] | None = None) -> str | None:
    """A capture of ``GET http://<pod IP>:<metrics port><path>`` run on the GPU host of ``node``: curl's stdout
    with the ``HTTP_CODE=`` trailer and, when curl failed, a one-line ``# curl:`` note; the
    ``# scrape of ... failed`` capture when SSH failed. None when ``node`` runs no scheduler pod with an IP or
    no inventory GPU host maps to it. ``sched``: a :func:`scheduler_pods` answer to reuse."""
    sched = sched if sched is not None else kube.scheduler_pods()
    pod = sched.get(node)
    host_name = kube.host_for_node(node)
    if pod is None or not pod.pod_ip or host_name is None:
        return None
    return capture_on(kube.gpu_host(host_name), host_name, endpoint_url(pod.pod_ip, kube.metrics_port, path))


def scheduler_facts(kube: KubeAccess, names: SutNames, *, metrics: bool = False) -> list[SchedulerFacts]:
    """One entry per node running a scheduler pod: the scheduler processes its GPU host shows (every one
    matching the binary's name), ``/healthz`` and ``/metrics`` at the pod IP, from that host; ``instance``
    the pod uid, ``healthy`` also needs every container ready. A host that fails gets ``error``."""
    out: list[SchedulerFacts] = []
    for node, pod in sorted(kube.scheduler_pods().items()):
        host_name = kube.host_for_node(node)
        ready = bool(pod.containers) and all(c.ready for c in pod.containers)
        if host_name is None or not pod.pod_ip:
            out.append(SchedulerFacts(node, instance=pod.uid, restarts=pod.restart_count, pod=pod.name,
                                      error="no pod IP" if host_name else "no inventory GPU host maps to it"))
            continue
        base = endpoint_url(pod.pod_ip, kube.metrics_port)
        argv = scheduler_proc.argv(names.scheduler_binary, base + "/healthz", base + "/metrics" if metrics else None)
        try:
            got = scheduler_proc.parse(kube.gpu_host(host_name).run(argv, timeout=60).stdout)
        except TransportError as exc:
            out.append(SchedulerFacts(node, instance=pod.uid, restarts=pod.restart_count, pod=pod.name,
                                      error=exc.message))
            continue
        out.append(SchedulerFacts(node, got.processes, pod.uid, pod.restart_count, ready and bool(got.healthy),
                                  got.metrics_text, pod.name, got.error))
    return out


def restart_scheduler(kube: KubeAccess, names: SutNames) -> SchedulerRestart:
    """``kubectl rollout restart daemonset/<scheduler>``; returns at once (watch the rollout yourself).

    Raises:
        XpushareError: kubectl refused the restart.
    """
    before = {node: pod.uid for node, pod in kube.scheduler_pods().items()}
    ds = names.scheduler_daemonset
    at = time.time()
    try:
        kube.restart_daemonset(ds)
    except KubeError as exc:
        raise XpushareError(f"rollout restart daemonset/{ds}: {exc}") from exc
    return SchedulerRestart(f"rollout restart daemonset/{ds}", at, dict(before))
