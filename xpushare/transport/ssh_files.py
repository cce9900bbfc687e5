"""The local files an SSH connection reads, checked the way OpenSSH checks them.

- :func:`usable_identity`: the private key named by the inventory's ``identity`` must be a regular file that only
  its owner can read (OpenSSH refuses a key readable by others: "UNPROTECTED PRIVATE KEY FILE").
- :func:`load_known_hosts`: known_hosts is read line by line; a line OpenSSH would skip (malformed, an unknown
  key type, bad base64) is skipped here too instead of failing the whole file.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import paramiko
from paramiko.hostkeys import HostKeyEntry, HostKeys, InvalidHostKey

from xpushare.model.errors import UsageError

#: The biggest known_hosts file read (bytes): far beyond any real one, small enough never to exhaust memory.
MAX_KNOWN_HOSTS_BYTES = 64 * 1024 * 1024


def usable_identity(host: str, identity: str) -> str:
    """The expanded path of ``identity`` (a private key path of the inventory) when it can be used.

    Raises:
        UsageError: the file is missing, is not a regular file (a directory), cannot be read, or can be read or
        written by its group or others (mode 0644: OpenSSH refuses such a key; ``chmod 600`` it).
    """
    path = os.path.expanduser(identity)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise UsageError(f"{host}: identity file {identity} not found") from None
    except OSError as exc:
        raise UsageError(f"{host}: identity file {identity}: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"{host}: identity {identity} is not a file (a private key's path)")
    if st.st_mode & 0o077:
        raise UsageError(f"{host}: identity file {identity} is accessible by others (mode "
                         f"{stat.S_IMODE(st.st_mode):04o}); like OpenSSH, refusing it: chmod 600 {identity}")
    if not os.access(path, os.R_OK):
        raise UsageError(f"{host}: identity file {identity} is not readable")
    return path


def load_known_hosts(keys: HostKeys, path: Path) -> int:
    """Add every usable entry of the known_hosts file ``path`` to ``keys``; return how many lines were skipped
    (malformed, or of a key type paramiko does not know), as OpenSSH skips them.

    Raises:
        OSError: the file cannot be read. UsageError: it is larger than :data:`MAX_KNOWN_HOSTS_BYTES`.
    """
    if path.stat().st_size > MAX_KNOWN_HOSTS_BYTES:
        raise UsageError(f"known_hosts {path} is larger than {MAX_KNOWN_HOSTS_BYTES // 2**20} MiB")
    skipped = 0
    with path.open("r", encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            try:
                entry = HostKeyEntry.from_line(line, lineno)
            except (InvalidHostKey, paramiko.SSHException, ValueError, TypeError, IndexError):
                entry = None
            if entry is None or entry.key is None:
                skipped += 1
                continue
            for name in entry.hostnames:
                keys.add(name, entry.key.get_name(), entry.key)
    return skipped
