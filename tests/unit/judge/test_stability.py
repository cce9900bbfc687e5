"""Judgments of the stability, leak and fault cases on healthy and broken evidence (xpushare/judge/stability.py)."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from xpushare.cases import REGISTRY
from xpushare.evidence.store import Evidence
from xpushare.judge import stability as js
from xpushare.model.verdict import Status
from xpushare.model.workload import WorkloadRecord
from xpushare.parsers.scheduler_log import parse_lines

T0 = 1_795_000_000.0
MIB = 2**20
GIB = 2**30


def samples_csv(values: list[tuple[float, float, int]], *, node: str = "n1", pid: int = 100,
                phase: str = "idle") -> str:
    lines = ["ts,elapsed_s,node,pid,rss_bytes,fd_count,threads,phase"]
    for t, rss, fd in values:
        lines.append(f"{T0 + t:.3f},{t},{node},{pid},{int(rss)},{fd},3,{phase}")
    return "\n".join(lines) + "\n"


Series = list[tuple[float, float, int]]


def flat_series(n: int = 40, *, step: float = 60.0, noise: float = 50e3, seed: int = 1) -> Series:
    rng = random.Random(seed)
    return [(i * step, 30 * MIB + rng.gauss(0, noise), 12 + rng.choice((0, 0, 1))) for i in range(n)]


def leak_series(n: int = 40, *, step: float = 60.0, per_s: float = 20e3, seed: int = 1) -> Series:
    rng = random.Random(seed)
    return [(i * step, 30 * MIB + per_s * i * step + rng.gauss(0, 50e3), 12 + i) for i in range(n)]


TH: dict[str, Any] = {
    **{k: v for c in ("STAB-003", "LEAK-005") for k, v in REGISTRY[c].params.items()},
    **REGISTRY["FAIL-004"].params,
    "pod_timeout_s": 1800,
}


def rows(text: str) -> list[dict[str, str]]:
    import csv
    import io

    return list(csv.DictReader(io.StringIO(text)))


TREND_KW = {"alpha": 0.01, "min_samples": 5, "warmup": 0.1}


# ------------------------------------------------------------------------------------------ trends


def test_trend_flat_rss_passes() -> None:
    c = js.check_trend("rss_no_leak", rows(samples_csv(flat_series())), "rss_bytes", max_growth=128 * MIB,
                       noise=8 * MIB, **TREND_KW)
    assert c.ok is True
    assert c.values["series"]["n1/pid100"]["judged"]


def test_trend_leaking_rss_fails_on_significance_even_below_the_total_threshold() -> None:
    # 20 kB/s over 39 min = ~47 MB: under the 128 MiB total, but a significant sustained slope.
    c = js.check_trend("rss_no_leak", rows(samples_csv(leak_series())), "rss_bytes", max_growth=128 * MIB,
                       noise=8 * MIB, **TREND_KW)
    assert c.ok is False
    assert "significantly positive" in c.detail


def test_trend_total_growth_over_threshold_fails() -> None:
    c = js.check_trend("rss_no_leak", rows(samples_csv(leak_series())), "rss_bytes", max_growth=10 * MIB,
                       noise=100 * MIB, **TREND_KW)
    assert c.ok is False and "trend growth" in c.detail


def test_trend_spike_and_warmup_step_are_tolerated() -> None:
    series = flat_series()
    series[-1] = (series[-1][0], series[-1][1] + 20 * MIB, series[-1][2])  # one spike at the end
    spike = js.check_trend("r", rows(samples_csv(series)), "rss_bytes", max_growth=128 * MIB, noise=8 * MIB,
                           **TREND_KW)
    assert spike.ok is True
    step = [(t, v + (300e3 if i > 5 else 0.0), fd) for i, (t, v, fd) in enumerate(flat_series(noise=1e3))]
    warm = js.check_trend("r", rows(samples_csv(step)), "rss_bytes", max_growth=128 * MIB, noise=8 * MIB,
                          **TREND_KW)
    assert warm.ok is True  # significant perhaps, but 300 kB is under the noise floor


def test_trend_fd_leak_fails_and_flat_fd_passes() -> None:
    bad = js.check_trend("fd_no_leak", rows(samples_csv(leak_series())), "fd_count", max_growth=200, noise=4,
                         **TREND_KW)
    good = js.check_trend("fd_no_leak", rows(samples_csv(flat_series())), "fd_count", max_growth=200, noise=4,
                          **TREND_KW)
    assert bad.ok is False and good.ok is True


def test_trend_too_few_samples_is_unevaluable() -> None:
    c = js.check_trend("r", rows(samples_csv(flat_series(n=3))), "rss_bytes", max_growth=1, noise=1, **TREND_KW)
    assert c.ok is None


def test_trend_uses_idle_samples_when_enough_and_separates_pids() -> None:
    idle = samples_csv(flat_series(n=10, noise=1e3), phase="idle")
    load = samples_csv([(t + 30, v + 50 * MIB * (i % 2), fd) for i, (t, v, fd) in enumerate(flat_series(n=10))],
                       phase="load").split("\n", 1)[1]
    restarted = samples_csv(leak_series(n=10), pid=200).split("\n", 1)[1]
    procs = js.process_series(rows(idle + load + restarted), "rss_bytes", min_samples=5)
    assert procs[("n1", "100")][2] == "idle" and len(procs[("n1", "100")][0]) == 10
    assert ("n1", "200") in procs


# ------------------------------------------------------------------------------------------ state checks


BASE = {"schedulers": {"n1": {"pod": "s-1", "uid": "u1", "restarts": 0}},
        "gpu_used": {"n1": {"G0": 0.0, "G1": 256 * MIB}}, "series_total": {"n1": 40}}


def sched_rows(uid: str = "u1", restarts: int = 0) -> list[dict[str, str]]:
    return [{"ts": str(T0 + i), "node": "n1", "pod": "s-1" if uid == "u1" else "s-2", "uid": uid,
             "restarts": str(restarts if i > 2 else 0)} for i in range(5)]


def test_restarts() -> None:
    assert js.check_restarts(BASE, sched_rows()).ok is True
    bad = js.check_restarts(BASE, sched_rows(restarts=1))
    assert bad.ok is False and "scheduler restarted" in bad.detail
    replaced = js.check_restarts(BASE, [], {"schedulers": {"n1": {"pod": "s-2", "uid": "u2", "restarts": 0}}})
    assert replaced.ok is False
    assert js.check_restarts({}, sched_rows()).ok is None


def round_rec(no: int, phases: dict[str, str], status: str = "completed") -> dict[str, Any]:
    counts: dict[str, int] = {}
    for p in phases.values():
        counts[p] = counts.get(p, 0) + 1
    return {"round": no, "status": status, "pods": len(phases), "phases": counts,
            "failed": [n for n, p in phases.items() if p == "Failed"],
            "not_terminal": [n for n, p in phases.items() if p not in ("Succeeded", "Failed")],
            "pending_max_s": 1.0, "detail": {n: {"phase": p} for n, p in phases.items()}}


def test_rounds() -> None:
    ok = js.check_rounds([round_rec(1, {"a": "Succeeded", "b": "Succeeded"})], min_success_ratio=1.0)
    assert [c.ok for c in ok] == [True, True, True]
    stuck = js.check_rounds([round_rec(1, {"a": "Succeeded", "b": "Pending"}, "timeout")], min_success_ratio=0.0)
    assert stuck[1].ok is False and "Pending" in stuck[1].detail
    failed = js.check_rounds([round_rec(1, {"a": "Failed", "b": "Succeeded"})], min_success_ratio=1.0)
    assert failed[2].ok is False
    none = js.check_rounds([round_rec(1, {"a": "Running"}, "interrupted")], min_success_ratio=1.0)
    assert len(none) == 1 and none[0].ok is None


def test_coverage() -> None:
    data = js.SoakData(samples=[{"ts": "1"}], checkpoint={"active_s": 1000.0, "samples": 90},
                       events=[{"kind": "gap", "op": "sample", "duration_s": 30.0},
                               {"kind": "gap", "op": "orchestrator", "duration_s": 900.0}])
    c = js.check_coverage(data, max_gap_fraction=0.5)
    assert c.ok is True and c.values["gap_s"] == 30.0 and c.values["orchestrator_downtime_s"] == 900.0
    data.events.append({"kind": "gap", "op": "sample", "duration_s": 700.0})
    assert js.check_coverage(data, max_gap_fraction=0.5).ok is None


def test_gpu_recovered() -> None:
    good = {"gpu_used": {"n1": {"G0": 10 * MIB, "G1": 256 * MIB}}, "settled": True}
    assert js.check_gpu_recovered(BASE, good, tolerance_bytes=GIB).ok is True
    bad = {"gpu_used": {"n1": {"G0": 3 * GIB, "G1": 256 * MIB}}}
    c = js.check_gpu_recovered(BASE, bad, tolerance_bytes=GIB)
    assert c.ok is False and "n1/G0" in c.detail
    assert js.check_gpu_recovered(BASE, {"gpu_used": {}}, tolerance_bytes=GIB).ok is None
    assert js.check_gpu_recovered({}, good, tolerance_bytes=GIB).ok is None


def test_ghost_clients() -> None:
    clean = {"scrape_ok": {"n1": True}, "client_info_ours": {"n1": []}}
    assert js.check_ghost_clients(clean, max_ghosts=0).ok is True
    ghosts = {"scrape_ok": {"n1": True}, "client_info_ours": {"n1": [["default", "leak-004-r3-1"]]}}
    c = js.check_ghost_clients(ghosts, max_ghosts=0)
    assert c.ok is False and "leak-004-r3-1" in c.detail
    assert js.check_ghost_clients({"scrape_ok": {"n1": False}}, max_ghosts=0).ok is None


def metrics_rows(counts: list[int]) -> list[dict[str, str]]:
    return [{"ts": str(T0 + 60 * i), "node": "n1", "ok": "1", "series_total": str(c), "phase": "idle"}
            for i, c in enumerate(counts)]


def test_series_bounded() -> None:
    kw = {"max_growth": 200, "noise": 4, "alpha": 0.01, "min_samples": 5}
    good = js.check_series_bounded(BASE, {"series_total": {"n1": 41}}, metrics_rows([40, 41, 40, 40, 41, 40]), **kw)
    assert good.ok is True
    grew = js.check_series_bounded(BASE, {"series_total": {"n1": 60}},
                                   metrics_rows([40 + 4 * i for i in range(6)]), **kw)
    assert grew.ok is False and "significantly positive" in grew.detail
    over = js.check_series_bounded(BASE, {"series_total": {"n1": 400}}, [], **kw)
    assert over.ok is False and "grew by" in over.detail
    assert js.check_series_bounded(BASE, {}, [], **kw).ok is None


def log_lines(per_minute: list[int], *, fatal: bool = False) -> list[str]:
    out = []
    for m, n in enumerate(per_minute):
        for i in range(n):
            sec = int(T0 // 60 * 60) + 60 * m + (i * 59) // max(1, n)
            ts = __import__("datetime").datetime.fromtimestamp(sec, __import__("datetime").timezone.utc)
            out.append(f"[pod/xpushare-scheduler-a/s] {ts.strftime('%Y-%m-%dT%H:%M:%S.000000000Z')} "
                       f"[XPUSHARE][INFO]: Scheduled client 0123456789abcdef")
    if fatal:
        out.append("[XPUSHARE][FATAL]: Failed to bind socket")
    return out


def test_log_storm_and_clean_log() -> None:
    calm = js.scan_scheduler_log(log_lines([30, 40, 35, 30, 45]))
    assert js.check_log_storm(calm, floor_per_min=100, factor=10).ok is True
    storm = js.scan_scheduler_log(log_lines([30, 40, 5000, 30, 45]))
    c = js.check_log_storm(storm, floor_per_min=100, factor=10)
    assert c.ok is False and c.values["max_per_min"] == 5000
    assert js.check_log_storm(js.scan_scheduler_log(["no timestamp"]), floor_per_min=1, factor=1).ok is None
    assert js.check_scheduler_log_clean(calm.summary, [], max_protocol_errors=0, exit_race_s=5).ok is True
    dirty = js.scan_scheduler_log(log_lines([3], fatal=True))
    assert js.check_scheduler_log_clean(dirty.summary, [], max_protocol_errors=0, exit_race_s=5).ok is False


def stamped(at: float, message: str, scheduler: str = "a") -> str:
    import datetime as dt
    ts = dt.datetime.fromtimestamp(at, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return f"[pod/xpushare-scheduler-{scheduler}/s] {ts} [XPUSHARE][INFO]: {message}"


def failure_log(failed_at: float, *, kind: str = "receive", registered: bool = True) -> list[str]:
    """A client of pod w5-1 registers at T0, gets a DROP_LOCK, then the scheduler fails on its socket."""
    cid = "9947bdf5193d94ac"
    lines = [stamped(T0, f"Registered client {cid} on GPU GPU-0 with Pod name = w5-1, Pod namespace = ns")]
    lines = lines if registered else []
    lines += [stamped(failed_at - 0.05, f"Sent DROP_LOCK to client {cid}"),
              stamped(failed_at, f"Failed to {kind} message {'to' if kind == 'send' else 'from'} client {cid}"),
              stamped(failed_at, f"Removing client {cid}")]
    return lines


def rounds_ending(pod: str, finished: float, phase: str = "Succeeded") -> list[dict]:
    return [{"round": 1, "status": "completed", "detail": {pod: {"phase": phase, "finished": finished}}}]


@pytest.mark.parametrize("kind", ["send", "receive"])
def test_a_socket_failure_as_the_pod_exits_is_no_protocol_error(kind: str) -> None:
    # the scheduler's message was in flight when the process exited: the kernel's reset, not a protocol fault
    summary = js.scan_scheduler_log(failure_log(T0 + 40.28, kind=kind)).summary
    c = js.check_scheduler_log_clean(summary, rounds_ending("w5-1", T0 + 40), max_protocol_errors=0, exit_race_s=5)
    assert c.ok is True and c.values["disconnects_at_exit"] and not c.values["protocol_errors"], c


@pytest.mark.parametrize("case", ["pod ran on", "no registration", "pod never ended", "pod failed with it"])
def test_a_socket_failure_on_a_living_or_unknown_client_is_a_protocol_error(case: str) -> None:
    # "pod failed with it": the scheduler dropped a working client, whose library exits on the broken socket
    summary = js.scan_scheduler_log(failure_log(T0 + 40, registered=case != "no registration")).summary
    rounds = {"pod ran on": rounds_ending("w5-1", T0 + 100), "no registration": rounds_ending("w5-1", T0 + 40),
              "pod never ended": [], "pod failed with it": rounds_ending("w5-1", T0 + 40, "Failed")}[case]
    c = js.check_scheduler_log_clean(summary, rounds, max_protocol_errors=0, exit_race_s=5)
    assert c.ok is False and "1 protocol error(s)" in c.detail and not c.values["disconnects_at_exit"], c
    assert js.check_scheduler_log_clean(summary, rounds, max_protocol_errors=1, exit_race_s=5).ok is True


def change_line(at: float, pod: str, old: int, new: int, *, kind: str = "Compute") -> str:
    import datetime as dt

    ts = dt.datetime.fromtimestamp(at, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if kind == "Compute":
        return f"{ts} [XPUSHARE][INFO]: Compute limit changed for pod default/{pod}: {old}% -> {new}%"
    return f"{ts} [XPUSHARE][INFO]: Memory limit changed for pod default/{pod}: {old} -> {new} bytes"


def test_updates_applied() -> None:
    events = [{"kind": "annotate", "at": T0 + 100, "value": "60", "changed": ["p1", "p2"]},
              {"kind": "annotate", "at": T0 + 400, "value": "90", "changed": ["p1", "p2"]}]
    rounds = [{"detail": {"p1": {"finished": T0 + 900}, "p2": {"finished": T0 + 900}}}]
    lines = [change_line(T0 + 103, "p1", 30, 60), change_line(T0 + 104, "p2", 30, 60),
             change_line(T0 + 402, "p1", 60, 90), change_line(T0 + 405, "p2", 60, 90)]
    kw = {"kind": "compute", "namespace": "default", "max_latency_s": 15, "min_ratio": 0.9}
    good = js.check_updates_applied(events, parse_lines(lines), rounds, **kw)
    assert good.ok is True and good.values["found"] == 4 and good.values["max_latency_s"] == pytest.approx(5.0)
    late = js.check_updates_applied(events, parse_lines([*lines[:2], change_line(T0 + 460, "p1", 60, 90)]), rounds,
                                    **kw)
    assert late.ok is False and late.values["found"] == 2
    ended = [{"detail": {"p1": {"finished": T0 + 101}, "p2": {"finished": T0 + 101}}}]
    assert js.check_updates_applied(events[:1], parse_lines([]), ended, **kw).ok is None
    mem = [{"kind": "annotate", "at": T0 + 100, "value": "2Gi", "changed": ["p1"]}]
    hit = js.check_updates_applied(mem, parse_lines([change_line(T0 + 101, "p1", 8 * GIB, 2 * GIB, kind="Memory")]),
                                   rounds, **{**kw, "kind": "memory"})
    assert hit.ok is True


# ------------------------------------------------------------------------------------------ whole cases


#: The scheduler's line for each of the rounds' clients (soak_files: two pods in each of 5 rounds).
REGISTERED = [f"[XPUSHARE][INFO]: Registered client {i:016x} on GPU 0 with Pod name = "
              f"stab-002-r{i // 2 + 1}-{i % 2 + 1}, Pod namespace = default" for i in range(10)]


def soak_files(samples: str, *, sched_restarts: int = 0, ghosts: bool = False,
               registered: bool = True) -> dict[str, str]:
    final = {"settled": True, "scrape_ok": {"n1": True}, "gpu_used": {"n1": {"G0": 0.0, "G1": 256 * MIB}},
             "series_total": {"n1": 40}, "client_info_ours": {"n1": [["default", "stab-002-r1-1"]] if ghosts else []},
             "schedulers": {"n1": {"pod": "s-1", "uid": "u1", "restarts": sched_restarts}}}
    rounds = [round_rec(i, {f"stab-002-r{i}-1": "Succeeded", f"stab-002-r{i}-2": "Succeeded"}) for i in range(1, 6)]
    sched = "ts,elapsed_s,node,pod,uid,restarts,ready\n" + "".join(
        f"{T0 + 60 * i},{60 * i},n1,s-1,u1,{0 if i < 20 else sched_restarts},1\n" for i in range(40))
    return {
        "soak/samples.csv": samples,
        "soak/schedulers.csv": sched,
        "soak/metrics.csv": "ts,elapsed_s,node,ok,series_total,client_series,client_info_total,client_info_ours,"
                            "gpu_used_bytes,phase\n",
        "soak/rounds.jsonl": "".join(json.dumps(r) + "\n" for r in rounds),
        "soak/events.jsonl": json.dumps({"kind": "gap", "op": "sample", "duration_s": 12.0}) + "\n",
        "soak/baseline.json": json.dumps(BASE),
        "soak/final.json": json.dumps(final),
        "soak/checkpoint.json": json.dumps({"rounds": 5, "samples": 40, "active_s": 2400.0, "segments": [{}, {}]}),
        "scheduler.log": "\n".join((REGISTERED if registered else []) + log_lines([20, 25, 22])),
    }


def test_judge_stab_healthy_and_broken() -> None:
    ev = Evidence.from_parts([], {}, soak_files(samples_csv(flat_series())))
    v = js.judge_stab(ev, TH, {"namespace": "default"})
    assert v.status is Status.PASS, v.summary
    assert v.metrics["segments"] == 2
    restarted = js.judge_stab(Evidence.from_parts([], {}, soak_files(samples_csv(flat_series()), sched_restarts=1)),
                              TH, {})
    assert restarted.status is Status.FAIL and "scheduler_no_restart" in restarted.summary
    leaking = js.judge_stab(Evidence.from_parts([], {}, soak_files(samples_csv(leak_series()))), TH, {})
    assert leaking.status is Status.FAIL and "rss_no_leak" in leaking.summary and "fd_no_leak" in leaking.summary
    ghosts = js.judge_stab(Evidence.from_parts([], {}, soak_files(samples_csv(flat_series()), ghosts=True)), TH, {})
    assert ghosts.status is Status.FAIL and "no_ghost_clients" in ghosts.summary
    assert js.judge_stab(Evidence.from_parts([], {}, {}), TH, {}).status is Status.ERROR
    assert js.judge_stab(Evidence.from_parts([], {}, {}), TH, {"skip": "why"}).status is Status.SKIP


def test_judge_leak_kinds() -> None:
    healthy = Evidence.from_parts([], {}, soak_files(samples_csv(flat_series())))
    leaking = Evidence.from_parts([], {}, soak_files(samples_csv(leak_series())))
    assert js.judge_leak(healthy, TH, {"leak": "rss"}).status is Status.PASS
    bad = js.judge_leak(leaking, TH, {"leak": "rss"})
    assert bad.status is Status.FAIL and bad.metrics["rss_no_leak_growth"] > 30 * MIB
    assert js.judge_leak(leaking, TH, {"leak": "fd"}).status is Status.FAIL
    assert js.judge_leak(healthy, TH, {"leak": "gpu"}).status is Status.PASS
    assert js.judge_leak(healthy, TH, {"leak": "ghosts"}).status is Status.PASS
    assert js.judge_leak(healthy, TH, {"leak": "series"}).status is Status.PASS
    ghost = Evidence.from_parts([], {}, soak_files(samples_csv(flat_series()), ghosts=True))
    assert js.judge_leak(ghost, TH, {"leak": "ghosts"}).status is Status.FAIL


@pytest.mark.parametrize("leak", ["rss", "fd", "ghosts", "series"])
def test_a_scheduler_that_served_no_client_measured_no_leak(leak: str) -> None:
    """Rounds whose pods the scheduler never registered (a flat series of an idle scheduler): ERROR naming the
    premise, never the PASS the flat series alone would give; LEAK-003's GPU memory does not rest on it."""
    unserved = Evidence.from_parts([], {}, soak_files(samples_csv(flat_series()), registered=False))
    got = js.judge_leak(unserved, TH, {"leak": leak})
    assert got.status is Status.ERROR and "premise unmet: sut" in got.summary, got.summary
    assert "over 10 pod(s)" in got.summary
    assert js.judge_leak(unserved, TH, {"leak": "gpu"}).status is Status.PASS
    assert js.judge_stab(unserved, TH, {}).status is Status.ERROR
    served = js.judge_leak(Evidence.from_parts([], {}, soak_files(samples_csv(flat_series()))), TH, {"leak": leak})
    registered = next(c for c in served.checks if c.name == "clients_registered")
    assert registered.ok is True and registered.values["registrations"] == 10


