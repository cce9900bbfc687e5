"""``invoke metrics-check`` against the lab's real schedulers over real HTTP.

The session lab runs the upstream ``xpushare-scheduler`` on simulated GPUs (tests/lab/README-kube.md, "The real
SUT"); each node's scheduler serves its 36 metric families on ``<scheduler pod IP>:9402``. The SUT's exporter bugs
are mutant builds (tests/lab/mutants) that one node runs for a test (the ``sut`` fault; its scheduler restarts on
the build in under a second, builds are cached): ``metrics-missing`` (three families gone), ``counter-as-gauge``,
``healthz-500`` fail their idle lines, ``label-missing`` (no ``host_pid`` on ``client_info``) fails under load.
The ``scheduler_down`` fault (the process SIGKILLed, its pod crash-looping) leaves the endpoint unreachable.
``values-off-10`` (managed allocation exported 10 % high) is caught by no line: the checklist only asks for a
managed allocation above 0.

The under-load part starts real probe pods (workloads/w5_quota_probe.py at ``--n 1024``, 16 MiB of buffers, on the
``cudadrv`` device) with the real kubectl, each with a 50 % core annotation that the scheduler reads at REGISTER.
Measured on a 2-core machine shared with other lab runs: the cluster task with both load steps takes about 3 s (a
probe registers within a second of its pod starting); a node's switch to a mutant build and back about 8 s; the
module about 85 s.
"""

from __future__ import annotations

import io
import json
import time
import urllib.request

import pytest

from tests.lab.cluster import LabCluster, find_kubectl
from xpushare.evidence import http_fetch, scrape_capture
from xpushare.inventory.schema import ClusterSpec, HostSpec
from xpushare.metrics_check import checklist, endpoint, probes, task
from xpushare.model.exit_status import ExitStatus
from xpushare.parsers.metrics import parse_exposition
from xpushare.transport.kubectl import Kubectl
from xpushare.transport.local import LocalHost

pytest_plugins = ["tests.lab.fixtures"]  # lab_cluster, lab_kubectl, lab_faults
pytestmark = [pytest.mark.lab]

NODE = "lab-node1"


def page(lab: LabCluster, node: str) -> str:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(lab.scheduler_url(node), timeout=5) as resp:
        return resp.read().decode()


def wait_idle(lab: LabCluster, node: str, timeout_s: float = 20.0) -> None:
    """Wait until no client is registered on the node (pods of earlier tests may still be going)."""
    deadline = time.monotonic() + timeout_s
    while parse_exposition(page(lab, node)).values("client_info"):
        if time.monotonic() > deadline:
            pytest.fail(f"clients still registered on {node} after {timeout_s} s")
        time.sleep(0.2)


def failed_items(text: str) -> set[str]:
    return {line.split("  ")[0].strip() for line in text.splitlines() if line.endswith("  FAIL")}


def run(url: str, **kw: object) -> tuple[ExitStatus, str]:
    buf = io.StringIO()
    status = task.run_metrics_check(url, out=buf, **kw)  # type: ignore[arg-type]
    return status, buf.getvalue()


def test_healthy_lab_scheduler_passes(lab_cluster: LabCluster) -> None:
    wait_idle(lab_cluster, NODE)
    status, text = run(lab_cluster.scheduler_url(NODE))
    assert status is ExitStatus.OK, text
    assert "15/15 PASS" in text
    assert "36 HELP, 36 TYPE" in text


def test_curl_fetcher_through_the_transport(lab_cluster: LabCluster) -> None:
    """The cluster path: curl on a node (here this machine's transport) captures status and Content-Type."""
    wait_idle(lab_cluster, NODE)
    fetch = scrape_capture.curl_fetcher(LocalHost("lab-node1"), timeout_s=5)
    status, ctype, _body = fetch(lab_cluster.scheduler_url(NODE, "/metrics"))
    assert (status, ctype) == (200, "text/plain; version=0.0.4; charset=utf-8")
    assert fetch(lab_cluster.scheduler_url(NODE, "/nope"))[0] == 404
    code, text = run(lab_cluster.scheduler_url(NODE), fetch=fetch)
    assert code is ExitStatus.OK, text


