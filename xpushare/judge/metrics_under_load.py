"""MET-006..008: the metrics over time and under load: utilisation against ``nvidia-smi dmon`` (MET-006),
the scrape stress series (MET-007) and the high-memory alert ratio (MET-008). Evidence and thresholds as
in :mod:`xpushare.judge.metrics` (the suite's public face, which re-exports these judgments).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from xpushare.evidence.scrape_capture import ScrapeRecord
from xpushare.evidence.store import Evidence
from xpushare.judge.metrics_evidence import (
    find_evidence,
    read_first_capture,
)
from xpushare.judge.metrics_exposition_checks import (
    metrics_verdict,
    missing_check,
    series_or_missing,
    th_value,
)
from xpushare.judge.stats import percentile
from xpushare.judge.thresholds import shown
from xpushare.model.verdict import Check, Verdict
from xpushare.parsers import dmon as dmon_parser
from xpushare.parsers.metrics import Exposition, parse_exposition


def _util_points(records: Sequence[ScrapeRecord], prefix: str | None) -> dict[str, list[tuple[float, float]]]:
    """``gpu_index -> [(t, util 0-1)]`` from the scrapes' ``gpu_utilization_ratio`` rows."""
    out: dict[str, list[tuple[float, float]]] = {}
    for r in records:
        if not (r.responded and r.body is not None):
            continue
        exp = parse_exposition(r.body, prefix)
        for s in exp.values("gpu_utilization_ratio"):
            if math.isfinite(s.value):
                out.setdefault(s.label("gpu_index") or "?", []).append((r.t, s.value))
    return out


def _align(points: Sequence[tuple[float, float]], sm: Sequence[float | None], interval_s: float,
           dmon_started_at: float | None) -> tuple[float | None, int, int | None]:
    """Mean |util×100 − sm| over aligned pairs, the pair count and the lag used (None: exact times).

    With ``dmon_started_at`` dmon row k is at ``dmon_started_at + k × interval_s``; each scrape pairs
    with the nearest row within one interval. Without it the scrapes (on a grid of ``interval_s``
    from the first) are slid along the dmon rows and the lag with the smallest mean difference is
    taken, needing an overlap of at least 80 % of the scrapes (3 at least).
    """
    if not points or not sm:
        return None, 0, None
    if dmon_started_at is not None:
        diffs = []
        for t, u in points:
            k = round((t - dmon_started_at) / interval_s)
            if 0 <= k < len(sm) and sm[k] is not None and abs(dmon_started_at + k * interval_s - t) <= interval_s:
                diffs.append(abs(u * 100 - float(sm[k])))  # type: ignore[arg-type]
        return (statistics.fmean(diffs) if diffs else None), len(diffs), None
    t0 = points[0][0]
    grid = [(round((t - t0) / interval_s), u * 100) for t, u in points]
    need = max(3, math.ceil(0.8 * len(grid))) if len(grid) >= 3 else len(grid)
    best: tuple[float, int, int] | None = None
    span = grid[-1][0]
    for lag in range(-span, len(sm)):
        diffs = [abs(u - float(sm[j + lag])) for j, u in grid  # type: ignore[arg-type]
                 if 0 <= j + lag < len(sm) and sm[j + lag] is not None]
        if len(diffs) < need:
            continue
        mad = statistics.fmean(diffs)
        if best is None or mad < best[0] - 1e-9 or (abs(mad - best[0]) <= 1e-9 and abs(lag) < abs(best[2])):
            best = (mad, len(diffs), lag)
    if best is None:
        return None, 0, None
    return best[0], best[1], best[2]


