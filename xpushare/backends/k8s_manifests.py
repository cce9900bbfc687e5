"""Every Pod the tool creates, rendered in one place: a typed description (:class:`PodManifest`) filled into
``data/manifests/pod.yaml`` structurally (PyYAML, then changed as data; never text substitution, so no value can
break the YAML).

Its users: the k8s backend's workload pods (:func:`workload_pod`, from a case's
:class:`~xpushare.model.workload.WorkloadSpec`), the probe pods of ``invoke metrics-check``
(:mod:`xpushare.backends.k8s_probes`) and node acceptance's step pods, also as a Job's pod template
(:mod:`xpushare.envcheck.manifests`, :func:`pod_template`). ``tests/unit/test_pod_manifest_owner.py`` keeps other
modules from building a Pod themselves.

A pod has one container (every pod of the tool does). What the SUT reads from it: the extended resource in
the limits and the quota annotations (docs/sut/kubernetes.md §device-plugin, docs/sut/client.md §lock-control),
the client library's variables in the environment (docs/sut/client.md §environment).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from xpushare.backends.k8s_names import ATTEMPT_LABEL, MANAGED_BY, dns1123, label_value, run_labels
from xpushare.data import manifests_dir
from xpushare.inventory.sut import SutNames
from xpushare.model.workload import WorkloadSpec

__all__ = ["GPU_TOLERATION", "ConfigMapVolume", "EmptyDirVolume", "FieldRef", "PodManifest", "Toleration", "Volume",
           "WorkloadPods", "pod_template", "render", "workload_pod"]

TEMPLATE = "pod.yaml"


@dataclass(frozen=True)
class FieldRef:
    """An environment value the kubelet fills from the pod's own fields (``spec.nodeName``)."""

    path: str


@dataclass(frozen=True)
class Toleration:
    """A toleration; ``key`` None tolerates every taint (``operator: Exists`` alone)."""

    key: str | None = None
    operator: str = "Exists"
    effect: str | None = None

    def render(self) -> dict[str, str]:
        """The toleration as the Pod API writes it (``key``/``effect`` left out when None)."""
        out = {"key": self.key, "operator": self.operator, "effect": self.effect}
        return {k: v for k, v in out.items() if v is not None}


#: Tolerates the NVIDIA device plugin's taint of GPU nodes (the workload pods).
GPU_TOLERATION = Toleration(key="nvidia.com/gpu", effect="NoSchedule")


@dataclass(frozen=True)
class ConfigMapVolume:
    """A ConfigMap's keys as files; ``default_mode`` their permission bits (None: Kubernetes' 0644)."""

    name: str
    default_mode: int | None = None


@dataclass(frozen=True)
class EmptyDirVolume:
    """A scratch directory; ``medium`` ``"Memory"`` for a tmpfs (None: the node's disk)."""

    medium: str | None = None


@dataclass(frozen=True)
class Volume:
    """A volume of the pod mounted in its container at ``mount_path``."""

    name: str
    mount_path: str
    source: ConfigMapVolume | EmptyDirVolume
    read_only: bool = False

    def mount(self) -> dict[str, Any]:
        """The container's ``volumeMounts`` entry (``readOnly`` only when true)."""
        out: dict[str, Any] = {"name": self.name, "mountPath": self.mount_path}
        if self.read_only:
            out["readOnly"] = True
        return out

    def volume(self) -> dict[str, Any]:
        """The pod's ``volumes`` entry."""
        if isinstance(self.source, ConfigMapVolume):
            config_map: dict[str, Any] = {"name": self.source.name}
            if self.source.default_mode is not None:
                config_map["defaultMode"] = self.source.default_mode
            return {"name": self.name, "configMap": config_map}
        empty_dir = {"medium": self.source.medium} if self.source.medium is not None else {}
        return {"name": self.name, "emptyDir": empty_dir}


@dataclass(frozen=True)
class PodManifest:
    """One run-once pod (``restartPolicy: Never``) with one container.

    ``name`` a DNS-1123 name; ``namespace`` None: none written (kubectl's ``-n`` decides); ``annotations`` None: no
    ``metadata.annotations`` key (a mapping, even empty, is written); ``command`` the container's argv (no shell);
    ``env`` (name, value) pairs in order, a value a string or a :class:`FieldRef`; ``limits`` resource name ->
    count (``{"nvidia.com/gpu": 8}``; empty: ``resources: {}``); ``node_name`` pins the pod past the scheduler,
    ``node_selector`` lets it choose among labelled nodes; ``grace_period_s`` the termination grace in seconds
    (None: Kubernetes' 30); ``host_network`` also sets ``dnsPolicy: ClusterFirstWithHostNet`` so the pod still
    resolves cluster names. Every field left at its default writes nothing.
    """

    name: str
    image: str
    command: tuple[str, ...]
    namespace: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] | None = None
    container: str = "workload"
    env: tuple[tuple[str, str | FieldRef], ...] = ()
    limits: Mapping[str, int] = field(default_factory=dict)
    node_name: str | None = None
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    volumes: tuple[Volume, ...] = ()
    grace_period_s: int | None = None
    image_pull_policy: str | None = None
    working_dir: str | None = None
    host_network: bool = False
    runtime_class: str | None = None


@functools.cache
def _template() -> dict[str, Any]:
    doc = yaml.safe_load((manifests_dir() / TEMPLATE).read_text(encoding="utf-8"))
    if not isinstance(doc, dict) or doc.get("kind") != "Pod":
        raise ValueError(f"{manifests_dir() / TEMPLATE}: not a Pod")
    return doc


