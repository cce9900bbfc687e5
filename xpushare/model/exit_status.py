"""Process exit statuses of every xpushare task (documented in the README).

Modelled on httpie's ``ExitStatus``: one enum, one place, so scripts that wrap the tool can branch on it.
"""

from __future__ import annotations

from enum import IntEnum


class ExitStatus(IntEnum):
    """Exit status of an ``invoke`` task."""

    OK = 0
    """Everything succeeded: every command exited 0 / no case is FAIL or ERROR."""
    FAILED = 1
    """Some remote command exited non-zero, or some case is FAIL or ERROR."""
    USAGE = 2
    """Bad flags, unknown case id, or an invalid inventory."""
    UNREACHABLE = 3
    """Some host could not be reached (connect or authentication failed)."""
    INTERRUPTED = 130
    """Interrupted with Ctrl-C (SIGINT); a run can be resumed with ``--resume``."""
    HUNG_UP = 129
    """Interrupted by SIGHUP (the terminal closed), handled as Ctrl-C."""
    TERMINATED = 143
    """Interrupted by SIGTERM (``timeout``, CI, systemd, Kubernetes), handled as Ctrl-C."""
    PIPE_CLOSED = 141
    """The reader of standard output went away (``xpushare cases | head``): 128 + SIGPIPE, as a shell reports
    a command killed by it; nothing more is printed."""


def decide_exit_status(*, failed: bool, unreachable: bool = False, interrupted: ExitStatus | None = None) -> ExitStatus:
    """The one exit-status policy of every task (README "Exit status"), most telling first: ``interrupted`` (the
    128 + signal status of the request that ended the task) when given; :attr:`ExitStatus.UNREACHABLE` when a
    host or endpoint the task needed did not answer (what it could reach still ran, so it also says the rest
    is incomplete); :attr:`ExitStatus.FAILED` when anything judged, run or installed failed; else
    :attr:`ExitStatus.OK`. Each task says what ``failed`` and ``unreachable`` are over (cases, hosts, checks)."""
    if interrupted is not None:
        return interrupted
    if unreachable:
        return ExitStatus.UNREACHABLE
    return ExitStatus.FAILED if failed else ExitStatus.OK
