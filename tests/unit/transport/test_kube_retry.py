"""xpushare.transport.kube_retry: idempotent kubectl reads repeated after a transient failure (5xx, 429, a lost
connection), and nothing else; against a scripted fake host (the lab runs are in
tests/e2e/test_faults_while_running.py).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from tests.e2e.test_kubectl import POD, FakeHost, kubectl
from xpushare.inventory.schema import ClusterSpec
from xpushare.model.errors import CommandTimeout, ConnectionLost, UsageError
from xpushare.transport import interrupt
from xpushare.transport.base import CommandResult
from xpushare.transport.cluster_kubectl import kubectl_for
from xpushare.transport.kube_errors import (
    KubeError,
    KubeNotFound,
    KubeRequestTimeout,
    KubeServerError,
    KubeUnavailable,
    classify,
    transient,
)
from xpushare.transport.kube_retry import RetryPolicy

E500 = ("", 'Error from server (InternalError): an error on the server ("etcd leader changed") has prevented the '
        "request from succeeding (get pods w-1)\n", 1)
E503 = ("", "Error from server (ServiceUnavailable): the server is currently unable to handle the request\n", 1)
E429 = ("", "Error from server (TooManyRequests): the server has received too many requests and has asked us to try "
        "again later\n", 1)
NOT_FOUND = ("", 'Error from server (NotFound): pods "w-1" not found\n', 1)
FORBIDDEN = ("", 'Error from server (Forbidden): pods "w-1" is forbidden: User "u" cannot get resource "pods"\n', 1)
TIMEOUT = ("", "Unable to connect to the server: net/http: request canceled (Client.Timeout exceeded while awaiting "
           "headers)\n", 1)
OK = (json.dumps(POD), "", 0)
FAST = RetryPolicy(retries=3, backoff_s=0)


@pytest.fixture(autouse=True)
def _forget_the_signal() -> Iterator[None]:
    """Leave no interrupt request behind for later tests of this worker."""
    yield
    with interrupt.installed():
        pass


def retry_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "xpushare.commands" and "attempt" in r.getMessage()]


def test_a_500_twice_then_success_is_read_on_the_third_call_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    host = FakeHost([E500, E500, OK])
    k = kubectl(host, retry=FAST)
    with caplog.at_level(logging.INFO, logger="xpushare.commands"):
        pod = k.get_pod("w-1")
    assert pod.name == "w-1"
    assert len(host.calls) == 3 and k.calls == 3 and k.retries == 2
    assert all(c[0] == host.calls[0][0] for c in host.calls)  # the same request each time
    lines = retry_lines(caplog)
    assert len(lines) == 3, lines
    assert "kubectl get: attempt 1 of 4 failed" in lines[0] and "InternalError" in lines[0]
    assert "attempt 2 of 4 failed" in lines[1]
    assert "succeeded on attempt 3 of 4" in lines[2]


def test_a_500_that_lasts_fails_after_every_attempt_and_says_how_many() -> None:
    host = FakeHost(lambda argv: E500)
    with pytest.raises(KubeServerError) as info:
        kubectl(host, retry=FAST).get_pod("w-1")
    assert len(host.calls) == 4 and info.value.attempts == 4
    assert str(info.value).startswith("kubectl get failed after 4 attempts (exit 1): Error from server (InternalError)")


@pytest.mark.parametrize("answer", [E503, E429], ids=["503", "429"])
def test_503_and_429_are_retried(answer: tuple[str, str, int]) -> None:
    host = FakeHost([answer, OK])
    assert kubectl(host, retry=FAST).get_pod("w-1").name == "w-1"
    assert len(host.calls) == 2


@pytest.mark.parametrize(("answer", "cls"), [(NOT_FOUND, KubeNotFound), (FORBIDDEN, KubeError),
                                             (TIMEOUT, KubeRequestTimeout),
                                             (("", "error: unknown flag: --bogus\n", 1), KubeError)],
                         ids=["NotFound", "Forbidden", "request-timeout", "usage"])
def test_what_a_repeat_would_not_change_is_not_retried(answer: tuple[str, str, int], cls: type) -> None:
    host = FakeHost(lambda argv: answer)
    with pytest.raises(cls) as info:
        kubectl(host, retry=FAST).get_pod("w-1")
    assert type(info.value) is cls and len(host.calls) == 1
    assert "attempts" not in str(info.value)


@pytest.mark.parametrize("args", [["apply", "-f", "-"], ["create", "configmap", "c"], ["delete", "pod", "w-1"],
                                  ["annotate", "pod", "w-1", "a=b"], ["patch", "pod", "w-1", "-p", "{}"],
                                  ["replace", "-f", "-"], ["label", "pod", "w-1", "a=b"]])
def test_a_write_getting_a_500_is_not_retried(args: list[str]) -> None:
    host = FakeHost(lambda argv: E500)
    with pytest.raises(KubeServerError) as info:
        kubectl(host, retry=FAST).run(args)
    assert len(host.calls) == 1 and str(info.value).startswith(f"kubectl {args[0]} failed (exit 1)")


class FlakyHost(FakeHost):
    """Loses the connection on the first ``lost`` calls, then answers like FakeHost."""

    def __init__(self, lost: int, error: type[Exception] = ConnectionLost) -> None:
        super().__init__(lambda argv: OK)
        self.lost, self.error = lost, error

    def run(self, argv: list[str], **kw: object) -> CommandResult:  # type: ignore[override]
        if len(self.calls) < self.lost:
            self.calls.append((list(argv), None, None))
            raise self.error(self.name, "connection lost during '/usr/bin/kubectl': EOF")
        return super().run(argv)


def test_a_lost_connection_then_success(caplog: pytest.LogCaptureFixture) -> None:
    host = FlakyHost(lost=1)
    with caplog.at_level(logging.INFO, logger="xpushare.commands"):
        assert kubectl(host, retry=FAST).get_pod("w-1").name == "w-1"
    assert len(host.calls) == 2
    assert "ConnectionLost" in retry_lines(caplog)[0]


def test_a_connection_that_stays_lost_raises_connection_lost_naming_the_attempts() -> None:
    host = FlakyHost(lost=99)
    with pytest.raises(ConnectionLost, match=r"connection lost .*\(kubectl get: 4 attempts\)"):
        kubectl(host, retry=FAST).get_pod("w-1")
    assert len(host.calls) == 4


def test_a_command_timeout_of_the_transport_is_not_retried() -> None:
    host = FlakyHost(lost=99, error=CommandTimeout)
    with pytest.raises(CommandTimeout):
        kubectl(host, retry=FAST).get_pod("w-1")
    assert len(host.calls) == 1


def test_the_backoff_doubles() -> None:
    slept: list[float] = []
    from xpushare.transport import kube_retry
    once_results = iter([CommandResult("m", (), *E500, 0.0)] * 3 + [CommandResult("m", (), *OK, 0.0)])
    result, attempts = kube_retry.run_read(lambda: next(once_results), ["kubectl", "get", "pods"], host="m",
                                           policy=RetryPolicy(3, 0.5), sleep=slept.append)
    assert result.ok and attempts == 4 and slept == [0.5, 1.0, 2.0]


def test_an_interrupt_during_the_backoff_stops_at_once() -> None:
    host = FakeHost(lambda argv: E500)
    k = kubectl(host, retry=RetryPolicy(retries=3, backoff_s=30))
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM))
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt), interrupt.installed():
        timer.start()
        k.get_pod("w-1")
    timer.join()
    assert time.monotonic() - start < 2.0 and len(host.calls) == 1


def test_after_an_interrupt_a_read_is_not_retried() -> None:
    """Ctrl-C was requested (the harvest still runs after it): a failed read fails at once, it is not retried."""
    host = FakeHost(lambda argv: E500)
    with interrupt.installed():
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        with pytest.raises(KubeServerError):
            kubectl(host, retry=RetryPolicy(retries=3, backoff_s=30)).get_pod("w-1")
    assert len(host.calls) == 1


def test_transient_says_what_may_be_repeated() -> None:
    argv = ["kubectl", "get", "pods"]
    assert transient(classify(argv, E500[1], 1)) and transient(classify(argv, E503[1], 1))
    assert isinstance(classify(argv, E503[1], 1), KubeUnavailable)  # unchanged: 503 is the server unavailable
    assert transient(ConnectionLost("m", "x"))
    assert not transient(classify(argv, TIMEOUT[1], 1)) and not transient(classify(argv, NOT_FOUND[1], 1))
    assert not transient(classify(argv, "The connection to the server 10.0.0.1:6443 was refused", 1))


@pytest.mark.parametrize(("params", "expected"), [
    ({}, RetryPolicy(3, 1.0)),
    ({"kubectl_read_retries": 0, "kubectl_retry_backoff_s": 0.25}, RetryPolicy(0, 0.25)),
])
def test_the_cluster_parameters(params: dict[str, object], expected: RetryPolicy) -> None:
    cluster = ClusterSpec(name="c1", mode="k8s", sut="xpushare", backend="k8s", gpu_model=None, gpu_memory_gib=None,
                          hosts=(), params=params)
    assert kubectl_for(cluster, FakeHost()).retry == expected


@pytest.mark.parametrize("params", [{"kubectl_read_retries": -1}, {"kubectl_read_retries": "3"},
                                    {"kubectl_read_retries": 1.5}, {"kubectl_read_retries": True},
                                    {"kubectl_retry_backoff_s": -1}, {"kubectl_retry_backoff_s": "1s"}])
def test_bad_parameters_are_a_usage_error(params: dict[str, object]) -> None:
    with pytest.raises(UsageError, match=next(iter(params))):
        RetryPolicy.from_params(params)
