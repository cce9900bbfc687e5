"""Live runs are untouchable: ``invoke clean --run-id``, ``judge``, ``report`` and ``diff`` refuse a run that is
still running (exit 2, one ``error:`` line naming the holder; ``--force`` where it makes sense), and a run's
stored evidence is never read or rewritten under it (docs/leases.md, docs/reliability.md).

The defects: ``invoke clean --cluster local --run-id live1`` while run ``live1`` held the lease exited 0, stopped
the live run's workload and removed its log; ``judge``/``report``/``diff`` rewrote or compared a run mid-way."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.paths import REPO_ROOT
from tests.processes import alive
from tests.toolrun import run_tool
from xpushare.backends.leftovers import spawn_prefixes
from xpushare.model.errors import LeaseHeld
from xpushare.model.lease import Holder, LeaseSettings
from xpushare.report import run_lock
from xpushare.transport.local import LocalHost
from xpushare.transport.lock_file import LockFileStore


def _holder(run_id: str) -> Holder:
    return Holder(run_id=run_id, user="ana", machine=socket.gethostname(), pid=os.getpid(),
                  started="2026-11-28T10:18:24+00:00", token="t" * 16)


def _invoke(*args: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XPUSHARE_LEASE_DIR": str(tmp), "TMPDIR": str(tmp / "tmp")}
    env.pop("XPUSHARE_SPAWN_DIR", None)  # the default: the temporary directory's
    return run_tool([sys.executable, "-m", "invoke", *args], cwd=REPO_ROOT, env=env, timeout=120)




def test_clean_refuses_a_live_run_by_name_and_force_cleans_it(tmp_path: Path) -> None:
    (tmp_path / "tmp").mkdir()
    store = LockFileStore(LocalHost(), str(tmp_path / "xpushare-run.lease"))
    assert store.create(_holder("live1"), LeaseSettings())  # run live1 holds local's lease: this process, alive
    host = LocalHost(spawn_dir=str(tmp_path / "tmp" / f"xpushare-spawn-{os.getuid()}"))
    name = f"{spawn_prefixes('live1')[0]}5-local-FUNC-003-a1b2c3-func-003-w2"
    pid = host.spawn(name, ["sleep", "300"]).pid
    try:
        refused = _invoke("clean", "--cluster", "local", "--run-id", "live1", tmp=tmp_path)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: run live1 is live"), refused.stderr
        assert f"pid {os.getpid()}" in lines[0] and "--force" in lines[0]
        assert alive(pid) and Path(host.spawn_dir, f"{name}.log").exists()  # untouched
        forced = _invoke("clean", "--cluster", "local", "--run-id", "live1", "--force", tmp=tmp_path)
        assert forced.returncode == 0, forced.stderr
        assert f"stopped: {name} (pid {pid})" in forced.stdout
        deadline = time.monotonic() + 10
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(pid)
    finally:
        if alive(pid):
            os.kill(pid, 9)


def test_the_run_lock_tells_a_live_run_from_a_dead_one(tmp_path: Path) -> None:
    run_dir = tmp_path / ".tmplog" / "r1" / "xpushare"
    run_dir.mkdir(parents=True)
    assert run_lock.live_holder(run_dir) is None
    with run_lock.holding(run_dir, _holder("r1")):
        assert run_lock.live_holder(run_dir) == _holder("r1")
        with pytest.raises(LeaseHeld, match=r"run r1 \(ana@.*\) is live: it is not re-judged; try again"):
            run_lock.refuse_live(run_dir, what="it is not re-judged", force_hint=False)
    assert run_lock.live_holder(run_dir) is None and not (run_dir / run_lock.LOCK_FILE).exists()
    # a run killed with SIGKILL leaves the file; the kernel dropped its lock: dead
    (run_dir / run_lock.LOCK_FILE).write_text(_holder("r1").to_json() + "\n")
    assert run_lock.live_holder(run_dir) is None
    run_lock.refuse_live(run_dir, what="x", force_hint=True)


def test_the_same_run_cannot_run_twice_at_once(tmp_path: Path) -> None:
    run_dir = tmp_path / "r1" / "xpushare"
    run_dir.mkdir(parents=True)
    code = ("import sys, time; from pathlib import Path; from xpushare.report import run_lock; "
            "from xpushare.model.lease import Holder; "
            "h = Holder('r1', 'bo', 'elsewhere', 7, 'then', 'x' * 16); "
            "cm = run_lock.holding(Path(sys.argv[1]), h); cm.__enter__(); print('held', flush=True); time.sleep(60)")
    other = subprocess.Popen([sys.executable, "-c", code, str(run_dir)], cwd=REPO_ROOT, stdout=subprocess.PIPE,
                             text=True, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    try:
        assert other.stdout is not None and other.stdout.readline().strip() == "held"
        with pytest.raises(LeaseHeld, match=r"run r1 \(bo@elsewhere, pid 7"), run_lock.holding(run_dir, _holder("r1")):
            pass
    finally:
        other.kill()
        other.wait()
    with run_lock.holding(run_dir, _holder("r1")):  # its process is gone: the lock is free
        pass


@pytest.mark.parametrize("task", [["judge", "--run-id", "r1"], ["report", "--run-id", "r1"],
                                  ["diff", "r1", "r0"], ["diff", "r0", "r1"]])
def test_judge_report_and_diff_refuse_a_live_run(tmp_path: Path, task: list[str]) -> None:
    for run in ("r0", "r1"):
        d = tmp_path / ".tmplog" / run / "xpushare"
        d.mkdir(parents=True)
        (d / "run.json").write_text(json.dumps({"run_id": run, "selected": [], "required": []}))
    live = tmp_path / ".tmplog" / "r1" / "xpushare"
    before = sorted(p.name for p in live.iterdir())
    with run_lock.holding(live, _holder("r1")):
        proc = _invoke(*task, "--root", str(tmp_path), tmp=tmp_path)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: run r1 (ana@") and " is live: " in lines[0], lines
        assert ("--force" in lines[0]) == (task[0] != "judge")
        assert sorted(p.name for p in live.iterdir()) == [*before, run_lock.LOCK_FILE]  # nothing written
        if task[0] != "judge":
            forced = _invoke(*task, "--force", "--root", str(tmp_path), tmp=tmp_path)
            assert forced.returncode == 0, forced.stdout + forced.stderr
