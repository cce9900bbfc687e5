"""The memory probe on the simulated GPU without the SUT: each allocation path the simulator implements counts
device memory like ``cuMemAlloc_v2`` (refused with CUDA_ERROR_OUT_OF_MEMORY past the card), managed memory alone
may oversubscribe, and a second process sees the first one's memory (NVML free, the probe's cap)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.lab.build import BuildError
from tests.lab.simgpu import SimDevice, build_simgpu, make_uuid, write_config
from tests.paths import REPO_ROOT
from xpushare.parsers.mem_probe import MemProbeLine, parse_text

PROBE = REPO_ROOT / "xpushare" / "data" / "workloads" / "mem_probe.py"
MIB, GIB = 1 << 20, 1 << 30
CONTEXT = 256 * MIB  # the simulator's default per-process context overhead


def _probe(tmp_path: Path, *args: str, nvml: bool = True, preload: Path | None = None) -> MemProbeLine:
    """One probe run on a 2 GiB simulated GPU (``nvml=False``: only libcuda.so.1 on the library path;
    ``preload``: a library in ``LD_PRELOAD``)."""
    if not sys.platform.startswith("linux"):
        pytest.skip("the simulated GPU needs Linux")
    try:
        build = build_simgpu()
    except BuildError as exc:
        if os.environ.get("XPUSHARE_REQUIRE_LAB") == "1":
            raise
        pytest.skip(f"cannot build the simulated GPU: {exc}")
    config = tmp_path / "devices"
    if not config.exists():
        write_config(config, [SimDevice(make_uuid(0), "NVIDIA A100-SXM4-80GB", 2 * GIB, 1e12, 1e12)])
    env = {**os.environ, **build.env(config)}
    env.pop("LD_PRELOAD", None)
    if not nvml:
        only_cuda = tmp_path / "cuda-only"
        only_cuda.mkdir(exist_ok=True)
        if not (only_cuda / "libcuda.so.1").exists():
            (only_cuda / "libcuda.so.1").symlink_to(build.directory / "libcuda.so.1")
        env["LD_LIBRARY_PATH"] = str(only_cuda)
    if preload is not None:
        env["LD_PRELOAD"] = str(preload)
    proc = subprocess.run([sys.executable, str(PROBE), *args], env=env, capture_output=True, text=True, timeout=60)
    (line,) = parse_text(proc.stdout)
    return line


@pytest.mark.parametrize("path", ["cuMemAlloc", "cuMemAllocPitch", "cuMemAllocAsync", "cuMemPool", "cuMemCreate"])
def test_each_device_path_is_refused_past_the_card(tmp_path: Path, path: str) -> None:
    line = _probe(tmp_path, "--path", path, "--max-bytes", str(4 * GIB), "--free-margin-mib", "0")
    assert line.status == "ok" and line.cap_bytes == 2 * GIB - CONTEXT, line  # NVML free: the card less a context
    assert line.accepted_bytes == 2 * GIB - CONTEXT and not line.refused, line
    # without NVML the cap is --max-bytes alone: the driver itself refuses past the card
    over = _probe(tmp_path, "--path", path, "--max-bytes", str(4 * GIB), nvml=False)
    assert over.accepted_bytes == 2 * GIB - CONTEXT and over.refused_bytes == 64 * MIB, over
    assert over.error.endswith("returned CUDA_ERROR_OUT_OF_MEMORY(2)"), over
    assert _probe(tmp_path, "--path", path, nvml=False).status == "unavailable"  # no bound on the card at all


def test_managed_memory_is_capped_by_the_probe_not_by_the_card(tmp_path: Path) -> None:
    line = _probe(tmp_path, "--path", "cuMemAllocManaged", "--max-bytes", str(GIB), "--free-margin-mib", "0")
    assert (line.accepted_bytes, line.refused_bytes, line.error) == (GIB, 0, "none"), line


def test_rounds_and_a_child_process(tmp_path: Path) -> None:
    text_line = _probe(tmp_path, "--path", "child-process", "--quota-bytes", str(256 * MIB), "--free-margin-mib", "0")
    # no SUT: the parent takes its cap (3 x 256 MiB); the child's cap is 3 x 256 MiB too, within the card
    assert text_line.detail == f"parent:{768 * MIB},child:{768 * MIB}" and text_line.accepted_bytes == 1536 * MIB
    line = _probe(tmp_path, "--path", "cuMemAlloc", "--quota-bytes", str(64 * MIB), "--rounds", "1")
    assert line.round == 0 and line.phase == "start" and line.accepted_bytes == 192 * MIB


#: A preloaded NVML that virtualises the device as HAMi-core does: a 1 GiB "card" with 16 MiB free. Its soname is
#: NVML's, so the probe's ``dlopen("libnvidia-ml.so.1")`` gets it, as it gets HAMi-core's hooks.
VIRTUAL_NVML = r"""
typedef struct { unsigned long long total, free, used; } mem_t;
int nvmlInit_v2(void) { return 0; }
int nvmlDeviceGetHandleByUUID(const char *uuid, void **h) { *h = (void *)1; return 0; }
int nvmlDeviceGetCount_v2(unsigned *n) { *n = 1; return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **h) { *h = (void *)1; return 0; }
int nvmlDeviceGetMemoryInfo(void *h, mem_t *m) { m->total = 1ull << 30; m->free = 16ull << 20;
  m->used = m->total - m->free; return 0; }
"""


def test_a_preloaded_library_that_virtualises_nvml_does_not_bound_the_probe(tmp_path: Path) -> None:
    """The probe's bound on the card is read outside the preloaded library (a child process without LD_PRELOAD):
    read inside it, the cap was the virtual 16 MiB free less the margin, 0, and nothing was measured."""
    source = tmp_path / "virtual_nvml.c"
    source.write_text(VIRTUAL_NVML, encoding="utf-8")
    lib = tmp_path / "libvirtual-nvml.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libnvidia-ml.so.1", "-o", str(lib), str(source)],
                   check=True, timeout=60)
    line = _probe(tmp_path, "--path", "cuMemAlloc", "--max-bytes", str(4 * GIB), "--free-margin-mib", "0",
                  preload=lib)
    assert line.status == "ok" and line.cap_bytes == 2 * GIB - CONTEXT, line  # the card's free memory
    assert line.accepted_bytes == 2 * GIB - CONTEXT, line
