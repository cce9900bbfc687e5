"""Kubernetes objects of the in-cluster envcheck, rendered structurally: the ConfigMap, the DaemonSet and the Job
from ``manifests/envcheck/*.yaml``, the step pods (also a Job's pod template) by the one pod renderer,
:mod:`xpushare.backends.k8s_manifests`.

Each template is loaded with PyYAML and changed as data (names, labels, image, command, nodeName,
resources, volumes); nothing is built by string substitution, so no value can break the YAML.

Objects (all labelled ``app.kubernetes.io/name=xpushare-envcheck``, ``xpushare.io/envcheck-run=<run>``
and ``app.kubernetes.io/component=<stack|gpu|cross>``, so one selector finds and deletes a run's objects):

* ConfigMap ``xpushare-envcheck-scripts-<run>``: the node-side scripts, mounted at
  ``<workdir>/workloads/envcheck`` (``envcheck_scripts: configmap``; with ``image`` the image must hold
  them at that path instead);
* DaemonSet ``xpushare-envcheck-stack-<run>``: the stack probe, then the node health capture, on every selected
  node;
* Pod (or Job, ``envcheck_workload_kind: job``) ``xpushare-envcheck-gpu-<run>-<node>``: cuBLAS then the
  single-node all-reduce, pinned with ``nodeName``, limited to the node's GPUs;
* Pod (or Job) ``xpushare-envcheck-cross-<run>-<node>``: one rank group of the cross-node all-reduce,
  ``hostNetwork: true`` by default so NCCL sees the node's interfaces.

Pods run ``<python> workloads/envcheck/node_steps.py ...`` in ``workingDir`` (default ``/xpushare``).
"""

from __future__ import annotations

import hashlib
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from xpushare.backends.k8s_manifests import (
    ConfigMapVolume,
    EmptyDirVolume,
    FieldRef,
    PodManifest,
    Toleration,
    Volume,
    pod_template,
    render,
)
from xpushare.data import manifests_dir, workloads_dir
from xpushare.transport.manifest_yaml import dump_manifests

MANIFESTS_DIR = manifests_dir() / "envcheck"
SCRIPTS_DIR = workloads_dir() / "envcheck"
SCRIPT_NAMES: tuple[str, ...] = ("stack_probe.py", "cublas_bf16.py", "nccl_allreduce.py", "node_steps.py")
SCRIPTS_REL = "workloads/envcheck"

LABEL_APP = "app.kubernetes.io/name"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_RUN = "xpushare.io/envcheck-run"
LABEL_NODE = "xpushare.io/envcheck-node"
APP = "xpushare-envcheck"


@dataclass(frozen=True)
class K8sSettings:
    """How envcheck pods look on one cluster (from the ``envcheck_*`` parameters).

    ``scripts``: ``configmap`` (ship the scripts) or ``image`` (already in the image under ``workdir``);
    ``workload_kind``: ``pod`` or ``job`` for the GPU steps; ``gpu_resource``: the extended resource a GPU
    pod asks for; ``node_selector``: labels of the nodes to test (also the DaemonSet's nodeSelector).
    """

    image: str = "sglang:v0.5.7"
    python: str = "python3"
    scripts: str = "configmap"
    workdir: str = "/xpushare"
    gpu_resource: str = "nvidia.com/gpu"
    node_selector: Mapping[str, str] = field(default_factory=dict)
    host_network: bool = True
    workload_kind: str = "pod"
    runtime_class: str | None = None


def load_template(name: str) -> dict[str, Any]:
    """One template of ``manifests/envcheck/`` as a dict. Raises ``FileNotFoundError``/``ValueError``."""
    doc = yaml.safe_load((MANIFESTS_DIR / name).read_text(encoding="utf-8"))
    if not isinstance(doc, dict):
        raise ValueError(f"{MANIFESTS_DIR / name}: not a mapping")
    return doc


def dns_name(*parts: str, limit: int = 63) -> str:
    """A DNS-1123 label from ``parts``: lowercase, ``[a-z0-9-]``, at most ``limit`` characters.

    Too long a name is cut and ends in 8 hex digits of the full name's sha1, so it stays unique.
    """
    raw = "-".join(p for p in parts if p)
    name = re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", raw.lower())).strip("-") or "x"
    if len(name) > limit:
        digest = hashlib.sha1(raw.encode("utf-8")).hexdigest()[:8]
        name = name[: limit - 9].rstrip("-") + "-" + digest
    return name


def label_value(text: str) -> str:
    """A valid label value from ``text``: ``[A-Za-z0-9._-]``, alphanumeric at both ends, at most 63."""
    value = re.sub(r"[^A-Za-z0-9._-]", "-", text)[:63].strip("-._")
    return value or "x"


def selector(run: str, component: str | None = None) -> str:
    """Label selector of a run's objects (of one component when given)."""
    sel = f"{LABEL_APP}={APP},{LABEL_RUN}={label_value(run)}"
    return sel + (f",{LABEL_COMPONENT}={component}" if component else "")


