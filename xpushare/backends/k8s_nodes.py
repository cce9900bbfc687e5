"""GPU figures of a Kubernetes cluster's nodes, from ``kubectl get nodes``
(:class:`~xpushare.transport.kube_objects.Node`).

A node's GPUs are its allocatable vGPUs (the SUT's extended resource) / ``vgpus_per_gpu``, at least 1 when it
offers the resource at all; only schedulable, ready nodes count.
"""

from __future__ import annotations

from collections.abc import Iterable

from xpushare.model.errors import XpushareError
from xpushare.transport.kube_objects import Node

__all__ = ["colocation_target", "gpu_count", "node_gpus"]


def node_gpus(nodes: Iterable[Node], resource: str, vgpus_per_gpu: int) -> dict[str, int]:
    """Node name -> GPU count of every schedulable, ready node that offers ``resource``."""
    out: dict[str, int] = {}
    for node in nodes:
        vgpus = node.allocatable_count(resource)
        if node.unschedulable or not node.ready or vgpus <= 0:
            continue
        out[node.name] = max(1, vgpus // vgpus_per_gpu)
    return out


def gpu_count(nodes: Iterable[Node], resource: str, vgpus_per_gpu: int) -> int:
    """GPUs of the schedulable, ready nodes (see :func:`node_gpus`)."""
    return sum(node_gpus(nodes, resource, vgpus_per_gpu).values())


def colocation_target(nodes: Iterable[Node], resource: str, vgpus_per_gpu: int) -> tuple[str, int]:
    """The schedulable node with the fewest GPUs and its GPU count (the first such node in ``nodes`` order).

    The device plugin gives each new pod the least-loaded GPU of its node, so ``gpus + 1`` pods pinned to that
    node put at least two on one GPU; which two is read from the registration lines.

    Raises:
        XpushareError: no schedulable node offers ``resource``.
    """
    gpus = node_gpus(nodes, resource, vgpus_per_gpu)
    if not gpus:
        raise XpushareError(f"no schedulable node offers {resource}")
    name = min(gpus, key=lambda n: gpus[n])  # min keeps the first of equals, like the strict < it replaces
    return name, gpus[name]
