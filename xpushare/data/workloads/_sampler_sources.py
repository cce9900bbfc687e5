"""The node sampler's telemetry sources: the samples, nvidia-smi's CSV parsed, and the NVML and nvidia-smi
backends (:func:`open_backend` finds one that works).

Part of the workload scripts' folder, imported by ``node_sampler.py`` from its own directory; standard
library only (``pynvml`` is imported when NVML is tried). Units: memory in bytes, utilisation in percent
(0-100), an unavailable value is None. Specs: docs/sut/metrics.md §no-nvml (NVML may be unavailable),
docs/sut/workloads.md §dmon
(nvidia-smi tooling).
"""

from __future__ import annotations

import contextlib
import csv
import io
import math
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30

NO_NVML_ENV = "XPUSHARE_SAMPLER_NO_NVML"
"""Environment variable: set (non-empty, not "0") to skip NVML and use the nvidia-smi fallback."""
SMI_GPU_FIELDS = ("index", "uuid", "utilization.gpu", "memory.used", "memory.total")
"""Field order of the fallback's --query-gpu (also the order assumed for header-less input)."""
SMI_APPS_FIELDS = ("pid", "gpu_uuid", "used_memory")
"""Field order of the fallback's --query-compute-apps (also the order assumed for header-less input)."""

_FIELD_ALIASES = {"used_gpu_memory": "used_memory"}  # nvidia-smi's header name for the used_memory query

_MEM_UNITS = {"": MIB, "b": 1, "kib": KIB, "mib": MIB, "gib": GIB}
_QUANTITY = re.compile(r"^([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z%]*)$")


# ---------------------------------------------------------------------------------------------------------
# Samples
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuSample:
    """One GPU at one instant.

    Attributes:
        gpu_index: NVML / nvidia-smi index (>= 0).
        uuid: ``GPU-...`` identifier.
        sm_util_pct: ``utilization.gpu`` in percent (0-100), None when unavailable.
        mem_used_bytes, mem_total_bytes: device memory in bytes, None when unavailable.
    """

    gpu_index: int
    uuid: str
    sm_util_pct: float | None
    mem_used_bytes: int | None
    mem_total_bytes: int | None


@dataclass(frozen=True)
class ProcSample:
    """One compute process on one GPU.

    Attributes:
        gpu_index: index of its GPU, None when its UUID matches no GPU of the same sample.
        pid: process id as the driver reports it (the host pid unless the sampler shares the host's pid
            namespace, spec docs/sut/README.md §pitfalls item 4).
        used_bytes: GPU memory used by the process in bytes, None when unavailable.
        gpu_uuid: the GPU's UUID as reported ("" when the source gives none).
    """

    gpu_index: int | None
    pid: int
    used_bytes: int | None
    gpu_uuid: str = ""


@dataclass
class Sample:
    """Everything read at one instant: ``timestamp`` (Unix seconds), GPU rows, process rows, and non-fatal
    error messages (e.g. a field NVML does not support)."""

    timestamp: float
    gpus: list[GpuSample]
    procs: list[ProcSample]
    errors: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------------------
# nvidia-smi CSV parsing (pure functions)
# ---------------------------------------------------------------------------------------------------------


def is_missing(text: str) -> bool:
    """True for an empty or unavailable nvidia-smi value: ``""``, ``N/A``, ``[N/A]``, ``[Not Supported]``,
    ``[Insufficient Permissions]`` and any other bracketed word."""
    t = text.strip()
    return t == "" or t.upper() == "N/A" or (t.startswith("[") and t.endswith("]"))


def parse_mem_bytes(text: str, default_unit: str = "MiB") -> int | None:
    """Parse an nvidia-smi memory value into bytes.

    Args:
        text: ``"143771 MiB"`` (csv with units), ``"143771"`` (``nounits``), ``"1.5 GiB"``, ``"[N/A]"``.
        default_unit: unit of a bare number; nvidia-smi reports memory in MiB.

    Returns:
        Bytes as int (rounded), or None for a missing value (:func:`is_missing`).

    Raises:
        ValueError: not a number with an optional B/KiB/MiB/GiB unit, or negative.
    """
    if is_missing(text):
        return None
    m = _QUANTITY.match(text.strip())
    if m is None:
        raise ValueError(f"not a memory value: {text!r}")
    unit = (m.group(2) or default_unit).lower()
    if unit not in _MEM_UNITS:
        raise ValueError(f"unknown memory unit in {text!r}")
    value = float(m.group(1))
    if value < 0 or not math.isfinite(value):
        raise ValueError(f"negative or non-finite memory value: {text!r}")
    return round(value * _MEM_UNITS[unit])


