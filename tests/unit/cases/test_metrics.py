"""MET-001..008 cases (xpushare/cases/metrics.py): registration, acts against a fake cluster, judgment glue.

The acts run for real against a local HTTP exporter (``FakeExporter``: the captured idle page, and with
a probe registered the loaded page of tests/unit/judge/test_metrics.py) through a fake Kubernetes backend
whose probe pods exist only as exporter state, so every act's evidence and plan are checked without a
cluster, in seconds. Each case is driven healthy (PASS) and broken (FAIL/ERROR/SKIP) by switching what
the exporter serves.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast

import pytest

from tests.fakes.backend import FakeAnnotator, FakeBackend, FakeKube
from tests.paths import REPO_ROOT
from tests.toolrun import run_tool
from tests.unit.judge.test_metrics import GIB, page
from tests.unit.metrics_check.test_metrics_check import IDLE, UUID
from xpushare.backends.base import CaseContext
from xpushare.cases import REGISTRY
from xpushare.cases import metrics as met
from xpushare.cases.base import COMMON_PARAMS, CaseRun
from xpushare.cases.metrics_scraping import met008_size
from xpushare.engine import lifecycle, plan
from xpushare.evidence.http_fetch import FetchError, timed
from xpushare.evidence.metrics_target import ScrapeTarget, scrape_loop, spawn_name
from xpushare.evidence.scrape_capture import capture_text, timed_curl_fetcher
from xpushare.evidence.store import Evidence
from xpushare.inventory.schema import ClusterSpec, HostSpec, SchedulerSpec
from xpushare.judge import metrics as jm
from xpushare.judge import quantity, thresholds
from xpushare.model.verdict import Status, Verdict
from xpushare.model.workload import WorkloadRecord, WorkloadSpec
from xpushare.transport.local import LocalHost

ROOT = REPO_ROOT
NODE = "node-a"
CASES = [f"MET-{i:03d}" for i in range(1, 9)]
HEALTH_OK = "OK\n"


# ---------------------------------------------------------------------------------- the exporter


@dataclass
class Probe:
    pod: str
    core: int = 100
    mem_quota: float = 0.0


@dataclass
class FakeExporter:
    """What the fake scheduler serves; tests flip the switches (broken variants)."""

    probe: Probe | None = None
    health_code: int = 200
    metrics_code: int = 200
    drop: tuple[str, ...] = ()
    util: float = 0.6
    gpu_used: float = 3.5 * GIB
    apply_annotations: bool = True
    memory_from_annotation: bool = True
    annotation_delay_s: float = 0.3
    pending: list[tuple[float, dict[str, str]]] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)

    def annotate(self, values: Mapping[str, str]) -> None:
        if self.apply_annotations:
            self.pending.append((time.monotonic() + self.annotation_delay_s, dict(values)))

    def render(self) -> str:
        now = time.monotonic()
        for when, values in list(self.pending):
            if when <= now and self.probe is not None:
                self.probe.core = quantity.core_limit_value(values.get("core", str(self.probe.core)))
                if "memory" in values:
                    self.probe.mem_quota = quantity.annotation_bytes(values["memory"])
                self.pending.remove((when, values))
        if self.probe is None:
            return IDLE
        return page(pod=self.probe.pod, core=self.probe.core, mem_quota=self.probe.mem_quota, util=self.util,
                    gpu_used=self.gpu_used, nvml=min(3.2 * GIB, self.gpu_used), drop=self.drop)


@pytest.fixture
def exporter() -> Iterator[tuple[FakeExporter, int]]:
    state = FakeExporter()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            state.requests.append(self.path)
            if self.path == "/healthz":
                code, body, ctype = state.health_code, b"OK\n" if state.health_code == 200 else b"down\n", "text/plain"
            elif self.path == "/metrics":
                code, body = state.metrics_code, state.render().encode()
                ctype = "text/plain; version=0.0.4; charset=utf-8"
            else:
                code, body, ctype = 404, b"not found\n", "text/plain"
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state, server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


# ------------------------------------------------------------------------------ the fake backend


@dataclass
class SchedPod:
    name: str
    node: str | None
    pod_ip: str | None
    phase: str = "Running"


def probe_records(names: Sequence[str], phase: str) -> list[WorkloadRecord]:
    """The probe pods as a wait finds them: ``phase`` on the node (a pod not Running ended with exit 1)."""
    return [WorkloadRecord(name=n, phase=phase, node=NODE, exit_code=None if phase == "Running" else 1) for n in names]


def fake_k8s(state: FakeExporter, port: int, *, phase: str = "Running") -> FakeBackend:
    """A Kubernetes backend for the MET acts: the scheduler pod is the exporter at ``port``, a started probe pod
    is exporter state, annotations change the exporter's quotas."""

    def start(pods: Sequence[WorkloadSpec]) -> None:
        for spec in pods:
            mem = quantity.annotation_bytes(spec.memory_limit) if spec.memory_limit else 0
            mem = mem if state.memory_from_annotation else 0
            state.probe = Probe(spec.name, core=quantity.core_limit_value(spec.core_limit), mem_quota=mem)

    kube = FakeKube(metrics_port=port, node_hosts={NODE: NODE},
                    sut_pods=cast(Any, [SchedPod("xpushare-scheduler-abc", NODE, "127.0.0.1")]))
    return FakeBackend.having({"kubernetes", "annotations", "client-library"}, mode="k8s", run_id="unit",
                              kubernetes=kube, annotations=FakeAnnotator(on_annotate=lambda _, a: state.annotate(a)),
                              records=lambda names, until: probe_records(names, phase), on_start=start,
                              log="[XPUSHARE][QUOTA_PROBE] elapsed=1.0s it=10 it_per_sec=10.00\n")


