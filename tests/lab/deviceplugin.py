#!/usr/bin/env python3
"""The lab's device-plugin container: the start-up lines of the SUT's device plugin, then idle.

The SUT's device plugin is not part of the scheduler/library source the lab builds, so the lab kubelet
does its work (vGPU allocation and the container env, :mod:`tests.lab.kubelet`); this container only
prints the greppable lines the real one prints (docs/sut/kubernetes.md §device-plugin) so its logs can be harvested.
Reads the node's GPUs from ``$XPUSHARE_LAB_CONFIG`` (lab.json) and ``$NODE_NAME``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

# run as a script from the repository root, where xpushare need not be installed (a GPU machine's python)
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from xpushare.inventory.sut import sut_names


def main() -> int:
    cfg = json.loads(Path(os.environ["XPUSHARE_LAB_CONFIG"]).read_text())
    node = os.environ.get("NODE_NAME") or os.environ["XPUSHARE_LAB_NODE"]
    names = sut_names(cfg["generation"])
    gpus = cfg["nodes"][node]["gpus"]

    def log(msg: str) -> None:
        sys.stderr.write(time.strftime("%Y/%m/%d %H:%M:%S ") + msg + "\n")
        sys.stderr.flush()

    log("Nvshare Device Plugin starting... (Build: DynamicLimit/v1)")
    log(f"Runtime backend=cuda, Read UUIDs=[{' '.join(gpus)}]")
    log("Reporting the following DeviceIDs to kubelet:")
    k = 0
    for uuid in gpus:
        for i in range(1, 11):
            k += 1
            log(f"[{k}] Device ID:{uuid}__{i}")
    log(f"Registered device plugin for '{names.resource}' with Kubelet")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
