"""Baseline comparison (xpushare/legacy/compare.py): seed 004's analysis reproduced from its own numbers,
and a stored run compared end to end (offline, from files)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xpushare.legacy import compare
from xpushare.model.case_record import CaseRecord
from xpushare.model.errors import UsageError
from xpushare.model.workload import WorkloadRecord, write_pod_records
from xpushare.report import run_store

SEED = compare.DEFAULT_BASELINE


def test_seed_baseline_file_loads() -> None:
    b = compare.load_baseline(SEED)
    assert {k: e.duration_s for k, e in b.workloads.items()} == {"standard": 163, "small": 392, "idle-small": 445}
    assert b.workloads["idle-small"].bound == "idle" and b.gpu_model == "Tesla T4"


def test_reference_rows_read_like_seed_004s_analysis() -> None:
    refs = {c.label: c for c in compare.reference_comparisons(compare.load_baseline(SEED))}
    # 1. virtualization overhead: 163 vs 164, 392 vs 392.5, 445 vs 444 -> below 1 %
    for label in ("test 1 cross-gpu", "test 3 small", "test 5 idle-small"):
        assert refs[label].regime == "exclusive" and abs(refs[label].overhead) < 0.01
    assert refs["test 1 cross-gpu"].overhead == pytest.approx(164 / 163 - 1)
    # 2. serial W1 at 2 per GPU: ~2x the baseline, i.e. ~100 % of ideal time slicing
    assert refs["test 2 cross-gpu (serial)"].efficiency == pytest.approx(2 * 163 / 326.8)
    # 3. small at 2 per GPU: ~2.2x the baseline, ~10 % switching overhead
    t4 = refs["test 4 small"]
    assert t4.ratio == pytest.approx(867.5 / 392) and 0.89 < t4.efficiency < 0.91
    assert "concurrency efficiency 90 %" in t4.analysis
    # idle at 3 per GPU: +8 % per task for 3x density
    t6 = refs["test 6 idle-small"]
    assert t6.cost == pytest.approx(481.8 / 445 - 1) and t6.throughput == pytest.approx(3 / (481.8 / 445))
    assert "+8.3 % per task for 3x density" in t6.analysis


@pytest.mark.parametrize("body, message", [
    ("workloads: {}", "expected a mapping"),
    ("workloads: {small: {duration_s: abc}}", "must be a number"),
    ("workloads: {small: {duration_s: -1}}", "must be positive"),
    ("workloads: {small: {duration_s: 3, bound: weird}}", "'compute' or 'idle'"),
    ("workloads: [", "bad YAML"),
])
def test_bad_baseline_files_are_usage_errors(tmp_path: Path, body: str, message: str) -> None:
    path = tmp_path / "b.yaml"
    path.write_text(body)
    with pytest.raises(UsageError, match=message):
        compare.load_baseline(path)
    with pytest.raises(UsageError, match="No such file"):
        compare.load_baseline(tmp_path / "missing.yaml")


def write_case(run_dir: Path, scenario: str, pods: dict[str, tuple[float, str, bool]], status: str = "PASS",
               model: str = "Tesla T4") -> None:
    """A stored legacy case: pods -> (seconds, GPU uuid, passed)."""
    case = run_store.case_dir(run_dir, "c1", "legacy", scenario)
    (case / "pods").mkdir(parents=True)
    records, sched = [], []
    for i, (name, (seconds, gpu, passed)) in enumerate(pods.items(), start=1):
        records.append(WorkloadRecord(name=name, phase="Succeeded" if passed else "Failed",
                                      exit_code=0 if passed else 1, started=1000.0, finished=1000.0 + seconds))
        text = f"PASS\n--- {seconds - 1} seconds ---\n" if passed else "Traceback\n"
        (case / "pods" / f"{name}.log").write_text(text)
        sched.append(f"[pod/nvshare-scheduler-x/s] [NVSHARE][INFO]: Registered client {i:016x} on GPU {gpu} "
                     f"with Pod name = {name}, Pod namespace = default")
    write_pod_records(case, records)
    (case / "scheduler.log").write_text("\n".join(sched) + "\n")
    (case / "plan.json").write_text(json.dumps({"pods": list(pods), "namespace": "default", "gpu_model": model}))
    run_store.write_result(case, {"run_id": "r", "cluster": "c1", "suite": "legacy", "case_id": scenario,
                                  "status": status, "summary": ""})


def test_baseline_compare_of_a_stored_run(tmp_path: Path) -> None:
    run_dir = run_store.run_dir(tmp_path, "r")
    write_case(run_dir, "cross-gpu", {"nvshare-cross-gpu-1": (164, "GPU-a", True),
                                      "nvshare-cross-gpu-2": (164, "GPU-b", True)})
    write_case(run_dir, "small", {f"nvshare-small-{i}": (865 + i, "GPU-a" if i % 2 else "GPU-b", True)
                                  for i in range(1, 5)} | {"nvshare-small-5": (3, "GPU-a", False)}, status="FAIL")
    out_lines: list[str] = []

    class Out:
        def write(self, s: str) -> None:
            out_lines.append(s)

        def flush(self) -> None:
            pass

    status = compare.baseline_compare("r", SEED, root=tmp_path, out=Out())  # type: ignore[arg-type]
    assert status == 0
    text = "".join(out_lines).split("Reference rows")[0]  # the run's own rows, not the seed's
    assert "virtualization overhead +0.6 %" in text
    assert "2 pods per GPU, compute-bound: 867.5s = 2.21x baseline 392s" in text
    assert "1 of 5 pods did not pass and are left out" in text
    stored = json.loads((run_dir / "baseline-compare.json").read_text())
    small = next(c for c in stored["comparisons"] if c["label"] == "c1/small")
    assert small["density"] == 2 and small["efficiency"] == pytest.approx(2 * 392 / 867.5)
    assert (run_dir / "baseline-compare.txt").read_text().startswith("Baseline comparison: run r")
    assert "WARNING" not in text


def test_other_gpu_model_is_called_out(tmp_path: Path) -> None:
    run_dir = run_store.run_dir(tmp_path, "r")
    write_case(run_dir, "small", {"p1": (100, "GPU-a", True)}, model="NVIDIA H100")
    lines: list[str] = []

    class Out:
        def write(self, s: str) -> None:
            lines.append(s)

    compare.baseline_compare("r", SEED, root=tmp_path, out=Out())  # type: ignore[arg-type]
    assert "WARNING: measured on 'NVIDIA H100', the baseline on 'Tesla T4'" in "".join(lines)
    assert not compare.model_mismatch("Tesla T4", "T4") and compare.model_mismatch("A800", "Tesla T4")


def test_unknown_placement_is_not_guessed(tmp_path: Path) -> None:
    run_dir = run_store.run_dir(tmp_path, "r")
    write_case(run_dir, "idle-small", {"p1": (450, "GPU-a", True)})
    (run_store.case_dir(run_dir, "c1", "legacy", "idle-small") / "scheduler.log").unlink()
    res = compare.scenario_result(run_store.case_dir(run_dir, "c1", "legacy", "idle-small"),
                                  CaseRecord.from_json({"case_id": "idle-small", "cluster": "c1",
                                                        "suite": "legacy", "status": "ERROR"}))
    c = compare.compare_result(res, compare.load_baseline(SEED))
    assert c.regime == "unknown" and "placement unknown" in c.analysis and c.ratio == pytest.approx(450 / 445)


def test_baseline_compare_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no run"):
        compare.baseline_compare("nope", SEED, root=tmp_path)
    with pytest.raises(UsageError, match="invalid run id"):
        compare.baseline_compare("../x", SEED, root=tmp_path)
    run_dir = run_store.run_dir(tmp_path, "empty")
    run_dir.mkdir(parents=True)
    with pytest.raises(UsageError, match="no legacy"):
        compare.baseline_compare("empty", SEED, root=tmp_path)
