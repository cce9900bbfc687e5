"""Host mode: the scheduler's clients are matched to our workloads by host_pid / client_id, never by pod name.

The evidence is what the real scheduler emits outside Kubernetes. Base: the captures of
tests/fixtures/samples (an H200 host, upstream xpushare 878dfd8, no Kubernetes; README.md there):
``scheduler.log`` (two processes registered on GPU key ``0``: client ``4bc9ebed1b560511`` with
SO_PEERCRED pid 479, then ``0600a8daa2b6e910`` with pid 478, both ``Pod name = none, Pod namespace =
none``), ``pod_a.log`` (the workload whose ``Client ID = 0600a8daa2b6e910``; ``nvidia_smi_compute_apps.csv``
shows it as pid 478) and ``metrics_idle.txt`` (the exporter's idle page, HELP/TYPE of every family).

The loaded page is the idle page with the client rows ``metrics_exporter.c`` (``format_client_metrics``)
prints for those two clients, labels in its order: ``client_info{namespace,pod,client_id,gpu_uuid,
gpu_index,host_pid}`` with ``namespace="none"``, ``pod="none"``, ``gpu_uuid="0"`` (the client's key: the
first token of ``CUDA_VISIBLE_DEVICES``), ``gpu_index="-1"`` (never resolved) and the SO_PEERCRED pid;
``client_nvml_used_bytes`` carries ``host_pid`` too and is ``0`` because the exporter looks processes up
on GPUs whose UUID prefix-matches the key, and ``0`` matches no ``GPU-...`` UUID; an unannotated
client's ``client_memory_quota_bytes`` is the uninitialised field (docs/sut/metrics.md §lifecycle). Sizes are the
sample's (984 MiB / 550 MiB reported by MEM_UPDATE, GPU 100 % busy in dmon_u.txt).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.backend import FakeBackend
from tests.paths import FIXTURES
from tests.unit.cases.test_metrics import FakeExporter, act_and_judge, exporter, host_cluster  # noqa: F401 (fixture)
from tests.unit.metrics_check.test_metrics_check import IDLE, METRICS_CT, UUID, with_rows
from xpushare.backends.host import HostBackend
from xpushare.backends.host_procs import POLL, WRAPPER
from xpushare.backends.host_scheduler import HostScheduler
from xpushare.cases import REGISTRY
from xpushare.evidence.client_match import (
    KEY_HOST_PID,
    KEY_POD,
    ClientMatch,
    client_match,
    client_values,
    matched_clients,
    registrations_of,
    workload_labels,
)
from xpushare.evidence.store import SOURCE_RECORDED, SOURCE_REGISTRATION, Evidence, write_gpu_mapping
from xpushare.judge import metrics as jm
from xpushare.metrics_check import checklist, endpoint, probes
from xpushare.model.verdict import Status
from xpushare.model.workload import WorkloadRecord, write_pod_records
from xpushare.parsers import scheduler_log
from xpushare.parsers.metrics import parse_exposition
from xpushare.transport.base import CommandResult
from xpushare.transport.local import LocalHost

SAMPLES = FIXTURES / "samples"
SCHED_LOG = (SAMPLES / "scheduler.log").read_text(encoding="utf-8")
POD_A_LOG = (SAMPLES / "pod_a.log").read_text(encoding="utf-8")

CID_A, PID_A = "0600a8daa2b6e910", 478  # pod_a.log's Client ID; nvidia-smi compute-apps pid
CID_B, PID_B = "4bc9ebed1b560511", 479  # the other process of the capture
KEY = "0"  # GPU key of both clients: CUDA_VISIBLE_DEVICES=0 (scheduler.log "on GPU 0")
UNSET_QUOTA = 8386109761109976864  # client_memory_quota_bytes of a client without annotation (docs/findings.md #1)
PROBE = "metrics-check-1"


def client(cid: str, pid: int, managed: int) -> dict[str, Any]:
    return {"cid": cid, "pid": pid, "managed": managed}


A = client(CID_A, PID_A, 4 * 257949696)  # four cuMemAlloc of 257949696 bytes (pod_a.log): 984 MiB
B = client(CID_B, PID_B, 550 << 20)  # "Received MEM_UPDATE from 4bc9ebed1b560511: 550 MB"


def host_page(clients: Sequence[dict[str, Any]] = (A, B), *, nvml: int = 0) -> str:
    """The /metrics page of the real scheduler in host mode with ``clients`` registered (labels and
    order of metrics_exporter.c; ``nvml``: the client_nvml_used_bytes value, 0 as the real exporter
    prints it for an index key)."""
    def base(c: dict[str, Any]) -> str:
        return f'{{namespace="none",pod="none",client_id="{c["cid"]}",gpu_uuid="{KEY}"}}'

    g = f'{{gpu_uuid="{UUID}",gpu_index="0"}}'
    ctx = f'{{gpu_uuid="{KEY}",gpu_index="0"}}'  # scheduler block: the client's key, context order
    n = len(clients)
    rows: dict[str, list[str]] = {
        "gpu_memory_used_bytes": [f"{g} {1605 << 20}"],
        "gpu_memory_free_bytes": [f"{g} {150754820096 - (1605 << 20)}"],
        "gpu_utilization_ratio": [f"{g} 1.0000"],
        "gpu_memory_utilization_ratio": [f"{g} 1.0000"],
        "gpu_process_count": [f"{g} {n}"],
        "client_info": [f'{base(c)[:-1]},gpu_index="-1",host_pid="{c["pid"]}"}} 1' for c in clients],
        "client_managed_allocated_bytes": [f"{base(c)} {c['managed']}" for c in clients],
        "client_managed_allocated_peak_bytes": [f"{base(c)} {c['managed']}" for c in clients],
        "client_nvml_used_bytes": [f'{base(c)[:-1]},host_pid="{c["pid"]}"}} {nvml}' for c in clients],
        **{family: [f"{base(c)} {value}" for c in clients] for family, value in (
            ("client_memory_quota_bytes", UNSET_QUOTA), ("client_memory_quota_exceeded", 0),
            ("client_core_quota_config_percent", 100), ("client_core_quota_effective_percent", 100),
            ("client_core_window_usage_ms", 0), ("client_core_window_limit_ms", 2000),
            ("client_core_usage_ratio", "0.0000"), ("client_throttled", 0), ("client_pending_drop", 0),
            ("client_quota_debt_ms", 0))},
        "scheduler_running_clients": [f"{ctx} 0"],
        "scheduler_request_queue_clients": [f"{ctx} 0"],
        "scheduler_wait_queue_clients": [f"{ctx} 0"],
        "scheduler_running_memory_bytes": [f"{ctx} 0"],
        "scheduler_peak_running_memory_bytes": [f"{ctx} 0"],
        "scheduler_memory_safe_limit_bytes": [f"{ctx} 135679338086"],
        "scheduler_memory_overloaded": [f"{ctx} 0"],
        "scheduler_messages_total": [f'{{type="{t}"}} {v}' for t, v in (
            ("REGISTER", n), ("SCHED_ON", 0), ("SCHED_OFF", 0), ("REQ_LOCK", 0), ("LOCK_OK", 0), ("DROP_LOCK", 0),
            ("LOCK_RELEASED", 0), ("SET_TQ", 0), ("MEM_UPDATE", 5), ("WAIT_FOR_MEM", 0), ("MEM_AVAILABLE", 0),
            ("PREPARE_SWAP_OUT", 0), ("UPDATE_LIMIT", 0), ("UPDATE_CORE_LIMIT", 0))],
    }
    return with_rows(IDLE, rows)


def host_match(pid: int | None = PID_A, log: str | None = None, name: str = PROBE) -> ClientMatch:
    return client_match("host", name, record=WorkloadRecord(name=name, phase="Running", host_pid=pid), log=log)


def line(lines: Sequence[checklist.CheckLine], item: str) -> checklist.CheckLine:
    return next(ln for ln in lines if ln.item == item)


# --------------------------------------------------------------------------------------- the key by mode


def test_the_key_is_chosen_by_mode() -> None:
    rec = WorkloadRecord(name="pod-a", phase="Running", host_pid=PID_A)
    k8s = client_match("k8s", "pod-a", namespace="default", record=rec, log=POD_A_LOG)
    assert (k8s.key, k8s.pod, k8s.namespace, k8s.host_pids, k8s.client_ids) == (KEY_POD, "pod-a", "default", (), ())
    host = client_match("host", "pod-a", namespace="default", record=rec, log=POD_A_LOG)
    assert (host.key, host.pod, host.host_pids, host.client_ids) == (KEY_HOST_PID, None, (PID_A,), (CID_A,))
    assert host.describe() == f"host_pid {PID_A} or client_id {CID_A}"
    labels = {"namespace": "none", "pod": "none", "client_id": CID_A, "host_pid": str(PID_A)}
    assert host.key_of(labels) == f"host_pid {PID_A} and client_id {CID_A}"
    assert host.key_of({**labels, "host_pid": "1"}) == f"client_id {CID_A}"  # pid wrong, id still ours
    assert host.key_of({**labels, "client_id": CID_B, "host_pid": str(PID_B)}) is None
    assert k8s.key_of(labels) is None  # the pod-name key can never find a host-mode client
    assert ClientMatch.from_dict(json.loads(json.dumps(host.to_dict()))) == host
    nothing = client_match("host", "pod-a", record=WorkloadRecord(name="pod-a", phase="Pending"))
    assert not nothing.usable and nothing.key_of(labels) is None and "unknown" in nothing.describe()


# ------------------------------------------------------------------------------------ /metrics, load part


def test_host_page_matches_the_probe_by_host_pid() -> None:
    exp = parse_exposition(host_page())
    assert exp.ok
    hits = matched_clients(exp, host_match())
    assert [(s.label("client_id"), key) for s, key in hits] == [(CID_A, f"host_pid {PID_A}")]
    assert [s.value for s in client_values(exp, "client_managed_allocated_bytes", host_match())] == [A["managed"]]
    lines = checklist.load_checks(exp, expected_clients=1, matches=[host_match()])
    info = line(lines, "client_info per client")
    assert info.ok and f"{PROBE} = {CID_A} (matched by host_pid {PID_A})" in info.observed
    assert "by host_pid + client_id" in info.expected
    for item in ("client host_pid is a real host pid", "managed allocation", "GPU utilization under load",
                 "REGISTER messages counted", "core quota per client", "GPU process count"):
        assert line(lines, item).ok, item


def test_host_page_fails_when_the_probe_did_not_register() -> None:
    # broken system: only the other process is registered (the probe's pid 478 is not on the page)
    lines = checklist.load_checks(parse_exposition(host_page([B])), expected_clients=1, matches=[host_match()])
    info = line(lines, "client_info per client")
    assert not info.ok and len(lines) == 1
    assert info.observed.startswith("0; not found: metrics-check-1 [host_pid 478]")
    assert f"registered: {CID_B} (pod none, host_pid {PID_B})" in info.observed
    # idle scheduler
    info = line(checklist.load_checks(parse_exposition(IDLE), expected_clients=1, matches=[host_match()]),
                "client_info per client")
    assert not info.ok and "registered: none" in info.observed
    # the pid was never recorded and the probe printed no Client ID: nothing to match with
    info = line(checklist.load_checks(parse_exposition(host_page()), expected_clients=1,
                                      matches=[host_match(pid=None)]), "client_info per client")
    assert not info.ok and "host_pid unknown" in info.observed


def test_pod_name_matching_cannot_work_in_host_mode() -> None:
    """The defect this replaces: the pod-name key sees 0 clients on a healthy host-mode page."""
    lines = checklist.load_checks(parse_exposition(host_page()), expected_clients=1,
                                  matches=[client_match("k8s", PROBE)])
    assert not line(lines, "client_info per client").ok


def test_two_probes_by_pid_and_client_id() -> None:
    second = host_match(pid=PID_B, name="metrics-check-2")
    first = host_match(log=POD_A_LOG)
    lines = checklist.load_checks(parse_exposition(host_page()), expected_clients=2, matches=[first, second])
    info = line(lines, "client_info per client")
    assert info.ok, info.observed
    assert f"metrics-check-1 = {CID_A} (matched by host_pid {PID_A} and client_id {CID_A})" in info.observed
    assert f"metrics-check-2 = {CID_B} (matched by host_pid {PID_B})" in info.observed


def test_real_exporter_shows_no_nvml_memory_for_an_index_key() -> None:
    """What the real SUT does in host mode: the GPU key is "0", no NVML UUID prefix-matches it, so every
    client_nvml_used_bytes is 0. The line FAILs (a real defect) and says why."""
    nvml = line(checklist.load_checks(parse_exposition(host_page()), expected_clients=1, matches=[host_match()]),
                "NVML per-process memory")
    assert not nvml.ok and "GPU key '0' matches no gpu_info UUID" in nvml.observed
    fixed = checklist.load_checks(parse_exposition(host_page(nvml=610 << 20)), expected_clients=1,
                                  matches=[host_match()])
    assert [ln.item for ln in fixed if not ln.ok] == []


def probing_host(pid: int, log: str) -> FakeBackend:
    """The host backend as BackendProbeLoad sees it: the pid appears in the record after the start (the first
    two polls have none), the ``Client ID`` line in the output after the first CUDA call (the fourth poll)."""
    polls = [0]

    def records(names: Sequence[str], until: str) -> list[WorkloadRecord]:
        polls[0] += 1
        return [WorkloadRecord(name=n, phase="Running", node="localhost", host_pid=pid if polls[0] > 2 else None)
                for n in names]

    return FakeBackend(records=records, log=lambda pod: log if polls[0] > 3 else "")


@pytest.mark.parametrize(("page", "ok"), [(host_page([A]), True), (host_page([B]), False)])
def test_run_load_checks_through_a_host_backend(tmp_path: Path, page: str, ok: bool) -> None:
    backend = probing_host(PID_A, POD_A_LOG)
    load = probes.BackendProbeLoad(backend, tmp_path)
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    lines = probes.run_load_checks(lambda: endpoint.HttpResponse("u", 200, METRICS_CT, page, None, 0.0), load,
                                   steps=(1,), settle_s=10, clock=lambda: now[0], sleep=sleep)
    info = line(lines, "load 1: client_info per client")
    assert info.ok is ok, info.observed
    if ok:
        assert f"matched by host_pid {PID_A} and client_id {CID_A}" in info.observed
        assert load.matches([PROBE]) == [client_match("host", PROBE, record=WorkloadRecord(PROBE, "Running",
                                                                                      host_pid=PID_A), log=POD_A_LOG)]
    else:
        assert f"not found: {PROBE} [host_pid {PID_A} or client_id {CID_A}]" in info.observed
        assert now[0] >= 10  # polled until the settle time ran out


# ------------------------------------------------------------------------------------- the scheduler log


def test_real_scheduler_log_carries_host_pids() -> None:
    s = scheduler_log.parse_text(SCHED_LOG)
    assert [(r.cid, r.host_pid, r.pod) for r in s.registrations] == [(CID_B, PID_B, "none"), (CID_A, PID_A, "none")]
    assert s.to_dict()["registrations"][1]["host_pid"] == PID_A
    hits = registrations_of(s, host_match())
    assert [(r.cid, r.gpu, key) for r, key in hits] == [(CID_A, KEY, f"host_pid {PID_A}")]
    assert CID_A in s.disconnected_clients  # "Removing client 0600a8daa2b6e910": removal carries the id only
    by_id = registrations_of(s, host_match(pid=None, log=POD_A_LOG))  # no pid: the workload's own Client ID
    assert [(r.cid, key) for r, key in by_id] == [(CID_A, f"client_id {CID_A}")]
    assert registrations_of(s, client_match("k8s", "pod-a")) == []  # pod names are "none" outside Kubernetes
    table = s.distribution_table(workloads=workload_labels(s.registrations, [host_match(name="pod-a")]))
    assert table.splitlines()[1].split("|")[-1].strip() == "Workload"
    assert f"pod-a (matched by host_pid {PID_A})" in table.splitlines()[-1]
    assert table.splitlines()[-2].rstrip().endswith("| -")  # the other process is not ours


def test_scheduler_log_without_the_probe_registration() -> None:
    """Broken system: the probe's registration block is missing (it never registered)."""
    lines = SCHED_LOG.splitlines()
    start = lines.index("[XPUSHARE][DEBUG]: SO_PEERCRED: client fd=22 pid=478 (client reported pid=478)")
    end = next(i for i, ln in enumerate(lines) if ln.startswith(f"[XPUSHARE][INFO]: Registered client {CID_A}"))
    kept = lines[:start - 1] + lines[end + 1:]  # drop its Received REGISTER ... Registered client lines
    s = scheduler_log.parse_text("\n".join(kept) + "\n")
    assert [r.cid for r in s.registrations] == [CID_B]
    assert registrations_of(s, host_match()) == []


