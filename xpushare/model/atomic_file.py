"""The one way xpushare writes a file on this machine: beside the target, renamed into place, never through a link.

Every file the tool writes locally goes through this module: results, ``run.json``, summaries, reports
(``report.html``, ``run-report.md``, ``junit.xml``), plots, the evidence a harvest stores, the JSON records the
backends rewrite while polling (``pods.json``), the logs it appends to (``debug.log``, ``events.jsonl``,
``harvest-errors.txt``) and the files ``invoke get`` fetches. The rules (docs/reliability.md, "One write path"):

- **Whole or not at all.** A file is written to ``.<name>.<random>.tmp`` in the target's directory, flushed and
  fsynced, then renamed over the target (atomic on one file system): a crash, a kill or a full disk at any moment
  leaves the old file or the new one, never half of either, and no temporary file after an error.
- **Never through a link it did not create.** A symbolic link at the target is refused (:class:`UnsafePath`,
  ``ELOOP``), never followed and never replaced. Below a *tree the tool owns* (:func:`claim_tree`: a run
  directory, the folder ``invoke get`` fills) every directory component is opened without following links, so a
  link planted there (``<run>/<case>`` or ``<dest>/<host>`` pointing elsewhere) is refused too; the tree itself
  and the directories above it are the user's and may be links (a ``.tmplog`` on another disk). The temporary
  file is created with ``O_EXCL`` and ``O_NOFOLLOW``, so a link planted at its name is never written through.
- **Existing files.** A write replaces the file at the target (the tool's own files are rewritten: run.json,
  reports) unless the caller says ``replace=False``, which refuses an existing file (``EEXIST``) atomically. A
  directory at the target is refused (``EISDIR``).
- **Modes from the umask.** Files are created ``0o666 & ~umask`` and directories ``0o777 & ~umask`` (the kernel
  applies the umask to the mode given at creation), as ``cp`` and the shell's ``>`` do: ``0644`` and ``0755``
  under umask 022, ``0600`` and ``0700`` under 077. (``tempfile.mkstemp`` would make every file ``0600``.)

Errors are ``OSError`` (guarded tasks print one line, exit 2; a full file system ``ENOSPC`` exit 1). Lives at the
bottom layer so every layer that writes may use it; Linux and macOS (``dir_fd``, ``O_NOFOLLOW``).
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import secrets
import shutil
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO, TextIO

__all__ = [
    "UnsafePath",
    "Writing",
    "atomic_write",
    "atomic_write_bytes",
    "atomic_write_text",
    "claim_tree",
    "copy_file",
    "make_dirs",
    "open_append",
    "writing",
]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_TREES: set[str] = set()
_TREES_LOCK = threading.Lock()


class UnsafePath(OSError):
    """A write refused by this module's rules: a symbolic link at the target or in a directory component of a
    tree the tool owns (``errno`` ``ELOOP``), a directory at the target (``EISDIR``), an existing file where the
    caller asked for no replacement (``EEXIST``), a component that is not a directory (``ENOTDIR``).
    ``filename`` is the refused path; ``strerror`` says why in a sentence."""

    def __init__(self, code: int, why: str, path: str | os.PathLike[str]) -> None:
        super().__init__(code, why, os.fspath(path))

    def describe(self, shown: str | os.PathLike[str]) -> str:
        """Why, for a message that already names ``shown``: the refused path added only when it is another one
        (a linked folder above the file)."""
        same = os.path.abspath(self.filename) == os.path.abspath(shown)
        return str(self.strerror) if same else f"{self.strerror}: {self.filename}"


def claim_tree(path: str | os.PathLike[str]) -> Path:
    """Declare ``path`` (a directory, created if missing) a tree the tool owns for the rest of the process: every
    later write below it refuses a symbolic link in any directory component under ``path``. ``path`` itself is
    the user's and may be a link. Returns ``path``. Thread-safe; claiming again is harmless."""
    target = Path(path)
    make_dirs(target)
    with _TREES_LOCK:
        _TREES.add(os.path.abspath(target))
    return target


