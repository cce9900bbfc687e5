"""MET-003's gauge series (xpushare/judge/metrics_gauges.py): each gauge against its second source over time.

A synthetic run on one node with two GPUs: the probe on GPU 0 the whole time, the alloc/free loop on GPU 1 from
t=1002 to t=1018 (16 MiB held 1002.5-1006.5 and 1010.5-1014.5, a lock granted for 0.2 s after each allocation),
scraped every second from t=1000 to t=1020. The healthy series passes every check; a frozen or stuck gauge fails
the check of that gauge; a missing second source is ERROR (``ok`` None), never PASS.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timezone

import pytest

from xpushare.evidence.client_match import client_match
from xpushare.evidence.store import Evidence
from xpushare.judge.metrics_gauges import gauge_checks
from xpushare.model.workload import WorkloadRecord

MIB = 2**20
CTX = 256 * MIB
G0, G1 = "GPU-0000", "GPU-1111"
PROBE, MOVER = "met-003-probe", "met-003-alloc"
P_CID, M_CID = "00000000000000aa", "00000000000000bb"
HELD = [(1002.5, 1006.5), (1010.5, 1014.5)]  # 4 s held, 4 s freed
GRANTS = [(1002.6, 1002.8), (1010.6, 1010.8)]
JOIN, LEAVE = 1002.0, 1018.0


def stamp(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def mover_mib(t: float) -> int:
    return 16 if any(a <= t < b for a, b in HELD) else 0


def present(t: float) -> bool:
    return JOIN <= t < LEAVE


def holding(t: float) -> bool:
    return any(a <= t < b for a, b in GRANTS)


Truth = dict[str, Callable[[float], float]]


def page(t: float, over: Truth) -> str:
    managed = over.get("managed", lambda x: mover_mib(x) * MIB)(t)
    running = over.get("running", lambda x: float(holding(x)))(t)
    clients = int(over.get("clients", lambda x: 1 + present(x))(t))
    gpu1 = over.get("gpu1", lambda x: (CTX + mover_mib(x) * MIB) if present(x) else 0.0)(t)
    rows = [f'xpushare_gpu_info{{gpu_uuid="{G0}",gpu_index="0",gpu_name="sim"}} 1',
            f'xpushare_gpu_info{{gpu_uuid="{G1}",gpu_index="1",gpu_name="sim"}} 1',
            f'xpushare_gpu_memory_used_bytes{{gpu_uuid="{G0}",gpu_index="0"}} {CTX + 16 * MIB}',
            f'xpushare_gpu_memory_used_bytes{{gpu_uuid="{G1}",gpu_index="1"}} {gpu1:.0f}',
            f'xpushare_client_info{{namespace="default",pod="{PROBE}",client_id="{P_CID}",gpu_uuid="{G0}",'
            'gpu_index="0",host_pid="100"} 1',
            f'xpushare_client_managed_allocated_bytes{{namespace="default",pod="{PROBE}",client_id="{P_CID}",'
            f'gpu_uuid="{G0}"}} {16 * MIB}',
            f'xpushare_scheduler_running_clients{{gpu_uuid="{G0}",gpu_index="0"}} 0',
            f'xpushare_scheduler_running_clients{{gpu_uuid="{G1}",gpu_index="1"}} {running:g}',
            f'xpushare_scheduler_running_memory_bytes{{gpu_uuid="{G0}",gpu_index="0"}} 0',
            f'xpushare_scheduler_running_memory_bytes{{gpu_uuid="{G1}",gpu_index="1"}} '
            f'{over.get("running_memory", lambda x: mover_mib(x) * MIB * holding(x))(t):.0f}']
    if clients >= 2:
        rows += [f'xpushare_client_info{{namespace="default",pod="{MOVER}",client_id="{M_CID}",gpu_uuid="{G1}",'
                 'gpu_index="1",host_pid="200"} 1',
                 f'xpushare_client_managed_allocated_bytes{{namespace="default",pod="{MOVER}",client_id="{M_CID}",'
                 f'gpu_uuid="{G1}"}} {managed:.0f}',
                 f'xpushare_client_nvml_used_bytes{{namespace="default",pod="{MOVER}",client_id="{M_CID}",'
                 f'gpu_uuid="{G1}",host_pid="200"}} {CTX + mover_mib(t) * MIB}']
    return "\n".join(rows) + "\n"


def series(over: Truth) -> str:
    # a scrape 0.1 s after each whole second, 10 ms long
    return "".join(json.dumps({"t": t + 0.1, "latency_s": 0.01, "status": 200, "error": None,
                               "body": page(t + 0.1, over)}) + "\n" for t in range(1000, 1021))


def scheduler_log() -> str:
    lines = [(999.0, f"Registered client {P_CID} on GPU {G0} with Pod name = {PROBE}, Pod namespace = default"),
             (JOIN, f"Registered client {M_CID} on GPU {G1} with Pod name = {MOVER}, Pod namespace = default"),
             (LEAVE, f"Removing client {M_CID}")]
    for a, b in GRANTS:
        lines += [(a, f"Sent LOCK_OK to client {M_CID}"), (b, f"Received LOCK_RELEASED from {M_CID}")]
    return "".join(f"{stamp(t)} [XPUSHARE][INFO]: {msg}\n" for t, msg in sorted(lines))


def mover_log() -> str:
    reports = [(a, 16) for a, _ in HELD] + [(b, 0) for _, b in HELD]
    return "".join(f"{stamp(t)} [XPUSHARE][DEBUG]: Reported memory usage: {mib} MB\n" for t, mib in sorted(reports))


def sampler() -> dict[str, str]:
    gpu = ["timestamp,gpu_index,uuid,sm_util_pct,mem_used_bytes,mem_total_bytes"]
    procs = ["timestamp,gpu_index,pid,used_bytes"]
    for k in range(1000 * 2, 1021 * 2):  # every 0.5 s
        t = k / 2
        gpu.append(f"{t},0,{G0},0,{CTX + 16 * MIB},{2**31}")
        gpu.append(f"{t},1,{G1},0,{(CTX + mover_mib(t) * MIB) if present(t) else 0},{2**31}")
        procs.append(f"{t},0,100,{CTX + 16 * MIB}")
        if present(t):
            procs.append(f"{t},1,200,{CTX + mover_mib(t) * MIB}")
    return {"sampler/n1_gpu.csv": "\n".join(gpu) + "\n", "sampler/n1_procs.csv": "\n".join(procs) + "\n"}


def checks(over: Truth | None = None, *, files: dict[str, str | None] | None = None,
           logs: dict[str, str] | None = None) -> dict[str, tuple[bool | None, str]]:
    parts: dict[str, str | None] = {"metrics_series.jsonl": series(over or {}), "scheduler.log": scheduler_log(),
                                    **sampler(), **(files or {})}
    ev = Evidence.from_parts([WorkloadRecord(PROBE, "Running", node="n1", namespace="default"),
                              WorkloadRecord(MOVER, "Succeeded", 0, node="n1", namespace="default")],
                             {PROBE: "", MOVER: mover_log(), **(logs or {})},
                             {k: v for k, v in parts.items() if v is not None}, mode="k8s")
    out = gauge_checks(ev, {}, mover=client_match("k8s", MOVER, namespace="default"), others=[PROBE], node="n1",
                       start=1000.0, end=1025.0)
    return {c.name: (c.ok, c.detail) for c in out}


def test_the_healthy_series_passes_every_check() -> None:
    got = checks()
    assert got == dict.fromkeys(got, (True, "")), got
    assert set(got) == {"client_count_follows_log", "running_clients_follow_locks", "managed_follows_client_reports",
                        "running_memory_within_reports", "nvml_process_memory_follows", "gpu_memory_follows_nvml"}


@pytest.mark.parametrize(("over", "check", "words"), [
    ({"managed": lambda t: 16 * MIB}, "managed_follows_client_reports", "frozen"),  # sampled once
    ({"managed": lambda t: max(mover_mib(t), 16 * (t >= HELD[0][0])) * MIB}, "managed_follows_client_reports",
     "the client reported [0]"),  # never shrinks after the first block
    ({"running": lambda t: float(t >= GRANTS[0][0])}, "running_clients_follow_locks", "running_clients 1"),
    ({"clients": lambda t: 1 + (t >= JOIN)}, "client_count_follows_log", "the log says [1]"),  # a ghost client
    ({"gpu1": lambda t: 0.0}, "gpu_memory_follows_nvml", "NVML"),  # device memory frozen at the idle value
    ({"running_memory": lambda t: 16.0 * MIB}, "running_memory_within_reports", "0 lock holder"),  # finding 23
])
def test_a_gauge_that_does_not_follow_fails(over: Truth, check: str, words: str) -> None:
    got = checks(over)
    assert got[check][0] is False and words in got[check][1], got[check]
    # a ghost client also exports NVML memory for a process NVML no longer lists
    also = {"nvml_process_memory_follows"} if check == "client_count_follows_log" else set()
    assert all(ok is True for name, (ok, _) in got.items() if name not in {check, *also}), got


def test_missing_second_sources_are_errors_not_passes() -> None:
    got = checks(files={"sampler/n1_gpu.csv": None, "sampler/n1_procs.csv": None}, logs={MOVER: ""})
    for name in ("managed_follows_client_reports", "running_memory_within_reports", "nvml_process_memory_follows",
                 "gpu_memory_follows_nvml"):
        assert got[name][0] is None, (name, got[name])
    untimed = checks(files={"scheduler.log": scheduler_log().replace("Z [XPUSHARE]", "Z_ [XPUSHARE]")})
    assert untimed["client_count_follows_log"][0] is None


def test_too_few_scrapes_is_one_error() -> None:
    ev = Evidence.from_parts([], {}, {"metrics_series.jsonl": series({}).split("\n", 1)[0] + "\n"}, mode="k8s")
    out = gauge_checks(ev, {}, mover=client_match("k8s", MOVER, namespace="default"), node="n1", start=1000.0,
                       end=1020.0)
    assert [(c.name, c.ok) for c in out] == [("gauge_series", None)]


def test_a_page_ahead_of_the_log_by_less_than_the_lag_passes() -> None:
    """The kubelet stamps a log line when it reads it: the loop's client (and its first lock) may show on a page
    taken a little before the log's time of the event. Even on the first page of the series, that is no mismatch."""
    ahead: Truth = {"clients": lambda t: 1 + (JOIN - 0.9 <= t < LEAVE)}
    got = checks(ahead, files={
        "metrics_series.jsonl": "".join(json.dumps({"t": t, "latency_s": 0.01, "status": 200, "error": None,
                                                    "body": page(t, ahead)}) + "\n"
                                        for t in (JOIN - 0.5, *range(1003, 1021)))})
    assert got["client_count_follows_log"] == (True, ""), got


