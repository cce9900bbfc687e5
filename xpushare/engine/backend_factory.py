"""The backend of a cluster, chosen by its mode: the one place besides the inventory schema that reads the
mode string (``tests/unit/test_mode_strings.py``). :func:`make_backend` builds it; :func:`capabilities_of` says what it
will offer without contacting a host (dry runs)."""

from __future__ import annotations

from xpushare.backends.base import Backend
from xpushare.inventory.schema import MODE_HOST, MODE_K8S, ClusterSpec
from xpushare.model.errors import UsageError


def make_backend(cluster: ClusterSpec) -> Backend:
    """The backend for the cluster's mode."""
    if cluster.mode == MODE_HOST:
        from xpushare.backends.host import HostBackend

        return HostBackend(cluster)
    if cluster.mode == MODE_K8S:
        from xpushare.backends.k8s import K8sBackend

        return K8sBackend(cluster)
    raise UsageError(f"cluster {cluster.name!r}: mode {cluster.mode!r} is not available in this version")


def capabilities_of(cluster: ClusterSpec) -> frozenset[str]:
    """The capabilities :func:`make_backend` 's backend will have on ``cluster``, without making it (no host is
    contacted): what a dry run needs to tell which cases SKIP."""
    if cluster.mode == MODE_HOST:
        from xpushare.backends.host import host_capabilities

        return host_capabilities(cluster)
    if cluster.mode == MODE_K8S:
        from xpushare.backends.k8s import k8s_capabilities

        return k8s_capabilities(cluster)
    raise UsageError(f"cluster {cluster.name!r}: mode {cluster.mode!r} is not available in this version")
