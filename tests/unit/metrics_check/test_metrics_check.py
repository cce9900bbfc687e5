"""The metrics checklist (xpushare.metrics_check) on the captured samples and on broken variants.

Real samples: tests/fixtures/samples/metrics_idle.txt (GET /metrics, no client), healthz.txt and
notfound.txt (``curl -i`` of /healthz and of an unknown path). The /metrics Content-Type is the one
docs/sut/metrics.md §http documents (the sample holds the body only). Loaded pages are built from the idle
sample by :func:`with_rows` with the exporter's label sets (docs/sut/metrics.md §catalogue).
"""

from __future__ import annotations

import http.server
import io
import json
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.paths import FIXTURES
from xpushare.evidence import http_fetch, scrape_capture
from xpushare.evidence.client_match import ClientMatch, client_match
from xpushare.inventory.schema import ClusterSpec, HostSpec, SchedulerSpec
from xpushare.metrics_check import checklist, endpoint, probes, task
from xpushare.model.errors import UsageError, XpushareError
from xpushare.model.exit_status import ExitStatus
from xpushare.model.verdict import Status
from xpushare.parsers.metrics import parse_exposition
from xpushare.transport.base import CommandResult

SAMPLES = FIXTURES / "samples"
IDLE = (SAMPLES / "metrics_idle.txt").read_text(encoding="utf-8")
UUID = "GPU-ae708708-d6f0-f18f-0d42-ab51554bfb37"
METRICS_CT = "text/plain; version=0.0.4; charset=utf-8"


def curl_i(name: str) -> tuple[int, str | None, str]:
    """(status, Content-Type, body) of a ``curl -i`` capture."""
    head, _, body = (SAMPLES / name).read_text(encoding="utf-8").replace("\r\n", "\n").partition("\n\n")
    lines = head.splitlines()
    status = int(lines[0].split()[1])
    ctype = next((ln.split(":", 1)[1].strip() for ln in lines[1:] if ln.lower().startswith("content-type:")), None)
    return status, ctype, body


Answer = tuple[int, str | None, str]


def fake_fetch(metrics: str = IDLE, *, ctype: str | None = METRICS_CT, healthz: Answer | None = None,
               notfound: Answer | None = None) -> Callable[[str], Answer]:
    def fetch(url: str) -> Answer:
        if url.endswith("/healthz"):
            return healthz or curl_i("healthz.txt")
        if url.endswith("/metrics"):
            return 200, ctype, metrics
        return notfound or curl_i("notfound.txt")

    return fetch


def with_rows(text: str, rows: Mapping[str, Sequence[str]], prefix: str = "xpushare") -> str:
    """``text`` with the sample lines of the given families (suffix -> ``'{labels} value'`` strings) replaced."""
    out: list[str] = []
    current: str | None = None
    for line in text.splitlines():
        if line.startswith("#"):
            out.append(line)
            parts = line.split()
            if parts[1] == "TYPE":
                current = parts[2].removeprefix(prefix + "_")
                if current in rows:
                    out.extend(f"{parts[2]}{r}" for r in rows[current])
            continue
        if current in rows:
            continue
        out.append(line)
    return "\n".join(out) + "\n"


def client_rows(clients: Sequence[Mapping[str, object]], *, util: float = 0.5, procs: int | None = None,
                register: int | None = None) -> dict[str, list[str]]:
    """Rows of a loaded exporter: ``clients`` items have pod, cid, pid, managed, nvml, core (and gpu)."""
    def base(c: Mapping[str, object]) -> str:
        return f'{{namespace="default",pod="{c["pod"]}",client_id="{c["cid"]}",gpu_uuid="{c.get("gpu", UUID)}"}}'

    g = f'{{gpu_uuid="{UUID}",gpu_index="0"}}'
    return {
        "client_info": [f'{base(c)[:-1]},gpu_index="-1",host_pid="{c["pid"]}"}} 1' for c in clients],
        "client_managed_allocated_bytes": [f"{base(c)} {c['managed']}" for c in clients],
        "client_nvml_used_bytes": [f'{base(c)[:-1]},host_pid="{c["pid"]}"}} {c["nvml"]}' for c in clients],
        "client_core_quota_config_percent": [f"{base(c)} {c['core']}" for c in clients],
        "gpu_utilization_ratio": [f"{g} {util:.4f}"],
        "gpu_process_count": [f"{g} {len(clients) if procs is None else procs}"],
        "scheduler_running_clients": [f"{g} 1"],
        "scheduler_messages_total": [f'{{type="REGISTER"}} {len(clients) if register is None else register}',
                                     '{type="REQ_LOCK"} 7'],
    }