@pytest.mark.parametrize(("mutant", "failed", "shown"), [
    # no client_info, gpu_utilization_ratio, messages_total
    ("metrics-missing", {"counters declared counter", "required families exported", "idle: no client_info series"},
     ("33 HELP, 33 TYPE", "messages_total=absent", "gpu_utilization_ratio")),
    ("counter-as-gauge", {"counters declared counter"}, ("messages_total=gauge, drop_lock_total=counter",)),
    ("healthz-500", {"/healthz answers 200 OK"}, ("500, body 'OK'",)),
])
def test_mutant_fails_its_idle_lines(lab_faults: LabCluster, mutant: str, failed: set[str],
                                     shown: tuple[str, ...]) -> None:
    wait_idle(lab_faults, NODE)
    with lab_faults.running_mutant(mutant, NODE):
        status, text = run(lab_faults.scheduler_url(NODE))
    assert status is ExitStatus.FAILED, text
    assert failed_items(text) == failed, text
    for fragment in shown:
        assert fragment in text, text


def test_scheduler_down_is_unreachable(lab_faults: LabCluster, lab_kubectl: Kubectl) -> None:
    node = "lab-node2"
    names = lab_faults.names
    lab_faults.set_faults(node, scheduler_down=True)
    try:
        lab_faults.wait_scheduler(node, up=False, timeout_s=5)
        status, text = run(lab_faults.scheduler_url(node))
        assert status is ExitStatus.UNREACHABLE, text
        assert "UNREACHABLE: no response from http://" in text
        assert "/healthz answers 200 OK" in failed_items(text)
    finally:
        lab_faults.set_faults(node, scheduler_down=False)
        sched = [p for p in lab_kubectl.list_pods(names.scheduler_label, namespace=names.namespace) if p.node == node]
        for p in sched:  # skip the crash-loop back-off
            lab_kubectl.delete(name=p.name, namespace=names.namespace, timeout_s=20)
        lab_faults.wait_scheduler(node, up=True, timeout_s=15)


def lab_spec(lab: LabCluster) -> ClusterSpec:
    kubectl = find_kubectl()
    assert kubectl is not None
    hosts = (HostSpec("lab-master", ("master",), local=True),
             *(HostSpec(n, ("gpu",), address=lab.node_address(n), local=True) for n in lab.nodes))
    return ClusterSpec(name="lab", mode="k8s", sut=lab.generation, backend="cuda", gpu_model=None,
                       gpu_memory_gib=None, hosts=hosts, kubeconfig=str(lab.kubeconfig_path), context="lab",
                       kubectl=kubectl)


def test_cluster_task_with_probe_load(lab_cluster: LabCluster, lab_kubectl: Kubectl) -> None:
    """`invoke metrics-check --cluster lab`: scheduler pod found with kubectl, idle part, then 1 and 2 probe pods."""
    wait_idle(lab_cluster, NODE)
    buf = io.StringIO()
    status = task.metrics_check_task(None, lab_spec(lab_cluster), load=True, out=buf, settle_s=30)
    text = buf.getvalue()
    assert status is ExitStatus.OK, text
    assert f"on node {NODE} ({lab_cluster.scheduler_address(NODE)})" in text
    for n in (1, 2):
        for item in ("client_info per client", "client host_pid is a real host pid", "managed allocation",
                     "NVML per-process memory", "GPU utilization under load", "REGISTER messages counted",
                     "core quota per client", "GPU process count"):
            assert f"load {n}: {item}" in text
    assert "core_quota_config_percent = 50" in text
    # the probes are gone afterwards
    assert lab_kubectl.list_pods(f"{probes.RUN_LABEL}") == [] or all(
        p.deletion_timestamp is not None for p in lab_kubectl.list_pods(probes.RUN_LABEL))


