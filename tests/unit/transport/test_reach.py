"""Why a host did not answer (``HostUnreachable.why``), the probe of a run's hosts, and the stand-in for a host that
did not answer (docs/reliability.md "Partial clusters")."""

from __future__ import annotations

import errno
import socket

import paramiko
import pytest

from xpushare.model.errors import HostKeyMismatch, HostUnreachable
from xpushare.model.unreached import Unreached
from xpushare.transport import reach
from xpushare.transport.local import LocalHost
from xpushare.transport.ssh import why_unreachable


@pytest.mark.parametrize(("exc", "why"), [
    (socket.gaierror(-2, "Name or service not known"), "dns"),
    (paramiko.ssh_exception.NoValidConnectionsError({("127.0.0.1", 22): ConnectionRefusedError(111, "refused")}),
     "refused"),
    (TimeoutError("timed out"), "timeout"),
    (OSError(errno.EHOSTUNREACH, "No route to host"), "no route"),
    (paramiko.SSHException("Error reading SSH protocol banner"), "ssh"),
    (EOFError(), "ssh"),
    (ValueError("odd"), "unreachable"),
])
def test_why_a_host_did_not_answer(exc: BaseException, why: str) -> None:
    assert why_unreachable(exc) == why


def test_the_why_is_kept_and_bounded() -> None:
    assert HostUnreachable("h", "x", "auth").describe() == "UNREACHABLE (auth): x"
    assert HostUnreachable("h", "x", "nonsense").why == "unreachable"
    assert HostKeyMismatch("h", "changed").why == "host key"


class _Dead(LocalHost):
    def run(self, argv, **kw):  # type: ignore[no-untyped-def, override]
        raise HostUnreachable(self.name, "cannot connect to 10.0.0.9 after 3 attempt(s): timed out", "timeout")


def test_the_probe_names_the_hosts_that_did_not_answer_and_the_stand_in_fails_at_once() -> None:
    dead = reach.probe([LocalHost("alive"), _Dead("gone")])
    assert list(dead) == ["gone"] and dead["gone"].why == "timeout"
    stand_in = reach.UnreachableHost(dead["gone"])
    with pytest.raises(HostUnreachable, match=r"^gone: UNREACHABLE \(timeout\): cannot connect") as caught:
        stand_in.run(["true"])
    assert caught.value.why == "timeout"
    with pytest.raises(HostUnreachable):
        stand_in.spawn("x", ["sleep", "1"])
    u = Unreached.of(caught.value, "gpu")  # a stand-in's error is not said twice
    assert u.line() == "gone (gpu): UNREACHABLE (timeout): cannot connect to 10.0.0.9 after 3 attempt(s): timed out"
    assert Unreached.from_json(u.to_json()) == u
