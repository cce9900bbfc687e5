"""The engine end to end on the built-in ``local`` cluster: real processes, real workloads (CPU, tiny).

The machine has neither a GPU nor the SUT, so the tool runs with the premises it cannot meet waived
(:mod:`tests.premise_free`): FUNC-001 acts and is judged; FUNC-002 acts and is ERROR, its premise
``two-pods-one-gpu`` unmet in the evidence (no GPU); the premises themselves: tests/unit/engine/test_premises.py."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.paths import REPO_ROOT
from tests.toolrun import run_tool
from xpushare.transport.local import default_spawn_dir

ROOT = REPO_ROOT
FAST = ["--set", 'workload_args={w2_medium_add: [--n, "64", --iters, "50"]}']
RUN4 = f"r4-{os.getpid()}"
BROKEN = ["--set", 'workload_args={w2_medium_add: [--n, "-5"]}']


def invoke(*args: str, root: Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return run_tool(
        [sys.executable, "-m", "tests.premise_free", *args, "--root", str(root)],
        cwd=ROOT, timeout=timeout,
    )


def run_dir(root: Path, run_id: str) -> Path:
    return root / ".tmplog" / run_id / "xpushare"


def result(root: Path, run_id: str, case: str) -> dict:
    return json.loads((run_dir(root, run_id) / "local" / "functional" / case / "result.json").read_text())


def test_func_on_local_writes_the_run_dir(tmp_path: Path) -> None:
    old_mask = os.umask(0o022)  # the run inherits it: every file and folder it writes must follow it
    try:
        proc = invoke("func", "--cluster", "local", "--run-id", "r1", "--case", "FUNC-001", "--case", "FUNC-002",
                      "--case", "FUNC-004", "--case", "FUNC-009", *FAST, root=tmp_path)
    finally:
        os.umask(old_mask)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # FUNC-002: ERROR
    rd = run_dir(tmp_path, "r1")
    modes = {str(p.relative_to(tmp_path)): oct(stat.S_IMODE(p.lstat().st_mode)) for p in tmp_path.rglob("*")}
    expected = {k: oct(0o755 if (tmp_path / k).is_dir() else 0o644) for k in modes}
    assert modes == expected  # as the umask says (docs/reliability.md "One write path"); not mkstemp's 0600
    for name in ("case-summary.tsv", "run-summary.tsv", "run.json", "junit.xml", "run-report.md"):
        assert (rd / name).is_file(), name
    r1 = result(tmp_path, "r1", "FUNC-001")
    assert r1["status"] == "PASS" and r1["metrics"]["runtime_s"] > 0
    assert "pods/func-001-w2.log" in r1["evidence"] and r1["params"]["pod_timeout_s"] == 1800
    assert "pod_timeout_s" not in r1["thresholds"]  # the act's parameter: the judgment never read it
    phases = r1["phases_s"]
    assert list(phases) == ["begin", "act", "harvest", "cleanup", "judge"]
    assert all(v >= 0 for v in phases.values()) and sum(phases.values()) <= r1["duration_s"] + 0.01
    assert result(tmp_path, "r1", "FUNC-009")["phases_s"] == {}  # a SKIP runs no phase
    case_dir = rd / "local" / "functional" / "FUNC-001"
    assert (case_dir / "analysis.txt").read_text().count("Judgment") == 1
    assert list((case_dir / "sampler").iterdir()), "sampler evidence (or its no-GPU record) is kept"
    r2 = result(tmp_path, "r1", "FUNC-002")
    assert r2["status"] == "ERROR" and r2["summary"].startswith("premise unmet: two-pods-one-gpu: ")
    assert result(tmp_path, "r1", "FUNC-004")["status"] == "SKIP"
    assert "client library" in result(tmp_path, "r1", "FUNC-004")["summary"]
    assert "needs Kubernetes" in result(tmp_path, "r1", "FUNC-009")["summary"]
    report = (rd / "run-report.md").read_text()
    assert "release_ready: **NO**" in report  # required cases were skipped


def test_unknown_case_is_a_usage_error(tmp_path: Path) -> None:
    proc = invoke("func", "--cluster", "local", "--case", "FUNC-999", root=tmp_path)
    assert proc.returncode == 2 and "unknown case id" in proc.stderr and "Traceback" not in proc.stderr
    proc = invoke("func", "--cluster", "local", "--case", "FUNC-001", "--set", "no_such_threshold=1", root=tmp_path)
    assert proc.returncode == 2 and "unknown parameter" in proc.stderr
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    proc = invoke("func", "--cluster", "local", "--case", "FUNC-001", root=blocker)
    assert proc.returncode == 2 and "Not a directory" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_failing_case_exit_1_then_resume_reruns_only_non_pass(tmp_path: Path) -> None:
    first = invoke("func", "--cluster", "local", "--run-id", "r2", "--case", "FUNC-001", *BROKEN, root=tmp_path)
    assert first.returncode == 1
    assert result(tmp_path, "r2", "FUNC-001")["status"] == "FAIL"
    # Adding a case to the run (--resume: a stored run is never rewritten without it): FUNC-002 is ERROR here
    # (no GPU: premise two-pods-one-gpu), so the exit status stays 1.
    assert invoke("func", "--cluster", "local", "--run-id", "r2", "--resume", "--case", "FUNC-002", *FAST,
                  root=tmp_path).returncode == 1
    assert result(tmp_path, "r2", "FUNC-002")["status"] == "ERROR"
    again = invoke("func", "--cluster", "local", "--run-id", "r2", "--resume", "--case", "FUNC-001", *FAST,
                   root=tmp_path)
    assert again.returncode == 1, again.stdout + again.stderr  # the run still holds FUNC-002's ERROR
    r = result(tmp_path, "r2", "FUNC-001")
    assert r["status"] == "PASS" and r["attempt"] == 2
    assert (run_dir(tmp_path, "r2") / "local/functional/FUNC-001/attempts/1/result.json").exists()
    passed_at = r["started"]
    last = invoke("func", "--cluster", "local", "--run-id", "r2", "--resume", "--case", "FUNC-001",
                  "--case", "FUNC-002", *FAST, root=tmp_path)
    assert last.returncode == 1 and result(tmp_path, "r2", "FUNC-002")["attempt"] == 2  # not PASS: run again
    assert result(tmp_path, "r2", "FUNC-001")["started"] == passed_at  # PASS was not re-run
    rows = (run_dir(tmp_path, "r2") / "case-summary.tsv").read_text().splitlines()[1:]
    assert sorted(r.split("\t")[2] for r in rows) == ["FUNC-001", "FUNC-002"]


#: A host-mode cluster of this machine whose inventory lists one GPU: the tool places both FUNC-002 pods on it, so
#: the pair's GPU is in the evidence (the workloads still run on the CPU).
ONE_GPU = """\
clusters:
  gpu1:
    mode: host
    hosts:
      me: {connection: local, roles: [gpu], gpus: 1}
