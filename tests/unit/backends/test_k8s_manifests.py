"""The one pod renderer: every caller's pods are the objects they were before it (``pods_before.json`` holds what the
k8s backend, metrics-check's probes and envcheck rendered by themselves), and a description writes only what it says.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.backends.test_k8s import INV
from xpushare.backends import k8s_manifests as km
from xpushare.backends.base import CaseContext
from xpushare.backends.k8s import K8sBackend
from xpushare.backends.k8s_probes import KubeProbeLoad
from xpushare.envcheck import manifests
from xpushare.inventory import schema
from xpushare.inventory.sut import sut_names
from xpushare.model.workload import WorkloadSpec
from xpushare.transport.kubectl import Kubectl
from xpushare.transport.local import LocalHost
from xpushare.transport.manifest_yaml import dump_manifests

BEFORE: dict[str, dict[str, Any]] = json.loads(
    (Path(__file__).parents[2] / "fixtures" / "manifests" / "pods_before.json").read_text(encoding="utf-8"))
RUN, CASE, ATTEMPT = "20261121-101010", "FUNC-010", "a1b2c3"
FULL = WorkloadSpec(name="func-010-w5", workload="w5_quota_probe", args=("--duration-s", "60"), core_limit=30,
               memory_limit="4Gi", memory_limit_env="2Gi", oversub=True, node="c1-gpu1", env=(("EXTRA", "1"),))
SAME_GPU = WorkloadSpec(name="W2_B", workload="w2_medium_add", same_gpu_as="func-010-w5")
TENANT = WorkloadSpec(name="p", workload="w2_medium_add", tenant="a", env=(("XPUSHARE_DEBUG", "0"),))


def _ordered(doc: Any) -> str:
    """The document with its keys' order (``==`` on dicts ignores it)."""
    return json.dumps(doc)


# -- the k8s backend's workload pods ---------------------------------------------------------------------


def _workload(key: str, spec: WorkloadSpec, sut: str, configmap: bool, attempt: str | None,
              node: str | None) -> dict[str, Any]:
    pods = km.WorkloadPods(names=sut_names(sut), image="img:1", python="python3",
                           workload_dir="/opt/xpushare/workloads",
                           configmap=f"xpushare-workloads-{RUN}" if configmap else None)
    return km.render(km.workload_pod(spec, pods, namespace=BEFORE[key]["metadata"]["namespace"], run_id=RUN,
                                     case_id=CASE, attempt=attempt, node=node))


WORKLOADS = [("k8s_full", FULL, "nvshare", True, ATTEMPT, "c1-gpu1"),
             ("k8s_same_gpu", SAME_GPU, "nvshare", True, ATTEMPT, "c1-gpu1"),
             ("k8s_tenant_no_configmap", TENANT, "xpushare", False, None, None)]


@pytest.mark.parametrize(("key", "spec", "sut", "configmap", "attempt", "node"), WORKLOADS)
def test_workload_pods_are_what_render_pod_made(key: str, spec: WorkloadSpec, sut: str, configmap: bool,
                                               attempt: str | None, node: str | None) -> None:
    """Same dict, same keys' order (a case's stored ``manifests.yaml`` reads the same)."""
    assert _ordered(_workload(key, spec, sut, configmap, attempt, node)) == _ordered(BEFORE[key])


def test_render_pod_of_the_backend_matches() -> None:
    """``K8sBackend.render_pod`` through a backend built without contacting anything gives the same pods."""
    def backend(sut: str, cm: str) -> K8sBackend:
        b = K8sBackend(schema.parse(INV.format(sut=sut, cm=cm)).cluster("c1"))
        b.run_id, b.case_id = RUN, CASE
        return b

    b = backend("nvshare", "true")
    b.case = CaseContext(Path("/nonexistent"), CASE, attempt=ATTEMPT)
    assert _ordered(b.render_pod(FULL)) == _ordered(_workload("k8s_full", FULL, "nvshare", True, ATTEMPT, "c1-gpu1"))
    b.pods.append(FULL)
    assert b.render_pod(SAME_GPU) == _workload("k8s_same_gpu", SAME_GPU, "nvshare", True, ATTEMPT, "c1-gpu1")
    assert backend("xpushare", "false").render_pod(TENANT) == _workload("k8s_tenant_no_configmap", TENANT, "xpushare",
                                                                        False, None, None)


