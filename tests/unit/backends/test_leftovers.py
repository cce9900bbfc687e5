"""``invoke clean``: what dead runs left is found by pid files and labels, removed, and said; live runs are kept.

Every test uses its own spawn dir (``TMPDIR``), so processes of other runs on this machine are never touched.
The end-to-end test SIGKILLs a real ``invoke func --cluster local`` mid-case (nothing of its own cleanup runs),
checks that it left running workloads behind, then that ``invoke clean`` stops and removes them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.paths import REPO_ROOT
from tests.processes import alive
from tests.toolrun import run_tool
from xpushare.backends.k8s_names import label_value, run_key
from xpushare.backends.leftovers import clean_host, kube_selector, older_prefixes, spawn_prefixes
from xpushare.transport.local import LocalHost

ROOT = REPO_ROOT




def _spawn(host: LocalHost, name: str) -> int:
    return host.spawn(name, ["sleep", "300"]).pid


def test_clean_host_stops_one_runs_processes_and_keeps_the_others(tmp_path: Path) -> None:
    host = LocalHost(spawn_dir=str(tmp_path / "spawn"))
    dead = _spawn(host, "xp2-r1-FUNC-001-w2")
    other = _spawn(host, "xp2-r2-FUNC-001-w2")
    (tmp_path / "spawn" / "xp2-r1-FUNC-001-sampler").mkdir()
    (tmp_path / "spawn" / "unrelated.txt").write_text("x")
    try:
        removed = clean_host(host, "r1")
        assert removed.error is None
        assert removed.stopped == [f"xp2-r1-FUNC-001-w2 (pid {dead})"]
        assert set(removed.entries) == {"xp2-r1-FUNC-001-w2.pid", "xp2-r1-FUNC-001-w2.log", "xp2-r1-FUNC-001-sampler"}
        assert not alive(dead) and alive(other)
        assert sorted(p.name for p in (tmp_path / "spawn").iterdir()) == [
            "unrelated.txt", "xp2-r2-FUNC-001-w2.log", "xp2-r2-FUNC-001-w2.pid"]
        assert clean_host(host, "r1").lines() == ["localhost: nothing left"]  # again: nothing found is fine
    finally:
        host.stop("xp2-r2-FUNC-001-w2")


def test_clean_host_without_a_run_id_keeps_the_live_runs(tmp_path: Path) -> None:
    host = LocalHost(spawn_dir=str(tmp_path / "spawn"))
    dead = _spawn(host, "xp-old-FUNC-001-w2")
    live = _spawn(host, "xp-live-FUNC-001-w2")
    try:
        removed = clean_host(host, None, live=["live"])
        assert removed.stopped == [f"xp-old-FUNC-001-w2 (pid {dead})"]
        assert not alive(dead) and alive(live)
        assert "stopped: xp-old-FUNC-001-w2" in "\n".join(removed.lines())
    finally:
        host.stop("xp-live-FUNC-001-w2")


def test_an_unusable_spawn_dir_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    host = LocalHost(spawn_dir=str(tmp_path / "file"))  # cd fails: nothing to clean there
    assert clean_host(host, "r1").lines() == ["localhost: nothing left"]


def test_prefixes_and_selectors() -> None:
    assert spawn_prefixes("20260215-134501") == ("xp15-20260215-134501-",)
    assert spawn_prefixes("Run_1") == ("xp5-Run_1-",)  # both backends' names, as the run id is
    assert older_prefixes("Run_1") == ("xp-Run_1-", "xp-run-1-")  # earlier versions': only to spare live runs
    assert kube_selector("r1") == f"app.kubernetes.io/managed-by=xpushare,xpushare/run-key={run_key('r1')}"
    assert kube_selector(None) == "app.kubernetes.io/managed-by=xpushare"
    assert kube_selector(None, ["b", "a"]) == "app.kubernetes.io/managed-by=xpushare,xpushare/run-id notin (a,b)"


def test_a_run_id_is_matched_exactly_never_by_prefix(tmp_path: Path) -> None:
    """``clean --run-id 20261128`` once stopped and removed the workloads of run ``20261128-101824`` too: a run's
    entries were found by the prefix ``xp-<run id>-``. Names now carry the run id's length."""
    host = LocalHost(spawn_dir=str(tmp_path / "spawn"))
    short = _spawn(host, f"{spawn_prefixes('20261128')[0]}5-local-FUNC-003-a1b2c3-w1")
    longer = _spawn(host, f"{spawn_prefixes('20261128-101824')[0]}5-local-FUNC-003-d4e5f6-w1")
    try:
        removed = clean_host(host, "20261128")
        assert removed.stopped == [f"xp8-20261128-5-local-FUNC-003-a1b2c3-w1 (pid {short})"], removed
        assert not alive(short) and alive(longer)
        assert all(e.startswith("xp8-20261128-") for e in removed.entries)
        kept = "xp15-20261128-101824-5-local-FUNC-003-d4e5f6-w1"
        assert sorted(p.name for p in (tmp_path / "spawn").iterdir()) == [f"{kept}.log", f"{kept}.pid"]
    finally:
        host.stop("xp15-20261128-101824-5-local-FUNC-003-d4e5f6-w1")