def drop_lock_lines(lab: LabCluster) -> dict[str, dict]:
    """`invoke metrics-check --cluster lab -o json`: each scheduler's DROP_LOCK line (its record's check)."""
    buf = io.StringIO()
    task.metrics_check_task(None, lab_spec(lab), load=True, out=buf, settle_s=30, fmt="json")
    record = json.loads(buf.getvalue())
    return {s["scheduler"]: next(c for c in s["checks"] if c["check"] == "DROP_LOCK counted under throttling")
            for s in record["schedulers"]}


def test_drop_lock_line_passes_on_the_healthy_lab(lab_cluster: LabCluster) -> None:
    """The probes (50 % core annotation) are throttled: the log's DROP_LOCK lines and the counter's rise agree."""
    wait_idle(lab_cluster, NODE)
    line = drop_lock_lines(lab_cluster)[NODE]
    assert line["result"] == "PASS", line
    assert "scheduler log:" in line["observed"] and "/metrics: +" in line["observed"]


def test_drop_lock_not_counted_fails_the_drop_lock_line(lab_faults: LabCluster) -> None:
    """The mutant that never increments drop_lock_total, while its log shows the DROP_LOCKs it sends: FAIL."""
    wait_idle(lab_faults, NODE)
    with lab_faults.running_mutant("drop-lock-not-counted", NODE):
        line = drop_lock_lines(lab_faults)[NODE]
    assert line["result"] == "FAIL", line
    assert "rose by 0" in line["observed"], line


def test_cluster_task_refuses_bad_flags(lab_cluster: LabCluster) -> None:
    from xpushare.model.errors import UsageError

    with pytest.raises(UsageError):
        task.metrics_check_task("http://127.0.0.1:1", lab_spec(lab_cluster), load=False)
    with pytest.raises(UsageError):
        task.metrics_check_task("http://127.0.0.1:1", None, load=True)


def load_lines(lab: LabCluster, kubectl: Kubectl) -> list[checklist.CheckLine]:
    """One probe pod on ``NODE`` under the load checks (short settle: a broken page never settles)."""
    probe = probes.KubeProbeLoad(kubectl, lab.names, node=NODE, timeout_s=60)
    scrape = endpoint.metrics_scraper(lab.scheduler_url(NODE), http_fetch.urllib_fetcher(5))
    lines = probes.run_load_checks(scrape, probe, steps=(1,), settle_s=4, poll_s=0.5)
    left = [p for p in kubectl.list_pods(f"{probes.RUN_LABEL}={probe.run_id}") if p.deletion_timestamp is None]
    assert left == []  # the probes are removed whatever the verdict
    return lines


def test_load_lines_fail_when_client_families_vanish(lab_faults: LabCluster, lab_kubectl: Kubectl) -> None:
    """A broken exporter under load: without client_info the probe's client is not found (nothing else is judged)."""
    wait_idle(lab_faults, NODE)
    with lab_faults.running_mutant("metrics-missing", NODE):
        lines = load_lines(lab_faults, lab_kubectl)
    assert [ln.item for ln in lines if not ln.ok] == ["load 1: client_info per client"], lines
    assert "registered: none" in lines[0].observed


def test_label_missing_fails_the_host_pid_line(lab_faults: LabCluster, lab_kubectl: Kubectl) -> None:
    """``client_info`` without its ``host_pid`` label: the client is still found by pod, its pid is not there."""
    wait_idle(lab_faults, NODE)
    with lab_faults.running_mutant("label-missing", NODE):
        lines = load_lines(lab_faults, lab_kubectl)
    assert [ln.item for ln in lines if not ln.ok] == ["load 1: client host_pid is a real host pid"], lines
    assert next(ln for ln in lines if not ln.ok).observed.endswith(": absent")
