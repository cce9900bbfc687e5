"""Signals at any instant: a property test of a run over two clusters interrupted at a random moment.

hypothesis draws the signal (SIGINT, SIGTERM, SIGHUP), how it is delivered (once or twice, to the tool's process
or to its process group: ``timeout`` sends it to its child and then to the group, a terminal's Ctrl-C reaches the
whole foreground group) and the instant (a point of the run's event stream plus a delay, or a delay from the
moment the run took its first lease). Whatever it draws, the run that the tool leaves must be whole
(docs/reliability.md "Signals at any instant"):

* every selected case has a ``result.json`` (its verdict, INTERRUPTED, or an INTERRUPTED record of a case the run
  never reached); a signal before the run began leaves no run directory at all;
* nothing the run started is still running once the tool exited (workloads, samplers: every process that carries
  this example's marker in its environment);
* ``events.jsonl`` is in order: ``run_ended`` once and last, after every cluster's cases and harvests ended;
* run.json's ``exit_status`` is the process's, 128 + the signal when it says ``interrupted`` (and the records name
  the signal as it was).

Each example is one run of the tool (about 10 s): the example count is small (CI has 2 cores);
``XPUSHARE_PROPERTY_EXAMPLES`` raises it for a longer search (also ``XPUSHARE_SIGNAL_EXAMPLES`` for this test only).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.paths import REPO_ROOT

EXAMPLES = int(os.environ.get("XPUSHARE_SIGNAL_EXAMPLES") or os.environ.get("XPUSHARE_PROPERTY_EXAMPLES") or "10")
# No shrinking: an example is a whole run of the tool; the falsifying example is printed as drawn.
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                    phases=[Phase.explicit, Phase.generate], report_multiple_bugs=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

RUN_ID = "sig"
CLUSTERS = ("local", "loc2")
#: Per cluster: a case that starts a workload and the node sampler, then one that SKIPs at once.
CASES = ("FUNC-001", "FUNC-005")
WORKLOAD = 'workload_args={w2_medium_add: [--n, "64", --iters, "50"]}'
INVENTORY = """\
clusters:
  loc2:
    mode: host
    params:
      lease_path: {lease}
    hosts:
      me: {{connection: local, roles: [master, gpu]}}
