"""The lab Kubernetes cluster, driven by the real kubectl through :class:`xpushare.transport.kubectl.Kubectl`.

Covers what the lab must do for the tool's verbs (pods, logs, annotate, delete, waits, DaemonSet
rollout, cordon/drain, eviction), the real scheduler's wiring as the session lab runs it (registration
through the pod's identity, annotations read over TLS, metrics, memory limits) and the cluster faults.
Quota timing and the ``sut`` fault are in tests/e2e/lab/test_real_sut.py.
"""

from __future__ import annotations

import os
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.lab.cluster import LabCluster
from xpushare.transport.kube_errors import KubeNotFound
from xpushare.transport.kube_objects import Pod
from xpushare.transport.kubectl import Kubectl

pytest_plugins = ["tests.lab.fixtures"]  # lab_cluster, lab_kubectl, lab_faults
pytestmark = [pytest.mark.lab]

RES = "xpushare.com/gpu"
CORE = "xpushare.com/gpu-core-limit"
MEM = "xpushare.com/gpu-memory-limit"


# ------------------------------------------------------------------------------------ helpers


def manifest(name: str, code: str, *, labels: dict[str, str], annotations: dict[str, str] | None = None,
             gpu: int = 1, restart: str = "Never", node: str | None = None, grace: int | None = None,
             env: dict[str, str] | None = None, resource: str = RES) -> str:
    """A pod running ``python -c <code>`` (YAML)."""
    container: dict[str, Any] = {"name": "main", "image": "lab/python:3", "command": ["python", "-c", code]}
    if gpu:
        container["resources"] = {"limits": {resource: gpu}}
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    spec: dict[str, Any] = {"restartPolicy": restart, "containers": [container]}
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    meta: dict[str, Any] = {"name": name, "labels": labels}
    if annotations:
        meta["annotations"] = annotations
    return yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})


SLEEPER = "import os,time\nprint('pid', os.getpid(), flush=True)\ntime.sleep(60)"
#: A client of the simulated GPU: the real library registers it with the node's scheduler at ``cuInit`` (the
#: workloads' ``cudadrv`` device), then it holds ``MIB`` MiB and sleeps.
GPU_SLEEPER = ("import os,sys,time\nsys.path.insert(0, 'workloads')\nimport _common as c\n"
               "d = c.select_device('cudadrv')\nbufs = [d.empty(({mib} * 2**18,))]\n"
               "print('pid', os.getpid(), flush=True)\ntime.sleep(60)")


def wait_for(what: str, pred: Callable[[], Any], timeout_s: float, interval_s: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval_s)


def scheduler_log(k: Kubectl, lab: LabCluster, since: datetime | None = None) -> str:
    return k.logs(selector=lab.names.scheduler_label, namespace=lab.names.namespace, since_time=since,
                  timestamps=False)


def http_get(url: str, method: str = "GET") -> tuple[int, str, str]:
    req = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, resp.headers.get("Content-Type", ""), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type", ""), exc.read().decode()


def metrics(lab: LabCluster, node: str) -> dict[str, Any]:
    """Families of the node scheduler's /metrics, parsed by prometheus_client: name → family."""
    status, _, text = http_get(lab.scheduler_url(node))
    assert status == 200
    return {f.name: f for f in text_string_to_metric_families(text)}


def samples(fams: dict[str, Any], name: str, **labels: str) -> list[Any]:
    fam = fams.get(name.removesuffix("_total"))
    return [s for s in (fam.samples if fam else []) if all(s.labels.get(k) == v for k, v in labels.items())]


def find(pattern: str, text: str) -> str:
    """The first group of ``pattern`` in ``text`` (multi-line); fails the test when absent."""
    m = re.search(pattern, text, re.M)
    assert m is not None, f"{pattern!r} not found in:\n{text}"
    return m.group(1)


def pod_pid(k: Kubectl, pod: str) -> int:
    """The pid the pod's workload printed (``pid <n>``); the library's lines come first, so wait for that one."""
    def pid_line() -> str | None:
        m = re.search(r"^pid (\d+)$", k.logs(pod, timestamps=False), re.M)
        return m.group(1) if m else None
    return int(wait_for(f"pid line of {pod}", pid_line, 20))


