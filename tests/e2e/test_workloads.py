"""Tests of the standalone workloads in ``workloads/`` (spec: docs/sut/workloads.md §output, §inline,
docs/sut/README.md §pitfalls item 11).

Every workload runs once as a subprocess on CPU with tiny sizes. The runs start together (module fixture)
so that the ~2 s torch import of each overlaps; the in-process tests below never import torch.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import io
import math
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.paths import REPO_ROOT

WORKLOADS_DIR = REPO_ROOT / "workloads"
sys.path.insert(0, str(WORKLOADS_DIR))

import _common as c  # noqa: E402
import _output as o  # noqa: E402

# Patterns of docs/sut/README.md §pitfalls item 11 / docs/sut/log.md §regex, copied verbatim.
RUNTIME_RE = re.compile(r"--- (?P<sec>[0-9.]+) seconds ---")
PROBE_RE = re.compile(r"\[XPUSHARE\]\[QUOTA_PROBE\] elapsed=([0-9.]+)s it=(\d+) it_per_sec=([0-9.]+)")
TQDM_RE = re.compile(
    r"(?P<pct>\d+)%\|.*?\| (?P<n>\d+)/(?P<total>\d+) \[(?P<elapsed>[0-9:]+)<(?P<remain>[0-9:?]+), "
    r"(?P<rate>[0-9.]+|\?)it/s\]"
)
PROGRESS_PREFIX_RE = re.compile(r"^\[XPUSHARE\]\[INFO\]\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] ")

SCRIPTS = {
    "w1": "w1_large_add.py",
    "w2": "w2_medium_add.py",
    "w3": "w3_idle_add.py",
    "w4": "w4_alloc_free.py",
    "oversub": "oversub.py",
    "w5": "w5_quota_probe.py",
    "w6": "w6_fixed_add.py",
    "w7": "w7_fixed_matmul.py",
}

OVERSUB_TOTAL = 4 * c.MIB
RUNS: dict[str, tuple[str, list[str]]] = {
    "w1": ("w1", ["--n", "64", "--iters", "50"]),
    "w2": ("w2", ["--n", "64", "--iters", "200"]),
    "w3": ("w3", ["--n", "64", "--steps", "3", "--sleep-s", "0.01"]),
    "w4": ("w4", ["--rounds", "5", "--mib", "1", "--report-every", "2"]),
    "w4_hold": ("w4", ["--rounds", "2", "--mib", "1", "--report-every", "0", "--hold-s", "0.2"]),
    # 1.3 x 4 MiB = 5.2 MiB: five whole 1 MiB chunks and a shorter last one
    "oversub": ("oversub", ["--total-bytes", str(OVERSUB_TOTAL), "--factor", "1.3", "--chunk-mib", "1"]),
    "w5": ("w5", ["--n", "64", "--duration-s", "2", "--interval-s", "0.5"]),
    "w6": ("w6", ["--n", "64", "--iters", "200", "--sync-every", "50"]),
    "w7": ("w7", ["--n", "32", "--iters", "20", "--sync-every", "5"]),
    "fail_negative_n": ("w1", ["--n", "-5"]),
    "fail_npu": ("w2", ["--device", "npu", "--n", "64", "--iters", "10"]),
    "fail_huge_alloc": ("w6", ["--n", "10000000", "--iters", "1"]),
    "fail_cudadrv_no_driver": ("w2", ["--device", "cudadrv", "--n", "64", "--iters", "10"]),
}
RUN_ENV: dict[str, dict[str, str]] = {
    # no simulated GPU on the library path (a real libcuda.so.1, if any, is refused too: no simgpuVersion)
    "fail_cudadrv_no_driver": {"LD_LIBRARY_PATH": ""},
}


@dataclass
class Run:
    """Result of one workload subprocess."""

    argv: list[str]
    rc: int
    stdout: str
    stderr: str
    wall_s: float


Commands = dict[str, tuple[list[str], dict[str, str]]]
"""Subprocesses to run: ``{name: (argv, environment)}``."""


def _run_all(commands: Commands, timeout_s: float = 120) -> dict[str, Run]:
    """Start every ``name: (argv, env)`` at once, then wait for each (killed after ``timeout_s``)."""
    procs = {}
    for name, (argv, env) in commands.items():
        # bytes, not text=True: universal newlines would turn the progress separators \r into \n
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        procs[name] = (argv, time.perf_counter(), proc)
    out = {}
    for name, (argv, started, proc) in procs.items():
        try:
            stdout, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
        wall = time.perf_counter() - started
        out[name] = Run(argv, proc.returncode, stdout.decode(), stderr.decode(), wall)
    return out


@pytest.fixture(scope="module")
def runs() -> dict[str, Run]:
    """Start every entry of RUNS at once (``--device cpu`` unless the entry sets a device), then collect."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    commands = {}
    for name, (key, extra) in RUNS.items():
        argv = [sys.executable, str(WORKLOADS_DIR / SCRIPTS[key])]
        argv += extra if "--device" in extra else ["--device", "cpu", *extra]
        commands[name] = (argv, {**env, **RUN_ENV.get(name, {})})
    return _run_all(commands)