def fault_plan(**kw: Any) -> dict[str, Any]:
    plan = {"fault": {"kind": "rollout restart daemonset/xpushare-scheduler", "applied": True},
            "recovery_s": 12.0, "restored": True, "load_pods": ["l1", "l2"], "probe_pod": "probe"}
    plan.update(kw)
    return plan


def pod(name: str, phase: str = "Succeeded") -> WorkloadRecord:
    return WorkloadRecord(name=name, phase=phase, exit_code=0 if phase == "Succeeded" else None)


PROBE_LOG = "PASS\n--- 1.5 seconds ---\n"


def fault_ev(*phases: str) -> Evidence:
    pods = [pod("l1", phases[0] if phases else "Succeeded"), pod("l2", phases[1] if len(phases) > 1 else "Succeeded"),
            pod("probe")]
    return Evidence.from_parts(pods, {"probe": PROBE_LOG})


def test_judge_fault() -> None:
    assert js.judge_fault(fault_ev(), TH, fault_plan()).status is Status.PASS
    slow = js.judge_fault(fault_ev(), TH, fault_plan(recovery_s=900.0))
    assert slow.status is Status.FAIL and "recovered_in_time" in slow.summary
    never = js.judge_fault(fault_ev(), TH, fault_plan(recovery_s=None))
    assert never.status is Status.FAIL
    pending = js.judge_fault(fault_ev("Succeeded", "Pending"), TH, fault_plan())
    assert pending.status is Status.FAIL and "no_pod_pending_forever" in pending.summary
    unrestored = js.judge_fault(fault_ev(), TH, fault_plan(restored=False, restore_detail="ready 1/2"))
    assert unrestored.status is Status.FAIL and "cluster_restored" in unrestored.summary
    drain = js.judge_fault(fault_ev(), TH, fault_plan(fault={"kind": "drain node/n1", "applied": False,
                                                             "drain_failed": True, "error": "timed out"}))
    assert drain.status is Status.FAIL and "fault_applied" in drain.summary
    not_applied = js.judge_fault(fault_ev(), TH, fault_plan(fault={"kind": "x", "applied": False, "error": "403"}))
    assert not_applied.status is Status.ERROR
    assert js.judge_fault(fault_ev(), TH, {"skip": "needs --allow-disruptive"}).status is Status.SKIP
    extra = js.judge_fault(fault_ev(), TH, fault_plan(extra_checks=[{"name": "replacements_elsewhere",
                                                                    "expression": "x", "ok": False, "detail": "n1"}]))
    assert extra.status is Status.FAIL and "replacements_elsewhere" in extra.summary
    few = js.judge_fault(fault_ev("Failed", "Failed"), TH, fault_plan(min_succeeded=1))
    assert few.status is Status.FAIL and "load_succeeded" in few.summary


