"""Glue between Invoke tasks and the library: error mapping to exit statuses, remainder argv.

Every task body runs inside :func:`guarded`, so a user mistake or an unreachable host is one line on
stderr and a documented exit status (:class:`~xpushare.model.exit_status.ExitStatus`), never a traceback.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
from collections.abc import Callable

from invoke.exceptions import Exit

from xpushare.model.errors import XpushareError
from xpushare.model.exit_status import ExitStatus
from xpushare.transport import interrupt


def guarded(body: Callable[[], ExitStatus | int | None]) -> None:
    """Run a task body and turn its outcome into the process exit status.

    Raises :class:`invoke.exceptions.Exit` with the status when it is not 0: the error's own status for an
    :class:`XpushareError` (:class:`~xpushare.model.errors.LeaseHeld`, the cluster held by another run: 2),
    2 (USAGE) for a local path that cannot be used (``OSError``) or read as text, 1 when the local file system is
    full (``ENOSPC``, ``EDQUOT``: as a run whose run directory fills up),
    128 + the signal for Ctrl-C, SIGTERM and SIGHUP (130, 143, 129: :mod:`xpushare.transport.interrupt`, handled for
    the whole body), 141 when standard output's reader went away (:func:`pipe_closed`).
    """
    try:
        with interrupt.installed():
            status = body()
    except XpushareError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise Exit(code=int(exc.exit_status)) from None
    except BrokenPipeError:
        raise Exit(code=pipe_closed()) from None
    except OSError as exc:  # a local file the task needs (run dir, inventory, output) cannot be used
        where = f": {exc.filename}" if exc.filename else ""
        print(f"error: {exc.strerror or exc}{where}", file=sys.stderr)
        # A full file system is no mistake of the user's: exit 1, as a run that fills its run directory does.
        full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
        raise Exit(code=int(ExitStatus.FAILED if full else ExitStatus.USAGE)) from None
    except UnicodeDecodeError as exc:  # a local file the task reads is binary, not text
        print(f"error: a file given is not UTF-8 text ({exc.reason} at byte {exc.start})", file=sys.stderr)
        raise Exit(code=int(ExitStatus.USAGE)) from None
    except KeyboardInterrupt:
        signum = interrupt.received()
        print("interrupted" + (f" ({signal.Signals(signum).name})" if signum else ""), file=sys.stderr)
        raise Exit(code=interrupt.exit_status()) from None
    for signum in interrupt.late():  # after the run's end was written: its exit status stands (run.json's)
        print(f"[xpushare] {signal.Signals(signum).name} after the run had ended: ignored, the exit status is the "
              "run's", file=sys.stderr)
    if status:
        raise Exit(code=int(status))


def pipe_closed() -> int:
    """Standard output's reader went away (``invoke cases | head``): point stdout at ``/dev/null`` so that
    Python's flush at exit does not fail again (the Python documentation's advice for SIGPIPE), and return
    :attr:`ExitStatus.PIPE_CLOSED` (141). No message: the reader asked for no more."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return int(ExitStatus.PIPE_CLOSED)


def remainder_argv(argv: list[str] | None = None) -> list[str]:
    """The words after ``--`` on the command line, as argv (Invoke only offers them joined by spaces)."""
    words = sys.argv if argv is None else argv
    if "--" not in words:
        return []
    return words[words.index("--") + 1 :]
