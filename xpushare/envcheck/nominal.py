"""Nominal figures per GPU model: dense bf16 tensor TFLOP/s and NVLink bandwidth, for the envcheck judgments.

Sources: NVIDIA's product datasheets (H100 and H200 Tensor Core GPU, A100/A800, H800, H20, L40S, L20,
L4). Datasheets give bf16 "with sparsity"; the dense figure used here is half of it (H100/H200 SXM:
1979 -> 989.5 TFLOP/s). NVLink figures are the datasheet's per-GPU bidirectional NVLink bandwidth
halved (one direction, GB/s = 1e9 bytes/s): the ceiling of an all-reduce's busbw as nccl-tests
defines it (H100/H200 SXM: 900 GB/s -> 450). Models without NVLink (PCIe cards) have None: their
all-reduce figures are reported, not judged. The seed's own guide values (H200 "~871 TFLOPS" and
"468 GB/s") are measured figures, not nominal ones; the judgments take a percentage of the nominal
(``envcheck_cublas_min_pct``, ``envcheck_nccl_min_busbw_pct``), and a cluster can override the figures
(``envcheck_nominal_bf16_tflops``, ``envcheck_nominal_busbw_gbps``).

Matching (:func:`lookup`): the device name as ``nvidia-smi`` / ``torch.cuda.get_device_name`` print it
(``NVIDIA H200``, ``NVIDIA H100 80GB HBM3``, ``NVIDIA A800-SXM4-80GB``), case-insensitively, with
``-`` and ``_`` read as spaces; the entry with the longest matching pattern wins, so ``H100 PCIe`` is
not taken for ``H100``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class GpuNominal:
    """Nominal figures of one GPU model.

    ``bf16_dense_tflops``: dense bf16 tensor-core TFLOP/s (1e12 FLOP/s); ``nvlink_busbw_gbps``: one
    direction of the per-GPU NVLink bandwidth in GB/s, None without NVLink; ``memory_gib``: nominal memory.
    """

    key: str
    patterns: tuple[str, ...]
    bf16_dense_tflops: float | None
    nvlink_busbw_gbps: float | None
    memory_gib: float
    source: str


NOMINAL: tuple[GpuNominal, ...] = (
    GpuNominal("H200", ("h200",), 989.5, 450.0, 141, "H200 datasheet (SXM): bf16 1979 sparse, NVLink 900 GB/s"),
    GpuNominal("H200 NVL", ("h200 nvl",), 835.5, None, 141, "H200 NVL datasheet: bf16 1671 sparse, 2/4-way bridge"),
    GpuNominal("H100 SXM", ("h100", "h100 sxm", "h100 80gb hbm3"), 989.5, 450.0, 80,
               "H100 datasheet (SXM5): bf16 1979 sparse, NVLink 900 GB/s"),
    GpuNominal("H100 PCIe", ("h100 pcie",), 756.5, None, 80, "H100 datasheet (PCIe): bf16 1513 sparse"),
    GpuNominal("H100 NVL", ("h100 nvl",), 835.5, None, 94, "H100 NVL datasheet: bf16 1671 sparse"),
    GpuNominal("H800", ("h800",), 989.5, 200.0, 80, "H800 SXM: bf16 as H100 SXM, NVLink 400 GB/s"),
    GpuNominal("H20", ("h20",), 148.0, 450.0, 96, "H20: bf16 148 dense, NVLink 900 GB/s"),
    GpuNominal("A100 SXM", ("a100 sxm", "a100 sxm4"), 312.0, 300.0, 80,
               "A100 datasheet (SXM4): bf16 312 dense, NVLink 600 GB/s"),
    GpuNominal("A100 PCIe", ("a100", "a100 pcie"), 312.0, None, 80, "A100 datasheet (PCIe): bf16 312 dense"),
    GpuNominal("A800 SXM", ("a800 sxm", "a800 sxm4"), 312.0, 200.0, 80, "A800 SXM4: bf16 312 dense, NVLink 400 GB/s"),
    GpuNominal("A800 PCIe", ("a800", "a800 pcie"), 312.0, None, 40, "A800 PCIe: bf16 312 dense"),
    GpuNominal("L40S", ("l40s",), 362.05, None, 48, "L40S datasheet: bf16 733 sparse"),
    GpuNominal("L20", ("l20",), 119.5, None, 48, "L20: bf16 239 sparse"),
    GpuNominal("L4", ("l4",), 121.0, None, 24, "L4 datasheet: bf16 242 sparse"),
)
"""The parameter table. Tesla T4 has no bf16 tensor cores: no entry, so its bf16 figures are not judged."""


def _normalise(name: str) -> str:
    return " " + re.sub(r"[\s_\-]+", " ", name.lower()).strip() + " "


def lookup(device_name: str | None) -> GpuNominal | None:
    """The table entry for a device name (longest whole-word pattern match), or None when unknown."""
    if not device_name:
        return None
    text = _normalise(device_name)
    best: tuple[int, GpuNominal] | None = None
    for entry in NOMINAL:
        for pattern in entry.patterns:
            if _normalise(pattern) in text and (best is None or len(pattern) > best[0]):
                best = (len(pattern), entry)
    return best[1] if best else None
