"""``invoke metrics-check``: the seed 002 checklist of the scheduler's ``/metrics`` endpoint as PASS/FAIL lines.

Three layers, kept apart:

1. **Fetching** (:func:`fetch_endpoint`): ``GET /healthz``, ``GET /metrics`` and ``GET /notexist`` through
   an injectable ``fetch(url) -> (status_code, content_type, body)``; :func:`urllib_fetcher` from this
   machine (``--url``, the ``local`` cluster), :func:`curl_fetcher` on a GPU node through the transport
   (a Kubernetes cluster: the scheduler pod IP is only reachable from the nodes). ``fetch`` raises
   :class:`FetchError` when no HTTP response came back (refused, timed out).
2. **Judging** (pure): :func:`idle_checks` on an :class:`EndpointEvidence`, :func:`load_checks` on an
   :class:`~xpushare.collect.metrics.Exposition` with probe clients registered; each returns
   :class:`CheckLine` rows ``(item, expected, observed, status)`` with status PASS or FAIL.
3. **Under load** (:func:`run_load_checks`): start probe workloads through a :class:`ProbeLoad` (one, then
   two), poll ``/metrics`` until the load lines pass or the settle time runs out, stop the probes.
   :class:`KubeProbeLoad` runs probe pods with kubectl; :class:`BackendProbeLoad` runs them through any
   :class:`~xpushare.backends.base.Backend` (host mode). The probes' clients are found by the key
   :func:`xpushare.evidence.client_match.client_match` picks for the mode: the ``pod`` label in Kubernetes, the
   ``host_pid`` (and ``client_id``) of the probe process in host mode, where every client's pod and
   namespace are ``none``; the ``client_info per client`` line says which key matched.

:func:`run_metrics_check` prints the table and returns the exit status (0 all PASS, 1 any FAIL, 3 the
endpoint did not answer at all); :func:`metrics_check_task` is the task body behind
``invoke metrics-check --url URL`` / ``--cluster C``. Line by line: ``docs/metrics-check.md``.

Sources: seed 002 (the checklist), sut-interfaces.md §6.1 (HTTP: routes, content type, HEAD is 404),
§6.2 (36 families with a sampler, 28 without; HELP/TYPE always printed), §6.3 (catalogue, label sets,
counters), §6.6 (expected samples), §0 (``nvshare_``/``xpushare_`` prefixes).
"""

from __future__ import annotations

import math
import secrets
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.client import HTTPException
from pathlib import Path
from typing import Any, NamedTuple, Protocol, TextIO

from tabulate import tabulate

from xpushare.backends.base import Backend
from xpushare.collect.metrics import Exposition, Sample, parse_curl_output, parse_exposition, scrape_command
from xpushare.evidence.client_match import (
    KEY_HOST_PID,
    KEY_POD,
    ClientMatch,
    client_match,
    live_matches,
    matched_clients,
)
from xpushare.inventory.schema import ClusterSpec, HostSpec
from xpushare.inventory.sut import SutNames, sut_names
from xpushare.judge.metrics_checks import gpu_rows_for_key
from xpushare.judge.metrics_evidence import ScrapeRecord, load_required_metrics
from xpushare.model.errors import HostUnreachable, TransportError, UsageError, XpushareError
from xpushare.model.exit_status import ExitStatus
from xpushare.model.verdict import Status
from xpushare.transport.base import Host
from xpushare.transport.hosts import connect
from xpushare.transport.kube_objects import Pod
from xpushare.transport.kubectl import Kubectl
from xpushare.transport.manifest_yaml import dump_manifests

__all__ = [
    "DEFAULT_NOTFOUND_PATH",
    "DEFAULT_PROBE_IMAGE",
    "PROBE_COMMAND",
    "RUN_LABEL",
    "BackendProbeLoad",
    "CheckLine",
    "EndpointEvidence",
    "FetchError",
    "HttpResponse",
    "KubeProbeLoad",
    "ProbeLoad",
    "base_url_of",
    "curl_fetcher",
    "exit_status",
    "exposition_checks",
    "fetch_endpoint",
    "idle_checks",
    "load_checks",
    "metrics_check_task",
    "metrics_scraper",
    "render_table",
    "run_load_checks",
    "run_metrics_check",
    "scrape_series",
    "urllib_fetcher",
]

#: The unknown path of seed 002 §6 (any path not starting with /metrics or /healthz is 404, §6.1).
DEFAULT_NOTFOUND_PATH = "/notexist"
#: The counters seed 002 §5 wants declared ``counter`` (suffixes).
COUNTERS = ("scheduler_messages_total", "scheduler_drop_lock_total", "scheduler_client_disconnect_total")
#: Content type of ``/metrics`` (sut-interfaces.md §6.1): media type and the version parameter.
CONTENT_TYPE = "text/plain; version=0.0.4"

FetchResult = tuple[int, str | None, str]
"""``(status_code, content_type, body)`` of one HTTP GET (content type ``None`` without the header)."""
Fetch = Callable[[str], FetchResult]


class FetchError(XpushareError):
    """No HTTP response came back (connection refused, timed out, DNS, reset before the headers)."""


# ------------------------------------------------------------------------------------- fetching