def _assert_pass_contract(run: Run) -> float:
    """Exit 0, a PASS line, the last stdout line is the runtime line; returns the runtime in seconds."""
    assert run.rc == 0, f"{run.argv}\nstdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    lines = run.stdout.splitlines()
    assert "PASS" in lines
    runtime_lines = [i for i, line in enumerate(lines) if RUNTIME_RE.search(line)]
    assert runtime_lines, run.stdout
    last = runtime_lines[-1]
    assert last == len(lines) - 1, "the runtime line must be the last stdout line"
    assert lines.index("PASS") < last
    match = RUNTIME_RE.fullmatch(lines[last])
    assert match is not None, lines[last]
    seconds = float(match.group("sec"))
    assert 0.0 < seconds <= run.wall_s
    return seconds


@pytest.mark.parametrize("name", ["w1", "w2", "w3", "w4", "oversub", "w5", "w6", "w7"])
def test_workload_passes_on_cpu(runs: dict[str, Run], name: str) -> None:
    _assert_pass_contract(runs[name])
    assert "Traceback" not in runs[name].stderr


@pytest.mark.parametrize(("name", "total"), [("w1", 50), ("w2", 200), ("w3", 3), ("w6", 200), ("w7", 20)])
def test_progress_line_on_stderr(runs: dict[str, Run], name: str, total: int) -> None:
    progress_lines = [line for line in runs[name].stderr.split("\n") if "%|" in line]
    assert len(progress_lines) == 1, "refreshes are separated by \\r, not newlines"
    segments = progress_lines[0].split("\r")
    for seg in segments:
        assert PROGRESS_PREFIX_RE.match(seg), seg
        assert TQDM_RE.search(seg), seg
    last = TQDM_RE.search(segments[-1])
    assert last is not None
    assert (int(last["pct"]), int(last["n"]), int(last["total"])) == (100, total, total)


def test_w5_prints_quota_probes(runs: dict[str, Run]) -> None:
    run = runs["w5"]
    seconds = _assert_pass_contract(run)
    probes = [PROBE_RE.fullmatch(line) for line in run.stdout.splitlines() if "QUOTA_PROBE" in line]
    assert len(probes) >= 3
    assert all(p is not None for p in probes)
    values = [(float(p[1]), int(p[2]), float(p[3])) for p in probes if p is not None]
    elapsed = [v[0] for v in values]
    its = [v[1] for v in values]
    assert elapsed == sorted(elapsed) and its == sorted(its)
    assert its[0] > 0
    for el, it, rate in values:
        # cumulative average since the loop start (two decimals); elapsed is printed rounded to 0.1 s
        assert it / (el + 0.05) - 0.01 <= rate <= it / (el - 0.05) + 0.01
    # the first line comes after one interval (later only if the process is starved); the last one
    # covers the whole duration
    assert 0.5 <= elapsed[0] <= 1.5
    assert 2.0 <= seconds < 5.0
    assert elapsed[-1] == pytest.approx(seconds, abs=0.06)


def test_w4_reports_rounds(runs: dict[str, Run]) -> None:
    lines = [line for line in runs["w4"].stdout.splitlines() if line.startswith("[XPUSHARE][ALLOC_FREE]")]
    rounds = [int(re.search(r"round=(\d+)", line)[1]) for line in lines]  # type: ignore[index]
    assert rounds == [0, 2, 4, 5]
    assert all(line.endswith("free_bytes=-1 total_bytes=-1") for line in lines)


def test_w4_holds_each_state_and_says_so(runs: dict[str, Run]) -> None:
    """--hold-s: each block, then the freed state, is kept that long, announced first (MET-003's alloc/free loop)."""
    lines = [line for line in runs["w4_hold"].stdout.splitlines() if line.startswith("[XPUSHARE][ALLOC_HOLD]")]
    assert lines == [f"[XPUSHARE][ALLOC_HOLD] round={r} allocated_bytes={b}" for r in (1, 2) for b in (c.MIB, 0)]


def test_oversub_allocates_factor_times_total(runs: dict[str, Run]) -> None:
    out = runs["oversub"].stdout
    plan = re.search(r"total_bytes=(\d+) factor=([0-9.]+) target_bytes=(\d+) chunk_bytes=(\d+) chunks=(\d+)", out)
    assert plan is not None, out
    total, factor, target, chunk, chunks = (int(plan[1]), float(plan[2]), int(plan[3]), int(plan[4]), int(plan[5]))
    assert (total, factor) == (OVERSUB_TOTAL, 1.3)
    assert target == int(1.3 * OVERSUB_TOTAL)
    assert target % chunk != 0, "the run must cover a shorter last chunk"
    assert chunk == c.MIB and chunks == math.ceil(target / chunk)
    allocated = re.search(r"allocated_bytes=(\d+)", out)
    assert allocated is not None and int(allocated[1]) == target - target % 4


def test_negative_size_fails_with_exit_1(runs: dict[str, Run]) -> None:
    run = runs["fail_negative_n"]
    assert run.rc == 1
    assert "PASS" not in run.stdout and not RUNTIME_RE.search(run.stdout)
    assert "must be > 0" in run.stderr


def test_npu_without_torch_npu_fails_with_exit_1(runs: dict[str, Run]) -> None:
    run = runs["fail_npu"]
    assert run.rc == 1
    assert "PASS" not in run.stdout
    assert "NPU not available" in run.stderr
    assert "Traceback" in run.stderr