def judge_met006(ev: Evidence, th: Mapping[str, Any], *, node: str | None = None, gpu_index: int | str | None = None,
                 dmon_started_at: float | None = None, dmon_interval_s: float = 1.0,
                 prefix: str | None = None) -> Verdict:
    """MET-006: the utilisation metric rises under load and follows ``nvidia-smi dmon``'s ``sm`` column.

    Evidence: ``metrics_series.jsonl`` (``gpu_utilization_ratio`` per scrape) and
    ``remote_<node>_dmon.txt`` (the only ``remote_*_dmon.txt`` when ``node`` is None), parsed by
    :mod:`xpushare.parsers.dmon`, which finds ``sm`` from the header (column 1 under ``-s u``,
    column 4 in the default layout). ``gpu_index``: the pod's GPU (default: the GPU whose metric
    peaks highest). Checks: max metric ≥ ``met006_min_util``; max dmon sm ≥ the same in percent (the
    GPU really was busy); mean |util×100 − sm| over aligned samples ≤
    ``met006_max_mean_abs_diff_pct`` (aligned by ``dmon_started_at``, Unix s, when known; else by the
    best lag).
    """
    keys = ["met006_min_util", "met006_max_mean_abs_diff_pct"]
    loaded = series_or_missing(ev, th, keys, "metric_util_rises")
    if isinstance(loaded, Verdict):
        return loaded
    records, _ = loaded
    evidence = ["metrics_series.jsonl"]
    points = _util_points(records, prefix)
    checks: list[Check] = []
    min_util = float(th_value(th, "met006_min_util"))
    if not points:
        checks.append(Check("metric_util_rises", f"max(gpu_utilization_ratio) >= {min_util}", {}, None,
                            "no gpu_utilization_ratio sample in the series (no sampler backend?)"))
        return metrics_verdict(checks, th, keys, {}, evidence, "")
    gpu = str(gpu_index) if gpu_index is not None else max(points, key=lambda g: max(u for _, u in points[g]))
    series = points.get(gpu, [])
    max_util = max((u for _, u in series), default=None)
    checks.append(Check("metric_util_rises", f"max(gpu_utilization_ratio{{gpu_index={gpu}}}) >= {min_util}",
                        {"max_util": max_util, "samples": len(series)},
                        None if max_util is None else max_util >= min_util,
                        "no sample for that GPU" if max_util is None
                        else ("" if max_util >= min_util else f"peak {shown(max_util, min_util)}")))
    dmon_names = [f"remote_{node}_dmon.txt"] if node else find_evidence(ev, "remote_", "_dmon.txt")
    dmon_texts = [(n, t) for n in dmon_names if (t := ev.text(n)) is not None]
    metrics: dict[str, Any] = {"max_gpu_util_ratio": max_util, "gpu_index": gpu}
    if len(dmon_texts) != 1:
        detail = "no dmon capture" if not dmon_texts else f"several dmon captures, name the node: {dmon_names}"
        checks.append(Check("dmon_follows", "metrics follow dmon sm", {"files": dmon_names}, None, detail))
        return metrics_verdict(checks, th, keys, metrics, evidence, "")
    dname, dtext = dmon_texts[0]
    evidence.append(dname)
    parsed = dmon_parser.parse(dtext)
    if not parsed.has_column("sm"):
        checks.append(Check("dmon_follows", "dmon capture has an sm column", {"columns": list(parsed.columns)}, None,
                            f"{dname} has no sm column (dmon run without -s u?)"))
        return metrics_verdict(checks, th, keys, metrics, evidence, "")
    sm = dmon_parser.sm_series(parsed, gpu)
    sm_max = max((v for v in sm if v is not None), default=None)
    metrics["max_dmon_sm_pct"] = sm_max
    checks.append(Check("dmon_sm_rises", f"max(dmon sm, gpu {gpu}) >= {min_util * 100:g}",
                        {"max_sm_pct": sm_max, "rows": len(sm)}, None if sm_max is None else sm_max >= min_util * 100,
                        f"no dmon rows for GPU {gpu}" if sm_max is None
                        else ("" if sm_max >= min_util * 100 else f"dmon peak {sm_max:g} %: the GPU was not busy")))
    mad, pairs, lag = _align(series, sm, dmon_interval_s, dmon_started_at)
    limit = float(th_value(th, "met006_max_mean_abs_diff_pct"))
    how = "dmon_started_at" if dmon_started_at is not None else f"best lag {lag} rows"
    metrics.update({"mean_abs_diff_pct": None if mad is None else round(mad, 2), "aligned_pairs": pairs,
                    "alignment": how})
    checks.append(Check("dmon_follows", f"mean(|util×100 − sm|) <= {limit:g} points ({how})",
                        {"mean_abs_diff_pct": mad, "pairs": pairs, "lag": lag}, None if mad is None else mad <= limit,
                        "no overlapping samples of metrics and dmon" if mad is None
                        else ("" if mad <= limit else f"differs by {mad:.1f} points on average")))
    return metrics_verdict(checks, th, keys, metrics, evidence,
                    f"utilisation peaks at {max_util or 0:.2f} and follows dmon sm (±{mad or 0:.1f} points)")


def _record_ok(r: ScrapeRecord, prefix: str | None) -> bool:
    if not r.responded:
        return False
    if r.body is None:
        return True
    exp = parse_exposition(r.body, prefix)
    return exp.ok and exp.prefix is not None and exp.series_count() > 0


