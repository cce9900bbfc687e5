"""``/proc/<pid>/status`` of a process (the scheduler) plus its open file-descriptor count.

Evidence for the leak cases (seed 000 §10.2: LEAK-001 scheduler RSS slope, LEAK-002 FD count must not
grow monotonically). :func:`command` prints the status file followed by one ``FD_COUNT=<n>`` line
(empty value when the fd directory cannot be listed, e.g. without root); :func:`parse` reads both.
Memory values are returned in **bytes** (the kernel prints ``kB`` = KiB).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

__all__ = ["ProcStatus", "command", "parse"]

_FD_RE = re.compile(r"^FD_COUNT=(?P<n>\d*)\s*$")
_DIGITS_RE = re.compile(r"[0-9]+")
_PID_RE = re.compile(r"[1-9][0-9]*")
_KB_RE = re.compile(r"^(?P<n>\d+)\s*kB$")


@dataclass(frozen=True)
class ProcStatus:
    """Parsed ``/proc/<pid>/status`` (+ ``FD_COUNT``). Any field is ``None`` if absent or malformed.

    ``pid``/``ppid``: process ids; ``name``: ``Name:`` (the kernel truncates it to 15 characters,
    e.g. ``xpushare-schedu``); ``state``: the ``State:`` letter (``S``, ``R``, ``Z`` ...);
    ``vm_rss_bytes``: resident set size; ``vm_hwm_bytes``: peak RSS; ``vm_size_bytes``: virtual
    size; ``threads``: thread count; ``fd_count``: open file descriptors (from ``FD_COUNT=``);
    ``fields``: every ``Key: value`` pair as printed.
    """

    pid: int | None
    ppid: int | None
    name: str | None
    state: str | None
    vm_rss_bytes: int | None
    vm_hwm_bytes: int | None
    vm_size_bytes: int | None
    threads: int | None
    fd_count: int | None
    fields: tuple[tuple[str, str], ...]

    @property
    def found(self) -> bool:
        """True if the text looked like a status file (it had a ``Pid:`` or ``Name:`` line)."""
        return self.pid is not None or self.name is not None


def _int(v: str | None) -> int | None:
    if v is None:
        return None
    v = v.strip()
    return int(v) if _DIGITS_RE.fullmatch(v) else None


def _kb(v: str | None) -> int | None:
    if v is None:
        return None
    m = _KB_RE.match(v.strip())
    return int(m.group("n")) * 1024 if m else None


def parse(text: str) -> ProcStatus:
    """Parse the output of :func:`command` (or a bare ``/proc/<pid>/status``). Never raises.

    Lines are ``Key:<TAB>value``; ``VmRSS``/``VmHWM``/``VmSize`` are ``<n> kB`` and become bytes
    (n x 1024). The last ``FD_COUNT=<n>`` line gives ``fd_count`` (``None`` if missing or empty).
    """
    fields: list[tuple[str, str]] = []
    d: dict[str, str] = {}
    fd_count: int | None = None
    for raw in text.splitlines():
        line = raw.rstrip("\r")
        m = _FD_RE.match(line)
        if m:
            fd_count = int(m.group("n")) if m.group("n") else None
            continue
        key, sep, value = line.partition(":")
        if not sep or not key or key != key.strip() or " " in key:
            continue
        value = value.strip()
        fields.append((key, value))
        d.setdefault(key, value)
    state = d.get("State")
    return ProcStatus(
        pid=_int(d.get("Pid")),
        ppid=_int(d.get("PPid")),
        name=d.get("Name"),
        state=state.split()[0] if state and state.split() else None,
        vm_rss_bytes=_kb(d.get("VmRSS")),
        vm_hwm_bytes=_kb(d.get("VmHWM")),
        vm_size_bytes=_kb(d.get("VmSize")),
        threads=_int(d.get("Threads")),
        fd_count=fd_count,
        fields=tuple(fields),
    )


def command(pid: int | str) -> list[str]:
    """argv that prints ``/proc/<pid>/status`` and then ``FD_COUNT=<n>`` (``FD_COUNT=`` if the fd
    directory cannot be listed, so "unknown" is not mistaken for 0).

    ``["sh", "-c", "cat /proc/<pid>/status && ..."]`` with ``pid`` quoted by ``shlex.quote``. The
    command fails (non-zero exit) if the process does not exist. Raises ``ValueError`` unless
    ``pid`` is a positive integer (or a string of ASCII digits).
    """
    p = str(pid).strip()
    if not _PID_RE.fullmatch(p):
        raise ValueError(f"invalid pid: {pid!r}")
    d = "/proc/" + shlex.quote(p)
    script = (
        f"cat {d}/status && "
        f"if fds=$(ls -1A {d}/fd 2>/dev/null); then "
        f"printf 'FD_COUNT=%s\\n' \"$(printf '%s\\n' \"$fds\" | grep -c .)\"; "
        f"else echo FD_COUNT=; fi"
    )
    return ["sh", "-c", script]
