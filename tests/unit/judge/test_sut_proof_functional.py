"""The functional suites judge another system by its own evidence (judge/sut_path.with_sut_checks with the plan's
``sut``): FUNC-001 of HAMi-core and of MPS recorded on an H200 (docs/runs/2026-11-28-cross-sut, run 5). Before,
HAMi-core's every FUNC verdict was ERROR "cannot be established without scheduler.log" (the project's scheduler's
registrations, which HAMi-core has none of), and MPS's FUNC verdicts had no ``sut`` check at all."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.paths import FIXTURES
from xpushare.evidence.store import Evidence
from xpushare.judge.sut_path import with_sut_checks
from xpushare.model.verdict import Status, Verdict

RUN = FIXTURES / "judge" / "cross_sut_func001"


def judged(case_dir: Path) -> Verdict:
    plan = json.loads((case_dir / "plan.json").read_text())
    return with_sut_checks(Verdict(Status.PASS, "pod passed in 21.75 s"), Evidence.load(case_dir, "host"), {}, plan)


@pytest.mark.parametrize("sut", ["hami-core", "mps"])
def test_the_systems_own_evidence_keeps_the_pass(sut: str) -> None:
    got = judged(RUN / sut)
    assert got.status is Status.PASS, got.summary
    check = next(c for c in got.checks if c.name == "sut_in_path")
    assert check.ok is True and check.values["sut"] == sut
    assert "registration_timeout_s" not in got.thresholds  # no scheduler registration was asked for


def test_a_hami_core_workload_without_its_init_line_is_error(tmp_path: Path) -> None:
    case = shutil.copytree(RUN / "hami-core", tmp_path / "case")
    log = case / "pods" / "func-001-w2.log"
    log.write_text("".join(x for x in log.read_text().splitlines(True) if "HAMI-core" not in x))
    got = judged(case)
    assert got.status is Status.ERROR
    assert got.summary.startswith("premise unmet: sut: hami-core not shown in the workloads' path: func-001-w2 (pid "
                                  "6925"), got.summary
    assert "(was PASS: pod passed" in got.summary and "premise unmet: sut: premise" not in got.summary


def test_an_mps_workload_that_never_connected_is_error(tmp_path: Path) -> None:
    case = shutil.copytree(RUN / "mps", tmp_path / "case")
    log = case / "scheduler.log"
    log.write_text("".join(x for x in log.read_text().splitlines(True) if "Client" not in x))
    got = judged(case)
    assert got.status is Status.ERROR and "mps not shown in the workloads' path" in got.summary, got.summary


def test_the_project_sut_still_needs_its_scheduler_log(tmp_path: Path) -> None:
    """The same HAMi-core workload under a plan of the project's SUT: no registration can be shown, ERROR."""
    case = shutil.copytree(RUN / "hami-core", tmp_path / "case")
    plan = json.loads((case / "plan.json").read_text())
    (case / "plan.json").write_text(json.dumps({**plan, "sut": "xpushare"}))
    (case / "pods" / "func-001-w2.environ.txt").write_text("LD_PRELOAD=/opt/lib/libxpushare.so\n")
    got = judged(case)
    assert got.status is Status.ERROR and "without scheduler.log" in got.summary, got.summary
