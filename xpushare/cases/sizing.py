"""Workload sizes that fit the hardware: the PERF cases' fixed-work workloads get an iteration count that makes
one run without a quota last at least ``perf_size_target_s`` on the GPU under test.

Why: the workloads' iteration counts are the legacy T4 values on every GPU model (workloads/README.md), so a
faster GPU finishes sooner; on an H100, W6 ran 46.65 s, under PERF-001's own 60 s minimum
(``perf_baseline_min_s``), and the case was ERROR. The rate of the GPU comes from

* the GPU model (inventory ``gpu.model``) when :data:`ADD_BANDWIDTH` knows it: the add loops (W2, W6) move
  ``3 x 4 x n^2`` bytes per iteration (read x and y, write z; fp32), so their rate is bandwidth / bytes;
* else a short calibration: one pod of the workload with ``--iters`` :data:`CALIBRATION_ITERS` (times 8 while it
  lasts under :data:`CALIBRATION_MIN_S`, at most :data:`CALIBRATION_TRIES` pods), whose runtime line gives the
  rate and whose INFO line the GPU it ran on (parsers/workload_info.py).

Iteration counts only grow: where the default already lasts long enough (T4, A800) the legacy count stays, so
runs stay comparable with the baselines taken with it. An ``--iters`` in ``workload_args`` is the user's choice
and is kept. Everything decided is recorded in ``plan["sizing"][workload]``.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from collections.abc import Mapping
from functools import cache
from typing import Any

from xpushare.cases.base import CaseRun
from xpushare.data import workloads_dir
from xpushare.parsers.pod_log import runtime_seconds
from xpushare.parsers.workload_info import parse_info

FP32_BYTES = 4

ADD_BANDWIDTH: dict[str, float] = {
    "Tesla T4": 0.24e12,
    "A800": 1.40e12,
    "H100": 3.02e12,
    "H200": 4.32e12,
}
"""Effective memory bandwidth of the add loop in bytes/s per workloads defaults row (``_common.MODEL_DEFAULTS``).

T4: seed 004's ``pytorch-small-baseline`` (W2, 40000 adds of n 14000) took 392 s. H100: W6 (60000 adds of
n 14000) took 46.65 s on an H100 80GB HBM3 (docs/runs/2026-11-25-real-sut-h100). A800 (40 GB, 1.56 TB/s) and
H200 (4.8 TB/s): the nominal figure times the H100's measured share of its nominal 3.35 TB/s (0.90)."""

ITERATED = ("w2_medium_add", "w6_fixed_add", "w7_fixed_matmul")
"""Workloads whose amount of work is ``--iters`` (the ones sized here)."""
ADD_LOOPS = ("w2_medium_add", "w6_fixed_add")
"""Of those, the add loops whose rate follows from the bandwidth table (W7 is a matmul: calibrated)."""

CALIBRATION_ITERS = 1000
CALIBRATION_MIN_S = 2.0
CALIBRATION_TRIES = 3
CALIBRATION_TIMEOUT_S = 600.0