def probe(pod: str, cid: str, pid: int = 2057141, managed: int = 3 << 30, nvml: int = 3 << 30,
          core: int = 50) -> dict[str, object]:
    return {"pod": pod, "cid": cid, "pid": pid, "managed": managed, "nvml": nvml, "core": core}


TWO = [probe("probe-1", "a309de43403205dc"), probe("probe-2", "b409de43403205dd", pid=2057240)]


def loaded(clients: Sequence[Mapping[str, object]] = TWO, **kw: object) -> str:
    return with_rows(IDLE, client_rows(clients, **kw))  # type: ignore[arg-type]


def statuses(lines: Sequence[checklist.CheckLine]) -> dict[str, Status]:
    return {ln.item: ln.status for ln in lines}


def failed(lines: Sequence[checklist.CheckLine]) -> list[str]:
    return [ln.item for ln in lines if not ln.ok]


def idle(metrics: str = IDLE, **kw: object) -> list[checklist.CheckLine]:
    ctype = kw.pop("ctype", METRICS_CT)
    ev = endpoint.fetch_endpoint("http://127.0.0.1:9402/metrics", fake_fetch(metrics, ctype=ctype))  # type: ignore[arg-type]
    return checklist.idle_checks(ev, **kw)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------ real samples


def test_real_idle_sample_passes_every_line() -> None:
    lines = idle()
    assert failed(lines) == []
    assert len(lines) == 15
    by = {ln.item: ln for ln in lines}
    assert by["at least 25 families"].observed == "36 HELP, 36 TYPE"
    assert by["/healthz answers 200 OK"].observed == "200, body 'OK'"
    assert by["GPU memory totals"].observed == "0: 143771 MiB"  # = nvidia-smi's 143771 MiB
    assert "NVIDIA H200" in by["gpu_info with UUID and name"].observed
    assert by["idle: running clients 0"].observed == "0 (0 contexts)"  # no context was ever created


def test_run_prints_table_and_exits_zero() -> None:
    buf = io.StringIO()
    assert task.run_metrics_check("http://127.0.0.1:9402", fetch=fake_fetch(), out=buf) is ExitStatus.OK
    text = buf.getvalue()
    assert text.splitlines()[0] == "metrics-check http://127.0.0.1:9402"
    assert "check" in text and "expected" in text and "observed" in text and "result" in text
    assert "15/15 PASS" in text


def test_either_naming_generation() -> None:
    nv = IDLE.replace("xpushare_", "nvshare_")
    assert failed(idle(nv)) == []
    assert "every non-comment line starts with nvshare_" in {ln.expected for ln in idle(nv)}
    assert failed(idle(nv, prefix="nvshare")) == []
    # the cluster says nvshare but the exporter serves xpushare names
    wrong = failed(idle(prefix="nvshare"))
    assert "samples carry the SUT prefix" in wrong and "nvml_up" in wrong and "required families exported" in wrong


# ----------------------------------------------------------------------------------- broken pages


def test_missing_help_fails_that_line_only() -> None:
    text = IDLE.replace("# HELP xpushare_gpu_process_count Number of compute processes on GPU\n", "")
    lines = idle(text)
    assert failed(lines) == ["every family has # HELP and # TYPE"]
    line = next(ln for ln in lines if ln.item == "every family has # HELP and # TYPE")
    assert "no HELP: xpushare_gpu_process_count" in line.observed
    assert next(ln for ln in lines if ln.item == "at least 25 families").observed == "35 HELP, 36 TYPE"


def test_wrong_content_type() -> None:
    assert failed(idle(ctype="text/plain")) == ["/metrics Content-Type"]
    assert failed(idle(ctype="application/openmetrics-text; version=1.0.0")) == ["/metrics Content-Type"]
    assert failed(idle(ctype=None)) == ["/metrics Content-Type"]
    assert failed(idle(ctype="text/plain;version=0.0.4")) == []