"""

#: Ways to deliver the signal: to the process, to its group, or both (``timeout``: its child, then the group).
DELIVERIES = [("pid",), ("group",), ("pid", "group"), ("pid", "pid"), ("group", "group")]
#: The signal lands this long (seconds) after the chosen event; or, anchor 0, after the run took its first lease
#: (before it, the interpreter is starting and the tool has handled nothing: the signal's default action applies,
#: or Python loses it in an import; nothing of the run exists yet).
AFTER_EVENT_S = st.floats(min_value=0.0, max_value=0.3)
AFTER_START_S = st.floats(min_value=0.0, max_value=1.0)
#: Seconds the tool's wind-down may take after the signal (harvest, cleanup, reports).
WIND_DOWN_S = 90
#: Seconds a process of the run may take to go once the tool exited (a SIGTERM'd workload's own exit).
GONE_WITHIN_S = 2.0


def _marked_pids(marker: str) -> list[int]:
    """The processes whose environment carries ``marker`` (everything the tool started inherits it)."""
    found = []
    needle = marker.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:  # gone, or not ours
            continue
    return found


def _kill_all(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _events(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "events.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _event_count(run_dir: Path) -> int:
    try:
        return (run_dir / "events.jsonl").read_bytes().count(b"\n")
    except OSError:
        return 0


def _deliver(proc: subprocess.Popen[str], sig: signal.Signals, ways: tuple[str, ...], gap_s: float) -> None:
    for n, way in enumerate(ways):
        if n:
            time.sleep(gap_s)
        try:
            if way == "group":
                os.killpg(proc.pid, sig)
            else:
                os.kill(proc.pid, sig)
        except ProcessLookupError:  # the run had ended already
            return


def _check_events(run_dir: Path) -> None:
    evs = _events(run_dir)
    assert evs, "a run with run.json has events"
    names = [e["event"] for e in evs]
    assert names.count("run_ended") == 1 and names[-1] == "run_ended", names
    for cluster in CLUSTERS:
        mine = [e for e in evs if e.get("cluster") == cluster]
        assert mine and mine[0]["event"] == "run_started", (cluster, names)
        open_cases: list[str] = []
        open_steps: list[tuple[str, str]] = []
        for e in mine:
            if e["event"] == "case_started":
                open_cases.append(e["case_id"])
            elif e["event"] == "case_ended":
                assert open_cases and open_cases.pop() == e["case_id"], (cluster, e)
            elif e["event"] == "harvest_started":
                open_steps.append((e["case_id"], e["step"]))
            elif e["event"] == "harvest_ended":
                assert open_steps and open_steps.pop() == (e["case_id"], e["step"]), (cluster, e)
        assert not open_cases and not open_steps, f"{cluster}: run_ended before {open_cases} {open_steps} ended"


def _check_run(root: Path, sig: signal.Signals, rc: int, output: str) -> None:
    run_dir = root / ".tmplog" / RUN_ID / "xpushare"
    meta_path = run_dir / "run.json"
    if not meta_path.exists():  # the signal came before the run began (taking the leases): nothing written
        assert rc == 128 + sig, output
        assert not run_dir.exists() or not any(run_dir.rglob("result.json")), output
        return
    assert rc >= 0, f"the tool died of signal {-rc} instead of handling it:\n{output}"
    assert "Traceback" not in output, output
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    assert "ended" in meta, f"run.json has no end: {meta}\n{output}"
    assert meta["exit_status"] == rc, f"run.json says {meta['exit_status']}, the process exited {rc}\n{output}"
    assert meta["interrupted"] == (rc == 128 + sig), (meta, output)
    interrupted = meta["interrupted"]
    if interrupted:
        assert meta.get("interrupted_by") == ("Ctrl-C" if sig == signal.SIGINT else sig.name), meta
    name = "Ctrl-C" if sig == signal.SIGINT else sig.name
    for s in meta["selected"]:
        result = run_dir / s["cluster"] / s["suite"] / s["case_id"] / "result.json"
        assert result.exists(), f"{s['cluster']}/{s['case_id']}: no result.json\n{output}"
        record = json.loads(result.read_text(encoding="utf-8"))
        if record["status"] == "INTERRUPTED":
            assert interrupted, record
            assert name in record["summary"], record["summary"]
    _check_events(run_dir)
    if interrupted:
        assert name in (run_dir / "run-report.md").read_text(encoding="utf-8")


def _run_and_interrupt(root: Path, sig: signal.Signals, ways: tuple[str, ...], gap_s: float, anchor: int,
                       delay_s: float) -> None:
    marker = f"XPUSHARE_SIGNAL_TEST={uuid.uuid4().hex}"
    tmp = root / "tmp"
    tmp.mkdir()
    inventory = root / "inventory.yaml"
    inventory.write_text(INVENTORY.format(lease=root / "loc2.lease"), encoding="utf-8")
    env = {**os.environ, "TMPDIR": str(tmp), "XPUSHARE_LEASE_DIR": str(tmp), marker.split("=")[0]:
           marker.split("=")[1]}
    env.pop("XPUSHARE_SPAWN_DIR", None)  # the default: the temporary directory's
    argv = [sys.executable, "-m", "tests.premise_free", "func", "--cluster", ",".join(CLUSTERS),
            "--inventory", str(inventory), "--run-id", RUN_ID, "--set", WORKLOAD, "--root", str(root)]
    for case in CASES:
        argv += ["--case", case]
    proc = subprocess.Popen(argv, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    run_dir = root / ".tmplog" / RUN_ID / "xpushare"
    try:
        deadline = time.monotonic() + 60
        lease = tmp / "xpushare-run.lease"  # the local cluster's: the task's body runs (the leases come first)
        while not lease.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        while _event_count(run_dir) < anchor and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(delay_s)
        _deliver(proc, sig, ways, gap_s)
        try:
            output, _ = proc.communicate(timeout=WIND_DOWN_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            output, _ = proc.communicate()
            pytest.fail(f"the tool did not end within {WIND_DOWN_S} s of {sig.name}:\n{output}")
        rc = proc.returncode
        left: list[int] = []
        deadline = time.monotonic() + GONE_WITHIN_S
        while time.monotonic() < deadline:
            left = _marked_pids(marker.split("=")[1])
            if not left:
                break
            time.sleep(0.1)
        _kill_all(left)
        assert not left, f"still running after the tool exited: {left}\n{output}"
        _check_run(root, sig, rc, output)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
        _kill_all(_marked_pids(marker.split("=")[1]))


@pytest.mark.slow
@SETTINGS
@given(sig=st.sampled_from([signal.SIGINT, signal.SIGTERM, signal.SIGHUP]),
       ways=st.sampled_from(DELIVERIES),
       gap_s=st.sampled_from([0.0, 0.0005, 0.005, 0.05]),
       anchor=st.integers(min_value=0, max_value=24),
       data=st.data())
def test_a_signal_at_any_instant_leaves_a_whole_run(sig: signal.Signals, ways: tuple[str, ...], gap_s: float,
                                                   anchor: int, data: st.DataObject) -> None:
    delay_s = data.draw(AFTER_EVENT_S if anchor else AFTER_START_S, label="delay_s")
    root = Path(tempfile.mkdtemp(prefix="xpushare-signal-"))
    try:
        _run_and_interrupt(root, sig, ways, gap_s, anchor, delay_s)
    finally:
        shutil.rmtree(root, ignore_errors=True)
