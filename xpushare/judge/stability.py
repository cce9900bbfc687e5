"""Judgments of the stability, leak and fault cases (seed 000 §6 P0/P2, §10, §14.4, §16.6, §17.6).

Pure functions: they read the case directory through :class:`~xpushare.evidence.Evidence` (the soak's
series under ``soak/``, ``plan.json``, ``pods.json``, the scheduler log) and never live state, so
``invoke judge`` re-judges a stored soak offline with other thresholds.

Leaks are judged by the trend, never first-vs-last (seed §14.4): per scheduler process (node, pid; a
restart starts a new series) the RSS / FD series is fitted by least squares (:func:`xpushare.trend.fit`).
A series FAILs when

* its trend growth (slope × window) exceeds the ``*_max_growth`` threshold, or
* its slope is significantly positive (one-sided t-test at ``trend_alpha``, autocorrelation-corrected)
  **and** its trend growth is above the ``*_noise`` floor (a significant but negligible drift, e.g. an
  allocator warming up by a few hundred KiB, is tolerated: "可微幅波动").

Samples taken between rounds (phase ``idle``: the round's pods deleted) are used when there are at least
``trend_min_samples`` of them, else every sample; the first ``trend_warmup_fraction`` of the points is
dropped. Fewer than ``trend_min_samples`` points is ERROR (never PASS on missing evidence).
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import statistics
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xpushare import judge
from xpushare.collect.pod_log import strip_timestamp
from xpushare.collect.scheduler_log import SchedulerLogParser, SchedulerLogSummary
from xpushare.evidence import Evidence
from xpushare.judge_quota import parse_quantity
from xpushare.model import Check, Status, Verdict, combine
from xpushare.soak import series
from xpushare.trend import Trend, fit

__all__ = [
    "SoakData",
    "check_coverage",
    "check_ghost_clients",
    "check_gpu_recovered",
    "check_log_storm",
    "check_restarts",
    "check_rounds",
    "check_scheduler_log_clean",
    "check_series_bounded",
    "check_trend",
    "check_updates_applied",
    "judge_fault",
    "judge_leak",
    "judge_stab",
    "load_soak",
    "process_series",
]

SOAK = "soak"


# ------------------------------------------------------------------------------------------- evidence


@dataclass
class SoakData:
    """The soak's evidence, parsed: rows of the CSV series (strings), JSON lines, and the JSON snapshots."""

    samples: list[dict[str, str]] = field(default_factory=list)
    metrics: list[dict[str, str]] = field(default_factory=list)
    schedulers: list[dict[str, str]] = field(default_factory=list)
    rounds: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    baseline: dict[str, Any] = field(default_factory=dict)
    final: dict[str, Any] = field(default_factory=dict)
    checkpoint: dict[str, Any] = field(default_factory=dict)
    present: bool = False

    def gaps(self, ops: Sequence[str] = ("sample",)) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("kind") == "gap" and e.get("op") in ops]


def _csv_rows(ev: Evidence, name: str) -> list[dict[str, str]]:
    rel = f"{SOAK}/{name}"
    if rel in ev.files:
        return [r for r in csv.DictReader(io.StringIO(ev.files[rel])) if None not in r.values()]
    if ev.case_dir is not None:
        return list(series.iter_csv(ev.case_dir / SOAK / name))
    return []


def _jsonl(ev: Evidence, name: str) -> list[dict[str, Any]]:
    rel = f"{SOAK}/{name}"
    if rel in ev.files:
        out = []
        for line in ev.files[rel].splitlines():
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict):
                out.append(obj)
        return out
    if ev.case_dir is not None:
        return list(series.iter_jsonl(ev.case_dir / SOAK / name))
    return []


def _json(ev: Evidence, name: str) -> dict[str, Any]:
    text = ev.text(f"{SOAK}/{name}")
    if not text:
        return {}
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def load_soak(ev: Evidence) -> SoakData:
    """Everything under ``soak/`` (rotated parts included). ``present`` is False when there is no soak."""
    data = SoakData(
        samples=_csv_rows(ev, "samples.csv"),
        metrics=_csv_rows(ev, "metrics.csv"),
        schedulers=_csv_rows(ev, "schedulers.csv"),
        rounds=_jsonl(ev, "rounds.jsonl"),
        events=_jsonl(ev, "events.jsonl"),
        baseline=_json(ev, "baseline.json"),
        final=_json(ev, "final.json"),
        checkpoint=_json(ev, "checkpoint.json"),
    )
    data.present = bool(data.checkpoint or data.samples or data.rounds)
    return data


