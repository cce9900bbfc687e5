"""Tests of the SSH test lab (tests/lab/sshd.py) with the real ``ssh`` client and with paramiko."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import paramiko
import pytest

from tests.lab import sshd as sshd_module
from tests.lab.sshd import LabError, LabHost, SshLab, check_loopback, lab_unavailable_reason
from tests.paths import REPO_ROOT

pytestmark = pytest.mark.lab

REPO_ROOT = REPO_ROOT
SSH_TIMEOUT_S = 20


def _ssh(config: Path, host: str, *command: str, options: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """Run the real ssh client against a lab host; return the completed process (text output)."""
    ssh = shutil.which("ssh")
    if ssh is None:
        pytest.skip("OpenSSH client 'ssh' not installed")
    return subprocess.run(
        [ssh, "-F", str(config), *options, host, *command],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=SSH_TIMEOUT_S,
        check=False,
    )


def _paramiko_client(host: LabHost, known_hosts: Path) -> paramiko.SSHClient:
    """Connect with paramiko, strict host key checking against ``known_hosts``, lab key only."""
    client = paramiko.SSHClient()
    client.load_host_keys(str(known_hosts))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    try:
        client.connect(
            host.address,
            port=host.port,
            username=host.user,
            key_filename=str(host.identity),
            look_for_keys=False,
            allow_agent=False,
            timeout=10,
        )
    except BaseException:
        client.close()
        raise
    return client


def _gone(pid: int) -> bool:
    """True if ``pid`` no longer runs (absent or a zombie awaiting its reaper)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rfind(")") + 2] in "ZXx"


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _wait_for(predicate: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_check_loopback_rejects_other_addresses() -> None:
    assert check_loopback("127.0.0.11") == "127.0.0.11"
    for bad in ("10.0.0.1", "::1", "127.0.0.0", "127.255.255.255", "localhost", "0.0.0.0"):
        with pytest.raises(ValueError):
            check_loopback(bad)


def test_lab_hosts_and_client_files(ssh_lab: SshLab) -> None:
    hosts = ssh_lab.hosts
    assert [(h.name, h.address) for h in hosts.values()] == [
        ("lab-master", "127.0.0.11"),
        ("lab-node1", "127.0.0.12"),
        ("lab-node2", "127.0.0.13"),
    ]
    identity = ssh_lab.identity
    assert identity.stat().st_mode & 0o777 == 0o600
    known = ssh_lab.known_hosts_path.read_text().splitlines()
    config = ssh_lab.ssh_config_path.read_text()
    for h in hosts.values():
        assert h.known_hosts_line() == f"[{h.address}]:{h.port} {h.host_key_pub}"
        assert h.host_key_pub.startswith("ssh-ed25519 AAAA") and len(h.host_key_pub.split()) == 2
        assert h.known_hosts_line() in known
        assert f"Host {h.name}\n    HostName {h.address}\n    Port {h.port}\n" in config
        assert not _gone(h.pid)
    assert "StrictHostKeyChecking yes" in config and "IdentitiesOnly yes" in config
    with pytest.raises(LabError):
        ssh_lab.add_host("lab-node1", "127.0.0.14")
    with pytest.raises(ValueError):
        ssh_lab.add_host("outside", "192.168.0.1")


def test_ssh_client_runs_a_command_on_every_host(ssh_lab: SshLab) -> None:
    hosts = list(ssh_lab.hosts.values())
    with ThreadPoolExecutor(len(hosts)) as pool:
        results = list(pool.map(lambda h: _ssh(ssh_lab.ssh_config_path, h.name, "echo hi; id -un"), hosts))
    for h, result in zip(hosts, results, strict=True):
        assert result.returncode == 0, f"{h.name}: {result.stderr}"
        assert result.stdout.split() == ["hi", h.user]


def test_paramiko_runs_a_command(ssh_lab: SshLab) -> None:
    host = ssh_lab.host("lab-master")
    client = _paramiko_client(host, ssh_lab.known_hosts_path)
    try:
        _stdin, stdout, _stderr = client.exec_command("echo hi; exit 3")
        assert stdout.read() == b"hi\n"
        assert stdout.channel.recv_exit_status() == 3
    finally:
        client.close()


def test_password_authentication_is_refused(ssh_lab: SshLab) -> None:
    result = _ssh(
        ssh_lab.ssh_config_path,
        "lab-node1",
        "true",
        options=("-o", "PreferredAuthentications=password", "-o", "BatchMode=yes"),
    )
    assert result.returncode == 255
    assert "Permission denied" in result.stderr
    host = ssh_lab.host("lab-node1")
    transport = paramiko.Transport((host.address, host.port))
    try:
        transport.start_client(timeout=10)
        with pytest.raises(paramiko.AuthenticationException):
            transport.auth_password(host.user, "not-a-password")
    finally:
        transport.close()


def test_closed_port_refuses_connections(ssh_lab: SshLab) -> None:
    port = ssh_lab.closed_port("127.0.0.12")
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.12", port), timeout=5).close()


def test_rotated_host_key_is_refused(fresh_ssh_lab: SshLab, tmp_path: Path) -> None:
    old_known = tmp_path / "known_hosts.old"
    shutil.copy(fresh_ssh_lab.known_hosts_path, old_known)
    before = fresh_ssh_lab.host("lab-node1")
    after = fresh_ssh_lab.rotate_host_key("lab-node1")
    assert (after.address, after.port) == (before.address, before.port)
    assert after.host_key_pub != before.host_key_pub and after.pid != before.pid

    result = _ssh(fresh_ssh_lab.ssh_config_path, "lab-node1", "true")  # config still names the old file
    assert result.returncode == 255
    assert "Host key verification failed" in result.stderr
    with pytest.raises(paramiko.BadHostKeyException):
        _paramiko_client(after, old_known).close()

    fresh_ssh_lab.write_known_hosts()
    result = _ssh(fresh_ssh_lab.ssh_config_path, "lab-node1", "echo hi")
    assert (result.returncode, result.stdout) == (0, "hi\n"), result.stderr


def test_kill_sessions_kills_running_command_but_not_listener(fresh_ssh_lab: SshLab) -> None:
    lab = fresh_ssh_lab
    listener = lab.host("lab-node1").pid
    client = subprocess.Popen(
        ["ssh", "-F", str(lab.ssh_config_path), "lab-node1", "sleep 30"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert _wait_for(lambda: any(_comm(p) == "sleep" for p in lab.session_pids("lab-node1")))
        sleeps = [p for p in lab.session_pids("lab-node1") if _comm(p) == "sleep"]
        killed = lab.kill_sessions("lab-node1")
        assert set(sleeps) <= set(killed) and listener not in killed
        assert client.wait(timeout=10) == 255
        assert all(_gone(p) for p in killed)
    finally:
        if client.poll() is None:
            client.kill()
        client.communicate()
    assert lab.is_running("lab-node1") and lab.host("lab-node1").pid == listener and not _gone(listener)
    assert lab.session_pids("lab-node1") == []
    result = _ssh(lab.ssh_config_path, "lab-node1", "echo hi")
    assert (result.returncode, result.stdout) == (0, "hi\n"), result.stderr


def test_stop_host_then_start_host(fresh_ssh_lab: SshLab) -> None:
    lab = fresh_ssh_lab
    host = lab.host("lab-node2")
    lab.stop_host("lab-node2")
    assert _gone(host.pid) and not lab.is_running("lab-node2")
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((host.address, host.port), timeout=5).close()
    again = lab.start_host("lab-node2")
    assert (again.port, again.host_key_pub) == (host.port, host.host_key_pub)
    result = _ssh(lab.ssh_config_path, "lab-node2", "echo hi")
    assert (result.returncode, result.stdout) == (0, "hi\n"), result.stderr


def test_stop_leaves_no_process_of_ours(tmp_path: Path) -> None:
    if lab_unavailable_reason() is not None:
        pytest.skip(str(lab_unavailable_reason()))
    lab = SshLab(tmp_path / "lab")
    with lab:
        lab.add_host("a", "127.0.0.21")
        lab.add_host("b", "127.0.0.22")
        lab.write_known_hosts()
        lab.write_ssh_config()
        client = subprocess.Popen(
            ["ssh", "-F", str(lab.ssh_config_path), "a", "sleep 30"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            assert _wait_for(lambda: any(_comm(p) == "sleep" for p in lab.session_pids("a")))
            pids = [h.pid for h in lab.hosts.values()] + lab.session_pids("a")
        except BaseException:
            client.kill()
            raise
    try:
        assert all(_gone(p) for p in pids), [(p, _comm(p)) for p in pids if not _gone(p)]
        assert client.wait(timeout=10) == 255
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
    lab.stop()  # idempotent


def _lab_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m tests.lab.sshd ARGS`` from the repository root (60 s at most; a failure is returned, not raised)."""
    return subprocess.run([sys.executable, "-m", "tests.lab.sshd", *args], cwd=REPO_ROOT,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, capture_output=True, text=True, timeout=60,
                          check=False)


@pytest.mark.slow
def test_cli_up_and_down(tmp_path: Path) -> None:
    if lab_unavailable_reason() is not None:
        pytest.skip(str(lab_unavailable_reason()))
    workdir = tmp_path / "cli-lab"
    up = _lab_cli("up", "--hosts", "3", "--base", "127.0.2.1", "--workdir", str(workdir))
    data = json.loads((workdir / "lab.json").read_text()) if (workdir / "lab.json").exists() else {}
    pids = [h["pid"] for h in data.get("hosts", [])]
    try:
        assert up.returncode == 0, up.stderr
        assert [h["address"] for h in data["hosts"]] == ["127.0.2.1", "127.0.2.2", "127.0.2.3"]
        assert [h["name"] for h in data["hosts"]] == ["lab-host01", "lab-host02", "lab-host03"]
        assert (workdir / "hosts.txt").read_text().splitlines() == [
            f"{h['address']} {h['port']}" for h in data["hosts"]
        ]
        assert len((workdir / "known_hosts").read_text().splitlines()) == 3
        assert not any(_gone(p) for p in pids)
        result = _ssh(workdir / "ssh_config", "lab-host02", "echo hi")
        assert (result.returncode, result.stdout) == (0, "hi\n"), result.stderr
        again = _lab_cli("up", "--hosts", "1", "--workdir", str(workdir))
        assert again.returncode == 1 and "already up" in again.stderr
    finally:
        down = _lab_cli("down", "--workdir", str(workdir))
        leaked = [p for p in pids if not _gone(p)]
        for pid in leaked:  # never leave the detached daemons behind, even if `down` is broken
            os.kill(pid, signal.SIGKILL)
    assert down.returncode == 0, down.stderr
    assert leaked == []
    assert not (workdir / "lab.json").exists()
    twice = _lab_cli("down", "--workdir", str(workdir))
    assert twice.returncode == 0 and "nothing to stop" in twice.stdout


def test_port_taken_before_sshd_binds_is_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if lab_unavailable_reason() is not None:
        pytest.skip(str(lab_unavailable_reason()))
    busy = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    busy.bind(("127.0.0.23", 0))
    busy.listen()
    busy_port = busy.getsockname()[1]
    real_free_port = sshd_module.free_port
    answers = iter([busy_port])
    monkeypatch.setattr(sshd_module, "free_port", lambda address: next(answers, None) or real_free_port(address))
    try:
        with SshLab(tmp_path / "lab") as lab:
            host = lab.add_host("racy", "127.0.0.23")
            assert host.port != busy_port
            assert "Address already in use" in host.log.read_text()
    finally:
        busy.close()
