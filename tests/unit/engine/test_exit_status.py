"""run.json's exit status is always the process's.

The defect: after SIGINT the process exited 130 while run.json recorded ``exit_status 0, interrupted false``: the
signal landed after run.json's end was written (the closing lines, the lease's release) and raised there. Once the
run's status is final (:func:`xpushare.transport.interrupt.settle`), a signal changes nothing."""

from __future__ import annotations

import io
import json
import os
import signal
import time
from pathlib import Path

import pytest
from invoke.exceptions import Exit

from xpushare.backends.base import Backend
from xpushare.backends.host import HostBackend
from xpushare.cli.guard import guarded
from xpushare.engine.run import Run, RunHooks, RunOutcome, RunSelection
from xpushare.inventory.schema import ClusterSpec, local_cluster
from xpushare.transport import interrupt


class _SignalAtTheEnd(RunHooks):
    """Sends ``signum`` to this process once run.json's end and the reports are written (the closing lines)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum

    def backend(self, cluster: ClusterSpec) -> Backend:
        return HostBackend(cluster)

    def finished(self, run: Run, outcome: RunOutcome) -> None:
        os.kill(os.getpid(), self.signum)
        time.sleep(0.2)  # the handler runs here


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_after_the_run_ended_leaves_the_exit_status_run_json_s(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], signum: int) -> None:
    monkeypatch.setenv("XPUSHARE_LEASE_DIR", str(tmp_path))
    run = Run(root=tmp_path, clusters=[local_cluster()], run_id="r1", out=io.StringIO())
    selection = RunSelection(label="nothing", cases=[], required=frozenset(), todo={"local": []},
                             params=lambda case, cluster: {})
    code = 0
    try:
        guarded(lambda: run.execute(selection, _SignalAtTheEnd(signum)))
    except Exit as exc:
        code = exc.code
    meta = json.loads((run.dir / "run.json").read_text())
    assert (meta["exit_status"], meta["interrupted"]) == (0, False)
    assert code == meta["exit_status"]
    assert f"{signal.Signals(signum).name} after the run had ended" in capsys.readouterr().err
    assert not (tmp_path / "xpushare-run.lease").exists()  # the lease was released all the same


def test_settle_turns_signals_into_late_notes(monkeypatch: pytest.MonkeyPatch) -> None:
    with interrupt.installed():
        interrupt.settle()
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.1)
        interrupt.check()  # raises nothing
        assert not interrupt.requested() and interrupt.late() == [signal.SIGINT]
    with interrupt.installed():  # the next outermost block starts afresh
        assert interrupt.late() == []
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)


def test_a_later_run_of_the_process_is_interruptible_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run.execute outside guarded (its deferred block outermost): an earlier run's settle must not swallow the
    next run's signals."""
    monkeypatch.setenv("XPUSHARE_LEASE_DIR", str(tmp_path))
    with interrupt.installed():  # no request left by an earlier test
        pass
    interrupt.settle()  # as an earlier run of this process left it
    run = Run(root=tmp_path, clusters=[local_cluster()], run_id="r2", out=io.StringIO())
    selection = RunSelection(label="nothing", cases=[], required=frozenset(), todo={"local": []},
                             params=lambda case, cluster: {})

    class _SignalAtStart(_SignalAtTheEnd):
        def prepared(self, run: Run, cluster: ClusterSpec, backend: Backend) -> None:
            os.kill(os.getpid(), signal.SIGTERM)  # while the cluster's cases run
            time.sleep(0.2)

        def finished(self, run: Run, outcome: RunOutcome) -> None:
            pass

    status = run.execute(selection, _SignalAtStart(signal.SIGTERM))  # no outer block: the run's own are outermost
    meta = json.loads((run.dir / "run.json").read_text())
    assert status == meta["exit_status"] == 143 and meta["interrupted"] is True
