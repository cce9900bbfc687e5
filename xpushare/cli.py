"""Glue between Invoke tasks and the library: error mapping, remainder argv, exit statuses.

Every task body runs inside :func:`guarded`, so a user mistake or an unreachable host is one line on
stderr and a documented exit status (:class:`~xpushare.status.ExitStatus`), never a traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from invoke.exceptions import Exit

from xpushare.errors import XpushareError
from xpushare.status import ExitStatus

T = TypeVar("T")


def guarded(body: Callable[[], ExitStatus | int | None]) -> None:
    """Run a task body and turn its outcome into the process exit status.

    Raises :class:`invoke.exceptions.Exit` with the status when it is not 0: the error's own status for an
    :class:`XpushareError`, 2 (USAGE) for a local path that cannot be used (``OSError``), 130 for Ctrl-C.
    """
    try:
        status = body()
    except XpushareError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise Exit(code=int(exc.exit_status)) from None
    except OSError as exc:  # a local file the task needs (run dir, inventory, output) cannot be used
        where = f": {exc.filename}" if exc.filename else ""
        print(f"error: {exc.strerror or exc}{where}", file=sys.stderr)
        raise Exit(code=int(ExitStatus.USAGE)) from None
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        raise Exit(code=int(ExitStatus.INTERRUPTED)) from None
    if status:
        raise Exit(code=int(status))


def remainder_argv(argv: list[str] | None = None) -> list[str]:
    """The words after ``--`` on the command line, as argv (Invoke only offers them joined by spaces)."""
    words = sys.argv if argv is None else argv
    if "--" not in words:
        return []
    return words[words.index("--") + 1 :]


def run_suite(
    suite: str,
    cluster: str,
    case: Sequence[str] | None,
    playbook: str | None,
    run_id: str | None,
    resume: bool,
    set_: Sequence[str] | None,
    root: str,
    inventory_: str | None,
) -> None:
    """Body of a suite task (``invoke func``, ``combo``, ``perf``, ``metrics``): run ``suite`` on ``cluster``,
    or only the ``--case``/``--playbook`` selection when one is given, and exit with the run's status."""
    from xpushare import engine  # the engine pulls in every case module: only when a suite runs

    def body() -> ExitStatus | int | None:
        request = engine.RunRequest(
            cluster=cluster,
            suites=() if (case or playbook) else (suite,),
            case_ids=tuple(case or ()),
            playbook=playbook,
            run_id=run_id,
            resume=resume,
            overrides=tuple(set_ or ()),
            inventory_path=inventory_,
            root=Path(root),
        )
        return engine.run(request)

    guarded(body)