def test_allocation_failure_surfaces_original_error(runs: dict[str, Run]) -> None:
    run = runs["fail_huge_alloc"]
    assert run.rc == 1
    assert "PASS" not in run.stdout and not RUNTIME_RE.search(run.stdout)
    assert "Traceback" in run.stderr
    # torch's own message text survives (CPU allocator here; "CUDA out of memory" on a GPU)
    assert re.search(r"can't allocate memory|out of memory", run.stderr, re.IGNORECASE), run.stderr


def test_cudadrv_without_simulator_fails_with_exit_1(runs: dict[str, Run]) -> None:
    run = runs["fail_cudadrv_no_driver"]
    assert run.rc == 1
    assert "PASS" not in run.stdout
    assert "CUDA driver not available" in run.stderr


# ---------------------------------------------------------------------------------------------------------
# Device cudadrv on the lab's simulated GPU (tests/lab/simgpu): the CUDA driver API through ctypes, no torch
# ---------------------------------------------------------------------------------------------------------

FAST = 1e15  # FLOP/s and bytes/s of a device whose kernels take no noticeable time
SIM_TOTAL = 16 * c.GIB
SIM_SMALL = 320 * c.MIB  # the simulator charges 256 MiB of context per process: 64 MiB left to allocate
SIM_CONTEXT = 256 * c.MIB


@dataclass(frozen=True)
class SimRun:
    """One workload run on a simulated GPU of its own (own device file, so its own kernel timeline).

    ``args`` exclude ``--device``: ``--device cudadrv`` is added unless ``device`` is None (auto).
    ``flops_per_s`` and ``bytes_per_s`` are the device's speeds (FLOP/s, bytes/s); ``total_bytes`` its memory.
    """

    key: str
    args: tuple[str, ...]
    flops_per_s: float = FAST
    bytes_per_s: float = FAST
    total_bytes: int = SIM_TOTAL
    device: str | None = "cudadrv"


def _add_seconds(n: int, iters: int, bytes_per_s: float) -> float:
    """Simulated seconds of the add workloads: two fills (4·n² bytes each) and ``iters`` adds (3·4·n² bytes)."""
    return (2 * 4 * n * n + iters * 3 * 4 * n * n) / bytes_per_s


W7_N, W7_ITERS = 512, 20
W5_N = 500
SIM_RUNS: dict[str, SimRun] = {
    "w1": SimRun("w1", ("--n", "64", "--iters", "50")),
    "w3": SimRun("w3", ("--n", "64", "--steps", "3", "--sleep-s", "0.01")),
    "w4": SimRun("w4", ("--rounds", "5", "--mib", "1", "--report-every", "2")),
    "w4_keep_cache": SimRun("w4", ("--rounds", "3", "--mib", "1", "--report-every", "1", "--no-empty-cache")),
    "oversub": SimRun("oversub", ("--total-bytes", str(OVERSUB_TOTAL), "--factor", "1.3", "--chunk-mib", "1")),
    "w6": SimRun("w6", ("--n", "64", "--iters", "200", "--sync-every", "50")),
    "w7": SimRun("w7", ("--n", "32", "--iters", "20", "--sync-every", "5")),
    "auto": SimRun("w2", ("--n", "64", "--iters", "10"), device=None),
    # beyond the device's memory: the first 256 MiB buffer, and the fifth 16 MiB chunk
    "oom_w6": SimRun("w6", ("--n", "8192", "--iters", "1"), total_bytes=SIM_SMALL),
    "oom_oversub": SimRun("oversub", ("--factor", "2", "--chunk-mib", "16"), total_bytes=SIM_SMALL),
}
"""Functional runs on fast simulated GPUs, all started at once (module fixture ``sim_runs``)."""

SIM_TIMED: dict[str, tuple[SimRun, float]] = {
    # (run, seconds of simulated work it is sized to, fills included)
    "w2_1s": (SimRun("w2", ("--n", "1000", "--iters", "100"), bytes_per_s=_add_seconds(1000, 100, 1.0)), 1.0),
    "w6_2s": (SimRun("w6", ("--n", "1000", "--iters", "100", "--sync-every", "10"),
                     bytes_per_s=_add_seconds(1000, 100, 2.0)), 2.0),
    # compute-bound: 2·n³ FLOPs per matmul; the fills' and matmuls' bytes are negligible at FAST bytes/s
    "w7_1s": (SimRun("w7", ("--n", str(W7_N), "--iters", str(W7_ITERS), "--sync-every", "5"),
                     flops_per_s=2 * W7_N**3 * W7_ITERS / 1.0), 1.0),
}
# 100 adds per second; a sync every 25 adds (0.25 s) keeps the host's wake-ups after each sync a small part
W5_RUN = SimRun("w5", ("--n", str(W5_N), "--duration-s", "2", "--interval-s", "0.5", "--sync-every", "25"),
                bytes_per_s=3 * 4 * W5_N * W5_N * 100.0)


def _sim_tolerance(expected_s: float) -> tuple[float, float]:
    """Accepted runtime range (seconds) of a run sized to ``expected_s`` seconds of simulated work: the
    kernels cannot end earlier; the host's part (start-up after the imports, launches, copies) is small."""
    return expected_s * 0.99, expected_s * 1.05 + 0.3