def test_peercred_lines_and_their_edges() -> None:
    log = "\n".join([
        "[XPUSHARE][INFO]: Received REGISTER",
        "[XPUSHARE][DEBUG]: SO_PEERCRED failed, using client-reported pid=812",
        f"[XPUSHARE][INFO]: Sent SCHED_ON to client {CID_A}",
        f"[XPUSHARE][INFO]: Registered client {CID_A} on GPU 0 with Pod name = none, Pod namespace = none",
        "[XPUSHARE][INFO]: Received REGISTER",
        "[XPUSHARE][DEBUG]: SO_PEERCRED: client fd=23 pid=900 (client reported pid=900)",
        f"[XPUSHARE][INFO]: Failed to send message to client {CID_B}",
        f"[XPUSHARE][INFO]: Removing client {CID_B}",  # registration failed after SO_PEERCRED
        "[XPUSHARE][INFO]: Received REGISTER",
        "2026-11-21T10:00:00.000000000Z [XPUSHARE][INFO]: Registered client 1111111111111111 on GPU 0 with "
        "Pod name = none, Pod namespace = none",  # normal mode: no SO_PEERCRED line, no pid
    ])
    s = scheduler_log.parse_text(log)
    assert [(r.cid, r.host_pid) for r in s.registrations] == [(CID_A, 812), ("1111111111111111", None)]
    assert registrations_of(s, host_match(pid=900)) == []


