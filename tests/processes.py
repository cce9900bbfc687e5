"""Processes of this machine as the tests see them (Linux ``/proc``)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["alive"]


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie or dead (``/proc/<pid>/stat`` state ``Z``/``X``)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")