def _require_simgpu() -> Path:
    """Build the simulated GPU (tests/lab/simgpu.py) and return its directory; skip when it cannot be built
    here, fail instead with ``XPUSHARE_REQUIRE_LAB=1``."""
    try:
        from tests.lab.build import BuildError
        from tests.lab.simgpu import build_simgpu
    except ImportError as exc:  # the lab is not part of this checkout
        reason = f"tests.lab.simgpu not importable: {exc}"
    else:
        try:
            return build_simgpu().directory
        except BuildError as exc:
            reason = str(exc)
    if os.environ.get("XPUSHARE_REQUIRE_LAB") == "1":
        pytest.fail(f"simulated GPU required (XPUSHARE_REQUIRE_LAB=1) but cannot be built: {reason}", pytrace=False)
    pytest.skip(f"simulated GPU cannot be built: {reason}")


@pytest.fixture(scope="module")
def simgpu_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Environment of a process on the simulated GPU, with a ``torch`` on PYTHONPATH that refuses to import,
    so every cudadrv run also proves that it never imports torch. ``SIMGPU_CONFIG`` is set per run."""
    directory = _require_simgpu()
    poison = tmp_path_factory.mktemp("no-torch")
    (poison / "torch").mkdir()
    (poison / "torch" / "__init__.py").write_text('raise ImportError("torch imported on the cudadrv path")\n')
    return dict(
        os.environ,
        LD_LIBRARY_PATH=f"{directory}:{os.environ.get('LD_LIBRARY_PATH', '')}".rstrip(":"),
        PYTHONPATH=f"{poison}:{os.environ.get('PYTHONPATH', '')}".rstrip(":"),
        PYTHONDONTWRITEBYTECODE="1",
    )


def _sim_commands(specs: dict[str, SimRun], env: dict[str, str], root: Path) -> Commands:
    """Commands for :func:`_run_all`: each run on a simulated GPU of its own (its own device file, hence its
    own kernel timeline), named ``Tesla T4``."""
    from tests.lab.simgpu import SimDevice, make_uuid, write_config

    commands = {}
    for name, spec in specs.items():
        device = SimDevice(make_uuid(0, seed=f"test_workloads:{name}"), name="Tesla T4",
                           total_bytes=spec.total_bytes, flops_per_s=spec.flops_per_s, bytes_per_s=spec.bytes_per_s)
        config = write_config(root / name / "devices", [device])
        argv = [sys.executable, str(WORKLOADS_DIR / SCRIPTS[spec.key]), *spec.args]
        if spec.device is not None:
            argv += ["--device", spec.device]
        commands[name] = (argv, {**env, "SIMGPU_CONFIG": str(config)})
    return commands


@pytest.fixture(scope="module")
def sim_runs(simgpu_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    """Every SIM_RUNS entry at once, plus ``poison_control``: a CPU run under the same PYTHONPATH, which
    must fail on the refused torch import."""
    commands = _sim_commands(SIM_RUNS, simgpu_env, tmp_path_factory.mktemp("simgpu-runs"))
    control = [sys.executable, str(WORKLOADS_DIR / SCRIPTS["w2"]), "--device", "cpu", "--n", "8", "--iters", "1"]
    commands["poison_control"] = (control, simgpu_env)
    return _run_all(commands)


def _info_line(run: Run) -> str:
    lines = [line for line in run.stderr.splitlines() if line.startswith("[XPUSHARE][INFO] workload=")]
    assert len(lines) == 1, run.stderr
    return lines[0]


def test_poison_torch_is_effective(sim_runs: dict[str, Run]) -> None:
    run = sim_runs["poison_control"]
    assert run.rc == 1 and "torch imported on the cudadrv path" in run.stderr


@pytest.mark.parametrize("name", [n for n in SIM_RUNS if not n.startswith("oom_")])
def test_workload_passes_on_cudadrv(sim_runs: dict[str, Run], name: str) -> None:
    run = sim_runs[name]
    _assert_pass_contract(run)
    assert "Traceback" not in run.stderr
    info = _info_line(run)
    assert f"workload={SIM_RUNS[name].key} device=cudadrv:0 name='Tesla T4' model='Tesla T4'" in info


def test_auto_picks_cudadrv_under_the_simulator(sim_runs: dict[str, Run]) -> None:
    assert " device=cudadrv:0 " in _info_line(sim_runs["auto"])


@pytest.mark.parametrize(("name", "total"), [("w1", 50), ("w3", 3), ("w6", 200), ("w7", 20), ("auto", 10)])
def test_progress_line_on_cudadrv(sim_runs: dict[str, Run], name: str, total: int) -> None:
    segments = next(line for line in sim_runs[name].stderr.split("\n") if "%|" in line).split("\r")
    assert all(PROGRESS_PREFIX_RE.match(seg) and TQDM_RE.search(seg) for seg in segments), segments
    last = TQDM_RE.search(segments[-1])
    assert last is not None and (int(last["n"]), int(last["total"])) == (total, total)


@pytest.mark.cpu_exclusive
def test_cudadrv_runtime_follows_simulated_speed(simgpu_env: dict[str, str], tmp_path: Path) -> None:
    """The runtime is the simulated work (max(flops / flops_per_s, bytes / bytes_per_s) per kernel), not the
    CPU's speed: a bandwidth-bound add run sized to 1 s, the same at half the bandwidth (2 s), and a
    compute-bound matmul run sized to 1 s, concurrently on three devices."""
    runs = _run_all(_sim_commands({name: spec for name, (spec, _) in SIM_TIMED.items()}, simgpu_env, tmp_path))
    for name, (_, expected) in SIM_TIMED.items():
        seconds = _assert_pass_contract(runs[name])
        low, high = _sim_tolerance(expected)
        assert low <= seconds <= high, (name, seconds)


@pytest.mark.cpu_exclusive
def test_w5_on_cudadrv_probes_the_simulated_rate(simgpu_env: dict[str, str], tmp_path: Path) -> None:
    run = _run_all(_sim_commands({"w5": W5_RUN}, simgpu_env, tmp_path))["w5"]
    seconds = _assert_pass_contract(run)
    probes = [PROBE_RE.fullmatch(line) for line in run.stdout.splitlines() if "QUOTA_PROBE" in line]
    assert len(probes) >= 3 and all(p is not None for p in probes)
    values = [(float(p[1]), int(p[2]), float(p[3])) for p in probes if p is not None]
    assert [v[1] for v in values] == sorted(v[1] for v in values)
    assert 0.5 <= values[0][0] <= 1.0
    # the device does 100 adds per second (the two fills before the loop take 1/150 s); the host alone would
    # launch thousands per second
    assert values[-1][2] == pytest.approx(100.0, rel=0.08)
    assert 2.0 <= seconds < 2.5


def test_w4_on_cudadrv_reports_driver_memory(sim_runs: dict[str, Run]) -> None:
    """cuMemGetInfo_v2 through the workload: the process's context, and every block freed by empty_cache()."""
    baseline = SIM_TOTAL - SIM_CONTEXT

    def reports(name: str) -> list[tuple[int, int, int]]:
        found = re.findall(r"^\[XPUSHARE\]\[ALLOC_FREE\] round=(\d+) free_bytes=(\d+) total_bytes=(\d+)$",
                           sim_runs[name].stdout, re.MULTILINE)
        return [(int(r), int(f), int(t)) for r, f, t in found]

    assert reports("w4") == [(r, baseline, SIM_TOTAL) for r in (0, 2, 4, 5)]
    # --no-empty-cache: the 1 MiB block stays in the caching allocator, as with PyTorch
    kept = [(r, baseline - c.MIB, SIM_TOTAL) for r in (1, 2, 3)]
    assert reports("w4_keep_cache") == [(0, baseline, SIM_TOTAL), *kept]


