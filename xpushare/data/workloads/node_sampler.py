#!/usr/bin/env python3
"""Node sampler: per-GPU utilisation/memory and per-process GPU memory into CSV files.

Runs on a GPU node next to the workloads (standard library, the argument types of `_common.py` and the
sources of `_sampler_sources.py` next to it, plus the `pynvml` module from NVIDIA's `nvidia-ml-py` when
installed). Every --interval-s seconds it appends one row per GPU and one row per compute process,
flushing after every sample, to:

    <out-dir>/gpu.csv    timestamp,gpu_index,uuid,sm_util_pct,mem_used_bytes,mem_total_bytes
    <out-dir>/procs.csv  timestamp,gpu_index,pid,used_bytes
    <out-dir>/pids.csv   timestamp,pid,hostname,pod_uid

pids.csv names each compute process once, when it is first seen: its HOSTNAME variable (in Kubernetes the
pod's name, set by the container runtime) from /proc/<pid>/environ, and the pod UID in its cgroup path
(`.../pod<uid>/...`) from /proc/<pid>/cgroup; empty where unreadable. It is how a pod is found in NVML's
process list without asking the system under test.

timestamp is Unix time in seconds (float, 3 decimals) taken when the sample starts; sm_util_pct is the
NVML/nvidia-smi `utilization.gpu` percentage (0-100); memory values are bytes; an unavailable value is an
empty field. A header is written when a file is new or empty; existing files are appended to.

Sources, in order:
  1. NVML through pynvml (skipped when the environment variable XPUSHARE_SAMPLER_NO_NVML is set to a
     non-empty value other than "0"; the tests use it to force the fallback);
  2. `nvidia-smi --query-gpu=index,uuid,utilization.gpu,memory.used,memory.total --format=csv,noheader,
     nounits` and `nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader,nounits`.
The source used and the reasons for skipping NVML go to <out-dir>/sampler_source.txt. Errors while
sampling (each distinct message once) go to <out-dir>/errors.txt and stderr; sampling continues.

With no GPU at all (NVML unusable and nvidia-smi missing or failing) it writes <out-dir>/no_gpu.txt with
the reasons (e.g. the NVMLError text and "nvidia-smi not found") and exits 0: the absence of a GPU is
recorded as evidence rather than reported as a failure.

Stops after --count samples, after --duration-s seconds, or on SIGTERM/SIGINT (files flushed and closed,
exit 0). Exit 1 on an unexpected error (e.g. --out-dir not writable), 2 on a usage error.

Specs: docs/sut/metrics.md §no-nvml (NVML may be unavailable), docs/sut/workloads.md §dmon (nvidia-smi tooling),
docs/sut/README.md §pitfalls item 4
(NVIDIA_VISIBLE_DEVICES / hostPID for NVML and host pids); seed 000 §5.2 (per-GPU memory baselines).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import math
import os
import re
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import FrameType
from typing import Any, TextIO

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # _common.py, _sampler_sources.py sit here
import _common as c
from _sampler_sources import Sample, import_pynvml, nvml_disabled, open_backend

GPU_CSV = "gpu.csv"
PROCS_CSV = "procs.csv"
NO_GPU_TXT = "no_gpu.txt"
SOURCE_TXT = "sampler_source.txt"
ERRORS_TXT = "errors.txt"

GPU_COLUMNS = ("timestamp", "gpu_index", "uuid", "sm_util_pct", "mem_used_bytes", "mem_total_bytes")
PROC_COLUMNS = ("timestamp", "gpu_index", "pid", "used_bytes")
PIDS_CSV = "pids.csv"
PID_COLUMNS = ("timestamp", "pid", "hostname", "pod_uid")
_POD_UID = re.compile(r"pod([0-9a-fA-F]{8}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{12})")


def pid_identity(pid: int, proc_root: str = "/proc") -> tuple[str, str]:
    """``(HOSTNAME, pod UID)`` of host process ``pid`` from ``/proc/<pid>/environ`` and ``/proc/<pid>/cgroup``
    (``""`` for what cannot be read: the process is gone, or belongs to another user)."""
    hostname = uid = ""
    try:
        with open(os.path.join(proc_root, str(pid), "environ"), "rb") as fh:
            for entry in fh.read().split(b"\0"):
                if entry.startswith(b"HOSTNAME="):
                    hostname = entry[len(b"HOSTNAME="):].decode("utf-8", errors="replace")
    except OSError:
        pass
    try:
        with open(os.path.join(proc_root, str(pid), "cgroup"), encoding="utf-8", errors="replace") as fh:
            m = _POD_UID.search(fh.read())
            uid = m.group(1).replace("_", "-") if m else ""
    except OSError:
        pass
    return hostname, uid


# ---------------------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------------------


def _cell(value: float | int | str | None) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    return str(value)


def gpu_rows(sample: Sample) -> list[list[str]]:
    """CSV cells of ``gpu.csv`` for one sample, in :data:`GPU_COLUMNS` order (None -> empty cell)."""
    ts = f"{sample.timestamp:.3f}"
    return [
        [ts, _cell(g.gpu_index), g.uuid, _cell(g.sm_util_pct), _cell(g.mem_used_bytes), _cell(g.mem_total_bytes)]
        for g in sample.gpus
    ]


def proc_rows(sample: Sample) -> list[list[str]]:
    """CSV cells of ``procs.csv`` for one sample, in :data:`PROC_COLUMNS` order (None -> empty cell)."""
    ts = f"{sample.timestamp:.3f}"
    return [[ts, _cell(p.gpu_index), _cell(p.pid), _cell(p.used_bytes)] for p in sample.procs]


class CsvSink:
    """Appends samples to ``gpu.csv`` and ``procs.csv`` in ``out_dir``, flushing after every sample.

    Raises:
        OSError: the files cannot be opened.
    """

    def __init__(self, out_dir: str, identify: Callable[[int], tuple[str, str]] = pid_identity) -> None:
        self._files: list[TextIO] = []
        self._gpu = self._open(os.path.join(out_dir, GPU_CSV), GPU_COLUMNS)
        self._procs = self._open(os.path.join(out_dir, PROCS_CSV), PROC_COLUMNS)
        self._pids = self._open(os.path.join(out_dir, PIDS_CSV), PID_COLUMNS)
        self._identify = identify
        self._named: set[int] = set()

    def _open(self, path: str, columns: Iterable[str]) -> Any:
        fh = open(path, "a", newline="", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self._files.append(fh)
        writer = csv.writer(fh, lineterminator="\n")
        if fh.tell() == 0:
            writer.writerow(columns)
            fh.flush()
        return writer

    def write(self, sample: Sample) -> None:
        """Append the sample's rows (and a ``pids.csv`` row per process not named yet) and flush the files."""
        self._gpu.writerows(gpu_rows(sample))
        self._procs.writerows(proc_rows(sample))
        for p in sample.procs:
            if p.pid is not None and p.pid not in self._named:
                self._named.add(p.pid)
                self._pids.writerow([f"{sample.timestamp:.3f}", p.pid, *self._identify(p.pid)])
        for fh in self._files:
            fh.flush()

    def close(self) -> None:
        """Flush and close the files (idempotent)."""
        for fh in self._files:
            if not fh.closed:
                fh.flush()
                fh.close()