def proc_state(pid: int) -> str | None:
    """The process's state letter (``/proc/<pid>/stat``), None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


@pytest.fixture
def cleanup(lab_kubectl: Kubectl) -> Iterator[list[str]]:
    """Selectors to delete after the test (no wait, forced)."""
    selectors: list[str] = []
    yield selectors
    for sel in selectors:
        lab_kubectl.delete(sel, wait=False, grace_period_s=0)


# ----------------------------------------------------------------------------- API and kubelet


def test_nodes_and_daemonsets(lab_cluster: LabCluster, lab_kubectl: Kubectl) -> None:
    nodes = lab_kubectl.list_nodes()
    assert [n.name for n in nodes] == ["lab-node1", "lab-node2"]
    for n in nodes:
        assert n.ready and not n.unschedulable
        assert n.allocatable_count(RES) == 20
        assert n.internal_ip == lab_cluster.node_address(n.name)
    names = lab_cluster.names
    for ds in (names.scheduler_daemonset, names.device_plugin_daemonset):
        st = lab_kubectl.get_daemonset(ds, names.namespace)
        assert st.desired == 2 and st.rolled_out, st
    sched = lab_kubectl.list_pods(names.scheduler_label, namespace=names.namespace)
    assert sorted((p.node, p.pod_ip) for p in sched) == [
        ("lab-node1", lab_cluster.scheduler_address("lab-node1")),
        ("lab-node2", lab_cluster.scheduler_address("lab-node2")),
    ]
    assert lab_kubectl.server_version() == "v1.37.1-lab"


def test_apply_wait_terminal_one_list_per_poll(lab_kubectl: Kubectl, cleanup: list[str]) -> None:
    cleanup.append("test=lifecycle")
    code_ok = ("import os\nfor k in ('HOSTNAME','NVIDIA_VISIBLE_DEVICES','LD_PRELOAD','GREETING'):"
               " print(k, os.environ.get(k))")
    k = lab_kubectl
    k.apply(manifest("life-ok", code_ok, labels={"test": "lifecycle"}, env={"GREETING": "hi there"}))
    k.apply(manifest("life-fail", "import sys; sys.exit(3)", labels={"test": "lifecycle"}, gpu=0))
    polls: list[float] = []

    def sleep(s: float) -> None:
        polls.append(s)
        time.sleep(s)

    before = k.calls
    pods = k.wait_pods("test=lifecycle", until="terminal", count=2, timeout_s=30, poll_s=0.3, sleep=sleep)
    assert k.calls - before == len(polls) + 1  # one list call per poll
    by_name = {p.name: p for p in pods}
    ok, bad = by_name["life-ok"], by_name["life-fail"]
    assert (ok.phase, ok.exit_code, bad.phase, bad.exit_code) == ("Succeeded", 0, "Failed", 3)
    assert ok.node in ("lab-node1", "lab-node2") and re.fullmatch(r"127\.0\.[12]\.\d+", ok.pod_ip or "")
    assert ok.started_at and ok.finished_at and ok.finished_at >= ok.started_at
    assert ok.container is not None and ok.container.state == "terminated" and ok.restart_count == 0
    assert ok.env("GREETING") == "hi there"
    out = k.logs("life-ok", timestamps=False)
    assert "HOSTNAME life-ok" in out
    assert re.search(rf"NVIDIA_VISIBLE_DEVICES GPU-lab-{ok.node}-[01]$", out, re.M)
    assert re.search(r"^LD_PRELOAD \S+/libxpushare\.so$", out, re.M)  # the real client library (it registers at cuInit)


def test_wait_running_then_delete_with_wait(lab_kubectl: Kubectl, lab_cluster: LabCluster) -> None:
    k = lab_kubectl
    k.apply(manifest("sleep-a", SLEEPER, labels={"test": "del"}))
    k.apply(manifest("sleep-b", SLEEPER, labels={"test": "del"}, gpu=0))
    pods = k.wait_pods("test=del", until="running", count=2, timeout_s=20, poll_s=0.2)
    assert {p.phase for p in pods} == {"Running"}
    assert all(p.container and p.container.ready for p in pods)
    pid = pod_pid(k, "sleep-a")
    result = k.delete("test=del", wait=True, timeout_s=20)
    assert sorted(result.deleted) == ["pod/sleep-a", "pod/sleep-b"] and not result.forced
    assert k.list_pods("test=del") == []
    assert proc_state(pid) is None  # the process group is gone with the pod


def test_delete_falls_back_to_force(lab_kubectl: Kubectl) -> None:
    k = lab_kubectl
    stubborn = "import signal,time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('pid', __import__('os').getpid(), flush=True)\ntime.sleep(60)"  # noqa: E501
    k.apply(manifest("stubborn", stubborn, labels={"test": "force"}, gpu=0, grace=30))
    k.wait_pods("test=force", until="running", count=1, timeout_s=20, poll_s=0.2)
    pid = pod_pid(k, "stubborn")
    result = k.delete("test=force", wait=True, timeout_s=1)
    assert result.forced and result.deleted == ("pod/stubborn",)
    assert k.list_pods("test=force") == []
    # Dead: gone, or a zombie waiting to be reaped (SIGKILL cannot be ignored).
    wait_for("the force-deleted pod's process to die", lambda: proc_state(pid) in (None, "Z"), 20)


def test_logs_selector_tail_timestamps_since(lab_kubectl: Kubectl, cleanup: list[str]) -> None:
    cleanup.append("test=logs")
    k = lab_kubectl
    code = "import time\nfor i in range(25): print('line', i, flush=True)\ntime.sleep(0.2)\nprint('late', flush=True)"
    k.apply(manifest("logs-a", code, labels={"test": "logs"}, gpu=0))
    k.apply(manifest("logs-b", code, labels={"test": "logs"}, gpu=0))
    k.wait_pods("test=logs", until="terminal", count=2, timeout_s=20, poll_s=0.3)
    text = k.logs(selector="test=logs")
    lines = text.splitlines()
    assert len(lines) == 52  # kubectl's default for a selector would be 10 per pod
    stamp, _, rest = lines[0].partition(" ")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", stamp) and rest == "line 0"
    per_pod = k.logs_by_pod("test=logs", timestamps=False)
    assert set(per_pod) == {"logs-a", "logs-b"}
    assert per_pod["logs-a"].splitlines()[-1] == "late" and len(per_pod["logs-a"].splitlines()) == 26
    # logs-a's own "late" line: the two pods' may fall in different seconds on a busy machine
    late_stamp = next(line.split(" ")[0] for line in k.logs("logs-a").splitlines() if line.endswith(" late"))
    since = datetime.fromisoformat(late_stamp.replace("Z", "+00:00")[:19] + "+00:00") + timedelta(seconds=1)
    assert k.logs("logs-a", since_time=since, timestamps=False) == ""
    assert "late" in k.logs("logs-a", since_time=since - timedelta(seconds=1), timestamps=False)


def test_not_found_is_typed(lab_kubectl: Kubectl) -> None:
    with pytest.raises(KubeNotFound) as info:
        lab_kubectl.get_pod("no-such-pod")
    assert 'pods "no-such-pod" not found' in info.value.stderr
    assert info.value.command[0].endswith("kubectl") and "get" in info.value.command
    with pytest.raises(KubeNotFound):
        lab_kubectl.logs("no-such-pod")
    with pytest.raises(KubeNotFound):
        lab_kubectl.get_daemonset("nope", "xpushare-system")


# ------------------------------------------------------------------------------ the real scheduler


def test_registration_annotations_and_metrics(lab_cluster: LabCluster, lab_kubectl: Kubectl,
                                              cleanup: list[str]) -> None:
    """The real library registers the pod by the identity the kubelet gives it; the scheduler reads its
    annotations over TLS at registration and again within its 5 s poll after a change."""
    cleanup.append("test=annot")
    k = lab_kubectl
    start = datetime.now(timezone.utc) - timedelta(seconds=1)
    k.apply(manifest("annot", GPU_SLEEPER.format(mib=1), labels={"test": "annot"}, annotations={CORE: "60"}))
    pod: Pod = k.wait_pods("test=annot", until="running", count=1, timeout_s=20, poll_s=0.2)[0]
    pid = pod_pid(k, "annot")
    assert pod.node is not None
    reg = wait_for("registration line", lambda: re.search(
        r"Registered client ([0-9a-f]{16}) on GPU (GPU-lab-\S+) with Pod name = annot, Pod namespace = default",
        scheduler_log(k, lab_cluster, start)), 10)
    cid = reg.group(1)
    assert "Applying initial compute limit for default/annot: 60%" in scheduler_log(k, lab_cluster, start)
    assert "Core limit = 60%" in k.logs("annot", timestamps=False)
    node = pod.node  # a str (asserted above), also inside the lambda
    info = wait_for("client_info", lambda: samples(metrics(lab_cluster, node), "xpushare_client_info",
                                                   pod="annot"), 10)
    assert len(info) == 1 and info[0].labels["host_pid"] == str(pid)
    assert info[0].labels["client_id"] == cid and info[0].labels["gpu_uuid"] == reg.group(2)
    fams = metrics(lab_cluster, pod.node)
    assert samples(fams, "xpushare_client_core_quota_config_percent", pod="annot")[0].value == 60
    assert samples(fams, "xpushare_scheduler_messages_total", type="REGISTER")[0].value >= 1

    k.annotate("annot", {CORE: "40", MEM: "1Gi"})
    t0 = time.monotonic()
    log = wait_for("limit change lines", lambda: (lambda t: t if f"Sending UPDATE_LIMIT to client {cid}" in t
                                                  else None)(scheduler_log(k, lab_cluster, start)), 15)
    assert time.monotonic() - t0 < 15  # the watcher polls every 5 s
    log = wait_for("core change line", lambda: (lambda t: t if f"Sending UPDATE_CORE_LIMIT to client {cid}" in t
                                                else None)(scheduler_log(k, lab_cluster, start)), 10)
    assert f"Sending UPDATE_CORE_LIMIT to client {cid}: 40%" in log
    assert f"Sending UPDATE_LIMIT to client {cid}: 1073741824 bytes (1.00 GiB)" in log
    fams = metrics(lab_cluster, pod.node)
    assert samples(fams, "xpushare_client_core_quota_config_percent", pod="annot")[0].value == 40
    assert samples(fams, "xpushare_client_memory_quota_bytes", pod="annot")[0].value == 2**30
    k.delete("test=annot", timeout_s=20)
    wait_for("Removing client", lambda: f"Removing client {cid}" in scheduler_log(k, lab_cluster, start), 10)


def test_namespaces_same_names_and_the_pods_real_namespace(lab_cluster: LabCluster, lab_kubectl: Kubectl) -> None:
    """Pods only in a namespace that exists; a new namespace has its default ServiceAccount; two pods of one name in
    two namespaces each register with their own namespace (the service-account file the kubelet mounts) and get
    their own namespace's annotations; deleting a namespace deletes what is in it."""
    k = lab_kubectl
    with pytest.raises(KubeNotFound):
        k.apply(manifest("twin", SLEEPER, labels={"test": "ns"}, gpu=0), namespace="tenant-x")
    start = datetime.now(timezone.utc) - timedelta(seconds=1)
    try:
        for ns, core in (("tenant-a", "30"), ("tenant-b", "70")):
            k.apply(yaml.safe_dump({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}), namespace=None)
            assert "serviceaccount/default" in k.run(["get", "serviceaccount", "default", "-o", "name"],
                                                     namespace=ns).stdout
            k.apply(manifest("twin", GPU_SLEEPER.format(mib=1), labels={"test": "ns"}, annotations={CORE: core}),
                    namespace=ns)
        pods = k.wait_pods("test=ns", until="running", count=2, timeout_s=30, poll_s=0.2, all_namespaces=True)
        assert sorted((p.namespace, p.name) for p in pods) == [("tenant-a", "twin"), ("tenant-b", "twin")]
        for ns, core in (("tenant-a", "30"), ("tenant-b", "70")):
            wait_for(f"{ns} registration", lambda ns=ns: f"Pod name = twin, Pod namespace = {ns}" in scheduler_log(
                k, lab_cluster, start), 10)
            assert f"Applying initial compute limit for {ns}/twin: {core}%" in scheduler_log(k, lab_cluster, start)
    finally:
        for ns in ("tenant-a", "tenant-b"):
            k.delete(name=ns, kind="namespace", wait=False, namespace=None)
    assert k.list_pods("test=ns", all_namespaces=True) == []