def test_oversub_on_cudadrv(sim_runs: dict[str, Run]) -> None:
    out = sim_runs["oversub"].stdout
    assert f"total_bytes={OVERSUB_TOTAL} factor=1.3 " in out
    assert f"allocated_bytes={int(1.3 * OVERSUB_TOTAL) // 4 * 4}" in out


@pytest.mark.parametrize("name", ["oom_w6", "oom_oversub"])
def test_cudadrv_out_of_memory_fails_like_torch(sim_runs: dict[str, Run], name: str) -> None:
    """Beyond the device's memory: exit 1, a traceback whose error line says ``CUDA out of memory``, found by
    the pod-log parser that judges OOM on torch devices."""
    from xpushare.parsers import pod_log

    run = sim_runs[name]
    assert run.rc == 1, run.stderr
    assert "PASS" not in run.stdout and not RUNTIME_RE.search(run.stdout)
    error = run.stderr.rstrip().splitlines()[-1]
    assert error.startswith("_common.OutOfMemoryError: CUDA out of memory. Tried to allocate "), error
    assert "cuMemAlloc_v2 returned CUDA_ERROR_OUT_OF_MEMORY" in error
    assert pod_log.oom_markers(run.stdout + run.stderr) == [error]  # one marker, as a torch traceback gives


def test_oversub_oom_on_cudadrv_after_the_free_memory(sim_runs: dict[str, Run]) -> None:
    run = sim_runs["oom_oversub"]
    assert f"total_bytes={SIM_SMALL} factor=2.0 target_bytes={2 * SIM_SMALL} chunk_bytes={16 * c.MIB}" in run.stdout
    assert "Tried to allocate 16.00 MiB" in run.stderr
    assert f"Of the allocated memory {c.format_bytes(SIM_SMALL - SIM_CONTEXT)} is allocated" in run.stderr


CUDADRV_VALUES = """
import ctypes, sys
sys.path.insert(0, sys.argv[1])
import _common as c

dev = c.select_device("cudadrv")
x, y = dev.full((4, 4), 1.0), dev.full((4, 4), 2.0)
z = dev.add(x, y)
print("add", dev.item(z, 0), dev.item(z, 5), dev.item(z, -1))
dev.add(z, x, out=z)
dev.add(z, x, out=z)
print("in-place twice", dev.item(z, 0), dev.item(z, -1))
m = dev.matmul(x, y, out=dev.empty((4, 4)))
print("matmul", dev.item(m, 0), dev.item(m, 7))
bad = ctypes.c_float(10.0)
dev._drv.call("cuMemcpyHtoD_v2", x.ptr, ctypes.addressof(bad), 4)  # behind the device's back
print("corrupted x", dev.item(z, 0), dev.item(dev.add(x, y), 0), dev.item(m, 0))
"""