def test_garbage_line_names_the_offending_line() -> None:
    lines_in = IDLE.splitlines()
    lines_in.insert(20, "this is { not a metric")
    lines = idle("\n".join(lines_in) + "\n")
    by = {ln.item: ln for ln in lines}
    assert by["exposition parses"].status is Status.FAIL
    assert "line 21" in by["exposition parses"].observed
    assert "this is { not a metric" in by["exposition parses"].observed
    assert by["samples carry the SUT prefix"].status is Status.FAIL  # the garbage is not an xpushare_ sample
    assert "/metrics answers 200" not in failed(lines)


def test_foreign_sample_line_fails_the_prefix_line() -> None:
    text = IDLE + "# HELP process_cpu_seconds_total CPU\n# TYPE process_cpu_seconds_total counter\n" \
                  "process_cpu_seconds_total 12.5\n"
    lines = idle(text)
    assert failed(lines) == ["samples carry the SUT prefix"]
    assert "process_cpu_seconds_total 12.5" in next(ln.observed for ln in lines if not ln.ok)


def test_nvml_down() -> None:
    text = IDLE.replace("xpushare_nvml_up 1", "xpushare_nvml_up 0")
    assert failed(idle(text)) == ["nvml_up"]
    # with no sampler backend the GPU block is only sampler_up 0 / nvml_up 0 (docs/sut/metrics.md §no-nvml)
    gpu_families = ("gpu_sampler_backend_info", "gpu_info", "gpu_memory_total_bytes", "gpu_memory_used_bytes",
                    "gpu_memory_free_bytes", "gpu_utilization_ratio", "gpu_memory_utilization_ratio",
                    "gpu_process_count")
    blocks = IDLE.split("# HELP ")
    kept = [b for b in blocks if not any(b.startswith(f"xpushare_{f} ") for f in gpu_families)]
    no_sampler = "# HELP ".join(kept).replace("xpushare_nvml_up 1", "xpushare_nvml_up 0").replace(
        "xpushare_gpu_sampler_up 1", "xpushare_gpu_sampler_up 0")
    lines = idle(no_sampler)
    assert failed(lines) == ["nvml_up", "gpu_info with UUID and name", "GPU memory totals"]
    assert next(ln.observed for ln in lines if ln.item == "at least 25 families") == "28 HELP, 28 TYPE"


def test_counter_declared_as_gauge() -> None:
    text = IDLE.replace("# TYPE xpushare_scheduler_drop_lock_total counter",
                        "# TYPE xpushare_scheduler_drop_lock_total gauge")
    lines = idle(text)
    assert failed(lines) == ["counters declared counter"]
    assert "drop_lock_total=gauge" in next(ln.observed for ln in lines if not ln.ok)


def test_too_few_families_and_min_families_parameter() -> None:
    assert failed(idle(min_families=37)) == ["at least 37 families"]
    assert failed(idle(min_families=36)) == []


def test_health_and_routing_failures() -> None:
    ev = endpoint.fetch_endpoint("http://127.0.0.1:9402", fake_fetch(healthz=(200, "text/plain", "NOT OK\n"),
                                                               notfound=(200, METRICS_CT, IDLE)))
    assert failed(checklist.idle_checks(ev)) == ["/healthz answers 200 OK",
                                                 f"unknown path {endpoint.DEFAULT_NOTFOUND_PATH} is 404"]


def test_idle_lines_fail_with_clients_and_can_be_left_out() -> None:
    text = loaded()
    assert failed(idle(text)) == ["idle: no client_info series", "idle: running clients 0"]
    assert failed(idle(text, expect_idle=False)) == []
    assert not any(ln.item.startswith("idle:") for ln in idle(text, expect_idle=False))


def test_unreachable_endpoint_exit_3_and_partial_failure_exit_1() -> None:
    def refused(url: str) -> Answer:
        raise http_fetch.FetchError(f"GET {url}: [Errno 111] Connection refused")

    buf = io.StringIO()
    assert task.run_metrics_check("http://127.0.0.1:1", fetch=refused, out=buf) is ExitStatus.UNREACHABLE
    assert "UNREACHABLE: no response from http://127.0.0.1:1" in buf.getvalue()
    ev = endpoint.fetch_endpoint("http://127.0.0.1:1", refused)
    assert ev.unreachable and all(not ln.ok for ln in checklist.idle_checks(ev))

    def metrics_refused(url: str) -> Answer:
        if url.endswith("/metrics"):
            raise http_fetch.FetchError("timed out")
        return fake_fetch()(url)

    buf = io.StringIO()
    assert task.run_metrics_check("http://127.0.0.1:9402", fetch=metrics_refused, out=buf) is ExitStatus.FAILED
    assert "no response (timed out)" in buf.getvalue()


