"""The soak loop with a fake cluster and a virtual clock: rounds, sampling, gaps, checkpoint/resume, rotation.

Everything runs in virtual time (the loop's clock, monotonic clock and sleep are injected), so an hour of
soak takes milliseconds.
"""

from __future__ import annotations

import gzip
import io
import itertools
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest

from tests.fakes.backend import FakeBackend, FakeKube, FakeRotation, FakeScheduler
from tests.paths import REPO_ROOT
from tests.toolrun import run_tool
from xpushare.cases import REGISTRY
from xpushare.evidence.scrape_capture import scrape_facts
from xpushare.evidence.soak_series import CsvAppender, JsonlAppender, iter_csv, iter_jsonl, parts
from xpushare.evidence.store import Evidence
from xpushare.judge import stability as js
from xpushare.model.errors import ConnectionLost
from xpushare.model.verdict import Status
from xpushare.model.workload import WorkloadRecord, WorkloadSpec
from xpushare.soak.checkpoint import Checkpoint
from xpushare.soak.loop import SoakLoop, SoakSettings
from xpushare.soak.ops import NodeSample, ProcSample, SchedPod, parse_node_output
from xpushare.soak.task import _carry_soak_forward
from xpushare.transport.kube_errors import KubeError, KubeUnavailable

T0 = 1_795_000_000.0
MIB = 2**20


class VClock:
    """Virtual time: ``sleep`` advances it and runs hooks (fault injection at given times)."""

    def __init__(self) -> None:
        self.t = T0
        self.hooks: list[Callable[[float], None]] = []

    def clock(self) -> float:
        return self.t

    def mono(self) -> float:
        return self.t - T0 + 5000.0

    def sleep(self, dt: float) -> None:
        self.t += max(dt, 0.001)
        for hook in list(self.hooks):
            hook(self.t - T0)

    def advance(self, dt: float) -> None:
        self.t += dt


def exposition(running: list[str], used: float) -> str:
    lines = [
        "# HELP xpushare_gpu_memory_used_bytes Used GPU memory in bytes",
        "# TYPE xpushare_gpu_memory_used_bytes gauge",
        f'xpushare_gpu_memory_used_bytes{{gpu_uuid="G0",gpu_index="0"}} {used}',
        "# HELP xpushare_client_info Client metadata (value=1)",
        "# TYPE xpushare_client_info gauge",
    ]
    lines += [f'xpushare_client_info{{namespace="default",pod="{p}",client_id="c{i}",gpu_uuid="G0",gpu_index="-1",'
              f'host_pid="{100 + i}"}} 1' for i, p in enumerate(running)]
    return "\n".join(lines) + "\n" + "\nHTTP_CODE=200\nCONTENT_TYPE=text/plain; version=0.0.4; charset=utf-8\n"


class FakeOps:
    """A one-node cluster: pods are Pending 2 s, run ``runtime`` s, then Succeeded; the scheduler's RSS
    grows ``rss_per_s`` bytes per second; ``fail`` windows (seconds since T0) raise the given error."""

    def __init__(self, vc: VClock, *, rss_per_s: float = 0.0, runtime: float = 20.0) -> None:
        self.vc = vc
        self.rss_per_s = rss_per_s
        self.runtime = runtime
        self.pods: dict[str, float] = {}
        self.fail: list[tuple[float, float, Exception]] = []
        self.annotations: list[tuple[str, dict[str, str], float]] = []
        self.restarts = 0
        self.ghost: str | None = None
        self.rotations = 0
        self.rotated_since: list[float | None] = []
        self.rng = random.Random(4)

    def _check(self) -> None:
        now = self.vc.t - T0
        for start, end, exc in self.fail:
            if start <= now < end:
                raise exc

    def _phase(self, created: float) -> tuple[str, float | None, float | None]:
        age = self.vc.t - created
        if age < 2:
            return "Pending", None, None
        if age < 2 + self.runtime:
            return "Running", created + 2, None
        return "Succeeded", created + 2, created + 2 + self.runtime

    def scheduler_pods(self) -> list[SchedPod]:
        self._check()
        return [SchedPod("n1", "sched-1", "u1", self.restarts, True, "10.0.0.1")]

    def sample(self, pods: Any) -> list[NodeSample]:
        self._check()
        rss = 30 * MIB + self.rss_per_s * (self.vc.t - T0) + self.rng.gauss(0, 20e3)
        running = [n for n, c in self.pods.items() if self._phase(c)[0] == "Running"]
        if self.ghost:
            running.append(self.ghost)
        text = exposition(running, 256 * MIB * len(running))
        return [NodeSample("n1", (ProcSample(4242, int(rss), 10, 3),), text)]

    def start_pods(self, specs: Any) -> None:
        self._check()
        for s in specs:
            self.pods.setdefault(s.name, self.vc.t)

    def poll_pods(self) -> list[WorkloadRecord]:
        self._check()
        out = []
        for name, created in self.pods.items():
            phase, started, finished = self._phase(created)
            out.append(WorkloadRecord(name, phase, 0 if phase == "Succeeded" else None, "n1", None, started, finished))
        return out

    def delete_pods(self, timeout_s: float) -> None:
        self._check()
        self.pods.clear()

    def annotate(self, pod: str, annotations: dict[str, str]) -> float:
        self._check()
        self.annotations.append((pod, annotations, self.vc.t))
        return self.vc.t

    def pod_log(self, pod: str) -> str:
        return "log"

    def rotate_logs(self, dest: Path, index: int, *, since: float | None = None) -> list[Path]:
        self.rotations += 1
        self.rotated_since.append(since)
        return []

    def harvest_previous(self, dest: Path) -> list[Path]:
        return []

    def end_round(self) -> None:
        pass