def test_kubernetes_objects_of_a_run_are_selected_exactly() -> None:
    """Two run ids may share a ``xpushare/run-id`` label value (``abc`` and ``abc-``; 64 characters cut to 63):
    a run's objects are selected by its run key, which they do not share."""
    for a, b in (("abc", "abc-"), ("x" * 63 + "a", "x" * 63 + "b"), ("20261128", "20261128-101824")):
        assert kube_selector(a) != kube_selector(b)
    assert label_value("abc") == label_value("abc-")  # why the run-id label alone is not enough


def _invoke(*args: str, env: dict[str, str], root: Path) -> subprocess.CompletedProcess[str]:
    return run_tool([sys.executable, "-m", "tests.premise_free", *args], cwd=ROOT, env=env, timeout=120)


@pytest.mark.slow
def test_after_sigkill_of_the_tool_clean_removes_what_the_run_left(tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp"), "PYTHONPATH": str(ROOT)}
    env.pop("XPUSHARE_SPAWN_DIR", None)  # the default: the temporary directory's
    (tmp_path / "tmp").mkdir()
    spawn = tmp_path / "tmp" / f"xpushare-spawn-{os.getuid()}"
    slow = ["--set", 'workload_args={w2_medium_add: [--n, "64", --iters, "100000000"]}']
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.premise_free", "func", "--cluster", "local", "--run-id", "k9",
         "--case", "FUNC-001",
         "--case", "FUNC-002", *slow, "--root", str(tmp_path)],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pods = tmp_path / ".tmplog/k9/xpushare/local/functional/FUNC-001/pods.json"
    deadline = time.monotonic() + 90
    while not (pods.exists() and '"Running"' in pods.read_text()) and time.monotonic() < deadline:
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    try:
        _check_clean_after_sigkill(tmp_path, env, spawn, pods)
    finally:  # whatever failed above, leave no workload running on this machine
        for pid_file in [*spawn.glob("xp2-k9-*.pid"), *spawn.glob("xp2-k9-*.hostpid")]:
            with contextlib.suppress(ValueError, OSError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)


