"""The files a host-mode workload process leaves in the host's spawn directory, and the shell that writes and
reads them (see :mod:`xpushare.backends.host`).

Each pod ``<n>`` runs under :data:`WRAPPER`: ``<n>.start`` and ``<n>.end`` (``date +%s.%N``), ``<n>.rc`` (exit
code) and ``<n>.hostpid`` (the workload process's pid, the one whose socket the scheduler sees: SO_PEERCRED,
``client_info{host_pid}``) and ``<name>.environ`` (its environment, read by :data:`POLL`).
:data:`POLL` prints one ``name|rc|start|end|pid`` row a pod
(``-`` for a missing file), read by :func:`poll_rows` and :func:`phase`.
"""

from __future__ import annotations

import re

__all__ = ["CLEANUP", "GPU_QUERY", "POLL", "STOP_LEFTOVERS", "WRAPPER", "gpu_key", "parse_gpus", "phase",
           "poll_rows", "safe", "to_float"]

# The workload runs in the foreground of the wrapper, through an inner ``sh`` that writes its own pid to
# ``<name>.hostpid`` and then execs the workload, so that pid is the workload's.
WRAPPER = (
    'n=$1; shift; date +%s.%N > "$n.start"; sh -c \'echo $$ > "$0.hostpid"; exec "$@"\' "$n" "$@"; rc=$?; '
    'date +%s.%N > "$n.end"; echo $rc > "$n.rc"'
)
# A running pod's environment is read from ``/proc/<pid>/environ`` once (``<name>.environ``, NUL-separated) at the
# first poll that finds its pid: what the workload really got, whatever the tool meant to give it.
POLL = (
    'cd "$1" || exit 97; shift; for n in "$@"; do '
    '[ -s "$n.environ" ] || { p=$(cat "$n.hostpid" 2>/dev/null) && [ -n "$p" ] && '
    'cat "/proc/$p/environ" > "$n.environ.part" 2>/dev/null && mv -f "$n.environ.part" "$n.environ"; '
    'rm -f "$n.environ.part"; }; '
    'printf "%s|%s|%s|%s|%s\\n" "$n" "$(cat "$n.rc" 2>/dev/null || echo -)" '
    '"$(cat "$n.start" 2>/dev/null || echo -)" "$(cat "$n.end" 2>/dev/null || echo -)" '
    '"$(cat "$n.hostpid" 2>/dev/null || echo -)"; done'
)
GPU_QUERY = ["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"]
# End of a case: whatever of the case still has a pid file is stopped (TERM to its process group) before the
# case's files go. The node sampler and dmon of begin_case are stopped by harvest; a caller that skips the
# harvest (metrics-check's probes) would otherwise leave them running with no pid file to find them by.
CLEANUP = (
    'cd "$1" 2>/dev/null || exit 0; for f in "$2"-*.pid; do [ -f "$f" ] || continue; p=$(cat "$f"); '
    'kill -TERM -"$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null; done; rm -rf -- "$2"-*'
)
# Start of a run: processes an interrupted earlier invocation of the run left behind are stopped and every
# entry of the run on this cluster goes (resume safety; ``$2`` is the exact prefix of the run and cluster).
STOP_LEFTOVERS = (
    'cd "$1" 2>/dev/null || exit 0; for f in "$2"*.pid; do [ -f "$f" ] || continue; p=$(cat "$f"); '
    'kill -TERM -"$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null; rm -f "$f"; done; rm -rf -- "$2"*'
)


def safe(text: str) -> str:
    """``text`` as a spawn name: anything but ``[A-Za-z0-9_.-]`` becomes ``-``."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", text)


def parse_gpus(stdout: str) -> list[tuple[int, str]]:
    """``(index, uuid)`` of each well-formed row of :data:`GPU_QUERY`'s output."""
    found: list[tuple[int, str]] = []
    for line in stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit():
            found.append((int(parts[0]), parts[1]))
    return found


def poll_rows(stdout: str) -> dict[str, list[str]]:
    """Spawn name -> ``[rc, start, end, pid]`` (strings, ``-`` when missing) of :data:`POLL`'s output."""
    rows: dict[str, list[str]] = {}
    for line in stdout.splitlines():
        fields = [f.strip() or "-" for f in line.split("|")]
        if len(fields) == 5:
            rows[fields[0]] = fields[1:]
    return rows


def phase(rc: str, start: str) -> str:
    """Pending (no start file), Running (started, no exit code), Succeeded (exit 0), Failed (other exit)."""
    if rc != "-":
        return "Succeeded" if rc == "0" else "Failed"
    return "Running" if start != "-" else "Pending"


def gpu_key(env: dict[str, str]) -> str | None:
    """The GPU key the client library reports for this environment (docs/sut/log.md §registration: the first
    comma/semicolon token of ``NVIDIA_VISIBLE_DEVICES``, else of ``CUDA_VISIBLE_DEVICES``); None when
    neither is set (the library would report ``default``, but the backend placed no GPU)."""
    for name in ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        if env.get(name):
            return re.split(r"[,;]", env[name])[0].strip()
    return None


def to_float(text: str) -> float | None:
    """``float(text)``, None when it is not a number (``-``: the file was missing)."""
    try:
        return float(text)
    except ValueError:
        return None