def mix(r: int) -> list[WorkloadSpec]:
    return [WorkloadSpec(name=f"stab-x-r{r}-{i}", workload="w2_medium_add", core_limit=30) for i in (1, 2)]


def settings(**kw: Any) -> SoakSettings:
    base: dict[str, Any] = {"max_rounds": 3, "sample_interval_s": 5, "poll_s": 1, "settle_s": 30, "progress_s": 20,
                            "interim_s": 10_000, "checkpoint_s": 15, "log_rotate_s": 10_000, "backoff_initial_s": 1,
                            "backoff_max_s": 8, "round_timeout_s": 300}
    base.update(kw)
    return SoakSettings(**base)


def make_loop(tmp: Path, ops: FakeOps, vc: VClock, st: SoakSettings, ck: Checkpoint | None = None,
              out: io.StringIO | None = None) -> SoakLoop:
    ck = ck or Checkpoint("STAB-X", "run1", "fake", st.duration_s, st.max_rounds)
    return SoakLoop(ops, tmp / "case" / "soak", st, mix, ck, ours_prefix="stab-x-", out=out, clock=vc.clock,
                    monotonic=vc.mono, sleep=vc.sleep, label="STAB-X")


TH = {**REGISTRY["LEAK-005"].params, **REGISTRY["STAB-003"].params}


def evidence(tmp: Path, *, rounds: int = 0) -> Evidence:
    """The case directory as the judges read it; ``rounds``: the harvest's scheduler.log gets a registration of
    each of :func:`mix`'s pods of that many rounds (the fakes run no scheduler, the judges need its log)."""
    if rounds:
        (tmp / "case" / "scheduler.log").write_text("".join(
            f"[XPUSHARE][INFO]: Registered client {r:08x}{i:08x} on GPU 0 with Pod name = stab-x-r{r}-{i}, "
            "Pod namespace = default\n" for r in range(1, rounds + 1) for i in (1, 2)))
    return Evidence.load(tmp / "case")


# ------------------------------------------------------------------------------------------ the loop


def test_rounds_complete_and_a_healthy_scheduler_passes(tmp_path: Path) -> None:
    vc = VClock()
    out = io.StringIO()
    ck = make_loop(tmp_path, FakeOps(vc), vc, settings(), out=out).run()
    soak = tmp_path / "case" / "soak"
    assert ck.rounds == 3 and ck.finished and ck.final_done
    assert Checkpoint.load(soak) == ck
    rounds = list(iter_jsonl(soak / "rounds.jsonl"))
    assert [r["status"] for r in rounds] == ["completed"] * 3
    assert all(r["phases"] == {"Succeeded": 2} for r in rounds)
    assert all(v == pytest.approx(20.0) for r in rounds for v in r["runtimes_s"].values())
    samples = list(iter_csv(soak / "samples.csv"))
    assert {r["phase"] for r in samples} == {"idle", "load"}
    assert [float(r["ts"]) for r in samples] == sorted(float(r["ts"]) for r in samples)
    final = json.loads((soak / "final.json").read_text())
    assert final["settled"] is True and final["client_info_ours"] == {"n1": []}
    assert json.loads((soak / "baseline.json").read_text())["schedulers"]["n1"]["uid"] == "u1"
    assert "elapsed" in out.getvalue() and "left" in out.getvalue()
    assert (soak / "status.json").exists()
    ev = evidence(tmp_path, rounds=3)
    for leak in ("rss", "fd", "gpu", "ghosts", "series"):
        v = js.judge_leak(ev, TH, {"leak": leak})
        assert v.status is Status.PASS, (leak, v.summary)


