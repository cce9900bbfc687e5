"""Pod manifests of the k8s backend: rendered structurally, labelled, named DNS-1123, SUT names per generation."""

from __future__ import annotations

import pytest
import yaml

from xpushare.backends.base import PodSpec
from xpushare.backends.k8s import K8sBackend
from xpushare.backends.k8s_names import dns1123, label_value
from xpushare.inventory import schema
from xpushare.judge.combination import split_capture
from xpushare.transport.base import CommandResult
from xpushare.transport.kube_objects import Pod

INV = """
clusters:
  c1:
    mode: k8s
    sut: {sut}
    hosts:
      m: {{address: 127.0.0.1, roles: [master]}}
      g: {{address: 127.0.0.2, roles: [gpu]}}
    params: {{pod_image: "img:1", pod_workload_configmap: {cm}}}
"""


def backend(sut: str = "nvshare", cm: str = "true") -> K8sBackend:
    cluster = schema.parse(INV.format(sut=sut, cm=cm)).cluster("c1")
    b = K8sBackend(cluster)  # connections are lazy: nothing is contacted here
    b.run_id, b.case_id = "20261121-101010", "FUNC-010"
    return b


@pytest.mark.parametrize(("text", "name"), [("FUNC-001_W2 A", "func-001-w2-a"), ("--x--", "x"), ("a" * 80, "a" * 63)])
def test_dns1123(text: str, name: str) -> None:
    assert dns1123(text) == name


def test_label_value_is_valid() -> None:
    assert label_value("run id/with:odd") == "run-id-with-odd"
    assert len(label_value("x" * 100)) == 63


def test_render_pod_is_structural_and_complete() -> None:
    b = backend("nvshare")
    spec = PodSpec(name="func-010-w5", workload="w5_quota_probe", args=("--duration-s", "60"), core_limit=30,
                   memory_limit="4Gi", memory_limit_env="2Gi", oversub=True, node="c1-gpu1",
                   env=(("EXTRA", "1"),))
    doc = b.render_pod(spec)
    text = yaml.safe_dump(doc)
    again = yaml.safe_load(text)
    meta, pod = again["metadata"], again["spec"]
    assert meta["name"] == "func-010-w5"
    assert meta["labels"] == {"app.kubernetes.io/managed-by": "xpushare", "xpushare/run-id": "20261121-101010",
                              "xpushare/case": "func-010"}
    assert meta["annotations"] == {"nvshare.com/gpu-core-limit": "30", "nvshare.com/gpu-memory-limit": "4Gi"}
    assert pod["restartPolicy"] == "Never" and pod["nodeName"] == "c1-gpu1"
    c = pod["containers"][0]
    assert c["image"] == "img:1"
    assert c["command"] == ["python3", "-u", "/opt/xpushare/workloads/w5_quota_probe.py", "--duration-s", "60"]
    names = [e["name"] for e in c["env"]]
    assert len(names) == len(set(names)), "no duplicate env keys"
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["NVSHARE_DEBUG"] == "1" and env["NVSHARE_ENABLE_SINGLE_OVERSUB"] == "1"
    assert env["NVSHARE_GPU_MEMORY_LIMIT"] == "2Gi" and env["EXTRA"] == "1"
    assert c["resources"]["limits"] == {"nvshare.com/gpu": 1}
    assert pod["volumes"][0]["configMap"]["name"] == "xpushare-workloads-20261121-101010"


def test_oversub_is_left_out_when_off_and_generation_changes_names() -> None:
    b = backend("xpushare", cm="false")
    doc = b.render_pod(PodSpec(name="p", workload="w2_medium_add"))
    c = doc["spec"]["containers"][0]
    env = {e["name"] for e in c["env"]}
    assert "XPUSHARE_ENABLE_SINGLE_OVERSUB" not in env  # presence-based in the SUT: "0" would enable it
    assert c["resources"]["limits"] == {"xpushare.com/gpu": 1}
    assert "volumes" not in doc["spec"] and doc["metadata"]["annotations"] == {}


def test_selector_scopes_to_run_and_case() -> None:
    b = backend()
    assert b.selector() == (
        "app.kubernetes.io/managed-by=xpushare,xpushare/run-id=20261121-101010,xpushare/case=func-010"
    )


class _CannedHost:
    """A GPU host whose every command returns one canned result (no connection)."""

    def __init__(self, stdout: str, stderr: str, exit_code: int) -> None:
        self.result = CommandResult("g", (), stdout, stderr, exit_code, 0.1)
        self.argv: list[str] = []

    def run(self, argv: list[str], **_: object) -> CommandResult:
        self.argv = list(argv)
        return self.result


def _scheduler_pod(ip: str) -> Pod:
    return Pod(name="xpushare-scheduler-x", namespace="kube-system", uid="u", phase="Running", node="g",
               pod_ip=ip, host_ip="127.0.0.2", labels={}, annotations={}, containers=(), created_at=None,
               start_time=None, deletion_timestamp=None, reason=None, message=None, unschedulable=None, raw={})


PAGE = "# HELP xpushare_nvml_up NVML\n# TYPE xpushare_nvml_up gauge\nxpushare_nvml_up 1\n\nHTTP_CODE=200\n"


@pytest.mark.parametrize(
    ("stderr", "exit_code", "want"),
    [
        # a login shell that prints to stderr does not make a good scrape a failure
        ("pyenv: cannot rehash: couldn't acquire lock\n/libexec/pyenv-rehash: line 22: cannot overwrite", 0, None),
        # a failed curl is a failed scrape, with its multi-line stderr kept on one note line
        ("noise\ncurl: (28) Operation timed out after 10001 milliseconds", 28, "exit 28: noise | curl: (28)"),
    ],
)
def test_scheduler_scrape_notes_only_a_failed_curl(stderr: str, exit_code: int, want: str | None) -> None:
    b = backend("xpushare")
    b.node_host = {"g": "g"}
    host = _CannedHost(PAGE, stderr, exit_code)
    b.gpu_hosts["g"] = host  # type: ignore[assignment]
    text = b.curl_scheduler("g", "/metrics", {"g": _scheduler_pod("127.0.0.22")})
    assert text is not None and host.argv[-1] == "http://127.0.0.22:9402/metrics"
    body, note = split_capture(text)
    if want is None:
        assert note is None and body == PAGE
    else:
        assert note is not None and note.startswith(want)


def test_nvidia_smi_on_the_nodes_is_configurable() -> None:
    assert backend().nvidia_smi_argv("g", "dmon", "-s", "u") == ["nvidia-smi", "dmon", "-s", "u"]
    simulated = backend()
    simulated.params["node_nvidia_smi"] = ["env", "SIMGPU_CONFIG=/lab/{host}/devices", "/lab/nvidia-smi"]
    assert simulated.nvidia_smi_argv("g", "-L") == ["env", "SIMGPU_CONFIG=/lab/g/devices", "/lab/nvidia-smi", "-L"]