@cache
def _workload_defaults() -> dict[str, dict[str, dict[str, float]]]:
    """The workloads' own defaults table (``_common.MODEL_DEFAULTS``, workloads/README.md), loaded from the
    shipped workload directory so that one table serves both the scripts and this module."""
    path = workloads_dir() / "_common.py"
    spec = importlib.util.spec_from_file_location("xpushare_workload_common", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while they are built
    spec.loader.exec_module(module)
    table: dict[str, dict[str, dict[str, float]]] = module.MODEL_DEFAULTS
    return table


def table_key(workload: str) -> str:
    """``w6_fixed_add`` -> ``w6`` (the defaults table's workload key)."""
    return workload.split("_", 1)[0]


def known_model(gpu_model: str | None) -> str | None:
    """The :data:`ADD_BANDWIDTH` row of an inventory GPU model (case-insensitive substring, e.g. ``t4`` or
    ``NVIDIA H100 80GB HBM3``); None when unknown or not given."""
    if not gpu_model:
        return None
    low = gpu_model.lower()
    hits = [k for k in ADD_BANDWIDTH if k.lower() in low or low in k.lower()]
    return max(hits, key=len) if len(hits) >= 1 else None


def default_size(model: str, workload: str, flag: str) -> float | None:
    """A workload's default ``flag`` (``n``, ``iters``) on a defaults-table row; None where it has none."""
    row = _workload_defaults().get(model) or {}
    value = (row.get(table_key(workload)) or {}).get(flag)
    return float(value) if value is not None else None


def flag_value(args: tuple[str, ...], flag: str) -> str | None:
    """The last value of ``--flag`` in an argv (``--n 2048`` or ``--n=2048``); None when absent."""
    value: str | None = None
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value


def add_rate(model: str, n: float) -> float:
    """Iterations per second of an add loop of side ``n`` on ``model`` (bandwidth / 12 n^2 bytes)."""
    return ADD_BANDWIDTH[model] / (3 * FP32_BYTES * n * n)


def iters_for(rate: float, target_s: float) -> int:
    """The iteration count (a multiple of 1000, at least 1000) that lasts at least ``target_s`` seconds at ``rate``
    iterations per second.

    Raises:
        ValueError: ``rate`` not positive.
    """
    if rate <= 0:
        raise ValueError(f"iteration rate must be positive, got {rate}")
    return max(1000, int(math.ceil(target_s * rate / 1000.0) * 1000))


def calibrate(run: CaseRun, workload: str) -> dict[str, Any]:
    """Measure the workload's iteration rate with short pods (no quota) on the case's target GPU.

    Returns ``{"iters_per_s", "model", "device_name", "pods": [...], "samples": [[iters, seconds], ...]}``;
    ``iters_per_s`` is None when no pod printed a runtime (the caller keeps the defaults). The pods are
    evidence of the case (harvested with the others) but not in ``plan["pods"]``, so no judgment counts them.
    Raises what the backend raises for pods that cannot be started.
    """
    out: dict[str, Any] = {"iters_per_s": None, "model": None, "device_name": None, "pods": [], "samples": []}
    iters = CALIBRATION_ITERS
    node = run.backend.parts.placement.colocation_target()[0]
    for attempt in range(1, CALIBRATION_TRIES + 1):
        spec = run.pod(f"calib{attempt}", workload, node=node, args=("--iters", str(iters), "--no-progress"))
        out["pods"].append(spec.name)
        run.backend.start_pods([spec])
        run.backend.wait_terminal([spec.name], CALIBRATION_TIMEOUT_S)
        text = run.backend.read_log(spec.name)
        seconds = runtime_seconds(text)
        info = parse_info(text)
        if info is not None:
            out["model"], out["device_name"] = info.model, info.name
        if seconds is None or seconds <= 0:
            break
        out["samples"].append([iters, round(seconds, 3)])
        out["iters_per_s"] = iters / seconds
        if seconds >= CALIBRATION_MIN_S:
            break
        iters *= 8
    return out


def size_target_s(params: dict[str, Any] | Any) -> float:
    """Seconds one run without a quota should last: ``perf_size_target_s``, else 1.5 x ``perf_baseline_min_s``."""
    explicit = params.get("perf_size_target_s")
    return float(explicit) if explicit else 1.5 * float(params["perf_baseline_min_s"])


def fit_to_hardware(run: CaseRun, workload: str) -> dict[str, Any]:
    """Give the case's pods of ``workload`` an ``--iters`` that makes one run last >= the size target.

    Sets ``run.sized_args[workload]`` when the count must grow and records the decision in
    ``run.plan["sizing"][workload]`` (``source``: ``workload_args``, ``off``, ``model <row>``, ``calibration``;
    ``target_s``; ``default_iters``; ``iters``; ``expected_s``: one run's expected seconds without a quota).
    Returns that record. ``perf_autosize: false`` turns sizing off.
    """
    record: dict[str, Any] = {"target_s": size_target_s(run.params)}
    run.plan.setdefault("sizing", {})[workload] = record
    args = run.workload_args(workload)
    if workload not in ITERATED:
        record["source"] = "not sized (its work is not an iteration count)"
        return record
    if flag_value(args, "--iters") is not None:
        record.update(source="workload_args", iters=int(float(flag_value(args, "--iters") or 0)))
        return record
    if run.params.get("perf_autosize") is False:
        record["source"] = "off (perf_autosize: false)"
        return record
    model = known_model(run.cluster.gpu_model)
    rate: float | None = None
    if model and workload in ADD_LOOPS:
        n_arg = flag_value(args, "--n")
        n = float(n_arg) if n_arg else default_size(model, workload, "n")
        if n:
            rate = add_rate(model, n)
            record["source"] = f"model {model}"
    if rate is None:
        cal = calibrate(run, workload)
        record.update(source="calibration", calibration=cal)
        rate = cal["iters_per_s"]
        model = model or cal["model"]
    default_iters = default_size(model, workload, "iters") if model else None
    record["default_iters"] = int(default_iters) if default_iters else None
    if not rate:
        record["note"] = "no rate measured: defaults kept"
        return record
    record["iters_per_s"] = round(rate, 3)
    target = record["target_s"]
    if default_iters and default_iters / rate >= target:
        record.update(iters=int(default_iters), expected_s=round(default_iters / rate, 1))
        return record
    iters = iters_for(rate, target)
    run.sized_args[workload] = ("--iters", str(iters))
    record.update(iters=iters, expected_s=round(iters / rate, 1))
    return record


# ----------------------------------------------------------------------------------- expected case durations

LAUNCH_BOUND_ADDS_PER_S = 47000.0
"""Adds per second of the PyTorch add loop when kernel launches, not the bandwidth, limit it (small ``--n``): an
H100 80GB HBM3 ran W2 at n 2048 at 46717-47181 adds/s (docs/runs/2026-11-27-k8s-lab-real-gpu-h100)."""
POD_OVERHEAD_S = 5.0
"""Seconds a sequential pod adds besides its workload (scheduling, interpreter and torch import, CUDA context, log
harvest): the lab on an H100 ran FUNC-008 (3 pods, 14.7 s of workload) in 30.5 s."""

#: Quota cases whose duration follows the workload's size: case id -> (workload or the parameter naming it, the
#: parameter of its core quotas (percent; a list of ints, or of mappings with ``core``), how the quota pods run:
#: ``sequential`` one after the other or ``pair`` together on one GPU, baseline pods without a quota run first).
QUOTA_CASE_WORK: dict[str, tuple[str, str | tuple[int, ...], str, int]] = {
    "FUNC-008": ("w2_medium_add", "func008_quotas", "sequential", 0),
    "FUNC-009": ("w2_medium_add", (30, 60), "pair", 0),
    "COMBO-002": ("w2_medium_add", "combo002_cores", "pair", 0),
    "COMBO-003": ("w2_medium_add", "combo003_quotas", "pair", 0),
    "PERF-003": ("perf003_workload", "perf003_quotas", "sequential", 1),
    "PERF-004": ("perf_workload", "perf004_quotas", "pair", 1),
    "PERF-011": ("perf_workload", "perf011_quotas", "sequential", 1),
}


def expected_adds_per_s(model: str, n: float) -> float:
    """Adds per second of an add loop of side ``n`` on ``model``: the bandwidth's rate (:func:`add_rate`), at
    most :data:`LAUNCH_BOUND_ADDS_PER_S`."""
    return min(add_rate(model, n), LAUNCH_BOUND_ADDS_PER_S)


def expected_run_s(workload: str, workload_args: Mapping[str, Any], gpu_model: str | None) -> float | None:
    """Seconds one run of an add loop (W2, W6) lasts without a quota on ``gpu_model``: its ``--iters`` and ``--n``
    (``workload_args``, else the model's defaults) at :func:`expected_adds_per_s`; None for another workload or
    an unknown model."""
    model = known_model(gpu_model)
    if model is None or workload not in ADD_LOOPS:
        return None
    args = tuple(str(a) for a in (workload_args.get(workload) or ()))
    n = float(flag_value(args, "--n") or default_size(model, workload, "n") or 0)
    iters = float(flag_value(args, "--iters") or default_size(model, workload, "iters") or 0)
    if n <= 0 or iters <= 0:
        return None
    return iters / expected_adds_per_s(model, n)


def _quotas(value: Any) -> list[float]:
    out = []
    for item in value or ():
        core = item.get("core") if isinstance(item, Mapping) else item
        if core is not None:
            out.append(float(core))
    return out


def _p(params: Mapping[str, Any], name: str) -> float:
    value = params.get(name)
    return float(value) if isinstance(value, (int, float)) else 0.0


#: Cases whose length is a time window of their own parameters, not the workload's size: case id -> (the windows'
#: parameters summed, phases of ``dynamic_step_s``: a count, or the parameter whose list's length, plus one for the
#: initial phase, is the count). Checked against the lab on an H100 (docs/runs/2026-11-27-k8s-lab-real-gpu-h100):
#: the estimates are 0.7 to 1.7 times the measured durations (MET-005's latency window is an upper bound).
WINDOW_CASE_TIME: dict[str, tuple[tuple[str, ...], int | str]] = {
    "FUNC-010": (("dynamic_probe_start_delay_s",), "func010_memory_limits"),
    "FUNC-011": (("dynamic_probe_start_delay_s",), "func011_memory_limits"),
    "FUNC-012": ((), 3),  # 30 %, then 80 and 100 %
    "COMBO-006": ((), 4),  # the start, then 80, 40 and 100 %
    "PERF-007": (("perf007_pre_s", "perf007_post_s", "perf007_settle_s"), 0),
    "MET-003": (("met003_window_s",), 0),
    "MET-005": (("met005_before_s", "met005_max_latency_s"), 0),
    "MET-006": (("met006_duration_s",), 0),
    "MET-007": (("met007_duration_s",), 0),
    "MET-008": (("met008_duration_s",), 0),
    "STAB-003": (("stab_duration_s", "stab_pod_duration_s"), 0),
    "STAB-001": (("stab_duration_s",), 0),
    "STAB-002": (("stab_duration_s",), 0),
    "STAB-004": (("stab_duration_s",), 0),
}


def window_case_duration(case_id: str, params: Mapping[str, Any]) -> tuple[float, str] | None:
    """Expected seconds of a case whose length is its own time windows (:data:`WINDOW_CASE_TIME`): the windows'
    parameters, ``dynamic_step_s`` per phase, one :data:`POD_OVERHEAD_S`; None for another case."""
    shape = WINDOW_CASE_TIME.get(case_id)
    if shape is None:
        return None
    names, phases = shape
    count = phases if isinstance(phases, int) else len(params.get(phases) or ())
    seconds = sum(_p(params, n) for n in names) + count * _p(params, "dynamic_step_s") + POD_OVERHEAD_S
    words = [*names, f"{count} x dynamic_step_s"] if count else list(names)
    return round(seconds, 1), f"time windows: {' + '.join(words)} + {POD_OVERHEAD_S:g} s"


def sized_case_duration(case_id: str, params: Mapping[str, Any], gpu_model: str | None) -> tuple[float, str] | None:
    """Expected seconds of a quota case from the workload sizes (before it runs, no host contacted), and the basis
    in words; None for a case whose duration is not a function of the sizes (:data:`QUOTA_CASE_WORK`) or where
    the model is unknown.

    A run at core quota q lasts ``run_s / (q/100)``; sequential pods add up, a pair lasts its slowest pod, each
    pod (baselines included, ``perf_baseline_bracket`` doubling them) adds :data:`POD_OVERHEAD_S`."""
    shape = QUOTA_CASE_WORK.get(case_id)
    if shape is None:
        return None
    workload, quota_source, how, baselines = shape
    if workload in params:
        chosen = str(params[workload] or "auto")
        workload = "w6_fixed_add" if chosen == "auto" else chosen
    run_s = expected_run_s(workload, params.get("workload_args") or {}, gpu_model)
    if run_s is None:
        return None
    quotas = list(quota_source) if isinstance(quota_source, tuple) else _quotas(params.get(quota_source))
    if not quotas:
        return None
    runs = [run_s * 100.0 / q for q in quotas if q > 0]
    pods = baselines * (2 if params.get("perf_baseline_bracket") else 1)
    if how == "pair":
        seconds, pods = max(runs) + pods * run_s, pods + 1
    else:
        seconds, pods = sum(runs) + pods * run_s, pods + len(runs)
    seconds += pods * POD_OVERHEAD_S
    return (round(seconds, 1), f"sizing: {workload} {run_s:.1f} s per run on {known_model(gpu_model)} at quotas "
            f"{'/'.join(f'{q:g}' for q in quotas)} ({how}), {pods} pod(s) x {POD_OVERHEAD_S:g} s")
