"""A command's timeout as a deadline: invoke/Fabric runners that return by ``timeout`` + :data:`GRACE_S`.

invoke's own timeout (``Runner.start_timer``) kills the command at the deadline, then waits for the output threads
to see the end of the command's output, with no limit: a command that leaves a child holding its stdout
(``sh -c 'sleep 170 & echo started'``) kept the call for 170 s, after the timeout. Its timer thread also reports the
timeout only once ``kill`` has returned, so a command whose channel the timer was still closing came back as a plain
exit 0, and an error of that ``kill`` (``EOFError`` from a transport closed meanwhile) went to stderr as a thread
traceback.

:class:`DeadlineRunner` fixes the three: the timeout is marked before the kill, a failed kill is logged, not raised,
and the output threads are waited for until the deadline plus :data:`GRACE_S` at most; a thread still reading
then is left behind (its reads after that are not in the result). What was read by then is the result's
output; invoke raises ``CommandTimedOut`` with it (:func:`~xpushare.transport.base.logged_run` keeps it in
:class:`~xpushare.model.errors.CommandTimeout`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from invoke.runners import Runner

#: Seconds past the deadline a timed-out command may take to end: the kill's own grace (a local command's process
#: group gets SIGTERM at the deadline and SIGKILL :data:`~xpushare.transport.local.KILL_AFTER_S`, 2 s, later) and
#: 1 s for its last output to be read. The ``invoke run --timeout`` promise of README.md and docs/reliability.md.
GRACE_S = 3.0

_log = logging.getLogger(__name__)


class DeadlineRunner(Runner):
    """A runner (mixed in before invoke's ``Local`` or Fabric's ``Remote``) whose timeout is a deadline."""

    _deadline: float | None = None
    _deadline_hit = False

    def start_timer(self, timeout: float | None) -> None:  # invoke annotates int; --timeout takes fractions
        if timeout is None:
            return
        self._deadline = time.monotonic() + timeout
        timer = threading.Timer(timeout, self._expire)
        timer.daemon = True
        self._timer = timer
        timer.start()

    def _expire(self) -> None:
        self._deadline_hit = True  # before the kill: once the output ends, the result must already say timed out
        try:
            self.kill()
        except Exception as exc:  # a transport closed meanwhile (EOFError): nothing left to end
            _log.debug("kill at the deadline failed: %r", exc)

    @property
    def timed_out(self) -> bool:
        return self._deadline_hit

    def _thread_join_timeout(self, target: Callable[..., object]) -> float | None:  # type: ignore[override]
        own = super()._thread_join_timeout(target)
        if self._deadline is None:
            return own
        left = max(0.0, self._deadline + GRACE_S - time.monotonic())
        return left if own is None else min(float(own), left)