def test_metrics_endpoint_exposition(lab_cluster: LabCluster) -> None:
    node = "lab-node1"
    status, ctype, text = http_get(lab_cluster.scheduler_url(node))
    assert status == 200 and ctype.startswith("text/plain; version=0.0.4")
    fams = list(text_string_to_metric_families(text))
    assert len(fams) >= 30 and text.count("# HELP ") == len(fams)
    assert all(line.startswith("xpushare_") for line in text.splitlines() if line and not line.startswith("#"))
    by_name = {f.name: f for f in fams}
    messages = by_name["xpushare_scheduler_messages"]  # the parser drops a counter's _total
    assert messages.type == "counter" and len(messages.samples) >= 10
    gpus = {s.labels["gpu_uuid"] for s in by_name["xpushare_gpu_info"].samples}
    assert gpus == set(lab_cluster.gpu_uuids(node))
    assert http_get(lab_cluster.scheduler_url(node, "/healthz"))[0] == 200
    assert http_get(lab_cluster.scheduler_url(node, "/nope"))[0] == 404


def test_memory_annotation_rejects_allocation(lab_kubectl: Kubectl, cleanup: list[str]) -> None:
    """The annotation's limit, sent after registration, replaces the env limit; the next allocation over it is
    rejected with the library's line and the workload sees an out-of-memory error. The workload waits 3 s after
    ``cuInit``: the scheduler reads the annotation after REGISTER, and allocations made before its UPDATE_LIMIT
    arrives are held to the env limit only (docs/findings.md)."""
    cleanup.append("test=mem")
    code = ("import sys,time\nsys.path.insert(0, 'workloads')\nimport _common as c\nd = c.select_device('cudadrv')\n"
            "time.sleep(3)\nx = d.empty((4 * 2**20,))\nprint('small ok', flush=True)\n"
            "y = d.empty((16 * 2**20,))\nprint('big ok', flush=True)")
    k = lab_kubectl
    k.apply(manifest("mem-limited", code, labels={"test": "mem"}, annotations={MEM: "32Mi"},
                     env={"XPUSHARE_GPU_MEMORY_LIMIT": "1Gi"}))
    pod = k.wait_pods("test=mem", until="terminal", count=1, timeout_s=60, poll_s=0.5)[0]
    out = k.logs("mem-limited", timestamps=False)
    assert (pod.phase, pod.exit_code) == ("Failed", 1), out
    assert "small ok" in out and "big ok" not in out
    assert re.search(r"\[XPUSHARE\]\[WARN\]: cuMemAlloc rejected: 16777216 \+ 67108864 = 83886080 would exceed "
                     r"limit 33554432 bytes", out), out
    assert "CUDA out of memory" in out