def scheduler_log_lines(ev: Evidence) -> Iterator[str]:
    """Every scheduler log line of the case in time order: rotated parts (``soak/logs/scheduler-*.log.gz``),
    earlier segments' logs (``soak/segments/*/scheduler.log*``), then the last ``scheduler.log``."""
    if ev.case_dir is not None:
        base = ev.case_dir / SOAK
        paths = sorted((base / "logs").glob("scheduler-*.log*")) if (base / "logs").is_dir() else []
        if (base / "segments").is_dir():
            for seg in sorted((base / "segments").iterdir(), key=lambda p: _natural(p.name)):
                paths += sorted(seg.glob("scheduler.log*"))
        for path in paths:
            yield from series.iter_lines(path) if not path.name.endswith(".gz") else _gz_lines(path)
    text = ev.text("scheduler.log")
    if text:
        yield from text.splitlines()


def _gz_lines(path: Path) -> Iterator[str]:
    import gzip

    with gzip.open(path, "rt", encoding="utf-8", errors="replace") as fh:
        for line in fh:
            yield line.rstrip("\n")


def _natural(text: str) -> tuple[Any, ...]:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text))


def _has_scheduler_log(ev: Evidence) -> bool:
    if ev.text("scheduler.log") is not None:
        return True
    return ev.case_dir is not None and (ev.case_dir / SOAK / "logs").is_dir()


# ------------------------------------------------------------------------------------------- trends


def _num(text: str | None) -> float | None:
    if text is None or text == "":
        return None
    try:
        v = float(text)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def process_series(
    rows: Iterable[Mapping[str, str]], value: str, *, min_samples: int, prefer_phase: str | None = "idle"
) -> dict[tuple[str, str], tuple[list[float], list[float], str]]:
    """``(node, pid) -> (times, values, phases used)`` of a ``samples.csv`` column, in time order.

    ``prefer_phase`` rows are used when a process has at least ``min_samples`` of them, else all rows.
    """
    every: dict[tuple[str, str], list[tuple[float, float, str]]] = {}
    for r in rows:
        t, v = _num(r.get("ts")), _num(r.get(value))
        if t is None or v is None:
            continue
        every.setdefault((r.get("node", ""), r.get("pid", "")), []).append((t, v, r.get("phase", "")))
    out = {}
    for key, pts in every.items():
        pts.sort()
        used = "all"
        if prefer_phase:
            chosen = [p for p in pts if p[2] == prefer_phase]
            if len(chosen) >= min_samples:
                pts, used = chosen, prefer_phase
        out[key] = ([p[0] for p in pts], [p[1] for p in pts], used)
    return out


def _judge_points(
    times: list[float], values: list[float], *, warmup: float, alpha: float, max_growth: float, noise: float
) -> tuple[Trend | None, list[str], float | None]:
    """Fit after dropping the warm-up share; return the trend, the reasons it fails, and its first time."""
    drop = int(len(times) * max(0.0, min(0.9, warmup)))
    times, values = times[drop:], values[drop:]
    if len(times) < 3 or times[-1] <= times[0]:
        return None, [], None
    tr = fit(times, values)
    bad = []
    if tr.growth > max_growth:
        bad.append(f"trend growth {tr.growth:.6g} > {max_growth:.6g}")
    if tr.significant(alpha) and tr.growth > noise:
        bad.append(f"slope significantly positive (p={tr.p_value:.2g} < {alpha}) with growth {tr.growth:.6g} "
                   f"> noise floor {noise:.6g}")
    return tr, bad, times[0]


def check_trend(
    name: str,
    rows: Sequence[Mapping[str, str]],
    value: str,
    *,
    max_growth: float,
    noise: float,
    alpha: float,
    min_samples: int,
    warmup: float,
    prefer_phase: str | None = "idle",
    unit: str = "",
) -> Check:
    """No sustained growth of ``value`` (``rss_bytes`` / ``fd_count``) in any scheduler process.

    ``ok=None`` when no process has ``min_samples`` points. Values: per process the fit's numbers.
    """
    expr = (f"per scheduler process: trend_growth <= {max_growth:g}{unit} and not (slope > 0 significant at "
            f"alpha={alpha} and trend_growth > {noise:g}{unit})")
    procs = process_series(rows, value, min_samples=min_samples, prefer_phase=prefer_phase)
    judged: dict[str, Any] = {}
    failures: list[str] = []
    for (node, pid), (ts, vs, used) in sorted(procs.items()):
        label = f"{node}/pid{pid}"
        if len(ts) < min_samples:
            judged[label] = {"points": len(ts), "judged": False}
            continue
        tr, bad, t_start = _judge_points(ts, vs, warmup=warmup, alpha=alpha, max_growth=max_growth, noise=noise)
        if tr is None:
            judged[label] = {"points": len(ts), "judged": False}
            continue
        judged[label] = {"judged": True, "phase": used, "t_start": t_start, **_trend_values(tr)}
        failures += [f"{label}: {b}" for b in bad]
    if not any(v.get("judged") for v in judged.values()):
        return Check(name, expr, {"series": judged}, None,
                     f"fewer than {min_samples} samples of {value} for every scheduler process")
    return Check(name, expr, {"series": judged}, not failures, "; ".join(failures))


