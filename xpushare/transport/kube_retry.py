"""A bounded retry of idempotent kubectl reads after a transient failure of the API server or of the connection.

On a long run an API server blips (an etcd leader election answers 500/503 for a few seconds) and an SSH session to
the master drops. A read (``get``, ``logs``, ``describe``, ``version``, ...: :data:`READ_VERBS`) can simply be
repeated, so :func:`run_read` repeats it, up to :attr:`RetryPolicy.retries` further attempts with a doubling
backoff, when it failed transiently (:func:`~xpushare.transport.kube_errors.transient`: a server-side error, 5xx or
429, or the transport's :class:`~xpushare.model.errors.ConnectionLost`).

Never retried:

* writes (``apply``, ``create``, ``delete``, ``annotate``, ``patch``, ...): not idempotent in general;
* NotFound, Forbidden, usage errors: the same request gets the same answer;
* kubectl's own ``--request-timeout`` (``KubeRequestTimeout``): a hung server was already given its time, and a
  retry would multiply it (four reads of 30 s is two minutes of a case doing nothing);
* anything once Ctrl-C, SIGTERM or SIGHUP was requested (:mod:`~xpushare.transport.interrupt`); a request that
  arrives during a backoff ends the sleep at once (``KeyboardInterrupt``, as in every wait loop).

Each retry is one line of the command log (:mod:`~xpushare.transport.command_log`, ``-v`` and ``debug.log``) naming
the error; a read that succeeds after retries says so there too, and every attempt counts as a kubectl call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from xpushare.model.errors import ConnectionLost, UsageError
from xpushare.transport import command_log, interrupt
from xpushare.transport.base import CommandResult
from xpushare.transport.kube_errors import classify, kube_verb, transient

__all__ = ["DEFAULT_BACKOFF_S", "DEFAULT_RETRIES", "READ_VERBS", "RetryPolicy", "run_read"]

#: kubectl verbs that only read: the ones retried.
READ_VERBS = frozenset({"get", "logs", "describe", "version", "top", "api-resources", "api-versions", "explain"})
DEFAULT_RETRIES = 3
DEFAULT_BACKOFF_S = 1.0


@dataclass(frozen=True)
class RetryPolicy:
    """How a read is repeated after a transient failure (the cluster's parameters: :meth:`from_params`)."""

    #: further attempts after the first one
    retries: int = DEFAULT_RETRIES
    #: seconds before the first retry; each next one waits twice as long
    backoff_s: float = DEFAULT_BACKOFF_S

    def delay(self, retry: int) -> float:
        """Seconds before retry number ``retry`` (1-based)."""
        return self.backoff_s * 2 ** (retry - 1)

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> RetryPolicy:
        """The policy of a cluster's ``kubectl_read_retries`` / ``kubectl_retry_backoff_s`` (3 / 1); a
        ``UsageError`` when the first is not a whole number >= 0 or the second not a number of seconds >= 0."""
        retries = params.get("kubectl_read_retries", DEFAULT_RETRIES)
        backoff = params.get("kubectl_retry_backoff_s", DEFAULT_BACKOFF_S)
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise UsageError(f"kubectl_read_retries must be a whole number >= 0, not {retries!r}")
        if isinstance(backoff, bool) or not isinstance(backoff, (int, float)) or not 0 <= backoff < float("inf"):
            raise UsageError(f"kubectl_retry_backoff_s must be a number of seconds >= 0, not {backoff!r}")
        return cls(retries, float(backoff))


def run_read(once: Callable[[], CommandResult], argv: Sequence[str], *, host: str, policy: RetryPolicy,
             sleep: Callable[[float], None] = interrupt.sleep) -> tuple[CommandResult, int]:
    """Run ``once()`` (one kubectl call of ``argv`` on ``host``), again after a transient failure when ``argv`` is a
    read; returns the last result and the number of attempts.

    Raises:
        ConnectionLost: of the last attempt (its message then says how many attempts were made).
        KeyboardInterrupt: a Ctrl-C/SIGTERM during a backoff.
    """
    verb = kube_verb(argv)
    attempts = 1 + (policy.retries if verb in READ_VERBS else 0)
    for attempt in range(1, attempts + 1):
        try:
            result = once()
        except ConnectionLost as exc:
            if attempt == attempts or interrupt.requested():
                if attempt == 1:
                    raise
                detail = str(exc).removeprefix(f"{exc.host}: ")
                raise ConnectionLost(exc.host, f"{detail} (kubectl {verb}: {attempt} attempts)") from exc
            reason = f"{type(exc).__name__}: {exc}"
        else:
            error = None if result.ok else classify(argv, result.stderr, result.exit_code)
            if error is None or not transient(error) or attempt == attempts or interrupt.requested():
                if attempt > 1:
                    outcome = "succeeded" if result.ok else f"failed (exit {result.exit_code})"
                    command_log.retried(host, argv, outcome, attempt, attempts)
                return result, attempt
            reason = str(error)
        delay = policy.delay(attempt)
        command_log.retrying(host, f"kubectl {verb}", attempt, attempts, reason, delay)
        sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover
