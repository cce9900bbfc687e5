"""Judging for ``invoke metrics-check`` (pure): the seed 002 checklist as :class:`CheckLine` rows, on the idle
endpoint (:func:`idle_checks`, :func:`exposition_checks`) and on a page with probe clients (:func:`load_checks`);
the table (:func:`render_table`) and the exit status (:func:`exit_status`).

Sources: seed 002 (the checklist), docs/sut/metrics.md, ``data/required_metrics.yaml``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

from tabulate import tabulate

from xpushare.evidence.client_match import KEY_HOST_PID, ClientMatch, matched_clients
from xpushare.judge.metrics_evidence import load_required_metrics
from xpushare.judge.metrics_exposition_checks import gpu_rows_for_key
from xpushare.metrics_check.endpoint import DEFAULT_NOTFOUND_PATH, EndpointEvidence, HttpResponse
from xpushare.model.exit_status import ExitStatus, decide_exit_status
from xpushare.model.verdict import Status
from xpushare.parsers.metrics import Exposition, Sample, parse_exposition

__all__ = ["CELL_WIDTHS", "CONTENT_TYPE", "COUNTERS", "CheckLine", "answer_text", "check_line", "exit_status",
           "exposition_checks", "idle_checks", "load_checks", "render_table", "shorten"]

#: The counters seed 002 §5 wants declared ``counter`` (suffixes).
COUNTERS = ("scheduler_messages_total", "scheduler_drop_lock_total", "scheduler_client_disconnect_total")
#: Content type of ``/metrics`` (docs/sut/metrics.md §http): media type and the version parameter.
CONTENT_TYPE = "text/plain; version=0.0.4"


CELL_WIDTHS = (None, 44, 50, None)
"""Widest line of each column of :func:`render_table` (check, expected, observed, result)."""


class CheckLine(NamedTuple):
    """One row of the checklist: what is checked, the expectation, what was seen, PASS or FAIL (or SKIP: a line
    whose evidence was not there, e.g. the DROP_LOCK line without throttling; never counted as PASS)."""

    item: str
    expected: str
    observed: str
    status: Status

    @property
    def ok(self) -> bool:
        return self.status is Status.PASS


def check_line(item: str, expected: str, observed: str, ok: bool) -> CheckLine:
    """A row whose status is PASS when ``ok``, else FAIL."""
    return CheckLine(item, expected, observed, Status.PASS if ok else Status.FAIL)


def shorten(text: str, limit: int = 90) -> str:
    """``text`` on one line (newlines as ``\\n``), cut to ``limit`` characters with an ellipsis."""
    text = text.replace("\n", "\\n")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def answer_text(resp: HttpResponse) -> str:
    """The status of a GET as shown in the table, or ``no response (<why>)``."""
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
        check_line("/healthz answers 200 OK", "200, body 'OK'", f"{answer_text(h)}, body {shorten(body, 30)!r}",
              h.status == 200 and body == "OK"),
        check_line("/metrics answers 200", "200", answer_text(m), m.status == 200),
        check_line("/metrics Content-Type", CONTENT_TYPE, str(m.content_type) if m.answered else answer_text(m),
              _content_type_ok(m.content_type)),
        check_line(f"unknown path {DEFAULT_NOTFOUND_PATH} is 404", "404", answer_text(nf), nf.status == 404),
    ]
    if m.status != 200:
        lines.append(check_line("exposition checks", "a /metrics page to check", f"none ({answer_text(m)})", False))
        return lines
    return lines + exposition_checks(parse_exposition(m.body, prefix), min_families=min_families,
                                     expect_idle=expect_idle)


def exposition_checks(exp: Exposition, *, min_families: int = 25, expect_idle: bool = True) -> list[CheckLine]:
    """The content lines of :func:`idle_checks` for one parsed page (seed 002 §2, §5)."""
    lines: list[CheckLine] = []
    if exp.ok:
        lines.append(check_line("exposition parses", "Prometheus text 0.0.4", f"{len(exp.family_names())} families",
                                True))
    else:
        lines.append(check_line("exposition parses", "Prometheus text 0.0.4",
                           f"line {exp.offending_lineno}: {shorten(exp.offending_line or '', 60)!r} ({exp.error})",
                           False))
    no_help, no_type = exp.families_missing_help(), exp.families_missing_type()
    lines.append(check_line("every family has # HELP and # TYPE", "none missing",
                       "none missing" if not (no_help or no_type)
                       else shorten("; ".join(x for x in (f"no HELP: {', '.join(no_help)}" if no_help else "",
                                                         f"no TYPE: {', '.join(no_type)}" if no_type else "") if x)),
                       not no_help and not no_type))
    lines.append(check_line(f"at least {min_families} families", f">= {min_families} # HELP and # TYPE lines",
                       f"{exp.help_lines} HELP, {exp.type_lines} TYPE",
                       exp.help_lines >= min_families and exp.type_lines >= min_families))
    pfx = exp.prefix
    if pfx is None:
        lines.append(check_line("samples carry the SUT prefix", "every sample named xpushare_* or nvshare_*",
                           "no sample of either prefix", False))
    else:
        foreign = exp.foreign_lines
        lines.append(check_line("samples carry the SUT prefix", f"every non-comment line starts with {pfx}_",
                           "yes" if not foreign else f"{len(foreign)} other, first {shorten(foreign[0], 60)!r}",
                           not foreign))
    types = {c: exp.type_of(c) for c in COUNTERS}
    lines.append(check_line("counters declared counter", "TYPE counter: " + ", ".join(c.removeprefix("scheduler_")
                                                                                    for c in COUNTERS),
                       ", ".join(f"{c.removeprefix('scheduler_')}={t or 'absent'}" for c, t in types.items()),
                       all(t == "counter" for t in types.values())))
    table = load_required_metrics()
    sampler_up = (exp.sum("gpu_sampler_up") or 0.0) >= 1
    absent = [s for s in table.required(sampler_up) if exp.family(s) is None]
    lines.append(check_line("required families exported", f"{len(table.required(sampler_up))} families of "
                       "data/required_metrics.yaml", "all present" if not absent
                       else shorten(f"missing: {', '.join(absent)}"), not absent))
    nvml = exp.values("nvml_up")
    lines.append(check_line("nvml_up", "1", ", ".join(f"{s.value:g}" for s in nvml) or "absent",
                       len(nvml) == 1 and nvml[0].value == 1))
    gpus = [s for s in exp.values("gpu_info") if s.label("gpu_uuid") and s.label("gpu_name")]
    lines.append(check_line("gpu_info with UUID and name", ">= 1 GPU with gpu_uuid and gpu_name",
                       shorten(", ".join(f"{s.label('gpu_index')}: {s.label('gpu_name')} ({s.label('gpu_uuid')})"
                                        for s in gpus)) or "none", bool(gpus)))
    totals = {s.label("gpu_uuid"): exp.values("gpu_memory_total_bytes", gpu_uuid=s.label("gpu_uuid")) for s in gpus}
    ok_tot = bool(totals) and all(len(v) == 1 and v[0].value > 0 for v in totals.values())
    lines.append(check_line("GPU memory totals", "gpu_memory_total_bytes > 0 for every GPU",
                       shorten(", ".join(f"{(v[0].label('gpu_index') if v else '?')}: "
                                        f"{_mib(v[0].value) if v else 'absent'}" for v in totals.values())) or "no GPU",
                       ok_tot))
    if expect_idle:
        info = exp.family("client_info")
        clients = exp.values("client_info")
        lines.append(check_line("idle: no client_info series", "family declared, 0 series",
                           "family absent" if info is None else f"{len(clients)} series", info is not None
                           and not clients))
        running = exp.sum("scheduler_running_clients")
        lines.append(check_line("idle: running clients 0", "sum(scheduler_running_clients) == 0",
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
        return check_line("client_info per client", str(expected_clients), shorten(seen), ok), info, {}
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
    return check_line("client_info per client", expected, shorten(observed, 240), ok), clients, owner


def _nvml_hint(exp: Exposition, clients: Sequence[Sample]) -> str:
    """Why ``client_nvml_used_bytes`` can be 0: a client GPU key that is no NVML UUID (host mode: an index).

    The exporter looks a client's process up on the GPUs whose UUID prefix-matches the client's GPU key
    (metrics_exporter.c); outside Kubernetes the key is the first token of ``CUDA_VISIBLE_DEVICES``
    (docs/sut/client.md §identity), e.g. ``0``, which matches no ``GPU-...`` UUID.
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
        lines.append(check_line("exposition parses", "Prometheus text 0.0.4",
                           f"line {exp.offending_lineno}: {shorten(exp.offending_line or '', 60)!r}", False))
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
        return shorten(", ".join(f"{k[:8]}: {'absent' if v is None else fmt(v)}" for k, v in values.items()))

    pids = {cid(c): c.label("host_pid") or "" for c in clients}
    lines.append(check_line("client host_pid is a real host pid", "host_pid > 1 (not the container's pid 1)",
                       ", ".join(f"{k[:8]}: {v or 'absent'}" for k, v in pids.items()),
                       all(v.isdigit() and int(v) > 1 for v in pids.values())))
    managed = per_client("client_managed_allocated_bytes")
    lines.append(check_line("managed allocation", "client_managed_allocated_bytes > 0", show(managed, _mib),
                       all(v is not None and v > 0 for v in managed.values())))
    nvml = per_client("client_nvml_used_bytes")
    nvml_ok = all(v is not None and v > 0 for v in nvml.values())
    lines.append(check_line("NVML per-process memory", "client_nvml_used_bytes > 0",
                       show(nvml, _mib) + ("" if nvml_ok else _nvml_hint(exp, clients)), nvml_ok))
    gpu_rows: dict[str, Sample] = {}
    for c in clients:
        for r in gpu_rows_for_key(exp, "gpu_utilization_ratio", c.label("gpu_uuid")):
            gpu_rows[r.label("gpu_uuid") or "?"] = r
    util = max((r.value for r in gpu_rows.values()), default=None)
    lines.append(check_line("GPU utilization under load", "gpu_utilization_ratio > 0 on the clients' GPU",
                       "no row for the clients' GPU" if util is None
                       else ", ".join(f"{r.label('gpu_index')}: {r.value:.2f}" for r in gpu_rows.values()),
                       util is not None and util > 0))
    register = exp.values("scheduler_messages_total", type="REGISTER")
    reg = register[0].value if len(register) == 1 else None
    lines.append(check_line("REGISTER messages counted", f"messages_total{{type=REGISTER}} >= {expected_clients}",
                       "absent" if reg is None else f"{reg:g}", reg is not None and reg >= expected_clients))
    core = per_client("client_core_quota_config_percent")
    want = {cid(c): (core_limits or {}).get(owner.get(cid(c), "")) for c in clients}
    core_ok = all(v is not None and (v == want[k] if want[k] is not None else 1 <= v <= 100) for k, v in core.items())
    lines.append(check_line("core quota per client", "core_quota_config_percent = " + (
        ", ".join(sorted({str(v) for v in want.values() if v is not None})) if any(
            v is not None for v in want.values()) else "1..100"), show(core, lambda v: f"{v:g}"), core_ok))
    procs: dict[str, Sample] = {}
    for c in clients:
        for r in gpu_rows_for_key(exp, "gpu_process_count", c.label("gpu_uuid")):
            procs[r.label("gpu_uuid") or "?"] = r
    total = math.fsum(r.value for r in procs.values())
    lines.append(check_line("GPU process count", f"sum(gpu_process_count on the clients' GPUs) >= {len(clients)}",
                       ", ".join(f"{r.label('gpu_index')}: {r.value:g}" for r in procs.values()) or "no row",
                       bool(procs) and total >= len(clients)))
    return lines


def render_table(lines: Sequence[CheckLine]) -> str:
    """The checklist as a text table (tabulate ``simple``): check, expected, observed, result; long cells wrap
    (at most :data:`CELL_WIDTHS` characters a line), so that the table fits a terminal of about 150 columns."""
    rows = [tuple(_cell(c) for c in (ln.item, ln.expected, ln.observed, ln.status.value)) for ln in lines]
    return tabulate(rows, headers=["check", "expected", "observed", "result"], tablefmt="simple",
                    maxcolwidths=list(CELL_WIDTHS))


def _cell(text: str) -> str:
    """A cell as the table shows it: one of only whitespace (a scraped header such as a Content-Type of a lone
    newline) as its repr, which is both readable and a text tabulate's wrapping accepts (it raises ValueError on a
    lone newline)."""
    return repr(text) if text and not text.strip() else text


def exit_status(lines: Sequence[CheckLine], *, unreachable: bool = False) -> ExitStatus:
    """3 when the endpoint did not answer at all, 1 when any line FAILs, else 0 (a SKIP line, which judged
    nothing, is no failure; the closing line counts it)."""
    return decide_exit_status(failed=any(ln.status is Status.FAIL for ln in lines), unreachable=unreachable)