# -------------------------------------------------------------------------- rollout and nodes


def test_rollout_restart_and_status(lab_cluster: LabCluster, lab_kubectl: Kubectl) -> None:
    names = lab_cluster.names
    k = lab_kubectl
    before = {p.name for p in k.list_pods(names.scheduler_label, namespace=names.namespace)}
    pid_before = lab_cluster.scheduler_pid("lab-node1")
    k.rollout_restart("daemonset", names.scheduler_daemonset, names.namespace)
    out = k.rollout_status("daemonset", names.scheduler_daemonset, names.namespace, timeout_s=60)
    assert "successfully rolled out" in out
    after = k.list_pods(names.scheduler_label, namespace=names.namespace)
    assert len(after) == 2 and not before & {p.name for p in after}
    assert all(p.phase == "Running" and "kubectl.kubernetes.io/restartedAt" in p.annotations for p in after)
    ds = k.get_daemonset(names.scheduler_daemonset, names.namespace)
    assert ds.generation == ds.observed_generation >= 2 and ds.rolled_out
    lab_cluster.wait_ready(20)
    assert lab_cluster.scheduler_pid("lab-node1") not in (None, pid_before)


def test_cordon_drain_uncordon(lab_cluster: LabCluster, lab_kubectl: Kubectl, cleanup: list[str]) -> None:
    cleanup.append("test=drain")
    k = lab_kubectl
    k.apply(manifest("drain-1", SLEEPER, labels={"test": "drain"}, node="lab-node1"))
    k.wait_pods("test=drain", until="running", count=1, timeout_s=20, poll_s=0.2)
    try:
        k.cordon("lab-node2")
        assert k.get_node("lab-node2").unschedulable
        k.uncordon("lab-node2")
        out = k.drain("lab-node1", timeout_s=30)
        assert "evicting pod default/drain-1" in out and "drained" in out
        assert k.get_node("lab-node1").unschedulable
        assert k.list_pods("test=drain") == []
        names = lab_cluster.names  # DaemonSet pods stay
        assert "lab-node1" in {p.node for p in k.list_pods(names.scheduler_label, namespace=names.namespace)}
        k.apply(manifest("drain-2", SLEEPER, labels={"test": "drain"}, gpu=0))
        assert k.wait_pods("test=drain", until="running", count=1, timeout_s=20, poll_s=0.2)[0].node == "lab-node2"
    finally:
        k.uncordon("lab-node1")
    assert not k.get_node("lab-node1").unschedulable


