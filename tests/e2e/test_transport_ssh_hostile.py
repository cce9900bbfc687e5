"""SSH transport against hostile local files and dropped connections: a failed ``get`` keeps the local file, a bad
known_hosts line of another host is skipped (as OpenSSH does), an identity key that cannot be used is refused with
one line, a connection lost under invoke's stdin thread is a connection loss, and a child a command left holding its
output ends with the command's session at the deadline."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import paramiko
import pytest
from invoke.exceptions import ThreadException
from invoke.util import ExceptionWrapper

from tests.lab.sshd import SshLab
from xpushare.inventory.schema import SshOptions
from xpushare.model.errors import CommandTimeout, ConnectionLost, RemoteNotFound, TransportError, UsageError
from xpushare.transport.deadline import GRACE_S
from xpushare.transport.ssh import SshHost
from xpushare.transport.ssh_files import load_known_hosts, usable_identity


def _host(lab: SshLab, known_hosts: Path, identity: str | None = None) -> SshHost:
    h = lab.host("lab-node1")
    opts = SshOptions(user=h.user, port=h.port, identity=identity or str(h.identity), host_key_policy="strict",
                      known_hosts=str(known_hosts), connect_timeout=5, connect_retries=1)
    return SshHost("lab-node1", h.address, opts, spawn_dir=str(lab.workdir / "spawn-hostile"), sleep=lambda s: None)


@pytest.mark.lab
def test_a_failed_get_keeps_the_local_file_whole(ssh_lab: SshLab, tmp_path: Path) -> None:
    host = _host(ssh_lab, ssh_lab.write_known_hosts(tmp_path / "known_hosts"))
    local = tmp_path / "out" / "a.log"
    local.parent.mkdir()
    local.write_text("DATA\n")
    try:
        with pytest.raises(RemoteNotFound):
            host.get("/nonexistent/a.log", local)
        with pytest.raises(TransportError):
            host.get("/", local)  # a directory
        assert local.read_text() == "DATA\n"
        assert sorted(p.name for p in local.parent.iterdir()) == ["a.log"]  # no temporary file left
        host.run(["sh", "-c", "echo NEW > /tmp/xpushare-hostile-get"], check=True)
        host.get("/tmp/xpushare-hostile-get", local)
        assert local.read_text() == "NEW\n"
    finally:
        host.close()


@pytest.mark.lab
def test_a_malformed_known_hosts_line_of_another_host_is_skipped(ssh_lab: SshLab, tmp_path: Path) -> None:
    known = ssh_lab.write_known_hosts(tmp_path / "known_hosts")
    good = known.read_text()
    known.write_text("other.example ssh-ed25519 AAAA!!!notbase64\n[x]:22 ssh-rsa\n" + good)
    host = _host(ssh_lab, known)
    try:
        assert host.run(["echo", "ok"]).stdout == "ok\n"
    finally:
        host.close()


def test_known_hosts_loader_counts_skipped_lines(tmp_path: Path) -> None:
    key = paramiko.Ed25519Key.from_private_key_file(str(_ed25519(tmp_path)))
    known = tmp_path / "known_hosts"
    known.write_text(f"# comment\n\nbad-host ssh-ed25519 @@@\nonly-two-fields\n"
                     f"good-host {key.get_name()} {key.get_base64()}\n")
    keys = paramiko.HostKeys()
    assert load_known_hosts(keys, known) == 2
    assert keys.lookup("good-host") is not None and keys.lookup("bad-host") is None


def _ed25519(tmp_path: Path) -> Path:
    import subprocess

    path = tmp_path / "id"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path


def test_identity_must_be_a_private_file(tmp_path: Path) -> None:
    key = tmp_path / "id"
    key.write_text("not really a key\n")
    key.chmod(0o600)
    assert usable_identity("h1", str(key)) == str(key)
    key.chmod(0o644)
    with pytest.raises(UsageError, match=r"accessible by others.*chmod 600"):
        usable_identity("h1", str(key))
    with pytest.raises(UsageError, match="not found"):
        usable_identity("h1", str(tmp_path / "missing"))
    with pytest.raises(UsageError, match="not a file"):
        usable_identity("h1", str(tmp_path))


def test_an_unusable_identity_is_refused_before_connecting(tmp_path: Path) -> None:
    opts = SshOptions(identity=str(tmp_path / "missing"), known_hosts=str(tmp_path / "kh"), connect_retries=1)
    host = SshHost("h1", "127.0.0.1", opts, sleep=lambda s: None)
    with pytest.raises(UsageError, match=r"h1: identity file .* not found"):
        host.connection()


class _Conn:
    """A connection whose ``run`` fails the way invoke does when its stdin thread meets a closed socket."""

    is_connected = True

    def run(self, line: str, **options: object) -> object:
        try:
            raise OSError("Socket is closed")
        except OSError as exc:
            wrapped = ExceptionWrapper({}, OSError, exc, exc.__traceback__)
        raise ThreadException([wrapped])

    def close(self) -> None:
        self.is_connected = False


def test_a_socket_closed_under_the_stdin_thread_is_a_lost_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    host = SshHost("h1", "127.0.0.1", SshOptions(), sleep=lambda s: None)
    conn = _Conn()
    monkeypatch.setattr(host, "connection", lambda: conn)
    with pytest.raises(ConnectionLost, match="Socket is closed"):
        host.run(["cat"], stdin="x" * 10)


def test_another_thread_exception_stays_a_bug(monkeypatch: pytest.MonkeyPatch) -> None:
    class Other(_Conn):
        def run(self, line: str, **options: object) -> object:
            try:
                raise ValueError("a bug")
            except ValueError as exc:
                raise ThreadException([ExceptionWrapper({}, ValueError, exc, exc.__traceback__)]) from None

    host = SshHost("h1", "127.0.0.1", SshOptions(), sleep=lambda s: None)
    conn = Other()
    monkeypatch.setattr(host, "connection", lambda: conn)
    with pytest.raises(ThreadException):
        host.run(["true"])


def _alive_on(host: SshHost, seconds: str) -> bool:
    return host.run(["pgrep", "-f", f"^sleep {seconds}$"]).exit_code == 0


def _gone_on(host: SshHost, seconds: str, limit_s: float) -> bool:
    end = time.monotonic() + limit_s
    while _alive_on(host, seconds):
        if time.monotonic() > end:
            return False
        time.sleep(0.2)
    return True


@pytest.mark.lab
def test_a_background_child_holding_the_output_ends_at_the_deadline_on_the_host(ssh_lab: SshLab,
                                                                                tmp_path: Path) -> None:
    """``invoke run --timeout 2 -- bash -c 'sleep 40 & echo started'`` over SSH: the call returned at the deadline
    with ``started``, but the backgrounded ``sleep`` ran on the host to its end (the channel was closed, the command's
    session watcher had already gone with the command). Now the command's process group ends with the session; a
    daemon the command started with its output elsewhere (``nohup ... >/dev/null &``) is left running, as before."""
    opts = ssh_lab.host("lab-node1")
    host = SshHost("lab-node1", opts.address, _host(ssh_lab, ssh_lab.write_known_hosts(tmp_path / "kh")).ssh,
                   interruptible=True)  # the host of invoke run
    checker = _host(ssh_lab, ssh_lab.write_known_hosts(tmp_path / "kh2"))
    held = f"40.{uuid.uuid4().int % 10**6:06d}"
    daemon = f"41.{uuid.uuid4().int % 10**6:06d}"
    try:
        start = time.monotonic()
        with pytest.raises(CommandTimeout) as caught:
            host.run(["bash", "-c", f"sleep {held} & echo started"], timeout=2)
        assert time.monotonic() - start < 2 + GRACE_S
        assert caught.value.stdout == "started\n"
        if caught.value.exit_code is not None:  # the command's end was known at the deadline: said so
            assert caught.value.exit_code == 0 and "ended (exit 0)" in str(caught.value), str(caught.value)
        assert _gone_on(checker, held, 10), "the background child outlived the deadline on the host"
        res = host.run(["bash", "-c", f"nohup sleep {daemon} >/dev/null 2>&1 &"], timeout=30)
        assert res.ok and res.stdout == ""
        host.close()  # the session is long gone; the daemon's output was never the command's
        time.sleep(1)
        assert _alive_on(checker, daemon), "a daemon with its output elsewhere was ended with the session"
    finally:
        for seconds in (held, daemon):
            pids = checker.run(["pgrep", "-f", f"^sleep {seconds}$"]).stdout.split()
            if pids:
                checker.run(["kill", "-KILL", *pids])
        checker.close()
        host.close()