def test_every_case_is_registered_with_its_judgment() -> None:
    ids = [f"STAB-00{i}" for i in range(1, 5)] + [f"LEAK-00{i}" for i in range(1, 6)] + \
        [f"FAIL-00{i}" for i in range(1, 5)]
    for cid in ids:
        case = REGISTRY[cid]
        assert case.suite == "stability" and case.act is not None and case.judge is not None, cid
        assert case.requires, cid
    # host mode runs what needs only the scheduler process; quota changes need annotations; the rest Kubernetes
    host_ok = {"STAB-001", "STAB-002", "FAIL-001"} | {f"LEAK-00{i}" for i in range(1, 6)}
    assert all(REGISTRY[c].requires == {"scheduler-process", "sut", "gpu"} for c in host_ok)
    assert all(REGISTRY[f"FAIL-00{i}"].requires == {"scheduler-process", "sut", "gpu", "fault-injector"}
               for i in (5, 6, 7))
    assert all("annotations" in REGISTRY[c].requires for c in ("STAB-003", "STAB-004"))
    assert all("kubernetes" in REGISTRY[f"FAIL-00{i}"].requires for i in (2, 3, 4))
    assert REGISTRY["STAB-002"].params["stab_duration_s"] == 24 * 3600
    assert REGISTRY["STAB-001"].params["stab_duration_s"] == 6 * 3600
    assert all(REGISTRY[f"FAIL-00{i}"].params["allow_disruptive"] is False for i in range(1, 5))


def test_log_storm_on_an_untimestamped_host_log_judges_the_mean_rate() -> None:
    from xpushare.judge.stability_checks import check_log_storm, scan_scheduler_log

    scan = scan_scheduler_log(["[XPUSHARE][INFO]: Received REGISTER"] * 120)
    assert check_log_storm(scan, floor_per_min=1200, factor=10).ok is None  # no span: nothing judged
    ok = check_log_storm(scan, floor_per_min=1200, factor=10, span_s=120)
    assert ok.ok is True and ok.values["mean_per_min"] == 60.0 and "no timestamps" in ok.values["note"]
    storm = check_log_storm(scan, floor_per_min=10, factor=10, span_s=60)
    assert storm.ok is False and "120 lines per minute" in storm.detail
