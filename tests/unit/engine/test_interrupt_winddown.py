"""A run's wind-down after a signal is never cut short, and its exit status is run.json's (docs/reliability.md
"Signals at any instant"); the interrupt module's modes. In process, on a fake backend: the signals are real
(``os.kill`` of this process), delivered at the instants that used to lose a case (a second delivery in the harvest
and the cleanup, one after run.json's end). The random instants over real runs: test_signal_property.py."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.backend import FakeBackend
from xpushare.cases.base import CaseDef, CaseRun
from xpushare.engine.run import Reuse, Run, RunHooks, RunOutcome, RunSelection
from xpushare.evidence import events
from xpushare.inventory.schema import ClusterSpec, local_cluster
from xpushare.model.exit_status import ExitStatus
from xpushare.model.verdict import Status, Verdict
from xpushare.transport import interrupt


@pytest.fixture(autouse=True)
def _no_signal_left(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("XPUSHARE_LEASE_DIR", str(tmp_path))
    yield
    with interrupt.installed():  # an outermost block starts from no request: forget what the test recorded
        pass


def _signal(sig: signal.Signals) -> None:
    """Deliver ``sig`` to this process and give Python's handler time to run (main thread)."""
    os.kill(os.getpid(), sig)
    time.sleep(0.3)


class _Steps:
    """A backend's harvest, cleanup and close that take a while; ``deliver`` says what signal each sends (to this
    process) in its middle, ``steps`` what ran to its end."""

    def __init__(self, deliver: dict[str, signal.Signals]) -> None:
        self.deliver = deliver
        self.steps: list[str] = []

    def step(self, name: str) -> None:
        if name in self.deliver:
            _signal(self.deliver[name])
        time.sleep(0.3)  # the step's work, after the signal
        self.steps.append(name)

    def harvest(self, backend: FakeBackend) -> list[str]:
        self.step("harvest")
        (backend.case_dir / "evidence.txt").write_text("harvested\n", encoding="utf-8")
        return ["evidence.txt"]

    def backend(self) -> FakeBackend:
        return FakeBackend(on_harvest=self.harvest, on_cleanup=lambda: self.step("cleanup"),
                           on_close=lambda: self.steps.append("closed"))


#: The steps of the run under test: its act reads what to deliver there.
CURRENT: list[_Steps] = []


def _act(run: CaseRun) -> None:
    deliver = CURRENT[-1].deliver
    if "act" in deliver:
        os.kill(os.getpid(), deliver["act"])
    run.sleep(5)  # a wait of the act: sees the request within 0.2 s


def _case(case_id: str) -> CaseDef:
    return CaseDef(case_id, "functional", f"title {case_id}", "W1", "op", "files", act=_act,
                   judge=lambda ev, th, plan: Verdict(Status.PASS, "ok"))


class _Hooks(RunHooks):
    def __init__(self, steps: _Steps, at_finish: signal.Signals | None = None) -> None:
        self.steps = steps
        self.at_finish = at_finish
        CURRENT.append(steps)

    def backend(self, cluster: ClusterSpec) -> FakeBackend:
        return self.steps.backend()

    def finished(self, run: Run, outcome: RunOutcome) -> None:
        if self.at_finish is not None:
            _signal(self.at_finish)


def _run(tmp_path: Path, hooks: _Hooks, *case_ids: str) -> tuple[ExitStatus, Path]:
    cluster = local_cluster()
    cases = [_case(c) for c in case_ids]
    selection = RunSelection(label="t", cases=cases, required=frozenset(case_ids), todo={cluster.name: cases},
                             params=lambda case, _cluster: {})
    run = Run(root=tmp_path, clusters=[cluster], run_id="w", reuse=Reuse.REFUSE, out=open(os.devnull, "w"))  # noqa: SIM115
    with interrupt.installed():  # as the task's guard does
        status = run.execute(selection, hooks)
    return status, run.dir


def _result(run_dir: Path, case_id: str) -> dict[str, Any]:
    return json.loads((run_dir / "local" / "functional" / case_id / "result.json").read_text(encoding="utf-8"))


def test_a_second_signal_in_the_harvest_and_the_cleanup_cuts_neither_short(tmp_path: Path) -> None:
    backend = _Steps({"act": signal.SIGTERM, "harvest": signal.SIGTERM, "cleanup": signal.SIGINT})
    status, run_dir = _run(tmp_path, _Hooks(backend), "C-1", "C-2")
    assert status == 143
    assert backend.steps == ["harvest", "cleanup", "closed"]  # each ran to its end
    first = _result(run_dir, "C-1")
    assert first["status"] == "INTERRUPTED" and "(SIGTERM)" in first["summary"]  # the first signal, as it was
    assert "evidence.txt" in first["evidence"] and (run_dir / "local/functional/C-1/evidence.txt").exists()
    second = _result(run_dir, "C-2")  # never reached: recorded, so that --resume runs it
    assert second["status"] == "INTERRUPTED" and second["not_run"] and "(SIGTERM)" in second["summary"]
    meta = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    assert meta["exit_status"] == 143 and meta["interrupted"] is True and meta["interrupted_by"] == "SIGTERM"
    assert [e["event"] for e in events.read(run_dir)][-1] == "run_ended"
    assert "the run was interrupted (SIGTERM)" in (run_dir / "run-report.md").read_text(encoding="utf-8")


def test_a_signal_after_run_json_s_end_changes_nothing(tmp_path: Path) -> None:
    backend = _Steps({})
    status, run_dir = _run(tmp_path, _Hooks(backend, at_finish=signal.SIGINT), "C-1")
    assert status == ExitStatus.OK  # no KeyboardInterrupt out of the run: the process exits as run.json says
    meta = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    assert meta["exit_status"] == 0 and meta["interrupted"] is False
    assert _result(run_dir, "C-1")["status"] == "PASS"
    assert not (tmp_path / "xpushare-run.lease").exists()  # the lease was released all the same


def test_a_signal_before_the_first_case_records_every_case(tmp_path: Path) -> None:
    class _Early(_Hooks):
        def started(self, run: Run) -> None:
            _signal(signal.SIGHUP)

    status, run_dir = _run(tmp_path, _Early(_Steps({})), "C-1", "C-2")
    assert status == 129
    for case_id in ("C-1", "C-2"):
        record = _result(run_dir, case_id)
        assert record["status"] == "INTERRUPTED" and "(SIGHUP)" in record["summary"], record


# -- the interrupt module's modes ---------------------------------------------------------------------------------


def test_a_task_body_gets_one_keyboard_interrupt_for_two_deliveries() -> None:
    with interrupt.installed():
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        _signal(signal.SIGINT)  # the second delivery: recorded only (the first one's wind-down runs on)
        assert interrupt.received() == signal.SIGTERM and interrupt.describe() == "SIGTERM"


def test_deferred_records_without_raising_and_raising_raises_on_entry() -> None:
    with interrupt.installed(), interrupt.deferred():
        _signal(signal.SIGHUP)
        _signal(signal.SIGTERM)
        assert interrupt.requested() and interrupt.received() == signal.SIGHUP
        with pytest.raises(KeyboardInterrupt), interrupt.raising():  # a request before the block
            pytest.fail("the block ran despite the request")
    assert interrupt.exit_status() == 129


def test_settle_reports_what_came_before_and_ignores_what_comes_after() -> None:
    with interrupt.installed(), interrupt.deferred():
        assert interrupt.settle() is False
        _signal(signal.SIGTERM)
        assert not interrupt.requested()
    with pytest.raises(KeyboardInterrupt), interrupt.installed():  # the next task starts unsettled
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
