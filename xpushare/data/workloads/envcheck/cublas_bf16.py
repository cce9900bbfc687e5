#!/usr/bin/env python3
"""cuBLAS matrix-product throughput per GPU: ``C = A @ B`` with n x n x n bf16 operands (default n = 8192).

Each selected GPU is measured alone, one after the other: ``--warmup`` products, then ``--iters`` timed
with CUDA events; TFLOP/s = 2 n^3 iters / seconds / 1e12 (a dense product counts n^3 multiply-adds).
A and B are ``torch.randn`` (random data: zeros run faster and would flatter the figure). Correctness:
the top-left 64 x 64 block of C is compared with an fp32 product of the same bf16 inputs; the largest
absolute error relative to the block's largest magnitude must stay below ``--max-rel-err`` (0.02; bf16
keeps 8 significant bits).

``--device auto`` (default) measures the CUDA GPUs and, without CUDA, prints a document with
``skipped`` set to the reason (exit 0). ``--device cpu`` runs the same code on the CPU (wall-clock
timing): a smoke test of the plumbing, not a GPU figure.

Output: one JSON document between ``@@xpushare-envcheck-begin cublas`` / ``@@xpushare-envcheck-end
cublas`` lines on stdout: schema, device, dtype, n, warmup, iters, torch, skipped, errors, gpus
[{index, name, uuid, ms_per_iter, tflops, max_rel_err, ok, others_before, others_after}]. Exit status 1 when a
GPU failed or its result was wrong, else 0. Needs ``torch``.

``others_before`` / ``others_after``: the compute processes other than this one on the GPU just before and just
after its measurement (``nvidia-smi --query-compute-apps``: ``[{pid, name, used_mib}]``; None when nvidia-smi
could not tell): a figure measured on a GPU others were using says nothing about the hardware, and the
judgment makes it ERROR ("GPU busy"), never FAIL.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from typing import Any

SCHEMA = "xpushare.envcheck.cublas/1"
BEGIN = "@@xpushare-envcheck-begin"
END = "@@xpushare-envcheck-end"
CHECK_BLOCK = 64


def emit(doc: dict[str, Any]) -> None:
    sys.stdout.write(f"{BEGIN} cublas\n{json.dumps(doc, indent=1, sort_keys=True)}\n{END} cublas\n")
    sys.stdout.flush()


def other_processes(uuid: str | None) -> list[dict[str, Any]] | None:
    """Compute processes on the GPU ``uuid`` (``GPU-...``) other than this one, from nvidia-smi; None when it
    cannot be asked (no nvidia-smi, no UUID, an error)."""
    if not uuid:
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=gpu_uuid,pid,process_name,used_memory",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    found = []
    for line in out.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 4 or parts[0] != uuid or not parts[1].isdigit() or int(parts[1]) == os.getpid():
            continue
        found.append({"pid": int(parts[1]), "name": parts[2],
                      "used_mib": int(parts[3]) if parts[3].isdigit() else None})
    return found


def gpu_uuid(torch: Any, index: int) -> str | None:
    """``GPU-<uuid>`` of CUDA device ``index`` as nvidia-smi names it, or None when torch cannot tell."""
    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    if uuid is None:
        return None
    text = str(uuid)
    return text if text.startswith("GPU-") else f"GPU-{text}"


def measure(torch: Any, device: Any, *, n: int, dtype: Any, warmup: int, iters: int) -> dict[str, float]:
    """ms per product, TFLOP/s and the relative error of the check block on one device."""
    gen = torch.Generator(device=device).manual_seed(1234)
    a = torch.randn(n, n, device=device, dtype=dtype, generator=gen)
    b = torch.randn(n, n, device=device, dtype=dtype, generator=gen)
    c = torch.empty(n, n, device=device, dtype=dtype)
    cuda = device.type == "cuda"
    for _ in range(warmup):
        torch.matmul(a, b, out=c)
    if cuda:
        torch.cuda.synchronize(device)
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            torch.matmul(a, b, out=c)
        stop.record()
        stop.synchronize()
        ms = start.elapsed_time(stop) / iters
    else:
        t0 = time.perf_counter()
        for _ in range(iters):
            torch.matmul(a, b, out=c)
        ms = (time.perf_counter() - t0) * 1e3 / iters
    k = min(CHECK_BLOCK, n)
    ref = a[:k].float() @ b[:, :k].float()
    err = float((c[:k, :k].float() - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
    tflops = 2.0 * n**3 / (ms / 1e3) / 1e12
    del a, b, c
    if cuda:
        torch.cuda.empty_cache()
    return {"ms_per_iter": ms, "tflops": tflops, "max_rel_err": err}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=8192, help="matrix size n (n x n x n product)")
    parser.add_argument("--dtype", choices=("bf16", "fp16", "fp32"), default="bf16")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    parser.add_argument("--gpus", default="all", help="'all' or comma-separated CUDA indices")
    parser.add_argument("--max-rel-err", type=float, default=0.02)
    args = parser.parse_args(argv)
    doc: dict[str, Any] = {"schema": SCHEMA, "device": args.device, "dtype": args.dtype, "n": args.n,
                           "warmup": args.warmup, "iters": args.iters, "torch": None, "skipped": None,
                           "errors": [], "gpus": []}
    try:
        import torch
    except Exception as exc:
        doc["errors"].append(f"import torch failed: {type(exc).__name__}: {exc}")
        emit(doc)
        return 1
    doc["torch"] = str(torch.__version__)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    if args.device == "auto" and not use_cuda:
        doc["skipped"] = "no CUDA device: torch.cuda.is_available() is False"
        emit(doc)
        return 0
    if use_cuda and not torch.cuda.is_available():
        doc["errors"].append("--device cuda but torch.cuda.is_available() is False")
        emit(doc)
        return 1
    doc["device"] = "cuda" if use_cuda else "cpu"
    if use_cuda:
        count = torch.cuda.device_count()
        indices = list(range(count)) if args.gpus == "all" else [int(i) for i in args.gpus.split(",") if i.strip()]
        targets = [(i, torch.device("cuda", i), torch.cuda.get_device_name(i)) for i in indices]
    else:
        targets = [(0, torch.device("cpu"), "cpu")]
    failed = False
    for index, device, name in targets:
        row: dict[str, Any] = {"index": index, "name": name}
        try:
            if use_cuda:  # events and the products must use this GPU's current stream
                row["uuid"] = gpu_uuid(torch, index)
                row["others_before"] = other_processes(row["uuid"])
                torch.cuda.set_device(device)
            row.update(measure(torch, device, n=args.n, dtype=dtype, warmup=args.warmup, iters=args.iters))
            row["ok"] = row["max_rel_err"] < args.max_rel_err
            if use_cuda:
                row["others_after"] = other_processes(row.get("uuid"))
        except Exception as exc:  # one broken GPU must not hide the others
            row.update({"ms_per_iter": None, "tflops": None, "max_rel_err": None, "ok": False,
                        "error": f"{type(exc).__name__}: {exc}"})
            traceback.print_exc(file=sys.stderr)
        failed = failed or not row["ok"]
        doc["gpus"].append(row)
    emit(doc)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