def test_cudadrv_values_come_from_device_memory(simgpu_env: dict[str, str], tmp_path: Path) -> None:
    """The simulated kernels compute nothing; the checked elements are computed from device memory, in
    launch order (two in-place adds), and a corrupted input shows in the results read afterwards."""
    from tests.lab.simgpu import SimDevice, make_uuid, write_config

    config = write_config(tmp_path / "devices", [SimDevice(make_uuid(0, seed="values"), name="Tesla T4")])
    proc = subprocess.run([sys.executable, "-c", CUDADRV_VALUES, str(WORKLOADS_DIR)], capture_output=True,
                          text=True, timeout=60, env={**simgpu_env, "SIMGPU_CONFIG": str(config)}, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "add 3.0 3.0 3.0",
        "in-place twice 5.0 5.0",
        "matmul 8.0 8.0",
        # z's last write was in place (nothing to recompute from); a new add and m[0, 0] see x[0, 0] = 10
        "corrupted x 5.0 12.0 26.0",
    ]


def _lab_unavailable(reason: str) -> None:
    """Skip with ``reason``; fail instead under ``XPUSHARE_REQUIRE_LAB=1`` (as in CI)."""
    if os.environ.get("XPUSHARE_REQUIRE_LAB") == "1":
        pytest.fail(f"lab required (XPUSHARE_REQUIRE_LAB=1) but unavailable: {reason}", pytrace=False)
    pytest.skip(reason)


XPUSHARE_LIMIT = c.GIB


@pytest.mark.lab
@pytest.mark.cpu_exclusive
def test_cudadrv_under_real_xpushare(simgpu_env: dict[str, str], tmp_path: Path) -> None:
    """The real client library LD_PRELOADed in front of the simulated GPU, its real scheduler in a private
    mount namespace (its socket path is fixed): a run passes in the simulated time, cuMemGetInfo reports
    the memory limit, and an allocation beyond the limit is refused by the library (its ``cuMemAlloc
    rejected`` line) and fails like on a GPU."""
    from tests.lab.build import BuildError
    from tests.lab.nodens import NodeNamespace, unavailable_reason
    from tests.lab.simgpu import SimDevice, make_uuid, write_config
    from tests.lab.sut import build_sut
    from xpushare.parsers import pod_log

    reason = unavailable_reason()
    if reason is not None:
        _lab_unavailable(f"no private mount namespace for the xpushare scheduler: {reason}")
    try:
        sut = build_sut()
    except BuildError as exc:
        _lab_unavailable(f"cannot build the xpushare SUT: {exc}")
    device = SimDevice(make_uuid(0, seed="xpushare"), name="Tesla T4", total_bytes=SIM_TOTAL,
                       bytes_per_s=_add_seconds(1000, 100, 1.0))
    env = {k: v for k, v in simgpu_env.items() if k not in ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")}
    env["SIMGPU_CONFIG"] = str(write_config(tmp_path / "devices", [device]))
    ns = NodeNamespace("test-workloads", tmp_path / "ns")
    ns.start()
    scheduler = None
    try:
        with (tmp_path / "scheduler.log").open("w") as log:
            scheduler = subprocess.Popen(ns.enter([str(sut.scheduler)]), stdout=log, stderr=subprocess.STDOUT,
                                         env=env, start_new_session=True)
        socket_path = Path(f"/proc/{ns.pid}/root/run/xpushare/scheduler.sock")  # seen through the namespace
        deadline = time.monotonic() + 15
        while not socket_path.exists():
            assert scheduler.poll() is None and time.monotonic() < deadline, (tmp_path / "scheduler.log").read_text()
            time.sleep(0.05)
        client_env = {**env, "LD_PRELOAD": str(sut.library), "XPUSHARE_GPU_MEMORY_LIMIT": str(XPUSHARE_LIMIT)}

        def run(key: str, *args: str) -> Run:
            argv = ns.enter([sys.executable, str(WORKLOADS_DIR / SCRIPTS[key]), *args, "--device", "cudadrv"])
            return _run_all({key: (argv, client_env)})[key]

        passed = run("w2", "--n", "1000", "--iters", "100")
        seconds = _assert_pass_contract(passed)
        low, high = _sim_tolerance(1.0)
        assert low <= seconds <= high, seconds
        assert "[XPUSHARE][INFO]: GPU memory limit set to 1073741824 bytes" in passed.stderr  # the library ran

        w4 = run("w4", "--rounds", "2", "--mib", "64", "--report-every", "1")
        _assert_pass_contract(w4)
        assert re.findall(r"free_bytes=(\d+) total_bytes=(\d+)", w4.stdout) == [(str(XPUSHARE_LIMIT),) * 2] * 3

        refused = run("w6", "--n", "12000", "--iters", "1")  # x fits in 1 GiB (576 MB), y does not
        assert refused.rc == 1 and "PASS" not in refused.stdout
        rejections = pod_log.rejections(refused.stderr)
        assert [(r.api, r.allocated_bytes, r.requested_bytes, r.limit_bytes) for r in rejections] == [
            ("cuMemAlloc", 576_000_000, 576_000_000, XPUSHARE_LIMIT)
        ]
        error = refused.stderr.rstrip().splitlines()[-1]
        assert error.startswith("_common.OutOfMemoryError: CUDA out of memory. Tried to allocate 549.32 MiB")
        assert pod_log.oom_markers(refused.stderr) == [rejections[0].line, error]
    finally:
        if scheduler is not None:
            os.killpg(scheduler.pid, signal.SIGKILL)
            scheduler.wait(10)
        ns.stop()


# ---------------------------------------------------------------------------------------------------------
# In-process tests (no torch import)
# ---------------------------------------------------------------------------------------------------------


def _load_script(key: str) -> ModuleType:
    path = WORKLOADS_DIR / SCRIPTS[key]
    spec = importlib.util.spec_from_file_location(f"xpushare_workload_{key}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("key", list(SCRIPTS))
def test_help_documents_every_table_flag(key: str) -> None:
    parser: argparse.ArgumentParser = _load_script(key).build_parser()
    help_text = " ".join(parser.format_help().split())
    for flag in ("--device", "--gpu-model", "--progress"):
        assert flag in help_text
    ns = parser.parse_args([])
    for dest in c.MODEL_DEFAULTS["Tesla T4"][key]:
        assert hasattr(ns, dest), f"table key {dest} has no flag"
        assert getattr(ns, dest) is None, "size flags default to None so the table can fill them"
        assert "--" + dest.replace("_", "-") in help_text
    for dest in c.MODEL_DEFAULTS["cpu"][key]:
        assert "--" + dest.replace("_", "-") in help_text
    assert "defaults per model: Tesla T4=" in help_text


@pytest.mark.parametrize("key", list(SCRIPTS))
def test_usage_error_exits_1(key: str, capsys: pytest.CaptureFixture[str]) -> None:
    parser = _load_script(key).build_parser()
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(["--device", "tpu"])
    assert exc.value.code == 1
    assert "invalid choice" in capsys.readouterr().err


def test_table_rows_have_same_flags() -> None:
    reference = c.MODEL_DEFAULTS["Tesla T4"]
    for model, row in c.MODEL_DEFAULTS.items():
        assert set(row) == set(SCRIPTS), model
        for key, values in row.items():
            extra = {"total_bytes"} if model == "cpu" and key == "oversub" else set()
            assert set(values) == set(reference[key]) | extra, (model, key)
            assert all(v > 0 or k in ("sync_every", "report_every") for k, v in values.items())


def test_table_t4_matches_spec_values() -> None:
    t4 = c.MODEL_DEFAULTS["Tesla T4"]
    assert t4["w1"] == {"n": 28000, "iters": 4000}
    assert t4["w2"] == {"n": 14000, "iters": 40000}
    assert t4["w3"] == {"n": 14000, "steps": 4000, "sleep_s": 0.1}
    assert (t4["w5"]["n"], t4["w5"]["duration_s"], t4["w5"]["interval_s"]) == (14000, 300.0, 10.0)
    assert t4["w6"] == {"n": 14000, "iters": 60000, "sync_every": 1000}
    assert t4["w7"] == {"n": 6144, "iters": 2400, "sync_every": 10}


@pytest.mark.parametrize("model", ["Tesla T4", "A800", "H100", "H200"])
def test_table_memory_intent(model: str) -> None:
    row = c.MODEL_DEFAULTS[model]
    memory = c.MODEL_MEMORY_BYTES[model]
    assert memory is not None
    w1 = o.tensor_bytes(int(row["w1"]["n"]), 4)
    assert 0.70 <= w1 / memory <= 0.75, w1 / memory
    # must stay below xpushare's physical allocatable (total - 1536 MiB, spec docs/sut/client.md §memory-quota item 3)
    assert w1 < memory - 1536 * c.MIB
    for key in ("w2", "w3", "w5", "w6"):
        assert o.tensor_bytes(int(row[key]["n"]), 4) / c.GIB == pytest.approx(2.92, abs=0.01)
    assert o.tensor_bytes(int(row["w7"]["n"]), 3) == pytest.approx(0.45e9, rel=0.02)
    assert row["w4"]["mib"] * c.MIB / memory == pytest.approx(0.125, abs=0.005)
    assert row["oversub"]["factor"] > 1.0


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("Tesla T4", "Tesla T4"),
        ("NVIDIA A800-SXM4-80GB", "A800"),
        ("NVIDIA A800 40GB PCIe", "A800"),
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA H200", "H200"),
        ("t4", "Tesla T4"),
        ("h200", "H200"),
        ("CPU", "cpu"),
        ("NVIDIA L4", None),
        ("a", None),
        ("", None),
    ],
)
def test_match_model(name: str, expected: str | None) -> None:
    assert c.match_model(name) == expected