# ---------------------------------------------------------------------------------------- MET judgments


def test_met002_judge_host_mode() -> None:
    ev = Evidence.from_parts([], {}, {"metrics_mid.txt": host_page()})
    v = jm.judge_met002(ev, {}, client=host_match())
    assert v.status is Status.PASS, v.summary
    assert v.summary.endswith(f"({PROBE} matched by host_pid {PID_A})")
    seen = next(c for c in v.checks if c.name == "probe_client_seen")
    assert seen.values["matched_by"] == {CID_A: f"host_pid {PID_A}"}
    v = jm.judge_met002(Evidence.from_parts([], {}, {"metrics_mid.txt": host_page([B])}), {}, client=host_match())
    assert v.status is Status.FAIL
    assert "no client_info series matched by host_pid 478" in v.summary and f"host_pid {PID_B}" in v.summary


def test_met003_judge_host_mode_nvml_cross_check_by_pid() -> None:
    procs = "timestamp,gpu_index,pid,used_bytes\n" + "".join(
        f"{1000 + i}.000,0,{PID_A},{610 << 20}\n" for i in range(3))
    gpus = "timestamp,gpu_index,uuid,sm_util_pct,mem_used_bytes,mem_total_bytes\n" + "".join(
        f"{1000 + i}.000,0,{UUID},100,{1605 << 20},150754820096\n" for i in range(3))
    files = {"sampler/h200_procs.csv": procs, "sampler/h200_gpu.csv": gpus}
    good = jm.judge_met003(Evidence.from_parts([], {}, {"metrics_mid.txt": host_page(nvml=610 << 20), **files}), {},
                           client=host_match(), node="h200")
    assert good.status is Status.PASS, good.summary
    assert f"matched by host_pid {PID_A}" in good.summary
    real = jm.judge_met003(Evidence.from_parts([], {}, {"metrics_mid.txt": host_page(), **files}), {},
                           client=host_match(), node="h200")
    assert real.status is Status.FAIL and "nvml_used_positive" in real.summary  # the SUT's host-mode defect


def test_met_judge_glue_rebuilds_the_match_from_the_evidence() -> None:
    rec = WorkloadRecord(name="met-002-probe", phase="Running", node="localhost", host_pid=PID_A)
    ev = Evidence.from_parts([rec], {"met-002-probe": POD_A_LOG}, {"metrics_mid.txt": host_page()})
    plan = {"mode": "host", "probe": "met-002-probe", "namespace": "default", "prefix": "xpushare"}
    case = REGISTRY["MET-002"]
    assert case.judge is not None
    v = case.judge(ev, {}, plan)
    assert v.status is Status.PASS and f"host_pid {PID_A} and client_id {CID_A}" in v.summary
    gone = Evidence.from_parts([rec], {"met-002-probe": POD_A_LOG}, {"metrics_mid.txt": host_page([B])})
    assert case.judge(gone, {}, plan).status is Status.FAIL


# ------------------------------------------------------------------------ MET-002 act in host mode


def host_with_library(pid: int) -> FakeBackend:
    """Host mode with the client library: the probe is a process whose pid the backend recorded."""
    log = POD_A_LOG + "[XPUSHARE][QUOTA_PROBE] elapsed=1.0s it=10 it_per_sec=10.00\n"
    backend: FakeBackend

    def records(names: Sequence[str], until: str) -> list[WorkloadRecord]:
        recs = [WorkloadRecord(name=n, phase="Running", node="localhost", host_pid=pid) for n in names]
        write_pod_records(backend.case_dir, recs)  # as the host backend does on every poll
        for n in names:  # what the harvest brings back
            (backend.case_dir / "pods").mkdir(exist_ok=True)
            (backend.case_dir / "pods" / f"{n}.log").write_text(log, encoding="utf-8")
        return recs

    backend = FakeBackend(run_id="unit", client_library=True, scheduler_host=LocalHost(), records=records, log=log)
    return backend


