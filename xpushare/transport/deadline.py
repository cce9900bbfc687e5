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
:class:`~xpushare.model.errors.CommandTimeout`). When the command itself had already ended at the deadline (its
exit status known) and only a process it left in the background held its output open, the runner raises
:class:`OutputHeldOpen`, which carries that exit status.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from invoke.exceptions import CommandTimedOut
from invoke.runners import Result, Runner

#: Seconds past the deadline a timed-out command may take to end: the kill's own grace (a local command's process
#: group gets SIGTERM at the deadline and SIGKILL :data:`~xpushare.transport.local.KILL_AFTER_S`, 2 s, later) and
#: 1 s for its last output to be read. The ``invoke run --timeout`` promise of README.md and docs/reliability.md.
GRACE_S = 3.0

_log = logging.getLogger(__name__)


class OutputHeldOpen(CommandTimedOut):
    """The deadline passed after the command itself ended (``exit_code``, its own status) while a process it left
    behind (``sleep 170 &``) still held its output open; that process was ended at the deadline and ``result``
    holds the output read until then."""

    def __init__(self, result: Result, timeout: float, exit_code: int) -> None:
        super().__init__(result, timeout)  # type: ignore[arg-type]  # invoke annotates int; timeouts take fractions
        self.exit_code = exit_code


class DeadlineRunner(Runner):
    """A runner (mixed in before invoke's ``Local`` or Fabric's ``Remote``) whose timeout is a deadline."""

    _deadline: float | None = None
    _deadline_hit = False
    _exit_at_deadline: int | None = None

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
            self._exit_at_deadline = self.command_exit()
        except Exception as exc:  # a transport closed meanwhile: the command's end is not known
            _log.debug("the command's exit status at the deadline: %r", exc)
        try:
            self.kill()
        except Exception as exc:  # a transport closed meanwhile (EOFError): nothing left to end
            _log.debug("kill at the deadline failed: %r", exc)

    def command_exit(self) -> int | None:
        """The command's own exit status when it has ended (its output may still be held open by a process it left
        behind), else None; the transports' runners know how to ask (a local process, an SSH channel)."""
        return None

    @property
    def timed_out(self) -> bool:
        return self._deadline_hit

    def _finish(self) -> Result:
        try:
            return super()._finish()
        except CommandTimedOut as exc:
            if self._exit_at_deadline is None or isinstance(exc, OutputHeldOpen):
                raise
            raise OutputHeldOpen(exc.result, exc.timeout, self._exit_at_deadline) from None

    def _thread_join_timeout(self, target: Callable[..., object]) -> float | None:  # type: ignore[override]
        own = super()._thread_join_timeout(target)
        if self._deadline is None:
            return own
        left = max(0.0, self._deadline + GRACE_S - time.monotonic())
        return left if own is None else min(float(own), left)