"""


def test_rejudge_offline_with_other_thresholds(tmp_path: Path) -> None:
    inv = tmp_path / "inventory.yaml"
    inv.write_text(ONE_GPU, encoding="utf-8")
    proc = invoke("func", "--cluster", "gpu1", "--inventory", str(inv), "--run-id", "r3", "--case", "FUNC-002", *FAST,
                  root=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    def r3() -> dict:
        return json.loads((run_dir(tmp_path, "r3") / "gpu1" / "functional" / "FUNC-002" / "result.json").read_text())

    assert r3()["status"] == "PASS"
    # the strictest threshold (whole overlap): FAIL unless one pod's run lay inside the other's (ratio 1.0)
    want, code = ("PASS", 0) if r3()["metrics"]["overlap_ratio"] >= 1.0 else ("FAIL", 1)
    proc = invoke("judge", "--run-id", "r3", "--set", "func002_min_overlap_ratio=1", "--apply", root=tmp_path)
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert r3()["status"] == want and r3()["thresholds"]["func002_min_overlap_ratio"] == 1
    assert invoke("judge", "--run-id", "r3", "--set", "func002_min_overlap_ratio=0.5", "--apply",
                  root=tmp_path).returncode == 0
    assert invoke("report", "--run-id", "r3", root=tmp_path).returncode == 0
    assert invoke("judge", "--run-id", "nope", root=tmp_path).returncode == 2


def _spawned_pids(prefix: str) -> list[int]:
    spawn = Path(default_spawn_dir())
    return [int(p.read_text()) for p in spawn.glob(f"{prefix}*.pid") if p.read_text().strip().isdigit()]


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_signal_harvests_cleans_up_exits_128_plus_it_and_resumes(tmp_path: Path, sig: signal.Signals,
                                                                   status: int) -> None:
    """Ctrl-C, and SIGTERM / SIGHUP handled the same way (what ``timeout``, CI and systemd send)."""
    slow = ["--set", 'workload_args={w2_medium_add: [--n, "64", --iters, "100000000"]}']
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.premise_free", "func", "--cluster", "local", "--run-id", RUN4,
         "--case", "FUNC-001", "--case", "FUNC-002", *slow, "--root", str(tmp_path)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    pods = run_dir(tmp_path, RUN4) / "local/functional/FUNC-001/pods.json"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if pods.exists() and '"Running"' in pods.read_text():
            break
        time.sleep(0.2)
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=90)
    assert proc.returncode == status, out
    r = result(tmp_path, RUN4, "FUNC-001")
    assert r["status"] == "INTERRUPTED"
    assert ("Ctrl-C" if sig == signal.SIGINT else sig.name) in r["summary"]
    for name in ("run-summary.tsv", "junit.xml", "run-report.md"):  # the reports are written
        assert (run_dir(tmp_path, RUN4) / name).exists(), name
    assert (run_dir(tmp_path, RUN4) / "local/functional/FUNC-001/pods/func-001-w2.log").exists()  # harvested
    never = result(tmp_path, RUN4, "FUNC-002")  # the run stopped: the case it never reached is recorded, not run
    assert never["status"] == "INTERRUPTED" and never["not_run"] and "before this case" in never["summary"]
    assert ("Ctrl-C" if sig == signal.SIGINT else sig.name) in never["summary"]
    assert not (run_dir(tmp_path, RUN4) / "local/functional/FUNC-002/pods.json").exists()
    assert _spawned_pids(f"xp-{RUN4}-") == []  # cleaned up
    assert "--resume" in out
    resumed = invoke("func", "--cluster", "local", "--run-id", RUN4, "--resume", "--case", "FUNC-001",
                     "--case", "FUNC-002", *FAST, root=tmp_path)
    assert resumed.returncode == 1, resumed.stdout + resumed.stderr  # FUNC-002 ERROR: no GPU here
    assert result(tmp_path, RUN4, "FUNC-001")["status"] == "PASS"
    assert result(tmp_path, RUN4, "FUNC-002")["status"] == "ERROR"


def test_resolve_run_id_validates_and_needs_an_id_to_resume() -> None:
    from xpushare.engine.run import resolve_run_id
    from xpushare.model.errors import UsageError

    assert resolve_run_id("r1", resume=True, what="soak") == "r1"
    assert len(resolve_run_id(None, resume=False, what="run")) == len("20261121-101010")
    with pytest.raises(UsageError, match="--resume needs --run-id of the soak"):
        resolve_run_id(None, resume=True, what="soak")
    with pytest.raises(UsageError):
        resolve_run_id("../escape", resume=False, what="run")