def _check_clean_after_sigkill(tmp_path: Path, env: dict[str, str], spawn: Path, pods: Path) -> None:
    pids = {p.name: int(p.read_text()) for p in [*spawn.glob("xp2-k9-*.pid"), *spawn.glob("xp2-k9-*.hostpid")]}
    assert any(n.endswith("-func-001-w2.hostpid") for n in pids) and any(n.endswith("-sampler.pid") for n in pids), pids
    # the kill left the workload running (the sampler may or may not outlive the tool; either way clean must
    # leave nothing)
    left = {n: p for n, p in pids.items() if n.endswith("-func-001-w2.hostpid")}
    assert all(alive(pid) for pid in left.values()), {n: alive(p) for n, p in pids.items()}
    json.loads(pods.read_text())  # and never half a pods.json

    res = _invoke("clean", "--cluster", "local", "--run-id", "k9", env=env, root=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "localhost: stopped: " in res.stdout
    assert re.search(r"xp2-k9-5-local-FUNC-001-[0-9a-f]{6}-func-001-w2", res.stdout), res.stdout
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in pids.values()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(pid) for pid in pids.values())
    assert list(spawn.iterdir()) == []  # pid files, logs and the sampler's directory are gone
    again = _invoke("clean", "--cluster", "local", "--run-id", "k9", env=env, root=tmp_path)
    assert (again.returncode, again.stdout.strip()) == (0, "localhost: nothing left")
    as_json = _invoke("clean", "--cluster", "local", "--run-id", "k9", "-o", "json", env=env, root=tmp_path)
    assert as_json.returncode == 0 and json.loads(as_json.stdout) == [
        {"where": "localhost", "deleted": [], "stopped": [], "spared": [], "removed": [], "error": None}]
    # The report of the killed run counts both selected cases; neither has a result: both are errors.
    assert _invoke("report", "--run-id", "k9", "--root", str(tmp_path), env=env, root=tmp_path).returncode == 0
    junit = (tmp_path / ".tmplog/k9/xpushare/junit.xml").read_text()
    assert 'tests="2"' in junit and 'errors="2"' in junit


def test_a_pid_reused_since_the_crash_is_left_running(tmp_path: Path) -> None:
    """After a crash, cleaning may come much later; the pid in a pid file may then name an unrelated process,
    which must never be killed. Here the pid file is an hour old and its pid is a process started now."""
    spawn = tmp_path / "spawn"
    spawn.mkdir()
    stranger = subprocess.Popen(["sleep", "300"], start_new_session=True)
    pid_file = spawn / "xp2-r1-FUNC-001-w2.pid"
    pid_file.write_text(f"{stranger.pid}\n")
    an_hour_ago = time.time() - 3600
    os.utime(pid_file, (an_hour_ago, an_hour_ago))
    host = LocalHost(spawn_dir=str(spawn))
    try:
        removed = clean_host(host, "r1")
        assert removed.error is None and removed.stopped == []
        assert removed.spared == [f"xp2-r1-FUNC-001-w2 (pid {stranger.pid})"]
        assert "left running (pid reused by another process)" in "\n".join(removed.lines())
        assert alive(stranger.pid)
        assert not pid_file.exists()  # the run's record is gone: a second clean finds nothing
        assert clean_host(host, "r1").lines() == ["localhost: nothing left"]
    finally:
        stranger.kill()
        stranger.wait()


def test_one_clean_removes_what_dying_wrappers_write_after_the_listing(tmp_path: Path) -> None:
    """A wrapper that gets TERM writes its last files (``.end``, ``.rc``) as it dies, after clean listed the spawn
    dir: one ``clean`` still leaves nothing (it needed three passes)."""
    spawn = tmp_path / "spawn"
    host = LocalHost(spawn_dir=str(spawn))
    script = ('trap \'date > xp2-r9-FUNC-001-w2.end; echo 143 > xp2-r9-FUNC-001-w2.rc; exit 143\' TERM; '
              'sleep 300 & wait')
    pid = host.spawn("xp2-r9-FUNC-001-w2", ["sh", "-c", script]).pid
    time.sleep(0.3)  # the trap is set
    removed = clean_host(host, "r9")
    assert removed.error is None and removed.stopped == [f"xp2-r9-FUNC-001-w2 (pid {pid})"]
    assert "xp2-r9-FUNC-001-w2.rc" in removed.entries
    assert list(spawn.iterdir()) == []
    assert clean_host(host, "r9").lines() == ["localhost: nothing left"]
