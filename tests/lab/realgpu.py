"""The lab on a machine's real NVIDIA GPUs (``invoke lab.up --gpus real``): which GPUs there are, which lab node
owns which, what a GPU pod's environment says, and the workload sizes that fit the real GPU.

* :func:`discover_gpus` reads the machine's GPUs from ``nvidia-smi --query-gpu`` (NVML underneath): index, UUID,
  name, memory. ``NVIDIA_VISIBLE_DEVICES`` of the calling environment does not restrict it (nvidia-smi lists
  every GPU of the machine), so a lab can own all of them.
* :func:`assign_gpus` gives each lab node ``gpus_per_node`` of them, in index order (``lab-node1`` the first);
  :func:`real_lab_plan` turns that into :class:`tests.lab.cluster.LabCluster` keyword arguments.
* :func:`pod_gpu_env` is what the device plugin and the NVIDIA container runtime give a container on a real
  node: ``NVIDIA_VISIBLE_DEVICES`` = the GPU UUIDs, and, since lab pods are processes of the machine (no runtime
  hides the other GPUs), ``CUDA_VISIBLE_DEVICES`` = the same UUIDs, so CUDA (and PyTorch) see only those GPUs.
* :func:`calibrate_add` times the add loop (W2's body, ``workloads/w2_medium_add.py``) on one GPU without the SUT;
  :func:`real_workload_args` sizes the lab's workloads from that rate (else from the GPU model's bandwidth row,
  :data:`xpushare.cases.sizing.ADD_BANDWIDTH`), so that each lasts as long as on the simulated GPU and every
  lab parameter that is a time (dynamic steps, probe windows) keeps its meaning.

Interfaces: ``nvidia-smi --query-gpu=index,uuid,name,memory.total --format=csv,noheader,nounits`` (MiB); the
workloads' runtime line ``--- <seconds> seconds ---`` (workloads/README.md, read by
:func:`xpushare.parsers.pod_log.runtime_seconds`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xpushare.cases.sizing import expected_adds_per_s, iters_for, known_model
from xpushare.parsers.pod_log import runtime_seconds

REPO = Path(__file__).resolve().parents[2]
MIB = 2**20

#: Where the NVIDIA driver puts nvidia-smi when it is not on PATH (the GPU operator's and this lab's machines).
NVIDIA_SMI_FALLBACKS = ("/usr/local/nvidia/bin/nvidia-smi", "/usr/bin/nvidia-smi")

#: The add loop's side on a real GPU: W2/W6 at n 2048 hold 4 x 16 MiB, as on the simulated GPU, so every memory
#: quota of the lab's parameters (256Mi ...) still holds the workload.
REAL_ADD_N = 2048
#: Seconds each lab workload lasts without a quota on the simulated GPU (tests/lab/env.py LAB_WORKLOAD_ARGS); the
#: real-GPU sizes aim at the same.
LAB_TARGET_S: dict[str, float] = {"w1_large_add": 2.0, "w2_medium_add": 2.0, "w6_fixed_add": 6.0}
#: Calibration: adds of the first timing, growing x4 while a run lasts under CALIBRATION_MIN_S.
CALIBRATION_ITERS = 20000
CALIBRATION_MIN_S = 1.0


class GpuDiscoveryError(RuntimeError):
    """No usable NVIDIA GPU on this machine (one line: why)."""


@dataclass(frozen=True)
class RealGpu:
    """One GPU of the machine as nvidia-smi lists it."""

    index: int
    uuid: str  # "GPU-xxxxxxxx-..."
    name: str  # e.g. "NVIDIA H100 80GB HBM3"
    memory_bytes: int


def find_nvidia_smi() -> str | None:
    """The path of nvidia-smi: PATH, then :data:`NVIDIA_SMI_FALLBACKS`; None where there is none."""
    found = shutil.which("nvidia-smi")
    if found:
        return str(Path(found).resolve())
    return next((p for p in NVIDIA_SMI_FALLBACKS if os.access(p, os.X_OK)), None)


def parse_gpu_query(text: str) -> list[RealGpu]:
    """GPUs of ``nvidia-smi --query-gpu=index,uuid,name,memory.total --format=csv,noheader,nounits`` output
    (memory in MiB), in index order.

    Raises:
        GpuDiscoveryError: a line that is not four fields with an integer index and memory.
    """
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 4 or not fields[1].startswith("GPU-"):
            raise GpuDiscoveryError(f"unexpected nvidia-smi line: {line.strip()!r}")
        try:
            gpus.append(RealGpu(int(fields[0]), fields[1], fields[2], int(float(fields[3])) * MIB))
        except ValueError:
            raise GpuDiscoveryError(f"unexpected nvidia-smi line: {line.strip()!r}") from None
    return sorted(gpus, key=lambda g: g.index)


def discover_gpus(nvidia_smi: str | None = None) -> list[RealGpu]:
    """The machine's NVIDIA GPUs (nvidia-smi, see the module docstring).

    Raises:
        GpuDiscoveryError: no nvidia-smi, it failed, or it listed no GPU.
    """
    smi = nvidia_smi or find_nvidia_smi()
    if smi is None:
        raise GpuDiscoveryError("nvidia-smi not found (PATH, /usr/local/nvidia/bin): no NVIDIA driver here")
    proc = subprocess.run([smi, "--query-gpu=index,uuid,name,memory.total", "--format=csv,noheader,nounits"],
                          capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0:
        raise GpuDiscoveryError(f"nvidia-smi exited {proc.returncode}: {(proc.stderr or proc.stdout).strip()[:200]}")
    gpus = parse_gpu_query(proc.stdout)
    if not gpus:
        raise GpuDiscoveryError("nvidia-smi lists no GPU")
    return gpus


def assign_gpus(gpus: Sequence[RealGpu], gpus_per_node: int = 1, nodes: int | None = None) -> dict[str, list[RealGpu]]:
    """Lab node name (``lab-node1`` ...) -> its GPUs: ``gpus_per_node`` each, in index order; ``nodes`` None: as
    many nodes as the GPUs fill. GPUs left over stay unused.

    Raises:
        GpuDiscoveryError: fewer GPUs than ``nodes`` x ``gpus_per_node`` (or than one node's share).
        ValueError: ``gpus_per_node`` or ``nodes`` under 1.
    """
    if gpus_per_node < 1 or (nodes is not None and nodes < 1):
        raise ValueError("gpus_per_node and nodes must be at least 1")
    count = len(gpus) // gpus_per_node if nodes is None else nodes
    if count < 1 or count * gpus_per_node > len(gpus):
        raise GpuDiscoveryError(f"{len(gpus)} GPU(s) here; the lab needs {max(count, 1) * gpus_per_node} "
                                f"({max(count, 1)} node(s) x {gpus_per_node})")
    ordered = sorted(gpus, key=lambda g: g.index)
    return {f"lab-node{i + 1}": ordered[i * gpus_per_node:(i + 1) * gpus_per_node] for i in range(count)}


def real_lab_plan(assignment: Mapping[str, Sequence[RealGpu]], block: int) -> dict[str, Any]:
    """``LabCluster`` keyword arguments (as :func:`tests.lab.cluster.lab_plan`) for nodes owning real GPUs:
    node ``i`` at 127.<block>.0.(11+i), its scheduler at 127.<block>.0.(21+i)."""
    nodes: dict[str, dict[str, Any]] = {}
    for i, (name, gpus) in enumerate(assignment.items(), start=1):
        nodes[name] = {"address": f"127.{block}.0.{11 + i}", "scheduler_address": f"127.{block}.0.{21 + i}",
                       "gpus": len(gpus), "gpu_uuids": [g.uuid for g in gpus],
                       "gpu_memory_bytes": min(g.memory_bytes for g in gpus), "gpu_name": gpus[0].name,
                       "gpu_indexes": [g.index for g in gpus]}
    return {"api_address": f"127.{block}.0.10", "nodes": nodes, "gpu_mode": "real"}


def pod_gpu_env(uuids: Sequence[str]) -> dict[str, str]:
    """The GPU part of a container's environment on a real node: ``NVIDIA_VISIBLE_DEVICES`` and
    ``CUDA_VISIBLE_DEVICES``, both the sorted GPU UUIDs joined by commas (CUDA takes UUIDs)."""
    joined = ",".join(sorted(set(uuids)))
    return {"NVIDIA_VISIBLE_DEVICES": joined, "CUDA_VISIBLE_DEVICES": joined}


def calibrate_add(uuid: str, *, python: str = sys.executable, n: int = REAL_ADD_N,
                  timeout_s: float = 120.0) -> dict[str, Any]:
    """Adds per second of W2 at side ``n`` on GPU ``uuid`` (no SUT, nothing preloaded): runs of
    :data:`CALIBRATION_ITERS` adds, x4 while one lasts under :data:`CALIBRATION_MIN_S` (3 runs at most).

    Returns ``{"adds_per_s", "n", "samples": [[iters, seconds], ...]}``; ``adds_per_s`` None when no run printed
    its runtime line (the caller sizes from the model then)."""
    out: dict[str, Any] = {"adds_per_s": None, "n": n, "samples": []}
    iters = CALIBRATION_ITERS
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD",)}
    env.update(pod_gpu_env([uuid]))
    for _ in range(3):
        argv = [python, str(REPO / "workloads" / "w2_medium_add.py"), "--n", str(n), "--iters", str(iters),
                "--no-progress"]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            break
        seconds = runtime_seconds(proc.stdout)
        if proc.returncode != 0 or not seconds:
            out["error"] = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no runtime line"]
            break
        out["samples"].append([iters, round(seconds, 3)])
        out["adds_per_s"] = round(iters / seconds, 1)
        if seconds >= CALIBRATION_MIN_S:
            break
        iters *= 4
    return out


def model_adds_per_s(gpu_name: str, n: int = REAL_ADD_N) -> float | None:
    """Adds per second of an add loop of side ``n`` on GPU model ``gpu_name`` without a calibration: the
    bandwidth row's rate, at most the launch-bound rate (:func:`xpushare.cases.sizing.expected_adds_per_s`);
    None for a model the table does not know."""
    model = known_model(gpu_name)
    return None if model is None else expected_adds_per_s(model, n)


def real_workload_args(adds_per_s: float) -> dict[str, list[str]]:
    """The lab's ``workload_args`` for a real GPU whose add loop of side :data:`REAL_ADD_N` runs ``adds_per_s``:
    the simulated lab's (tests/lab/env.py) with each iterated workload's ``--iters`` set so that it lasts
    :data:`LAB_TARGET_S` (:func:`xpushare.cases.sizing.iters_for`)."""
    from tests.lab.env import LAB_WORKLOAD_ARGS

    args = {k: list(v) for k, v in LAB_WORKLOAD_ARGS.items()}
    for workload, target in LAB_TARGET_S.items():
        argv = args[workload]
        argv[argv.index("--n") + 1] = str(REAL_ADD_N)
        argv[argv.index("--iters") + 1] = str(iters_for(adds_per_s, target))
    return args