def _tree_of(abs_dir: str) -> str:
    """The longest claimed tree holding ``abs_dir`` (lexically: no link resolved), else ``abs_dir`` itself."""
    with _TREES_LOCK:
        trees = [t for t in _TREES if abs_dir == t or abs_dir.startswith(t.rstrip(os.sep) + os.sep)]
    return max(trees, key=len, default=abs_dir)


@contextlib.contextmanager
def _open_dir(directory: str | os.PathLike[str]) -> Iterator[int]:
    """A descriptor of ``directory``, created (``0o777 & ~umask``) where missing; below its claimed tree each
    component is opened with ``O_NOFOLLOW`` (a link: :class:`UnsafePath`). Closed when the block ends."""
    abs_dir = os.path.abspath(directory)
    root = _tree_of(abs_dir)
    os.makedirs(root, exist_ok=True)  # the user's part: links followed, as any program does
    fd = os.open(root, _DIR_FLAGS)
    try:
        walked = root
        for part in Path(os.path.relpath(abs_dir, root)).parts if abs_dir != root else ():
            walked = os.path.join(walked, part)
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o777, dir_fd=fd)
            try:
                child = os.open(part, _DIR_FLAGS | _NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                    _refuse_existing(fd, part, walked)
                raise
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def _refuse_existing(dir_fd: int, name: str, shown: str | os.PathLike[str]) -> None:
    """Raise :class:`UnsafePath` when ``name`` in ``dir_fd`` is a link or a directory; nothing otherwise."""
    try:
        st = os.lstat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePath(errno.ELOOP, "refusing to write through a symbolic link the tool did not create "
                                      "(remove it, or give another path)", shown)
    if stat.S_ISDIR(st.st_mode):
        raise UnsafePath(errno.EISDIR, "refusing to replace a directory with a file", shown)
    if not stat.S_ISREG(st.st_mode):
        raise UnsafePath(errno.ENOTDIR, "refusing to write over something that is not a regular file", shown)


class Writing:
    """A file being written by :func:`writing`: ``fh`` the handle of its temporary file (text or binary);
    ``replaced`` is True, once the block ended, when the rename replaced a file that was at the target."""

    def __init__(self, fh: TextIO | BinaryIO, path: Path) -> None:
        self.fh = fh
        self.path = path
        self.replaced = False


@contextlib.contextmanager
def writing(path: str | os.PathLike[str], *, binary: bool = False, replace: bool = True) -> Iterator[Writing]:
    """Write ``path`` through a temporary file beside it, renamed into place when the block ends without error.

    Text handles are UTF-8 with ``\\n`` line ends; characters UTF-8 cannot hold (lone surrogates) are written as
    ``\\udcXX``. Creates the missing directories. On any error, also a ``KeyboardInterrupt`` raised in the block,
    the temporary file is removed, ``path`` is left as it was and the error propagates.

    Raises:
        UnsafePath: a link at ``path`` or in a directory component below a claimed tree; a directory at ``path``;
            ``replace=False`` and a file at ``path``.
        OSError: the file system's own errors (``ENOSPC``, ``EACCES``, ``EROFS``...).
    """
    target = Path(path)
    name = target.name
    if name in ("", ".", ".."):
        raise UnsafePath(errno.EISDIR, "a file name is needed, not a directory", target)
    with _open_dir(target.parent) as dfd:
        _refuse_existing(dfd, name, target)
        tmp, fd = _create_temp(dfd, name)
        try:
            raw = os.fdopen(fd, "wb")
            fh: TextIO | BinaryIO = raw if binary else io.TextIOWrapper(
                raw, encoding="utf-8", errors="backslashreplace", newline="\n")
            with fh:
                pending = Writing(fh, target)
                yield pending
                fh.flush()
                os.fsync(raw.fileno())
            pending.replaced = _commit(dfd, tmp, name, target, replace)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            raise


def _create_temp(dfd: int, name: str) -> tuple[str, int]:
    """A new ``.<name>.<random>.tmp`` in ``dfd``, mode ``0o666 & ~umask``; never a link planted at that name."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | _NOFOLLOW
    for _ in range(100):
        tmp = f".{name[:200]}.{secrets.token_hex(4)}.tmp"
        try:
            return tmp, os.open(tmp, flags, 0o666, dir_fd=dfd)
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", name)


def _commit(dfd: int, tmp: str, name: str, target: Path, replace: bool) -> bool:
    """Rename ``tmp`` to ``name`` (both in ``dfd``); True when a file was replaced. ``replace=False``: a hard
    link, which fails on an existing name atomically (a file system without hard links: checked, then renamed)."""
    if not replace:
        try:
            os.link(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
        except FileExistsError:
            raise UnsafePath(errno.EEXIST, "refusing to replace an existing file", target) from None
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
                raise
            if _exists(dfd, name):
                raise UnsafePath(errno.EEXIST, "refusing to replace an existing file", target) from None
            os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            return False
        os.unlink(tmp, dir_fd=dfd)
        return False
    _refuse_existing(dfd, name, target)  # again: one may have appeared while the data was written
    existed = _exists(dfd, name)
    os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)  # a link that slipped in is replaced, not followed
    return existed


def _exists(dfd: int, name: str) -> bool:
    try:
        os.lstat(name, dir_fd=dfd)
    except FileNotFoundError:
        return False
    return True


def atomic_write(path: str | os.PathLike[str], write: Callable[[TextIO], object], *,
                 replace: bool = True) -> Path:
    """Replace ``path`` with what ``write(fh)`` writes to a text handle (see :func:`writing`); return the path."""
    with writing(path, replace=replace) as w:
        write(w.fh)  # type: ignore[arg-type]
    return Path(path)


def atomic_write_text(path: str | os.PathLike[str], text: str, *, replace: bool = True) -> Path:
    """Replace ``path`` with ``text`` (see :func:`writing`); return the path."""
    return atomic_write(path, lambda fh: fh.write(text), replace=replace)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes | Callable[[BinaryIO], object], *,
                       replace: bool = True) -> Path:
    """Replace ``path`` with ``data``, or with what ``data(fh)`` writes to a binary handle (a plot's
    ``savefig``); see :func:`writing`. Returns the path."""
    with writing(path, binary=True, replace=replace) as w:
        if callable(data):
            data(w.fh)  # type: ignore[arg-type]
        else:
            w.fh.write(data)  # type: ignore[arg-type]
    return Path(path)


def copy_file(source: str | os.PathLike[str], path: str | os.PathLike[str], *, replace: bool = True) -> bool:
    """Copy the bytes of ``source`` (links in it followed: it is read, not written) to ``path`` (see
    :func:`writing`); True when a file at ``path`` was replaced. ``FileNotFoundError`` when ``source`` is
    missing, before anything is written."""
    with open(source, "rb") as src, writing(path, binary=True, replace=replace) as w:
        shutil.copyfileobj(src, w.fh)  # type: ignore[misc]
    return w.replaced


def open_append(path: str | os.PathLike[str]) -> io.TextIOWrapper:
    """``path`` opened to append text (UTF-8; created ``0o666 & ~umask``), for the logs a run grows line by line
    (``debug.log``, ``events.jsonl``, ``harvest-errors.txt``). Not atomic (each line is one ``write``), but never
    through a link: a link at ``path`` or below a claimed tree is :class:`UnsafePath`, as for :func:`writing`."""
    target = Path(path)
    with _open_dir(target.parent) as dfd:
        _refuse_existing(dfd, target.name, target)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | _NOFOLLOW
        try:
            fd = os.open(target.name, flags, 0o666, dir_fd=dfd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                _refuse_existing(dfd, target.name, target)
            raise
    return open(fd, "a", encoding="utf-8", newline="")


def make_dirs(path: str | os.PathLike[str]) -> Path:
    """Create ``path`` and its missing parents (``0o777 & ~umask``); a link below a claimed tree is
    :class:`UnsafePath`. Returns ``path``."""
    with _open_dir(path):
        pass
    return Path(path)
