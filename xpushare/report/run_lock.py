"""Whether a stored run is live: the run directory's lock, held by the run's process while it runs.

A run (:class:`xpushare.engine.run.Run`) holds ``<run dir>/run.lock`` with ``flock`` from when its directory
exists until its reports are written, the lease holder it took (:class:`~xpushare.model.lease.Holder`) as one
JSON line inside, and removes the file at its end. The kernel drops the lock when the process dies however it
dies (SIGKILL, a crash), so a lock that can be taken is a dead run's, whatever the file says: no pid to check,
no pid reuse to fear. ``invoke judge``, ``report`` and ``diff`` refuse a live run (:func:`refuse_live`;
docs/leases.md).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from xpushare.model.errors import LeaseHeld, XpushareError
from xpushare.model.lease import Holder

__all__ = ["LOCK_FILE", "holding", "live_holder", "refuse_live"]

LOCK_FILE = "run.lock"
_TRIES = 40  # x 50 ms: how long a starting run waits out readers' shared locks


def _open(path: Path, flags: int) -> int:
    # never through a link someone put in the run directory
    return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)


@contextlib.contextmanager
def holding(run_dir: Path, holder: Holder) -> Iterator[None]:
    """Hold ``run_dir``'s lock for the block, ``holder`` written in it; the file is removed at the end.

    Raises:
        LeaseHeld: another live process holds it (the same run id run twice at once), naming its holder.
        OSError: the file cannot be created (a link in its place: ``ELOOP``).
    """
    path = run_dir / LOCK_FILE
    fd = _open(path, os.O_RDWR | os.O_CREAT)
    try:
        for _ in range(_TRIES):  # a reader's shared lock lasts microseconds; a live run's, its whole life
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                time.sleep(0.05)
            except OSError:  # no flock on this file system: the run goes on, never counted as live
                break
        else:
            raise LeaseHeld(f"{_who(_holder_in(fd), run_dir)} is live: the same run cannot run twice at once "
                            f"({path})")
        os.ftruncate(fd, 0)
        os.pwrite(fd, (holder.to_json() + "\n").encode("utf-8"), 0)
        try:
            yield
        finally:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()  # before the lock goes: a reader that opened it before finds it free, as it is
    finally:
        os.close(fd)


def _holder_in(fd: int) -> Holder | None:
    try:
        text = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
        return Holder.from_json(text) if text else None
    except (OSError, XpushareError, ValueError):
        return None


def _who(holder: Holder | None, run_dir: Path) -> str:
    return holder.describe() if holder is not None else f"run {run_dir.parent.name} (another process)"


def live_holder(run_dir: Path) -> Holder | bool | None:
    """The holder of ``run_dir``'s lock when a live process holds it (``True`` when its content cannot be read),
    else None (no lock file, or a lock nobody holds: the run ended or died)."""
    try:
        fd = _open(run_dir / LOCK_FILE, os.O_RDONLY)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError:  # a link or something unreadable in its place: not a lock of ours
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _holder_in(fd) or True
        except OSError:  # no flock on this file system: not known to be live
            return None
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def refuse_live(run_dir: Path, *, what: str, force_hint: bool) -> None:
    """Raise :class:`LeaseHeld` (exit 2, one line naming the holder) when the run of ``run_dir`` is live;
    ``what`` names what was refused; ``force_hint``: the task has ``--force`` (say so)."""
    found = live_holder(run_dir)
    if found is None:
        return
    who = _who(found if isinstance(found, Holder) else None, run_dir)
    hint = "; --force to do it anyway" if force_hint else "; try again once it has ended"
    raise LeaseHeld(f"{who} is live: {what}{hint}")