def _trend_values(tr: Trend) -> dict[str, Any]:
    d = tr.to_dict()
    keep = ("n", "span_s", "slope", "intercept", "per_hour", "slope_se", "t", "df", "p_value", "r1", "n_eff", "growth",
            "first", "last", "minimum", "maximum")
    return {k: (round(d[k], 6) if isinstance(d[k], float) else d[k]) for k in keep}


# ------------------------------------------------------------------------------------------- state checks


def check_restarts(baseline: Mapping[str, Any], schedulers: Sequence[Mapping[str, str]],
                   final: Mapping[str, Any] | None = None) -> Check:
    """The scheduler pods kept their uid and restart count from the baseline to the end (seed P2-1)."""
    base = baseline.get("schedulers") or {}
    expr = "every scheduler pod's (uid, restart count) equals the baseline's during the whole run"
    if not base:
        return Check("scheduler_no_restart", expr, {}, None, "no baseline of the scheduler pods")
    changes: dict[str, Any] = {}
    seen = list(schedulers)
    for node, snap in ((final or {}).get("schedulers") or {}).items():
        seen.append({"node": node, "uid": snap.get("uid"), "restarts": str(snap.get("restarts")),
                     "pod": snap.get("pod")})
    for r in seen:
        b = base.get(r.get("node"))
        if b is None:
            continue
        uid, restarts = r.get("uid"), _num(str(r.get("restarts")))
        if uid != b.get("uid") or (restarts is not None and int(restarts) != int(b.get("restarts", 0))):
            changes.setdefault(str(r.get("node")), {
                "baseline": {"pod": b.get("pod"), "uid": b.get("uid"), "restarts": b.get("restarts")},
                "first_change": {"pod": r.get("pod"), "uid": uid, "restarts": restarts, "ts": r.get("ts")},
            })
    values = {"nodes": sorted(base), "restarted": changes}
    detail = "; ".join(
        f"{n}: {c['baseline']['pod']} (restarts {c['baseline']['restarts']}) -> {c['first_change']['pod']} "
        f"(restarts {c['first_change']['restarts']})" for n, c in sorted(changes.items())
    )
    return Check("scheduler_no_restart", expr, values, not changes, f"scheduler restarted: {detail}" if changes else "")


def check_rounds(rounds: Sequence[Mapping[str, Any]], *, min_success_ratio: float) -> list[Check]:
    """Rounds ran; every pod of every round reached a terminal phase (no pod left Pending or Running at the
    round timeout, seed P0-1); the share of pods that Succeeded is at least ``min_success_ratio``."""
    judged = [r for r in rounds if r.get("status") in ("completed", "timeout")]
    pods = sum(int(r.get("pods", 0)) for r in judged)
    ok_pods = sum(int((r.get("phases") or {}).get("Succeeded", 0)) for r in judged)
    stuck = [(r["round"], n, (r.get("detail") or {}).get(n, {}).get("phase")) for r in judged
             for n in r.get("not_terminal") or []]
    failed = [(r["round"], n) for r in judged for n in r.get("failed") or []]
    ran = Check("rounds_ran", "completed rounds >= 1", {"rounds": len(judged), "pods": pods,
                "other_rounds": {str(r.get("round")): r.get("status") for r in rounds if r not in judged}},
                bool(judged) or None, "" if judged else "no round completed")
    if not judged:
        return [ran]
    pending_max = max((r.get("pending_max_s") or 0.0) for r in judged)
    terminal = Check(
        "pods_terminal",
        "every pod of every round Succeeded or Failed before the round timeout (none Pending/Running forever)",
        {"not_terminal": [f"round {a}: {b} ({c})" for a, b, c in stuck[:50]], "count": len(stuck),
         "pending_max_s": pending_max},
        not stuck,
        f"{len(stuck)} pod(s) not terminal at the round timeout, e.g. "
        + ", ".join(f"round {a}: {b} {c}" for a, b, c in stuck[:3]) if stuck else "",
    )
    ratio = ok_pods / pods if pods else 0.0
    success = Check(
        "pods_succeeded",
        f"succeeded / pods >= {min_success_ratio}",
        {"succeeded": ok_pods, "pods": pods, "ratio": round(ratio, 4), "failed": [f"round {a}: {b}" for a, b in
                                                                                  failed[:50]]},
        ratio >= min_success_ratio,
        f"{ok_pods}/{pods} pods succeeded ({len(failed)} failed)" if ratio < min_success_ratio else "",
    )
    return [ran, terminal, success]