def test_exit_status_and_table() -> None:
    ok = checklist.CheckLine("a", "1", "1", Status.PASS)
    bad = checklist.CheckLine("b", "1", "0", Status.FAIL)
    assert checklist.exit_status([ok]) is ExitStatus.OK
    assert checklist.exit_status([ok, bad]) is ExitStatus.FAILED
    assert checklist.exit_status([ok], unreachable=True) is ExitStatus.UNREACHABLE
    table = checklist.render_table([ok, bad]).splitlines()
    assert table[0].split() == ["check", "expected", "observed", "result"]
    assert table[-1].split() == ["b", "1", "0", "FAIL"]


# ------------------------------------------------------------------------------------ under load


def load(text: str, n: int = 2, pods: Sequence[str] | None = ("probe-1", "probe-2"),
         **kw: object) -> list[checklist.CheckLine]:
    """Kubernetes-mode load checks: the probes matched by pod name (``pods``; None: every client counts)."""
    matches = None if pods is None else [client_match("k8s", p) for p in pods]
    return checklist.load_checks(parse_exposition(text), expected_clients=n, matches=matches, **kw)  # type: ignore[arg-type]


def test_load_healthy_two_clients() -> None:
    lines = load(loaded(), core_limits={"probe-1": 50, "probe-2": 50})
    assert failed(lines) == []
    assert [ln.item for ln in lines] == [
        "client_info per client", "client host_pid is a real host pid", "managed allocation",
        "NVML per-process memory", "GPU utilization under load", "REGISTER messages counted",
        "core quota per client", "GPU process count"]
    assert failed(load(loaded(), pods=None)) == []  # every client counts: exactly 2
    assert failed(load(loaded(TWO[:1]), n=1, pods=["probe-1"])) == []


@pytest.mark.parametrize(("page", "expected_failure"), [
    (loaded([probe("probe-1", "a309de43403205dc", pid=1), TWO[1]]), "client host_pid is a real host pid"),
    (loaded([probe("probe-1", "a309de43403205dc", managed=0), TWO[1]]), "managed allocation"),
    (loaded([probe("probe-1", "a309de43403205dc", nvml=0), TWO[1]]), "NVML per-process memory"),
    (loaded(util=0.0), "GPU utilization under load"),
    (loaded(register=1), "REGISTER messages counted"),
    (loaded([probe("probe-1", "a309de43403205dc", core=100), TWO[1]]), "core quota per client"),
    (loaded(procs=1), "GPU process count"),
    (loaded([TWO[0], probe("other", "c509de43403205de")]), "client_info per client"),
])
def test_load_broken(page: str, expected_failure: str) -> None:
    lines = load(page, core_limits={"probe-1": 50, "probe-2": 50, "other": 50})
    assert expected_failure in failed(lines)
    if expected_failure != "client_info per client":
        assert failed(lines) == [expected_failure]


def test_load_without_clients_and_unparsable() -> None:
    assert failed(load(IDLE)) == ["client_info per client"]
    lines = load(loaded() + "garbage {\n")
    assert failed(lines)[0] == "exposition parses" and "garbage {" in lines[0].observed


