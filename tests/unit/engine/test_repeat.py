"""``--repeat N`` (engine/repeat.py): each case runs N times through the whole lifecycle, its record says k of N,
attempts that disagree make it INTERMITTENT (a failure: exit status 1, release NO), and each attempt's evidence is
kept under ``attempts/<n>/``. ``--repeat 0`` is exit 2 before anything runs. run.json's ``exit_status`` is the
process's."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.backend import FakeBackend
from tests.paths import REPO_ROOT
from tests.toolrun import run_tool
from xpushare.cases.base import CaseDef
from xpushare.engine.run import Reuse, Run, RunHooks, RunSelection
from xpushare.inventory.schema import ClusterSpec, local_cluster
from xpushare.model.case_record import CaseRecord
from xpushare.model.errors import HostUnreachable
from xpushare.model.exit_status import ExitStatus
from xpushare.model.verdict import Status, Verdict
from xpushare.report import run_store, summaries


def _backend() -> FakeBackend:
    """A backend whose cases act by writing one evidence file (the attempt's number)."""
    acts = [0]

    def harvest(backend: FakeBackend) -> list[str]:
        acts[0] += 1
        (backend.case_dir / "evidence.txt").write_text(str(acts[0]))
        return ["evidence.txt"]

    return FakeBackend(on_harvest=harvest)


class _Hooks(RunHooks):
    def __init__(self, error_on: str | None = None) -> None:
        self.error_on = error_on

    def backend(self, cluster: ClusterSpec) -> FakeBackend:
        return _backend()

    def case_done(self, run: Run, cluster: ClusterSpec, case: CaseDef, record: CaseRecord) -> None:
        if self.error_on == case.case_id:
            raise HostUnreachable("gpu-9", "connect refused")


def _judge_by(outcomes: list[Status]) -> Any:
    def judge(ev: Any, th: Any, plan: Any) -> Verdict:
        n = int((ev.case_dir / "evidence.txt").read_text())
        return Verdict(outcomes[(n - 1) % len(outcomes)], f"attempt {n}", evidence=["evidence.txt"])

    return judge


def _case(case_id: str, outcomes: list[Status]) -> CaseDef:
    return CaseDef(case_id, "legacy", f"title {case_id}", "W1", "op", "files", act=lambda run: None,
                   judge=_judge_by(outcomes))


@pytest.fixture
def lease_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("XPUSHARE_LEASE_DIR", str(tmp_path))
    yield tmp_path


def _run(root: Path, case: CaseDef, repeat: int, hooks: RunHooks | None = None) -> tuple[Run, ExitStatus]:
    cluster = local_cluster()
    selection = RunSelection(label="t", cases=[case], required=frozenset({case.case_id}),
                             todo={cluster.name: [case]}, params=lambda c, _cl: {}, repeat=repeat)
    run = Run(root=root, clusters=[cluster], run_id="r", reuse=Reuse.REFUSE, out=open(os.devnull, "w"))  # noqa: SIM115
    return run, run.execute(selection, hooks or _Hooks())


def _record(run: Run, case_id: str) -> dict[str, Any]:
    return json.loads((run_store.case_dir(run.dir, "local", "legacy", case_id) / "result.json").read_text())


def test_differing_verdicts_are_intermittent_with_each_attempt_kept(tmp_path: Path, lease_dir: Path) -> None:
    run, status = _run(tmp_path, _case("X-001", [Status.PASS, Status.FAIL, Status.FAIL]), 3)
    assert status == ExitStatus.FAILED
    rec = _record(run, "X-001")
    assert rec["status"] == "INTERMITTENT" and rec["verdicts"] == ["PASS", "FAIL", "FAIL"]
    assert rec["pass_count"] == 1 and rec["repeat"] == 3
    assert rec["summary"].startswith("1 of 3 attempt(s) PASS (verdicts PASS, FAIL, FAIL)")
    case_dir = run_store.case_dir(run.dir, "local", "legacy", "X-001")
    # the evidence of every attempt: 1 and 2 archived, 3 (the last) on top
    assert (case_dir / "attempts" / "1" / "evidence.txt").read_text() == "1"
    assert (case_dir / "attempts" / "2" / "evidence.txt").read_text() == "2"
    assert (case_dir / "evidence.txt").read_text() == "3"
    failing = [a for a in rec["attempts_run"] if a["status"] != "PASS"]
    assert [a["dir"] for a in failing] == ["attempts/2", "."]
    meta = json.loads((run.dir / "run.json").read_text())
    assert meta["repeat"] == 3 and meta["exit_status"] == 1
    decision = summaries.decision_of_run(run_store.load_results(run.dir), meta)
    assert decision.label == "NO" and any("INTERMITTENT" in r for r in decision.reasons)


def test_agreeing_verdicts_keep_their_status_and_say_k_of_n(tmp_path: Path, lease_dir: Path) -> None:
    run, status = _run(tmp_path, _case("X-002", [Status.PASS]), 2)
    assert status == ExitStatus.OK
    rec = _record(run, "X-002")
    assert rec["status"] == "PASS" and rec["verdicts"] == ["PASS", "PASS"] and rec["pass_count"] == 2
    assert rec["summary"].startswith("2 of 2 attempt(s) PASS")


def test_one_attempt_is_the_plain_record(tmp_path: Path, lease_dir: Path) -> None:
    run, _ = _run(tmp_path, _case("X-003", [Status.FAIL]), 1)
    rec = _record(run, "X-003")
    assert rec["status"] == "FAIL" and "verdicts" not in rec


def test_run_json_exit_status_is_the_process_s_when_a_cluster_raises(tmp_path: Path, lease_dir: Path) -> None:
    with pytest.raises(HostUnreachable):
        _run(tmp_path, _case("X-004", [Status.PASS]), 1, _Hooks(error_on="X-004"))
    meta = json.loads((run_store.run_dir(tmp_path, "r") / "run.json").read_text())
    assert meta["exit_status"] == int(ExitStatus.UNREACHABLE) and meta["interrupted"] is False


@pytest.mark.parametrize("value", ["0", "-1", "two"])
def test_repeat_below_one_is_a_usage_error(tmp_path: Path, value: str) -> None:
    proc = run_tool([sys.executable, "-m", "invoke", "func", "--cluster", "local", "--case", "FUNC-001",
                     "--repeat", value, "--root", str(tmp_path)], cwd=REPO_ROOT, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith("error: --repeat") and "Traceback" not in proc.stderr
    assert not (tmp_path / ".tmplog").exists()
