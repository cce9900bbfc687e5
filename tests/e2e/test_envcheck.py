"""envcheck against the labs: SSH fan-out to real sshd daemons, and in-cluster mode through the real kubectl.

envcheck checks a node's GPU stack (PyTorch, cuBLAS, NCCL), not the SUT. The labs have no such stack: the session
lab cluster runs the real SUT on simulated GPUs, which answer the CUDA driver API and NVML only (no CUDA runtime,
cuBLAS or NCCL; tests/lab/README-simgpu.md). So the GPU steps run as the CPU smoke test
(``envcheck_cpu_smoke``: gloo, tiny sizes), which drives the same paths as on GPUs (scripts copied over SFTP,
torchrun over SSH, address and port discovery, cross-node rendezvous; DaemonSet, pinned pods, pod logs, cleanup);
its pods ask for no GPU, so the SUT's scheduler and library stay out of them. One process per node
(``envcheck_smoke_procs=1``) and no cuBLAS step over SSH keep the labs fast; cuBLAS and the single-node all-reduce
with two ranks run in ``tests/unit/envcheck/test_scripts.py`` (and cuBLAS in the k8s test here). The lab API
server serves no Jobs, so in-cluster GPU steps are plain Pods. Measured on a 2-core machine: the in-cluster run
over both nodes takes about 16 s, the broken-interpreter run about 4 s.
"""

from __future__ import annotations

import dataclasses
import io
import json
import socket
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.lab.cluster import LabCluster
from tests.lab.simgpu import append_kmsg, pci_bus_id, xid_line
from tests.lab.sshd import SshLab
from xpushare.envcheck import envcheck_task
from xpushare.envcheck.manifests import APP, LABEL_APP
from xpushare.inventory.schema import ClusterSpec, HostSpec
from xpushare.model.exit_status import ExitStatus
from xpushare.transport.kubectl import Kubectl

pytest_plugins = ["tests.lab.fixtures"]
pytestmark = pytest.mark.lab