def _now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def write_no_gpu(out_dir: str, reasons: Sequence[str]) -> str:
    """Write ``no_gpu.txt`` (host, UTC time, one reason per line) and return its path. Raises OSError."""
    path = os.path.join(out_dir, NO_GPU_TXT)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("no GPU telemetry: neither NVML nor nvidia-smi could be used\n")
        fh.write(f"host={socket.gethostname()} time={_now_iso()}\n")
        for reason in reasons:
            fh.write(reason + "\n")
    return path


# ---------------------------------------------------------------------------------------------------------
# Main loop
# ---------------------------------------------------------------------------------------------------------


class StopFlag:
    """Set by SIGTERM/SIGINT (see :meth:`install`); polled by the sampling loop."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def __bool__(self) -> bool:
        return self.signum is not None

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        self.signum = signum

    def install(self) -> None:
        """Route SIGTERM and SIGINT to this flag (main thread only)."""
        signal.signal(signal.SIGTERM, self._handler)
        signal.signal(signal.SIGINT, self._handler)


def build_parser() -> argparse.ArgumentParser:
    """Flags: --out-dir, --interval-s, --duration-s, --count, --nvidia-smi, --smi-timeout-s."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out-dir", default=".", help="directory for the CSV/txt files (created; default .)")
    parser.add_argument("--interval-s", type=c.positive_float, default=1.0, help="seconds between samples (default 1)")
    parser.add_argument(
        "--duration-s",
        type=c.positive_float,
        default=None,
        help="stop once this many seconds have passed since the first sample (default: no limit)",
    )
    parser.add_argument(
        "--count", type=c.positive_int, default=None, help="stop after this many samples (default: no limit)"
    )
    parser.add_argument(
        "--nvidia-smi", default="nvidia-smi", help="nvidia-smi command name or path (default nvidia-smi)"
    )
    parser.add_argument(
        "--smi-timeout-s", type=c.positive_float, default=10.0, help="timeout of one nvidia-smi call (default 10)"
    )
    return parser


