"""The SUT build a run judged, per cluster, as run.json records it (``sut_build``): what ``invoke diff`` compares
to tell a flip of one build's verdicts (an intermittent case) from a change between builds.

* Kubernetes: the image of every container of the scheduler and device-plugin pods, by digest where the kubelet
  reports one (``status.containerStatuses[].imageID``), else the image name (docs/sut/README.md §naming for the
  labels).
* Host mode: the SHA-256 of the client library (``sut_lib``) and of the scheduler binary (``scheduler.binary``)
  on each GPU host (``sha256sum``).

``{"id": "<sha256 of the sorted parts>", "parts": [...]}``; ``{"id": None, "error": "..."}`` when nothing could be
read (the run goes on: the fingerprint is a label, never a verdict).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from xpushare.backends.base import Backend
from xpushare.inventory.schema import ClusterSpec
from xpushare.inventory.sut import sut_names

__all__ = ["fingerprint", "kubernetes_parts"]

_TIMEOUT_S = 30.0


def kubernetes_parts(pods: list[Any]) -> list[str]:
    """``<pod's app label or name prefix>/<container>=<imageID or image>`` of each container of ``pods``
    (:class:`~xpushare.transport.kube_objects.Pod`), node-independent (one entry per distinct value)."""
    parts: set[str] = set()
    for pod in pods:
        raw: Mapping[str, Any] = pod.raw or {}
        app = pod.labels.get("name") or pod.name.rsplit("-", 1)[0]
        ids = {s.get("name"): s.get("imageID") or s.get("image")
               for s in (raw.get("status") or {}).get("containerStatuses") or [] if isinstance(s, Mapping)}
        for c in (raw.get("spec") or {}).get("containers") or []:
            if isinstance(c, Mapping):
                parts.add(f"{app}/{c.get('name')}={ids.get(c.get('name')) or c.get('image')}")
    return sorted(parts)


def _digest(parts: list[str]) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def fingerprint(cluster: ClusterSpec, backend: Backend) -> dict[str, Any]:
    """The SUT build on ``cluster`` through ``backend`` (see the module docstring). Never raises for what it
    reads: an error is recorded in the result."""
    try:
        if cluster.is_kubernetes:
            kube = backend.parts.kubernetes
            if kube is None:
                return {"id": None, "error": "no Kubernetes access"}
            names = sut_names(cluster.generation)
            pods = kube.sut_pods(names.scheduler_label) + kube.sut_pods(names.device_plugin_label)
            parts = kubernetes_parts(pods)
        else:
            files = [f for f in (cluster.sut_lib, cluster.scheduler.binary) if f]
            if not files:
                return {"id": None, "error": "no sut_lib or scheduler.binary in the inventory"}
            parts = []
            for name, host in sorted(backend.parts.placement.gpu_node_hosts().items()):
                res = host.run(["sha256sum", "--", *files], timeout=_TIMEOUT_S)
                for line in res.stdout.splitlines():
                    digest, _, path = line.partition("  ")
                    parts.append(f"{path}={digest}")
                if not res.ok:
                    parts.append(f"{name}: sha256sum exited {res.exit_code}")
            parts = sorted(set(parts))
    except Exception as exc:  # a label of the run, never a reason to stop it
        return {"id": None, "error": f"{type(exc).__name__}: {exc}"[:300]}
    if not parts:
        return {"id": None, "error": "no SUT pod or file found"}
    return {"id": _digest(parts), "parts": parts}