def parse_percent(text: str) -> float | None:
    """Parse a utilisation value: ``"100 %"`` or ``"100"`` -> 100.0 (percent); None when missing.

    Raises:
        ValueError: not a number with an optional ``%``, or outside 0..100.
    """
    if is_missing(text):
        return None
    m = _QUANTITY.match(text.strip())
    if m is None or m.group(2) not in ("", "%"):
        raise ValueError(f"not a percentage: {text!r}")
    value = float(m.group(1))
    if not 0.0 <= value <= 100.0:
        raise ValueError(f"percentage out of range: {text!r}")
    return value


def normalize_field(name: str) -> str:
    """Header cell -> query field name: ``" memory.total [MiB]"`` -> ``"memory.total"``,
    ``"used_gpu_memory [MiB]"`` -> ``"used_memory"``, ``"utilization.gpu [%]"`` -> ``"utilization.gpu"``."""
    base = re.sub(r"\s*\[[^\]]*\]\s*$", "", name.strip()).strip().lower()
    return _FIELD_ALIASES.get(base, base)


def _is_int(text: str) -> bool:
    try:
        int(text.strip())
    except ValueError:
        return False
    return True


def split_smi_csv(text: str, default_fields: Sequence[str]) -> list[dict[str, str]]:
    """Split nvidia-smi ``--format=csv[,noheader][,nounits]`` output into rows keyed by field name.

    Args:
        text: the whole output. A first line whose first cell is not an integer is a header; its cells are
            mapped with :func:`normalize_field`. Without a header, ``default_fields`` gives the order.
            Blank lines are skipped.
        default_fields: the field order of the query that produced header-less output.

    Returns:
        One dict per data row, values stripped (units still attached).

    Raises:
        ValueError: a data row whose cell count differs from the header / ``default_fields``.
    """
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    rows = list(csv.reader(io.StringIO("\n".join(lines)), skipinitialspace=True))
    fields: list[str] = list(default_fields)
    if rows and rows[0] and not _is_int(rows[0][0]):
        fields = [normalize_field(cell) for cell in rows[0]]
        rows = rows[1:]
    out = []
    for row in rows:
        if len(row) != len(fields):
            raise ValueError(f"nvidia-smi row has {len(row)} fields, expected {len(fields)}: {row!r}")
        out.append({name: row[i].strip() for i, name in enumerate(fields)})
    return out


def parse_query_gpu_csv(text: str) -> list[GpuSample]:
    """Parse ``nvidia-smi --query-gpu=...`` CSV output into GPU rows.

    Args:
        text: output with or without header and units. Needs the fields ``index`` and ``uuid``;
            ``utilization.gpu``, ``memory.used``, ``memory.total`` are optional (None when absent or
            missing); other fields (``name``, ``driver_version``...) are ignored. Header-less input must
            use the order of :data:`SMI_GPU_FIELDS`.

    Returns:
        GPU rows in output order; memory in bytes (MiB x 1048576), utilisation in percent.

    Raises:
        ValueError: malformed rows, a missing ``index``/``uuid`` column, unparsable values.
    """
    out = []
    for row in split_smi_csv(text, SMI_GPU_FIELDS):
        if "index" not in row or "uuid" not in row:
            raise ValueError(f"nvidia-smi --query-gpu output lacks index/uuid: {sorted(row)}")
        out.append(
            GpuSample(
                gpu_index=int(row["index"]),
                uuid=row["uuid"],
                sm_util_pct=parse_percent(row.get("utilization.gpu", "")),
                mem_used_bytes=parse_mem_bytes(row.get("memory.used", "")),
                mem_total_bytes=parse_mem_bytes(row.get("memory.total", "")),
            )
        )
    return out


