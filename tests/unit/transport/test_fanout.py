"""Fan-out, folding of identical outputs, host selection, facts parsing, exit statuses."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest

from xpushare import adhoc
from xpushare.evidence.facts import parse_facts
from xpushare.inventory import schema
from xpushare.inventory.selection import fold, select_hosts
from xpushare.model.errors import HostUnreachable, UsageError
from xpushare.model.exit_status import ExitStatus
from xpushare.transport.base import CommandResult, Host
from xpushare.transport.fanout import HostOutcome, fan_out


class FakeHost(Host):
    def __init__(self, name: str, out: str = "", code: int = 0, down: bool = False, delay: float = 0) -> None:
        self.name, self.out, self.code, self.down, self.delay = name, out, code, down, delay

    @property
    def spawn_dir(self) -> str:
        return "/nonexistent"

    def run(self, argv: Sequence[str], **_options: Any) -> CommandResult:  # the options do not matter here
        if self.down:
            raise HostUnreachable(self.name, "connection refused")
        time.sleep(self.delay)
        return CommandResult(self.name, tuple(argv), self.out, "", self.code, self.delay)

    def put(self, local, remote):  # type: ignore[no-untyped-def]
        raise NotImplementedError

    def get(self, remote, local):  # type: ignore[no-untyped-def]
        raise NotImplementedError


@pytest.mark.parametrize(
    ("names", "folded"),
    [
        ([f"c1-gpu{i}" for i in range(1, 9)], "c1-gpu[1-8]"),
        (["n1", "n2", "n4", "n5", "n7"], "n[1-2,4-5,7]"),
        (["node01", "node02", "master"], "master,node[01-02]"),
        (["a"], "a"),
        (["x9", "x10", "x11"], "x[9-11]"),
    ],
)
def test_fold_names(names: list[str], folded: str) -> None:
    assert fold(names) == folded


def test_fan_out_is_parallel_and_bounded() -> None:
    active, peak, lock = [0], [0], threading.Lock()

    def op(host: Host) -> str:
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.05)
        with lock:
            active[0] -= 1
        return host.name

    hosts = [FakeHost(f"h{i}") for i in range(12)]
    start = time.monotonic()
    outcomes = fan_out(hosts, op, forks=4)
    assert [o.value for o in outcomes] == [f"h{i}" for i in range(12)]
    assert peak[0] == 4
    assert time.monotonic() - start < 12 * 0.05  # not sequential


def test_identical_outputs_fold_and_failures_are_reported_per_host() -> None:
    hosts: list[Host] = [FakeHost(f"c1-gpu{i}", "580.159.04\n") for i in range(1, 9)]
    hosts.append(FakeHost("c1-gpu9", "", code=9))
    hosts.append(FakeHost("c1-gpu10", down=True))
    outcomes = fan_out(hosts, lambda h: h.run(["nvidia-smi"]))
    text = adhoc.render_folded(outcomes)
    assert "c1-gpu[1-8]: 580.159.04" in text
    assert "c1-gpu9 (exit 9)" in text
    assert "c1-gpu10: connection refused" in text
    failed = [o.value is not None and not o.value.ok for o in outcomes]
    assert adhoc.exit_status_of(outcomes, failed) == ExitStatus.UNREACHABLE
    assert adhoc.exit_status_of(outcomes[:9], failed[:9]) == ExitStatus.FAILED
    assert adhoc.exit_status_of(outcomes[:8], failed[:8]) == ExitStatus.OK


def test_exit_status_counts_errors_as_failures() -> None:
    from xpushare.model.errors import CommandTimeout

    outcomes: list[HostOutcome[object]] = [HostOutcome("a", error=CommandTimeout("a", "timed out"))]
    assert adhoc.exit_status_of(outcomes, [False]) == ExitStatus.FAILED


def test_select_hosts_by_role_and_limit() -> None:
    inv = schema.parse(
        """
clusters:
  c1:
    mode: k8s
    hosts:
      m: {roles: [master]}
      g[1:4]: {roles: [gpu]}
"""
    )
    c1 = inv.cluster("c1")
    assert [h.name for h in select_hosts(c1, role="gpu")] == ["g1", "g2", "g3", "g4"]
    assert [h.name for h in select_hosts(c1, limit="g*,!g3")] == ["g1", "g2", "g4"]
    assert [h.name for h in select_hosts(c1, role="master")] == ["m"]
    with pytest.raises(UsageError):
        select_hosts(c1, role="gpu", limit="m")
    with pytest.raises(UsageError):
        select_hosts(c1, role="worker")


def test_parse_facts() -> None:
    text = (
        "hostname=gpu-a\nkernel=6.1.0\ngpu=0, NVIDIA H200, 580.159.04\ngpu=1, NVIDIA H200, 580.159.04\n"
        "kubectl_client=v1.37.1\ngarbage line\n"
    )
    f = parse_facts(text)
    assert f.hostname == "gpu-a" and f.kernel == "6.1.0"
    assert f.gpus == ((0, "NVIDIA H200"), (1, "NVIDIA H200")) and f.driver == "580.159.04"
    assert f.kubectl_client == "v1.37.1" and f.kubectl_server is None
    assert parse_facts("").gpus == ()