def urllib_fetcher(timeout_s: float = 10.0) -> Fetch:
    """A ``fetch`` that GETs from this machine with the standard library (no proxy; ``timeout_s`` s).

    HTTP errors (404 ...) are answers, returned as results; only a missing answer raises
    :class:`FetchError`.
    """
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def fetch(url: str) -> FetchResult:
        try:
            with opener.open(urllib.request.Request(url, method="GET"), timeout=timeout_s) as resp:
                return resp.status, resp.headers.get("Content-Type"), resp.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as exc:
            body = exc.read().decode("utf-8", "replace") if exc.fp is not None else ""
            return exc.code, exc.headers.get("Content-Type") if exc.headers else None, body
        except (urllib.error.URLError, OSError, HTTPException, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise FetchError(f"GET {url}: {reason}") from None

    return fetch


def curl_fetcher(host: Host, *, timeout_s: float = 10.0, curl: str = "curl") -> Fetch:
    """A ``fetch`` that runs ``curl`` on ``host`` (a GPU node) through the transport.

    Uses :func:`xpushare.collect.metrics.scrape_command` (a GET whose ``-w`` trailer carries the HTTP
    status and the Content-Type) and :func:`~xpushare.collect.metrics.parse_curl_output`. curl's
    ``000`` (no response), a missing trailer or a transport failure raise :class:`FetchError`.
    """

    def fetch(url: str) -> FetchResult:
        argv = scrape_command(url, timeout_s, curl=curl)
        try:
            res = host.run(argv, timeout=timeout_s + 15)
        except TransportError as exc:
            raise FetchError(f"curl on {host.name}: {exc}") from None
        parsed = parse_curl_output(res.stdout)
        if not parsed.http_code:
            tail = (res.stderr.strip().splitlines() or [f"exit {res.exit_code}"])[-1]
            raise FetchError(f"curl {url} on {host.name}: {tail}")
        return parsed.http_code, parsed.content_type, parsed.body

    return fetch


@dataclass(frozen=True)
class HttpResponse:
    """One GET: ``status`` (``None`` when no response came back, then ``error`` says why),
    ``content_type`` (the header, ``None`` if absent), ``body`` (text), ``elapsed_s`` (seconds)."""

    url: str
    status: int | None
    content_type: str | None
    body: str
    error: str | None
    elapsed_s: float

    @property
    def answered(self) -> bool:
        return self.status is not None


def _get(fetch: Fetch, url: str, clock: Callable[[], float]) -> HttpResponse:
    start = clock()
    try:
        status, ctype, body = fetch(url)
    except FetchError as exc:
        return HttpResponse(url, None, None, "", str(exc), clock() - start)
    return HttpResponse(url, int(status), ctype, body, None, clock() - start)


@dataclass(frozen=True)
class EndpointEvidence:
    """The three answers of a scheduler's exporter at ``base_url`` (``http://HOST:PORT``)."""

    base_url: str
    healthz: HttpResponse
    metrics: HttpResponse
    notfound: HttpResponse

    @property
    def unreachable(self) -> bool:
        """No request got any HTTP response (the endpoint is down or not reachable from here)."""
        return not (self.healthz.answered or self.metrics.answered or self.notfound.answered)


def base_url_of(url: str) -> str:
    """``http://HOST:PORT`` from a URL given with or without a trailing ``/metrics`` or ``/healthz``."""
    base = url.rstrip("/")
    for suffix in ("/metrics", "/healthz"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
    return base


def fetch_endpoint(base_url: str, fetch: Fetch | None = None, *, notfound_path: str = DEFAULT_NOTFOUND_PATH,
                   clock: Callable[[], float] = time.monotonic) -> EndpointEvidence:
    """GET ``/healthz``, ``/metrics`` and ``notfound_path`` of ``base_url`` (a trailing ``/metrics`` is
    ignored). ``fetch`` defaults to :func:`urllib_fetcher`. Never raises for network failures: a
    request without a response is recorded with its error."""
    fetch = fetch or urllib_fetcher()
    base = base_url_of(base_url)
    return EndpointEvidence(
        base_url=base,
        healthz=_get(fetch, base + "/healthz", clock),
        metrics=_get(fetch, base + "/metrics", clock),
        notfound=_get(fetch, base + notfound_path, clock),
    )


def metrics_scraper(url: str, fetch: Fetch | None = None) -> Callable[[], HttpResponse]:
    """A no-argument GET of ``<base>/metrics`` (``url`` with or without ``/metrics``), for :func:`run_load_checks`."""
    fetch = fetch or urllib_fetcher()
    target = base_url_of(url) + "/metrics"
    return lambda: _get(fetch, target, time.monotonic)


def scrape_series(url: str, fetch: Fetch | None = None, *, interval_s: float = 2.0, duration_s: float = 120.0,
                  keep_body: bool = True, clock: Callable[[], float] = time.time,
                  sleep: Callable[[float], None] = time.sleep) -> list[ScrapeRecord]:
    """Scrape ``url`` every ``interval_s`` seconds (fixed rate from the first start) for ``duration_s``.

    Returns :class:`~xpushare.judge.metrics_evidence.ScrapeRecord` rows (Unix start time, latency, status,
    error, body) for ``metrics_series.jsonl`` (``record.to_json_line()``), the evidence of
    MET-005..008. A scrape that overruns its slot delays the next one (it is not skipped).
    """
    fetch = fetch or urllib_fetcher()
    records: list[ScrapeRecord] = []
    t0 = clock()
    k = 0
    while True:
        due = t0 + k * interval_s
        if due - t0 > duration_s + 1e-9:
            break
        now = clock()
        if due > now:
            sleep(due - now)
        start = clock()
        try:
            status, _ctype, body = fetch(url)
            records.append(ScrapeRecord(start, clock() - start, int(status), None, body if keep_body else None))
        except FetchError as exc:
            records.append(ScrapeRecord(start, clock() - start, None, str(exc), None))
        k += 1
    return records


# -------------------------------------------------------------------------------------- judging


class CheckLine(NamedTuple):
    """One row of the checklist: what is checked, the expectation, what was seen, PASS or FAIL."""

    item: str
    expected: str
    observed: str
    status: Status

    @property
    def ok(self) -> bool:
        return self.status is Status.PASS


def _line(item: str, expected: str, observed: str, ok: bool) -> CheckLine:
    return CheckLine(item, expected, observed, Status.PASS if ok else Status.FAIL)


def _short(text: str, limit: int = 90) -> str:
    text = text.replace("\n", "\\n")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _answer(resp: HttpResponse) -> str:
    return f"no response ({resp.error})" if resp.status is None else str(resp.status)


def _content_type_ok(ctype: str | None) -> bool:
    if not ctype:
        return False
    parts = [p.strip().lower() for p in ctype.split(";")]
    return parts[0] == "text/plain" and "version=0.0.4" in [p.replace(" ", "") for p in parts[1:]]


def _mib(v: float) -> str:
    return f"{v / 2**20:.0f} MiB" if math.isfinite(v) else str(v)


def idle_checks(evidence: EndpointEvidence, *, prefix: str | None = None, min_families: int = 25,
                expect_idle: bool = True) -> list[CheckLine]:
    """The seed 002 checklist on an exporter with no probe load (seed 002 §1, §2, §5, §6).

    ``prefix``: the generation's metric prefix (``xpushare``/``nvshare``; detected when None);
    ``min_families``: the seed's ">= 25" HELP/TYPE lines; ``expect_idle``: include the idle lines
    (no ``client_info`` series, running clients 0). Unparsable text gives a FAIL line naming the
    first offending line; every other exposition line is still evaluated on what parsed.
    """
    h, m, nf = evidence.healthz, evidence.metrics, evidence.notfound
    body = h.body.strip()
    lines = [
        _line("/healthz answers 200 OK", "200, body 'OK'", f"{_answer(h)}, body {_short(body, 30)!r}",
              h.status == 200 and body == "OK"),
        _line("/metrics answers 200", "200", _answer(m), m.status == 200),
        _line("/metrics Content-Type", CONTENT_TYPE, str(m.content_type) if m.answered else _answer(m),
              _content_type_ok(m.content_type)),
        _line(f"unknown path {DEFAULT_NOTFOUND_PATH} is 404", "404", _answer(nf), nf.status == 404),
    ]
    if m.status != 200:
        lines.append(_line("exposition checks", "a /metrics page to check", f"none ({_answer(m)})", False))
        return lines
    return lines + exposition_checks(parse_exposition(m.body, prefix), min_families=min_families,
                                     expect_idle=expect_idle)


def exposition_checks(exp: Exposition, *, min_families: int = 25, expect_idle: bool = True) -> list[CheckLine]:
    """The content lines of :func:`idle_checks` for one parsed page (seed 002 §2, §5)."""
    lines: list[CheckLine] = []
    if exp.ok:
        lines.append(_line("exposition parses", "Prometheus text 0.0.4", f"{len(exp.family_names())} families", True))
    else:
        lines.append(_line("exposition parses", "Prometheus text 0.0.4",
                           f"line {exp.offending_lineno}: {_short(exp.offending_line or '', 60)!r} ({exp.error})",
                           False))
    no_help, no_type = exp.families_missing_help(), exp.families_missing_type()
    lines.append(_line("every family has # HELP and # TYPE", "none missing",
                       "none missing" if not (no_help or no_type)
                       else _short("; ".join(x for x in (f"no HELP: {', '.join(no_help)}" if no_help else "",
                                                         f"no TYPE: {', '.join(no_type)}" if no_type else "") if x)),
                       not no_help and not no_type))
    lines.append(_line(f"at least {min_families} families", f">= {min_families} # HELP and # TYPE lines",
                       f"{exp.help_lines} HELP, {exp.type_lines} TYPE",
                       exp.help_lines >= min_families and exp.type_lines >= min_families))
    pfx = exp.prefix
    if pfx is None:
        lines.append(_line("samples carry the SUT prefix", "every sample named xpushare_* or nvshare_*",
                           "no sample of either prefix", False))
    else:
        foreign = exp.foreign_lines
        lines.append(_line("samples carry the SUT prefix", f"every non-comment line starts with {pfx}_",
                           "yes" if not foreign else f"{len(foreign)} other, first {_short(foreign[0], 60)!r}",
                           not foreign))
    types = {c: exp.type_of(c) for c in COUNTERS}
    lines.append(_line("counters declared counter", "TYPE counter: " + ", ".join(c.removeprefix("scheduler_")
                                                                                    for c in COUNTERS),
                       ", ".join(f"{c.removeprefix('scheduler_')}={t or 'absent'}" for c, t in types.items()),
                       all(t == "counter" for t in types.values())))
    table = load_required_metrics()
    sampler_up = (exp.sum("gpu_sampler_up") or 0.0) >= 1
    absent = [s for s in table.required(sampler_up) if exp.family(s) is None]
    lines.append(_line("required families exported", f"{len(table.required(sampler_up))} families of "
                       "data/required_metrics.yaml", "all present" if not absent
                       else _short(f"missing: {', '.join(absent)}"), not absent))
    nvml = exp.values("nvml_up")
    lines.append(_line("nvml_up", "1", ", ".join(f"{s.value:g}" for s in nvml) or "absent",
                       len(nvml) == 1 and nvml[0].value == 1))
    gpus = [s for s in exp.values("gpu_info") if s.label("gpu_uuid") and s.label("gpu_name")]
    lines.append(_line("gpu_info with UUID and name", ">= 1 GPU with gpu_uuid and gpu_name",
                       _short(", ".join(f"{s.label('gpu_index')}: {s.label('gpu_name')} ({s.label('gpu_uuid')})"
                                        for s in gpus)) or "none", bool(gpus)))
    totals = {s.label("gpu_uuid"): exp.values("gpu_memory_total_bytes", gpu_uuid=s.label("gpu_uuid")) for s in gpus}
    ok_tot = bool(totals) and all(len(v) == 1 and v[0].value > 0 for v in totals.values())
    lines.append(_line("GPU memory totals", "gpu_memory_total_bytes > 0 for every GPU",
                       _short(", ".join(f"{(v[0].label('gpu_index') if v else '?')}: "
                                        f"{_mib(v[0].value) if v else 'absent'}" for v in totals.values())) or "no GPU",
                       ok_tot))
    if expect_idle:
        info = exp.family("client_info")
        clients = exp.values("client_info")
        lines.append(_line("idle: no client_info series", "family declared, 0 series",
                           "family absent" if info is None else f"{len(clients)} series", info is not None
                           and not clients))
        running = exp.sum("scheduler_running_clients")
        lines.append(_line("idle: running clients 0", "sum(scheduler_running_clients) == 0",
                           "family absent" if running is None
                           else f"{running:g} ({exp.series_count('scheduler_running_clients')} contexts)",
                           running == 0))
    return lines


def _client_line(exp: Exposition, expected_clients: int,
                 matches: Sequence[ClientMatch] | None) -> tuple[CheckLine, list[Sample], dict[str, str]]:
    """The ``client_info per client`` line, the selected ``client_info`` samples and ``client_id -> workload``.

    With ``matches`` each probe needs at least one client found by its key and the total must be
    ``expected_clients``; the observed text names the key that matched each client (``matched by
    host_pid 478``), and on a miss what is registered instead (id, pod, host_pid).
    """
    info = exp.values("client_info")
    if matches is None:
        ok = len(info) == expected_clients
        seen = (f"{len(info)}: " + ", ".join(f"{s.label('pod')}/{s.label('client_id')}" for s in info)) if info else "0"
        return _line("client_info per client", str(expected_clients), _short(seen), ok), info, {}
    chosen: dict[int, Sample] = {}
    owner: dict[str, str] = {}
    found: list[str] = []
    missing: list[ClientMatch] = []
    for m in matches:
        hits = matched_clients(exp, m)
        if not hits:
            missing.append(m)
        for s, key in hits:
            if id(s) not in chosen:
                chosen[id(s)] = s
                owner[s.label("client_id") or "?"] = m.workload
                found.append(f"{m.workload} = {s.label('client_id')} (matched by {key})")
    clients = [s for s in info if id(s) in chosen]
    keys = sorted({m.key for m in matches})
    expected = (f"{expected_clients} (one per probe, by {'/'.join(keys)}"
                + (" + client_id" if KEY_HOST_PID in keys else "") + ")")
    observed = f"{len(clients)}" + (": " + ", ".join(found) if found else "")
    if missing:
        observed += "; not found: " + ", ".join(f"{m.workload} [{m.describe()}]" for m in missing)
        others = [s for s in info if id(s) not in chosen]
        observed += "; registered: " + (", ".join(
            f"{s.label('client_id')} (pod {s.label('pod')}, host_pid {s.label('host_pid')})" for s in others)
            if others else "none")
    ok = len(clients) == expected_clients and not missing
    return _line("client_info per client", expected, _short(observed, 240), ok), clients, owner


def _nvml_hint(exp: Exposition, clients: Sequence[Sample]) -> str:
    """Why ``client_nvml_used_bytes`` can be 0: a client GPU key that is no NVML UUID (host mode: an index).

    The exporter looks a client's process up on the GPUs whose UUID prefix-matches the client's GPU key
    (metrics_exporter.c); outside Kubernetes the key is the first token of ``CUDA_VISIBLE_DEVICES``
    (sut-on-cpu.md), e.g. ``0``, which matches no ``GPU-...`` UUID.
    """
    uuids = [u for s in exp.values("gpu_info") if (u := s.label("gpu_uuid"))]
    odd = sorted({k for c in clients if (k := c.label("gpu_uuid") or "")
                  and not any(u.startswith(k) or k.startswith(u) for u in uuids)})
    return (f" (GPU key {', '.join(repr(k) for k in odd)} matches no gpu_info UUID: the exporter finds NVML "
            "processes by UUID prefix)") if odd and uuids else ""


def load_checks(exposition: Exposition, *, expected_clients: int, matches: Sequence[ClientMatch] | None = None,
                core_limits: Mapping[str, int] | None = None) -> list[CheckLine]:
    """The under-load checklist of seed 002 §3-§4 on one page, for the probe clients.

    ``matches``: one :class:`~xpushare.evidence.client_match.ClientMatch` per probe (from
    :func:`~xpushare.evidence.client_match.client_match`: by ``pod`` in Kubernetes, by ``host_pid``/``client_id``
    in host mode); each probe must have a client and exactly ``expected_clients`` must be selected.
    Without it every client counts and exactly ``expected_clients`` must be registered.
    ``core_limits``: ``probe workload name -> configured core limit`` (each client's
    ``client_core_quota_config_percent`` must equal it; without it, 1..100 is accepted).
    The other client families are read by the selected clients' ``client_id``.
    """
    exp = exposition
    lines: list[CheckLine] = []
    if not exp.ok:
        lines.append(_line("exposition parses", "Prometheus text 0.0.4",
                           f"line {exp.offending_lineno}: {_short(exp.offending_line or '', 60)!r}", False))
    line, clients, owner = _client_line(exp, expected_clients, matches)
    lines.append(line)
    if not clients:
        return lines

    def cid(s: Sample) -> str:
        return s.label("client_id") or "?"

    def per_client(metric: str) -> dict[str, float | None]:
        out: dict[str, float | None] = {}
        for c in clients:
            found = exp.values(metric, client_id=cid(c))
            out[cid(c)] = math.fsum(x.value for x in found) if found else None
        return out

    def show(values: Mapping[str, float | None], fmt: Callable[[float], str]) -> str:
        return _short(", ".join(f"{k[:8]}: {'absent' if v is None else fmt(v)}" for k, v in values.items()))

    pids = {cid(c): c.label("host_pid") or "" for c in clients}
    lines.append(_line("client host_pid is a real host pid", "host_pid > 1 (not the container's pid 1)",
                       ", ".join(f"{k[:8]}: {v or 'absent'}" for k, v in pids.items()),
                       all(v.isdigit() and int(v) > 1 for v in pids.values())))
    managed = per_client("client_managed_allocated_bytes")
    lines.append(_line("managed allocation", "client_managed_allocated_bytes > 0", show(managed, _mib),
                       all(v is not None and v > 0 for v in managed.values())))
    nvml = per_client("client_nvml_used_bytes")
    nvml_ok = all(v is not None and v > 0 for v in nvml.values())
    lines.append(_line("NVML per-process memory", "client_nvml_used_bytes > 0",
                       show(nvml, _mib) + ("" if nvml_ok else _nvml_hint(exp, clients)), nvml_ok))
    gpu_rows: dict[str, Sample] = {}
    for c in clients:
        for r in gpu_rows_for_key(exp, "gpu_utilization_ratio", c.label("gpu_uuid")):
            gpu_rows[r.label("gpu_uuid") or "?"] = r
    util = max((r.value for r in gpu_rows.values()), default=None)
    lines.append(_line("GPU utilization under load", "gpu_utilization_ratio > 0 on the clients' GPU",
                       "no row for the clients' GPU" if util is None
                       else ", ".join(f"{r.label('gpu_index')}: {r.value:.2f}" for r in gpu_rows.values()),
                       util is not None and util > 0))
    register = exp.values("scheduler_messages_total", type="REGISTER")
    reg = register[0].value if len(register) == 1 else None
    lines.append(_line("REGISTER messages counted", f"messages_total{{type=REGISTER}} >= {expected_clients}",
                       "absent" if reg is None else f"{reg:g}", reg is not None and reg >= expected_clients))
    core = per_client("client_core_quota_config_percent")
    want = {cid(c): (core_limits or {}).get(owner.get(cid(c), "")) for c in clients}
    core_ok = all(v is not None and (v == want[k] if want[k] is not None else 1 <= v <= 100) for k, v in core.items())
    lines.append(_line("core quota per client", "core_quota_config_percent = " + (
        ", ".join(sorted({str(v) for v in want.values() if v is not None})) if any(
            v is not None for v in want.values()) else "1..100"), show(core, lambda v: f"{v:g}"), core_ok))
    procs: dict[str, Sample] = {}
    for c in clients:
        for r in gpu_rows_for_key(exp, "gpu_process_count", c.label("gpu_uuid")):
            procs[r.label("gpu_uuid") or "?"] = r
    total = math.fsum(r.value for r in procs.values())
    lines.append(_line("GPU process count", f"sum(gpu_process_count on the clients' GPUs) >= {len(clients)}",
                       ", ".join(f"{r.label('gpu_index')}: {r.value:g}" for r in procs.values()) or "no row",
                       bool(procs) and total >= len(clients)))
    return lines


def render_table(lines: Sequence[CheckLine]) -> str:
    """The checklist as a text table (tabulate ``simple``): check, expected, observed, result."""
    rows = [(ln.item, ln.expected, ln.observed, ln.status.value) for ln in lines]
    return tabulate(rows, headers=["check", "expected", "observed", "result"], tablefmt="simple")


def exit_status(lines: Sequence[CheckLine], *, unreachable: bool = False) -> ExitStatus:
    """3 when the endpoint did not answer at all, 1 when any line FAILs, else 0."""
    if unreachable:
        return ExitStatus.UNREACHABLE
    return ExitStatus.FAILED if any(not ln.ok for ln in lines) else ExitStatus.OK


# --------------------------------------------------------------------------------- under load


class ProbeLoad(Protocol):
    """Starts and stops probe workloads that register with the scheduler being checked.

    ``start(index)`` starts probe number ``index`` (1, 2 ...) and returns its pod name once it runs
    (raises :class:`~xpushare.model.errors.XpushareError` when it cannot); ``stop()`` removes every probe
    (idempotent, called in a ``finally``); ``matches(names)`` says how each probe's clients are
    recognised on the page (:func:`xpushare.evidence.client_match.client_match` for the load's mode; called on
    every poll, since a host-mode probe's pid and client id appear after its start); ``core_limit`` is
    the core limit each probe is configured with (``None``: none, so the exporter shows 100).
    """

    core_limit: int | None

    def start(self, index: int) -> str: ...

    def matches(self, names: Sequence[str]) -> list[ClientMatch]: ...

    def stop(self) -> None: ...


#: The probe workload (W5, small and long enough; the probes are removed when the check ends).
PROBE_COMMAND: tuple[str, ...] = ("python", "workloads/w5_quota_probe.py", "--n", "1024", "--duration-s", "600",
                                  "--interval-s", "5", "--no-progress")
#: The probe image for a real cluster: one with PyTorch and this repository's ``workloads/`` in its
#: working directory (the lab ignores images). Override with the cluster parameter ``probe_image``.
DEFAULT_PROBE_IMAGE = "xpushare-workloads:latest"
RUN_LABEL = "xpushare-metrics-check"


@dataclass
class KubeProbeLoad:
    """Probe pods through kubectl: ``<resource>: 1``, a core-limit annotation, pinned to ``node``.

    The pods request the generation's extended resource (so the device plugin makes them scheduler
    clients) and carry ``<gen>.com/gpu-core-limit`` (so they request locks, sut-interfaces.md §3.2);
    they are labelled ``xpushare-metrics-check=<run_id>`` and deleted by that label.
    """

    kubectl: Kubectl
    names: SutNames
    node: str | None = None
    namespace: str = "default"
    core_limit: int | None = 50
    image: str = DEFAULT_PROBE_IMAGE
    command: tuple[str, ...] = PROBE_COMMAND
    run_id: str = field(default_factory=lambda: secrets.token_hex(4))
    timeout_s: float = 180.0
    poll_s: float = 1.0

    def pod_name(self, index: int) -> str:
        return f"metrics-check-{self.run_id}-{index}"

    def manifest(self, index: int) -> str:
        """The probe pod's YAML."""
        container: dict[str, Any] = {"name": "probe", "image": self.image, "command": list(self.command),
                                     "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}],
                                     "resources": {"limits": {self.names.resource: 1}}}
        meta: dict[str, Any] = {"name": self.pod_name(index), "namespace": self.namespace,
                                "labels": {RUN_LABEL: self.run_id, "probe": str(index)}}
        if self.core_limit is not None:
            meta["annotations"] = {self.names.annotation_core_limit: str(self.core_limit)}
        spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
        if self.node:
            spec["nodeSelector"] = {"kubernetes.io/hostname": self.node}
        return dump_manifests({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})

    def start(self, index: int) -> str:
        self.kubectl.apply(self.manifest(index), namespace=self.namespace)
        pods = self.kubectl.wait_pods(f"{RUN_LABEL}={self.run_id},probe={index}", until="running", count=1,
                                      timeout_s=self.timeout_s, poll_s=self.poll_s, namespace=self.namespace)
        pod: Pod = pods[0]
        if pod.is_terminal:
            raise XpushareError(f"probe pod {pod.name} ended ({pod.phase}, exit {pod.exit_code}) before the scrape")
        return pod.name

    def matches(self, names: Sequence[str]) -> list[ClientMatch]:
        """Kubernetes: the probes' clients carry their pod names (``pod`` label; a name holds a random run id,
        so any namespace label is accepted, as before)."""
        return [client_match("k8s", name) for name in names]

    def stop(self) -> None:
        self.kubectl.delete(f"{RUN_LABEL}={self.run_id}", wait=False, grace_period_s=0, namespace=self.namespace)


@dataclass
class BackendProbeLoad:
    """Probe "pods" through any :class:`~xpushare.backends.base.Backend`: host mode (processes on the
    GPU hosts with the client library preloaded; no annotations, so ``core_limit`` must stay ``None``)
    or a Kubernetes backend (``core_limit`` becomes the annotation, ``node`` pins the pod).

    :meth:`matches` follows the backend's ``mode``: host mode matches by the pid the backend recorded for
    the probe process (``PodRecord.host_pid``) and the ``Client ID`` lines of its output; Kubernetes by
    the pod name (in ``namespace``, None: any)."""

    backend: Backend
    case_dir: Path
    args: tuple[str, ...] = PROBE_COMMAND[2:]
    run_id: str = field(default_factory=lambda: secrets.token_hex(4))
    timeout_s: float = 120.0
    core_limit: int | None = None
    node: str | None = None
    namespace: str | None = None
    _started: bool = False
    _known: dict[str, ClientMatch] = field(default_factory=dict)

    def start(self, index: int) -> str:
        from xpushare.backends.base import PodSpec

        if not self._started:
            self.backend.prepare_run(self.run_id)
            self.backend.begin_case(self.case_dir, "metrics-check")
            self._started = True
        name = f"metrics-check-{index}"
        spec = PodSpec(name=name, workload="w5_quota_probe", args=self.args, core_limit=self.core_limit,
                       node=self.node)
        self.backend.start_pods(self.case_dir, [spec])
        rec = self.backend.wait_running(self.case_dir, [name], self.timeout_s)
        if not rec or rec[0].phase != "Running":
            raise XpushareError(f"probe {name} is {rec[0].phase if rec else 'missing'}, not Running")
        return rec[0].name

    def matches(self, names: Sequence[str]) -> list[ClientMatch]:
        """The probes' matches from their current records and output (each kept once nothing more can appear):
        one record poll for every probe not known yet, and only in host mode (a pod name needs none)."""
        unknown = [n for n in names if n not in self._known]
        current = dict(zip(unknown, live_matches(self.backend, self.case_dir, unknown, namespace=self.namespace),
                           strict=True))
        for name, found in current.items():
            if found.key == KEY_POD or (found.host_pids and found.client_ids):
                self._known[name] = found
        return [self._known.get(name) or current[name] for name in names]

    def stop(self) -> None:
        if self._started:
            self.backend.cleanup(self.case_dir)


def run_load_checks(scrape: Callable[[], HttpResponse], load: ProbeLoad, *, prefix: str | None = None,
                    steps: Sequence[int] = (1, 2), settle_s: float = 60.0, poll_s: float = 1.0,
                    clock: Callable[[], float] = time.monotonic,
                    sleep: Callable[[float], None] = time.sleep) -> list[CheckLine]:
    """Start probes one by one (``steps``: 1, then 2 running), and judge ``/metrics`` with each count.

    After each start ``scrape()`` (a GET of ``/metrics``) is polled every ``poll_s`` until
    :func:`load_checks` passes or ``settle_s`` runs out (a new client needs a moment: registration,
    first allocation, a utilisation sample); the last page's lines are kept, items prefixed
    ``load <n>:``. The probes' clients are selected with ``load.matches(names)`` on every poll (pod name
    in Kubernetes, host pid / client id in host mode). A probe that cannot start is a FAIL line and
    ends the load part. The probes are stopped in a ``finally`` (a failed removal is a FAIL line
    ``probe pods removed``).
    """
    lines: list[CheckLine] = []
    pods: list[str] = []
    try:
        for n in steps:
            try:
                while len(pods) < n:
                    pods.append(load.start(len(pods) + 1))
            except (XpushareError, OSError) as exc:
                lines.append(_line(f"load {n}: probe pods running", f"{n} running", _short(str(exc)), False))
                break
            deadline = clock() + settle_s
            while True:
                resp = scrape()
                if resp.status != 200:
                    last = [_line("/metrics answers 200", "200", _answer(resp), False)]
                else:
                    limits = {p: load.core_limit for p in pods} if load.core_limit is not None else None
                    last = load_checks(parse_exposition(resp.body, prefix), expected_clients=n,
                                       matches=load.matches(pods), core_limits=limits)
                if all(ln.ok for ln in last) or clock() >= deadline:
                    break
                sleep(poll_s)
            lines += [ln._replace(item=f"load {n}: {ln.item}") for ln in last]
    finally:
        try:
            load.stop()
        except (XpushareError, OSError) as exc:
            lines.append(_line("probe pods removed", "removed", _short(str(exc)), False))
    return lines


# ------------------------------------------------------------------------------------ the task


def run_metrics_check(url: str, *, fetch: Fetch | None = None, prefix: str | None = None, min_families: int = 25,
                      load: ProbeLoad | None = None, expect_idle: bool = True, settle_s: float = 60.0,
                      out: TextIO | None = None) -> ExitStatus:
    """Check the exporter at ``url``, print the table (and a summary line) to ``out``; return the status.

    ``load``: when given, the under-load part runs after the idle part (:func:`run_load_checks`).
    Exit statuses: 0 every line PASS; 1 some line FAIL; 3 the endpoint gave no response at all (the
    load part is not attempted then).
    """
    out = out or sys.stdout
    fetch = fetch or urllib_fetcher()
    evidence = fetch_endpoint(url, fetch)
    lines = idle_checks(evidence, prefix=prefix, min_families=min_families, expect_idle=expect_idle)
    if load is not None and not evidence.unreachable:
        lines += run_load_checks(metrics_scraper(evidence.base_url, fetch), load, prefix=prefix, settle_s=settle_s)
    status = exit_status(lines, unreachable=evidence.unreachable)
    print(f"metrics-check {evidence.base_url}", file=out)
    print(render_table(lines), file=out)
    failed = sum(1 for ln in lines if not ln.ok)
    if status is ExitStatus.UNREACHABLE:
        print(f"UNREACHABLE: no response from {evidence.base_url} ({evidence.metrics.error})", file=out)
    else:
        print(f"{len(lines) - failed}/{len(lines)} PASS" + (f", {failed} FAIL" if failed else ""), file=out)
    return status


def _host_named(cluster: ClusterSpec, node: str | None, node_ip: str | None) -> HostSpec | None:
    for h in cluster.by_role("gpu"):
        if node is not None and (h.name == node or h.address == node):
            return h
        if node_ip is not None and h.address == node_ip:
            return h
    return None


def _gpu_fetcher(cluster: ClusterSpec, preferred: HostSpec | None, timeout_s: float,
                 out: TextIO) -> tuple[Fetch, str]:
    """curl on a reachable GPU host (``preferred`` first), else urllib from this machine (noted on ``out``)."""
    candidates = ([preferred] if preferred else []) + [h for h in cluster.by_role("gpu") if h != preferred]
    for spec in candidates:
        if spec.local:
            return urllib_fetcher(timeout_s), "this machine"
        try:
            host = connect(spec)
            host.run(["true"], timeout=30)
        except HostUnreachable as exc:
            print(f"note: {spec.name} unreachable ({exc}); trying the next GPU host", file=out)
            continue
        return curl_fetcher(host, timeout_s=timeout_s), spec.name
    print("note: no GPU host reachable; fetching from this machine", file=out)
    return urllib_fetcher(timeout_s), "this machine"


def _k8s_target(cluster: ClusterSpec, names: SutNames, out: TextIO) -> tuple[Kubectl, Pod]:
    masters = cluster.by_role("master")
    if not masters:
        raise UsageError(f"cluster {cluster.name}: mode k8s needs a master host")
    kubectl = Kubectl(connect(masters[0]), kubectl=cluster.kubectl, kubeconfig=cluster.kubeconfig,
                      context=cluster.context, namespace=cluster.namespace)
    pods = [p for p in kubectl.list_pods(names.scheduler_label, namespace=names.namespace)
            if p.phase == "Running" and p.pod_ip]
    if not pods:
        raise XpushareError(f"no Running scheduler pod (-l {names.scheduler_label} -n {names.namespace})")
    chosen = pods[0]  # no GPU host of the inventory matches a node: the first Running scheduler pod
    for h in cluster.by_role("gpu"):  # inventory order: the first GPU host that runs a scheduler pod
        match = [p for p in pods if p.node in (h.name, h.address) or (h.address and p.host_ip == h.address)]
        if match:
            chosen = match[0]
            break
    print(f"scheduler pod {chosen.name} on node {chosen.node} ({chosen.pod_ip})", file=out)
    return kubectl, chosen


def metrics_check_task(url: str | None, cluster_spec: ClusterSpec | None, *, load: bool | None = None,
                       min_families: int = 25, out: TextIO | None = None, timeout_s: float = 10.0,
                       settle_s: float | None = None) -> ExitStatus:
    """Body of ``invoke metrics-check``: ``--url http://HOST:PORT`` or ``--cluster C``.

    ``load``: run the under-load part; ``None`` is the default of the target: off for ``--url``, on
    for ``--cluster``. ``settle_s``: how long each load step polls for its lines to pass (None: the
    cluster parameter ``metrics_check_settle_s``, default 60 s; a line that never passes costs that long).

    * ``--url``: fetched from this machine; ``load=True`` is refused (probes need a cluster);
    * ``mode: k8s``: kubectl on the master lists the scheduler pods (``-l name=<gen>-scheduler -n
      <gen>-system``), takes a Running one on a GPU host of the inventory (else the first Running
      one), and curls ``<podIP>:9402`` from that node through the transport (another GPU host, then
      this machine, when it is unreachable). ``load``: probe pods on that scheduler's node
      (:class:`KubeProbeLoad`, image from the cluster parameter ``probe_image``);
    * ``mode: host``: the inventory's ``scheduler.metrics_url``, curled on the first GPU host (this
      machine for a local host). ``load`` runs the probes through the host backend, only when the
      cluster names ``sut_lib`` (without the preloaded library no process registers), all on that first
      GPU host, whose scheduler ``metrics_url`` names (a probe on another host would register with that
      host's scheduler and never show on the page); the probes' clients are matched by ``host_pid``
      (and ``client_id``), not by pod name (``none`` there).

    The metric prefix is the cluster's generation (``sut``). Raises :class:`UsageError` for bad
    flag combinations; returns the :class:`ExitStatus` of :func:`run_metrics_check`.
    """
    out = out or sys.stdout
    if (url is None) == (cluster_spec is None):
        raise UsageError("give exactly one of --url or --cluster")
    if url is not None:
        if load is True:
            raise UsageError("--load needs --cluster: probe pods are started through the cluster")
        return run_metrics_check(url, fetch=urllib_fetcher(timeout_s), min_families=min_families, out=out)
    assert cluster_spec is not None
    cluster = cluster_spec
    load = True if load is None else load
    if settle_s is None:
        settle_s = float(cluster.params.get("metrics_check_settle_s", 60.0))
    names = sut_names(cluster.sut)
    prefix = names.metric_prefix.rstrip("_")
    probe: ProbeLoad | None = None
    if cluster.mode == "k8s":
        kubectl, sched = _k8s_target(cluster, names, out)
        fetch, where = _gpu_fetcher(cluster, _host_named(cluster, sched.node, sched.host_ip), timeout_s, out)
        base = f"http://{sched.pod_ip}:9402"
        if load:
            probe = KubeProbeLoad(kubectl, names, node=sched.node, namespace=cluster.namespace,
                                  image=str(cluster.params.get("probe_image", DEFAULT_PROBE_IMAGE)))
    else:
        if not cluster.scheduler.metrics_url:
            raise UsageError(f"cluster {cluster.name}: host mode needs scheduler.metrics_url in the inventory")
        base = cluster.scheduler.metrics_url
        gpu = cluster.by_role("gpu")
        fetch, where = _gpu_fetcher(cluster, gpu[0] if gpu else None, timeout_s, out)
        if load and not cluster.sut_lib:
            print("note: load part skipped: host mode without sut_lib (workloads would not register)", file=out)
        elif load:
            from xpushare.backends.host import HostBackend

            probe = BackendProbeLoad(HostBackend(cluster), Path(tempfile.mkdtemp(prefix="xpushare-metrics-check-")),
                                     node=gpu[0].name if gpu else None)
            print("note: host mode: probe clients are matched by host_pid / client_id (pod and namespace are "
                  "'none' outside Kubernetes)", file=out)
    print(f"fetching from {where}", file=out)
    return run_metrics_check(base, fetch=fetch, prefix=prefix, min_families=min_families, load=probe,
                             settle_s=settle_s, out=out)
