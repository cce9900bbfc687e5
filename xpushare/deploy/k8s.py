"""The SUT of a Kubernetes cluster is its two DaemonSets (scheduler, device plugin): ``invoke sut.status|start|
stop|restart`` act on them through kubectl on the master.

``stop`` adds the node selector :data:`STOP_LABEL` (a label no node carries) to both DaemonSets, so Kubernetes
removes their pods and keeps the objects; ``start`` removes it again; ``restart`` is ``kubectl rollout restart``;
every action but ``stop`` waits for the rollout. Source: docs/sut/kubernetes.md (names, namespace, labels).
"""

from __future__ import annotations

import json

from xpushare.inventory.schema import ClusterSpec
from xpushare.inventory.sut import sut_names
from xpushare.transport.cluster_kubectl import kubectl_for, master_spec
from xpushare.transport.hosts import connect

#: The node selector that parks the SUT's DaemonSets (no node has it).
STOP_LABEL = "xpushare.io/sut-stopped"
ROLLOUT_TIMEOUT_S = 180.0


def daemonsets(cluster: ClusterSpec) -> tuple[str, str]:
    """The scheduler's and the device plugin's DaemonSet names of the cluster's SUT generation."""
    names = sut_names(cluster.generation)
    return names.scheduler_daemonset, names.device_plugin_daemonset


def run_action(cluster: ClusterSpec, action: str) -> list[tuple[str, str, bool]]:
    """``status``/``start``/``stop``/``restart`` on both DaemonSets; one ``(daemonset, detail, ok)`` per DaemonSet
    (``status``: ok when rolled out with at least one pod; ``stop``: ok when no pod is desired any more).

    Raises:
        UsageError: the cluster has no master; TransportError: the master is unreachable; KubeError: a kubectl
            call failed.
    """
    master = connect(master_spec(cluster))
    kubectl = kubectl_for(cluster, master, namespace=sut_names(cluster.generation).namespace)  # the SUT's DaemonSets
    out: list[tuple[str, str, bool]] = []
    try:
        for ds in daemonsets(cluster):
            if action in ("start", "stop"):
                selector = {STOP_LABEL: "true" if action == "stop" else None}
                patch = {"spec": {"template": {"spec": {"nodeSelector": selector}}}}
                kubectl.run(["patch", "daemonset", ds, "--type", "merge", "-p", json.dumps(patch)], check=True)
            elif action == "restart":
                kubectl.rollout_restart("daemonset", ds)
            if action in ("start", "restart"):
                kubectl.rollout_status("daemonset", ds, timeout_s=ROLLOUT_TIMEOUT_S)
            st = kubectl.get_daemonset(ds)
            detail = f"desired {st.desired}, ready {st.ready}, updated {st.updated}, available {st.available}"
            ok = st.desired == 0 if action == "stop" else (st.rolled_out and st.desired > 0)
            out.append((ds, detail, ok))
    finally:
        master.close()
    return out