def kube_of(backend: FakeBackend) -> FakeKube:
    kube = backend.parts.kubernetes
    assert isinstance(kube, FakeKube)
    return kube


def annotations_of(backend: FakeBackend) -> list[dict[str, str]]:
    annotator = backend.parts.annotations
    assert isinstance(annotator, FakeAnnotator)
    return [a for _, a in annotator.calls]


def fake_host(**kw: Any) -> FakeBackend:
    """A host backend whose scheduler host is this machine (no client library unless ``kw`` says so)."""
    return FakeBackend(mode="host", run_id="unit", scheduler_host=LocalHost(), **kw)


def k8s_cluster() -> ClusterSpec:
    return ClusterSpec(name="fake", mode="k8s", sut="xpushare", backend="cuda", gpu_model="Tesla T4",
                       gpu_memory_gib=16, hosts=(HostSpec("master", ("master",), local=True),
                                                 HostSpec(NODE, ("gpu",), local=True)))


def host_cluster(url: str | None) -> ClusterSpec:
    return ClusterSpec(name="local", mode="host", sut="xpushare", backend="cuda", gpu_model=None, gpu_memory_gib=None,
                       hosts=(HostSpec("localhost", ("gpu",), local=True),), scheduler=SchedulerSpec(metrics_url=url))


FAST: dict[str, Any] = {
    "met_settle_s": 1.0, "met_poll_s": 0.05, "met_scrape_timeout_s": 5.0, "met003_sampler_tail_s": 1.0,
    "met003_require_nvml": False, "met005_interval_s": 0.2, "met005_before_s": 0.4, "met005_timeout_s": 3.0,
    "met006_duration_s": 2.0, "met006_interval_s": 1.0, "met007_duration_s": 1.0, "met007_interval_s": 0.25,
    "met008_duration_s": 0.5, "met008_interval_s": 0.25, "met008_n": 64,
    # the fake exporter has no scheduler behind it: MET-003's alloc/free series is judged by
    # tests/unit/judge/test_metrics_gauges.py and on the lab (tests/e2e/test_k8s_metrics.py)
    "met003_alloc_rounds": 0,
}
# A stand-in for dmon on the node: 8 rows of GPU 0 at 60 % sm in the `-s u` layout, then it idles.
FAKE_DMON = [sys.executable, "-c", "import sys, time\nprint('# gpu    sm   mem   enc   dec')\n"
             "print('# Idx     %     %     %     %')\nfor _ in range(8): print('    0    60     5     0     0')\n"
             "sys.stdout.flush(); time.sleep(60)"]


def params_for(case_id: str, **over: Any) -> dict[str, Any]:
    case = REGISTRY[case_id]
    p = {**COMMON_PARAMS, **case.params, "pod_timeout_s": 5}
    p.update({k: v for k, v in FAST.items() if k in p})
    p.update(over)
    return p