def _put(obj: dict[str, Any], key: str, value: Any) -> None:
    """Set ``key`` (in the template's place when it has one), or remove it when ``value`` is None."""
    if value is None:
        obj.pop(key, None)
    else:
        obj[key] = value


def _env(name: str, value: str | FieldRef) -> dict[str, Any]:
    if isinstance(value, FieldRef):
        return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": value.path}}}
    return {"name": name, "value": value}


def render(pod: PodManifest) -> dict[str, Any]:
    """The Pod object of ``pod`` (a new dict, for :func:`xpushare.transport.manifest_yaml.dump_manifests`).

    ``pod.yaml`` gives the kind, the restart policy and the order of the keys; every other value comes from
    ``pod``. Raises ``OSError``/``ValueError`` only when the shipped template is missing or broken.
    """
    doc = copy.deepcopy(_template())
    meta, spec = doc["metadata"], doc["spec"]
    container = spec["containers"][0]
    meta["name"] = pod.name
    meta["labels"] = dict(pod.labels)
    _put(meta, "annotations", None if pod.annotations is None else dict(pod.annotations))
    _put(meta, "namespace", pod.namespace)
    _put(spec, "terminationGracePeriodSeconds", pod.grace_period_s)
    _put(spec, "tolerations", [t.render() for t in pod.tolerations] or None)
    container["name"] = pod.container
    container["image"] = pod.image
    _put(container, "imagePullPolicy", pod.image_pull_policy)
    _put(container, "workingDir", pod.working_dir)
    container["command"] = list(pod.command)
    _put(container, "env", [_env(name, value) for name, value in pod.env] or None)
    container["resources"] = {"limits": dict(pod.limits)} if pod.limits else {}
    _put(container, "volumeMounts", [v.mount() for v in pod.volumes] or None)
    _put(spec, "nodeName", pod.node_name or None)
    _put(spec, "nodeSelector", dict(pod.node_selector) or None)
    if pod.host_network:
        spec["hostNetwork"] = True
        spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    _put(spec, "runtimeClassName", pod.runtime_class)
    _put(spec, "volumes", [v.volume() for v in pod.volumes] or None)
    return doc


def pod_template(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The pod template (``metadata.labels`` and ``spec``) of a rendered Pod, for a controller that runs it (a
    Job's ``spec.template``): the same pod, its name and namespace left to the controller."""
    return {"metadata": {"labels": dict(pod["metadata"]["labels"])}, "spec": copy.deepcopy(dict(pod["spec"]))}


# -- the k8s backend's workload pods ---------------------------------------------------------------------


@dataclass(frozen=True)
class WorkloadPods:
    """How a cluster's workload pods look (the k8s parameters ``pod_image``, ``pod_python``,
    ``pod_workload_dir``): ``configmap`` the workloads' ConfigMap mounted read-only at ``workload_dir`` (None:
    the image holds the workloads there); ``names`` the SUT generation's resource, annotations and variables."""

    names: SutNames
    image: str
    python: str
    workload_dir: str
    configmap: str | None = None


def workload_pod(spec: WorkloadSpec, pods: WorkloadPods, *, namespace: str, run_id: str, case_id: str,
                 attempt: str | None, node: str | None) -> PodManifest:
    """The pod of a case's :class:`WorkloadSpec`: ``<python> -u <workload_dir>/<workload>.py <args>`` with one unit of
    the SUT's extended resource, its quota as annotations (``core_limit``, ``memory_limit``), the client
    library's variables (debug on; oversubscription only when asked, the SUT tests the variable's presence;
    ``memory_limit_env``) then ``spec.env``; labelled with the run, the case, its ``attempt`` (None before the
    first case) and the tenant; pinned to ``node`` (the caller resolves ``same_gpu_as``)."""
    names = pods.names
    key, _, value = MANAGED_BY.partition("=")
    labels = {key: value, **run_labels(run_id), "xpushare/case": label_value(case_id.lower())}
    if attempt is not None:
        labels[ATTEMPT_LABEL] = attempt
    if spec.tenant is not None:
        labels["xpushare/tenant"] = label_value(spec.tenant)
    annotations: dict[str, str] = {}
    if spec.core_limit is not None:
        annotations[names.annotation_core_limit] = str(spec.core_limit)
    if spec.memory_limit is not None:
        annotations[names.annotation_memory_limit] = str(spec.memory_limit)
    env = {names.env_debug: "1", "PYTHONUNBUFFERED": "1"}
    if spec.oversub:
        env[names.env_oversub] = "1"
    if spec.memory_limit_env:
        env[names.env_memory_limit] = spec.memory_limit_env
    env.update(dict(spec.env))
    volumes = () if pods.configmap is None else (
        Volume("workloads", pods.workload_dir, ConfigMapVolume(pods.configmap), read_only=True),)
    return PodManifest(
        name=dns1123(spec.name), namespace=namespace, labels=labels, annotations=annotations, image=pods.image,
        command=(pods.python, "-u", f"{pods.workload_dir}/{spec.workload}.py", *spec.args), env=tuple(env.items()),
        limits={names.resource: 1}, node_name=node, tolerations=(GPU_TOLERATION,), volumes=volumes,
        grace_period_s=5, image_pull_policy="IfNotPresent")