@pytest.mark.parametrize(
    ("gib", "expected"), [(8, "Tesla T4"), (24, "Tesla T4"), (48, "A800"), (94, "H100"), (192, "H200")]
)
def test_model_by_memory(gib: int, expected: str) -> None:
    assert c.model_by_memory(gib * c.GIB) == expected


def test_resolve_model_rejects_unknown_flag_value() -> None:
    dev = c.Device(torch=None, kind="cpu", device="cpu", name="cpu", total_bytes=None)
    assert c.resolve_model(None, dev) == "cpu"
    assert c.resolve_model("H100", dev) == "H100"
    with pytest.raises(ValueError, match="unknown --gpu-model"):
        c.resolve_model("Z9000", dev)


def test_resolve_model_unknown_gpu_falls_back_by_memory(capsys: pytest.CaptureFixture[str]) -> None:
    dev = c.Device(torch=None, kind="cuda", device="cuda:0", name="NVIDIA L40S", total_bytes=45 * c.GIB)
    assert c.resolve_model(None, dev) == "A800"
    assert "unknown device model" in capsys.readouterr().err


def test_apply_model_defaults_keeps_flags() -> None:
    ns = argparse.Namespace(n=123, iters=None)
    eff = c.apply_model_defaults(ns, "H200", "w1")
    assert (ns.n, ns.iters) == (123, c.MODEL_DEFAULTS["H200"]["w1"]["iters"])
    assert eff == {"n": 123, "iters": ns.iters}


