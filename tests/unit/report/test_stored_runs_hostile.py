"""Stored runs are append-only unless the user asks: a run id is reused only with ``--resume``; a signal after the
last case still leaves every report and a finished run.json; a damaged run.json or result.json is one error line
(exit 2) or an ERROR record, never a traceback; a re-judgment is stored beside the run's own verdicts."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.paths import REPO_ROOT
from tests.toolrun import run_tool
from xpushare.engine import suite_run
from xpushare.model.case_record import CaseRecord
from xpushare.model.errors import StoredRunDamaged, UsageError
from xpushare.report import run_store
from xpushare.transport import interrupt

ROOT = REPO_ROOT
FAST = ["--set", 'workload_args={w2_medium_add: [--n, "64", --iters, "50"]}']


def invoke(*args: str, root: Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return run_tool([sys.executable, "-m", "tests.premise_free", *args, "--root", str(root)], cwd=ROOT, timeout=timeout)


def digest(path: Path) -> dict[str, str]:
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


def test_a_stored_run_id_is_not_reused_without_resume(tmp_path: Path) -> None:
    run_dir = run_store.run_dir(tmp_path, "kept")
    run_dir.mkdir(parents=True)
    run_store.write_run_meta(run_dir, {"run_id": "kept", "required": ["FUNC-001", "FUNC-002"], "started": "t0"})
    before = digest(run_dir)
    request = suite_run.RunRequest(cluster="local", case_ids=["FUNC-009"], run_id="kept", root=tmp_path)
    with pytest.raises(UsageError, match="--resume"):
        suite_run.run(request)
    assert digest(run_dir) == before


@pytest.fixture
def no_signal_left() -> Any:
    yield
    with interrupt.installed():  # the outermost block starts from no request: clear what the test recorded
        pass


def test_sigterm_after_the_last_case_still_writes_every_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              no_signal_left: None) -> None:
    real = run_store.load_results
    sent: list[int] = []

    def load_then_signal(run_dir: Path) -> list[CaseRecord]:
        if not sent:
            sent.append(1)
            os.kill(os.getpid(), signal.SIGTERM)
        return real(run_dir)

    monkeypatch.setattr(run_store, "load_results", load_then_signal)
    request = suite_run.RunRequest(cluster="local", case_ids=["FUNC-009"], run_id="late", root=tmp_path)
    with interrupt.installed():  # as the task's guard does
        status = suite_run.run(request, out=open(os.devnull, "w"))  # noqa: SIM115 - closed with the process
    assert int(status) == 143 and sent
    run_dir = run_store.run_dir(tmp_path, "late")
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["ended"] and meta["exit_status"] == 143 and meta["interrupted"] is True and meta["counts"]
    for name in ("junit.xml", "case-summary.tsv", "run-summary.tsv", "run-report.md", "report.html"):
        assert (run_dir / name).is_file(), name


DAMAGED = {
    "truncated": b'{"run_id": "x", "required": [',
    "a-list": b"[1, 2]",
    "required-a-number": b'{"required": 5}',
    "required-of-numbers": b'{"required": [5]}',
    "selected-of-text": b'{"selected": ["a"]}',
    "rejudgments-of-null": b'{"rejudgments": [{}, null]}',  # found by tests/unit/model/test_property_inputs.py
    "binary": bytes(range(256)),
    "deep": b"[" * 100000,
}


@pytest.mark.parametrize("name", sorted(DAMAGED))
def test_a_damaged_run_json_is_one_usage_error(tmp_path: Path, name: str) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "run.json").write_bytes(DAMAGED[name])
    with pytest.raises(StoredRunDamaged) as info:
        run_store.read_run_meta(run_dir)
    assert "\n" not in str(info.value) and "run.json" in str(info.value)


def test_a_run_json_symlinked_to_a_device_is_read_bounded(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "run.json").symlink_to("/dev/zero")
    with pytest.raises(StoredRunDamaged, match="larger than"):
        run_store.read_run_meta(run_dir)


def test_a_result_json_that_is_a_directory_or_mistyped_is_an_error_record(tmp_path: Path) -> None:
    case = tmp_path / "local" / "functional" / "FUNC-001"
    (case / "result.json").mkdir(parents=True)
    other = tmp_path / "local" / "functional" / "FUNC-002"
    other.mkdir(parents=True)
    (other / "result.json").write_text('{"status": "PASS", "thresholds": [1], "summary": "ok"}')
    records = {r.case_id: r for r in run_store.load_results(tmp_path)}
    assert records["FUNC-001"].status == "ERROR" and "not a file" in str(records["FUNC-001"].summary)
    assert records["FUNC-002"].status == "ERROR" and "thresholds" in str(records["FUNC-002"].summary)


def test_judge_report_and_resume_on_a_damaged_run_json_are_one_line(tmp_path: Path) -> None:
    run_dir = run_store.run_dir(tmp_path, "dmg")
    (run_dir / "local" / "functional" / "FUNC-001").mkdir(parents=True)
    (run_dir / "local" / "functional" / "FUNC-001" / "result.json").mkdir()  # a directory: judge must not exit 0
    (run_dir / "run.json").write_text('{"required": 5}')
    for args in (["judge", "--run-id", "dmg"], ["report", "--run-id", "dmg"],
                 ["func", "--cluster", "local", "--case", "FUNC-009", "--run-id", "dmg", "--resume"]):
        proc = invoke(*args, root=tmp_path)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), (args, proc.stderr)
    (run_dir / "run.json").unlink()
    proc = invoke("judge", "--run-id", "dmg", root=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the case that is a directory is an ERROR


def test_a_rejudgment_is_stored_beside_the_runs_own_verdicts(tmp_path: Path) -> None:
    # a host of this machine whose inventory lists one GPU: both FUNC-002 pods are placed on it, so the pair's GPU is
    # in the evidence (on `local`, without a GPU, FUNC-002 is ERROR: premise two-pods-one-gpu)
    inv = tmp_path / "inventory.yaml"
    inv.write_text("clusters:\n  gpu1:\n    mode: host\n    hosts:\n"
                   "      me: {connection: local, roles: [gpu], gpus: 1}\n", encoding="utf-8")
    assert invoke("func", "--cluster", "gpu1", "--inventory", str(inv), "--run-id", "rj", "--case", "FUNC-002", *FAST,
                  root=tmp_path).returncode == 0
    run_dir = run_store.run_dir(tmp_path, "rj")
    case = run_dir / "gpu1" / "functional" / "FUNC-002"
    own = (case / "result.json").read_text()
    # the strictest threshold (whole overlap): FAIL unless one pod's run lay inside the other's (ratio 1.0)
    want, code = ("PASS", 0) if json.loads(own)["metrics"]["overlap_ratio"] >= 1.0 else ("FAIL", 1)
    proc = invoke("judge", "--run-id", "rj", "--set", "func002_min_overlap_ratio=1", "--apply", root=tmp_path)
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert (case / "result.original.json").read_text() == own  # the run's own verdict, whole
    record = json.loads((case / "result.json").read_text())
    assert record["status"] == want and record["summary"].startswith("re-judged ")
    assert "func002_min_overlap_ratio=1" in record["summary"]
    assert record["rejudgments"][-1]["overrides"] == {"func002_min_overlap_ratio": 1}
    assert record["rejudgments"][-1]["original_status"] == "PASS"
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["exit_status"] == 0 and meta["rejudgments"][-1]["exit_status"] == code
    report = (run_dir / "run-report.md").read_text()
    assert "re-judged" in report and "result.original.json" in report and f"(exit status {code})" in report
    # A second re-judgment starts from the run's own parameters, not from the first re-judgment's.
    assert invoke("judge", "--run-id", "rj", "--apply", root=tmp_path).returncode == 0
    record = json.loads((case / "result.json").read_text())
    assert record["status"] == "PASS" and record["thresholds"]["func002_min_overlap_ratio"] == 0.5
    assert len(record["rejudgments"]) == 2 and (case / "result.original.json").read_text() == own


def test_no_record_text_makes_a_link_in_run_report_md() -> None:
    from xpushare.report.markdown import md_escape

    text = md_escape("[click](javascript:alert(1)) and [x]: <javascript:y>")
    assert "](" not in text.replace("\\](", "") and "\\[click\\]" in text and "<javascript" not in text


def test_a_full_disk_in_judge_or_report_is_exit_1(monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    from invoke.exceptions import Exit

    from xpushare.cli.guard import guarded

    def full() -> None:
        raise OSError(errno.ENOSPC, "No space left on device", "run-report.md")

    with pytest.raises(Exit) as info:
        guarded(full)
    assert info.value.code == 1


def test_last_and_the_run_list_survive_a_run_json_symlinked_to_a_device(tmp_path: Path) -> None:
    from xpushare.report.runs import list_runs

    good = run_store.run_dir(tmp_path, "good")
    good.mkdir(parents=True)
    run_store.write_run_meta(good, {"run_id": "good", "started": "2026-01-01T00:00:00+00:00"})
    bad = run_store.run_dir(tmp_path, "bad")
    bad.mkdir(parents=True)
    (bad / "run.json").symlink_to("/dev/zero")
    assert set(run_store.stored_run_ids(tmp_path)) == {"good", "bad"}
    assert {info.run_id for info in list_runs(tmp_path)} == {"good", "bad"}
