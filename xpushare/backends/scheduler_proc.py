"""One command on a node that shows its scheduler: every scheduler process's ``/proc`` figures, ``/healthz``
and (optionally) ``/metrics`` in one round trip; used by both backends' ``scheduler_facts``. Also the
``scheduler_proc.txt`` evidence both backends harvest (:func:`store_status`).

Scheduler processes are found with ``pgrep -f '^(\\S*/)?<binary>( |$)'`` (argv[0], since ``comm`` is cut to
15 characters), so neither the sampling shell nor a supervisor loop (``sh -c``) matches. Output::

    @@PROC <pid>       then /proc/<pid>/status and FD_COUNT=<n> (empty: the fd directory is unreadable)
    @@HEALTH           then curl's answer to /healthz (body, HTTP_CODE=<ddd>)
    @@METRICS          then curl's answer to /metrics
    @@END
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from xpushare.backends.base import SchedulerProcess
from xpushare.evidence.scrape_capture import CODE_TRAILER, curl_prefix, split_trailer
from xpushare.model.atomic_file import atomic_write_text
from xpushare.parsers import procstat
from xpushare.transport.base import Host

__all__ = ["ProcOutput", "argv", "parse", "pattern", "store_status"]

_SCRIPT = (
    'pat=$1; health=$2; metrics=$3; shift 3; '
    'for p in $(pgrep -f "$pat"); do echo "@@PROC $p"; cat "/proc/$p/status" 2>/dev/null; '
    'if fds=$(ls -1A "/proc/$p/fd" 2>/dev/null); then printf "FD_COUNT=%s\\n" "$(printf "%s\\n" "$fds" | grep -c .)"; '
    'else echo FD_COUNT=; fi; done; '
    'if [ -n "$health" ]; then echo "@@HEALTH"; "$@" "$health" 2>&1; fi; '
    'if [ -n "$metrics" ]; then echo "@@METRICS"; "$@" "$metrics" 2>&1; fi; echo "@@END"'
)


@dataclass(frozen=True)
class ProcOutput:
    """Parsed output: processes (oldest pid first), whether ``/healthz`` answered 200 (None: not asked), the
    ``/metrics`` answer (None: not asked), and an error when the output was cut short."""

    processes: tuple[SchedulerProcess, ...]
    healthy: bool | None
    metrics_text: str | None
    error: str | None = None


def pattern(binary: str) -> str:
    """The ``pgrep -f`` pattern of scheduler ``binary`` (its file name) as argv[0]: ``comm`` is cut to 15
    characters ("xpushare-schedu"), and neither a sampling shell nor a supervisor loop (``sh -c``) matches."""
    return f"^(\\S*/)?{re.escape(binary)}( |$)"


def argv(binary: str, health_url: str | None, metrics_url: str | None) -> list[str]:
    """argv of the node-side command for scheduler ``binary`` (its file name) and the endpoints' URLs; the curl
    words after them are the scraper's (:func:`~xpushare.evidence.scrape_capture.curl_prefix`, status trailer)."""
    return ["sh", "-c", _SCRIPT, "sh", pattern(binary), health_url or "", metrics_url or "",
            *curl_prefix(10, trailer=CODE_TRAILER)]


def store_status(case_dir: Path, host: Host, binary: str, suffix: str = "") -> str:
    """Write ``scheduler_proc<suffix>.txt`` into ``case_dir`` and return its name: ``SCHEDULER_ALIVE=0``, or
    ``SCHEDULER_ALIVE=1``, ``PID=<pid>`` and the oldest process's ``/proc`` status with ``FD_COUNT=``
    (:func:`xpushare.parsers.procstat.command`; read by :func:`xpushare.judge.checks`). Two commands on ``host``.

    Raises:
        TransportError: ``host`` could not run a command.
    """
    name = f"scheduler_proc{suffix}.txt"
    res = host.run(["pgrep", "-o", "-f", pattern(binary)], timeout=30)
    pid = res.stdout.strip()
    if not res.ok or not pid.isdigit():
        atomic_write_text(case_dir / name, "SCHEDULER_ALIVE=0\n")
        return name
    status = host.run(procstat.command(int(pid)), timeout=30)
    atomic_write_text(case_dir / name, f"SCHEDULER_ALIVE=1\nPID={pid}\n{status.stdout}")
    return name


def parse(text: str) -> ProcOutput:
    """Parse :func:`argv`'s stdout; a missing ``@@END`` is an error (nothing else is trusted then)."""
    if "@@END" not in text:
        return ProcOutput((), None, None, "scheduler sampling output cut short (no @@END)")
    body = text.rpartition("@@END")[0]
    metrics_text: str | None = None
    healthy: bool | None = None
    if "@@METRICS\n" in body:
        body, _, metrics_text = body.partition("@@METRICS\n")
    if "@@HEALTH\n" in body:
        body, _, health = body.partition("@@HEALTH\n")
        healthy = split_trailer(health)[1] == 200
    procs: list[SchedulerProcess] = []
    for block in body.split("@@PROC ")[1:]:
        head, _, rest = block.partition("\n")
        if not head.strip().isdigit():
            continue
        st = procstat.parse(rest)
        if st.found:  # else the process ended between pgrep and cat
            procs.append(SchedulerProcess(int(head.strip()), st.vm_rss_bytes, st.fd_count, st.threads))
    return ProcOutput(tuple(sorted(procs, key=lambda p: p.pid)), healthy, metrics_text)
