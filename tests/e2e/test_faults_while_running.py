"""Faults while a run is running, on the lab: each ends with nothing collected lost and a verdict that says
what happened (ERROR naming the fault; never PASS, never a traceback), and a documented exit status.

Runs are driven in-process through the task glue (``cli.guard.guarded`` around ``engine.suite_run.run``, as the
``func`` task does), so a fault can be injected at an exact point of the lifecycle: a wrapper around the
backend method that is running then (``wait_terminal``: mid-case; a harvest read: mid-harvest). The faults
themselves are real: sshd sessions SIGKILLed, a lab API server that delays or fails requests
(``api_delay_s``, ``api_error_500``), a GPU node whose sshd is stopped and whose pods are gone
(``node_down``), a run directory that is full.

kubectl reads are retried after a 500 or a lost connection (transport/kube_retry.py): a short fault is ridden out
(the case PASSes, the retries are in debug.log); one that outlasts the retries is ERROR. The module's inventory
keeps the retries' backoff short (0.1 s, 0.7 s of sleep in all) so that a harvest whose every read fails is quick;
the short-500 test uses the defaults (1 s doubling: 7 s).

One FUNC-001 pod (about 2 s of simulated GPU work) per run; about 2 minutes on 2 cores.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from invoke.exceptions import Exit

from tests.lab.cluster import LabCluster, LocalHost, find_kubectl
from tests.lab.env import LAB_HOSTS, LAB_OPTIONS, write_inventory
from tests.lab.kubelab import started_kube_lab, started_ssh_lab
from tests.lab.sshd import SshLab
from xpushare.backends.k8s import K8sBackend
from xpushare.cli.guard import guarded
from xpushare.engine import suite_run
from xpushare.transport.kubectl import Kubectl

pytestmark = [pytest.mark.lab, pytest.mark.slow]

CASE = "FUNC-001"


@pytest.fixture(scope="module")
def kube_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabCluster]:
    yield from started_kube_lab(tmp_path_factory, "faults-kube", **LAB_OPTIONS)


@pytest.fixture(scope="module")
def ssh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshLab]:
    """A private SSH lab: these tests kill its sessions and stop its hosts."""
    yield from started_ssh_lab(tmp_path_factory, "faults-ssh")


#: A short kubectl request timeout (the hanging-API test waits for it to fire) and a short retry backoff.
PARAMS = {"kubectl_request_timeout_s": 4, "pod_timeout_s": 30, "kubectl_read_retries": 3,
          "kubectl_retry_backoff_s": 0.1}


@pytest.fixture(scope="module")
def inventory(ssh: SshLab, kube_lab: LabCluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_inventory(tmp_path_factory.mktemp("faults-inv") / "inventory.yaml", ssh, kube_lab, params=PARAMS)


@pytest.fixture(autouse=True)
def _healthy_after(kube_lab: LabCluster, ssh: SshLab) -> Iterator[None]:
    """Every test leaves the lab healthy for the next: faults off, every host up."""
    yield
    kube_lab.set_faults(None, api_delay_s=0, api_error_500=False, node_down=False)
    for name, _address, _role in LAB_HOSTS:
        if not ssh.is_running(name):
            ssh.start_host(name)


class Outcome:
    """One run: exit status, what it printed, and its stored case record and directory."""

    def __init__(self, root: Path, run_id: str, status: int, out: str, err: str, cluster: str = "lab") -> None:
        self.root, self.run_id, self.status, self.out, self.err = root, run_id, status, out, err
        self.run_dir = root / ".tmplog" / run_id / "xpushare"
        self.case_dir = self.run_dir / cluster / "functional" / CASE

    @property
    def debug_log(self) -> str:
        return (self.run_dir / "debug.log").read_text(encoding="utf-8", errors="replace")

    @property
    def record(self) -> dict[str, Any]:
        return json.loads((self.case_dir / "result.json").read_text())

    def files(self) -> set[str]:
        return {str(p.relative_to(self.case_dir)) for p in self.case_dir.rglob("*") if p.is_file()}

    def explain(self) -> str:
        return f"exit {self.status}\n--- stdout\n{self.out[-3000:]}\n--- stderr\n{self.err[-3000:]}"


def run_case(inventory: Path, root: Path, run_id: str, cluster: str = "lab") -> Outcome:
    """``invoke func --cluster <cluster> --case FUNC-001`` in this process (the task's body under its guard)."""
    out, err = io.StringIO(), io.StringIO()
    request = suite_run.RunRequest(cluster=cluster, case_ids=[CASE], run_id=run_id, inventory_path=str(inventory),
                                root=root)
    status = 0
    with contextlib.redirect_stderr(err):
        try:
            guarded(lambda: suite_run.run(request, out))
        except Exit as exc:
            status = exc.code
    return Outcome(root, run_id, status, out.getvalue(), err.getvalue(), cluster)


def assert_no_traceback(o: Outcome) -> None:
    assert "Traceback" not in o.out + o.err, o.explain()
    assert not (o.case_dir / "harness-traceback.txt").exists(), o.explain()


def assert_run_reported(o: Outcome) -> None:
    """The run's reports were written and count the case as it was recorded."""
    meta = json.loads((o.run_dir / "run.json").read_text())
    assert meta["exit_status"] == o.status, meta
    assert (o.run_dir / "junit.xml").is_file() and (o.run_dir / "run-report.md").is_file()


def wrap(monkeypatch: pytest.MonkeyPatch, owner: type, name: str, before: Callable[[], None], *,
         times: int = 1) -> list[int]:
    """Run ``before()`` ahead of the first ``times`` calls of ``owner.name``; returns a one-item call counter."""
    original = getattr(owner, name)
    count = [0]

    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        if count[0] <= times:
            before()
        return original(self, *args, **kwargs)

    monkeypatch.setattr(owner, name, wrapper)
    return count


def test_without_a_fault_the_case_passes(inventory: Path, tmp_path: Path) -> None:
    """The control: the same run on the healthy lab is PASS, exit 0, with every file the fault tests look for."""
    o = run_case(inventory, tmp_path, "healthy")
    assert o.record["status"] == "PASS" and o.status == 0, o.explain()
    assert {"pods.json", "scheduler.log", "cluster_snapshot.txt", "manifests.yaml", "plan.json"} <= o.files()
    assert "harvest-errors.txt" not in o.files(), (o.case_dir / "harvest-errors.txt").read_text()
    assert_no_traceback(o)
    assert_run_reported(o)


# ------------------------------------------------------------------------------------------- a) SSH session


def kill_session_during(ssh: SshLab, host: str, needle: str, timeout_s: float = 20.0,
                        times: int = 1, after: Callable[[], None] | None = None) -> threading.Thread:
    """Start a watcher that SIGKILLs ``host``'s sshd sessions as soon as one of them runs a command whose
    command line holds ``needle``, for the first ``times`` such commands: the connection dies mid-command, not
    between two commands (a dropped connection between commands is simply reopened). ``after()`` runs once the
    last kill is done."""

    def watch() -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and len(killed) < times:
            for pid in ssh.session_pids(host):
                try:
                    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    continue
                if needle in cmdline:
                    # Frozen first: on a loaded machine the command could otherwise finish and its output reach
                    # the client between this match and the kill (a read that never failed, nothing retried).
                    for session in ssh.session_pids(host):
                        with contextlib.suppress(OSError):
                            os.kill(session, signal.SIGSTOP)
                    ssh.kill_sessions(host)
                    killed.append(cmdline)
                    break
            time.sleep(0.005)
        if after is not None:
            after()

    killed: list[str] = []
    thread = threading.Thread(target=watch, daemon=True)
    thread.killed = killed  # type: ignore[attr-defined]
    thread.start()
    return thread


#: Seconds the API server holds each request while the watcher waits for ``get pods`` (below kubectl's 4 s
#: request timeout). A quick ``get pods`` could finish, its output already with the client, between the
#: watcher's match and its kill (a read that never failed, nothing retried: seen twice on a loaded 2-core machine,
#: even with the sessions frozen before the kill); held by the API, the command is surely mid-read when killed.
SLOW_API_S = 1.5


def test_ssh_session_killed_mid_case(inventory: Path, ssh: SshLab, kube_lab: LabCluster, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The master's sshd session dies once while the pods run: the read is retried on a new connection, the case
    PASSes, and debug.log says which read was retried and why."""
    watchers: list[threading.Thread] = []

    def slow_then_kill() -> None:
        kube_lab.set_faults(None, api_delay_s=SLOW_API_S)
        watchers.append(kill_session_during(ssh, "lab-master", "get pods",
                                            after=lambda: kube_lab.set_faults(None, api_delay_s=0)))

    wrap(monkeypatch, K8sBackend, "wait_terminal", slow_then_kill)
    o = run_case(inventory, tmp_path, "ssh-mid-case")
    assert watchers and watchers[0].killed, "the session was never killed mid-command"  # type: ignore[attr-defined]
    rec = o.record
    assert rec["status"] == "PASS" and o.status == 0, o.explain()
    assert "kubectl get: attempt 1 of 4 failed (ConnectionLost" in o.debug_log, o.debug_log[-3000:]
    assert "succeeded on attempt 2 of 4" in o.debug_log
    assert rec["kubectl_retries"] >= 1 and "kubectl read(s) retried after a transient API failure" in rec["summary"]
    assert {"pods.json", "scheduler.log", "cluster_snapshot.txt", "manifests.yaml"} <= o.files(), o.files()
    assert any(f.startswith("pods/") for f in o.files()), o.files()
    assert_no_traceback(o)
    assert_run_reported(o)


def test_ssh_session_killed_mid_harvest(inventory: Path, ssh: SshLab, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The session dies during the harvest while the pod logs are read, on every attempt of that read: the rest of
    the harvest goes on, and the case is ERROR naming the incomplete evidence, the lost connection and the attempts,
    never PASS."""
    watchers: list[threading.Thread] = []
    wrap(monkeypatch, Kubectl, "logs_by_pod",
         lambda: watchers.append(kill_session_during(ssh, "lab-master", " logs ", times=4)))
    o = run_case(inventory, tmp_path, "ssh-mid-harvest")
    assert watchers and len(watchers[0].killed) == 4, "not every attempt was killed"  # type: ignore[attr-defined]
    rec = o.record
    assert rec["status"] == "ERROR", o.explain()
    assert "evidence incomplete" in rec["summary"] and "connection lost" in rec["summary"], rec["summary"]
    assert "kubectl logs: 4 attempts" in rec["summary"], rec["summary"]
    assert o.status == 1, o.explain()
    # what came before and after the lost read is kept
    assert {"pods.json", "scheduler.log", "cluster_snapshot.txt", "harvest-errors.txt"} <= o.files(), o.files()
    assert_no_traceback(o)
    assert_run_reported(o)


# ---------------------------------------------------------------------------------- b), c) the API server


def test_kubectl_hanging_past_its_timeout(inventory: Path, kube_lab: LabCluster, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The API server stops answering while the pods run (each request delayed past kubectl's 4 s request
    timeout): kubectl's timeout fires (no hang), the case is ERROR 'kubectl ... timed out'; the server answers
    again before the harvest, which stores everything."""
    wrap(monkeypatch, K8sBackend, "wait_terminal", lambda: kube_lab.set_faults(None, api_delay_s=30))
    wrap(monkeypatch, K8sBackend, "harvest", lambda: kube_lab.set_faults(None, api_delay_s=0))
    o = run_case(inventory, tmp_path, "api-hang")
    rec = o.record
    assert rec["status"] == "ERROR" and "kubectl get timed out" in rec["summary"], o.explain()
    assert o.status == 1, o.explain()
    assert {"pods.json", "scheduler.log", "cluster_snapshot.txt"} <= o.files(), o.files()
    assert any(f.startswith("pods/") for f in o.files()), o.files()
    assert_no_traceback(o)
    assert_run_reported(o)


def test_kubectl_hanging_during_the_harvest(inventory: Path, kube_lab: LabCluster, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The API server stops answering once the pods ended, for the first part of the harvest: those reads time
    out, the harvest goes on (no hang), and the case that would have passed is ERROR 'evidence incomplete'."""
    wrap(monkeypatch, K8sBackend, "harvest", lambda: kube_lab.set_faults(None, api_delay_s=30))
    # the server answers again when the harvest turns to the logs (whose reads may wait longer, by design)
    wrap(monkeypatch, Kubectl, "logs", lambda: kube_lab.set_faults(None, api_delay_s=0))
    o = run_case(inventory, tmp_path, "api-hang-harvest")
    rec = o.record
    assert rec["status"] == "ERROR", o.explain()
    assert "evidence incomplete" in rec["summary"] and "timed out" in rec["summary"], rec["summary"]
    assert {"manifests.yaml", "harvest-errors.txt", "cluster_snapshot.txt"} <= o.files(), o.files()
    assert o.status == 1
    assert_no_traceback(o)
    assert_run_reported(o)


def test_api_server_answering_500(inventory: Path, kube_lab: LabCluster, tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The API server answers 500 while the pods run, longer than the retries last, then recovers: the case is
    ERROR naming the server's InternalError and the attempts (never a PASS judged on a wait that never saw the pods
    end); the harvest stores everything."""
    wrap(monkeypatch, K8sBackend, "wait_terminal", lambda: kube_lab.set_faults(None, api_error_500=True))
    wrap(monkeypatch, K8sBackend, "harvest", lambda: kube_lab.set_faults(None, api_error_500=False))
    o = run_case(inventory, tmp_path, "api-500")
    rec = o.record
    assert rec["status"] == "ERROR" and "InternalError" in rec["summary"], o.explain()
    assert "kubectl get failed after 4 attempts" in rec["summary"], rec["summary"]
    assert o.status == 1
    assert {"pods.json", "scheduler.log", "cluster_snapshot.txt"} <= o.files(), o.files()
    assert_no_traceback(o)
    assert_run_reported(o)


def test_api_server_500_for_a_moment_is_ridden_out(ssh: SshLab, kube_lab: LabCluster, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The API server answers 500 for about 2 s while the pods run (an etcd leader election), shorter than the
    retries of the default parameters (1 + 2 + 4 s): the reads are retried, the case PASSes, and debug.log names
    each retry and the InternalError."""
    inventory = write_inventory(tmp_path / "inventory.yaml", ssh, kube_lab, params={"pod_timeout_s": 30})
    windows: list[threading.Timer] = []

    def blip() -> None:
        kube_lab.set_faults(None, api_error_500=True)
        windows.append(threading.Timer(2.0, kube_lab.set_faults, (None,), {"api_error_500": False}))
        windows[0].start()

    wrap(monkeypatch, K8sBackend, "wait_terminal", blip)
    o = run_case(inventory, tmp_path, "api-500-blip")
    windows[0].join()
    rec = o.record
    assert rec["status"] == "PASS" and o.status == 0, o.explain()
    retries = [ln for ln in o.debug_log.splitlines() if "failed (kubectl get" in ln and "retrying in" in ln]
    assert retries and all("InternalError" in ln for ln in retries), o.debug_log[-3000:]
    assert "succeeded on attempt" in o.debug_log
    assert rec["kubectl_retries"] >= 1 and "retried after a transient API failure" in rec["summary"]  # it says so
    assert "retries of reads after a transient API failure" in (o.case_dir / "analysis.txt").read_text()
    assert_no_traceback(o)
    assert_run_reported(o)


def test_api_server_500_during_the_harvest(inventory: Path, kube_lab: LabCluster, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The API server answers 500 from the harvest to the cleanup, longer than every read's retries: each lost
    read is noted and the case is ERROR 'evidence incomplete' naming the InternalError."""
    wrap(monkeypatch, K8sBackend, "harvest", lambda: kube_lab.set_faults(None, api_error_500=True))
    wrap(monkeypatch, K8sBackend, "cleanup", lambda: kube_lab.set_faults(None, api_error_500=False))
    o = run_case(inventory, tmp_path, "api-500-harvest")
    rec = o.record
    assert rec["status"] == "ERROR", o.explain()
    assert "evidence incomplete" in rec["summary"] and "InternalError" in rec["summary"], rec["summary"]
    assert o.status == 1
    assert_no_traceback(o)
    assert_run_reported(o)


# ------------------------------------------------------------------------------------------ d) disk full


@contextlib.contextmanager
def small_filesystem(path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Callable[[], None]]]:
    """A run root that can be filled: a 4 MiB tmpfs mounted on ``path`` where this process may mount (root),
    else a simulation (``Path.write_text`` and ``Path.open`` for writing under ``path`` raise ``ENOSPC`` once
    full). Yields (which one, fill), ``fill()`` taking the last free byte."""
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(path)],
                             capture_output=True).returncode == 0
    if mounted:
        def fill() -> None:
            with contextlib.suppress(OSError), open(path / "filler", "wb") as fh:
                while True:
                    fh.write(b"\0" * 65536)
                    fh.flush()
        try:
            yield "tmpfs", fill
        finally:
            subprocess.run(["umount", "-l", str(path)], check=False)
        return
    full = [False]

    def enospc(target: Path) -> None:
        if full[0] and str(target).startswith(str(path)):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(target))

    write_text, open_ = Path.write_text, Path.open

    def patched_write_text(self: Path, *args: Any, **kwargs: Any) -> int:
        enospc(self)
        return write_text(self, *args, **kwargs)

    def patched_open(self: Path, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if set(mode) & set("wax+"):
            enospc(self)
        return open_(self, mode, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", patched_write_text)
    monkeypatch.setattr(Path, "open", patched_open)
    yield "simulated ENOSPC", lambda: full.__setitem__(0, True)


def test_run_directory_full(inventory: Path, kube_lab: LabCluster, tmp_path: Path,
                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The run directory fills up while the pods run: the run stops with one line and exit 1, keeps what it
    wrote (run.json, the case's manifests and plan), and the case's pods are still cleaned up."""
    root = tmp_path / "small"
    with small_filesystem(root, monkeypatch) as (how, fill):
        wrap(monkeypatch, K8sBackend, "wait_terminal", fill)
        o = run_case(inventory, root, "disk-full")
        lines = [ln for ln in o.err.splitlines() if ln.strip()]
        assert o.status == 1, f"{how}: {o.explain()}"
        assert len(lines) == 1 and lines[0].startswith("error: the run directory is full"), f"{how}: {o.explain()}"
        assert "--resume" in lines[0]
        assert "Traceback" not in o.out + o.err
        meta = json.loads((o.run_dir / "run.json").read_text())  # written before the disk filled: intact
        assert meta["run_id"] == "disk-full"
        assert {"manifests.yaml", "plan.json"} <= o.files(), f"{how}: {o.files()}"
    kubectl = Kubectl(LocalHost(), kubectl=find_kubectl() or "kubectl", kubeconfig=str(kube_lab.kubeconfig_path),
                      context="lab", namespace="default", request_timeout_s=30)
    assert kubectl.list_pods("xpushare/run-id=disk-full", all_namespaces=True) == [], \
        "the case's pods were left running"


# ------------------------------------------------------------------------------------ e) a node rebooted


def test_gpu_node_rebooted_during_a_case(inventory: Path, kube_lab: LabCluster, ssh: SshLab, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The node running the case's pod "reboots" while it runs: its sshd stops and its pods are gone. The case
    is ERROR naming the pod that vanished (not a FAIL of the system under test, not a hang), the evidence of the
    master and of the other node is stored, and what could not be read is noted."""
    kubectl = Kubectl(LocalHost(), kubectl=find_kubectl() or "kubectl", kubeconfig=str(kube_lab.kubeconfig_path),
                      context="lab", namespace="default", request_timeout_s=30)
    downed: list[str] = []

    def reboot() -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            nodes = [p.node for p in kubectl.list_pods("xpushare/run-id=node-down", all_namespaces=True) if p.node]
            if nodes:
                ssh.stop_host(nodes[0])
                kube_lab.set_faults(nodes[0], node_down=True)
                downed.append(nodes[0])
                return
            time.sleep(0.1)

    wrap(monkeypatch, K8sBackend, "wait_terminal", reboot)
    o = run_case(inventory, tmp_path, "node-down")
    assert downed, "the pod was never bound to a node"
    rec = o.record
    assert rec["status"] == "ERROR" and "gone" in rec["summary"], o.explain()
    assert o.status == 1
    assert {"pods.json", "manifests.yaml", "scheduler.log", "cluster_snapshot.txt"} <= o.files(), o.files()
    assert_no_traceback(o)
    assert_run_reported(o)