def test_a_leaking_scheduler_fails_leak_001_and_raises_a_live_anomaly(tmp_path: Path) -> None:
    vc = VClock()
    ck = make_loop(tmp_path, FakeOps(vc, rss_per_s=200e3), vc, settings(max_rounds=4, rss_alarm_bytes=4 * MIB)).run()
    assert ck.anomalies >= 1
    events = list(iter_jsonl(tmp_path / "case" / "soak" / "events.jsonl"))
    assert any(e["kind"] == "anomaly" and "RSS" in e["what"] for e in events)
    v = js.judge_leak(evidence(tmp_path), TH, {"leak": "rss"})
    assert v.status is Status.FAIL and "rss_no_leak" in v.summary


@pytest.mark.parametrize("error", [ConnectionLost("lab-master", "connection lost during 'kubectl'"),
                                   KubeUnavailable(["kubectl"], "Unable to connect to the server", 1)])
def test_a_connection_drop_is_a_recorded_gap_not_fatal(tmp_path: Path, error: Exception) -> None:
    vc = VClock()
    ops = FakeOps(vc)
    ops.fail.append((30.0, 45.0, error))
    out = io.StringIO()
    ck = make_loop(tmp_path, ops, vc, settings(), out=out).run()
    assert ck.final_done and ck.rounds == 3
    gaps = [e for e in iter_jsonl(tmp_path / "case" / "soak" / "events.jsonl") if e["kind"] == "gap"]
    assert gaps and {g["op"] for g in gaps} <= {"sample", "rounds"}
    sample_gap = next(g for g in gaps if g["op"] == "sample")
    assert 10.0 <= sample_gap["duration_s"] <= 25.0 and sample_gap["how"] == "recovered"
    assert "retry in" in out.getvalue()
    data = js.load_soak(evidence(tmp_path))
    assert js.check_coverage(data, max_gap_fraction=0.5).ok is True


class TwoNodeOps(FakeOps):
    """FakeOps with a second node, ``n2``, whose host does not answer during ``gone`` (seconds since T0)."""

    def __init__(self, vc: VClock, gone: tuple[float, float]) -> None:
        super().__init__(vc)
        self.gone = gone

    def sample(self, pods: Any) -> list[NodeSample]:
        first = super().sample(pods)
        if self.gone[0] <= self.vc.t - T0 < self.gone[1]:
            return [*first, NodeSample("n2", error="cannot connect to 10.0.0.2 after 3 attempt(s)", why="timeout")]
        return [*first, NodeSample("n2", (ProcSample(4343, 30 * MIB, 10, 3),), first[0].metrics_text)]


@pytest.mark.parametrize("back", [True, False])
def test_a_node_that_drops_out_is_an_event_and_the_soak_goes_on(tmp_path: Path, back: bool) -> None:
    """Before: the node's failed samples kept the sampling in one gap as long as it was gone, and nothing said
    which host was missing or for how long."""
    from xpushare.soak.report import write_report

    vc = VClock()
    ops = TwoNodeOps(vc, (30.0, 90.0) if back else (30.0, 1e9))
    out = io.StringIO()
    ck = make_loop(tmp_path, ops, vc, settings(), out=out).run()
    assert ck.final_done and ck.rounds == 3
    events = list(iter_jsonl(tmp_path / "case" / "soak" / "events.jsonl"))
    gone = [e for e in events if e["kind"] == "host_unreachable"]
    assert [(e["node"], e["why"]) for e in gone] == [("n2", "timeout")]
    returned = [e for e in events if e["kind"] == "host_back"]
    assert len(returned) == 1 and returned[0]["node"] == "n2"
    assert not [e for e in events if e["kind"] == "gap" and e["op"] == "sample"]  # n1 was sampled throughout
    assert "n2: UNREACHABLE (timeout)" in out.getvalue()
    report = write_report(tmp_path / "case", TH, title="STAB-X", plots=False).read_text()
    row = next(line for line in report.splitlines() if line.startswith("| n2 |"))
    if back:
        assert 55.0 <= returned[0]["missing_s"] <= 70.0 and returned[0]["how"] == "answered again"
        assert row.endswith("| 1 | timeout | answering |"), row
    else:
        assert returned[0]["how"].startswith("still missing at") and row.endswith("| still missing |"), row
    assert f"| n2 | {returned[0]['missing_s']:.0f} s |" in row


