"""A stored scheduler log read back from disk, streamed: the file side of :mod:`xpushare.parsers.scheduler_log`,
whose parsers do no I/O (docs/architecture.md "Parsers are pure and fixture-tested"). Source: docs/sut/log.md.
"""

from __future__ import annotations

from os import PathLike

from xpushare.parsers.scheduler_log import parse_lines
from xpushare.parsers.scheduler_log_records import SchedulerLogSummary

__all__ = ["parse_file"]


def parse_file(path: str | PathLike[str]) -> SchedulerLogSummary:
    """Stream a log file from disk line by line (UTF-8, undecodable bytes replaced; lines split on ``\\n`` only)
    through :func:`~xpushare.parsers.scheduler_log.parse_lines`, in constant memory.

    Raises ``OSError`` if the file cannot be read.
    """
    with open(path, encoding="utf-8", errors="replace", newline="\n") as f:
        return parse_lines(f)