# ------------------------------------------------------------------------------------- faults


def test_fault_scheduler_down(lab_faults: LabCluster, lab_kubectl: Kubectl, cleanup: list[str]) -> None:
    cleanup.append("test=f-down")
    k = lab_kubectl
    names = lab_faults.names
    lab_faults.set_faults("lab-node2", scheduler_down=True)
    lab_faults.wait_scheduler("lab-node2", up=False, timeout_s=5)
    k.apply(manifest("f-down", GPU_SLEEPER.format(mib=1), labels={"test": "f-down"}, node="lab-node2"))
    pod = k.wait_pods("test=f-down", until="terminal", count=1, timeout_s=30, poll_s=0.2)[0]
    out = k.logs("f-down", timestamps=False)
    assert pod.phase == "Failed", out  # the real library cannot reach the socket at cuInit
    assert "/var/run/xpushare/scheduler.sock" in out, out
    sched = next(p for p in k.list_pods(names.scheduler_label, namespace=names.namespace) if p.node == "lab-node2")
    assert sched.container is not None and not sched.container.ready  # crash-looping
    lab_faults.set_faults("lab-node2", scheduler_down=False)
    k.delete(name=sched.name, namespace=names.namespace, timeout_s=20)  # skip the back-off
    lab_faults.wait_scheduler("lab-node2", up=True, timeout_s=15)