SMOKE = ["envcheck_cpu_smoke=true", "envcheck_smoke_procs=1", "envcheck_probe_torch=false",
         "envcheck_freeze_source=metadata", "envcheck_step_timeout_s=120"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fleet(root: Path, run_id: str) -> dict[str, Any]:
    return json.loads((root / ".tmplog" / run_id / "envcheck" / "fleet.json").read_text())


def test_ssh_fan_out_with_cross_node_and_an_unreachable_node(ssh_lab: SshLab, tmp_path: Path) -> None:
    known = ssh_lab.write_known_hosts(tmp_path / "known_hosts")
    hosts: dict[str, Any] = {}
    for name in ("lab-node1", "lab-node2"):
        h = ssh_lab.host(name)
        hosts[name] = {"address": h.address, "port": h.port, "roles": ["gpu"]}
    hosts["lab-node3"] = {"address": "127.0.0.14", "port": ssh_lab.closed_port("127.0.0.14"), "roles": ["gpu"]}
    h1 = ssh_lab.host("lab-node1")
    inventory = {
        "defaults": {"ssh": {"user": h1.user, "identity": str(h1.identity), "known_hosts": str(known),
                             "host_key_policy": "strict", "connect_timeout": 3, "connect_retries": 1}},
        "clusters": {"lab": {"mode": "host", "python": sys.executable, "workdir": str(tmp_path / "remote"),
                             "hosts": {"lab-master": {"address": "127.0.0.11", "port": ssh_lab.host("lab-master").port,
                                                      "roles": ["master"]}, **hosts}}},
    }
    inv = tmp_path / "inventory.yaml"
    inv.write_text(yaml.safe_dump(inventory))
    out = io.StringIO()
    status = envcheck_task("lab", inventory_path=str(inv), run_id="ssh1", root=tmp_path, forks=2, out=out,
                           overrides=[*SMOKE, "envcheck_cublas=false"])  # cuBLAS runs in the k8s test
    text = out.getvalue()
    assert status is ExitStatus.UNREACHABLE, text
    report = fleet(tmp_path, "ssh1")
    by_node = {n["node"]: n for n in report["nodes"]}
    assert sorted(by_node) == ["lab-node1", "lab-node2", "lab-node3"]  # the master is no gpu host
    assert by_node["lab-node3"]["status"] == "UNREACHABLE" and by_node["lab-node3"]["unreachable"]
    assert by_node["lab-node3"]["why"] == "refused" and "lab-node3: UNREACHABLE (refused)" in text, text
    for name in ("lab-node1", "lab-node2"):
        steps = by_node[name]["steps"]
        assert by_node[name]["status"] == "PASS", by_node[name]
        assert steps["cublas"] == {**steps["cublas"], "status": "SKIP", "summary": "envcheck_cublas is false"}
        assert steps["nccl"]["status"] == "SKIP" and "1 GPU(s)" in steps["nccl"]["summary"]
        files = {p.name for p in (tmp_path / ".tmplog" / "ssh1" / "envcheck" / "lab" / name).iterdir()}
        assert files == {"stack.json", "stack.log", "health.txt", "verdict.json"}
    assert {p.name for p in (tmp_path / "remote" / "envcheck").iterdir()} == {
        "stack_probe.py", "cublas_bf16.py", "nccl_allreduce.py", "node_steps.py"}  # no temp file left
    cross = report["cross_node"]
    assert cross["status"] == "PASS", cross
    assert cross["metrics"]["world_size"] == 2 and cross["metrics"]["nnodes"] == 2
    assert "MASTER_ADDR=127.0.0.12:" in text
    assert report["deviating_nodes"] == {} and report["majority"]["gpu_count"]["total"] == 2
    md = (tmp_path / ".tmplog" / "ssh1" / "envcheck" / "fleet-report.md").read_text()
    assert "lab-node3" in md and "cross-node all-reduce over 2 rank(s)" in md


def lab_spec(lab: LabCluster, kubectl: Kubectl) -> ClusterSpec:
    return ClusterSpec(name="kube-lab", mode="k8s", sut="xpushare", backend="cuda", gpu_model=None,
                       gpu_memory_gib=None, hosts=(HostSpec(name="lab-master", roles=("master",), local=True),),
                       kubeconfig=kubectl.kubeconfig, context=kubectl.context, kubectl=kubectl.kubectl,
                       python=sys.executable)


def leftovers(kubectl: Kubectl) -> list[str]:
    pods = kubectl.list_pods(f"{LABEL_APP}={APP}")
    dss = kubectl.get_json(["get", "daemonsets", "-l", f"{LABEL_APP}={APP}"]).get("items") or []
    return [p.name for p in pods if p.deletion_timestamp is None] + [d["metadata"]["name"] for d in dss]


def test_in_cluster_daemonset_pods_and_cross_node(lab_cluster: LabCluster, lab_kubectl: Kubectl,
                                                  tmp_path: Path) -> None:
    out = io.StringIO()
    status = envcheck_task("kube-lab", mode="k8s", run_id="k8s1", root=tmp_path, out=out,
                           cluster_spec=lab_spec(lab_cluster, lab_kubectl), kubectl=lab_kubectl,
                           overrides=[*SMOKE, "envcheck_scripts=image", f"envcheck_master_port={free_port()}"])
    text = out.getvalue()
    assert status is ExitStatus.OK, text
    report = fleet(tmp_path, "k8s1")
    assert [n["node"] for n in report["nodes"]] == ["lab-node1", "lab-node2"]
    for node in report["nodes"]:
        assert node["status"] == "PASS", node
        assert node["steps"]["cublas"]["status"] == "PASS"
        stack = json.loads((tmp_path / ".tmplog" / "k8s1" / "envcheck" / "kube-lab" / node["node"] /
                            "stack.json").read_text())
        assert stack["node"] == node["node"]  # XPUSHARE_ENVCHECK_NODE from the downward API
    assert report["cross_node"]["status"] == "PASS"
    assert f"MASTER_ADDR={lab_cluster.node_address('lab-node1')}:" in text
    assert "plain Pods" in report["notes"][0]
    assert leftovers(lab_kubectl) == []


def test_in_cluster_limit_and_a_broken_interpreter(lab_cluster: LabCluster, lab_kubectl: Kubectl,
                                                   tmp_path: Path) -> None:
    out = io.StringIO()
    status = envcheck_task("kube-lab", mode="k8s", run_id="k8s2", root=tmp_path, out=out, limit="lab-node2",
                           cluster_spec=lab_spec(lab_cluster, lab_kubectl), kubectl=lab_kubectl,
                           overrides=[*SMOKE, "envcheck_scripts=image", "envcheck_python=/nonexistent/python3",
                                      "envcheck_step_timeout_s=3", "envcheck_pod_timeout_s=10"])
    assert status is ExitStatus.FAILED, out.getvalue()
    report = fleet(tmp_path, "k8s2")
    assert [n["node"] for n in report["nodes"]] == ["lab-node2"]
    node = report["nodes"][0]
    assert node["status"] == "ERROR" and node["steps"]["stack"]["status"] == "ERROR"
    summary = node["steps"]["stack"]["summary"]
    # the pod's last state says why: a kubelet that execs the command itself reports StartError; the lab's,
    # which execs it from a shell in the node's mount namespace, reports the shell's exit code 127 (not found)
    assert "no 'stack' result" in summary and ("StartError" in summary or "exit code 127" in summary), summary
    assert report["cross_node"] is None
    assert leftovers(lab_kubectl) == []


def test_in_cluster_node_health_flags_a_recent_xid(lab_cluster: LabCluster, lab_kubectl: Kubectl,
                                                   tmp_path: Path) -> None:
    """The health step in the stack DaemonSet's pod: an Xid 79 an hour ago in lab-node1's kernel log flags it,
    one three hours ago (outside the 2 h window) on lab-node2 does not. ``envcheck_health_env`` gives the pod the
    node's simulated GPUs (the nvidia-smi look-alike) and kernel log (``SIMGPU_KMSG``, the dmesg look-alike)."""
    assert lab_cluster.simgpu_dir is not None
    now = datetime.now(timezone.utc)
    logs = {n: lab_cluster.kmsg(n) for n in ("lab-node1", "lab-node2")}
    kept = {n: p.read_bytes() for n, p in logs.items()}
    env = {"PATH": f"{lab_cluster.simgpu_dir}:/usr/local/bin:/usr/bin:/bin",
           "LD_LIBRARY_PATH": str(lab_cluster.simgpu_dir),
           "SIMGPU_CONFIG": str(lab_cluster.simgpu_config("{node}")), "SIMGPU_KMSG": str(lab_cluster.kmsg("{node}"))}
    spec = dataclasses.replace(lab_spec(lab_cluster, lab_kubectl), params={"envcheck_health_env": env})
    try:
        append_kmsg(logs["lab-node1"], xid_line(pci_bus_id(1), 79, "GPU has fallen off the bus.",
                                                when=now - timedelta(hours=1)))
        append_kmsg(logs["lab-node2"], xid_line(pci_bus_id(0), 79, "GPU has fallen off the bus.",
                                                when=now - timedelta(hours=3)))
        out = io.StringIO()
        status = envcheck_task("kube-lab", mode="k8s", run_id="k8s-health", root=tmp_path, out=out, skip_gpu=True,
                               cluster_spec=spec, kubectl=lab_kubectl,
                               overrides=[*SMOKE, "envcheck_scripts=image", "envcheck_cross_node=false"])
    finally:
        for n, data in kept.items():
            logs[n].write_bytes(data)
    assert status is ExitStatus.FAILED, out.getvalue()
    by_node = {n["node"]: n for n in fleet(tmp_path, "k8s-health")["nodes"]}
    flagged, clean = by_node["lab-node1"]["steps"]["health"], by_node["lab-node2"]["steps"]["health"]
    assert flagged["status"] == "FAIL", flagged
    assert "Xid 79" in flagged["summary"] and pci_bus_id(1) in flagged["summary"], flagged["summary"]
    assert clean["status"] == "PASS", clean
    xid = next(c for c in clean["checks"] if c["name"] == "xid")
    assert xid["values"]["older"] == 1 and not xid["values"]["flagged"], xid
    # the NVML side ran in the pod too: both simulated GPUs answered the health query
    visible = next(c for c in clean["checks"] if c["name"] == "gpus_visible")
    assert len(visible["values"]["visible"]) == 2 and not visible["values"]["lost"], visible
    health = tmp_path / ".tmplog" / "k8s-health" / "envcheck" / "kube-lab" / "lab-node1" / "health.txt"
    assert "NVRM: Xid (PCI:0000:02:00): 79" in health.read_text()
    assert leftovers(lab_kubectl) == []
