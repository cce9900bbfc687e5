"""``invoke run`` ends its commands on Ctrl-C, SIGTERM and SIGHUP: on ``local`` it used to wait for the command's
timeout; over SSH the remote command kept running without its session. Its ``--timeout`` is a deadline over SSH
too (the local side: tests/unit/transport/test_deadline.py)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from tests.lab.sshd import SshLab
from tests.paths import REPO_ROOT
from xpushare.inventory.schema import SshOptions
from xpushare.model.errors import CommandTimeout, TransportError
from xpushare.transport.deadline import GRACE_S
from xpushare.transport.ssh import SshHost

ROOT = REPO_ROOT


def _kill_remote(host: SshHost, pattern: str) -> None:
    """Kill, by pid, what a failed test left running on the lab host (its own uniquely named command)."""
    pids = host.run(["pgrep", "-f", pattern]).stdout.split()
    if pids:
        host.run(["kill", "-KILL", *pids])


def _started(marker: str, deadline_s: float = 20) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 0:
            return
        time.sleep(0.1)
    raise AssertionError(f"{marker} never started")


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGHUP, 129)])
def test_run_on_local_ends_its_command_on_a_signal(sig: signal.Signals, status: int) -> None:
    seconds = f"60.{uuid.uuid4().int % 10**6:06d}"  # names this test's command (its own argv starts with sleep)
    marker = f"^sleep {seconds}"
    proc = subprocess.Popen([sys.executable, "-m", "invoke", "run", "--cluster", "local", "--timeout", "120", "--",
                             "sleep", seconds], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _started(marker)
        start = time.monotonic()
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == status, err
        assert time.monotonic() - start < 10 and "Traceback" not in err
        assert subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode != 0  # the command ended
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)  # this test's own command, if it outlived the test


@pytest.mark.lab
def test_over_ssh_an_interrupted_command_ends_with_its_session(ssh_lab: SshLab, tmp_path: Path) -> None:
    h = ssh_lab.host("lab-node1")
    opts = SshOptions(user=h.user, port=h.port, identity=str(h.identity), host_key_policy="strict",
                      known_hosts=str(ssh_lab.write_known_hosts(tmp_path / "known_hosts")), connect_timeout=5)
    marker = f"xp-ssh-{uuid.uuid4().hex[:8]}"
    host = SshHost("lab-node1", h.address, opts, interruptible=True)
    checker = SshHost("lab-node1", h.address, opts)
    try:
        assert host.run(["sh", "-c", "echo out; echo err >&2; exit 7"]).exit_code == 7  # output and status kept
        res = host.run(["sh", "-c", "echo out; echo err >&2; exit 7"])
        assert (res.stdout, res.stderr) == ("out\n", "err\n")
        def long_command() -> None:
            with contextlib.suppress(TransportError):  # the session is closed under it
                host.run(["sh", "-c", f"sleep 60 # {marker}"])

        thread = threading.Thread(target=long_command, daemon=True)
        thread.start()
        deadline = time.monotonic() + 20
        while checker.run(["pgrep", "-f", marker]).exit_code != 0:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        host.close()  # what an interrupt does to the session
        deadline = time.monotonic() + 10
        while checker.run(["pgrep", "-f", f"sleep 60 # {marker}"]).exit_code == 0:
            assert time.monotonic() < deadline, "the remote command outlived its session"
            time.sleep(0.2)
    finally:
        _kill_remote(checker, marker)
        checker.close()
        host.close()


@pytest.mark.lab
def test_invoke_run_over_ssh_on_sigterm_ends_the_remote_command_without_a_traceback(ssh_lab: SshLab,
                                                                                      tmp_path: Path) -> None:
    h = ssh_lab.host("lab-node1")
    known = ssh_lab.write_known_hosts(tmp_path / "known_hosts")
    inventory = tmp_path / "inv.yaml"
    inventory.write_text(
        "clusters:\n  labc:\n    mode: host\n    hosts:\n"
        f"      lab-node1: {{address: {h.address}, port: {h.port}, user: {h.user}, identity: {h.identity}, "
        f"roles: [gpu, master], ssh: {{known_hosts: {known}, host_key_policy: strict}}}}\n")
    seconds = f"61.{uuid.uuid4().int % 10**6:06d}"
    opts = SshOptions(user=h.user, port=h.port, identity=str(h.identity), host_key_policy="strict",
                      known_hosts=str(known), connect_timeout=5)
    checker = SshHost("lab-node1", h.address, opts)
    proc = subprocess.Popen([sys.executable, "-m", "invoke", "run", "--cluster", "labc", "--inventory",
                             str(inventory), "--", "sleep", seconds], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while checker.run(["pgrep", "-f", f"^sleep {seconds}"]).exit_code != 0:
            assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 143, err
        assert "Traceback" not in err and "EOFError" not in err, err
        deadline = time.monotonic() + 10
        while checker.run(["pgrep", "-f", f"^sleep {seconds}"]).exit_code == 0:
            assert time.monotonic() < deadline, "the remote command kept running"
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            proc.kill()
        _kill_remote(checker, f"^sleep {seconds}")
        checker.close()


@pytest.mark.lab
def test_over_ssh_a_timeout_is_a_deadline_without_a_thread_traceback(ssh_lab: SshLab, tmp_path: Path) -> None:
    """``invoke run --timeout 3 -- bash -c 'sleep 20 & echo started'`` over SSH: the backgrounded child holds the
    channel open past the command's exit; the timer's channel close came back as exit 0 ``ok`` (about 3 tries in
    4) with Fabric's ``EOFError`` thread traceback. Now every try is a CommandTimeout by the deadline plus the
    grace, with the output written before it."""
    h = ssh_lab.host("lab-node1")
    opts = SshOptions(user=h.user, port=h.port, identity=str(h.identity), host_key_policy="strict",
                      known_hosts=str(ssh_lab.write_known_hosts(tmp_path / "known_hosts")), connect_timeout=5)
    seconds = f"20.{uuid.uuid4().int % 10**6:06d}"
    host = SshHost("lab-node1", h.address, opts, interruptible=True)  # the host of invoke run
    checker = SshHost("lab-node1", h.address, opts)
    seen: list[threading.ExceptHookArgs] = []
    previous, threading.excepthook = threading.excepthook, seen.append
    try:
        for _ in range(3):
            start = time.monotonic()
            with pytest.raises(CommandTimeout) as caught:
                host.run(["bash", "-c", f"sleep {seconds} & echo started"], timeout=1)
            assert time.monotonic() - start < 1 + GRACE_S
            assert caught.value.stdout == "started\n"
            assert ("'bash' timed out after 1 s" in str(caught.value) if caught.value.exit_code is None else
                    "'bash' ended (exit 0), but a process it left in the background held its output open past the "
                    "1 s timeout" in str(caught.value)), str(caught.value)
            host.close()  # as invoke run's fan-out does, while a timer might still be closing the channel
        time.sleep(0.5)
        assert not seen, [str(args.exc_value) for args in seen]
    finally:
        threading.excepthook = previous
        _kill_remote(checker, f"^sleep {seconds}")
        checker.close()
        host.close()
