#!/usr/bin/env python3
"""Lab stand-in for ``nvidia-smi dmon -s u -d 1`` on a lab node (the lab has no GPU and no nvidia-smi).

A lab "GPU" is busy when the processes registered on it use the CPU (the lab scheduler exports
``gpu_utilization_ratio`` as the clients' CPU share, tests/lab/README-kube.md). This script measures
the same physical quantity from outside the scheduler: every ``--interval-s`` it reads the node's
client registry (``<workdir>/nodes/<node>/clients/*.json``: client pid and GPU UUID), the clients'
CPU ticks from ``/proc/<pid>/stat`` (utime + stime), and prints one dmon row per GPU of the node with
``sm`` = the summed CPU share in percent (capped at 100), in dmon's ``-s u`` layout::

    # gpu     sm    mem    enc    dec    jpg    ofa
    # Idx      %      %      %      %      %      %
        0     97      -      -      -      -      -

The header is repeated every 20 samples, as dmon does. Standard library only (it runs on a lab node
host through SSH, outside the repository's package). Runs until SIGTERM/SIGINT, or ``--count`` samples.
Used by ``tests/test_k8s_metrics_e2e.py`` as the ``met006_dmon_command`` of the lab inventory.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

COLUMNS = ("gpu", "sm", "mem", "enc", "dec", "jpg", "ofa")


def cpu_ticks(pid: int) -> int | None:
    """utime + stime of ``pid`` in clock ticks; None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return None


def clients(clients_dir: Path) -> dict[int, str]:
    """``pid -> GPU UUID`` of the registered clients whose pid is known."""
    out: dict[int, str] = {}
    for path in clients_dir.glob("*.json"):
        try:
            reg = json.loads(path.read_text())
            pid = int(reg.get("pid") or 0)
        except (OSError, ValueError, TypeError):
            continue
        if pid > 0:
            out[pid] = str(reg.get("gpu_uuid") or "")
    return out


def header() -> str:
    return "# " + " ".join(f"{c:>5}" for c in COLUMNS) + "\n# " + " ".join(
        f"{u:>5}" for u in ("Idx", "%", "%", "%", "%", "%", "%"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True, help="the lab cluster's work directory (lab.json)")
    parser.add_argument("--node", required=True, help="lab node name, e.g. lab-node1")
    parser.add_argument("--interval-s", type=float, default=1.0)
    parser.add_argument("--count", type=int, default=0, help="stop after this many samples (0: never)")
    args = parser.parse_args(argv)
    workdir = Path(args.workdir)
    gpus = list(json.loads((workdir / "lab.json").read_text())["nodes"][args.node]["gpus"])
    clients_dir = workdir / "nodes" / args.node / "clients"
    hz = os.sysconf("SC_CLK_TCK")
    last: dict[int, int] = {}
    t_last = time.monotonic()
    sample = 0
    while not args.count or sample < args.count:
        time.sleep(max(0.0, t_last + args.interval_s - time.monotonic()))
        now = time.monotonic()
        elapsed, t_last = now - t_last, now
        busy: dict[str, float] = {}
        seen: dict[int, int] = {}
        for pid, gpu in clients(clients_dir).items():
            ticks = cpu_ticks(pid)
            if ticks is None:
                continue
            seen[pid] = ticks
            if pid in last and elapsed > 0:
                busy[gpu] = busy.get(gpu, 0.0) + max(0.0, (ticks - last[pid]) / hz / elapsed)
        last = seen
        if sample % 20 == 0:
            print(header())
        for i, uuid in enumerate(gpus):
            sm = min(100, round(100 * busy.get(uuid, 0.0)))
            print(" ".join(f"{v:>5}" for v in (str(i), str(sm), "-", "-", "-", "-", "-")) + " ")
        sys.stdout.flush()
        sample += 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