def act_and_judge(case_id: str, backend: FakeBackend, cluster: ClusterSpec, tmp_path: Path, **over: Any
                  ) -> tuple[Verdict, dict[str, Any], Path]:
    """Run the case's act (as the engine does, minus harvest) and judge the stored case dir."""
    case = REGISTRY[case_id]
    case_dir = tmp_path / case_id
    case_dir.mkdir(parents=True)
    params = params_for(case_id, **over)
    run = CaseRun(case_id, case_dir, backend, cluster, params)
    backend.case = CaseContext(case_dir, case_id)  # as the lifecycle's Backend.begin_case does
    assert case.act is not None
    case.act(run)
    verdict = lifecycle.judge_case(case, case_dir, params)
    plan = json.loads((case_dir / "plan.json").read_text())
    return verdict, plan, case_dir


@pytest.fixture
def k8s(exporter: tuple[FakeExporter, int], monkeypatch: pytest.MonkeyPatch) -> tuple[FakeExporter, FakeBackend]:
    state, port = exporter
    monkeypatch.setattr(met, "has_command", lambda host, cmd: False)  # no nvidia-smi, whatever this machine has
    return state, fake_k8s(state, port)


# ------------------------------------------------------------------------------------ registration


def test_every_met_case_is_registered_with_its_thresholds() -> None:
    for cid in CASES:
        case = REGISTRY[cid]
        assert case.suite == "metrics" and case.act is not None and case.judge is not None, cid
        no = cid[-3:]
        own = {k: v for k, v in thresholds.METRICS.items() if k.startswith(f"met{no}_")}
        assert own.items() <= dict(case.params).items(), cid
        assert set(met.COMMON) <= set(case.params), cid
        # host mode runs every case whose meaning survives there; MET-004/005 need quotas the scheduler reads from
        # annotations (and say why), the cases with a probe need a client library that registers it
        assert ("kubernetes" in case.requires) is (cid in ("MET-004", "MET-005")), cid
        assert ("client-library" in case.requires) is (cid in ("MET-003", "MET-006", "MET-008")), cid
    assert "annotations" in REGISTRY["MET-004"].operation and "at runtime" in REGISTRY["MET-005"].operation
    assert REGISTRY["MET-007"].params["met007_duration_s"] == 120.0
    assert REGISTRY["MET-005"].params["met005_max_latency_s"] == 15.0
    assert plan.select(suites=("met",), case_ids=(), playbook=None).cases == [REGISTRY[c] for c in CASES]


def test_met008_size_fills_the_gpu() -> None:
    n = met008_size(0.85, 16 * GIB)
    assert 0.84 * 16 * GIB <= 16 * n * n <= 0.85 * 16 * GIB
    assert met008_size(0.85, 16 * GIB) < met008_size(0.9, 16 * GIB)
    with pytest.raises(ValueError):
        met008_size(0, 16 * GIB)


def test_capture_text_round_trips_through_the_judges_reader() -> None:
    ok = capture_text(jm.ScrapeRecord(1.0, 0.01, 200, None, "OK\n"), "text/plain")
    assert jm.read_capture(ok) == ("OK\n", 200, "text/plain")
    down = capture_text(jm.ScrapeRecord(1.0, 0.01, None, "GET x: refused\nmore", None), None)
    parsed = jm.read_capture(down)
    assert parsed.http_code == 0 and "refused" in parsed.body and "\n#" not in parsed.body


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl not installed")
def test_timed_curl_fetcher_reports_curls_own_time(exporter: tuple[FakeExporter, int]) -> None:
    _, port = exporter
    fetch = timed_curl_fetcher(LocalHost(), timeout_s=5)
    status, ctype, body, seconds = fetch(f"http://127.0.0.1:{port}/healthz")
    assert (status, ctype, body) == (200, "text/plain", "OK\n")
    assert seconds is not None and 0 <= seconds < 5
    assert fetch(f"http://127.0.0.1:{port}/nope")[0] == 404
    with pytest.raises(FetchError, match=r"127\.0\.0\.1:9/"):
        fetch("http://127.0.0.1:9/metrics")
    target = ScrapeTarget(f"http://127.0.0.1:{port}", fetch)
    record, _ = target.get("/metrics")
    assert record.responded and 0 <= record.latency_s < 5


