"""Verdicts the broken-system matrix showed to be blind, judged on the real evidence of those runs
(tests/fixtures/evidence/README.md): FUNC-002's lock turns (the scheduler time-slicing two clients, and the
``lock-never-dropped`` mutant starving one of them), and PERF-009 under a crashing scheduler."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.paths import FIXTURES
from xpushare.cases import REGISTRY
from xpushare.engine import lifecycle
from xpushare.model.verdict import Status, Verdict
from xpushare.parsers.scheduler_log import parse_text

EVIDENCE = FIXTURES / "evidence"


def judge_stored(tmp_path: Path, name: str) -> Verdict:
    """Judge a fixture's FUNC-002 case dir as ``invoke judge`` does (a copy: judging writes gpu_mapping.txt)."""
    case = tmp_path / name
    shutil.copytree(EVIDENCE / name, case)
    thresholds = json.loads((case / "result.json").read_text())["thresholds"]
    return lifecycle.judge_case(REGISTRY["FUNC-002"], case, thresholds, "k8s")


def check(v: Verdict, name: str) -> dict:
    return next(c for c in v.checks if c.name == name).values


def test_time_sliced_pair_passes_on_its_lock_turns(tmp_path: Path) -> None:
    v = judge_stored(tmp_path, "k8s-func002-time-sliced")
    assert v.status is Status.PASS, v.summary
    assert check(v, "lock_shared")["lock_overlap_ratio"] >= 0.9


def test_lock_never_dropped_fails_though_the_run_intervals_overlap(tmp_path: Path) -> None:
    v = judge_stored(tmp_path, "k8s-func002-lock-never-dropped")
    assert v.status is Status.FAIL and "lock_shared" in v.summary, v.summary
    assert check(v, "lock_shared")["lock_overlap_ratio"] == 0.0
    # the pods' own run intervals cannot tell: the waiting pod's runtime includes its wait
    assert check(v, "intervals_overlap")["overlap_ratio"] >= 0.5


def test_lock_spans_read_grants_and_releases_with_timestamps() -> None:
    log = (EVIDENCE / "k8s-func002-time-sliced" / "scheduler.log").read_text()
    spans = parse_text(log).lock_spans
    assert sorted(s.grants for s in spans.values()) == [2, 2]
    assert all(s.last_release is not None and s.last_release > s.first_grant for s in spans.values())
    # without kubectl timestamps nothing can be placed in time: no spans, never invented ones
    assert parse_text("[XPUSHARE][INFO]: Sent LOCK_OK to client 0123456789abcdef").lock_spans == {}


def test_a_pair_member_that_never_released_the_lock_fails(tmp_path: Path) -> None:
    name = "k8s-func002-time-sliced"
    case = tmp_path / "edited"
    shutil.copytree(EVIDENCE / name, case)
    second = sorted(parse_text((case / "scheduler.log").read_text()).lock_spans)[0]
    kept = [line for line in (case / "scheduler.log").read_text().splitlines()
            if not (second in line and "released from running_list" in line)]
    (case / "scheduler.log").write_text("\n".join(kept) + "\n")
    thresholds = json.loads((case / "result.json").read_text())["thresholds"]
    v = lifecycle.judge_case(REGISTRY["FUNC-002"], case, thresholds, "k8s")
    assert v.status is Status.FAIL and "never held and released" in v.summary, v.summary


def test_perf009_with_a_crashing_scheduler_is_fail_not_skip(tmp_path: Path) -> None:
    """Mutant ``crash-on-second-client``: the scheduler died before most load pods registered, so no GPU is known
    to hold two of them; the load pods failed, and that is FAIL (it used to hide as SKIP: "no GPU shared")."""
    case = tmp_path / "perf009"
    shutil.copytree(EVIDENCE / "k8s-perf009-crash", case)
    thresholds = json.loads((case / "result.json").read_text())["thresholds"]
    v = lifecycle.judge_case(REGISTRY["PERF-009"], case, thresholds, "k8s")
    assert v.status is Status.FAIL and "load_pods_succeeded" in v.summary, v.summary


def test_a_workload_that_cannot_import_torch_is_error_not_fail() -> None:
    """A node without the workloads' prerequisite (a plain ``pip install .``): the pods fail before any GPU or SUT
    call, so FUNC says ERROR naming the module, never a FAIL of the SUT; one pod that fails otherwise is FAIL."""
    from xpushare.evidence.store import Evidence
    from xpushare.judge import functional
    from xpushare.model.workload import WorkloadRecord

    log = (FIXTURES / "parsers" / "pod_log_no_torch.log").read_text()
    failed = [WorkloadRecord(name=n, phase="Failed", exit_code=1) for n in ("a", "b")]
    v = functional.judge_same_gpu_pair(Evidence.from_parts(failed, {"a": log, "b": log}),
                                       {"func002_min_overlap_ratio": 0.5}, pods=["a", "b"])
    assert v.status is Status.ERROR and "no Python module torch" in v.summary, v.summary
    crashed = {"a": log, "b": "Traceback (most recent call last):\nRuntimeError: CUDA error: an illegal memory access"}
    v = functional.judge_same_gpu_pair(Evidence.from_parts(failed, crashed), {"func002_min_overlap_ratio": 0.5},
                                       pods=["a", "b"])
    assert v.status is Status.FAIL, v.summary


def test_a_pair_member_without_a_client_id_is_error_not_fail(tmp_path: Path) -> None:
    """One pod's registration is missing from the log: its lock lines cannot be attributed, so FUNC-002 cannot
    say it never held the lock (ERROR), nor pass on the other pod's lock alone."""
    case = tmp_path / "unregistered"
    shutil.copytree(EVIDENCE / "k8s-func002-time-sliced", case)
    log = case / "scheduler.log"
    log.write_text("\n".join(line for line in log.read_text().splitlines()
                             if "Registered client" not in line or "func-002-w2-z" not in line) + "\n")
    thresholds = json.loads((case / "result.json").read_text())["thresholds"]
    v = lifecycle.judge_case(REGISTRY["FUNC-002"], case, thresholds, "k8s")
    assert v.status is Status.ERROR and "func-002-w2-z" in v.summary, v.summary
    assert next(c for c in v.checks if c.name == "lock_shared").ok is None


def test_a_pair_that_never_released_the_lock_fails(tmp_path: Path) -> None:
    """Both pods got LOCK_OK but neither released it in the log: that is no evidence of turns, so FUNC-002
    cannot pass on its run intervals alone (the lock check must not drop out as 'no lock traffic')."""
    case = tmp_path / "unreleased"
    shutil.copytree(EVIDENCE / "k8s-func002-time-sliced", case)
    log = case / "scheduler.log"
    log.write_text("\n".join(line for line in log.read_text().splitlines()
                             if "released from running_list" not in line) + "\n")
    thresholds = json.loads((case / "result.json").read_text())["thresholds"]
    v = lifecycle.judge_case(REGISTRY["FUNC-002"], case, thresholds, "k8s")
    assert v.status is Status.FAIL and "never held and released" in v.summary, v.summary
