"""The installed ``xpushare`` command: Invoke's :class:`~invoke.program.Program` over the task collection.

``xpushare func --cluster local`` is ``invoke func --cluster local`` without a ``tasks.py``: it works from any
directory, with the tasks, flags, help and exit statuses of :mod:`xpushare.cli.collection`.
"""

from __future__ import annotations

from collections.abc import Sequence

from invoke import Program

from xpushare import __version__
from xpushare.cli.collection import namespace

__all__ = ["main", "program"]

program = Program(namespace=namespace, version=__version__, name="xpushare", binary="xpushare")


def main(argv: Sequence[str] | None = None) -> None:
    """Run the command line ``argv`` (default ``sys.argv``); exits the process with the task's status."""
    program.run(list(argv) if argv is not None else None)
