"""CPU seconds of every process a command's run ended, by kind, from the kernel's process accounting.

Usage (root): ``python -m tests.bench.acct_tree [--top N] [--by-parent] -- COMMAND ...``

``tests/bench/cpu_tree.py`` samples ``/proc`` and so misses processes shorter than its interval (SSH sessions,
shells, most kubectl calls: a third of a lab module's CPU). This one turns on BSD process accounting (``acct(2)``,
records of ``struct acct_v3`` from ``linux/acct.h``), which writes one record per process at its exit with its
command name, pid, parent pid and user/system CPU time, however short it lived. It samples ``/proc`` once a second
only to name the longer Python processes (their command name is ``python``; the kind is the module or script
they run, as in ``cpu_tree``). Prints the command's exact CPU (``getrusage``) and the accounted CPU by kind, with
``--by-parent`` also by the kind of the parent (``kubectl <- python -m invoke``).

Limits: the kernel records CPU in 1/100 s ticks and truncates per process, so a process of under 10 ms counts 0
(the difference to the exact total is printed); every process on the machine is recorded, so nothing else should
run beside the measurement.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import resource
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from tests.bench.cpu_tree import process_kind

_RECORD = struct.Struct("<BBHIIIIIIfHHHHHHHH16s")  # struct acct_v3: 64 bytes
_AHZ = 100  # accounting ticks per second on Linux


def _comp_t(value: int) -> int:
    """``comp_t``: 13-bit mantissa, 3-bit base-8 exponent."""
    return (value & 0x1FFF) << (3 * ((value >> 13) & 0x7))


@dataclass(frozen=True)
class Exit:
    """One process's accounting record: pid, parent, command name, start (epoch s), CPU s."""

    pid: int
    ppid: int
    comm: str
    start: int
    cpu_s: float


def read_records(path: Path) -> list[Exit]:
    """The records of an accounting file (version 3 only; others are skipped)."""
    data = path.read_bytes()
    out = []
    for offset in range(0, len(data) - _RECORD.size + 1, _RECORD.size):
        (_flag, version, _tty, _exit, _uid, _gid, pid, ppid, btime, _etime, utime, stime,
         *_rest, comm) = _RECORD.unpack_from(data, offset)
        if version & 0x7F != 3:
            continue
        cpu = (_comp_t(utime) + _comp_t(stime)) / _AHZ
        out.append(Exit(pid, ppid, comm.split(b"\0", 1)[0].decode(errors="replace"), btime, cpu))
    return out


class _Namer(threading.Thread):
    """Samples ``/proc`` once a second: pid -> kind for the processes alive at a sample."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.kinds: dict[int, str] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(1.0):
            for name in os.listdir("/proc"):
                if name.isdigit():
                    pid = int(name)
                    kind = process_kind(pid)
                    if kind is not None:
                        self.kinds[pid] = kind


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--by-parent", action="store_true")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("a command is needed after --")
    libc = ctypes.CDLL(None, use_errno=True)
    with tempfile.TemporaryDirectory() as tmp:
        acct_file = Path(tmp) / "acct"
        acct_file.touch()
        if libc.acct(str(acct_file).encode()) != 0:
            print(f"error: acct(2): {os.strerror(ctypes.get_errno())} (root needed)", file=sys.stderr)
            return 2
        namer = _Namer()
        namer.start()
        start = time.monotonic()
        try:
            returncode = subprocess.run(command, check=False).returncode
        finally:
            libc.acct(None)
            namer.stop.set()
        wall = time.monotonic() - start
        records = read_records(acct_file)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = usage.ru_utime + usage.ru_stime
    names = {r.pid: namer.kinds.get(r.pid, r.comm) for r in records}
    groups: dict[str, list[float]] = defaultdict(list)
    for r in records:
        kind = names[r.pid]
        if args.by_parent:
            kind = f"{kind} <- {names.get(r.ppid, namer.kinds.get(r.ppid, '?'))}"
        groups[kind].append(r.cpu_s)
    accounted = sum(r.cpu_s for r in records)
    out = sys.stderr
    print(f"acct_tree: exit {returncode}, wall {wall:.1f} s, CPU {total:.1f} s (user {usage.ru_utime:.1f} + sys "
          f"{usage.ru_stime:.1f}); accounted {accounted:.1f} s in {len(records)} processes "
          f"(machine-wide; short processes truncated to 10 ms ticks)", file=out)
    for kind, cpus in sorted(groups.items(), key=lambda kv: -sum(kv[1]))[:args.top]:
        print(f"  {sum(cpus):8.1f} s  {len(cpus):6d} procs  {kind}", file=out)
    return returncode


if __name__ == "__main__":
    sys.exit(main())