@pytest.mark.parametrize(("clients", "status"), [((A, B), Status.PASS), ((B,), Status.FAIL)])
def test_met002_act_host_mode_with_probe(exporter: tuple[FakeExporter, int], tmp_path: Path,  # noqa: F811
                                         clients: tuple[dict[str, Any], ...], status: Status) -> None:
    state, port = exporter
    page = host_page(clients)  # FAIL: the scheduler lost the probe (only the other process is registered)
    state.render = lambda: page  # type: ignore[method-assign]
    cluster = host_cluster(f"http://127.0.0.1:{port}/metrics")
    v, plan, _ = act_and_judge("MET-002", host_with_library(PID_A), cluster, tmp_path)
    assert v.status is status, v.summary
    assert plan["probe"] == "met-002-probe" and plan["mode"] == "host"
    assert plan["client"]["key"] == KEY_HOST_PID and plan["client"]["host_pids"] == [PID_A]
    assert plan["client"]["client_ids"] == [CID_A]
    if status is Status.PASS:
        assert f"matched by host_pid {PID_A} and client_id {CID_A}" in v.summary
    else:
        assert plan["settle"]["settled"] is False
        assert f"no client_info series matched by host_pid {PID_A} or client_id {CID_A}" in v.summary
        assert f"{CID_B} (pod none, host_pid {PID_B})" in v.summary