def test_a_real_kubectl_error_is_retried_then_fatal(tmp_path: Path) -> None:
    vc = VClock()
    ops = FakeOps(vc)
    ops.fail.append((0.0, 1e9, KubeError(["kubectl", "apply"], "error: invalid manifest", 1)))
    with pytest.raises(KubeError):
        make_loop(tmp_path, ops, vc, settings(max_consecutive_errors=3)).run()
    ck = Checkpoint.load(tmp_path / "case" / "soak")
    assert ck is not None and ck.segments[-1]["reason"] == "error"


def test_interrupt_then_resume_continues_the_same_time_series(tmp_path: Path) -> None:
    vc = VClock()
    ops = FakeOps(vc)
    st = settings(max_rounds=None, duration_s=150.0)
    fired: list[float] = []

    def ctrl_c(now: float) -> None:
        if now >= 60 and not fired:
            fired.append(now)
            raise KeyboardInterrupt

    vc.hooks.append(ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        make_loop(tmp_path, ops, vc, st).run()
    soak = tmp_path / "case" / "soak"
    ck = Checkpoint.load(soak)
    assert ck is not None and not ck.finished and ck.segments[0]["reason"] == "interrupted"
    first_active = ck.active_s
    assert 55 <= first_active <= 65
    rows_before = len(list(iter_csv(soak / "samples.csv")))
    assert any(r["status"] == "interrupted" for r in iter_jsonl(soak / "rounds.jsonl"))
    ops.pods.clear()  # the runner's cleanup deleted the pods
    vc.advance(300.0)  # the orchestrator was down for 5 minutes
    ck2 = make_loop(tmp_path, ops, vc, st, ck=ck).run()
    assert ck2.finished and ck2.final_done and len(ck2.segments) == 2
    assert ck2.active_s == pytest.approx(150.0 + 30.0, abs=40.0)  # the duration counts active time only
    samples = list(iter_csv(soak / "samples.csv"))
    assert len(samples) > rows_before
    times = [float(r["ts"]) for r in samples]
    assert times == sorted(times)
    assert max(b - a for a, b in itertools.pairwise(times)) >= 300.0
    gaps = [e for e in iter_jsonl(soak / "events.jsonl") if e["kind"] == "gap" and e["op"] == "orchestrator"]
    assert len(gaps) == 1 and gaps[0]["duration_s"] >= 300.0
    data = js.load_soak(evidence(tmp_path))
    assert js.check_coverage(data, max_gap_fraction=0.5).ok is True  # downtime is not a sampling gap
    assert js.check_restarts(data.baseline, data.schedulers, data.final).ok is True


def test_duration_ends_the_soak_and_quota_changes_land_on_running_pods(tmp_path: Path) -> None:
    vc = VClock()
    ops = FakeOps(vc, runtime=30.0)
    st = settings(max_rounds=None, duration_s=100.0, quota_interval_s=10.0, quota_key="core",
                  quota_cycle=("60", "90", "30"))
    ck = make_loop(tmp_path, ops, vc, st).run()
    assert 100.0 <= ck.active_s <= 100.0 + 40.0 + 30.0
    assert ops.annotations and {a[1]["core"] for a in ops.annotations} <= {"60", "90", "30"}
    events = [e for e in iter_jsonl(tmp_path / "case" / "soak" / "events.jsonl") if e["kind"] == "annotate"]
    assert events and all(set(e["changed"]) <= set(e["pods"]) for e in events)
    assert any(e["changed"] for e in events)


def test_quota_changes_record_each_pods_call_time_and_probe_pods_keep_their_logs(tmp_path: Path) -> None:
    # STAB-004: the memory probe pod of every round keeps its log whatever its phase; other pods do not
    vc = VClock()
    ops = FakeOps(vc, runtime=30.0)
    st = settings(max_rounds=2, quota_interval_s=10.0, quota_key="memory", quota_cycle=("2Gi", "6Gi"),
                  keep_logs_suffix="-2")
    make_loop(tmp_path, ops, vc, st).run()
    soak = tmp_path / "case" / "soak"
    assert sorted(p.name for p in (soak / "probe-pods").iterdir()) == ["stab-x-r1-2.log", "stab-x-r2-2.log"]
    assert (soak / "probe-pods" / "stab-x-r1-2.log").read_text() == "log"
    events = [e for e in iter_jsonl(soak / "events.jsonl") if e["kind"] == "annotate"]
    assert events and all(set(e["times"]) == set(e["pods"]) for e in events)
    calls = {(pod, t) for pod, _, t in ops.annotations}
    assert all((pod, t) in calls for e in events for pod, t in e["times"].items())


def test_a_scheduler_restart_is_an_anomaly_and_fails_the_restart_check(tmp_path: Path) -> None:
    vc = VClock()
    ops = FakeOps(vc)

    def restart(now: float) -> None:
        if now >= 35:
            ops.restarts = 1

    vc.hooks.append(restart)
    ck = make_loop(tmp_path, ops, vc, settings()).run()
    assert ck.anomalies >= 1
    data = js.load_soak(evidence(tmp_path))
    c = js.check_restarts(data.baseline, data.schedulers, data.final)
    assert c.ok is False and "restarts 1" in c.detail
    # `kubectl logs -f` ends with the old container: the streams are restarted at once, once per restart
    # (log_rotate_s is 10 000 s here), from the last tick that saw the old container (ticks every 5 s)
    assert ops.rotations == 1
    rotated = [e for e in data.events if e["kind"] == "logs_rotated"]
    assert [e.get("reason") for e in rotated] == ["scheduler on n1 restarted"]
    anomaly = next(e for e in data.events if e["kind"] == "anomaly" and "restarted" in e["what"])
    since = ops.rotated_since[0]
    assert since is not None and T0 + 35 - 5 <= since < anomaly["ts"] <= T0 + 35 + 5
    assert rotated[0]["since"] == since


def test_a_restart_seen_again_after_a_resume_restarts_the_stream_from_the_new_segment(tmp_path: Path) -> None:
    vc = VClock()
    ops = FakeOps(vc)
    st = settings(max_rounds=None, duration_s=150.0)

    def restart_then_ctrl_c(now: float) -> None:
        if now >= 35:
            ops.restarts = 1
        if 60 <= now < 100:
            raise KeyboardInterrupt

    vc.hooks.append(restart_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        make_loop(tmp_path, ops, vc, st).run()
    ck = Checkpoint.load(tmp_path / "case" / "soak")
    assert ck is not None and ops.rotated_since and ops.rotated_since[0] is not None
    ops.pods.clear()
    vc.advance(3600.0)  # resumed an hour later: the restart is seen again at the first tick
    resumed_at = vc.t
    make_loop(tmp_path, ops, vc, st, ck=ck).run()
    # the second stream starts with the new segment, not at the last tick an hour ago (no hour of duplicates)
    assert len(ops.rotated_since) == 2 and (ops.rotated_since[1] or 0) >= resumed_at


def test_ghost_client_after_cleanup_fails_leak_004(tmp_path: Path) -> None:
    vc = VClock()
    ops = FakeOps(vc)
    ops.ghost = "stab-x-r1-1"
    ck = make_loop(tmp_path, ops, vc, settings(settle_s=10)).run()
    final = json.loads((tmp_path / "case" / "soak" / "final.json").read_text())
    assert ck.final_done and final["settled"] is False
    assert js.judge_leak(evidence(tmp_path), TH, {"leak": "ghosts"}).status is Status.FAIL


def test_interim_reports_and_log_rotation_happen_on_schedule(tmp_path: Path) -> None:
    vc = VClock()
    ops = FakeOps(vc)
    make_loop(tmp_path, ops, vc, settings(max_rounds=None, duration_s=120.0, interim_s=40.0, log_rotate_s=50.0)).run()
    interim = sorted((tmp_path / "case" / "soak" / "interim").glob("interim-*.md"))
    assert len(interim) >= 2
    assert "RSS slope /h" in interim[0].read_text()
    assert ops.rotations >= 2
    assert list((tmp_path / "case" / "soak" / "metrics").glob("interim-001_n1.txt"))


# ------------------------------------------------------------------------------------------ files


def test_csv_rotation_compresses_and_readers_stream_every_part(tmp_path: Path) -> None:
    path = tmp_path / "samples.csv"
    app = CsvAppender(path, ("ts", "value"), max_bytes=200)
    for i in range(60):
        app.write({"ts": T0 + i, "value": i})
    app.close()
    ps = parts(path)
    assert len(ps) > 3 and all(p.name.endswith(".gz") for p in ps[:-1])
    with gzip.open(ps[0], "rt") as fh:
        assert fh.readline().strip() == "ts,value"
    assert [int(r["value"]) for r in iter_csv(path)] == list(range(60))
    again = CsvAppender(path, ("ts", "value"), max_bytes=200)  # reopening appends, no second header
    again.write({"ts": T0 + 60, "value": 60})
    again.close()
    assert [int(r["value"]) for r in iter_csv(path)] == list(range(61))


def test_jsonl_reader_skips_a_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    app = JsonlAppender(path)
    app.write({"kind": "a"})
    app.close()
    with path.open("a") as fh:
        fh.write('{"kind": "tor')
    assert [e["kind"] for e in iter_jsonl(path)] == ["a"]


def test_checkpoint_roundtrip_and_version(tmp_path: Path) -> None:
    ck = Checkpoint("STAB-002", "r", "c2", 86400.0, None, active_s=3600.0, rounds=12)
    ck.save(tmp_path)
    back = Checkpoint.load(tmp_path)
    assert back == ck and back.remaining_s() == 82800.0
    (tmp_path / "checkpoint.json").write_text(json.dumps({"version": 99}))
    with pytest.raises(ValueError):
        Checkpoint.load(tmp_path)
    assert Checkpoint.load(tmp_path / "nothing") is None


def test_settings_refuse_an_unbounded_soak() -> None:
    with pytest.raises(ValueError):
        SoakSettings()


def test_carry_soak_forward_after_the_engine_archived_the_segment(tmp_path: Path) -> None:
    case = tmp_path / "STAB-002"
    prev = case / "attempts" / "1"
    (prev / "soak").mkdir(parents=True)
    Checkpoint("STAB-002", "r", "c", 60.0, None).save(prev / "soak")
    (prev / "scheduler.log").write_text("line\n")
    _carry_soak_forward(case)
    assert (case / "soak" / "checkpoint.json").exists()
    with gzip.open(case / "soak" / "segments" / "1" / "scheduler.log.gz", "rt") as fh:
        assert fh.read() == "line\n"
    _carry_soak_forward(case)  # idempotent once soak/ is back


# ------------------------------------------------------------------------------------------ parsing


STATUS = "Name:\txpushare-schedu\nPid:\t{pid}\nVmRSS:\t  {kb} kB\nThreads:\t3\nFD_COUNT={fd}\n"


def test_node_output_keeps_the_pods_own_process_and_metrics() -> None:
    text = (f"@@PROC 11 0\n{STATUS.format(pid=11, kb=1000, fd=4)}@@PROC 22 1\n{STATUS.format(pid=22, kb=2000, fd=7)}"
            f"@@METRICS\n{exposition(['stab-x-r1-1'], 5.0)}@@END\n")
    ns = parse_node_output("n1", text)
    assert ns.error is None and [p.pid for p in ns.procs] == [22]
    assert ns.procs[0].rss_bytes == 2000 * 1024 and ns.procs[0].fd_count == 7
    facts = scrape_facts(ns.metrics_text)
    assert facts.ok and facts.ours("stab-x-") == [("default", "stab-x-r1-1")] and facts.gpu_used_sum == 5.0
    unmarked = parse_node_output("n1", text.replace("@@PROC 22 1", "@@PROC 22 0"))
    assert [p.pid for p in unmarked.procs] == [11, 22]
    assert parse_node_output("n1", "@@PROC 11 0\n").error is not None
    assert not scrape_facts("oops\nHTTP_CODE=000\nCONTENT_TYPE=\n").ok
    # one parser (prometheus_client's): what it cannot read is not counted; a baseline must parse whole
    broken = 'x_up 1\nx_clients{pod="a"} 2\nx_bad{pod="b" 3\nx_after 4\nHTTP_CODE=200\n'
    assert scrape_facts(broken).series_total == 2 and not scrape_facts(broken, full=True).ok
    assert not scrape_facts('x_bad{ 1\nHTTP_CODE=200\n').ok and not scrape_facts("# HELP x_up up\nHTTP_CODE=200\n").ok
    assert not scrape_facts(None).ok


# ------------------------------------------------------------------------------------------ tasks (no lab)


ROOT = REPO_ROOT


def invoke(*args: str, root: Path) -> Any:
    import sys

    return run_tool([sys.executable, "-m", "tests.premise_free", *args, "--root", str(root)], cwd=ROOT, timeout=300)


def test_tasks_on_a_host_mode_cluster_skip_and_bad_input_is_a_usage_error(tmp_path: Path) -> None:
    proc = invoke("fail", "--cluster", "local", "--allow-disruptive", "--run-id", "f", root=tmp_path)
    assert proc.returncode == 0, proc.stderr
    results = sorted((tmp_path / ".tmplog" / "f").rglob("result.json"))
    # FAIL-001..007: nothing disruptive runs on a host without the SUT (FAIL-005..007 need its library)
    assert [json.loads(p.read_text())["status"] for p in results] == ["SKIP"] * 7
    assert "allow_disruptive" in json.loads(results[0].read_text())["params"]
    proc = invoke("soak", "--cluster", "local", "--minutes", "1", "--run-id", "s", root=tmp_path)
    assert proc.returncode == 0, proc.stderr
    record = json.loads(next((tmp_path / ".tmplog" / "s").rglob("result.json")).read_text())
    assert record["case_id"] == "STAB-002" and record["status"] == "SKIP"
    assert record["params"]["stab_duration_s"] == 60.0
    bad = invoke("soak", "--cluster", "local", "--case", "FUNC-001", root=tmp_path)
    assert bad.returncode == 2 and "STAB-001" in bad.stderr
    again = invoke("soak", "--cluster", "local", "--run-id", "s", root=tmp_path)
    assert again.returncode == 2 and "--resume" in again.stderr
    nothing = invoke("soak", "--cluster", "local", "--run-id", "none", "--resume", root=tmp_path)
    assert nothing.returncode == 2


def test_scheduler_proc_output_and_host_mode_ghosts_by_pid() -> None:
    from xpushare.backends import scheduler_proc

    text = ("@@PROC 41\nName:\txpushare-schedu\nPid:\t41\nVmRSS:\t  2048 kB\nThreads:\t3\nFD_COUNT=9\n"
            "@@PROC 7\n@@HEALTH\nok\nHTTP_CODE=200\n@@METRICS\nx_up 1\nHTTP_CODE=200\n@@END\n")
    out = scheduler_proc.parse(text)
    assert [(p.pid, p.rss_bytes, p.fd_count, p.threads) for p in out.processes] == [(41, 2 * 2**20, 9, 3)]
    assert out.healthy is True and out.metrics_text == "x_up 1\nHTTP_CODE=200\n" and out.error is None
    assert scheduler_proc.parse("@@PROC 41\n").error  # cut short
    argv = scheduler_proc.argv("/opt/bin/xpushare-scheduler", None, None)
    assert argv[4] == "^(\\S*/)?/opt/bin/xpushare\\-scheduler( |$)"
    assert argv[5:7] == ["", ""]  # no endpoints; then the scraper's curl words with the -w trailer
    assert argv[7:] == ["curl", "-sS", "-m", "10", "-o", "-", "-w", "\\nHTTP_CODE=%{http_code}\\n"]
    page = ('xpushare_client_info{namespace="none",pod="none",host_pid="123"} 1\n'
            'xpushare_client_info{namespace="ns",pod="stab-001-r1",host_pid="9"} 1\nHTTP_CODE=200\n')
    facts = scrape_facts(page)
    assert facts.ours("leak-004-") == []
    assert facts.ours("leak-004-", {123}) == [("none", "none[host_pid=123]")]
    assert facts.ours("stab-001-") == [("ns", "stab-001-r1")]


def test_backend_soak_ops_follow_the_scheduler_process(tmp_path: Path) -> None:
    from xpushare.backends.base import SchedulerFacts, SchedulerProcess
    from xpushare.soak.ops import BackendSoakOps, soak_ops

    pid = [10]

    def facts(metrics: bool) -> list[SchedulerFacts]:
        proc = SchedulerProcess(pid[0], 4096, 8, 2)
        return [SchedulerFacts("h1", (proc,), str(pid[0]), 0, True, "m 1\nHTTP_CODE=200\n" if metrics else None,
                               f"pid-{pid[0]}")]

    backend = FakeBackend(mode="host", scheduler=FakeScheduler(facts))
    ops = soak_ops(backend, tmp_path)
    assert type(ops) is BackendSoakOps  # K8sSoakOps is a BackendSoakOps too: the exact class matters
    pods = ops.scheduler_pods()
    assert [(p.node, p.uid, p.ready) for p in pods] == [("h1", "10", True)]
    [sample] = ops.sample(pods)
    assert sample.procs[0].rss_bytes == 4096 and sample.metrics_text and sample.error is None
    pid[0] = 11  # a supervisor restarted it: a new instance, which the loop reports as a restart
    assert ops.scheduler_pods()[0].uid == "11"
    assert ops.harvest_previous(tmp_path) == []


def test_k8s_soak_ops_sample_the_pods_and_use_the_backend_for_pods(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from xpushare.soak.ops import K8sSoakOps, soak_ops

    node_out = f"@@PROC 22 1\n{STATUS.format(pid=22, kb=2000, fd=7)}@@METRICS\nm 1\nHTTP_CODE=200\n@@END\n"
    calls: list[Any] = []

    def run(argv: list[str], timeout: float) -> Any:
        calls.append(argv)
        return SimpleNamespace(stdout=node_out)

    host = SimpleNamespace(run=run)
    pod = SimpleNamespace(node="n1", name="sched-1", uid="u1", restart_count=2, pod_ip="10.0.0.5",
                          containers=[SimpleNamespace(ready=True)])
    kube = FakeKube(sut_pods=cast(Any, [pod]), node_hosts={"n1": "gpu1"}, hosts={"gpu1": cast(Any, host)})
    rotation = FakeRotation()
    backend = FakeBackend(mode="k8s", kubernetes=kube, rotation=rotation,
                          records=lambda names, until: [cast(Any, "record")])
    ops = soak_ops(backend, tmp_path)
    assert type(ops) is K8sSoakOps
    pods = ops.scheduler_pods()
    assert [(p.node, p.pod, p.uid, p.restarts, p.ready, p.ip) for p in pods] == [("n1", "sched-1", "u1", 2, True,
                                                                                   "10.0.0.5")]
    [sample] = ops.sample(pods)
    assert sample.error is None and [p.pid for p in sample.procs] == [22]
    assert "HTTP_CODE=200" in (sample.metrics_text or "")
    assert "http://10.0.0.5:9402/metrics" in calls[0] and "sched-1" in calls[0]
    assert ops.poll_pods() == ["record"]
    ops.end_round()
    assert rotation.forgets == 1


def test_soak_dry_run_prints_the_plan_and_stores_nothing(tmp_path: Path) -> None:
    inventory = str(ROOT / "inventory" / "inventory.yaml")  # c1's addresses are placeholders: never contacted
    proc = invoke("soak", "--cluster", "c1", "--inventory", inventory, "--minutes", "2", "--dry-run", "-o", "json",
                  root=tmp_path)
    assert proc.returncode == 0, proc.stderr
    planned = json.loads(proc.stdout)["cases"][0]
    assert planned["case_id"] == "STAB-002" and planned["params"]["stab_duration_s"] == {"value": 120.0,
                                                                                          "source": "--set"}
    assert not (tmp_path / ".tmplog").exists()


def test_soak_stops_on_a_held_lease_and_waits_for_it_with_wait(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """``invoke soak`` holds the cluster's lease as the suite tasks do: another live run's lease stops it before
    anything is written (exit 2), and ``--wait`` waits until that run releases it."""
    import os
    import socket
    import threading
    from dataclasses import replace

    from xpushare.engine import lease
    from xpushare.model.errors import LeaseHeld
    from xpushare.model.lease import Holder, LeaseSettings
    from xpushare.soak.task import SoakRequest, soak
    from xpushare.transport.local import LocalHost
    from xpushare.transport.lock_file import LockFileStore

    monkeypatch.setenv("XPUSHARE_LEASE_DIR", str(tmp_path))
    inventory = tmp_path / "inv.yaml"
    inventory.write_text("clusters:\n  bm:\n    mode: host\n    params: {lease_renew_s: 0.2, lease_stale_s: 60}\n"
                         "    hosts:\n      box: {connection: local, roles: [master, gpu]}\n", encoding="utf-8")
    store = LockFileStore(LocalHost(), str(tmp_path / lease.LEASE_FILE))
    busy = Holder(run_id="busy-run", user="ana", machine=socket.gethostname(), pid=os.getpid(),
                  started="2026-01-01T12:00:00+00:00", token="t-busy")
    assert store.create(busy, LeaseSettings(0.2, 60))
    request = SoakRequest(cluster="bm", duration_s=60.0, inventory_path=str(inventory), root=tmp_path, run_id="s1")
    with pytest.raises(LeaseHeld, match="busy-run"):
        soak(request, out=io.StringIO())
    assert not (tmp_path / ".tmplog" / "s1").exists()
    threading.Timer(0.6, store.release, args=(busy,)).start()
    out = io.StringIO()
    status = soak(replace(request, wait=True), out=out)
    assert status == 0, out.getvalue()
    assert "waiting for it (--wait)" in out.getvalue()
    assert next((tmp_path / ".tmplog" / "s1").rglob("result.json")).exists()
    assert store.read() is None  # released at the end
