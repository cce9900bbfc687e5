"""kubectl for a cluster of the inventory: the one place that turns a :class:`ClusterSpec`'s ``kubectl``,
``kubeconfig``, ``context`` and ``namespace`` into a :class:`~xpushare.transport.kubectl.Kubectl` on its master.

Used by the k8s backend, the SUT actions (``invoke sut.*``), ``deploy``, ``envcheck`` and ``metrics-check``.
"""

from __future__ import annotations

from xpushare.inventory.schema import ClusterSpec, HostSpec
from xpushare.model.errors import UsageError
from xpushare.transport.base import Host
from xpushare.transport.kube_retry import RetryPolicy
from xpushare.transport.kubectl import Kubectl

__all__ = ["kubectl_for", "master_spec"]


def master_spec(cluster: ClusterSpec, purpose: str = "run kubectl on") -> HostSpec:
    """The cluster's first host with role ``master`` (inventory order).

    Raises:
        UsageError: the cluster has none (``purpose`` completes the message: "no host with role 'master' to ...").
    """
    masters = cluster.by_role("master")
    if not masters:
        raise UsageError(f"cluster {cluster.name}: no host with role 'master' to {purpose}")
    return masters[0]


def kubectl_for(cluster: ClusterSpec, master: Host, *, namespace: str | None = None,
                request_timeout_s: float | None = None) -> Kubectl:
    """kubectl run on ``master`` (a connected host of ``cluster``) with the cluster's binary, kubeconfig and
    context; its default namespace is ``namespace``, else the cluster's home namespace (the inventory's
    ``namespace``, else ``default``: where the run lease lives);
    ``request_timeout_s``: kubectl's ``--request-timeout`` (None: the Kubectl default). Reads are retried after a
    transient failure as the cluster's ``kubectl_read_retries`` / ``kubectl_retry_backoff_s`` say.

    Raises:
        UsageError: those parameters are not valid (:meth:`RetryPolicy.from_params`).
    """
    extra = {} if request_timeout_s is None else {"request_timeout_s": request_timeout_s}
    return Kubectl(master, kubectl=cluster.kubectl, kubeconfig=cluster.kubeconfig, context=cluster.context,
                   namespace=cluster.home_namespace if namespace is None else namespace,
                   retry=RetryPolicy.from_params(cluster.params), **extra)