def run(
    args: argparse.Namespace,
    stop: StopFlag,
    environ: Mapping[str, str] | None = None,
    nvml_loader: Callable[[], Any] = import_pynvml,
    log: TextIO | None = None,
) -> int:
    """Sample until ``--count``/``--duration-s``/``stop``; the body of :func:`main`.

    Args:
        args: from :func:`build_parser`.
        stop: polled between samples (at least every 0.2 s while waiting).
        environ: environment for :func:`nvml_disabled` (default ``os.environ``).
        nvml_loader: see :func:`open_backend`.
        log: progress/diagnostic stream (default stderr).

    Returns:
        0 (also when no GPU exists: ``no_gpu.txt`` is written).

    Raises:
        OSError: ``args.out_dir`` cannot be created or written.
    """
    log = log if log is not None else sys.stderr
    env = os.environ if environ is None else environ
    os.makedirs(args.out_dir, exist_ok=True)
    backend, sample, reasons = open_backend(
        disable_nvml=nvml_disabled(env),
        smi_command=args.nvidia_smi,
        smi_timeout_s=args.smi_timeout_s,
        nvml_loader=nvml_loader,
    )
    if backend is None or sample is None:
        path = write_no_gpu(args.out_dir, reasons)
        log.write(f"[XPUSHARE][SAMPLER] no GPU telemetry; wrote {path}: {'; '.join(reasons)}\n")
        return 0
    with open(os.path.join(args.out_dir, SOURCE_TXT), "w", encoding="utf-8") as fh:
        fh.write(f"backend={backend.name}\nstarted={_now_iso()}\nhost={socket.gethostname()}\n")
        for reason in reasons:
            fh.write(f"skipped {reason}\n")
    log.write(f"[XPUSHARE][SAMPLER] backend={backend.name} out_dir={args.out_dir}\n")
    log.flush()
    seen_errors: set[str] = set()
    sink = CsvSink(args.out_dir)
    errors_path = os.path.join(args.out_dir, ERRORS_TXT)

    def record_errors(messages: Iterable[str]) -> None:
        for msg in messages:
            if msg in seen_errors:
                continue
            seen_errors.add(msg)
            log.write(f"[XPUSHARE][SAMPLER][WARN] {msg}\n")
            log.flush()
            with open(errors_path, "a", encoding="utf-8") as efh:
                efh.write(f"{time.time():.3f} {msg}\n")

    try:
        t0 = time.monotonic()
        taken = 0
        tick = 0
        while True:
            if sample is not None:
                sink.write(sample)
                record_errors(sample.errors)
            taken += 1
            if args.count is not None and taken >= args.count:
                break
            if stop:
                break
            now = time.monotonic()
            tick = max(tick + 1, math.floor((now - t0) / args.interval_s))  # skip ticks missed by slow reads
            next_at = t0 + tick * args.interval_s
            if args.duration_s is not None and next_at - t0 > args.duration_s + 1e-9:
                break
            while not stop and time.monotonic() < next_at:
                time.sleep(max(0.0, min(next_at - time.monotonic(), 0.2)))
            if stop:
                break
            try:
                sample = backend.sample()
            except Exception as exc:
                sample = None
                record_errors([f"{backend.name} sample failed: {type(exc).__name__}: {exc}"])
    finally:
        sink.close()
        backend.close()
    if stop:
        log.write(f"[XPUSHARE][SAMPLER] stopped by signal {stop.signum} after {taken} samples\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: parse ``argv`` (without the program name), install signal handlers, :func:`run`.

    Returns:
        0 on success (including "no GPU"), 1 on an unexpected error (traceback on stderr).
    """
    stop = StopFlag()
    stop.install()  # first, so that a SIGTERM during start-up already ends with exit 0
    args = build_parser().parse_args(argv)
    try:
        return run(args, stop)
    except Exception:
        traceback.print_exc(file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