# ------------------------------------------------------------------------------- the host backend's pid


def test_host_wrapper_records_the_workload_pid(tmp_path: Path) -> None:
    host = LocalHost(spawn_dir=str(tmp_path))
    code = "import os, time; print('PID', os.getpid(), flush=True); time.sleep(0.3)"
    host.spawn("xp-w", ["sh", "-c", WRAPPER, "sh", "xp-w", sys.executable, "-c", code])
    deadline = time.monotonic() + 20
    while not (tmp_path / "xp-w.rc").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    printed = int((tmp_path / "xp-w.log").read_text().split()[1])
    assert int((tmp_path / "xp-w.hostpid").read_text()) == printed
    row = host.run(["sh", "-c", POLL, "sh", str(tmp_path), "xp-w"]).stdout.strip().split("|")
    assert row[0] == "xp-w" and row[1] == "0" and row[4] == str(printed)


def test_gpu_mapping_is_derived_at_judgment_from_registrations_by_pid(tmp_path: Path) -> None:
    """Harvest stores pods.json and scheduler.log; the mapping is derived (and written) when judging."""
    write_pod_records(tmp_path, [WorkloadRecord("func-002-w2-a", "Succeeded", 0, "localhost", UUID, host_pid=PID_A,
                                           gpu_key="1"),
                                 WorkloadRecord("func-002-w2-b", "Succeeded", 0, "localhost", UUID, host_pid=4242,
                                           gpu_key="1")])
    (tmp_path / "pods").mkdir()
    (tmp_path / "pods" / "func-002-w2-a.log").write_text(POD_A_LOG, encoding="utf-8")
    ev = Evidence.load(tmp_path, "host")
    # no scheduler log: nothing to map, every pod keeps the GPU pods.json recorded
    assert write_gpu_mapping(ev) == []
    assert all(a.source == SOURCE_RECORDED and a.gpu == a.recorded for a in ev.assignments.values())
    assert [r.gpu for r in ev.pods] == [UUID, UUID]  # the backend's placement, as recorded
    (tmp_path / "scheduler.log").write_text(SCHED_LOG, encoding="utf-8")
    ev = Evidence.load(tmp_path, "host")
    assert write_gpu_mapping(ev) == ["gpu_mapping.txt"]
    rows = [ln.split("\t") for ln in (tmp_path / "gpu_mapping.txt").read_text().splitlines()]
    # no node sampler files: no NVML placement to compare with (the last three columns say so)
    assert rows == [["pod", "node", "gpu_key", "matched_by", "key_gpu_uuid", "nvml_gpu_uuid", "agree"],
                    ["func-002-w2-a", "localhost", KEY, f"host_pid {PID_A} and client_id {CID_A}", "-", "-", "-"],
                    ["func-002-w2-b", "localhost", "-", "-", "-", "-", "-"]]  # pid 4242 never registered
    # The judgments see the registration's GPU; the unregistered pod keeps the key of the tool's placement.
    a, b = ev.assignment("func-002-w2-a"), ev.assignment("func-002-w2-b")
    assert a is not None and (a.gpu, a.source, a.recorded) == (KEY, SOURCE_REGISTRATION, UUID)
    assert b is not None and (b.gpu, b.source) == ("1", SOURCE_RECORDED)
    assert [r.gpu for r in ev.pods] == [KEY, "1"]
    # The log is one host's: a pod of another host is never matched by its pid.
    (tmp_path / "scheduler_node.txt").write_text("other-host\n", encoding="utf-8")
    other = Evidence.load(tmp_path, "host").assignment("func-002-w2-a")
    assert other is not None and other.source == SOURCE_RECORDED


