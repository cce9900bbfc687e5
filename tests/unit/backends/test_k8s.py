"""Pod manifests of the k8s backend: rendered structurally, labelled, named DNS-1123, SUT names per generation."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
import yaml

from xpushare.backends.base import CaseContext
from xpushare.backends.k8s import K8sBackend
from xpushare.backends.k8s_names import dns1123, label_value, run_key, run_namespace, tenant_namespace
from xpushare.inventory import schema
from xpushare.judge.combination import split_capture
from xpushare.model.workload import WorkloadSpec
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
    spec = WorkloadSpec(name="func-010-w5", workload="w5_quota_probe", args=("--duration-s", "60"), core_limit=30,
                   memory_limit="4Gi", memory_limit_env="2Gi", oversub=True, node="c1-gpu1",
                   env=(("EXTRA", "1"),))
    doc = b.render_pod(spec)
    text = yaml.safe_dump(doc)
    again = yaml.safe_load(text)
    meta, pod = again["metadata"], again["spec"]
    assert meta["name"] == "func-010-w5"
    assert meta["labels"] == {"app.kubernetes.io/managed-by": "xpushare", "xpushare/run-id": "20261121-101010",
                              "xpushare/run-key": run_key("20261121-101010"), "xpushare/case": "func-010"}
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
    doc = b.render_pod(WorkloadSpec(name="p", workload="w2_medium_add"))
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
    text = b.kube.curl_scheduler("g", "/metrics", {"g": _scheduler_pod("127.0.0.22")})
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


# ------------------------------------------------------------------------------------------- namespaces


class _RecordingMaster:
    """The master's kubectl calls, recorded; ``get`` of a pod list answers ``pods`` (namespace -> pod names)."""

    name = "m"

    def __init__(self, pods: dict[str, list[str]] | None = None) -> None:
        self.calls: list[list[str]] = []
        self.stdin: list[str | None] = []
        self.pods = pods or {}

    def run(self, argv: list[str], *, stdin: str | None = None, **_: object) -> CommandResult:
        self.calls.append(list(argv))
        self.stdin.append(stdin)
        out = ""
        if "get" in argv and "pods" in argv:
            ns = argv[argv.index("-n") + 1] if "-n" in argv else ""
            items = [{"metadata": {"name": n, "namespace": ns, "uid": n, "labels": {}},
                      "status": {"phase": "Succeeded"}} for n in self.pods.get(ns, [])]
            out = json.dumps({"kind": "PodList", "items": items})
        elif "get" in argv and "namespace" in argv:  # none of the run's namespaces exists yet
            return CommandResult("m", tuple(argv), "", 'Error from server (NotFound): namespaces "x" not found', 1, 0.0)
        elif "get" in argv and "nodes" in argv:
            out = json.dumps({"kind": "NodeList", "items": []})
        elif "get" in argv and "lease" in " ".join(argv):
            return CommandResult("m", tuple(argv), "", 'Error from server (NotFound): leases "x" not found', 1, 0.0)
        return CommandResult("m", tuple(argv), out, "", 0, 0.0)

    def close(self) -> None:
        pass

    def verbs(self) -> list[str]:
        return [" ".join(a[a.index("--request-timeout") + 2:]) for a in self.calls]


def _fake_master(b: K8sBackend, master: _RecordingMaster) -> None:
    b.master = master  # type: ignore[assignment]
    b.kubectl.host = master
    b.gpu_specs = {}


def test_a_case_attempt_reads_only_its_own_pods() -> None:
    """Pods an earlier, dead attempt of the case left (same names, same case label) are never this attempt's:
    each attempt labels its pods with its token and selects by it."""
    b = backend()
    spec = WorkloadSpec(name="func-010-w5", workload="w5_quota_probe")
    b.case = CaseContext(Path("."), "FUNC-010")
    first = b.case.attempt
    assert b.render_pod(spec)["metadata"]["labels"]["xpushare/attempt"] == first
    assert b.selector().endswith(f",xpushare/attempt={first}")
    b.case = CaseContext(Path("."), "FUNC-010")  # the next attempt: a --resume after a crash, a --repeat
    assert f"xpushare/attempt={first}" not in b.selector()
    assert "xpushare/attempt" not in b.selector("FUNC-010")  # a case named: every attempt's pods