class FakeLoad:
    """A ProbeLoad over canned pages: the scrape returns pages[started][poll]."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.core_limit: int | None = 50
        self.started = 0
        self.stopped = 0
        self.fail_at = fail_at

    def start(self, index: int) -> str:
        if index == self.fail_at:
            raise XpushareError("pods will not become running: metrics-check-2: ErrImagePull")
        self.started = index
        return f"probe-{index}"

    def matches(self, names: Sequence[str]) -> list[ClientMatch]:
        return [client_match("k8s", name) for name in names]

    def stop(self) -> None:
        self.stopped += 1


def test_run_load_checks_polls_until_the_clients_settle() -> None:
    fake = FakeLoad()
    settling = loaded([probe("probe-1", "a309de43403205dc", managed=0)], register=1)
    pages = {1: [settling, settling, loaded(TWO[:1])], 2: [loaded(TWO)]}
    polls: dict[int, int] = {1: 0, 2: 0}

    def scrape() -> endpoint.HttpResponse:
        i = min(polls[fake.started], len(pages[fake.started]) - 1)
        polls[fake.started] += 1
        return endpoint.HttpResponse("u", 200, METRICS_CT, pages[fake.started][i], None, 0.01)

    lines = probes.run_load_checks(scrape, fake, sleep=lambda s: None)
    assert failed(lines) == []
    assert polls == {1: 3, 2: 1}
    assert [ln.item for ln in lines][:1] == ["load 1: client_info per client"]
    assert "load 2: GPU process count" in [ln.item for ln in lines]
    assert fake.stopped == 1


def test_run_load_checks_gives_up_after_settle_time_and_always_stops() -> None:
    fake = FakeLoad()
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    never = loaded([probe("probe-1", "a309de43403205dc", nvml=0)], register=1)
    lines = probes.run_load_checks(lambda: endpoint.HttpResponse("u", 200, METRICS_CT, never, None, 0.0), fake,
                                   steps=(1,), settle_s=5, poll_s=1, clock=lambda: now[0], sleep=sleep)
    assert failed(lines) == ["load 1: NVML per-process memory"]
    assert now[0] == 5 and fake.stopped == 1

    fake = FakeLoad(fail_at=2)
    lines = probes.run_load_checks(lambda: endpoint.HttpResponse("u", 200, METRICS_CT, loaded(TWO[:1]), None, 0.0),
                                   fake, sleep=lambda s: None)
    assert failed(lines) == ["load 2: probe pods running"]
    assert "ErrImagePull" in lines[-1].observed and fake.stopped == 1

    fake = FakeLoad()

    def boom() -> endpoint.HttpResponse:
        raise RuntimeError("scrape crashed")

    with pytest.raises(RuntimeError):
        probes.run_load_checks(boom, fake)
    assert fake.stopped == 1


def test_failed_probe_removal_is_a_fail_line() -> None:
    class BadStop(FakeLoad):
        def stop(self) -> None:
            raise XpushareError("kubectl delete failed: connection refused")

    lines = probes.run_load_checks(lambda: endpoint.HttpResponse("u", 200, METRICS_CT, loaded(TWO[:1]), None, 0.0),
                                   BadStop(), steps=(1,), sleep=lambda s: None)
    assert failed(lines) == ["probe pods removed"]


def test_backend_probe_load_drives_a_backend(tmp_path: Path) -> None:
    from tests.fakes.backend import FakeBackend
    from xpushare.model.workload import WorkloadRecord

    backend = FakeBackend(mode="k8s",
                          records=lambda names, until: [WorkloadRecord(name=n, phase="Running") for n in names])
    load = probes.BackendProbeLoad(backend, tmp_path, core_limit=50, node="c1-gpu1")
    assert [load.start(1), load.start(2)] == ["metrics-check-1", "metrics-check-2"]
    assert load.matches(["metrics-check-1"]) == [client_match("k8s", "metrics-check-1")]  # k8s: by pod name
    load.stop()
    assert [c for c in backend.calls if c not in ("start_pods", "wait_running")] == ["prepare_run", "begin_case",
                                                                                      "cleanup"]
    assert backend.case is not None and backend.case.case_id == "metrics-check"
    assert backend.started[0].workload == "w5_quota_probe" and backend.started[0].core_limit == 50
    assert backend.started[1].node == "c1-gpu1" and "--duration-s" in backend.started[1].args


def test_run_metrics_check_with_load() -> None:
    state = {"page": IDLE}

    class Load(FakeLoad):
        def start(self, index: int) -> str:
            state["page"] = loaded(TWO[:index])
            return super().start(index)

    def fetch(url: str) -> Answer:
        return (200, METRICS_CT, state["page"]) if url.endswith("/metrics") else fake_fetch()(url)

    buf = io.StringIO()
    assert task.run_metrics_check("http://127.0.0.1:9402", fetch=fetch, load=Load(), out=buf) is ExitStatus.OK
    # --url reads no scheduler log: the DROP_LOCK line is SKIP (judged nothing), which fails nothing
    assert "31/32 PASS, 1 SKIP" in buf.getvalue()
    assert "DROP_LOCK counted under throttling" in buf.getvalue()


# --------------------------------------------------------------------------------------- fetching


@pytest.fixture
def http_server() -> Iterator[str]:
    """A tiny exporter on 127.0.0.1 (random port) that serves the idle sample like the SUT
    (docs/sut/metrics.md §http)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            if self.path.startswith("/metrics"):
                code, ctype, body = 200, METRICS_CT, IDLE
            elif self.path.startswith("/healthz"):
                code, ctype, body = 200, "text/plain", "OK\n"
            else:
                code, ctype, body = 404, "text/plain", "Not Found\n"
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_urllib_fetcher_and_task_with_url(http_server: str) -> None:
    fetch = http_fetch.urllib_fetcher(5)
    assert fetch(http_server + "/metrics")[:2] == (200, METRICS_CT)
    assert fetch(http_server + "/nope") == (404, "text/plain", "Not Found\n")
    buf = io.StringIO()
    assert task.metrics_check_task(http_server + "/metrics", None, load=False, out=buf) is ExitStatus.OK
    assert "15/15 PASS" in buf.getvalue()
    assert max(len(line) for line in buf.getvalue().splitlines()) <= 150  # long cells wrap
    buf = io.StringIO()
    assert task.metrics_check_task(http_server + "/metrics", None, out=buf, fmt="json") is ExitStatus.OK
    record = json.loads(buf.getvalue())  # only the record: notes would go to stderr
    assert record["status"] == "PASS" and record["passed"] == 15 and record["failed"] == 0
    assert record["run_id"] is None and record["saved_to"] is None  # no root: nothing saved
    (one,) = record["schedulers"]
    assert one["status"] == "PASS" and one["url"] == http_server and one["fetched_from"] == "this machine"
    assert one["checks"][0].keys() == {"check", "expected", "observed", "result"}