def test_mutant_scheduler_leaks_per_registration(lab_faults: LabCluster, lab_kubectl: Kubectl,
                                                  cleanup: list[str]) -> None:
    """The ``leak-per-registration`` build keeps 4 MiB and an fd per REGISTER: three clients, 12 MiB more."""
    cleanup.append("test=leak")
    with lab_faults.running_mutant("leak-per-registration", "lab-node1"):
        pid = lab_faults.scheduler_pid("lab-node1")
        assert pid is not None

        def rss_kib() -> int:
            with open(f"/proc/{pid}/status") as fh:
                return int(find(r"^VmRSS:\s+(\d+) kB", fh.read()))

        before, fds = rss_kib(), len(os.listdir(f"/proc/{pid}/fd"))
        k = lab_kubectl
        for i in range(3):
            k.apply(manifest(f"leak-{i}", GPU_SLEEPER.replace("time.sleep(60)", "time.sleep(0)").format(mib=1),
                             labels={"test": "leak"}, node="lab-node1"))
        k.wait_pods("test=leak", until="terminal", count=3, timeout_s=60, poll_s=0.5)
        assert rss_kib() - before >= 3 * 4 * 1024 - 512
        assert len(os.listdir(f"/proc/{pid}/fd")) >= fds + 3


# ------------------------------------------------------------------------ API server pieces (no lab)


def test_selectors_and_patches() -> None:
    from tests.lab.kubeapi import (
        ApiError,
        json_patch,
        merge_patch,
        parse_field_selector,
        parse_label_selector,
        strategic_merge_patch,
    )

    labels = {"app": "w", "run": "r1", "tier": "gpu"}
    for sel, want in [("app=w", True), ("app==w,run=r2", False), ("run!=r2", True), ("run in (r1, r3)", True),
                      ("run notin (r1)", False), ("tier", True), ("!tier", False), ("!absent,app", True), ("", True)]:
        assert parse_label_selector(sel)(labels) is want, sel
    with pytest.raises(ApiError):
        parse_label_selector("app=(")
    pod = {"metadata": {"name": "p"}, "spec": {"nodeName": "n1", "unschedulable": True}, "status": {"phase": "Running"}}
    assert parse_field_selector("spec.nodeName=n1,status.phase!=Failed")(pod)
    assert parse_field_selector("spec.unschedulable=true")(pod) and not parse_field_selector("metadata.name=q")(pod)
    assert merge_patch({"a": {"b": 1, "c": 2}}, {"a": {"b": None, "d": 3}}) == {"a": {"c": 2, "d": 3}}
    target = {"containers": [{"name": "a", "env": [{"name": "X", "value": "1"}]}, {"name": "b"}]}
    patch = {"containers": [{"name": "a", "env": [{"name": "Y", "value": "2"}]}], "$setElementOrder/containers": []}
    assert strategic_merge_patch(target, patch) == {
        "containers": [{"name": "a", "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}]}, {"name": "b"}]}
    ops: list[dict[str, Any]] = [
        {"op": "add", "path": "/a/-", "value": 3},
        {"op": "add", "path": "/b", "value": 0},
        {"op": "replace", "path": "/a/0", "value": 9},
        {"op": "remove", "path": "/a/1"},
    ]
    assert json_patch({"a": [1, 2]}, ops) == {"a": [9, 3], "b": 0}
    with pytest.raises(ApiError):
        json_patch({}, [{"op": "replace", "path": "/missing", "value": 1}])
