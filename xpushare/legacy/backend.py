"""The legacy pods' Kubernetes side: the workloads and images the legacy scripts use, :class:`PodExtra`
(labels, resource, native) and :class:`LegacyK8sBackend` that renders them. Split out of
:mod:`xpushare.legacy.scenarios`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from xpushare.backends.k8s import K8sBackend
from xpushare.backends.k8s_names import dns1123
from xpushare.cases.base import CaseRun
from xpushare.inventory.schema import ClusterSpec
from xpushare.model.errors import UsageError
from xpushare.model.workload import WorkloadSpec
from xpushare.transport.kube_objects import Pod

W1, W2, W3 = "w1_large_add", "w2_medium_add", "w3_idle_add"

#: The images the legacy manifests hard-code (docs/sut/kubernetes.md §images), for ``legacy_entrypoint``.
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
    """What a legacy pod has beyond a :class:`WorkloadSpec`: ``app``-style labels, another extended resource
    (``nvidia.com/gpu`` for the native baseline) and ``native`` (no SUT environment variables)."""

    labels: Mapping[str, str] = field(default_factory=dict)
    resource: str | None = None
    native: bool = False


class LegacyK8sBackend(K8sBackend):
    """:class:`K8sBackend` whose pods also carry the legacy labels, and optionally run natively or with the
    legacy images' own entrypoints (``legacy_entrypoint`` / ``legacy_images`` of the case parameters)."""

    def __init__(self, cluster: ClusterSpec) -> None:
        super().__init__(cluster)
        self.extras: dict[str, PodExtra] = {}
        self.case_params: Mapping[str, Any] = {}

    def add_extra(self, spec: WorkloadSpec, extra: PodExtra) -> WorkloadSpec:
        """Remember ``extra`` for the pod of ``spec``; returns ``spec``."""
        self.extras[dns1123(spec.name)] = extra
        return spec

    # The scripts' own kubectl steps, kept inside the backend (docs/architecture.md: kubectl stays in the k8s
    # backends and transport/); the acts of legacy/acts.py call these.

    def delete_labelled(self, selector: str, timeout_s: float = 60.0) -> None:
        """Delete the workload namespace's pods matching ``selector`` and wait until they are gone.

        Raises :class:`~xpushare.transport.kube_errors.KubeError` when kubectl fails."""
        self.kubectl.delete(selector, wait=True, timeout_s=timeout_s)

    def pods_matching(self, selector: str) -> list[Pod]:
        """The workload namespace's pods matching ``selector``. Raises ``KubeError`` when kubectl fails."""
        return self.kubectl.list_pods(selector)

    def log_tail(self, pod: str, lines: int) -> str:
        """The last ``lines`` lines of ``pod``'s log, without timestamps. Raises ``KubeError`` (e.g. not started)."""
        return self.kubectl.logs(pod, timestamps=False, tail=lines)

    def delete_sut_daemonsets(self, timeout_s: int = 120) -> None:
        """Delete the SUT's scheduler and device-plugin DaemonSets (missing ones are no error) and wait for them,
        as ``remote-base-test.sh`` does. Raises ``KubeError`` when kubectl fails."""
        self.kubectl.run(["delete", "daemonset", self.names.scheduler_daemonset, self.names.device_plugin_daemonset,
                          "--ignore-not-found", "--wait=true", f"--timeout={timeout_s}s"],
                         namespace=self.names.namespace, wait_s=timeout_s)

    def render_pod(self, spec: WorkloadSpec) -> dict[str, Any]:
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


def legacy_backend(run: CaseRun) -> LegacyK8sBackend:
    """The run's :class:`LegacyK8sBackend`; raises UsageError on any other backend (legacy needs ``mode: k8s``)."""
    if not isinstance(run.backend, LegacyK8sBackend):
        raise UsageError("legacy scenarios need a Kubernetes cluster (mode: k8s)")
    return run.backend
