"""Partial clusters: a run goes on with the hosts that answer (docs/reliability.md §partial clusters).

A host that does not answer is UNREACHABLE, with why (:attr:`~xpushare.model.errors.HostUnreachable.why`): run.json's
``unreachable``, the run report, an event, exit status 3. What needs it fails naming it: a cluster none of whose
lease hosts answers (Kubernetes: the master; host mode: every GPU host) has every case ERROR; otherwise the backend
goes on without the host (:meth:`~xpushare.backends.base.Backend.unreachable`) and a case that needs it (a pod
placed there, its scheduler, the cluster's GPU count) is ERROR naming it.
"""

from __future__ import annotations

from xpushare.inventory.schema import ClusterSpec
from xpushare.model.errors import HostUnreachable

__all__ = ["cut_off_reason", "role_of"]


def role_of(cluster: ClusterSpec, host: str) -> str:
    """``host``'s role in ``cluster`` as the reports name it: ``master`` (Kubernetes) or ``gpu`` first, else its
    first role (``host`` when the inventory names none, or the host is not the cluster's)."""
    spec = next((h for h in cluster.hosts if h.name == host), None)
    roles = list(spec.roles) if spec is not None else []
    for role in ("master", "gpu") if cluster.is_kubernetes else ("gpu", "master"):
        if role in roles:
            return role
    return roles[0] if roles else "host"


def cut_off_reason(cluster: ClusterSpec, error: HostUnreachable) -> str:
    """The ERROR summary of each case of a cluster that cannot be reached at all."""
    what = "its master does not answer" if cluster.is_kubernetes else "no GPU host of it answers"
    return f"cluster {cluster.name} unreachable ({what}): {error.host}: {error.describe()}"