def _labels(run: str, component: str, node: str | None = None) -> dict[str, str]:
    labels = {LABEL_APP: APP, LABEL_COMPONENT: component, LABEL_RUN: label_value(run)}
    if node:
        labels[LABEL_NODE] = label_value(node)
    return labels


def _scripts(run: str, settings: K8sSettings) -> tuple[Volume, ...]:
    """The scripts' ConfigMap as a volume at ``<workdir>/workloads/envcheck`` (none when the image holds them)."""
    if settings.scripts != "configmap":
        return ()
    return (Volume("envcheck-scripts", f"{settings.workdir.rstrip('/')}/{SCRIPTS_REL}",
                   ConfigMapVolume(dns_name("xpushare-envcheck-scripts", run), default_mode=0o555), read_only=True),)


def render_scripts_configmap(run: str, scripts_dir: Path = SCRIPTS_DIR) -> dict[str, Any]:
    """The ConfigMap holding :data:`SCRIPT_NAMES` (file name -> content)."""
    doc = load_template("scripts-configmap.yaml")
    doc["metadata"]["name"] = dns_name("xpushare-envcheck-scripts", run)
    doc["metadata"]["labels"] = _labels(run, "scripts")
    doc["data"] = {n: (scripts_dir / n).read_text(encoding="utf-8") for n in SCRIPT_NAMES}
    return doc


def render_stack_daemonset(run: str, settings: K8sSettings, *, probe_args: Sequence[str] = (),
                           nodes: Sequence[str] | None = None,
                           health_argv: Sequence[str] | None = None) -> dict[str, Any]:
    """The stack-probe DaemonSet; ``nodes`` (from ``--limit``) pins it with a ``metadata.name`` affinity;
    ``health_argv`` (the node health capture, :func:`xpushare.evidence.gpu_health.capture_argv`; ``{node}`` in it
    becomes the pod's node name) runs after the stack probe as step ``health``."""
    doc = load_template("stack-daemonset.yaml")
    labels = _labels(run, "stack")
    doc["metadata"]["name"] = dns_name("xpushare-envcheck-stack", run)
    doc["metadata"]["labels"] = dict(labels)
    doc["spec"]["selector"] = {"matchLabels": dict(labels)}
    tmpl = doc["spec"]["template"]
    tmpl["metadata"]["labels"] = dict(labels)
    spec = tmpl["spec"]
    container = spec["containers"][0]
    container["image"] = settings.image
    container["workingDir"] = settings.workdir
    health = ["--health", shlex.join(health_argv)] if health_argv is not None else []
    container["command"] = [settings.python, f"{SCRIPTS_REL}/node_steps.py", "--stack", shlex.join(probe_args),
                            *health, "--hold"]
    if settings.node_selector:
        spec["nodeSelector"] = dict(settings.node_selector)
    if nodes is not None:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In",
                                                    "values": sorted(nodes)}]}]}}}
    if settings.runtime_class:
        spec["runtimeClassName"] = settings.runtime_class
    for volume in _scripts(run, settings):
        spec.setdefault("volumes", []).append(volume.volume())
        container.setdefault("volumeMounts", []).append(volume.mount())
    return doc


def render_step_pod(run: str, component: str, node: str, settings: K8sSettings, *, steps_args: Sequence[str],
                    gpus: int, host_network: bool = False) -> dict[str, Any]:
    """A run-once pod on ``node`` (``nodeName``, every taint tolerated) running ``node_steps.py <steps_args>`` with
    ``gpus`` GPUs (0: none asked), the node's name in ``XPUSHARE_ENVCHECK_NODE`` and a memory-backed ``/dev/shm``
    (NCCL's shared-memory transport needs more than the runtime's 64 MiB); rendered by
    :func:`xpushare.backends.k8s_manifests.render`."""
    pod = PodManifest(
        name=dns_name(f"xpushare-envcheck-{component}", run, node), labels=_labels(run, component, node),
        container="envcheck", image=settings.image, working_dir=settings.workdir,
        command=(settings.python, f"{SCRIPTS_REL}/node_steps.py", *steps_args),
        env=(("XPUSHARE_ENVCHECK_NODE", FieldRef("spec.nodeName")), ("PYTHONUNBUFFERED", "1")),
        limits={settings.gpu_resource: gpus} if gpus > 0 else {}, node_name=node, tolerations=(Toleration(),),
        volumes=(Volume("dshm", "/dev/shm", EmptyDirVolume(medium="Memory")), *_scripts(run, settings)),
        grace_period_s=10, host_network=host_network, runtime_class=settings.runtime_class)
    return render(pod)


def wrap_job(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The Job (``gpu-job.yaml``) running ``pod`` (a rendered step pod) once; same name and labels."""
    doc = load_template("gpu-job.yaml")
    doc["metadata"]["name"] = pod["metadata"]["name"]
    doc["metadata"]["labels"] = dict(pod["metadata"]["labels"])
    doc["spec"]["template"] = pod_template(pod)
    return doc


def to_yaml(docs: Sequence[Mapping[str, Any]]) -> str:
    """Documents as one multi-document YAML stream (for ``kubectl apply -f -``)."""
    return dump_manifests(*docs)
