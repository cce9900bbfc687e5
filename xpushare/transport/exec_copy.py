"""A file copied over an SSH exec channel (``cat``), for hosts whose sshd offers no SFTP subsystem.

:class:`~xpushare.transport.ssh.SshHost` copies with SFTP; where the server closes the SFTP channel at once (no
``Subsystem sftp`` in ``sshd_config``, as on some appliances and minimal images) while the connection stays up,
it copies the bytes through ``cat`` instead, as ``scp``'s fallbacks do. Bytes travel unchanged (no text decoding).
"""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path
from typing import BinaryIO

import paramiko

from xpushare.model import atomic_file

__all__ = ["CHUNK", "ExecCopyError", "exec_get", "exec_get_into", "exec_put"]

CHUNK = 65536
"""Bytes read or written at a time."""


class ExecCopyError(OSError):
    """``cat`` on the host failed: ``status`` its exit status (-1: no exit status before ``timeout``), ``stderr``
    its error output (``No such file or directory`` for a missing file)."""

    def __init__(self, status: int, stderr: str) -> None:
        super().__init__(f"exit {status}: {stderr.strip() or 'no error output'}")
        self.status = status
        self.stderr = stderr


def _session(transport: paramiko.Transport, argv: list[str], timeout: float) -> paramiko.Channel:
    channel = transport.open_session(timeout=timeout)
    channel.settimeout(timeout)
    channel.exec_command(shlex.join(argv))
    return channel


def _finish(channel: paramiko.Channel, deadline: float) -> None:
    while not channel.exit_status_ready():
        if time.monotonic() > deadline:
            channel.close()
            raise ExecCopyError(-1, "no exit status in time")
        time.sleep(0.01)
    status = channel.recv_exit_status()
    err = b""
    while channel.recv_stderr_ready():
        err += channel.recv_stderr(CHUNK)
    channel.close()
    if status != 0:
        raise ExecCopyError(status, err.decode("utf-8", "replace"))


def exec_get(transport: paramiko.Transport, remote: str, local: str | os.PathLike[str], *,
             timeout: float = 600.0) -> int:
    """Copy the host's file ``remote`` to ``local`` with ``cat``; returns the bytes written. ``local`` is written
    through the one local write path (:func:`xpushare.model.atomic_file.writing`: a temporary name beside it,
    renamed once whole; never through a link), so a failed copy leaves no partial file.

    Raises:
        ExecCopyError: ``cat`` failed (a missing file: ``stderr`` says ``No such file or directory``).
        paramiko.SSHException, OSError: the channel or the local file failed (``UnsafePath``: a link at ``local``).
    """
    with atomic_file.writing(local, binary=True) as w:
        return exec_get_into(transport, remote, w.fh, timeout=timeout)  # type: ignore[arg-type]


def exec_get_into(transport: paramiko.Transport, remote: str, fh: BinaryIO, *, timeout: float = 600.0) -> int:
    """Stream the host's file ``remote`` into the binary handle ``fh`` with ``cat``; returns the bytes written.
    Raises as :func:`exec_get`; the caller discards what ``fh`` holds after an error."""
    deadline = time.monotonic() + timeout
    channel = _session(transport, ["cat", "--", remote], timeout)
    written = 0
    while True:
        data = channel.recv(CHUNK)
        if not data:
            break
        fh.write(data)
        written += len(data)
    _finish(channel, deadline)
    return written


def exec_put(transport: paramiko.Transport, local: str | os.PathLike[str], remote: str, *,
             timeout: float = 600.0) -> int:
    """Copy ``local`` to the host's ``remote`` with ``cat > remote``; returns the bytes sent.

    Raises:
        ExecCopyError: the host could not write ``remote``.
        paramiko.SSHException, OSError: the channel or the local file failed.
    """
    deadline = time.monotonic() + timeout
    channel = _session(transport, ["sh", "-c", 'cat > "$1"', "sh", remote], timeout)
    sent = 0
    with Path(local).open("rb") as fh:
        while data := fh.read(CHUNK):
            channel.sendall(data)
            sent += len(data)
    channel.shutdown_write()
    _finish(channel, deadline)
    return sent
