#!/usr/bin/env python3
"""Oversubscription probe (spec: docs/sut/workloads.md §inline W4 inline probe, docs/sut/client.md §memory-quota; seed
000 §1 item 1).

Allocates --factor x the device's total memory in fp32 chunks of --chunk-mib MiB, touches every chunk
(`fill_(1.0)`), runs one add pass over them (`chunk[i] += chunk[0][:len(chunk[i])]` for every i >= 1, so each chunk is
read and written again), synchronises and checks the values. Beyond physical memory this only passes under
xpushare with XPUSHARE_ENABLE_SINGLE_OVERSUB set; otherwise the expected result is exit 1 with
`CUDA out of memory` on stderr (and `cuMemAlloc rejected: ...` from the library).

Total memory: --total-bytes when given; else torch.cuda.get_device_properties(0).total_memory
(--total-from properties, physical) or torch.cuda.mem_get_info()[1] (--total-from mem_get_info: the limit
under an xpushare memory limit); cudadrv uses cuDeviceTotalMem_v2 or cuMemGetInfo_v2 the same way;
NPU uses torch.npu.mem_get_info(); CPU uses 64 MiB.

Output (stdout):
    [XPUSHARE][OVERSUB] total_bytes=<int> factor=<float> target_bytes=<int> chunk_bytes=<int> chunks=<int>
    [XPUSHARE][OVERSUB] allocated_bytes=<int>
    PASS
    --- <seconds> seconds ---
Exit 0 on success, 1 on any error (the traceback goes to stderr).
"""

from __future__ import annotations

import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # _driver.py and _common.py sit next to it
import _common as c
import _driver as d
import _output as o

FACTOR = d.SizeFlag("--factor", c.positive_float, "multiple of the total memory to allocate.")
CHUNK_MIB = d.SizeFlag("--chunk-mib", c.positive_int, "size of one chunk in MiB.", " MiB")
TOTAL_BYTES = d.Option(
    "--total-bytes",
    type=c.positive_int,
    default=None,
    help="total memory in bytes to multiply (default: the device's total memory; on CPU "
    + f"{int(c.MODEL_DEFAULTS['cpu']['oversub']['total_bytes'])} bytes)",
)
TOTAL_FROM = d.Option(
    "--total-from",
    choices=("properties", "mem_get_info"),
    default="properties",
    help="CUDA/cudadrv source of the total when --total-bytes is not given: properties = the device's "
    "total memory, mem_get_info = cuMemGetInfo's total (default: properties)",
)


def plan_chunks(target_bytes: int, chunk_bytes: int) -> list[int]:
    """Split ``target_bytes`` into chunk sizes (bytes, multiples of 4 = one fp32) of at most ``chunk_bytes``.

    Returns:
        At least 2 sizes (the add pass needs two chunks) summing to ``target_bytes`` rounded down to a
        multiple of 4; the last one may be smaller.

    Raises:
        ValueError: ``target_bytes < 8`` or ``chunk_bytes < 4``.
    """
    if target_bytes < 2 * c.FP32_BYTES or chunk_bytes < c.FP32_BYTES:
        raise ValueError(f"oversub target {target_bytes} B / chunk {chunk_bytes} B too small")
    target = target_bytes - target_bytes % c.FP32_BYTES
    chunk = chunk_bytes - chunk_bytes % c.FP32_BYTES
    if math.ceil(target / chunk) < 2:
        # Half of the target, rounded up to whole fp32 elements.
        chunk = -(-(target // 2) // c.FP32_BYTES) * c.FP32_BYTES
    sizes = [chunk] * (target // chunk)
    if target % chunk:
        sizes.append(target % chunk)
    return sizes


def body(args: argparse.Namespace, dev: c.Device, start: float) -> None:
    """Allocate ``factor`` x total bytes in chunks on ``dev``, touch them, one add pass, sync, check.

    On cudadrv: one cuMemAlloc_v2, one fill kernel (0 FLOPs, the chunk's bytes) and cuMemcpyHtoD_v2 of
    the fill values per chunk, then one in-place add kernel per chunk i >= 1 (k FLOPs, 3·4·k bytes for a
    chunk of k elements).

    Raises:
        OutOfMemoryError (torch's, or ``_common``'s on cudadrv) / RuntimeError: ``CUDA out of memory`` when
            oversubscription is refused.
        ValueError: no total memory known (CPU with a GPU model row and no --total-bytes).
        RuntimeError: --total-from mem_get_info on a PyTorch without torch.cuda.mem_get_info.
        RuntimeError: the value check fails.
    """
    total = args.total_bytes
    if total is None and dev.kind in ("cuda", "cudadrv") and args.total_from == "mem_get_info":
        mem = dev.mem_info()
        if mem is None:
            raise RuntimeError("torch.cuda.mem_get_info is not available (PyTorch < 1.10): use --total-bytes")
        total = mem[1]
    if total is None:
        total = dev.total_bytes
    if total is None:
        total = c.MODEL_MEMORY_BYTES.get(args._model)
    if total is None:
        raise ValueError("no total memory known: pass --total-bytes")
    target = int(args.factor * total)
    sizes = plan_chunks(target, args.chunk_mib * c.MIB)
    print(
        f"{c.OVERSUB_PREFIX} total_bytes={total:d} factor={args.factor!r} target_bytes={target:d} "
        f"chunk_bytes={sizes[0]:d} chunks={len(sizes):d}",
        flush=True,
    )
    progress = o.Progress(2 * len(sizes), enabled=args.progress)
    chunks = []
    for size in sizes:
        chunks.append(dev.full((size // c.FP32_BYTES,), 1.0))
        progress.update()
    progress.update()
    for chunk in chunks[1:]:
        dev.add(chunk, chunks[0], out=chunk)  # in place; the last chunk may be shorter than the first
        progress.update()
    dev.sync()
    progress.close()
    o.check_value("chunk[0][0]", dev.item(chunks[0], 0), 1.0)
    o.check_value("chunk[1][-1]", dev.item(chunks[1], -1), 2.0)
    o.check_value("chunk[-1][0]", dev.item(chunks[-1], 0), 2.0)
    allocated = sum(dev.numel(t) * c.FP32_BYTES for t in chunks)
    print(f"{c.OVERSUB_PREFIX} allocated_bytes={allocated:d}", flush=True)


build_parser, main = d.script(__doc__, "oversub", FACTOR, CHUNK_MIB, TOTAL_BYTES, TOTAL_FROM, body=body)

if __name__ == "__main__":
    sys.exit(main())