def parse_compute_apps_csv(text: str, uuid_to_index: Mapping[str, int]) -> list[ProcSample]:
    """Parse ``nvidia-smi --query-compute-apps=...`` CSV output into process rows.

    Args:
        text: output with or without header and units (``used_gpu_memory [MiB]`` is the header of the
            ``used_memory`` field). Needs ``pid``; ``gpu_uuid`` and ``used_memory`` are optional. Header-less
            input must use the order of :data:`SMI_APPS_FIELDS`. Rows whose pid is not an integer (e.g.
            a "No running processes found" message) are skipped.
        uuid_to_index: GPU UUID -> index, from the GPU query of the same sample.

    Returns:
        Process rows; ``gpu_index`` None when the UUID is unknown; ``used_bytes`` in bytes.

    Raises:
        ValueError: malformed rows or unparsable memory values.
    """
    out = []
    lines = [line for line in text.splitlines() if line.strip()]
    if lines and "," not in lines[0] and not _is_int(lines[0]):
        return []  # a free-text message such as "No running processes found"
    for row in split_smi_csv("\n".join(lines), SMI_APPS_FIELDS):
        pid_text = row.get("pid", "")
        if not _is_int(pid_text):
            continue
        uuid = row.get("gpu_uuid", "")
        out.append(
            ProcSample(
                gpu_index=uuid_to_index.get(uuid),
                pid=int(pid_text),
                used_bytes=parse_mem_bytes(row.get("used_memory", "")),
                gpu_uuid=uuid,
            )
        )
    return out


# ---------------------------------------------------------------------------------------------------------
# Backends
# ---------------------------------------------------------------------------------------------------------


class Backend:
    """A telemetry source: ``name`` for sampler_source.txt, ``sample()`` and ``close()``.

    A plain base class rather than typing.Protocol so that the sampler runs on Python 3.7.
    """

    name = "none"

    def sample(self) -> Sample:
        """Read all GPUs and processes now. Raises on a failure of the whole sample."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the source."""


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class NvmlBackend(Backend):
    """NVML through a pynvml-compatible module (``nvidia-ml-py``'s ``pynvml``, or a fake in tests).

    Args:
        nvml: the module; ``nvmlInit()`` is called here.

    Raises:
        Exception: whatever ``nvmlInit`` raises (``pynvml.NVMLError_LibraryNotFound``, ``..._DriverNotLoaded``).
    """

    name = "nvml"

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        nvml.nvmlInit()
        self._open = True

    def sample(self) -> Sample:
        """Read every GPU: ``nvmlDeviceGetUUID``, ``...GetUtilizationRates().gpu`` (percent),
        ``...GetMemoryInfo()`` (bytes) and ``...GetComputeRunningProcesses()`` (pid, usedGpuMemory bytes).

        A failing per-GPU field becomes None plus a message in ``Sample.errors``.

        Raises:
            Exception: ``nvmlDeviceGetCount`` / ``nvmlDeviceGetHandleByIndex`` / ``nvmlDeviceGetUUID`` errors.
        """
        nvml = self.nvml
        sample = Sample(time.time(), [], [])
        for index in range(int(nvml.nvmlDeviceGetCount())):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            uuid = _text(nvml.nvmlDeviceGetUUID(handle))
            util: float | None = None
            used: int | None = None
            total: int | None = None
            try:
                util = float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
            except Exception as exc:
                sample.errors.append(f"NVML utilization of GPU {index}: {type(exc).__name__}: {exc}")
            try:
                mem = nvml.nvmlDeviceGetMemoryInfo(handle)
                used, total = int(mem.used), int(mem.total)
            except Exception as exc:
                sample.errors.append(f"NVML memory of GPU {index}: {type(exc).__name__}: {exc}")
            sample.gpus.append(GpuSample(index, uuid, util, used, total))
            try:
                procs = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
            except Exception as exc:
                sample.errors.append(f"NVML processes of GPU {index}: {type(exc).__name__}: {exc}")
                procs = []
            for proc in procs:
                mem_used = getattr(proc, "usedGpuMemory", None)
                sample.procs.append(ProcSample(index, int(proc.pid), None if mem_used is None else int(mem_used), uuid))
        return sample

    def close(self) -> None:
        """``nvmlShutdown()`` once; errors ignored."""
        if self._open:
            self._open = False
            with contextlib.suppress(Exception):
                self.nvml.nvmlShutdown()