def test_scrape_loop_is_fixed_rate_and_stops_on_request(tmp_path: Path) -> None:
    clock = [1000.0]

    def fetch(url: str) -> tuple[int, str | None, str]:
        clock[0] += 0.1
        return 200, "text/plain", "x 1\n"

    target = ScrapeTarget("http://h:1", timed(fetch), clock=lambda: clock[0])
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(round(s, 3))
        clock[0] += s

    out = tmp_path / "metrics_series.jsonl"
    recs = scrape_loop(target, out, interval_s=2.0, duration_s=6.0, sleep=sleep)
    assert [round(r.t - 1000, 3) for r in recs] == [0.0, 2.0, 4.0, 6.0] and slept == [1.9, 1.9, 1.9]
    assert len(out.read_text().splitlines()) == 4
    recs = scrape_loop(target, out, interval_s=2.0, duration_s=60.0, sleep=sleep, on_record=lambda k, r: k < 2)
    assert len(recs) == 3


def test_spawn_names_are_safe() -> None:
    backend = fake_host()
    assert spawn_name(backend, "MET-006", "dmon") == "xp4-unit-met-006-dmon"
    backend.case = CaseContext(Path("."), "MET-006", attempt="a1b2c3")  # each attempt: its own names
    assert spawn_name(backend, "MET-006", "dmon") == "xp4-unit-met-006-a1b2c3-dmon"


# ------------------------------------------------------------------------------------- host mode


def test_host_mode_without_metrics_url_skips(tmp_path: Path) -> None:
    for cid in ("MET-001", "MET-002", "MET-007"):
        v, _plan, _ = act_and_judge(cid, fake_host(), host_cluster(None), tmp_path)
        assert v.status is Status.SKIP and "scheduler.metrics_url" in v.summary, cid


def test_host_mode_probe_cases_without_metrics_url_skip_before_any_probe(tmp_path: Path) -> None:
    """MET-003, 006 and 008 run in host mode, against the scheduler of ``scheduler.metrics_url``: without one
    they SKIP naming it, and no probe was started (the fake host backend has no ``start_pods``)."""
    for cid in ("MET-003", "MET-006", "MET-008"):
        v, plan, _ = act_and_judge(cid, fake_host(), host_cluster(None), tmp_path)
        assert v.status is Status.SKIP and "scheduler.metrics_url" in v.summary, cid
        assert "probe" not in plan, cid


def pin_recorder() -> FakeBackend:
    """A host backend with a client library that records the probe it is asked for, then refuses to start it."""
    def refuse(pods: Sequence[WorkloadSpec]) -> None:
        raise RuntimeError("recorded")

    return fake_host(client_library=True, on_start=refuse)


@pytest.mark.parametrize("cid", ["MET-002", "MET-003", "MET-006", "MET-008"])
def test_host_mode_probes_go_to_the_scraped_schedulers_host(cid: str, tmp_path: Path) -> None:
    """The inventory's ``scheduler.metrics_url`` is the first GPU host's scheduler: the probe is pinned there
    (elsewhere it would register with a scheduler nobody scrapes), with no annotation quota (host mode has none)."""
    backend = pin_recorder()
    with pytest.raises(RuntimeError, match="recorded"):
        act_and_judge(cid, backend, host_cluster("http://127.0.0.1:9/metrics"), tmp_path, met008_n=64)
    (spec,) = backend.started
    assert spec.node == "localhost" and spec.core_limit is None and spec.memory_limit is None, spec
    assert spec.oversub is (cid == "MET-008")


def test_host_mode_with_metrics_url(exporter: tuple[FakeExporter, int], tmp_path: Path) -> None:
    _state, port = exporter
    cluster = host_cluster(f"http://127.0.0.1:{port}/metrics")
    v, plan, case_dir = act_and_judge("MET-001", fake_host(), cluster, tmp_path)
    assert v.status is Status.PASS, v.summary
    assert plan["target"] == {"url": f"http://127.0.0.1:{port}", "node": None, "scheduler_pod": None,
                              "fetched_from": "this machine", "latency": "wall clock of the request on this machine"}
    assert "HTTP_CODE=200\nCONTENT_TYPE=text/plain" in (case_dir / "metrics_health.txt").read_text()
    v, plan, _ = act_and_judge("MET-002", fake_host(), cluster, tmp_path)
    assert v.status is Status.PASS and plan["probe"] is None, v.summary  # idle page: HELP/TYPE suffice
    v, _, _ = act_and_judge("MET-007", fake_host(), cluster, tmp_path)
    assert v.status is Status.PASS, v.summary
    assert v.metrics["scrape_latency_p50_s"] is not None and v.metrics["metrics_stress_sample_count"] == 5


