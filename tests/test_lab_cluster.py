"""The lab Kubernetes cluster, driven by the real kubectl through :class:`xpushare.kube.Kubectl`.

Covers what the lab must do for the tool's verbs (pods, logs, annotate, delete, waits, DaemonSet
rollout, cordon/drain, eviction), the lab scheduler (log lines, metrics, duty-cycling, memory hook)
and every broken-lab switch.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.lab.cluster import LabCluster, LocalHost
from tests.lab.kubelab import require_kube_lab, started_kube_lab
from xpushare.kube import Kubectl, KubeNotFound, Pod

#: A lab cluster of a test's own (started, stopped, its address block held meanwhile): ``with lab_of_its_own(...)``.
lab_of_its_own = contextlib.contextmanager(started_kube_lab)

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
#: The client's first MEM_UPDATE, as the lab memory hook writes it at a workload's first allocation: the lab
#: scheduler throttles a client only from then on (tests/lab/memhook.py, labscheduler.py).
FIRST_ALLOCATION = ("import os\n"
                    "_p = os.path.join(os.environ['XPUSHARE_LAB_CLIENT_DIR'], os.environ['XPUSHARE_LAB_CLIENT_ID'])\n"
                    "open(_p + '.mem', 'w').write('1048576\\n')\n")
SPINNER = FIRST_ALLOCATION + "import os,time\nprint('pid', os.getpid(), flush=True)\nwhile True: pass"
#: A spinner that never allocates: a process still starting up (importing its framework).
STARTING = "import os,time\nprint('pid', os.getpid(), flush=True)\nwhile True: pass"


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


def start_spinner(k: Kubectl, name: str, code: str, *, core: int) -> int:
    """Run ``code`` (which prints ``pid <n>``) as pod ``name`` (label ``test=<name>``) on lab-node1 with a core
    limit; return its pid once it runs, 0.3 s later (the scheduler has registered it)."""
    k.apply(manifest(name, code, labels={"test": name}, node="lab-node1", annotations={CORE: str(core)}))
    k.wait_pods(f"test={name}", until="running", count=1, timeout_s=20, poll_s=0.2)
    pid = pod_pid(k, name)
    time.sleep(0.3)
    return pid


def proc_state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def run_fraction(pid: int, seconds: float) -> float:
    """Share of samples in which the process was not stopped (SIGSTOP shows as state T)."""
    states = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        states.append(proc_state(pid))
        time.sleep(0.01)
    states = [s for s in states if s]
    return sum(1 for s in states if s != "T") / len(states)


def on_cpu_ns(pid: int) -> int:
    """Nanoseconds the process's main thread has run on a CPU (``/proc/<pid>/schedstat``)."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])


