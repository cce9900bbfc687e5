"""CPU seconds of a command and of its process tree by kind of process (Linux ``/proc``; no psutil).

Usage: ``python -m tests.bench.cpu_tree [--interval S] [--top N] -- COMMAND ...``

Runs COMMAND, samples ``/proc`` every ``--interval`` seconds (default 0.2) for every descendant, and prints:
the total user+system CPU seconds of COMMAND and all the children it waited for (``getrusage``, exact), then
the CPU seconds of the processes seen by the sampler grouped by kind (program name, plus the Python module or
script it runs), each process counted by its last sample. Processes that live shorter than one interval are in
the total but may be missing from the groups (the ``unattributed`` line). The machine's other load does not
count: CPU seconds, not wall time, are the measure on a shared machine.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from collections import defaultdict

_TICK = os.sysconf("SC_CLK_TCK")


def _children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = defaultdict(list)
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2:].split()
        kids[int(fields[1])].append(int(name))
    return kids


def _descendants(root: int) -> list[int]:
    kids = _children_map()
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(kids.get(pid, ()))
    return out


def process_kind(pid: int) -> str | None:
    """The kind of a live process: its program, or the Python module or script it runs; None once gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = [a.decode(errors="replace") for a in fh.read().split(b"\0") if a]
    except OSError:
        return None
    if not argv:
        return None
    prog = os.path.basename(argv[0])
    if prog.startswith("python"):
        rest = argv[1:]
        while rest and rest[0].startswith("-") and rest[0] != "-m" and rest[0] != "-c":
            rest = rest[1:]
        if rest[:1] == ["-m"] and len(rest) > 1:
            return f"python -m {rest[1]}"
        if rest[:1] == ["-c"]:
            return "python -c"
        return f"python {os.path.basename(rest[0])}" if rest else "python"
    if prog in ("sh", "bash") and len(argv) > 2 and argv[1] == "-c":
        return f"{prog} -c {argv[2].split()[0] if argv[2].split() else ''}"
    return prog


def _cpu(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return None
    fields = stat[stat.rindex(b")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime (own, not children)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interval", type=float, default=0.2)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("a command is needed after --")
    start = time.monotonic()
    proc = subprocess.Popen(command)
    seen: dict[tuple[int, str], float] = {}
    while proc.poll() is None:
        for pid in _descendants(proc.pid):
            kind, cpu = process_kind(pid), _cpu(pid)
            if kind is not None and cpu is not None:
                seen[(pid, kind)] = cpu
        time.sleep(args.interval)
    wall = time.monotonic() - start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = usage.ru_utime + usage.ru_stime
    groups: dict[str, list[float]] = defaultdict(list)
    for (_pid, kind), cpu in seen.items():
        groups[kind].append(cpu)
    attributed = sum(sum(v) for v in groups.values())
    out = sys.stderr
    print(f"cpu_tree: exit {proc.returncode}, wall {wall:.1f} s, CPU {total:.1f} s "
          f"(user {usage.ru_utime:.1f} + sys {usage.ru_stime:.1f})", file=out)
    for kind, cpus in sorted(groups.items(), key=lambda kv: -sum(kv[1]))[:args.top]:
        print(f"  {sum(cpus):8.1f} s  {len(cpus):5d} procs  {kind}", file=out)
    print(f"  {total - attributed:8.1f} s  unattributed (processes shorter than {args.interval} s)", file=out)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
