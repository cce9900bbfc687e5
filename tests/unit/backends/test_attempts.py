"""Each attempt of a case has its own identity: what an earlier, dead attempt left on a host (``.rc``, ``.end``,
logs, pid files) or in Kubernetes (pods) is never read as the evidence of a new attempt.

The defect: ``kill -KILL`` of the tool during FUNC-003, then ``--resume``: the resumed attempt's first poll read
the dead attempt's ``.rc`` and ``.end`` (same spawn names) and judged its pod finished before it started."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from xpushare.backends.base import CaseContext
from xpushare.backends.host import HostBackend
from xpushare.inventory.schema import local_cluster
from xpushare.model.workload import WorkloadSpec

QUICK = ("--n", "64", "--iters", "50")
SLOW = ("--n", "64", "--iters", "100000000")


@pytest.fixture
def spawn_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # LocalHost's spawn dir lives under it
    return tmp_path


def _attempt(case_dir: Path, args: tuple[str, ...]) -> HostBackend:
    backend = HostBackend(local_cluster(), poll_s=0.05)
    backend.prepare_run("r1")
    case_dir.mkdir(parents=True, exist_ok=True)
    backend.begin_case(case_dir, "FUNC-003")
    backend.start_pods([WorkloadSpec(name="func-003-w2", workload="w2_medium_add", args=args)])
    return backend


def test_a_resumed_attempt_never_reads_the_files_of_a_dead_one(spawn_tmp: Path) -> None:
    dead = _attempt(spawn_tmp / "a1", QUICK)
    (done,) = dead.wait_terminal(["func-003-w2"], timeout_s=60)
    assert done.phase == "Succeeded" and done.finished is not None
    # the tool is SIGKILLed here: no harvest, no cleanup; its .rc/.end stay on the host
    resumed = _attempt(spawn_tmp / "a2", SLOW)
    try:
        (pod,) = resumed.case_pods()
        assert pod.phase in ("Pending", "Running"), pod
        assert pod.exit_code is None and pod.finished is None
        assert pod.started is None or done.finished is None or pod.started >= done.finished
        assert resumed.case is not None and dead.case is not None and resumed.case.attempt != dead.case.attempt
    finally:
        resumed.cleanup()
        resumed.close()


def test_every_attempt_gets_its_own_token() -> None:
    tokens = {CaseContext(Path("."), "FUNC-003").attempt for _ in range(50)}
    assert len(tokens) == 50 and all(len(t) == 6 for t in tokens)