def test_local_cluster_task_skips_cases_that_need_what_it_lacks(tmp_path: Path) -> None:
    proc = run_tool([sys.executable, "-m", "invoke", "metrics", "--cluster", "local", "--case", "MET-001",
                     "--case", "MET-004", "--run-id", "t1", "--root", str(tmp_path)], cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    base = tmp_path / ".tmplog/t1/xpushare/local/metrics"
    got = {c: json.loads((base / c / "result.json").read_text()) for c in ("MET-001", "MET-004")}
    assert got["MET-001"]["status"] == "SKIP" and "metrics_url" in got["MET-001"]["summary"]
    assert got["MET-004"]["status"] == "SKIP" and "Kubernetes" in got["MET-004"]["summary"]


# -------------------------------------------------------------------------------------- k8s mode


def test_met001_k8s(k8s: tuple[FakeExporter, FakeBackend], tmp_path: Path) -> None:
    state, backend = k8s
    v, plan, _ = act_and_judge("MET-001", backend, k8s_cluster(), tmp_path)
    assert v.status is Status.PASS, v.summary
    assert plan["target"]["node"] == NODE and plan["target"]["scheduler_pod"] == "xpushare-scheduler-abc"
    state.health_code = 503
    v, _, _ = act_and_judge("MET-001", backend, k8s_cluster(), tmp_path / "b")
    assert v.status is Status.FAIL and "healthz_200" in v.summary


def test_met001_scheduler_down_and_missing(k8s: tuple[FakeExporter, FakeBackend], tmp_path: Path) -> None:
    _, backend = k8s
    kube_of(backend).port = 9  # nothing listens: curl's "no response"
    v, _, case_dir = act_and_judge("MET-001", backend, k8s_cluster(), tmp_path)
    assert v.status is Status.FAIL, v.summary
    assert "HTTP_CODE=000" in (case_dir / "metrics_health.txt").read_text()
    kube_of(backend).pods = cast(Any, [SchedPod("other", "node-b", "127.0.0.1")])
    with pytest.raises(Exception, match="no scheduler pod"):
        act_and_judge("MET-001", backend, k8s_cluster(), tmp_path / "b")


def test_met002_k8s_healthy_and_missing(k8s: tuple[FakeExporter, FakeBackend], tmp_path: Path) -> None:
    state, backend = k8s
    v, plan, _ = act_and_judge("MET-002", backend, k8s_cluster(), tmp_path)
    assert v.status is Status.PASS, v.summary
    assert plan["probe"] == "met-002-probe" and plan["node"] == NODE and plan["settle"]["settled"] is True
    assert backend.started[-1].workload == "w5_quota_probe"
    state.drop = ("client_info", "scheduler_messages_total")
    v, plan, _ = act_and_judge("MET-002", backend, k8s_cluster(), tmp_path / "b")
    assert v.status is Status.FAIL and plan["settle"]["settled"] is False
    assert set(v.metrics["missing_metrics"]) == {"xpushare_client_info", "xpushare_scheduler_messages_total"}


def test_probe_that_does_not_run_is_an_error(exporter: tuple[FakeExporter, int], tmp_path: Path) -> None:
    state, port = exporter
    backend = fake_k8s(state, port, phase="Failed")
    with pytest.raises(Exception, match="not Running"):
        act_and_judge("MET-002", backend, k8s_cluster(), tmp_path)


def test_probe_without_a_probe_line_is_an_error(k8s: tuple[FakeExporter, FakeBackend], tmp_path: Path) -> None:
    _, backend = k8s
    backend.log = "Traceback: import torch failed\n"
    with pytest.raises(Exception, match="printed no"):
        act_and_judge("MET-002", backend, k8s_cluster(), tmp_path, pod_timeout_s=1.5)


def test_probe_that_ends_before_its_first_line_is_an_error_at_once(k8s: tuple[FakeExporter, FakeBackend],
                                                                   tmp_path: Path) -> None:
    """Running at first, then Failed (an import error): reported as ended, without waiting out pod_timeout_s."""
    _, backend = k8s
    backend.log = "Traceback: import torch failed\n"
    phases = iter(["Running"])
    backend.records = lambda names, until: probe_records(names, next(phases, "Failed"))
    t0 = time.monotonic()
    with pytest.raises(Exception, match=r"ended \(Failed, exit 1\) before its first"):
        act_and_judge("MET-002", backend, k8s_cluster(), tmp_path, pod_timeout_s=60)
    assert time.monotonic() - t0 < 30


def test_met003_k8s(k8s: tuple[FakeExporter, FakeBackend], tmp_path: Path) -> None:
    state, backend = k8s
    v, plan, case_dir = act_and_judge("MET-003", backend, k8s_cluster(), tmp_path)
    assert v.status is Status.PASS, v.summary
    assert plan["mid_at"] > 0 and plan["sampler"]["node"] == NODE
    assert list((case_dir / "sampler").glob(f"{NODE}_*"))  # the node sampler ran on the node and came back
    params = params_for("MET-003", met003_require_nvml=True)  # a GPU cluster needs the NVML cross-check
    sampler_rows = (case_dir / "sampler" / f"{NODE}_procs.csv")
    if not (sampler_rows.exists() and sampler_rows.read_text().count("\n") > 1):
        assert lifecycle.judge_case(REGISTRY["MET-003"], case_dir, params).status is Status.ERROR
    state.gpu_used = 0.0
    v, _, _ = act_and_judge("MET-003", backend, k8s_cluster(), tmp_path / "b")
    assert v.status is Status.FAIL and "gpu_used_positive" in v.summary


def test_met003_nvml_cross_check_from_the_sampler(tmp_path: Path) -> None:
    """The judgment glue reads the sampler CSVs of the probe's node around mid_at."""
    (tmp_path / "sampler").mkdir()
    t = 1000.0
    (tmp_path / "metrics_mid.txt").write_text(page(pod="p", nvml=3.2 * GIB, gpu_used=3.5 * GIB))
    (tmp_path / "sampler" / f"{NODE}_procs.csv").write_text(
        f"timestamp,gpu_index,pid,used_bytes\n{t},0,2057141,{3.2 * GIB:.0f}\n")
    (tmp_path / "sampler" / f"{NODE}_gpu.csv").write_text(
        "timestamp,gpu_index,uuid,sm_util_pct,mem_used_bytes,mem_total_bytes\n"
        f"{t},0,{UUID},50,{3.5 * GIB:.0f},{16 * GIB}\n")
    plan = {"probe": "p", "namespace": "default", "node": NODE, "mid_at": t + 1, "prefix": "xpushare"}
    judge = REGISTRY["MET-003"].judge
    assert judge is not None
    v = judge(Evidence.load(tmp_path), params_for("MET-003", met003_require_nvml=True), plan)
    assert v.status is Status.PASS and "NVML" in v.summary, v.summary
    (tmp_path / "sampler" / f"{NODE}_procs.csv").write_text(
        f"timestamp,gpu_index,pid,used_bytes\n{t},0,2057141,{1 * GIB}\n")
    v = judge(Evidence.load(tmp_path), params_for("MET-003", met003_require_nvml=True), plan)
    assert v.status is Status.FAIL and "nvml_process_memory_matches" in v.summary


def counted_drops(case_dir: Path, *, logged: int, counted: int, messages: int | None = None) -> Verdict:
    """MET-004 judged again after the harvest: ``logged`` DROP_LOCKs (each with a throttle, a LOCK_RELEASED and
    a REQ_LOCK received) in scheduler.log, ``counted`` more DROP_LOCKs and ``messages`` (default ``logged``) more
    of each message type on the counters of ``metrics_end.txt`` than on ``metrics_mid.txt``."""
    cid = "0123456789abcdef"
    (case_dir / "scheduler.log").write_text(logged * (
        f"[XPUSHARE][INFO]: Throttling client {cid} (Used: 36/35 ms, weighted, wall=36, billed=36, concurrent=1)\n"
        f"[XPUSHARE][INFO]: Sent DROP_LOCK to client {cid}\n"
        f"[XPUSHARE][INFO]: Received LOCK_RELEASED from {cid}\n"
        f"[XPUSHARE][INFO]: Received REQ_LOCK from {cid}\n"), encoding="utf-8")
    end = case_dir / "metrics_end.txt"
    text = end.read_text(encoding="utf-8")
    drops = "xpushare_scheduler_drop_lock_total"
    text = re.sub(rf"(?m)^{drops} \d+$", f"{drops} {counted}", text)
    for typ in ("REQ_LOCK", "LOCK_RELEASED"):
        text = re.sub(rf'(?m)^xpushare_scheduler_messages_total{{type="{typ}"}} \d+$',
                      f'xpushare_scheduler_messages_total{{type="{typ}"}} {logged if messages is None else messages}',
                      text)
    end.write_text(text, encoding="utf-8")
    return lifecycle.judge_case(REGISTRY["MET-004"], case_dir, params_for("MET-004"))


def test_met004_k8s(k8s: tuple[FakeExporter, FakeBackend], tmp_path: Path) -> None:
    state, backend = k8s
    v, plan, case_dir = act_and_judge("MET-004", backend, k8s_cluster(), tmp_path, met004_counter_window_s=0)
    # no scheduler.log harvested here: the counter cannot be checked against the log, never a silent PASS
    assert v.status is Status.ERROR and v.summary.startswith("drop_lock_counted: counter cross-check not possible")
    assert (case_dir / "metrics_end.txt").is_file()
    v = counted_drops(case_dir, logged=3, counted=3)
    assert v.status is Status.PASS, v.summary
    assert (plan["core_limit"], plan["memory_limit"]) == (35, "4Gi")  # T4: 4Gi (seed 000 MET-004)
    spec = backend.started[-1]
    assert (spec.core_limit, spec.memory_limit) == (35, "4Gi")
    assert v.metrics["metric_memory_quota_bytes"] == 4 * GIB
    assert counted_drops(case_dir, logged=3, counted=0).summary.startswith("drop_lock_counted: ")  # not counted
    assert counted_drops(case_dir, logged=3, counted=9).status is Status.FAIL  # counts more than it sent
    stuck = counted_drops(case_dir, logged=3, counted=3, messages=0)  # messages received but never counted
    assert stuck.status is Status.FAIL and stuck.summary.startswith("messages_counted: "), stuck.summary
    state.memory_from_annotation = False  # the exporter shows 0 where 8Gi is configured
    v, _, _ = act_and_judge("MET-004", backend, k8s_cluster(), tmp_path / "b", met004_memory_limit="8Gi",
                            met004_counter_window_s=0)
    assert v.status is Status.FAIL and "memory_quota_matches" in v.summary


def test_met005_k8s(k8s: tuple[FakeExporter, FakeBackend], tmp_path: Path) -> None:
    state, backend = k8s
    v, plan, case_dir = act_and_judge("MET-005", backend, k8s_cluster(), tmp_path)
    assert v.status is Status.PASS, v.summary
    assert annotations_of(backend) == [{"core": "80", "memory": "4Gi"}]
    assert 0.3 <= v.metrics["dynamic_quota_metric_latency_sec"] < 2.0
    records, _ = jm.parse_series((case_dir / "metrics_series.jsonl").read_text())
    assert any(r.t_end < plan["changed_at"] for r in records)  # scrapes before the change
    assert records[-1].t > plan["changed_at"]  # and stopped soon after the change showed
    assert (case_dir / "metrics_before.txt").exists()
    state.apply_annotations = False  # the scheduler never picks the change up
    v, _, _ = act_and_judge("MET-005", backend, k8s_cluster(), tmp_path / "b")
    assert v.status is Status.FAIL and "change_observed" in v.summary
    state.apply_annotations, state.annotation_delay_s = True, 1.0
    v, _, _ = act_and_judge("MET-005", backend, k8s_cluster(), tmp_path / "c", met005_max_latency_s=0.5)
    assert v.status is Status.FAIL and "change_latency" in v.summary


def test_met005_without_a_change_is_an_error(tmp_path: Path) -> None:
    judge = REGISTRY["MET-005"].judge
    assert judge is not None
    assert judge(Evidence.load(tmp_path), {}, {"probe": "p"}).status is Status.ERROR


def test_met006_k8s_with_a_dmon_command(k8s: tuple[FakeExporter, FakeBackend], tmp_path: Path) -> None:
    state, backend = k8s
    v, plan, case_dir = act_and_judge("MET-006", backend, k8s_cluster(), tmp_path, met006_dmon_command=FAKE_DMON)
    assert v.status is Status.PASS, v.summary
    assert plan["dmon"]["source"] == "met006_dmon_command"
    assert (case_dir / f"remote_{NODE}_dmon.txt").read_text().startswith("# gpu")
    assert v.metrics["gpu_index"] == "0" and v.metrics["mean_abs_diff_pct"] == 0.0
    state.util = 0.05  # the metric stays flat while the GPU is busy
    v, _, _ = act_and_judge("MET-006", backend, k8s_cluster(), tmp_path / "b", met006_dmon_command=FAKE_DMON)
    assert v.status is Status.FAIL and "metric_util_rises" in v.summary and "dmon_follows" in v.summary


def test_met006_without_dmon_skips(k8s: tuple[FakeExporter, FakeBackend], tmp_path: Path) -> None:
    _, backend = k8s
    v, _plan, _ = act_and_judge("MET-006", backend, k8s_cluster(), tmp_path)
    assert v.status is Status.SKIP and "nvidia-smi" in v.summary


def test_met006_uses_the_backends_dmon_where_the_node_has_nvidia_smi(
        k8s: tuple[FakeExporter, FakeBackend], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, backend = k8s
    monkeypatch.setattr(met, "has_command", lambda host, cmd: cmd == "nvidia-smi")
    v, plan, case_dir = act_and_judge("MET-006", backend, k8s_cluster(), tmp_path, met006_dmon_command=FAKE_DMON)
    assert plan["dmon"]["source"] == "backend"
    assert not (case_dir / f"remote_{NODE}_dmon.txt").exists()  # the k8s backend's harvest brings it
    assert v.status is Status.ERROR and "no dmon capture" in v.summary


def test_met007_k8s(k8s: tuple[FakeExporter, FakeBackend], tmp_path: Path) -> None:
    state, backend = k8s
    v, _plan, _case_dir = act_and_judge("MET-007", backend, k8s_cluster(), tmp_path)
    assert v.status is Status.PASS, v.summary
    assert state.requests.count("/metrics") == 5 and state.requests[-1] == "/healthz"  # health after the stress
    assert v.metrics["scrape_latency_p99_s"] < 1.0
    state.metrics_code = 500
    v, _, _ = act_and_judge("MET-007", backend, k8s_cluster(), tmp_path / "b")
    assert v.status is Status.FAIL and "scrape_success" in v.summary


def test_met008_k8s(k8s: tuple[FakeExporter, FakeBackend], tmp_path: Path) -> None:
    state, backend = k8s
    state.gpu_used = 14 * GIB  # the probe fills the GPU: 14 / 16 > 0.8
    v, plan, _ = act_and_judge("MET-008", backend, k8s_cluster(), tmp_path)
    assert v.status is Status.PASS, v.summary
    spec = backend.started[-1]
    assert spec.oversub is True and spec.args[-2:] == ("--n", "64")
    state.gpu_used = 4 * GIB
    v, _, _ = act_and_judge("MET-008", backend, k8s_cluster(), tmp_path / "b")
    assert v.status is Status.FAIL and "alert_trips" in v.summary
    v, plan, _ = act_and_judge("MET-008", backend, k8s_cluster(), tmp_path / "c", met008_n=None)
    assert plan["met008"]["n"] == met008_size(0.85, 16 * GIB)  # sized from the inventory's 16 GiB


def test_rejudge_offline_with_other_thresholds(k8s: tuple[FakeExporter, FakeBackend], tmp_path: Path) -> None:
    state, backend = k8s
    state.gpu_used = 14 * GIB
    _, _, case_dir = act_and_judge("MET-008", backend, k8s_cluster(), tmp_path)
    params = params_for("MET-008", met008_alert_ratio=0.9)
    assert lifecycle.judge_case(REGISTRY["MET-008"], case_dir, params).status is Status.FAIL