def judge_met007(ev: Evidence, th: Mapping[str, Any], *, prefix: str | None = None) -> Verdict:
    """MET-007: scraping every 2 s for the configured duration succeeds every time; the scheduler stays healthy.

    Evidence: ``metrics_series.jsonl`` (the stress scrapes, kept bodies must parse and hold SUT
    samples) and ``metrics_health.txt`` taken after the stress. Checks: scrapes ≥
    ``met007_duration_s / met007_interval_s`` spanning the duration; success ratio ≥
    ``met007_min_success_ratio`` (1.0: every scrape); median start-to-start gap ≤ 1.5 × interval (a
    scraper that fell behind did not scrape at 2 s); p99 latency ≤ ``met007_max_p99_latency_s``;
    ``/healthz`` 200 after. Metrics: ``scrape_latency_p50_s``, ``scrape_latency_p99_s``.
    """
    keys = ["met007_duration_s", "met007_interval_s", "met007_min_success_ratio", "met007_max_p99_latency_s"]
    loaded = series_or_missing(ev, th, keys, "scrapes")
    if isinstance(loaded, Verdict):
        return loaded
    records, bad_lines = loaded
    duration = float(th_value(th, "met007_duration_s"))
    interval = float(th_value(th, "met007_interval_s"))
    expected = max(1, int(duration / interval))
    span = (records[-1].t - records[0].t) if records else 0.0
    flags = [_record_ok(r, prefix) for r in records]
    ok = [r for r, good in zip(records, flags, strict=True) if good]
    failures = [r for r, good in zip(records, flags, strict=True) if not good]
    ratio = len(ok) / len(records) if records else 0.0
    gaps = [b.t - a.t for a, b in itertools.pairwise(records)]
    median_gap = statistics.median(gaps) if gaps else None
    lat = [r.latency_s for r in ok]
    p50, p99 = percentile(lat, 50), percentile(lat, 99)
    checks = [
        Check("scrape_count", f"scrapes >= {expected} over >= {duration - interval:g} s",
              {"scrapes": len(records), "span_s": round(span, 3), "unreadable_lines": bad_lines},
              len(records) >= expected and span >= duration - interval,
              "" if len(records) >= expected and span >= duration - interval
              else f"{len(records)} scrapes over {span:.1f} s"),
        Check("scrape_success", f"success_ratio >= {th_value(th, 'met007_min_success_ratio')}",
              {"ok": len(ok), "total": len(records),
               "first_failures": [{"t": r.t, "status": r.status, "error": r.error} for r in failures[:5]]},
              bool(records) and ratio >= float(th_value(th, "met007_min_success_ratio")),
              "" if records and not failures else f"{len(failures)}/{len(records)} scrapes failed"
              + (f" (first: {failures[0].error or failures[0].status})" if failures else "")),
        Check("scrape_cadence", f"median gap <= {1.5 * interval:g} s", {"median_gap_s": median_gap},
              None if median_gap is None else median_gap <= 1.5 * interval,
              "fewer than 2 scrapes" if median_gap is None
              else ("" if median_gap <= 1.5 * interval else f"median gap {median_gap:.2f} s")),
        Check("scrape_latency_p99", f"p99 latency <= {th_value(th, 'met007_max_p99_latency_s')} s",
              {"p50_s": p50, "p99_s": p99},
              None if p99 is None else p99 <= float(th_value(th, "met007_max_p99_latency_s")),
              "no successful scrape" if p99 is None
              else ("" if p99 <= float(th_value(th, "met007_max_p99_latency_s")) else f"p99 {p99:.3f} s")),
    ]
    evidence = ["metrics_series.jsonl"]
    _, health = read_first_capture(ev, ["metrics_health.txt"])
    if health is None:
        checks.append(missing_check("healthz_after", "metrics_health.txt"))
    else:
        evidence.append("metrics_health.txt")
        good = health.http_code == 200 and health.body.strip() == "OK"
        checks.append(Check("healthz_after", "/healthz == 200 OK after the stress",
                            {"http_code": health.http_code, "body": health.body.strip()[:40]}, good,
                            "" if good else f"/healthz {health.http_code} {health.body.strip()[:40]!r}"))
    metrics = {"metrics_stress_sample_count": len(records), "success_ratio": round(ratio, 4),
               "scrape_latency_p50_s": p50, "scrape_latency_p99_s": p99, "median_gap_s": median_gap}
    pass_summary = (f"{len(records)} scrapes over {span:.0f} s, all succeeded; latency p50 {p50 or 0:.3f} s, "
                    f"p99 {p99 or 0:.3f} s")
    return metrics_verdict(checks, th, keys, metrics, evidence, pass_summary)


