"""Probe pods of ``invoke metrics-check`` on a Kubernetes cluster without a case run: workloads that register
with the scheduler being checked, started and removed through kubectl. Moved here from
:mod:`xpushare.metrics_check.probes` (which re-exports it) so that kubectl stays inside the k8s backend and
the transport (docs/architecture.md). Source: docs/sut/client.md §lock-control (the core-limit annotation),
docs/sut/kubernetes.md (the extended resource).
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field

from xpushare.backends.k8s_manifests import PodManifest, render
from xpushare.evidence.client_match import ClientMatch, client_match
from xpushare.inventory.schema import MODE_K8S
from xpushare.inventory.sut import SutNames
from xpushare.model.errors import XpushareError
from xpushare.transport.kube_objects import Pod
from xpushare.transport.kubectl import Kubectl
from xpushare.transport.manifest_yaml import dump_manifests

__all__ = ["DEFAULT_PROBE_IMAGE", "PROBE_COMMAND", "RUN_LABEL", "KubeProbeLoad"]


#: The probe workload (W5, small and long enough; the probes are removed when the check ends).
PROBE_COMMAND: tuple[str, ...] = ("python", "workloads/w5_quota_probe.py", "--n", "1024", "--duration-s", "600",
                                  "--interval-s", "5", "--no-progress")
#: The probe image for a real cluster: one with PyTorch and this repository's ``workloads/`` in its
#: working directory (the lab ignores images). Override with the cluster parameter ``probe_image``.
DEFAULT_PROBE_IMAGE = "xpushare-workloads:latest"
RUN_LABEL = "xpushare-metrics-check"


@dataclass
class KubeProbeLoad:
    """Probe pods through kubectl: ``<resource>: 1``, a core-limit annotation, pinned to ``node``.

    The pods request the generation's extended resource (so the device plugin makes them scheduler
    clients) and carry ``<gen>.com/gpu-core-limit`` (so they request locks, docs/sut/client.md §lock-control);
    they are labelled ``xpushare-metrics-check=<run_id>`` and deleted by that label.
    """

    kubectl: Kubectl
    names: SutNames
    node: str | None = None
    namespace: str = "default"
    core_limit: int | None = 50
    image: str = DEFAULT_PROBE_IMAGE
    command: tuple[str, ...] = PROBE_COMMAND
    run_id: str = field(default_factory=lambda: secrets.token_hex(4))
    timeout_s: float = 180.0
    poll_s: float = 1.0

    def pod_name(self, index: int) -> str:
        return f"metrics-check-{self.run_id}-{index}"

    def manifest(self, index: int) -> str:
        """The probe pod's YAML (:func:`xpushare.backends.k8s_manifests.render`)."""
        annotations = None if self.core_limit is None else {self.names.annotation_core_limit: str(self.core_limit)}
        pod = PodManifest(
            name=self.pod_name(index), namespace=self.namespace, labels={RUN_LABEL: self.run_id, "probe": str(index)},
            annotations=annotations, container="probe", image=self.image, command=self.command,
            env=(("PYTHONUNBUFFERED", "1"),), limits={self.names.resource: 1},
            node_selector={"kubernetes.io/hostname": self.node} if self.node else {})
        return dump_manifests(render(pod))

    def start(self, index: int) -> str:
        self.kubectl.apply(self.manifest(index), namespace=self.namespace)
        pods = self.kubectl.wait_pods(f"{RUN_LABEL}={self.run_id},probe={index}", until="running", count=1,
                                      timeout_s=self.timeout_s, poll_s=self.poll_s, namespace=self.namespace)
        pod: Pod = pods[0]
        if pod.is_terminal:
            raise XpushareError(f"probe pod {pod.name} ended ({pod.phase}, exit {pod.exit_code}) before the scrape")
        return pod.name

    def matches(self, names: Sequence[str]) -> list[ClientMatch]:
        """Kubernetes: the probes' clients carry their pod names (``pod`` label; a name holds a random run id,
        so any namespace label is accepted, as before)."""
        return [client_match(MODE_K8S, name) for name in names]

    def stop(self) -> None:
        self.kubectl.delete(f"{RUN_LABEL}={self.run_id}", wait=False, grace_period_s=0, namespace=self.namespace)