def test_urllib_fetcher_refused_raises_fetch_error() -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(http_fetch.FetchError, match="refused"):
        http_fetch.urllib_fetcher(2)(f"http://127.0.0.1:{port}/metrics")
    buf = io.StringIO()
    assert task.metrics_check_task(f"http://127.0.0.1:{port}", None, load=False, out=buf) is ExitStatus.UNREACHABLE


class CannedHost:
    """A transport host that answers every command with canned stdout; records the argv."""

    name = "gpu1"

    def __init__(self, stdout: str, stderr: str = "", code: int = 0) -> None:
        self.stdout, self.stderr, self.code = stdout, stderr, code
        self.argv: list[str] = []

    def run(self, argv: Sequence[str], **kw: object) -> CommandResult:
        self.argv = list(argv)
        return CommandResult(self.name, tuple(argv), self.stdout, self.stderr, self.code, 0.01)


def test_curl_fetcher_parses_the_trailer() -> None:
    host = CannedHost("OK\n\nHTTP_CODE=200\nCONTENT_TYPE=text/plain\n")
    fetch = scrape_capture.curl_fetcher(host, timeout_s=3)  # type: ignore[arg-type]
    assert fetch("http://127.0.0.5:9402/healthz") == (200, "text/plain", "OK\n")
    assert host.argv[0] == "curl" and host.argv[-1] == "http://127.0.0.5:9402/healthz" and "-I" not in host.argv
    down = CannedHost("\nHTTP_CODE=000\nCONTENT_TYPE=\n", "curl: (7) Failed to connect to 127.0.0.5 port 9402", 7)
    with pytest.raises(http_fetch.FetchError, match="Failed to connect"):
        scrape_capture.curl_fetcher(down)("http://127.0.0.5:9402/metrics")  # type: ignore[arg-type]
    with pytest.raises(http_fetch.FetchError, match="exit 127"):
        scrape_capture.curl_fetcher(CannedHost("", "", 127))("http://127.0.0.5:9402/metrics")  # type: ignore[arg-type]


def test_scrape_series_fixed_rate() -> None:
    now = [1000.0]
    calls: list[float] = []

    def fetch(url: str) -> Answer:
        calls.append(now[0])
        now[0] += 0.25  # each scrape takes 250 ms
        if len(calls) == 3:
            raise http_fetch.FetchError("timed out")
        return 200, METRICS_CT, "x"

    def sleep(s: float) -> None:
        now[0] += s

    recs = endpoint.scrape_series("u", fetch, interval_s=2, duration_s=10, clock=lambda: now[0], sleep=sleep)
    assert [r.t for r in recs] == [1000.0, 1002.0, 1004.0, 1006.0, 1008.0, 1010.0]
    assert [r.status for r in recs] == [200, 200, None, 200, 200, 200]
    assert recs[2].error == "timed out" and recs[0].latency_s == pytest.approx(0.25)