class SmiBackend(Backend):
    """The nvidia-smi fallback.

    Args:
        executable: path of nvidia-smi.
        timeout_s: per-invocation timeout in seconds.
    """

    name = "nvidia-smi"

    def __init__(self, executable: str, timeout_s: float = 10.0) -> None:
        self.executable = executable
        self.timeout_s = timeout_s

    def _run(self, query: str) -> str:
        cmd = [self.executable, query, "--format=csv,noheader,nounits"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=self.timeout_s, check=False)
        if proc.returncode != 0:
            detail = " ".join((proc.stdout + " " + proc.stderr).split())
            raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {detail}")
        return proc.stdout

    def sample(self) -> Sample:
        """Run the two queries (:data:`SMI_GPU_FIELDS`, :data:`SMI_APPS_FIELDS`) and parse them.

        A failing process query leaves ``procs`` empty and adds a message to ``Sample.errors``.

        Raises:
            RuntimeError: the GPU query exits non-zero. subprocess.TimeoutExpired, ValueError (bad output).
        """
        sample = Sample(time.time(), [], [])
        sample.gpus = parse_query_gpu_csv(self._run("--query-gpu=" + ",".join(SMI_GPU_FIELDS)))
        try:
            apps = self._run("--query-compute-apps=" + ",".join(SMI_APPS_FIELDS))
            sample.procs = parse_compute_apps_csv(apps, {g.uuid: g.gpu_index for g in sample.gpus})
        except (RuntimeError, ValueError, subprocess.TimeoutExpired) as exc:
            sample.errors.append(f"nvidia-smi compute apps: {exc}")
        return sample

    def close(self) -> None:
        """Nothing to release."""


def import_pynvml() -> Any:
    """Import and return the ``pynvml`` module. Raises ImportError when nvidia-ml-py is not installed."""
    import pynvml

    return pynvml


def nvml_disabled(environ: Mapping[str, str]) -> bool:
    """True when :data:`NO_NVML_ENV` is set to a non-empty value other than ``"0"``."""
    value = environ.get(NO_NVML_ENV, "")
    return value.strip() not in ("", "0")


def open_backend(
    *,
    disable_nvml: bool,
    smi_command: str,
    smi_timeout_s: float = 10.0,
    nvml_loader: Callable[[], Any] = import_pynvml,
) -> tuple[Backend | None, Sample | None, list[str]]:
    """Find a working source: NVML first, then nvidia-smi; each must deliver a first sample with >= 1 GPU.

    Args:
        disable_nvml: skip NVML (see :func:`nvml_disabled`).
        smi_command: nvidia-smi name (looked up on PATH) or path.
        smi_timeout_s: timeout of one nvidia-smi call, seconds.
        nvml_loader: returns the pynvml module (tests pass a fake).

    Returns:
        ``(backend, first_sample, reasons)``; backend and sample are None when nothing works. ``reasons``
        lists why each skipped source was skipped (``"NVML: NVMLError_LibraryNotFound: ..."``,
        ``"nvidia-smi not found: ..."``). Raises nothing.
    """
    reasons: list[str] = []
    if disable_nvml:
        reasons.append(f"NVML: disabled by {NO_NVML_ENV}={os.environ.get(NO_NVML_ENV, '')!r}")
    else:
        nvml_backend: NvmlBackend | None = None
        try:
            try:
                module = nvml_loader()
            except ImportError as exc:
                raise RuntimeError(f"pynvml not importable ({type(exc).__name__}: {exc})") from exc
            nvml_backend = NvmlBackend(module)
            first = nvml_backend.sample()
            if not first.gpus:
                raise RuntimeError("NVML reports 0 GPUs")
            return nvml_backend, first, reasons
        except Exception as exc:
            reasons.append(f"NVML: {type(exc).__name__}: {exc}")
            if nvml_backend is not None:
                nvml_backend.close()
    path = shutil.which(smi_command)
    if path is None:
        reasons.append(f"nvidia-smi not found: no executable {smi_command!r} on PATH")
        return None, None, reasons
    smi_backend = SmiBackend(path, smi_timeout_s)
    try:
        first = smi_backend.sample()
        if not first.gpus:
            raise RuntimeError("nvidia-smi reports 0 GPUs")
    except Exception as exc:
        reasons.append(f"nvidia-smi failed: {type(exc).__name__}: {exc}")
        return None, None, reasons
    return smi_backend, first, reasons