def test_workload_env_lets_the_spec_override_and_leaves_oversub_out() -> None:
    doc = BEFORE["k8s_tenant_no_configmap"]
    env = doc["spec"]["containers"][0]["env"]
    assert {"name": "XPUSHARE_DEBUG", "value": "0"} in env and "XPUSHARE_ENABLE_SINGLE_OVERSUB" not in str(env)
    assert "volumes" not in doc["spec"] and doc["metadata"]["labels"]["xpushare/tenant"] == "a"


# -- metrics-check's probe pods --------------------------------------------------------------------------


def test_probe_pods_are_what_they_were() -> None:
    kubectl = Kubectl(LocalHost())  # manifest() runs nothing
    pinned = KubeProbeLoad(kubectl, sut_names("nvshare"), node="c1-gpu1", run_id="abcd")
    assert yaml.safe_load(pinned.manifest(2)) == BEFORE["probe_pinned"]
    free = KubeProbeLoad(kubectl, sut_names("xpushare"), node=None, namespace="xp", core_limit=None,
                         image="reg/img:2", run_id="123456e7")
    text = free.manifest(0)
    assert yaml.safe_load(text) == BEFORE["probe_unpinned"] and '"123456e7"' in text  # kubectl reads a string


# -- envcheck's step pods and Job ------------------------------------------------------------------------


def test_envcheck_pods_and_job_are_what_they_were() -> None:
    gpu_settings = manifests.K8sSettings(image="registry.local/sglang:v0.5.7", node_selector={"gpu": "true"},
                                         runtime_class="nvidia")
    gpu = manifests.render_step_pod("20261121-150000", "gpu", "Node_A.example", gpu_settings,
                                    steps_args=["--cublas", "", "--allreduce", "--x 1"], gpus=8)
    assert gpu == BEFORE["envcheck_gpu"]
    cross = manifests.render_step_pod("r1", "cross", "n", manifests.K8sSettings(scripts="image", python="python",
                                                                                workdir="/w/"),
                                      steps_args=[], gpus=0, host_network=True)
    assert cross == BEFORE["envcheck_cross"]
    assert manifests.wrap_job(gpu) == BEFORE["envcheck_gpu_job"]


# -- the renderer ----------------------------------------------------------------------------------------


def test_a_bare_description_writes_only_what_it_says() -> None:
    doc = km.render(km.PodManifest(name="p", image="i", command=("true",)))
    assert doc == {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {}},
                   "spec": {"restartPolicy": "Never",
                            "containers": [{"name": "workload", "image": "i", "command": ["true"], "resources": {}}]}}
    assert km.render(km.PodManifest(name="p", image="i", command=("true",), annotations={}))["metadata"][
        "annotations"] == {}


def test_render_is_structural_and_fresh() -> None:
    """A value that looks like YAML stays one string; each render is a new object (the template is not shared)."""
    odd = 'x: "y"\n- z: {a}'
    pod = km.PodManifest(name="p", image=odd, command=(odd,), labels={"l": "1"}, env=(("E", odd),),
                         node_selector={"kubernetes.io/hostname": "n"},
                         volumes=(km.Volume("v", "/m", km.EmptyDirVolume()),))
    first = km.render(pod)
    first["metadata"]["labels"]["x"] = "changed"
    first["spec"]["containers"][0]["command"].append("more")
    again = yaml.safe_load(dump_manifests(km.render(pod)))
    container = again["spec"]["containers"][0]
    assert container["image"] == odd and container["command"] == [odd] and container["env"] == [
        {"name": "E", "value": odd}]
    assert again["metadata"]["labels"] == {"l": "1"} and again["spec"]["nodeSelector"] == {
        "kubernetes.io/hostname": "n"}
    assert again["spec"]["volumes"] == [{"name": "v", "emptyDir": {}}]
    assert container["volumeMounts"] == [{"name": "v", "mountPath": "/m"}]


def test_pod_template_is_the_pod_without_its_name() -> None:
    pod = km.render(km.PodManifest(name="p", namespace="ns", image="i", command=("true",), labels={"a": "b"}))
    template = km.pod_template(pod)
    assert template == {"metadata": {"labels": {"a": "b"}}, "spec": pod["spec"]}
    template["spec"]["containers"][0]["image"] = "other"
    assert pod["spec"]["containers"][0]["image"] == "i"
