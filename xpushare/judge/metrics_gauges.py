"""MET-003's gauge series: the gauges that must follow the system, sampled while it changes (seed 000 MET-003
"趋势一致", seed 002 §3-§4; issue "Metrics against what happened").

A gauge read once can be right by luck or frozen. MET-003 therefore scrapes ``/metrics`` every second
(``metrics_series.jsonl``) while an alloc/free loop (W4 with ``--hold-s``: each allocated block and each freed state
held a few seconds) registers, allocates, frees and leaves beside the W5 probe, and judges every scrape against a
second source over the same time (``met003_series_lag_s`` either side, for the order in which the two sources
record one event; ``met003_nvml_lag_s`` for NVML, which the exporter and the node sampler each read once a second):

========================================  =====================================================================
check                                     rule (per scrape of the series)
========================================  =====================================================================
``client_count_follows_log``              the number of ``client_info`` series equals the clients registered
                                          minus removed on the page's GPUs in ``scheduler.log`` at some time of
                                          the window (a client of the first page the log never registered was
                                          there before the log began: it counts until its removal)
``running_clients_follow_locks``          ``sum(scheduler_running_clients)`` within [min, max] of the clients
                                          holding a lock on those GPUs by the log (``Sent LOCK_OK`` in,
                                          ``Received LOCK_RELEASED`` or ``Removing client`` out) over the window
``managed_follows_client_reports``        the loop's ``client_managed_allocated_bytes`` in whole MiB is one of
                                          the values its own client library reported (``Reported memory usage:
                                          <N> MB``, its pod log) in the window or last before it; and it took
                                          at least two values when the reports did (not frozen)
``running_memory_within_reports``         ``scheduler_running_memory_bytes`` of the loop's GPU (the managed
                                          memory of its running list) <= the sum, over its clients the log says
                                          held a lock in the window, of the largest allocation each reported
                                          itself in the window (+1 MiB each); only where those are the case's
``nvml_process_memory_follows``           the loop's ``client_nvml_used_bytes`` within [min, max] ±
                                          ``met003_nvml_tolerance_ratio`` of NVML's per-process memory of its
                                          ``host_pid`` (node sampler, ``sampler/<node>_procs.csv``; 0 at a
                                          sample that does not list it) in the window
``gpu_memory_follows_nvml``               ``gpu_memory_used_bytes`` of the loop's GPU within [min, max] ± the same
                                          ratio of NVML's device memory (``sampler/<node>_gpu.csv``) in the window
========================================  =====================================================================

A check whose second source is missing (no timestamps in the log, no report lines, no sampler rows) is ERROR for
what it concerns (``ok`` None), never a silent PASS. Every check's values name its two sources.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from xpushare.evidence.client_match import ClientMatch, matched_clients
from xpushare.evidence.scrape_capture import ScrapeRecord
from xpushare.evidence.store import Evidence
from xpushare.judge.metrics_evidence import load_series
from xpushare.judge.metrics_exposition_checks import gpu_rows_for_key, th_value
from xpushare.model.verdict import Check
from xpushare.parsers.client_lines import memory_reports
from xpushare.parsers.metrics import Exposition, parse_exposition
from xpushare.parsers.sampler_csv import gpu_rows, proc_rows
from xpushare.parsers.scheduler_log import ClientEvent, client_events, mem_updates

__all__ = ["GAUGE_KEYS", "SERIES_FILE", "gauge_checks"]

SERIES_FILE = "metrics_series.jsonl"
#: The thresholds these checks use (recorded in the verdict).
GAUGE_KEYS = ("met003_series_lag_s", "met003_nvml_lag_s", "met003_series_min_scrapes", "met003_nvml_tolerance_ratio")
_MIB = 2**20
_LAG_DEFAULT = 1.0
_NVML_LAG_DEFAULT = 2.0
_MIN_SCRAPES_DEFAULT = 5


@dataclass(frozen=True)
class _Page:
    t: float
    t_end: float
    exp: Exposition


def _th(th: Mapping[str, Any], key: str, default: float) -> float:
    try:
        return float(th_value(th, key))
    except KeyError:
        return float(th.get(key, default))


def _pages(records: Iterable[ScrapeRecord], start: float, end: float, prefix: str | None) -> list[_Page]:
    return [_Page(r.t, r.t_end, parse_exposition(r.body, prefix)) for r in records
            if r.responded and r.body is not None and start <= r.t <= end]


def _gpus(exp: Exposition) -> set[str]:
    return {u for s in exp.values("gpu_info") if (u := s.label("gpu_uuid"))}


def _on(key: str | None, gpus: set[str]) -> bool:
    return key is not None and any(u == key or u.startswith(key) or key.startswith(u) for u in gpus)


def _log_counts(events: Sequence[ClientEvent], gpus: set[str], joins: str, leaves: set[str],
                initial: frozenset[str] = frozenset()) -> list[tuple[float, int]]:
    """``(t, clients of gpus in the set)`` after each timestamped event of a client of those GPUs: a client enters
    the set with an event of kind ``joins`` and leaves it with one of ``leaves``; ``initial``: clients in the set
    before the log begins (leaving it with their removal). The first entry is ``(-inf, len(initial))``."""
    gpu_of: dict[str, str | None] = dict.fromkeys(initial, next(iter(gpus), None))
    live: set[str] = set(initial)
    out: list[tuple[float, int]] = [(-math.inf, len(live))]
    for e in events:
        if e.registered:
            gpu_of[e.cid] = e.gpu
        if not _on(gpu_of.get(e.cid), gpus) or e.t is None or (e.kind != joins and e.kind not in leaves):
            continue
        (live.add if e.kind == joins else live.discard)(e.cid)
        out.append((e.t, len(live)))
    return out


def _count_at(counts: Sequence[tuple[float, int]], t: float) -> int:
    n = counts[0][1] if counts else 0
    for when, value in counts:
        if when > t:
            break
        n = value
    return n


def _counts_in(counts: Sequence[tuple[float, int]], lo: float, hi: float) -> set[int]:
    return {_count_at(counts, lo)} | {v for when, v in counts if lo <= when <= hi}


def _client_checks(pages: Sequence[_Page], events: Sequence[ClientEvent], lag: float, *,
                   locks_possible: bool = True) -> list[Check]:
    sources = ["/metrics client_info, scheduler_running_clients",
               "scheduler.log Registered/Removing client, Sent LOCK_OK, Received LOCK_RELEASED"]
    expr = "client_info series(t) == log's registered - removed clients (t'), t' within the lag"
    run_expr = "sum(scheduler_running_clients)(t) within [min, max] of the log's lock holders (t'), t' within the lag"
    gpus = set().union(*(_gpus(p.exp) for p in pages))
    if any(e.t is None for e in events):
        why = "scheduler.log has no timestamps: the client count cannot be placed in time"
        return [Check("client_count_follows_log", expr, {"sources": sources}, None, why),
                Check("running_clients_follow_locks", run_expr, {"sources": sources}, None, why)]
    first = pages[0]
    logged = {e.cid for e in events if e.registered}
    # clients on the first page that the log never registered were there before it began (they count until removed);
    # a lock held from before the log began is not assumed (the case starts on an idle node)
    before = frozenset(c for s in first.exp.values("client_info") if (c := (s.label("client_id") or "").lower())
                       and c not in logged)
    counts = _log_counts(events, gpus, "registered", {"removed"}, before)
    holders = _log_counts(events, gpus, "granted", {"released", "removed"})
    offset = run_offset = 0
    wrong: list[str] = []
    off: list[str] = []
    seen: list[tuple[float, int, int | None]] = []
    for p in pages:
        n = len(p.exp.values("client_info"))
        allowed = {c + offset for c in _counts_in(counts, p.t - lag, p.t_end + lag)}
        held = {c + run_offset for c in _counts_in(holders, p.t - lag, p.t_end + lag)}
        running = p.exp.sum("scheduler_running_clients")
        seen.append((round(p.t, 3), n, None if running is None else int(running)))
        if n not in allowed:
            wrong.append(f"t={p.t:.1f}: {n} client_info series, the log says {sorted(allowed)}")
        if running is None or not min(held) <= running <= max(held):
            off.append(f"t={p.t:.1f}: running_clients {running}, the log's lock holders {sorted(held)}")
    window = (first.t - lag, pages[-1].t_end + lag)
    log_values = sorted({c + offset for when, c in counts if window[0] <= when <= window[1]}
                        | {_count_at(counts, first.t) + offset})
    holder_values = sorted({c + run_offset for when, c in holders if window[0] <= when <= window[1]}
                           | {_count_at(holders, first.t) + run_offset})
    values = {"sources": sources, "series": seen, "log_client_counts": log_values,
              "registered_before_log": sorted(before)}
    checks = [Check("client_count_follows_log", expr, values, not wrong, "; ".join(wrong[:5]))]
    if len(log_values) < 2:
        checks[0] = Check("client_count_follows_log", expr, values, None,
                          "the log shows no client joining or leaving during the series: nothing followed")
    run_values = {"sources": sources, "series": seen, "log_lock_holders": holder_values}
    checks.append(Check("running_clients_follow_locks", run_expr, run_values, not off, "; ".join(off[:5])))
    if not locks_possible:  # host mode: no client has a limit, so none takes the lock; the list stays empty
        run_values["note"] = "no client can hold the lock (no quota outside Kubernetes): judged at the log's holders"
    elif len(holder_values) < 2:
        checks[-1] = Check("running_clients_follow_locks", run_expr, run_values, None,
                           "the log shows no lock granted or released during the series: nothing followed")
    return checks


def _holders_by_time(events: Sequence[ClientEvent]) -> list[tuple[float, frozenset[str]]]:
    """``(t, client ids holding a lock)`` after each timestamped grant, release or removal of the log."""
    live: set[str] = set()
    out: list[tuple[float, frozenset[str]]] = []
    for e in events:
        if e.t is None or e.kind not in ("granted", "released", "removed"):
            continue
        (live.add if e.kind == "granted" else live.discard)(e.cid)
        out.append((e.t, frozenset(live)))
    return out


def _holders_in(holders: Sequence[tuple[float, frozenset[str]]], lo: float, hi: float) -> set[str]:
    """Every client id that held a lock at some time of ``[lo, hi]``."""
    before = [ids for t, ids in holders if t <= lo]
    out: set[str] = set(before[-1]) if before else set()
    for t, ids in holders:
        if lo <= t <= hi:
            out |= ids
    return out


def _managed_checks(pages: Sequence[_Page], mover: ClientMatch, log: str | None, others: Mapping[str, str | None],
                    lag: float, events: Sequence[ClientEvent], sched_log: str | None = None) -> list[Check]:
    """``sched_log``: host mode, the scheduler's timestamped log, whose ``Received MEM_UPDATE`` lines of the mover's
    clients are its reports (a host process's own output has no times)."""
    sources = ["/metrics client_managed_allocated_bytes", f"pods/{mover.workload}.log 'Reported memory usage'"]
    expr = ("floor(client_managed_allocated_bytes / MiB)(t) in the MiB the client reported within the lag (or last "
            "before it); >= 2 values over the series when the reports had >= 2")
    if sched_log is not None:
        cids = {c.lower() for c in mover.client_ids} | {
            (h[0].label("client_id") or "").lower() for p in pages for h in matched_clients(p.exp, mover)[:1]}
        stamped = [(t, mib) for cid, t, mib in mem_updates(sched_log) if cid in cids and t is not None]
        sources[1] = "the scheduler's timestamped log: Received MEM_UPDATE from the loop's clients"
    else:
        stamped = [(r.ts.timestamp(), r.mib) for r in memory_reports(log or "") if r.ts is not None]
    run_expr = ("scheduler_running_memory_bytes(the loop's GPU) <= sum over its clients that held a lock in the "
                "window (log) of (max MiB each reported in the window + 1) MiB")
    if not stamped:
        why = (f"no timestamped 'Reported memory usage' line in {mover.workload}'s log (client debug off?): the "
               "managed allocation has no second source")
        return [Check("managed_follows_client_reports", expr, {"sources": sources}, None, why),
                Check("running_memory_within_reports", run_expr, {"sources": sources}, None, why)]
    holders = _holders_by_time(events)
    other_reports = {name: [(r.ts.timestamp(), r.mib) for r in memory_reports(text or "") if r.ts is not None]
                     for name, text in others.items()}

    def allowed(rows: Sequence[tuple[float, int]], lo: float, hi: float) -> set[int]:
        before = [mib for t, mib in rows if t < lo]  # nothing reported yet: nothing allocated through the library
        return (set(before[-1:]) or {0}) | {mib for t, mib in rows if lo <= t <= hi}

    wrong: list[str] = []
    over: list[str] = []
    unjudged = 0
    series: list[tuple[float, int | None]] = []
    window_reports: set[int] = set()
    for p in pages:
        hits = matched_clients(p.exp, mover)
        if not hits:
            continue
        cid = hits[0][0].label("client_id") or "?"
        gpu = hits[0][0].label("gpu_uuid")
        found = p.exp.values("client_managed_allocated_bytes", client_id=cid)
        mib = None if not found else math.floor(math.fsum(s.value for s in found) / _MIB)
        series.append((round(p.t, 3), mib))
        ok_values = allowed(stamped, p.t - lag, p.t_end + lag)
        window_reports |= ok_values
        if mib is None or mib not in ok_values:
            wrong.append(f"t={p.t:.1f}: {mib} MiB, the client reported {sorted(ok_values)}")
        # running memory of the loop's GPU: the managed memory of the clients in its running list, i.e. of those
        # the log says held a lock in the window, by what each reported itself (only where all of them are ours)
        running_ids = _holders_in(holders, p.t - lag, p.t_end + lag)
        on_gpu = [s for s in p.exp.values("client_info") if s.label("gpu_uuid") == gpu]
        bound = 0
        for s in on_gpu:
            if (s.label("client_id") or "") not in running_ids:
                continue
            owner = next((name for name in (mover.workload, *other_reports)
                          if s.label("pod") == name or (name == mover.workload and s.label("client_id") == cid)), None)
            rows = stamped if owner == mover.workload else other_reports.get(owner or "", [])
            if owner is None or not rows:
                bound = -1
                break
            bound += (max(allowed(rows, p.t - lag, p.t_end + lag), default=0) + 1) * _MIB
        running = [s.value for s in p.exp.values("scheduler_running_memory_bytes") if s.label("gpu_uuid") == gpu]
        if bound < 0 or not running:
            unjudged += 1
        elif running[0] > bound:
            over.append(f"t={p.t:.1f}: running memory {running[0] / _MIB:.0f} MiB > {bound / _MIB:.0f} MiB reported "
                        f"by the {len(running_ids)} lock holder(s) of the log")
    reported = sorted({mib for _, mib in stamped})
    page_values = {m for _, m in series if m is not None}
    values = {"sources": sources, "series_mib": series, "reported_mib": reported}
    if not series:
        return [Check("managed_follows_client_reports", expr, values, None,
                      f"{mover.workload}'s client never on the series' pages"),
                Check("running_memory_within_reports", run_expr, values, None, "no page with the loop's client")]
    frozen = len(window_reports) >= 2 and len(page_values) < 2
    detail = "; ".join(wrong[:5])
    if frozen:
        detail = (f"frozen: {sorted(page_values)} MiB on every page while the client reported "
                  f"{sorted(window_reports)} MiB" + (f"; {detail}" if detail else ""))
    checks = [Check("managed_follows_client_reports", expr, values, not wrong and not frozen, detail)]
    judged = len(series) - unjudged
    checks.append(Check("running_memory_within_reports", run_expr,
                        {"sources": ["/metrics scheduler_running_memory_bytes", "the clients' pod logs"],
                         "pages_judged": judged}, (not over) if judged else None,
                        "; ".join(over[:5]) if judged else "no page where every client of the GPU is the case's"))
    return checks


def _nvml_checks(pages: Sequence[_Page], mover: ClientMatch, ev: Evidence, node: str | None, tol: float,
                 lag: float) -> list[Check]:
    procs_file, gpu_file = f"sampler/{node}_procs.csv", f"sampler/{node}_gpu.csv"
    procs = proc_rows(ev.text(procs_file) or "")
    devices = gpu_rows(ev.text(gpu_file) or "")
    proc_expr = f"client_nvml_used_bytes(t) within [min, max] of NVML process memory in the window ± {tol:.0%}"
    gpu_expr = f"gpu_memory_used_bytes(t) within [min, max] of NVML device memory in the window ± {tol:.0%}"
    checks: list[Check] = []
    bad_p: list[str] = []
    bad_g: list[str] = []
    judged_p = judged_g = 0
    series_p: list[tuple[float, float | None]] = []
    series_g: list[tuple[float, float | None]] = []
    for p in pages:
        hits = matched_clients(p.exp, mover)
        if not hits:
            continue
        client = hits[0][0]
        cid, pid = client.label("client_id") or "?", client.label("host_pid") or ""
        found = p.exp.values("client_nvml_used_bytes", client_id=cid)
        value = math.fsum(s.value for s in found) if found else None
        # every sample of the window: the process's memory, 0 where NVML did not list it (not started, ended)
        ticks = {round(r.t, 3): 0.0 for r in devices if p.t - lag <= r.t <= p.t_end + lag}
        ticks.update({round(r.t, 3): r.used_bytes for r in procs if str(r.pid) == pid and r.used_bytes is not None
                      and p.t - lag <= r.t <= p.t_end + lag})
        seen = list(ticks.values())
        series_p.append((round(p.t, 3), value))
        if seen:
            judged_p += 1
            if value is None or not min(seen) * (1 - tol) <= value <= max(seen) * (1 + tol):
                bad_p.append(f"t={p.t:.1f}: {value} bytes, NVML {min(seen):.0f}..{max(seen):.0f}")
        for row in gpu_rows_for_key(p.exp, "gpu_memory_used_bytes", client.label("gpu_uuid")):
            uuid = row.label("gpu_uuid") or ""
            dev = [r.used_bytes for r in devices if r.uuid == uuid and r.used_bytes is not None
                   and p.t - lag <= r.t <= p.t_end + lag]
            series_g.append((round(p.t, 3), row.value))
            if dev:
                judged_g += 1
                if not min(dev) * (1 - tol) <= row.value <= max(dev) * (1 + tol):
                    bad_g.append(f"t={p.t:.1f} {uuid}: {row.value:.0f} bytes, NVML {min(dev):.0f}..{max(dev):.0f}")
    for name, expr, judged, bad, series, source in (
            ("nvml_process_memory_follows", proc_expr, judged_p, bad_p, series_p, procs_file),
            ("gpu_memory_follows_nvml", gpu_expr, judged_g, bad_g, series_g, gpu_file)):
        values = {"sources": ["/metrics", f"{source} (node sampler, NVML)"], "series": series, "pages_judged": judged}
        checks.append(Check(name, expr, values, (not bad) if judged else None,
                            "; ".join(bad[:5]) if judged else f"no NVML row of {source} in any page's window"))
    return checks


def gauge_checks(ev: Evidence, th: Mapping[str, Any], *, mover: ClientMatch, others: Sequence[str] = (),
                 node: str | None, start: float, end: float, prefix: str | None = None,
                 log_file: str = "scheduler.log", host_mode: bool = False) -> list[Check]:
    """The gauge checks of the module docstring over the scrapes of :data:`SERIES_FILE` taken in ``[start, end]``
    (Unix s: the loop's start and the series' end). ``mover``: the alloc/free loop's match; ``others``: the case's
    other workloads (their pod logs bound the running memory); ``node``: the node whose sampler files are read;
    ``log_file``: the scheduler log with kubectl ``--timestamps`` times (host mode: the case's stamped copy).
    ``host_mode``: no client holds the lock (running clients judged at the log's holders, even if none), and the
    loop's reports are its ``MEM_UPDATE`` lines in that log (a host process's output has no times).
    A series with fewer than ``met003_series_min_scrapes`` answered scrapes is one ERROR check."""
    lag = _th(th, "met003_series_lag_s", _LAG_DEFAULT)
    tol = _th(th, "met003_nvml_tolerance_ratio", 0.10)
    minimum = int(_th(th, "met003_series_min_scrapes", _MIN_SCRAPES_DEFAULT))
    loaded = load_series(ev, SERIES_FILE)
    pages = _pages(loaded[0], start, end, prefix) if loaded is not None else []
    if len(pages) < minimum:
        return [Check("gauge_series", f">= {minimum} answered scrapes while the alloc/free loop ran",
                      {"scrapes": len(pages), "file": SERIES_FILE}, None,
                      f"{len(pages)} answered scrape(s) of {SERIES_FILE} in the loop's window: the gauges were not "
                      "sampled while they changed")]
    log = ev.text(log_file)
    checks = ([Check("client_count_follows_log", log_file, {}, None, f"{log_file} was not collected")]
              if log is None else _client_checks(pages, client_events(log), lag, locks_possible=not host_mode))
    checks += _managed_checks(pages, mover, ev.logs.get(mover.workload), {n: ev.logs.get(n) for n in others}, lag,
                              client_events(log or ""), sched_log=(log or "") if host_mode else None)
    checks += _nvml_checks(pages, mover, ev, node, tol, _th(th, "met003_nvml_lag_s", _NVML_LAG_DEFAULT))
    return checks
