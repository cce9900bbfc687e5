"""Stability, leak, fault and soak tasks end to end on a lab of their own (real sshd, real kubectl, lab cluster
running the real SUT: ``xpushare-scheduler`` and ``libxpushare.so`` on simulated GPUs, workloads on ``cudadrv``).

Time-compressed (seconds instead of hours, see ``LAB_PARAMS``); measured on 2 shared cores: 4 min 20 s to
4 min 35 s for the module with one lab, lab start included (healthy STAB/LEAK 74-84 s, ghost clients 61-63 s,
FAIL 36 s, each soak 28-31 s, leak mutant 25-30 s). The task runs (``POOL_RUNS``) run on three labs at once
(tests/lab/labpool.py), the two soaks after them on the first: the module 506 s -> 240 s in the suite's
conditions (beside other lab modules). Workloads are sized by simulated GPU time (1e12 FLOP/s, 25 GB/s:
``PROBE_LAB_OPTIONS``, a quarter of the standard lab's bandwidth, so the W5 probes, which run for a set time,
launch a quarter of the kernels through the real library): a W2 is 500 adds of 2048 x 2048 (1.0 s, 48 MiB of
the 64 MiB the library leaves allocatable), a W5 probes 1024 x 1024 adds (504 us each: about
1900 it/s alone). Quota steps (``stab_quota_interval_s`` 8 s) outlast
the real scheduler's 5 s annotation re-read. STAB-004 changes memory every 12 s on pods of 45 s (one round of
51 s) and runs the memory probe beside its W5 pods: on the healthy lab it held and used 512, 128, 384 and
512 MiB in the 4 phases (start, decrease, raise, back to the base; measurement windows 4-11 s after the 7 s
settle); ``memory-limit-decrease-ignored`` keeps 512 MiB under 128 and 384 MiB quotas (``probe_quota_held``
FAIL), ``memory-limit-raise-ignored`` keeps 128 MiB usable under 384 and 512 MiB (``probe_quota_usable``
FAIL), while ``quota_updates_applied`` passes under both: the healthy test and the two mutants took 4 min 29 s
with the lab's start.

* ``invoke stab`` (STAB-003/004; STAB-002 through ``invoke soak``) / ``invoke leak`` (all five) /
  ``invoke fail --allow-disruptive`` (all four) reach PASS on a healthy lab, ``invoke fail`` without the
  flag SKIPs; faults act on the real scheduler and leave the lab restored (nodes uncordoned, DaemonSets
  rolled out). Measured: STAB-003 logged 4/4 core changes (latency at most 2.9 s), STAB-004 2/2 to 4/4
  memory changes (at most 3.2 s); recoveries 0.7 s (scheduler rollout), 0.6 s (device plugin), 1.7 s (drain),
  0.1 s (heavy node). A W5 running through the scheduler's restart dies with the library's FATAL line
  (docs/findings.md 14); FAIL-001 still PASSes: the seed asks for terminal pods and a working probe.
  The healthy scheduler's VmRSS rises from about 9.9 to 12.4 MiB with its first clients (a significant but
  small trend, under the 8 MiB noise floor), then stays flat (39-40 KB over LEAK-001); its FD count stays at 8.
* mutant ``leak-per-registration`` (4 MiB and one eventfd per REGISTER, never freed): 16 pods over the two
  nodes give trend growths of 33-50 MiB and 8-12 FDs on the busier node (p < 1e-7): LEAK-001 and LEAK-002
  FAIL with the seed's thresholds (noise floors 8 MiB / 4 FDs).
* mutant ``ghost-clients`` (disconnected clients stay registered): 20 churned pods leave 20 ``client_info``
  ghosts (LEAK-004 FAIL) and 280 more series, 14 per ghost (LEAK-005 FAIL, limit 200; the lab's default 2
  churn rounds would add only 28, hence 5 rounds of 4 pods here).
* ``invoke soak`` survives an SSH drop and a node outage (gaps recorded, verdict PASS);
* a soak interrupted with SIGINT resumes with ``--resume`` in the same run dir and time series, and the real
  scheduler SIGKILLed during the resumed part turns the verdict to FAIL (restart count, judged against the
  baseline's: switching a node's build restarts its scheduler too) with the previous container log
  harvested and the restarted container's log streamed from its start.

The SSH lab is private to this module (sessions are killed and hosts stopped here), as is the lab cluster.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.lab.cluster import LabCluster, find_kubectl
from tests.lab.env import PROBE_LAB_OPTIONS
from tests.lab.kubelab import started_ssh_lab
from tests.lab.labpool import LabRun, first_of, outcome_of, pool_fixture, run_pool
from tests.lab.sshd import SshLab
from tests.paths import REPO_ROOT
from tests.toolrun import run_tool

pytestmark = [pytest.mark.lab, pytest.mark.slow]
ROOT = REPO_ROOT

W_ARGS = {
    # 500 adds of 3 x 16 MiB: 1.0 s of simulated GPU time at 25 GB/s, 48 MiB of the 64 MiB allocatable
    "w2_medium_add": ["--n", "2048", "--iters", "500", "--no-progress"],
    "w3_idle_add": ["--n", "1024", "--steps", "8", "--sleep-s", "0.1", "--no-progress"],
    "w4_alloc_free": ["--rounds", "20", "--mib", "2", "--no-progress"],
    # 504 us per add at 25 GB/s: the probe loop sleeps on the simulated GPU instead of spinning on launches
    "w5_quota_probe": ["--n", "1024", "--interval-s", "0.5", "--no-progress"],
}
#: The ``lab`` cluster's parameters (tests/lab/env.py: the seed's hours and minutes compressed to seconds) with
#: shorter pods: rounds of one or two small pods.
LAB_PARAMS: dict[str, Any] = {
    "workload_args": W_ARGS,
    "pod_timeout_s": 240,
}


@pytest.fixture(scope="module")
def stab_ssh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshLab]:
    """A private SSH lab: these tests kill its sessions and stop its hosts."""
    yield from started_ssh_lab(tmp_path_factory, "stab-ssh")


#: The module's task runs, on :data:`LABS` labs at once by :func:`pool_runs` (tests/lab/labpool.py): run id -> (the
#: mutant its lab runs, None for the unmodified build; the task's arguments), longest first. Each is judged on its
#: own lab's scheduler, pods and logs (the FAIL tasks' faults act on their lab alone); the soaks, which stop the
#: SSH lab's hosts and kill its sessions, run after them on the first lab.
POOL_RUNS: dict[str, tuple[str | None, tuple[str, ...]]] = {
    "stab": (None, ("stab", "--case", "STAB-003", "--case", "STAB-004")),
    "fault": (None, ("fail", "--allow-disruptive", *(a for i in range(1, 7) for a in ("--case", f"FAIL-00{i}")))),
    "ghosts": ("ghost-clients", ("leak", "--case", "LEAK-004", "--case", "LEAK-005",
                                 "--set", "leak_churn_rounds=5", "--set", "leak_pods=4")),
    "leak": (None, ("leak",)),
    "m-decrease": ("memory-limit-decrease-ignored", ("stab", "--case", "STAB-004")),
    "m-raise": ("memory-limit-raise-ignored", ("stab", "--case", "STAB-004")),
    "leaky": ("leak-per-registration", ("leak", "--case", "LEAK-001", "--case", "LEAK-002",
                                        "--set", "leak_rounds=4", "--set", "leak_pods=4")),
    "nofault": (None, ("fail", "--case", "FAIL-003")),
}
LABS = 3


stab_labs = pool_fixture("stab-kube", LABS, ssh="stab_ssh", params=LAB_PARAMS, **PROBE_LAB_OPTIONS)
stab_kube, inv = first_of("stab_labs")


@pytest.fixture(scope="module")
def pool_runs(stab_labs: list[tuple[LabCluster, Path]], tmp_path_factory: pytest.TempPathFactory
              ) -> dict[str, LabRun | BaseException]:
    """Every run of :data:`POOL_RUNS` (or the exception it raised)."""
    def tool(kube: LabCluster, inventory: Path, root: Path, run_id: str, args: Sequence[str]
             ) -> subprocess.CompletedProcess[str]:
        return run_task(inventory, root, *args, "--run-id", run_id)

    return run_pool(stab_labs, POOL_RUNS, tmp_path_factory, tool, results)


def invoke_argv(inv: Path, root: Path, *args: str) -> list[str]:
    task, *rest = args
    return [sys.executable, "-m", "invoke", task, "--cluster", "lab", "--inventory", str(inv), "--root", str(root),
            *rest]


def run_task(inv: Path, root: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return run_tool(invoke_argv(inv, root, *args), cwd=ROOT, timeout=timeout)


def results(root: Path, run_id: str) -> dict[str, dict[str, Any]]:
    base = root / ".tmplog" / run_id / "xpushare" / "lab" / "stability"
    return {p.parent.name: json.loads(p.read_text()) for p in base.glob("*/result.json")}


def case_dir(root: Path, run_id: str, case: str) -> Path:
    return root / ".tmplog" / run_id / "xpushare" / "lab" / "stability" / case


def explain(proc: subprocess.CompletedProcess[str] | None, got: dict[str, Any]) -> str:
    lines = [f"{k}: {v['status']} {v['summary']}" for k, v in sorted(got.items())]
    if proc is not None:
        lines += [proc.stdout[-4000:], proc.stderr[-3000:]]
    return "\n".join(lines)


def events(case: Path) -> list[dict[str, Any]]:
    path = case / "soak" / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def wait_for(predicate: Any, timeout: float, what: str, proc: subprocess.Popen[str] | None = None) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        if proc is not None and proc.poll() is not None:
            break
        time.sleep(0.3)
    out = proc.communicate(timeout=30)[0][-3000:] if proc is not None and proc.poll() is not None else ""
    raise AssertionError(f"timed out waiting for {what}\n{out}")


def soak_elapsed(case: Path) -> float:
    try:
        return float(json.loads((case / "soak" / "status.json").read_text())["elapsed_s"])
    except (OSError, ValueError, KeyError):
        return 0.0


def drop_connections(lab: SshLab, name: str) -> int:
    """Kill the sshd processes serving ``name``'s connections (clients see the connection die).

    Only sshd itself is killed: a shell SIGKILLed while it starts can leave its rc files' locks behind
    (pyenv's rehash lock hangs every later login for a minute), so sessions' shells are left to finish.
    """
    killed = 0
    for pid in lab.session_pids(name):
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        if comm == "sshd":
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
    return killed


def segments(case: Path) -> int:
    """Segments in the checkpoint (0 while the engine has the soak dir archived, before it is carried back)."""
    try:
        return len(json.loads((case / "soak" / "checkpoint.json").read_text())["segments"])
    except (OSError, ValueError, KeyError):
        return 0


def scheduler_log_lines(case: Path) -> list[str]:
    """Every scheduler log line the case kept: rotated parts, earlier segments' logs and the last stream."""
    out = []
    for path in sorted(case.rglob("scheduler*.log*")):
        if path.parent.name == "previous" or "fault" in path.name:
            continue
        opener: Any = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8", errors="replace") as fh:
            out += fh.read().splitlines()
    return out


def kubectl(kube: LabCluster, *args: str) -> str:
    return subprocess.run([find_kubectl() or "kubectl", "--kubeconfig", str(kube.kubeconfig_path), *args],
                          capture_output=True, text=True, timeout=60, check=True).stdout


# ------------------------------------------------------------------------------------------ tasks


def test_stab_and_leak_pass_on_a_healthy_lab(pool_runs: dict[str, LabRun | BaseException]) -> None:
    # STAB-002 runs below through `invoke soak`; STAB-001 is STAB-002's loop with another mix (2 cores in CI).
    ran = outcome_of(pool_runs, "stab")
    proc, got, tmp_path = ran.proc, ran.got, ran.root
    assert {k: v["status"] for k, v in got.items()} == {"STAB-003": "PASS", "STAB-004": "PASS"}, explain(proc, got)
    assert proc.returncode == 0
    stab3 = got["STAB-003"]
    updates = next(c for c in stab3["checks"] if c["name"] == "quota_updates_applied")
    assert updates["values"]["found"] >= 1
    report = case_dir(tmp_path, "stab", "STAB-004") / "soak" / "soak-report.md"
    assert "## Memory probe per quota phase" in report.read_text()
    probe = {c["name"]: c["ok"] for c in got["STAB-004"]["checks"] if c["name"].startswith("probe_")}
    assert probe == {"probe_measured": True, "probe_quota_held": True, "probe_quota_usable": True}
    measured = [p for p in got["STAB-004"]["metrics"]["probe_phases"].values() if p["measured"]]
    assert {p["direction"] for p in measured} >= {"start", "decrease", "raise"}, measured

    ran = outcome_of(pool_runs, "leak")
    proc, got = ran.proc, ran.got
    assert {k: v["status"] for k, v in got.items()} == {f"LEAK-00{i}": "PASS" for i in range(1, 6)}, \
        explain(proc, got)
    rss = next(c for c in got["LEAK-001"]["checks"] if c["name"] == "rss_no_leak")
    assert any(s.get("judged") for s in rss["values"]["series"].values())


@pytest.mark.parametrize(("run_id", "mutant", "check"), [
    ("m-decrease", "memory-limit-decrease-ignored", "probe_quota_held"),
    ("m-raise", "memory-limit-raise-ignored", "probe_quota_usable")])
def test_stab004_memory_probe_fails_a_change_that_is_logged_but_not_enforced(
        pool_runs: dict[str, LabRun | BaseException], run_id: str, mutant: str, check: str) -> None:
    assert POOL_RUNS[run_id][0] == mutant
    ran = outcome_of(pool_runs, run_id)
    proc, got = ran.proc, ran.got
    assert got["STAB-004"]["status"] == "FAIL", explain(proc, got)
    failed = {c["name"] for c in got["STAB-004"]["checks"] if c["ok"] is False}
    assert check in failed, explain(proc, got)
    assert (case_dir(ran.root, run_id, "STAB-004") / "soak" / "probe-pods").is_dir()


def test_fail_skips_without_the_flag_and_passes_with_it(pool_runs: dict[str, LabRun | BaseException]) -> None:
    ran = outcome_of(pool_runs, "nofault")
    proc, got = ran.proc, ran.got
    assert {k: v["status"] for k, v in got.items()} == {"FAIL-003": "SKIP"}, explain(proc, got)
    assert "--allow-disruptive" in got["FAIL-003"]["summary"]
    assert proc.returncode == 0

    # FAIL-001..006 (FAIL-007, the ECC storm, runs in the verdict matrix's rows): FAIL-006 SKIPs in Kubernetes mode,
    # since a lost GPU would stay lost for every later test of this module's lab
    ran = outcome_of(pool_runs, "fault")
    proc, got, tmp_path, stab_kube = ran.proc, ran.got, ran.root, ran.lab
    assert {k: v["status"] for k, v in got.items()} == {**{f"FAIL-00{i}": "PASS" for i in range(1, 6)},
                                                        "FAIL-006": "SKIP"}, explain(proc, got)
    assert "needs host mode" in got["FAIL-006"]["summary"]
    for case in ("FAIL-001", "FAIL-002", "FAIL-003"):
        assert got[case]["metrics"]["recovery_s"] is not None
        assert (case_dir(tmp_path, "fault", case) / "scheduler_before_fault.log").is_file()
    # the real client library exits when its scheduler connection drops (findings 14): the load pod running
    # through the rollout fails, new work (the probe) runs
    load = case_dir(tmp_path, "fault", "FAIL-001") / "pods" / "fail-001-load-1.log"
    assert "[XPUSHARE][FATAL]: Condition failed: xpushare_receive_block" in load.read_text()
    assert got["FAIL-001"]["metrics"]["succeeded"] == 0
    plan = json.loads((case_dir(tmp_path, "fault", "FAIL-003") / "plan.json").read_text())
    assert plan["restored"] is True and plan["evicted"], plan
    nodes = json.loads(kubectl(stab_kube, "get", "nodes", "-o", "json"))["items"]
    assert not any(n["spec"].get("unschedulable") for n in nodes)  # uncordoned in finally
    for ds in ("xpushare-scheduler", "xpushare-device-plugin"):
        kubectl(stab_kube, "-n", "xpushare-system", "rollout", "status", f"daemonset/{ds}", "--timeout=60s")


def statuses(got: dict[str, dict[str, Any]]) -> dict[str, str]:
    return {k: v["status"] for k, v in got.items()}


def check_values(got: dict[str, dict[str, Any]], case: str, name: str) -> dict[str, Any]:
    return dict(next(c for c in got[case]["checks"] if c["name"] == name)["values"])


def test_a_scheduler_leaking_per_registration_fails_leak_001_and_002(
        pool_runs: dict[str, LabRun | BaseException]) -> None:
    # 16 pods over 4 rounds: at least 8 REGISTERs on one node, 32 MiB and 8 FDs, clear of the noise floors
    assert POOL_RUNS["leaky"][0] == "leak-per-registration"
    ran = outcome_of(pool_runs, "leaky")
    proc, got = ran.proc, ran.got
    assert statuses(got) == {"LEAK-001": "FAIL", "LEAK-002": "FAIL"}, explain(proc, got)
    assert proc.returncode == 1
    assert "rss_no_leak" in got["LEAK-001"]["summary"] and "fd_no_leak" in got["LEAK-002"]["summary"]
    assert got["LEAK-001"]["metrics"]["rss_no_leak_growth"] > 16 * 2**20
    assert got["LEAK-002"]["metrics"]["fd_no_leak_growth"] > 6
    # the leak is in the long-lived process: no restart resets the series
    assert check_values(got, "LEAK-001", "scheduler_no_restart")["restarted"] == {}


def test_ghost_clients_fail_leak_004_and_leak_005(pool_runs: dict[str, LabRun | BaseException]) -> None:
    # 5 churn rounds of 4 pods leave 20 ghosts of 14 series each: past the seed's 200-series growth limit
    assert POOL_RUNS["ghosts"][0] == "ghost-clients"
    ran = outcome_of(pool_runs, "ghosts")
    proc, got = ran.proc, ran.got
    assert statuses(got) == {"LEAK-004": "FAIL", "LEAK-005": "FAIL"}, explain(proc, got)
    assert proc.returncode == 1
    ghosts = check_values(got, "LEAK-004", "no_ghost_clients")
    assert ghosts["count"] >= 16 and all("leak-004-" in g for g in ghosts["ghosts"]), ghosts
    assert check_values(got, "LEAK-005", "series_bounded")["growth"] > 200


# ------------------------------------------------------------------------------------------ soak


def start_soak(inv: Path, root: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(invoke_argv(inv, root, "soak", "--case", "STAB-002", *args), cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_soak_survives_an_ssh_drop_and_a_node_outage(inv: Path, stab_ssh: SshLab, tmp_path: Path) -> None:
    proc = start_soak(inv, tmp_path, "--minutes", "0.7", "--run-id", "drop", "--set", "soak_plots=true")
    case = case_dir(tmp_path, "drop", "STAB-002")
    try:
        wait_for(lambda: soak_elapsed(case) >= 6, 180, "the soak to run", proc)
        # the kubectl connection dies and the master refuses new ones for 6 s, longer than a round (about 4 s): a
        # round's kubectl fails whenever the drop lands (a drop between two rounds alone is healed by the next
        # round's reconnect, no gap)
        drop_connections(stab_ssh, "lab-master")
        stab_ssh.stop_host("lab-master")
        time.sleep(6)
        stab_ssh.start_host("lab-master")
        # then the node alone (while the master is away the rounds sample no node at all)
        drop_connections(stab_ssh, "lab-node1")
        stab_ssh.stop_host("lab-node1")
        time.sleep(6)
        stab_ssh.start_host("lab-node1")
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
        for name in ("lab-master", "lab-node1"):
            if not stab_ssh.is_running(name):
                stab_ssh.start_host(name)
    got = results(tmp_path, "drop")
    assert got["STAB-002"]["status"] == "PASS", explain(None, got) + out[-4000:]
    assert proc.returncode == 0
    recorded = events(case)
    # the master's dropped kubectl connection is a gap of the rounds, retried; the node's outage is no sampling gap
    # but a recorded host_unreachable / host_back pair (docs/soak.md), and the soak went on with the other nodes
    assert any(e["kind"] == "gap" and e["duration_s"] > 0 for e in recorded), recorded
    assert "retry in" in out and "gap of" in out
    assert any(e["kind"] == "host_unreachable" and e["node"] == "lab-node1" for e in recorded), recorded
    assert any(e["kind"] == "host_back" and e["node"] == "lab-node1" and e["missing_s"] > 0 for e in recorded), recorded
    assert "Hosts missing" in (case / "soak" / "soak-report.md").read_text()
    assert (case / "soak" / "soak-report.md").is_file() and (case / "soak" / "rss.png").is_file()
    assert "rss.png" in (tmp_path / ".tmplog" / "drop" / "xpushare" / "run-report.md").read_text()


def test_interrupted_soak_resumes_and_a_scheduler_restart_fails_it(inv: Path, stab_kube: LabCluster,
                                                                   tmp_path: Path) -> None:
    proc = start_soak(inv, tmp_path, "--minutes", "0.4", "--run-id", "resume")
    case = case_dir(tmp_path, "resume", "STAB-002")
    try:
        wait_for(lambda: soak_elapsed(case) >= 8, 180, "the soak to run", proc)
        os.kill(proc.pid, signal.SIGINT)
        out1, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out1[-3000:]
    assert results(tmp_path, "resume")["STAB-002"]["status"] == "INTERRUPTED"
    ck = json.loads((case / "soak" / "checkpoint.json").read_text())
    assert not ck["finished"] and ck["segments"][0]["reason"] == "interrupted"
    rows_before = (case / "soak" / "samples.csv").read_text().count("\n")
    first_ts = (case / "soak" / "samples.csv").read_text().splitlines()[1].split(",")[0]
    assert "--resume" in out1

    proc = start_soak(inv, tmp_path, "--run-id", "resume", "--resume")
    try:
        wait_for(lambda: segments(case) == 2 and soak_elapsed(case) >= ck["active_s"] + 3, 180,
                 "the resumed soak to run", proc)
        pid = stab_kube.scheduler_pid("lab-node1")
        assert pid is not None
        os.kill(pid, signal.SIGKILL)  # the lab kubelet restarts the container: restart count 1
        out2, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    got = results(tmp_path, "resume")
    assert got["STAB-002"]["status"] == "FAIL", explain(None, got) + out2[-4000:]
    assert "scheduler_no_restart" in got["STAB-002"]["summary"]
    assert proc.returncode == 1
    assert got["STAB-002"]["metrics"]["segments"] == 2
    samples = (case / "soak" / "samples.csv").read_text().splitlines()
    assert len(samples) > rows_before and samples[1].split(",")[0] == first_ts  # the same series, continued
    times = [float(line.split(",")[0]) for line in samples[1:]]
    assert times == sorted(times)
    assert any(e["kind"] == "gap" and e["op"] == "orchestrator" for e in events(case))
    assert (case / "attempts" / "1" / "result.json").is_file()  # the first segment's evidence is kept
    assert list((case / "soak" / "previous").glob("*.previous.log"))  # kubectl logs --previous, harvested
    assert any(e["kind"] == "anomaly" and "restarted" in e["what"] for e in events(case))
    # the log streams restart with the new container (kubectl logs -f ends with the old one), from the last
    # tick before it: the restarted scheduler's start-up lines are in the case's log
    assert any(e["kind"] == "logs_rotated" and "restarted" in e.get("reason", "") for e in events(case))
    assert any(" started in " in line and "xpushare-scheduler" in line for line in scheduler_log_lines(case))
