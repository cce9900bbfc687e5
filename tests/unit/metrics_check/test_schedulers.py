"""``invoke metrics-check --cluster C`` checks every scheduler of the cluster, one table each, with an overall exit
status, and saves what it fetched, the tables and the JSON record under ``.tmplog/<run-id>/metrics-check/``.

No lab: kubectl and the GPU hosts are stand-ins that answer ``kubectl get pods`` and ``curl`` with canned pages
(tests/fixtures/samples); ``--url`` runs against a small HTTP server on 127.0.0.1.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.paths import REPO_ROOT
from tests.toolrun import run_tool
from tests.unit.metrics_check.test_metrics_check import IDLE, METRICS_CT, curl_i, http_server  # noqa: F401 - http_server: a fixture
from xpushare.inventory.schema import ClusterSpec, HostSpec, SchedulerSpec
from xpushare.metrics_check import saved, targets, task
from xpushare.model.errors import HostUnreachable, UsageError
from xpushare.model.exit_status import ExitStatus
from xpushare.transport.base import CommandResult
from xpushare.transport.kube_objects import Pod

ROOT = REPO_ROOT
BROKEN = IDLE.replace("# TYPE xpushare_scheduler_messages_total counter",
                      "# TYPE xpushare_scheduler_messages_total gauge")  # one FAIL line: counters declared counter


class FakeHost:
    """A GPU host (or the master) that answers ``true`` and ``curl URL`` from ``pages`` (IP or host -> /metrics
    body); a host in ``down`` cannot be reached."""

    def __init__(self, name: str, pages: Mapping[str, str], down: bool = False) -> None:
        self.name, self.pages, self.down = name, pages, down
        self.closed = False
        self.curled: list[str] = []

    def run(self, argv: Sequence[str], **kw: object) -> CommandResult:
        if self.down:
            raise HostUnreachable(self.name, "connection refused")
        if argv[0] != "curl":
            return CommandResult(self.name, tuple(argv), "", "", 0, 0.01)
        url = argv[-1]
        self.curled.append(url)
        where = url.split("//", 1)[1].split(":", 1)[0]
        if url.endswith("/healthz"):
            code, ctype, body = 200, "text/plain", "OK\n"
        elif url.endswith("/metrics"):
            code, ctype, body = 200, METRICS_CT, self.pages[where]
        else:
            code, ctype, body = curl_i("notfound.txt")
        return CommandResult(self.name, tuple(argv), f"{body}\nHTTP_CODE={code:03d}\nCONTENT_TYPE={ctype or ''}\n",
                             "", 0, 0.01)

    def close(self) -> None:
        self.closed = True


def pod(name: str, node: str, ip: str | None, phase: str = "Running") -> Pod:
    return Pod(name=name, namespace="xpushare-system", uid=name, phase=phase, node=node, pod_ip=ip,
               host_ip=None, labels={}, annotations={}, containers=(), created_at=None, start_time=None,
               deletion_timestamp=None, reason=None, message=None, unschedulable=None, raw={})


class FakeKubectl:
    def __init__(self, pods: Sequence[Pod]) -> None:
        self.pods = list(pods)

    def list_pods(self, selector: str, **kw: Any) -> list[Pod]:
        return self.pods


def k8s_cluster() -> ClusterSpec:
    hosts = (HostSpec("m", ("master",), address="10.0.0.1"), HostSpec("n1", ("gpu",), address="10.0.0.11"),
             HostSpec("n2", ("gpu",), address="10.0.0.12"))
    return ClusterSpec("k", "k8s", "xpushare", "cuda", None, None, hosts)


def wire(monkeypatch: pytest.MonkeyPatch, hosts: dict[str, FakeHost], pods: Sequence[Pod] = ()) -> None:
    monkeypatch.setattr(targets, "connect", lambda spec: hosts[spec.name])
    monkeypatch.setattr(targets, "kubectl_for", lambda cluster, master: FakeKubectl(pods))


def test_k8s_checks_every_scheduler_pod_with_a_table_each(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import io

    pages = {"10.1.0.1": IDLE, "10.1.0.2": BROKEN}
    hosts = {n: FakeHost(n, pages) for n in ("m", "n1", "n2")}
    wire(monkeypatch, hosts, [pod("sched-b", "n2", "10.1.0.2"), pod("sched-a", "n1", "10.1.0.1"),
                              pod("sched-c", "n3", None, phase="Pending")])
    out = io.StringIO()
    status = task.metrics_check_task(None, k8s_cluster(), load=False, out=out, root=tmp_path, run_id="mc1")
    text = out.getvalue()
    assert status is ExitStatus.FAILED, text  # n2's counter is a gauge; the Pending pod is a FAIL line
    # each scheduler curled on its own node, in inventory order, then the node no GPU host names
    assert [u.rsplit("/", 1)[0] for u in hosts["n1"].curled] == ["http://10.1.0.1:9402"] * 3
    assert [u.rsplit("/", 1)[0] for u in hosts["n2"].curled] == ["http://10.1.0.2:9402"] * 3
    assert text.index("metrics-check http://10.1.0.1:9402 (n1)") < text.index("metrics-check http://10.1.0.2:9402 (n2)")
    assert text.count("15/15 PASS") == 1 and "14/15 PASS, 1 FAIL" in text and "0/1 PASS, 1 FAIL" in text
    assert "pod sched-c is Pending, not Running" in text
    assert text.rstrip().splitlines()[-1].startswith("metrics-check: 3 scheduler(s): n1 PASS, n2 FAIL (1 FAIL), "
                                                     "n3 FAIL (1 FAIL): FAIL; saved in ")
    assert all(h.closed for h in hosts.values())  # every connection it opened is closed
    base = tmp_path / ".tmplog" / "mc1" / "metrics-check"
    record = json.loads((base / "metrics-check.json").read_text())
    assert record["run_id"] == "mc1" and record["exit_status"] == 1 and record["status"] == "FAIL"
    assert [(s["scheduler"], s["pod"], s["status"]) for s in record["schedulers"]] == [
        ("n1", "sched-a", "PASS"), ("n2", "sched-b", "FAIL"), ("n3", "sched-c", "FAIL")]
    assert (base / "n2" / "metrics.txt").read_text().endswith(f"\nHTTP_CODE=200\nCONTENT_TYPE={METRICS_CT}\n")
    assert "gauge" in (base / "n2" / "metrics.txt").read_text()
    assert (base / "n1" / "healthz.txt").read_text().startswith("OK\n")
    saved_text = (base / "metrics-check.txt").read_text()
    assert "scheduler pod sched-a on node n1 (10.1.0.1)" in saved_text and "14/15 PASS, 1 FAIL" in saved_text
    with pytest.raises(UsageError, match="already stored"):  # never into an existing run directory
        task.metrics_check_task(None, k8s_cluster(), load=False, out=io.StringIO(), root=tmp_path, run_id="mc1")


def host_cluster(url: str, *, local: bool = False) -> ClusterSpec:
    hosts = (HostSpec("g1", ("gpu",), address="10.0.0.11"), HostSpec("g2", ("gpu",), address="10.0.0.12"))
    return ClusterSpec("bm", "host", "xpushare", "cuda", None, None, hosts, scheduler=SchedulerSpec(metrics_url=url))


def test_host_mode_checks_each_gpu_hosts_scheduler_where_the_inventory_says(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    assert [h.name for h in targets.host_schedulers(host_cluster("http://127.0.0.1:9402"))[0]] == ["g1", "g2"]
    assert targets.host_schedulers(host_cluster("http://10.0.0.12:9402/metrics")) == (
        [host_cluster("x").hosts[1]], True)  # the URL names g2: its scheduler only
    assert targets.host_schedulers(host_cluster("http://sched.example:9402"))[1] is False  # one, from the first
    hosts = {"g1": FakeHost("g1", {"127.0.0.1": IDLE}), "g2": FakeHost("g2", {"127.0.0.1": BROKEN})}
    wire(monkeypatch, hosts)
    out = io.StringIO()
    assert task.metrics_check_task(None, host_cluster("http://127.0.0.1:9402"), load=False, out=out) \
        is ExitStatus.FAILED
    assert hosts["g1"].curled and hosts["g2"].curled  # each host's own scheduler, curled there
    assert "15/15 PASS" in out.getvalue() and "14/15 PASS, 1 FAIL" in out.getvalue()
    hosts["g2"] = FakeHost("g2", {}, down=True)
    out = io.StringIO()
    assert task.metrics_check_task(None, host_cluster("http://127.0.0.1:9402"), load=False, out=out, fmt="json") \
        is ExitStatus.UNREACHABLE  # a scheduler nobody could reach: 3 takes precedence
    record = json.loads(out.getvalue())
    assert [(s["scheduler"], s["status"]) for s in record["schedulers"]] == [("g1", "PASS"), ("g2", "UNREACHABLE")]
    assert "g2: connection refused" in record["schedulers"][1]["error"]


def test_claim_run_dir_never_reuses_a_run(tmp_path: Path) -> None:
    from datetime import datetime

    now = datetime(2026, 11, 27, 4, 0, 0)
    first = saved.claim_run_dir(tmp_path, None, now=now)
    second = saved.claim_run_dir(tmp_path, None, now=now)
    assert (first.run_id, second.run_id) == ("20261127-040000", "20261127-040000-2")
    assert second.path == tmp_path / ".tmplog" / "20261127-040000-2" / "metrics-check" and second.path.is_dir()
    with pytest.raises(UsageError, match="already stored"):
        saved.claim_run_dir(tmp_path, "20261127-040000", now=now)
    with pytest.raises(UsageError, match="last"):
        saved.claim_run_dir(tmp_path, "last")
    with pytest.raises(UsageError):
        saved.claim_run_dir(tmp_path, "../x")
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError, match="--root"):
        saved.check_run_id(tmp_path / "file", None)
    assert saved.safe_name("127.0.0.1:9402") == "127.0.0.1_9402" and saved.safe_name("..") == "scheduler"


def test_task_saves_under_root_with_run_id_and_prints_json(http_server: str, tmp_path: Path) -> None:  # noqa: F811
    def invoke(*args: str) -> subprocess.CompletedProcess[str]:
        return run_tool([sys.executable, "-m", "invoke", "metrics-check", "--url", http_server, *args],
                        cwd=ROOT, timeout=120)

    proc = invoke("--root", str(tmp_path), "-r", "m1", "-o", "json")
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    base = tmp_path / ".tmplog" / "m1" / "metrics-check"
    assert record["saved_to"] == str(base) and record["schedulers"][0]["status"] == "PASS"
    assert json.loads((base / "metrics-check.json").read_text()) == record
    assert "15/15 PASS" in (base / "metrics-check.txt").read_text()  # the table is kept whatever --output was
    name = saved.safe_name(http_server.split("//", 1)[1])
    assert sorted(p.name for p in (base / name).iterdir()) == ["healthz.txt", "metrics.txt", "notexist.txt"]
    again = invoke("--root", str(tmp_path), "--run-id", "m1")
    assert again.returncode == 2 and again.stderr.startswith("error: run 'm1' is already stored"), again.stderr
    assert len(again.stderr.strip().splitlines()) == 1
    fresh = invoke("--root", str(tmp_path))
    assert fresh.returncode == 0, fresh.stderr
    assert "15/15 PASS" in fresh.stdout and "saved in " in fresh.stdout
    assert len(list((tmp_path / ".tmplog").iterdir())) == 2  # a fresh run id of its own