def test_task_usage_errors_and_host_mode(http_server: str) -> None:
    with pytest.raises(UsageError):
        task.metrics_check_task(None, None, load=False)
    with pytest.raises(UsageError, match="--load needs --cluster"):
        task.metrics_check_task(http_server, None, load=True)
    local = (HostSpec("localhost", ("gpu", "master"), local=True),)
    no_url = ClusterSpec("l", "host", "xpushare", "cuda", None, None, local)
    with pytest.raises(UsageError, match="metrics_url"):
        task.metrics_check_task(None, no_url, load=False)
    spec = ClusterSpec("l", "host", "xpushare", "cuda", None, None, local,
                       scheduler=SchedulerSpec(metrics_url=http_server + "/metrics"))
    buf = io.StringIO()
    assert task.metrics_check_task(None, spec, load=True, out=buf) is ExitStatus.OK  # no sut_lib: load skipped
    assert "load part skipped" in buf.getvalue() and "fetching from this machine" in buf.getvalue()
    nv = ClusterSpec("l", "host", "nvshare", "cuda", None, None, local,
                     scheduler=SchedulerSpec(metrics_url=http_server))
    buf = io.StringIO()
    assert task.metrics_check_task(None, nv, load=False, out=buf, fmt="json") is ExitStatus.FAILED  # xpushare_ names
    failed = [c["expected"] for c in json.loads(buf.getvalue())["schedulers"][0]["checks"] if c["result"] == "FAIL"]
    assert any("every non-comment line starts with nvshare_" in text for text in failed), failed


def test_kube_probe_manifest() -> None:
    import yaml

    from xpushare.inventory.sut import sut_names

    p = probes.KubeProbeLoad(None, sut_names("nvshare"), node="c1-gpu1", run_id="abcd")  # type: ignore[arg-type]
    doc = yaml.safe_load(p.manifest(2))
    assert doc["metadata"]["name"] == "metrics-check-abcd-2"
    assert doc["metadata"]["labels"] == {probes.RUN_LABEL: "abcd", "probe": "2"}
    assert doc["metadata"]["annotations"] == {"nvshare.com/gpu-core-limit": "50"}
    c = doc["spec"]["containers"][0]
    assert c["resources"]["limits"] == {"nvshare.com/gpu": 1}
    assert c["command"][:2] == ["python", "workloads/w5_quota_probe.py"]
    assert doc["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "c1-gpu1"}
    assert doc["spec"]["restartPolicy"] == "Never"


# ------------------------------------------------------------------------------------ fuzzing


def _mutations() -> st.SearchStrategy[str]:
    lines = IDLE.splitlines()
    junk = st.sampled_from(["", "#", "# HELP", "# TYPE x", "{", "}", "xpushare_x{a=\"b\"} NaN", "xpushare_y 1e999",
                            "xpushare_gpu_info{gpu_uuid=\"\",gpu_name=\"\"} 1", "nvshare_nvml_up 1", "\x00", "a b c",
                            'xpushare_client_info{pod="p",client_id="c",host_pid="x"} 1', "xpushare_nvml_up -1"])
    return st.builds(
        lambda drop, ins, at: "\n".join(
            [ln for i, ln in enumerate(lines) if i not in drop][:at] + ins + lines[at:]) + "\n",
        st.sets(st.integers(0, len(lines) - 1), max_size=8),
        st.lists(st.one_of(junk, st.text(max_size=40)), max_size=4),
        st.integers(0, len(lines)))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.one_of(st.text(max_size=300), _mutations()), ctype=st.one_of(st.none(), st.text(max_size=40)))
@example(text="", ctype="\n")  # a lone newline as the Content-Type once broke the table's wrapping
def test_fuzz_checklist_never_crashes(text: str, ctype: str | None) -> None:
    lines = idle(text, ctype=ctype)
    assert all(ln.status in (Status.PASS, Status.FAIL) for ln in lines)
    assert checklist.render_table(lines)
    exp = parse_exposition(text)
    if not exp.ok:
        assert next(ln for ln in lines if ln.item == "exposition parses").status is Status.FAIL
    for ln in load(text, n=1, pods=None):
        assert ln.status in (Status.PASS, Status.FAIL)