def check_coverage(data: SoakData, *, max_gap_fraction: float) -> Check:
    """The samples cover the soak: sampling gaps (SSH drops, kubectl timeouts) are at most
    ``max_gap_fraction`` of the active time. Gaps are recorded, never fatal by themselves; a soak that
    mostly could not see the cluster has no evidence to judge (``ok=None``: ERROR)."""
    active = float(data.checkpoint.get("active_s") or 0.0)
    gaps = data.gaps(("sample",))
    total = sum(float(g.get("duration_s") or 0.0) for g in gaps)
    downtime = sum(float(g.get("duration_s") or 0.0) for g in data.gaps(("orchestrator",)))
    fraction = total / active if active > 0 else None
    values = {"active_s": round(active, 3), "sampling_gaps": len(gaps), "gap_s": round(total, 3),
              "gap_fraction": None if fraction is None else round(fraction, 4),
              "orchestrator_downtime_s": round(downtime, 3), "samples": int(data.checkpoint.get("samples") or 0)}
    expr = f"sampling gap time / active time <= {max_gap_fraction}"
    if fraction is None or not data.samples:
        return Check("sample_coverage", expr, values, None, "no samples")
    if fraction > max_gap_fraction:
        return Check("sample_coverage", expr, values, None,
                     f"sampling gaps cover {fraction:.0%} of the soak: too little evidence to judge")
    return Check("sample_coverage", expr, values, True)


