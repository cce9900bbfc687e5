#!/usr/bin/env python3
"""All-reduce bandwidth and correctness over torch.distributed (NCCL on GPUs, gloo on CPUs).

Start one process per GPU with torchrun (``python -m torch.distributed.run``), which sets RANK,
WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE::

    python -m torch.distributed.run --standalone --nproc-per-node 8 nccl_allreduce.py          # one node
    python -m torch.distributed.run --nnodes 2 --node-rank R --nproc-per-node 8 \\
        --master-addr 10.0.0.11 --master-port 29512 nccl_allreduce.py                         # across nodes

For each size from ``--min-bytes`` (8 MiB) to ``--max-bytes`` (1 GiB), multiplied by ``--factor`` (2):
``--warmup`` all-reduces (sum, float32), then ``--iters`` timed ones between a device synchronisation
and a barrier on each side; the time per all-reduce is the slowest rank's. As nccl-tests defines them
(GB = 1e9 bytes): algbw = bytes / time, busbw = algbw * 2 (n - 1) / n with n the world size. Then the
correctness check: every rank fills the buffer with rank + 1, one all-reduce, and every element must
equal n (n + 1) / 2 on every rank (exact in float32 for these small integers).

``--backend auto`` is ``nccl`` when CUDA is available, else ``gloo`` (a CPU smoke test of the plumbing,
not a bandwidth figure). Rank 0 prints one JSON document between ``@@xpushare-envcheck-begin nccl`` /
``@@xpushare-envcheck-end nccl`` lines: schema, backend, world_size, nnodes, local_world_size, dtype,
warmup, iters, hosts (hostname per rank), nccl_version, sizes [{bytes, count, time_us, algbw_gbps,
busbw_gbps, ok}], ok, errors. Exit status 1 when any check failed, else 0.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from typing import Any

SCHEMA = "xpushare.envcheck.nccl/1"
BEGIN = "@@xpushare-envcheck-begin"
END = "@@xpushare-envcheck-end"
MIB = 1 << 20


def sizes(min_bytes: int, max_bytes: int, factor: int) -> list[int]:
    """Message sizes in bytes: min, min*factor, ... up to max (max included when reached exactly)."""
    if min_bytes < 4 or max_bytes < min_bytes or factor < 2:
        raise ValueError("need 4 <= min-bytes <= max-bytes and factor >= 2")
    out, size = [], min_bytes
    while size <= max_bytes:
        out.append(size)
        size *= factor
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min-bytes", type=int, default=8 * MIB)
    parser.add_argument("--max-bytes", type=int, default=1024 * MIB)
    parser.add_argument("--factor", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto")
    args = parser.parse_args(argv)

    import torch
    import torch.distributed as dist

    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    backend = args.backend if args.backend != "auto" else ("nccl" if torch.cuda.is_available() else "gloo")
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend=backend)
    doc: dict[str, Any] = {"schema": SCHEMA, "backend": backend, "world_size": world, "local_world_size": local_world,
                           "nnodes": max(1, world // max(1, local_world)), "dtype": "float32",
                           "warmup": args.warmup, "iters": args.iters, "nccl_version": None, "sizes": [],
                           "errors": [], "ok": False}
    if backend == "nccl":
        v = torch.cuda.nccl.version()
        doc["nccl_version"] = ".".join(str(p) for p in v) if isinstance(v, tuple) else str(v)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def barrier() -> None:
        flag = torch.ones(1, device=device)
        dist.all_reduce(flag)
        sync()

    hosts: list[Any] = [None] * world
    dist.all_gather_object(hosts, f"{socket.gethostname()}/{local_rank}")
    doc["hosts"] = hosts
    all_ok = True
    try:
        for nbytes in sizes(args.min_bytes, args.max_bytes, args.factor):
            count = nbytes // 4
            buf = torch.zeros(count, dtype=torch.float32, device=device)
            for _ in range(args.warmup):
                dist.all_reduce(buf)
            barrier()
            t0 = time.perf_counter()
            for _ in range(args.iters):
                dist.all_reduce(buf)
            sync()
            elapsed = torch.tensor([time.perf_counter() - t0], dtype=torch.float64, device=device)
            dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
            seconds = float(elapsed.item()) / args.iters
            buf.fill_(float(rank + 1))
            dist.all_reduce(buf)
            expected = world * (world + 1) / 2
            good = torch.tensor([1 if bool((buf == expected).all()) else 0], dtype=torch.int32, device=device)
            dist.all_reduce(good, op=dist.ReduceOp.MIN)
            ok = bool(good.item())
            all_ok = all_ok and ok
            algbw = nbytes / seconds / 1e9
            doc["sizes"].append({"bytes": nbytes, "count": count, "time_us": seconds * 1e6, "algbw_gbps": algbw,
                                 "busbw_gbps": algbw * 2 * (world - 1) / world, "ok": ok})
            del buf
            if device.type == "cuda":
                torch.cuda.empty_cache()
    except Exception as exc:  # report what was measured so far
        doc["errors"].append(f"{type(exc).__name__}: {exc}")
        all_ok = False
    doc["ok"] = all_ok and bool(doc["sizes"])
    if rank == 0:
        sys.stdout.write(f"{BEGIN} nccl\n{json.dumps(doc, indent=1, sort_keys=True)}\n{END} nccl\n")
        sys.stdout.flush()
    dist.destroy_process_group()
    return 0 if doc["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