def test_met002_without_anything_to_match_is_an_error() -> None:
    """Host mode, no pid in pods.json and no Client ID line: the probe's clients cannot be told apart."""
    rec = WorkloadRecord(name="met-002-probe", phase="Running", node="localhost")
    ev = Evidence.from_parts([rec], {}, {"metrics_mid.txt": host_page()})
    case = REGISTRY["MET-002"]
    assert case.judge is not None
    v = case.judge(ev, {}, {"mode": "host", "probe": "met-002-probe", "prefix": "xpushare"})
    assert v.status is Status.ERROR and "host_pid unknown" in v.summary


def test_host_scheduler_facts_are_not_healthy_without_a_healthz_answer() -> None:
    """A running scheduler process is not "healthy" unless ``/healthz`` answered 200: with no ``metrics_url`` to
    ask, the process alone is no evidence of health (a recovery check must not pass on it)."""
    proc = "@@PROC 4242\nName:\txpushare-schedu\nPid:\t4242\nVmRSS:\t1024 kB\nThreads:\t2\nFD_COUNT=7\n"

    class SchedulerNode(LocalHost):
        health = ""

        def run(self, argv: Sequence[str], **kw: Any) -> CommandResult:
            return CommandResult(self.name, tuple(argv), proc + self.health + "@@END\n", "", 0, 0.0)

    cluster = host_cluster(None)
    cluster = replace(cluster, scheduler=replace(cluster.scheduler, process_name="xpushare-scheduler"))
    node = SchedulerNode("localhost")
    scheduler = HostScheduler("localhost", node, cluster.scheduler)  # no metrics_url: no scheduler part either
    assert HostBackend(cluster).parts.scheduler is None
    [facts] = scheduler.facts(cluster.name)
    assert facts.processes and facts.instance == "4242" and not facts.healthy
    node.health = "@@HEALTH\nOK\nHTTP_CODE=200\n"
    assert scheduler.facts(cluster.name)[0].healthy
    node.health = "@@HEALTH\ncurl: (7) refused\nHTTP_CODE=000\n"
    assert not scheduler.facts(cluster.name)[0].healthy