def test_format_progress_matches_spec_regex() -> None:
    now = datetime.datetime(2026, 1, 2, 3, 4, 5)
    seg = o.format_progress(250, 1000, 12.5, now)
    assert seg.startswith("[XPUSHARE][INFO][2026-01-02 03:04:05] ")
    m = TQDM_RE.search(seg)
    assert m is not None, seg
    assert (m["pct"], m["n"], m["total"], m["elapsed"], m["remain"], m["rate"]) == (
        "25",
        "250",
        "1000",
        "00:12",
        "00:37",
        "20.00",
    )
    start = TQDM_RE.search(o.format_progress(0, 10, 0.0, now))
    assert start is not None and (start["rate"], start["remain"]) == ("?", "?")
    assert o.format_interval(3725) == "1:02:05"


def test_progress_segments_separated_by_cr() -> None:
    buf = io.StringIO()
    prog = o.Progress(3, stream=buf, mininterval_s=0.0)
    for _ in range(3):
        prog.update()
    prog.close()
    text = buf.getvalue()
    assert text.endswith("\n") and text.count("\n") == 1
    segments = text.rstrip("\n").split("\r")
    assert [TQDM_RE.search(s)["n"] for s in segments] == ["0", "1", "2", "3", "3"]  # type: ignore[index]
    silent = io.StringIO()
    off = o.Progress(3, enabled=False, stream=silent)
    off.update()
    off.close()
    assert silent.getvalue() == ""


@given(st.floats(min_value=1e-3, max_value=1e6, allow_nan=False))
@settings(max_examples=50, deadline=None)
def test_runtime_line_round_trips(seconds: float) -> None:
    line = o.format_runtime(seconds)
    m = RUNTIME_RE.fullmatch(line)
    assert m is not None, line
    assert float(m["sec"]) == seconds


@given(st.floats(min_value=0.05, max_value=1e5), st.integers(min_value=0, max_value=10**9))
@settings(max_examples=50, deadline=None)
def test_quota_probe_line(elapsed: float, iterations: int) -> None:
    m = PROBE_RE.fullmatch(o.format_quota_probe(elapsed, iterations))
    assert m is not None
    assert float(m[1]) == round(elapsed, 1)
    assert int(m[2]) == iterations
    assert float(m[3]) == pytest.approx(iterations / elapsed, abs=0.006)


PLAN_CHUNKS = _load_script("oversub").plan_chunks


@given(
    st.integers(min_value=4, max_value=1 << 32),
    st.integers(min_value=0, max_value=1000),
    st.integers(min_value=0, max_value=(1 << 32) - 1),
)
@settings(max_examples=100, deadline=None)
def test_plan_chunks(chunk: int, whole: int, rest: int) -> None:
    target = chunk * whole + rest % chunk
    assume(target >= 8)
    sizes = PLAN_CHUNKS(target, chunk)
    assert len(sizes) >= 2
    assert sum(sizes) == target - target % 4
    assert all(s % 4 == 0 and 0 < s <= chunk for s in sizes)
    assert all(s == sizes[0] for s in sizes[:-1])


def test_plan_chunks_rejects_tiny_target() -> None:
    with pytest.raises(ValueError):
        PLAN_CHUNKS(4, 1024)


@pytest.mark.parametrize(
    ("func", "text", "ok"),
    [
        (c.positive_int, "5", 5),
        (c.positive_int, "1_000", 1000),
        (c.positive_int, "0", None),
        (c.positive_int, "-3", None),
        (c.positive_int, "x", None),
        (c.non_negative_int, "0", 0),
        (c.positive_float, "0.5", 0.5),
        (c.positive_float, "nan", None),
        (c.positive_float, "-1", None),
        (c.non_negative_float, "0", 0.0),
        (c.non_negative_float, "inf", None),
    ],
)
def test_flag_types(func: object, text: str, ok: float | None) -> None:
    assert callable(func)
    if ok is None:
        with pytest.raises(argparse.ArgumentTypeError):
            func(text)
    else:
        assert func(text) == ok


def test_readme_defaults_table_matches_model_table() -> None:
    readme = (WORKLOADS_DIR / "README.md").read_text(encoding="utf-8")
    header = re.search(r"^\| script \| flag \| (.+) \|$", readme, re.MULTILINE)
    assert header is not None
    models = [m.strip() for m in header[1].split("|")]
    assert models == list(c.MODEL_DEFAULTS)
    rows = re.findall(r"^\| `(\w+\.py)` \| `--([\w-]+)` \| (.+) \|$", readme, re.MULTILINE)
    by_script = {script: key for key, script in SCRIPTS.items()}
    seen = set()
    for script, flag, cells in rows:
        key, dest = by_script[script], flag.replace("-", "_")
        for model, cell in zip(models, [x.strip() for x in cells.split("|")], strict=True):
            value = c.MODEL_DEFAULTS[model][key].get(dest)
            assert cell == ("(device)" if value is None else c.format_num(value)), (script, flag, model)
        seen.add((key, dest))
    assert seen == {(key, dest) for key in SCRIPTS for dest in c.MODEL_DEFAULTS["cpu"][key]}