def host_checks(over: Truth | None = None, *, updates: bool = True) -> dict[str, tuple[bool | None, str]]:
    """The series as host mode records it: no client has a limit, so nobody takes the lock (running clients and
    running memory stay 0); the scheduler's log is the case's timestamped copy, whose ``Received MEM_UPDATE`` lines
    are the loop's reports (its own output has no times); clients are matched by host pid."""
    lines = [(999.0, f"[XPUSHARE][INFO]: Registered client {P_CID} on GPU {G0} with Pod name = none, Pod namespace = "
                     "none"),
             (JOIN, f"[XPUSHARE][INFO]: Registered client {M_CID} on GPU {G1} with Pod name = none, Pod namespace = "
                    "none"),
             (LEAVE, f"[XPUSHARE][INFO]: Removing client {M_CID}")]
    if updates:
        lines += [(t, f"[XPUSHARE][DEBUG]: Received MEM_UPDATE from {M_CID}: {mib} MB")
                  for t, mib in [(a, 16) for a, _ in HELD] + [(b, 0) for _, b in HELD]]
    stamped = "".join(f"{stamp(t)} {msg}\n" for t, msg in sorted(lines))
    no_locks: Truth = {"running": lambda t: 0.0, "running_memory": lambda t: 0.0, **(over or {})}
    mover = WorkloadRecord(MOVER, "Succeeded", 0, node="n1", host_pid=200)
    ev = Evidence.from_parts([WorkloadRecord(PROBE, "Running", node="n1", host_pid=100), mover],
                             {PROBE: "", MOVER: "[XPUSHARE][DEBUG]: Reported memory usage: 16 MB\n"},
                             {"metrics_series.jsonl": series(no_locks), "scheduler_stamped.log": stamped, **sampler()},
                             mode="host")
    out = gauge_checks(ev, {}, mover=client_match("host", MOVER, record=mover, log=""), others=[PROBE], node="n1",
                       start=1000.0, end=1025.0, log_file="scheduler_stamped.log", host_mode=True)
    return {c.name: (c.ok, c.detail) for c in out}


def test_host_mode_series_judges_the_running_list_at_zero_and_reports_from_the_log() -> None:
    got = host_checks()
    assert got == dict.fromkeys(got, (True, "")), got
    assert len(got) == 6
    # what a host-mode series can still catch: a managed gauge 10 % high (values-off-10), finding 23's running
    # memory with nobody holding the lock, a running-client gauge that is not 0
    assert host_checks({"managed": lambda t: mover_mib(t) * MIB * 1.1})["managed_follows_client_reports"][0] is False
    assert host_checks({"running_memory": lambda t: 16.0 * MIB})["running_memory_within_reports"][0] is False
    assert host_checks({"running": lambda t: 1.0})["running_clients_follow_locks"][0] is False
    # without the scheduler's MEM_UPDATE lines (debug off) the loop's reports are missing: ERROR, never PASS
    assert host_checks(updates=False)["managed_follows_client_reports"][0] is None
