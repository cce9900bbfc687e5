"""Tests of the standalone workloads in ``workloads/`` (spec: sut-interfaces.md §8.1, §8.3, §11 item 11).

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
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

WORKLOADS_DIR = Path(__file__).resolve().parent.parent / "workloads"
sys.path.insert(0, str(WORKLOADS_DIR))

import _common as c  # noqa: E402

# Patterns of sut-interfaces.md §11 item 11 / §12, copied verbatim.
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
    # 1.3 x 4 MiB = 5.2 MiB: five whole 1 MiB chunks and a shorter last one
    "oversub": ("oversub", ["--total-bytes", str(OVERSUB_TOTAL), "--factor", "1.3", "--chunk-mib", "1"]),
    "w5": ("w5", ["--n", "64", "--duration-s", "2", "--interval-s", "0.5"]),
    "w6": ("w6", ["--n", "64", "--iters", "200", "--sync-every", "50"]),
    "w7": ("w7", ["--n", "32", "--iters", "20", "--sync-every", "5"]),
    "fail_negative_n": ("w1", ["--n", "-5"]),
    "fail_npu": ("w2", ["--device", "npu", "--n", "64", "--iters", "10"]),
    "fail_huge_alloc": ("w6", ["--n", "10000000", "--iters", "1"]),
}


@dataclass
class Run:
    """Result of one workload subprocess."""

    argv: list[str]
    rc: int
    stdout: str
    stderr: str
    wall_s: float


@pytest.fixture(scope="module")
def runs() -> dict[str, Run]:
    """Start every entry of RUNS at once (``--device cpu`` unless the entry sets a device), then collect."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    procs = {}
    for name, (key, extra) in RUNS.items():
        argv = [sys.executable, str(WORKLOADS_DIR / SCRIPTS[key])]
        argv += extra if "--device" in extra else ["--device", "cpu", *extra]
        procs[name] = (
            argv,
            time.perf_counter(),
            # bytes, not text=True: universal newlines would turn the progress separators \r into \n
            subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env),
        )
    out = {}
    for name, (argv, started, proc) in procs.items():
        try:
            stdout, stderr = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
        wall = time.perf_counter() - started
        out[name] = Run(argv, proc.returncode, stdout.decode(), stderr.decode(), wall)
    return out


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
    w1 = c.tensor_bytes(int(row["w1"]["n"]), 4)
    assert 0.70 <= w1 / memory <= 0.75, w1 / memory
    # must stay below xpushare's physical allocatable (total - 1536 MiB, spec §7 item 3)
    assert w1 < memory - 1536 * c.MIB
    for key in ("w2", "w3", "w5", "w6"):
        assert c.tensor_bytes(int(row[key]["n"]), 4) / c.GIB == pytest.approx(2.92, abs=0.01)
    assert c.tensor_bytes(int(row["w7"]["n"]), 3) == pytest.approx(0.45e9, rel=0.02)
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
    seg = c.format_progress(250, 1000, 12.5, now)
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
    start = TQDM_RE.search(c.format_progress(0, 10, 0.0, now))
    assert start is not None and (start["rate"], start["remain"]) == ("?", "?")
    assert c.format_interval(3725) == "1:02:05"


def test_progress_segments_separated_by_cr() -> None:
    buf = io.StringIO()
    prog = c.Progress(3, stream=buf, mininterval_s=0.0)
    for _ in range(3):
        prog.update()
    prog.close()
    text = buf.getvalue()
    assert text.endswith("\n") and text.count("\n") == 1
    segments = text.rstrip("\n").split("\r")
    assert [TQDM_RE.search(s)["n"] for s in segments] == ["0", "1", "2", "3", "3"]  # type: ignore[index]
    silent = io.StringIO()
    off = c.Progress(3, enabled=False, stream=silent)
    off.update()
    off.close()
    assert silent.getvalue() == ""


@given(st.floats(min_value=1e-3, max_value=1e6, allow_nan=False))
@settings(max_examples=50, deadline=None)
def test_runtime_line_round_trips(seconds: float) -> None:
    line = c.format_runtime(seconds)
    m = RUNTIME_RE.fullmatch(line)
    assert m is not None, line
    assert float(m["sec"]) == seconds


@given(st.floats(min_value=0.05, max_value=1e5), st.integers(min_value=0, max_value=10**9))
@settings(max_examples=50, deadline=None)
def test_quota_probe_line(elapsed: float, iterations: int) -> None:
    m = PROBE_RE.fullmatch(c.format_quota_probe(elapsed, iterations))
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
            assert cell == ("(device)" if value is None else c._fmt_num(value)), (script, flag, model)
        seen.add((key, dest))
    assert seen == {(key, dest) for key in SCRIPTS for dest in c.MODEL_DEFAULTS["cpu"][key]}