def cpu_share(pid: int, seconds: float) -> float:
    """On-CPU seconds of the process per wall second over ``seconds``."""
    t0, c0 = time.monotonic(), on_cpu_ns(pid)
    time.sleep(seconds)
    return (on_cpu_ns(pid) - c0) / 1e9 / (time.monotonic() - t0)


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
    code_ok = ("import os\nfor k in ('HOSTNAME','NVIDIA_VISIBLE_DEVICES','CUDA_VISIBLE_DEVICES','GREETING'):"
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
    assert "CUDA_VISIBLE_DEVICES 0" in out and "Client ID = " in out


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
    late_stamp = next(line.split(" ")[0] for line in lines if line.endswith(" late"))
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


# ------------------------------------------------------------------------------ lab scheduler


def test_registration_annotations_and_metrics(lab_cluster: LabCluster, lab_kubectl: Kubectl,
                                              cleanup: list[str]) -> None:
    cleanup.append("test=annot")
    k = lab_kubectl
    start = datetime.now(timezone.utc) - timedelta(seconds=1)
    k.apply(manifest("annot", SLEEPER, labels={"test": "annot"}))
    pod: Pod = k.wait_pods("test=annot", until="running", count=1, timeout_s=20, poll_s=0.2)[0]
    pid = pod_pid(k, "annot")
    assert pod.node is not None
    reg = wait_for("registration line", lambda: re.search(
        r"Registered client ([0-9a-f]{16}) on GPU (GPU-lab-\S+) with Pod name = annot, Pod namespace = default",
        scheduler_log(k, lab_cluster, start)), 10)
    cid = reg.group(1)
    fams = metrics(lab_cluster, pod.node)
    info = samples(fams, "xpushare_client_info", pod="annot")
    assert len(info) == 1 and info[0].labels["host_pid"] == str(pid) and info[0].labels["gpu_index"] == "-1"
    assert info[0].labels["client_id"] == cid and info[0].labels["gpu_uuid"] == reg.group(2)
    assert samples(fams, "xpushare_client_core_quota_config_percent", pod="annot")[0].value == 100
    assert samples(fams, "xpushare_scheduler_messages_total", type="REGISTER")[0].value >= 1

    k.annotate("annot", {CORE: "40", MEM: "1Gi"})
    t0 = time.monotonic()
    log = wait_for("limit change lines", lambda: (lambda t: t if "Memory limit changed" in t else None)(
        scheduler_log(k, lab_cluster, start)), 10)
    assert time.monotonic() - t0 < 10
    assert "Compute limit changed for pod default/annot: 100% -> 40%" in log
    assert f"Sending UPDATE_CORE_LIMIT to client {cid}: 40%" in log
    assert re.search(r"Memory limit changed for pod default/annot: 0 -> 1073741824 bytes", log)
    assert f"Sending UPDATE_LIMIT to client {cid}: 1073741824 bytes (1.00 GiB)" in log
    fams = metrics(lab_cluster, pod.node)
    assert samples(fams, "xpushare_client_core_quota_config_percent", pod="annot")[0].value == 40
    assert samples(fams, "xpushare_client_memory_quota_bytes", pod="annot")[0].value == 2**30

    k.annotate("annot", {CORE: None})  # removal resets the core limit to 100
    wait_for("reset to 100%", lambda: "default/annot: 40% -> 100%" in scheduler_log(k, lab_cluster, start), 10)
    k.delete("test=annot", timeout_s=20)
    wait_for("Removing client", lambda: f"Removing client {cid}" in scheduler_log(k, lab_cluster, start), 5)


def test_metrics_endpoint_exposition(lab_cluster: LabCluster) -> None:
    node = "lab-node1"
    status, ctype, text = http_get(lab_cluster.scheduler_url(node))
    assert status == 200 and ctype.startswith("text/plain; version=0.0.4")
    fams = list(text_string_to_metric_families(text))
    assert len(fams) == 36 and text.count("# HELP ") == 36
    assert all(line.startswith("xpushare_") for line in text.splitlines() if line and not line.startswith("#"))
    by_name = {f.name: f for f in fams}
    messages = by_name["xpushare_scheduler_messages"]  # the parser drops a counter's _total
    assert messages.type == "counter" and len(messages.samples) == 14
    gpus = {s.labels["gpu_uuid"] for s in by_name["xpushare_gpu_info"].samples}
    assert gpus == set(lab_cluster.gpu_uuids(node))
    assert http_get(lab_cluster.scheduler_url(node, "/healthz"))[::2] == (200, "OK\n")
    assert http_get(lab_cluster.scheduler_url(node, "/nope"))[0] == 404
    assert http_get(lab_cluster.scheduler_url(node), method="HEAD")[0] == 404


@pytest.mark.cpu_exclusive  # duty-cycle fractions of a pod: other workers' pods would starve it
def test_core_limit_slows_cpu_loop(lab_kubectl: Kubectl, cleanup: list[str]) -> None:
    cleanup.append("test=duty")
    code = FIRST_ALLOCATION.replace("{", "{{").replace("}", "}}") + (
        "import time\nt=time.time()\nn=0\nwhile n < {n}: n += 1\n"
        "print(f'--- {{time.time()-t:.3f}} seconds ---', flush=True)")
    k = lab_kubectl
    # calibrate ~0.7 s of CPU work on this machine first (CPU time: load elsewhere does not change it)
    t = time.process_time()
    n = 0
    while n < 500_000:
        n += 1
    per_iter = (time.process_time() - t) / 500_000
    work_s = 0.7
    work = int(work_s / per_iter)
    k.apply(manifest("duty-free", code.format(n=work), labels={"test": "duty"}, node="lab-node1"))
    k.apply(manifest("duty-25", code.format(n=work), labels={"test": "duty"}, node="lab-node2",
                     annotations={CORE: "25"}))
    k.wait_pods("test=duty", until="terminal", count=2, timeout_s=90, poll_s=0.3)
    secs = {name: float(find(r"--- ([0-9.]+) seconds ---", text))
            for name, text in k.logs_by_pod("test=duty", timestamps=False).items()}
    # A 25 % pod is billed 250 ms of CPU per second: it cannot finish 0.7 CPU-s in much under 2.8 s, however
    # idle the machine (load only slows it more). The free pod is not billed, so it is faster unless load
    # starves it too; its ratio is only required to show the limit at all.
    assert secs["duty-25"] >= 3.0 * work_s, secs
    assert secs["duty-25"] / secs["duty-free"] >= 1.5, secs


@pytest.mark.cpu_exclusive  # duty-cycle fractions of a pod: other workers' pods would starve it
def test_core_limit_starts_at_the_first_allocation(lab_cluster: LabCluster, lab_kubectl: Kubectl,
                                                   cleanup: list[str]) -> None:
    """Start-up (``import torch``) is CPU work: the lab throttles a client from its first allocation on."""
    cleanup.append("test=late")
    pid = start_spinner(lab_kubectl, "late", STARTING, core=25)
    time.sleep(0.2)
    assert run_fraction(pid, 1.0) == 1.0  # registered with a 25 % limit, but not using the "GPU" yet
    clients = lab_cluster.workdir / "nodes" / "lab-node1" / "clients"
    client = next(p for p in clients.glob("*.json") if json.loads(p.read_text()).get("pod") == "late")
    (clients / f"{client.stem}.mem").write_text("1048576\n")  # its first allocation, as the hook reports it
    time.sleep(0.5)
    assert run_fraction(pid, 2.0) <= 0.4


@pytest.mark.cpu_exclusive  # duty-cycle fractions of a pod: other workers' pods would starve it
def test_limited_clients_of_one_gpu_take_turns(lab_cluster: LabCluster, lab_kubectl: Kubectl,
                                               cleanup: list[str]) -> None:
    """Three 40 % spinners on a 2-GPU node: the two that share a GPU never run at the same time."""
    cleanup.append("test=turns")
    k = lab_kubectl
    for i in range(3):
        k.apply(manifest(f"turns-{i}", SPINNER, labels={"test": "turns"}, node="lab-node1",
                         annotations={CORE: "40"}))
    k.wait_pods("test=turns", until="running", count=3, timeout_s=30, poll_s=0.2)
    pids = {f"turns-{i}": pod_pid(k, f"turns-{i}") for i in range(3)}
    clients = lab_cluster.workdir / "nodes" / "lab-node1" / "clients"
    gpu_of = {reg["pod"]: reg["gpu_uuid"] for reg in (json.loads(p.read_text()) for p in clients.glob("*.json"))}
    a, b = (pod for pod in pids if list(gpu_of.values()).count(gpu_of[pod]) == 2)
    time.sleep(1.0)
    both = alone = 0
    end = time.monotonic() + 3.0
    while time.monotonic() < end:
        sa, sb = proc_state(pids[a]), proc_state(pids[b])
        if sa and sb and "T" not in (sa, sb):
            both += 1
        elif sa and sb and (sa, sb).count("T") == 1:
            alone += 1
        time.sleep(0.005)
    assert alone > 50 and both <= 0.05 * (both + alone), (both, alone)


def test_memory_annotation_rejects_allocation(lab_kubectl: Kubectl, cleanup: list[str]) -> None:
    cleanup.append("test=mem")
    code = ("import torch\nx = torch.empty(16 * 2**20, dtype=torch.uint8)\nprint('small ok', flush=True)\n"
            "y = torch.empty(64 * 2**20, dtype=torch.uint8)\nprint('big ok', flush=True)")
    k = lab_kubectl
    # the env limit applies at start, the annotation (delivered at registration) later: the last one wins
    k.apply(manifest("mem-limited", code, labels={"test": "mem"}, annotations={MEM: "32Mi"},
                     env={"XPUSHARE_GPU_MEMORY_LIMIT": "1Gi"}))
    pod = k.wait_pods("test=mem", until="terminal", count=1, timeout_s=90, poll_s=0.5)[0]
    assert (pod.phase, pod.exit_code) == ("Failed", 1)
    out = k.logs("mem-limited", timestamps=False)
    assert "GPU memory limit set to 1073741824 bytes (1.00 GiB)" in out
    assert "Memory limit updated: 1073741824 -> 33554432 bytes (0.03 GiB)" in out
    assert "small ok" in out and "big ok" not in out
    assert re.search(r"\[XPUSHARE\]\[WARN\]: cuMemAlloc rejected: 16777216 \+ 67108864 = 83886080 would exceed "
                     r"limit 33554432 bytes \(32\.00 MiB\)", out)
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


# ---------------------------------------------------------------------------- broken-lab switches


def test_fault_ignore_annotations(lab_faults: LabCluster, lab_kubectl: Kubectl, cleanup: list[str]) -> None:
    cleanup.append("test=f-annot")
    lab_faults.set_faults("lab-node1", ignore_annotations=True)
    k = lab_kubectl
    start = datetime.now(timezone.utc) - timedelta(seconds=1)
    k.apply(manifest("f-annot", SLEEPER, labels={"test": "f-annot"}, node="lab-node1", annotations={CORE: "30"}))
    k.wait_pods("test=f-annot", until="running", count=1, timeout_s=20, poll_s=0.2)
    wait_for("registration", lambda: "Pod name = f-annot" in scheduler_log(k, lab_faults, start), 10)
    assert "Applying initial compute limit for default/f-annot" not in scheduler_log(k, lab_faults, start)
    fams = metrics(lab_faults, "lab-node1")
    assert samples(fams, "xpushare_client_core_quota_config_percent", pod="f-annot")[0].value == 100


@pytest.mark.cpu_exclusive  # duty-cycle fractions of a pod: other workers' pods would starve it
def test_fault_no_enforcement_and_skew(lab_faults: LabCluster, lab_kubectl: Kubectl, cleanup: list[str]) -> None:
    cleanup.append("test=f-enf")
    pid = start_spinner(lab_kubectl, "f-enf", SPINNER, core=50)
    healthy = run_fraction(pid, 2.0)
    lab_faults.set_faults("lab-node1", skew=1.3)
    time.sleep(0.5)  # let the current window end
    skewed = run_fraction(pid, 2.0)
    lab_faults.set_faults("lab-node1", skew=1.0, no_enforcement=True)
    free = run_fraction(pid, 0.5)
    assert 0.4 <= healthy <= 0.6, healthy
    assert 0.58 <= skewed <= 0.75, skewed
    assert free == 1.0


@pytest.mark.cpu_exclusive  # CPU shares of two pods: other workers' pods would starve them
def test_short_windows_shortchange_every_client_alike(lab_faults: LabCluster, lab_kubectl: Kubectl,
                                                      cleanup: list[str]) -> None:
    """30 % + 70 % on one GPU with skew 1.5: 450 + 1000 ms of budget do not fit a 1000 ms window. Each client
    gets the same share of its budget (ratio 70/30 ~ 2.2), not the first in line all of its own (~1.2)."""
    cleanup.append("test=fair")
    k = lab_kubectl
    # the device plugin gives each pod the GPU with the fewest allocations: sleepers steer both spinners to GPU 1
    pods = (("fair-s1", SLEEPER, None), ("fair-30", SPINNER, 30), ("fair-s2", SLEEPER, None), ("fair-70", SPINNER, 70))
    for count, (name, code, core) in enumerate(pods, start=1):
        k.apply(manifest(name, code, labels={"test": "fair"}, node="lab-node1",
                         annotations={CORE: str(core)} if core else None))
        k.wait_pods("test=fair", until="running", count=count, timeout_s=20, poll_s=0.2)
    clients = lab_faults.workdir / "nodes" / "lab-node1" / "clients"
    gpu_of = {reg["pod"]: reg["gpu_uuid"] for reg in (json.loads(p.read_text()) for p in clients.glob("*.json"))}
    assert gpu_of["fair-30"] == gpu_of["fair-70"], gpu_of
    pids = {name: pod_pid(k, name) for name in ("fair-30", "fair-70")}
    lab_faults.set_faults("lab-node1", skew=1.5)
    time.sleep(1.5)
    before = {name: on_cpu_ns(pid) for name, pid in pids.items()}
    time.sleep(4.0)
    used = {name: on_cpu_ns(pid) - before[name] for name, pid in pids.items()}
    assert 1.8 <= used["fair-70"] / max(1, used["fair-30"]) <= 3.5, used  # measured 2.5-2.7 (first in line: ~1.2)


def test_fault_metrics_missing(lab_faults: LabCluster) -> None:
    lab_faults.set_faults("lab-node2", metrics_missing=True)
    fams = metrics(lab_faults, "lab-node2")
    assert "xpushare_client_info" not in fams and "xpushare_gpu_utilization_ratio" not in fams
    assert "xpushare_nvml_up" in fams and len(fams) == 33
    lab_faults.set_faults("lab-node2", metrics_missing=["nvml_up"])
    assert "xpushare_nvml_up" not in metrics(lab_faults, "lab-node2")


def test_fault_scheduler_down(lab_faults: LabCluster, lab_kubectl: Kubectl, cleanup: list[str]) -> None:
    cleanup.append("test=f-down")
    k = lab_kubectl
    names = lab_faults.names
    lab_faults.set_faults("lab-node2", scheduler_down=True)
    lab_faults.wait_scheduler("lab-node2", up=False, timeout_s=5)
    k.apply(manifest("f-down", SLEEPER, labels={"test": "f-down"}, node="lab-node2"))
    pod = k.wait_pods("test=f-down", until="terminal", count=1, timeout_s=20, poll_s=0.2)[0]
    assert (pod.phase, pod.exit_code) == ("Failed", 1)
    assert "Failed to connect to UNIX socket at /var/run/xpushare/scheduler.sock" in k.logs("f-down")
    sched = next(p for p in k.list_pods(names.scheduler_label, namespace=names.namespace) if p.node == "lab-node2")
    assert sched.container is not None and not sched.container.ready  # crash-looping
    lab_faults.set_faults("lab-node2", scheduler_down=False)
    k.delete(name=sched.name, namespace=names.namespace, timeout_s=20)  # skip the back-off
    lab_faults.wait_scheduler("lab-node2", up=True, timeout_s=15)


def test_fault_scheduler_leaks_memory(lab_faults: LabCluster) -> None:
    pid = lab_faults.scheduler_pid("lab-node1")
    assert pid is not None

    def rss_kib() -> int:
        with open(f"/proc/{pid}/status") as fh:
            return int(find(r"^VmRSS:\s+(\d+) kB", fh.read()))

    before = rss_kib()
    lab_faults.set_faults("lab-node1", leak_bytes_per_s=32 * 2**20)
    time.sleep(1.6)
    grown = rss_kib() - before
    assert grown >= 24 * 1024, grown


# ------------------------------------------------------------------------------- nvshare naming


def test_nvshare_generation(tmp_path_factory: pytest.TempPathFactory) -> None:
    with lab_of_its_own(tmp_path_factory, "nv", generation="nvshare") as lab:
        k = Kubectl(LocalHost(), kubectl=require_kube_lab(), kubeconfig=str(lab.kubeconfig_path))
        sched = k.list_pods("name=nvshare-scheduler", namespace="nvshare-system")
        assert len(sched) == 2 and k.get_daemonset("nvshare-device-plugin", "nvshare-system").desired == 2
        assert k.get_node("lab-node1").allocatable_count("nvshare.com/gpu") == 20
        k.apply(manifest("nv", SLEEPER, labels={"test": "nv"}, resource="nvshare.com/gpu",
                         annotations={"nvshare.com/gpu-core-limit": "60"}))
        node = k.wait_pods("test=nv", until="running", count=1, timeout_s=20, poll_s=0.2)[0].node
        assert node is not None
        log = wait_for("registration", lambda: (lambda t: t if "Registered client" in t else None)(
            k.logs(selector="name=nvshare-scheduler", namespace="nvshare-system", timestamps=False)), 10)
        assert re.search(r"\[NVSHARE\]\[INFO\]: Registered client [0-9a-f]{16} with Pod name = nv, "
                         r"Pod namespace = default", log)
        assert "[NVSHARE][INFO]: Applying initial compute limit for default/nv: 60%" in log
        fams = metrics(lab, node)
        assert "nvshare_client_info" in fams and not any(name.startswith("xpushare_") for name in fams)
        assert samples(fams, "nvshare_client_core_quota_config_percent", pod="nv")[0].value == 60


@pytest.mark.cpu_exclusive  # CPU shares of pods: other workers' pods would starve them
def test_gpu_speed_paces_unlimited_clients_silently(tmp_path_factory: pytest.TempPathFactory, tmp_path: Any) -> None:
    """A lab GPU at half a core: an unlimited client that uses it gets at most half a core and no quota line
    is logged for it; one still starting up runs freely; a 50 % client gets at most a quarter of a core."""
    with lab_of_its_own(tmp_path_factory, "slow", gpu_speed=0.5) as lab:
        k = Kubectl(LocalHost(), kubectl=require_kube_lab(), kubeconfig=str(lab.kubeconfig_path))
        starting = start_spinner(k, "pace-start", STARTING, core=100)
        assert run_fraction(starting, 1.0) == 1.0
        k.delete("test=pace-start", grace_period_s=0)
        # Pacing caps a client's CPU at speed × wall time (plus a 5 ms tick per window); the lower bounds only
        # need the machine to leave the pod that much of a core (the test runs cpu_exclusive).
        free = start_spinner(k, "pace-free", SPINNER, core=100)
        assert 0.3 <= cpu_share(free, 3.0) <= 0.55
        assert run_fraction(free, 2.0) <= 0.8  # stopped for part of every window
        k.delete("test=pace-free", grace_period_s=0)
        half = start_spinner(k, "pace-half", SPINNER, core=50)
        assert 0.12 <= cpu_share(half, 3.0) <= 0.28
        log = scheduler_log(k, lab)
        cids = {pod: find(rf"Registered client ([0-9a-f]{{16}}) .*with Pod name = {pod},", log)
                for pod in ("pace-free", "pace-half")}
        assert f"Throttling client {cids['pace-half']}" in log
        assert f"Throttling client {cids['pace-free']}" not in log
        with pytest.raises(ValueError):
            LabCluster(tmp_path / "bad", gpu_speed=0)


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