def _gpu_map(snapshot: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    return {str(n): {str(g): float(v) for g, v in (gpus or {}).items()} for n, gpus in
            (snapshot.get("gpu_used") or {}).items()}


def check_gpu_recovered(baseline: Mapping[str, Any], final: Mapping[str, Any], *, tolerance_bytes: float) -> Check:
    """GPU memory of every GPU is back within ``tolerance_bytes`` of the idle baseline after the cleanup
    (seed P2-2), from ``gpu_memory_used_bytes`` of each node's scheduler. Missing scrapes: ``ok=None``."""
    base, after = _gpu_map(baseline), _gpu_map(final)
    expr = f"for every GPU: used_after <= used_idle_baseline + {tolerance_bytes:g} bytes"
    values: dict[str, Any] = {"baseline": base, "after": after, "settled": final.get("settled"),
                              "settle_s": final.get("settle_s")}
    if not base or not any(base.values()):
        return Check("gpu_memory_recovered", expr, values, None, "no GPU memory baseline (scrape or sampler missing)")
    missing = [n for n in base if n not in after]
    if missing:
        return Check("gpu_memory_recovered", expr, values, None,
                     f"no GPU memory after cleanup for {', '.join(missing)}")
    over = []
    for node, gpus in base.items():
        for gpu, ref in gpus.items():
            now = after[node].get(gpu)
            if now is None:
                over.append(f"{node}/{gpu}: missing")
            elif now > ref + tolerance_bytes:
                over.append(f"{node}/{gpu}: {now / 2**20:.0f} MiB vs idle {ref / 2**20:.0f} MiB")
    return Check("gpu_memory_recovered", expr, values, not over, "; ".join(over))


def check_ghost_clients(final: Mapping[str, Any], *, max_ghosts: int) -> Check:
    """After the churn and the cleanup, no ``client_info`` series of this case's pods is left (ghost clients;
    LEAK-004, STAB-004 "no zombie clients"). A failed final scrape is ``ok=None``, never a pass."""
    ok_map = final.get("scrape_ok") or {}
    ours = final.get("client_info_ours") or {}
    ghosts = [f"{n}:{ns}/{pod}" for n, items in sorted(ours.items()) for ns, pod in items]
    values = {"ghosts": ghosts[:50], "count": len(ghosts), "client_info_total": final.get("client_info_total"),
              "scrape_ok": ok_map, "settled": final.get("settled")}
    expr = f"client_info series of this case's pods after cleanup <= {max_ghosts}"
    if not ok_map or not all(ok_map.values()):
        return Check("no_ghost_clients", expr, values, None, "the final /metrics scrape failed on some node")
    return Check("no_ghost_clients", expr, values, len(ghosts) <= max_ghosts,
                 f"{len(ghosts)} ghost client(s): {', '.join(ghosts[:5])}" if len(ghosts) > max_ghosts else "")


def check_series_bounded(
    baseline: Mapping[str, Any], final: Mapping[str, Any], metrics_rows: Sequence[Mapping[str, str]], *,
    max_growth: float, noise: float, alpha: float, min_samples: int,
) -> Check:
    """``/metrics`` series do not grow without bound under pod churn (LEAK-005): the series count after the
    cleanup exceeds the idle baseline by at most ``max_growth``, and the idle samples taken after each round
    show no significant upward trend beyond ``noise`` series."""
    before, after = baseline.get("series_total") or {}, final.get("series_total") or {}
    expr = (f"sum(series_after) - sum(series_before) <= {max_growth:g} and no significant upward trend of the "
            f"per-node series count between rounds (beyond {noise:g})")
    nodes = [n for n in before if n in after]
    values: dict[str, Any] = {"before": before, "after": after}
    if not nodes:
        return Check("series_bounded", expr, values, None, "no series count before and after (scrapes missing)")
    growth = sum(float(after[n]) - float(before[n]) for n in nodes)
    values["growth"] = growth
    problems = []
    if growth > max_growth:
        problems.append(f"series grew by {growth:g} (> {max_growth:g})")
    trends: dict[str, Any] = {}
    per_node: dict[str, tuple[list[float], list[float]]] = {}
    for r in metrics_rows:
        if r.get("phase") != "idle" or r.get("ok") != "1":
            continue
        t, v = _num(r.get("ts")), _num(r.get("series_total"))
        if t is None or v is None:
            continue
        ts, vs = per_node.setdefault(r.get("node", ""), ([], []))
        ts.append(t)
        vs.append(v)
    for node, (ts, vs) in sorted(per_node.items()):
        if len(ts) < min_samples:
            continue
        tr, bad, _ = _judge_points(ts, vs, warmup=0.0, alpha=alpha, max_growth=max_growth, noise=noise)
        if tr is not None:
            trends[node] = _trend_values(tr)
            problems += [f"{node}: {b}" for b in bad]
    values["trends"] = trends
    return Check("series_bounded", expr, values, not problems, "; ".join(problems))


def _log_minute(line: str) -> int | None:
    if line.startswith("[pod/"):
        end = line.find("] ")
        if end > 0:
            line = line[end + 2:]
    ts, _ = strip_timestamp(line)
    return None if ts is None else int(ts.timestamp() // 60)


@dataclass
class LogScan:
    """One pass over the scheduler log: per-minute line counts and the parser's summary."""

    per_minute: dict[int, int]
    summary: SchedulerLogSummary
    lines: int


def scan_scheduler_log(lines: Iterable[str]) -> LogScan:
    """Feed every line to :class:`SchedulerLogParser` and count timestamped lines per minute."""
    parser = SchedulerLogParser()
    per_minute: dict[int, int] = {}
    n = 0
    for line in lines:
        n += 1
        parser.feed(line)
        minute = _log_minute(line)
        if minute is not None:
            per_minute[minute] = per_minute.get(minute, 0) + 1
    return LogScan(per_minute, parser.summary(), n)


def check_log_storm(scan: LogScan, *, floor_per_min: float, factor: float) -> Check:
    """No log storm (STAB-002 "日志无异常风暴"): no minute holds more than ``max(floor_per_min, factor ×
    median lines per minute)`` scheduler log lines."""
    counts = sorted(scan.per_minute.values())
    expr = f"max lines per minute <= max({floor_per_min:g}, {factor:g} x median lines per minute)"
    if not counts:
        return Check("no_log_storm", expr, {"lines": scan.lines}, None, "no timestamped scheduler log lines")
    median = statistics.median(counts)
    limit = max(floor_per_min, factor * median)
    peak_minute, peak = max(scan.per_minute.items(), key=lambda kv: kv[1])
    values = {"lines": scan.lines, "minutes": len(counts), "median_per_min": median, "max_per_min": peak,
              "limit_per_min": limit, "peak_minute_unix": peak_minute * 60}
    return Check("no_log_storm", expr, values, peak <= limit,
                 f"{peak} lines in one minute (limit {limit:g})" if peak > limit else "")


def check_scheduler_log_clean(summary: SchedulerLogSummary, *, max_protocol_errors: int) -> Check:
    """No FATAL line and at most ``max_protocol_errors`` send/receive failures in the scheduler log
    (STAB-004 "无协议异常")."""
    errors = summary.send_failures + summary.receive_failures
    values = {"fatal": summary.fatal_count, "send_failures": summary.send_failures,
              "receive_failures": summary.receive_failures, "starts": summary.starts,
              "fatal_lines": [ln.text for ln in summary.fatal_lines[:5]]}
    ok = summary.fatal_count == 0 and errors <= max_protocol_errors
    detail = "" if ok else f"{summary.fatal_count} FATAL line(s), {errors} protocol error(s)"
    return Check("scheduler_log_clean", f"fatal == 0 and send/receive failures <= {max_protocol_errors}", values, ok,
                 detail)


def _finish_times(rounds: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    out = {}
    for r in rounds:
        for name, info in (r.get("detail") or {}).items():
            if info.get("finished") is not None:
                out[name.lower()] = float(info["finished"])
    return out


def check_updates_applied(
    events: Sequence[Mapping[str, Any]], summary: SchedulerLogSummary, rounds: Sequence[Mapping[str, Any]], *,
    kind: str, namespace: str | None, max_latency_s: float, min_ratio: float,
) -> Check:
    """Periodic quota changes take effect (STAB-003/004): for each annotation that changed a running pod's
    value, the scheduler logged ``<kind> limit changed`` for that pod to the new value within
    ``max_latency_s``. A change not logged for a pod that ended within that window is not counted."""
    finished = _finish_times(rounds)
    changes = [c for c in summary.limit_changes if c.kind == kind and not c.initial and c.ts is not None
               and (namespace is None or c.namespace == namespace)]
    expected = found = 0
    missing: list[str] = []
    latencies: list[float] = []
    for e in events:
        if e.get("kind") != "annotate":
            continue
        at = float(e.get("at") or e.get("ts") or 0.0)
        value = str(e.get("value"))
        new = parse_quantity(value) if kind == "memory" else int(value)
        for pod in e.get("changed") or []:
            hit = [c for c in changes if c.pod == pod.lower() and c.new == new and c.ts is not None
                   and at - 2.0 <= c.ts.timestamp() <= at + max_latency_s]
            if hit:
                expected += 1
                found += 1
                latencies.append(min(c.ts.timestamp() for c in hit if c.ts is not None) - at)
                continue
            end = finished.get(pod.lower())
            if end is not None and end < at + max_latency_s:
                continue  # the pod ended before the change was due: neither found nor missing
            expected += 1
            missing.append(f"{pod}->{value}@{at:.0f}")
    line = "Compute limit changed" if kind == "compute" else "Memory limit changed"
    expr = f"'{line}' lines within {max_latency_s:g}s / changes on running pods >= {min_ratio}"
    values = {"expected": expected, "found": found, "missing": missing[:20],
              "max_latency_s": round(max(latencies), 3) if latencies else None}
    if expected == 0:
        return Check("quota_updates_applied", expr, values, None, "no quota change landed on a running pod")
    ratio = found / expected
    values["ratio"] = round(ratio, 4)
    return Check("quota_updates_applied", expr, values, ratio >= min_ratio,
                 f"{found}/{expected} changes logged, e.g. missing {', '.join(missing[:3])}" if ratio < min_ratio
                 else "")


# ------------------------------------------------------------------------------------------- case judges


def _skip(plan: Mapping[str, Any], th: Mapping[str, Any]) -> Verdict | None:
    if plan.get("skip"):
        return Verdict(Status.SKIP, str(plan["skip"]), [], dict(th))
    return None


def _soak_metrics(data: SoakData) -> dict[str, Any]:
    ck = data.checkpoint
    return {"rounds": ck.get("rounds"), "samples": ck.get("samples"), "active_s": ck.get("active_s"),
            "gaps": ck.get("gaps"), "anomalies": ck.get("anomalies"), "segments": len(ck.get("segments") or [])}


def _trend_checks(data: SoakData, th: Mapping[str, Any], which: Sequence[str]) -> list[Check]:
    common: dict[str, Any] = {"alpha": float(th["trend_alpha"]), "min_samples": int(th["trend_min_samples"]),
              "warmup": float(th["trend_warmup_fraction"]),
              "prefer_phase": None if th.get("trend_samples") == "all" else "idle"}
    out = []
    if "rss" in which:
        out.append(check_trend("rss_no_leak", data.samples, "rss_bytes",
                               max_growth=float(th["leak_rss_max_growth_bytes"]),
                               noise=float(th["leak_rss_noise_bytes"]), unit=" B", **common))
    if "fd" in which:
        out.append(check_trend("fd_no_leak", data.samples, "fd_count", max_growth=float(th["leak_fd_max_growth"]),
                               noise=float(th["leak_fd_noise"]), **common))
    return out


def _no_soak(th: Mapping[str, Any]) -> Verdict:
    return Verdict(Status.ERROR, "no soak evidence (soak/checkpoint.json, samples) in the case directory", [], dict(th))


def judge_stab(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    """STAB-001..004: the rounds ran and ended; the scheduler never restarted; RSS/FD show no sustained
    growth; sampling covered the run; GPU memory returned to the idle baseline and no ghost client was left;
    the scheduler log is free of FATAL lines/protocol errors and of storms; STAB-003/004 also check that the
    periodic quota changes took effect."""
    skipped = _skip(plan, th)
    if skipped:
        return skipped
    data = load_soak(ev)
    if not data.present:
        return _no_soak(th)
    checks: list[Check] = []
    checks += check_rounds(data.rounds, min_success_ratio=float(th["stab_min_success_ratio"]))
    checks.append(check_restarts(data.baseline, data.schedulers, data.final))
    checks += _trend_checks(data, th, ("rss", "fd"))
    checks.append(check_coverage(data, max_gap_fraction=float(th["stab_max_gap_fraction"])))
    checks.append(check_gpu_recovered(data.baseline, data.final, tolerance_bytes=float(th["leak_gpu_tolerance_bytes"])))
    checks.append(check_ghost_clients(data.final, max_ghosts=int(th["leak_ghost_max"])))
    if _has_scheduler_log(ev):
        scan = scan_scheduler_log(scheduler_log_lines(ev))
        checks.append(check_scheduler_log_clean(scan.summary, max_protocol_errors=int(th["stab_max_protocol_errors"])))
        checks.append(check_log_storm(scan, floor_per_min=float(th["stab_log_storm_floor_per_min"]),
                                      factor=float(th["stab_log_storm_factor"])))
        kind = plan.get("quota_kind")
        if kind:
            checks.append(check_updates_applied(
                data.events, scan.summary, data.rounds, kind="compute" if kind == "core" else "memory",
                namespace=plan.get("namespace"), max_latency_s=float(th["dynamic_max_latency_s"]),
                min_ratio=float(th["stab_min_update_ratio"])))
    else:
        checks.append(Check("scheduler_log_clean", "scheduler.log collected", {}, None, "no scheduler log"))
    rounds = data.checkpoint.get("rounds", 0)
    status, summary = combine(checks, pass_summary=f"{rounds} round(s) over {_hms(data.checkpoint.get('active_s'))}: "
                              "no restart, no leak trend, memory and clients returned")
    return Verdict(status, summary, checks, dict(th), _soak_metrics(data), _soak_files(ev))


def judge_leak(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    """LEAK-001..005 by ``plan["leak"]``: ``rss`` / ``fd`` (trend, and no restart: a restart resets the
    series), ``gpu`` (memory back to the idle baseline), ``ghosts`` (no client_info of our pods after churn),
    ``series`` (series count bounded). The rounds must have run and ended in every case."""
    skipped = _skip(plan, th)
    if skipped:
        return skipped
    data = load_soak(ev)
    if not data.present:
        return _no_soak(th)
    what = plan.get("leak")
    checks = check_rounds(data.rounds, min_success_ratio=0.0)[:2]
    if what in ("rss", "fd"):
        checks.append(check_restarts(data.baseline, data.schedulers, data.final))
        checks += _trend_checks(data, th, (what,))
        checks.append(check_coverage(data, max_gap_fraction=float(th["stab_max_gap_fraction"])))
    elif what == "gpu":
        checks.append(check_gpu_recovered(data.baseline, data.final,
                                          tolerance_bytes=float(th["leak_gpu_tolerance_bytes"])))
    elif what == "ghosts":
        checks.append(check_ghost_clients(data.final, max_ghosts=int(th["leak_ghost_max"])))
    elif what == "series":
        checks.append(check_series_bounded(
            data.baseline, data.final, data.metrics, max_growth=float(th["leak_series_max_growth"]),
            noise=float(th["leak_series_noise"]), alpha=float(th["trend_alpha"]),
            min_samples=int(th["trend_min_samples"])))
    else:
        checks.append(Check("leak_kind", "plan names the leak check", {"leak": what}, None, "unknown leak kind"))
    labels = {"rss": "no RSS growth trend", "fd": "no FD growth trend", "gpu": "GPU memory back to the idle baseline",
              "ghosts": "no ghost clients after churn", "series": "metrics series bounded"}
    status, summary = combine(checks, pass_summary=f"{labels.get(str(what), 'ok')} over "
                              f"{data.checkpoint.get('rounds', 0)} round(s)")
    metrics = _soak_metrics(data)
    for c in checks:
        if c.name in ("rss_no_leak", "fd_no_leak"):
            judged = [v for v in c.values.get("series", {}).values() if v.get("judged")]
            if judged:
                worst = max(judged, key=lambda v: v["growth"])
                metrics.update({f"{c.name}_growth": worst["growth"], f"{c.name}_p_value": worst["p_value"],
                                f"{c.name}_per_hour": worst["per_hour"]})
    return Verdict(status, summary, checks, dict(th), metrics, _soak_files(ev))


def judge_fault(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    """FAIL-001..004 from ``plan.json`` (what the act saw and timed) and ``pods.json``:

    the fault was applied; the system recovered within ``fail_recovery_max_s`` (rollout complete and every
    scheduler healthy; after a drain, the replacements running elsewhere; after heavy load, metrics back);
    the cluster was restored (rollout ready / node uncordoned); every workload pod reached a terminal phase
    (none Pending forever); a probe pod started after recovery succeeded.
    """
    skipped = _skip(plan, th)
    if skipped:
        return skipped
    fault = plan.get("fault") or {}
    checks: list[Check] = []
    applied = fault.get("applied")
    if applied:
        applied_ok: bool | None = True
    elif fault.get("drain_failed"):
        applied_ok = False  # the drain itself failing is the system's failure (seed FAIL-003)
    else:
        applied_ok = None  # the harness could not inject the fault: nothing was judged
    checks.append(Check("fault_applied", f"{fault.get('kind', 'fault')} applied", {"fault": fault}, applied_ok,
                        "" if applied else str(fault.get("error") or "fault not applied")))
    rec = plan.get("recovery_s")
    limit = float(th["fail_recovery_max_s"])
    in_time = rec is not None and float(rec) <= limit
    detail = "" if in_time else (f"recovery took {rec:.1f}s" if rec is not None else "no recovery before the timeout")
    checks.append(Check("recovered_in_time", f"recovery_s <= {limit:g}",
                        {"recovery_s": rec, "what": plan.get("recovery_what")},
                        in_time if applied else None, detail))
    restored = plan.get("restored")
    checks.append(Check("cluster_restored", "rollout ready / node uncordoned in finally", {"restored": restored,
                        "detail": plan.get("restore_detail")}, restored if restored is not None else None,
                        "" if restored else str(plan.get("restore_detail") or "not restored")))
    pods = list(plan.get("load_pods") or []) + list(plan.get("replacement_pods") or [])
    if pods:
        checks.append(judge.check_terminal(ev.pods, pods))
    pending = [r.name for r in ev.pods if r.name in pods and r.phase == "Pending"]
    checks.append(Check("no_pod_pending_forever", "no workload pod still Pending at the end", {"pending": pending},
                        not pending, f"Pending: {', '.join(pending)}" if pending else ""))
    probe = plan.get("probe_pod")
    if probe:
        checks.append(judge.check_pods_succeeded(ev, [probe], check_name="probe_after_recovery"))
    for extra in plan.get("extra_checks") or []:
        checks.append(Check(extra["name"], extra["expression"], extra.get("values") or {}, extra.get("ok"),
                            extra.get("detail", "")))
    if plan.get("min_succeeded") is not None:
        ok = sum(1 for r in ev.pods if r.name in pods and r.phase == "Succeeded")
        need = int(plan["min_succeeded"])
        checks.append(Check("load_succeeded", f"succeeded >= {need}", {"succeeded": ok, "pods": len(pods)},
                            ok >= need, f"{ok} succeeded" if ok < need else ""))
    ok_pods = sum(1 for r in ev.pods if r.name in pods and r.phase == "Succeeded")
    status, summary = combine(checks, pass_summary=f"{fault.get('kind', 'fault')}: recovered in "
                              f"{rec if rec is None else round(rec, 1)}s, {ok_pods}/{len(pods)} workload pods "
                              "succeeded, probe passed")
    metrics = {"recovery_s": rec, "workload_pods": len(pods), "succeeded": ok_pods}
    return Verdict(status, summary, checks, dict(th), metrics, ev.pod_files())


def _soak_files(ev: Evidence) -> list[str]:
    names = ["soak/samples.csv", "soak/metrics.csv", "soak/schedulers.csv", "soak/rounds.jsonl",
             "soak/events.jsonl", "soak/baseline.json", "soak/final.json", "soak/checkpoint.json"]
    if ev.case_dir is not None:
        names = [n for n in names if (ev.case_dir / n).exists()]
        extra = [p.relative_to(ev.case_dir).as_posix() for p in sorted((ev.case_dir / SOAK).glob("*.md"))]
        extra += [p.relative_to(ev.case_dir).as_posix() for p in sorted((ev.case_dir / SOAK).glob("*.png"))]
        names += extra
    return names


def _hms(seconds: Any) -> str:
    s = int(float(seconds or 0))
    return f"{s // 3600}h{s % 3600 // 60:02d}m{s % 60:02d}s"