def test_the_run_gets_a_labelled_namespace_of_its_own_and_removes_it() -> None:
    b = backend(cm="false")
    master = _RecordingMaster()
    _fake_master(b, master)
    b.prepare_run("20261121-101010")
    assert b.namespace == run_namespace("20261121-101010") == "xpushare-20261121-101010"
    assert b.kubectl.namespace == b.namespace and b.kube.pod_namespace() == b.namespace
    applied = [yaml.safe_load(s) for s in master.stdin if s]
    ns = next(d for d in applied if d["kind"] == "Namespace")
    assert ns["metadata"] == {"name": b.namespace, "labels": {"app.kubernetes.io/managed-by": "xpushare",
                                                              "xpushare/run-id": "20261121-101010",
                                                              "xpushare/run-key": run_key("20261121-101010")}}
    verbs = master.verbs()
    # earlier runs' namespaces go (never this run's: a resumed run keeps its namespace), then the run's is made
    # and its default ServiceAccount awaited (pods are refused before it exists)
    assert any(v.startswith("delete namespaces -l app.kubernetes.io/managed-by=xpushare,xpushare/run-id notin "
                            "(20261121-101010)") for v in verbs), verbs
    assert any(v.startswith(f"-n {b.namespace} get serviceaccount default") for v in verbs), verbs
    master.calls.clear()
    b.close()
    assert any(v.startswith(f"delete namespace {b.namespace} ") for v in master.verbs()), master.verbs()


def test_a_fixed_namespace_is_used_as_it_is() -> None:
    cluster = schema.parse(INV.format(sut="xpushare", cm="false") + "    namespace: team-gpu\n").cluster("c1")
    b = K8sBackend(cluster)
    master = _RecordingMaster()
    _fake_master(b, master)
    b.prepare_run("r1")
    assert b.namespace == "team-gpu" and "tenant-namespaces" not in b.parts.capabilities
    assert not any("namespace" in v.split()[:2] or v.startswith("delete namespaces") for v in master.verbs())
    master.calls.clear()
    b.close()
    assert not any("namespace" in v for v in master.verbs())


def test_tenants_get_namespaces_of_their_own_and_pods_of_one_name() -> None:
    b = backend(cm="false")
    master = _RecordingMaster()
    _fake_master(b, master)
    b.prepare_run("20261121-101010")
    assert "tenant-namespaces" in b.parts.capabilities
    with tempfile.TemporaryDirectory() as tmp:
        b.case = CaseContext(Path(tmp), "FUNC-013")
        b.case_id = "FUNC-013"
        b.start_pods([WorkloadSpec(name="func-013-probe", workload="mem_probe", tenant="a", memory_limit="1Gi"),
                      WorkloadSpec(name="func-013-probe", workload="mem_probe", tenant="b", memory_limit="2Gi")])
        docs = list(yaml.safe_load_all((Path(tmp) / "manifests.yaml").read_text()))
    assert [d["metadata"]["namespace"] for d in docs] == ["xpushare-20261121-101010-a", "xpushare-20261121-101010-b"]
    assert {d["metadata"]["name"] for d in docs} == {"func-013-probe"}
    assert [d["metadata"]["labels"]["xpushare/tenant"] for d in docs] == ["a", "b"]
    created = [yaml.safe_load(s)["metadata"]["name"] for s in master.stdin if s and "Namespace" in s]
    assert created == ["xpushare-20261121-101010", "xpushare-20261121-101010-a", "xpushare-20261121-101010-b"]
    master.pods = {"xpushare-20261121-101010-a": ["func-013-probe"], "xpushare-20261121-101010-b": ["func-013-probe"]}
    records = b.case_pods()
    assert [(r.namespace, r.spec.get("memory_limit")) for r in records] == [
        ("xpushare-20261121-101010-a", "1Gi"), ("xpushare-20261121-101010-b", "2Gi")]
    master.calls.clear()
    b.close()
    assert sum(v.startswith("delete namespace ") for v in master.verbs()) == 3


def test_tenant_namespace_names_stay_apart_when_the_run_id_is_long() -> None:
    base = run_namespace("x" * 80)
    assert len(base) == 63
    a, b = tenant_namespace(base, "a"), tenant_namespace(base, "b")
    assert a != b and len(a) <= 63 and a.endswith("-a") and b.endswith("-b")
