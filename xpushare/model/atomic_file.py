"""The one way xpushare replaces a file it keeps: a temp file in the same directory, fsync, ``os.replace``.

Results, ``run.json``, summaries, reports and the JSON records the backends rewrite while polling
(``pods.json``) all go through :func:`atomic_write`, so a crash or a kill at any moment leaves either the old
file or the new one, never half of either. Lives at the bottom layer so every layer that writes may use it.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

__all__ = ["atomic_write", "atomic_write_text"]


def atomic_write(path: str | os.PathLike[str], write: Callable[[TextIO], object]) -> Path:
    """Replace ``path`` with what ``write(fh)`` writes to a text handle (UTF-8, ``\\n`` line ends); return it.

    Creates the parent directory. The data is written to ``.<name>.<random>.tmp`` next to ``path``, flushed
    and fsynced, then renamed over ``path`` (atomic on one file system). On any error, also a
    ``KeyboardInterrupt`` raised inside ``write``, the temp file is removed, ``path`` is left as it was and
    the error propagates. Characters UTF-8 cannot hold (lone surrogates) are written as ``\\udcXX``.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace", newline="\n") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return target


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Replace ``path`` with ``text`` atomically (see :func:`atomic_write`); return the path."""
    return atomic_write(path, lambda fh: fh.write(text))
