"""The lines other GPU-sharing systems print that prove they were in a workload's path (cross-SUT comparison).

Pure; never raises: a line that does not parse is skipped. Two formats:

* **HAMi-core** (its ``src/include/log_utils.h``, written to the workload's stderr)::

      [HAMI-core Msg(<pid>:<thread>:<file>:<line>)]: <message>       # also Info, Warn, Debug
      [HAMI-core ERROR (pid:<pid> thread=<thread> <file>:<line>)]: <message>

  ``Initializing.....`` and ``Initialized`` are printed by ``src/libvgpu.c`` (``preInit``/``postInit``) at level
  ``Msg``, i.e. at the default ``LIBCUDA_LOG_LEVEL`` 2.
* **NVIDIA MPS** server log (``$CUDA_MPS_LOG_DIRECTORY/server.log``, NVIDIA's MPS documentation, "Server Log")::

      [2013-08-05 13:00:09.269 Server 13929] New client 14781 connected
      [2013-08-05 13:00:09.270 Server 13929] Client 14777 disconnected

  and as the R580 driver's server writes it (seen on an H200, docs/runs/2026-11-28-cross-sut), one line per
  client context::

      [2026-11-28 16:44:55.471 Server 17991] Client {PID: 17960, Context ID: 1} connected
      [2026-11-28 16:44:56.116 Server 17991] Client process 17960 disconnected

Source: docs/isolation.md §cross-SUT comparison.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["HamiLine", "MpsClientEvent", "hami_lines", "mps_client_events"]

_HAMI_RE = re.compile(r"\[HAMI-core (?P<level>Msg|Info|Warn|Debug)\((?P<pid>\d+):(?P<thread>\d+):(?P<file>[^:()]+):"
                      r"(?P<line>\d+)\)\]: (?P<message>.*)$")
_HAMI_ERROR_RE = re.compile(r"\[HAMI-core ERROR \(pid:(?P<pid>\d+) thread=(?P<thread>\d+) (?P<file>[^:()]+):"
                            r"(?P<line>\d+)\)\]: (?P<message>.*)$")
_MPS_RE = re.compile(r"^\[(?P<when>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+) Server\s+(?P<server>\d+)\] "
                     r"(?:New client (?P<new>\d+) connected"
                     r"|Client \{PID: (?P<new580>\d+), Context ID: \d+\} connected"
                     r"|Client (?:process )?(?P<gone>\d+) disconnected)\s*$")


@dataclass(frozen=True)
class HamiLine:
    """One HAMi-core log line: ``level`` (``Msg``, ``Info``, ``Warn``, ``Debug``, ``ERROR``), the ``pid`` that
    printed it, the source ``file`` and the ``message``."""

    level: str
    pid: int
    file: str
    message: str


@dataclass(frozen=True)
class MpsClientEvent:
    """A client of an MPS server connecting (``connected`` True) or leaving; ``when`` as the log wrote it."""

    when: str
    server_pid: int
    client_pid: int
    connected: bool


def hami_lines(text: str) -> list[HamiLine]:
    """Every HAMi-core line of ``text`` (a workload's log), in order."""
    out: list[HamiLine] = []
    for raw in text.splitlines():
        m = _HAMI_RE.search(raw)
        if m is not None:
            out.append(HamiLine(m["level"], int(m["pid"]), m["file"], m["message"].rstrip()))
            continue
        m = _HAMI_ERROR_RE.search(raw)
        if m is not None:
            out.append(HamiLine("ERROR", int(m["pid"]), m["file"], m["message"].rstrip()))
    return out


def mps_client_events(text: str) -> list[MpsClientEvent]:
    """Every client connect/disconnect of an MPS ``server.log`` excerpt, in order."""
    out: list[MpsClientEvent] = []
    for raw in text.splitlines():
        m = _MPS_RE.match(raw.strip())
        if m is None:
            continue
        joined = m["new"] or m["new580"]
        pid = joined or m["gone"]
        out.append(MpsClientEvent(m["when"], int(m["server"]), int(pid), joined is not None))
    return out