def _ratios(exp: Exposition, num: str, den: str) -> dict[str, float]:
    """``num / den`` per ``(gpu_uuid, gpu_index)`` series, as ``"uuid/index" -> ratio`` (den > 0 only)."""
    dens = {(s.label("gpu_uuid"), s.label("gpu_index")): s.value for s in exp.values(den)}
    out: dict[str, float] = {}
    for s in exp.values(num):
        key = (s.label("gpu_uuid"), s.label("gpu_index"))
        d = dens.get(key)
        if d is not None and d > 0 and math.isfinite(s.value):
            out[f"{key[0]}/{key[1]}"] = s.value / d
    return out


def judge_met008(ev: Evidence, th: Mapping[str, Any], *, prefix: str | None = None) -> Verdict:
    """MET-008: the high-memory alert ``used / total > met008_alert_ratio`` trips on the scraped samples.

    Evidence: ``metrics_series.jsonl`` during a high-memory workload. The alert expression, as a
    Prometheus rule would evaluate it, per device (never summed over GPUs): with GPU rows
    ``gpu_memory_used_bytes / gpu_memory_total_bytes`` (seed 000 §11.2 item 1); without a sampler
    backend ``scheduler_running_memory_bytes / scheduler_memory_safe_limit_bytes``, or
    ``scheduler_memory_overloaded == 1``. It trips when it holds on consecutive scrapes for at least
    ``met008_for_s`` seconds (0: one scrape). Metrics: ``peak_gpu_memory_used_ratio`` and the time
    of the first trip.
    """
    keys = ["met008_alert_ratio", "met008_for_s"]
    loaded = series_or_missing(ev, th, keys, "alert_trips")
    if isinstance(loaded, Verdict):
        return loaded
    records, _ = loaded
    threshold = float(th_value(th, "met008_alert_ratio"))
    for_s = float(th_value(th, "met008_for_s"))
    expression = ""
    firing_since: dict[str, float] = {}
    tripped: tuple[str, float] | None = None
    peak: dict[str, float] = {}
    evaluated = 0
    for r in records:
        if not (r.responded and r.body is not None):
            firing_since.clear()  # a failed scrape breaks `for:` as in Prometheus (series absent)
            continue
        exp = parse_exposition(r.body, prefix)
        ratios = _ratios(exp, "gpu_memory_used_bytes", "gpu_memory_total_bytes")
        expr = f"gpu_memory_used_bytes / gpu_memory_total_bytes > {threshold:g}"
        if not ratios:
            ratios = _ratios(exp, "scheduler_running_memory_bytes", "scheduler_memory_safe_limit_bytes")
            for s in exp.values("scheduler_memory_overloaded"):
                if s.value >= 1:
                    key = f"{s.label('gpu_uuid')}/{s.label('gpu_index')}"
                    ratios[key] = max(ratios.get(key, 0.0), math.inf)
            expr = (f"scheduler_running_memory_bytes / scheduler_memory_safe_limit_bytes > {threshold:g}"
                    " or scheduler_memory_overloaded == 1")
        if not ratios:
            continue
        evaluated += 1
        expression = expression or expr
        for key, ratio in ratios.items():
            peak[key] = max(peak.get(key, 0.0), ratio)
            if ratio > threshold:
                since = firing_since.setdefault(key, r.t)
                if tripped is None and r.t - since >= for_s:
                    tripped = (key, r.t)
            else:
                firing_since.pop(key, None)
    top = max(peak.values(), default=None)
    metrics = {"peak_gpu_memory_used_ratio": None if top is None else (round(top, 4) if math.isfinite(top) else top),
               "peak_by_gpu": {k: (round(v, 4) if math.isfinite(v) else "overloaded") for k, v in peak.items()},
               "evaluated_scrapes": evaluated,
               "first_trip": None if tripped is None else {"series": tripped[0], "t": tripped[1]}}
    if evaluated == 0:
        check = Check("alert_trips", f"used / total > {threshold:g}", {"scrapes": len(records)}, None,
                      "no scrape held the memory series the alert needs")
    else:
        check = Check("alert_trips", f"{expression} for >= {for_s:g} s", {"peak": metrics["peak_by_gpu"]},
                      tripped is not None,
                      "" if tripped is not None else f"peak ratio {top:.3f} never above {threshold:g}")
    pass_summary = (f"alert fired on {tripped[0]} (peak ratio {top:.2f} > {threshold:g})" if tripped and top is not None
                    else "")
    return metrics_verdict([check], th, keys, metrics, ["metrics_series.jsonl"], pass_summary)
