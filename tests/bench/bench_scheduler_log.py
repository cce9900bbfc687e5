"""Benchmark of xpushare.evidence.scheduler_log_file.parse_file on a large synthetic scheduler log.

Run on demand (not collected by pytest: ``addopts`` ignores tests/bench):

    python tests/bench/bench_scheduler_log.py                 # ~1 GB, debug mix (with k8s_api JSON)
    python tests/bench/bench_scheduler_log.py --mb 200 --mix nojson

The log is written to a temporary directory (removed afterwards). Every line carries a kubectl
``--timestamps`` prefix. The line mix follows docs/sut/log.md for a scheduler with 8 limited
clients on 2 GPUs in debug mode: per client and quota window the throttling cycle of docs/sut/metrics.md §samples
(REQ_LOCK,
LOCK_OK, Scheduled, Throttling, DROP_LOCK, LOCK_RELEASED, released, wait queue, promoted,
MEM_AVAILABLE), MEM_UPDATE and try_schedule/Reset-quota debug lines, WARN ``k8s_api`` lines, every
few windows a registration block (REGISTER ... Registered client) and limit changes, and, in the
``debug`` mix, one ``k8s_api: Response JSON: <pod JSON>`` line (a few KB) per client and watcher poll
(docs/sut/log.md §annotation-debug). The ``nojson`` mix leaves the JSON lines out (what a normal-mode or
``grep -v JSON`` log
looks like); it has far more lines per MB and is the harder case.

Prints the file size, line count, parse time, MB/s (10**6 bytes per second), lines/s, and the peak
RSS of the process (``resource.getrusage``) before and after parsing. The file is read right after
being written, so it is served from the page cache: the figure is parser throughput, not disk speed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from xpushare.evidence import scheduler_log_file

GPUS = ["GPU-1f4246ce-cc92-8c8d-9f31-83660be04a1e", "GPU-dc895bd6-43d7-a984-b1ee-870332194bd1"]


def _pod_json(pod: str, ns: str, core: int, rng: random.Random) -> str:
    """A pod object of realistic size (a few KB), as the annotation watcher dumps it."""
    obj = {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": pod,
            "namespace": ns,
            "uid": f"{rng.getrandbits(128):032x}",
            "resourceVersion": str(rng.randint(10**6, 10**7)),
            "labels": {"app": "xpf-perf", "xpushare.io/run-id": "r20260214-100000"},
            "annotations": {
                "xpushare.com/gpu-core-limit": str(core),
                "xpushare.com/gpu-memory-limit": "4Gi",
                "kubectl.kubernetes.io/last-applied-configuration": "x" * 900,
            },
            "managedFields": [
                {"manager": "kubectl-client-side-apply", "operation": "Update", "fieldsV1": {"f:metadata": {}}}
            ]
            * 4,
        },
        "spec": {
            "containers": [
                {
                    "name": "test",
                    "image": "registry.example/xpushare/pytorch-add-small-5fed3e5b",
                    "env": [{"name": f"XPUSHARE_VAR_{i}", "value": str(i)} for i in range(12)],
                    "resources": {"limits": {"xpushare.com/gpu": "1"}},
                }
            ],
            "restartPolicy": "Never",
            "nodeName": "gpu-node-1",
        },
        "status": {"phase": "Running", "podIP": "10.42.1.17", "conditions": [{"type": "Ready"}] * 4},
    }
    return json.dumps(obj, separators=(",", ":"))


def make_block(rng: random.Random, mix: str, start: datetime) -> tuple[list[str], datetime]:
    """One scheduling 'minute' of log lines for 8 clients on 2 GPUs; returns (lines, next start)."""
    clients = [(f"{rng.getrandbits(64):016x}", f"xpf-perf-{i}", "default", GPUS[i % 2]) for i in range(8)]
    t = start
    out: list[str] = []

    def emit(level: str, msg: str) -> None:
        nonlocal t
        t += timedelta(microseconds=rng.randint(50, 3000))
        out.append(f"{t.strftime('%Y-%m-%dT%H:%M:%S')}.{t.microsecond:06d}123Z [XPUSHARE][{level}]: {msg}\n")

    for cid, pod, ns, gpu in clients:  # registration block
        emit("INFO", "Received REGISTER")
        emit(
            "DEBUG",
            f"SO_PEERCRED: client fd={rng.randint(10, 99)} pid={rng.randint(1000, 99999)} (client reported pid=1)",
        )
        emit("INFO", f"Applying initial compute limit for {ns}/{pod}: 40%")
        emit("INFO", f"Sent SCHED_ON to client {cid}")
        emit("INFO", f"Applying initial memory limit for {ns}/{pod}: 4294967296 bytes")
        emit("INFO", f"Sending UPDATE_LIMIT to client {cid}: 4294967296 bytes (4.00 GiB)")
        emit("INFO", f"Sent UPDATE_LIMIT to client {cid}")
        emit("INFO", f"Registered client {cid} on GPU {gpu} with Pod name = {pod}, Pod namespace = {ns}")
    for window in range(30):  # 30 quota windows of 2 s
        for cid, _pod, _ns, gpu in clients:
            emit("INFO", f"Received REQ_LOCK from {cid}")
            emit("INFO", f"Sent LOCK_OK to client {cid}")
            emit("INFO", f"Scheduled client {cid} (mem: 3072 MB, total running: 6144 MB)")
            for _ in range(3):
                emit("DEBUG", f"Received MEM_UPDATE from {cid}: {rng.randint(2000, 3100)} MB")
                emit("DEBUG", f"GPU {gpu} running memory updated: 6144 MB")
            emit("DEBUG", f"Weighted billing: client {cid} wall=800 billed=800 concurrent=2")
            emit("INFO", f"Throttling client {cid} (Used: 800/800 ms, weighted, wall=800, billed=800, concurrent=2)")
            emit("INFO", f"Sent DROP_LOCK to client {cid}")
            emit("DEBUG", f"drop_to_release latency for client {cid} is {rng.randint(1, 40)} ms")
            emit("INFO", f"Received LOCK_RELEASED from {cid}")
            emit("INFO", f"Client {cid} released from running_list (ran for 812 ms). Mem: 3072 MB")
            emit("INFO", f"Received REQ_LOCK from {cid}")
            emit("DEBUG", f"can_run: client {cid} is throttled")
            emit("DEBUG", f"Client {cid} moved to wait queue (throttled)")
            emit("INFO", f"Client {cid} promoted from wait queue")
            emit("INFO", f"Sent MEM_AVAILABLE to client {cid}")
        for gpu in GPUS:
            emit("DEBUG", f"Reset quota window for GPU {gpu} after 2000 ms")
            emit("DEBUG", f"try_schedule() called with no pending requests for UUID {gpu}")
        if window % 3 == 0:  # annotation watcher: every 5-6 s, per client
            for _cid, pod, ns, _gpu in clients:
                if mix == "debug":
                    emit("DEBUG", "k8s_api: Response JSON: " + _pod_json(pod, ns, 40, rng))
                emit("DEBUG", "k8s_api: Found annotation 'xpushare.com/gpu-core-limit': '40'")
                emit("DEBUG", "k8s_api: Found annotation 'xpushare.com/gpu-memory-limit': '4Gi'")
        if window == 15:
            cid, pod, ns, _ = clients[0]
            emit("INFO", f"Compute limit changed for pod {ns}/{pod}: 40% -> 80%")
            emit("INFO", f"Sending UPDATE_CORE_LIMIT to client {cid}: 80%")
            emit("INFO", f"Sent UPDATE_CORE_LIMIT to client {cid}")
            emit("INFO", f"Memory limit changed for pod {ns}/{pod}: 4294967296 -> 8589934592 bytes")
            emit("WARN", "k8s_api: curl failed: Timeout was reached")
    for cid, *_ in clients:
        emit("DEBUG", f"Client {cid} has closed the connection")
        emit("INFO", f"Removing client {cid}")
    return out, t


def generate(path: Path, target_bytes: int, mix: str, seed: int = 1) -> tuple[int, int]:
    """Write ~target_bytes of log to ``path``; returns (bytes, lines). Memory stays small."""
    rng = random.Random(seed)
    t = datetime(2026, 2, 14, 10, 0, 0, tzinfo=timezone.utc)
    size = 0
    lines = 0
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write("2026-02-14T10:00:00.000000001Z [XPUSHARE][INFO]: xpushare-scheduler started in debug mode\n")
        f.write("2026-02-14T10:00:00.000000002Z [XPUSHARE][INFO]: Scheduling mode: AUTO (default)\n")
        while size < target_bytes:
            block, t = make_block(rng, mix, t)
            data = "".join(block)
            f.write(data)
            size += len(data.encode("utf-8"))
            lines += len(block)
    return os.path.getsize(path), lines + 2


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=1000.0, help="log size in MB (10**6 bytes), default 1000")
    ap.add_argument("--mix", choices=["debug", "nojson", "both"], default="both")
    ap.add_argument("--keep", action="store_true", help="keep the generated file(s)")
    args = ap.parse_args()
    mixes = ["debug", "nojson"] if args.mix == "both" else [args.mix]
    with tempfile.TemporaryDirectory(prefix="xpushare-bench-") as tmp:
        for mix in mixes:
            path = Path(tmp) / f"scheduler_{mix}.log"
            t0 = time.perf_counter()
            size, nlines = generate(path, int(args.mb * 1e6), mix)
            gen_s = time.perf_counter() - t0
            rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            t0 = time.perf_counter()
            summary = scheduler_log_file.parse_file(path)
            parse_s = time.perf_counter() - t0
            rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            assert summary.lines == nlines, (summary.lines, nlines)
            print(
                f"mix={mix}: {size / 1e6:.1f} MB, {nlines} lines ({size / nlines:.0f} B/line), "
                f"generated in {gen_s:.1f} s"
            )
            print(f"  parse: {parse_s:.2f} s = {size / 1e6 / parse_s:.1f} MB/s, {nlines / parse_s / 1e6:.2f} M lines/s")
            print(f"  peak RSS (ru_maxrss): {rss_before / 1024:.1f} MiB before parse, {rss_after / 1024:.1f} MiB after")
            print(
                f"  summary: lock_ok={summary.lock_ok} drop_lock={summary.drop_lock} throttles={summary.throttles} "
                f"registrations={summary.registrations_total} (kept {len(summary.registrations)}) "
                f"levels={summary.levels}"
            )
            if args.keep:
                keep = Path.cwd() / path.name
                path.replace(keep)
                print(f"  kept: {keep}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
