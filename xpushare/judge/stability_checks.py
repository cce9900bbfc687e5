"""The checks of the STAB/LEAK/FAIL judgments: trends per scheduler process, restarts, rounds, sampling
coverage, GPU memory back to the baseline, ghost clients, bounded series, log storms and protocol errors,
dynamic updates applied. Each returns a :class:`~xpushare.model.verdict.Check` (``ok=None``: not evaluable).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from xpushare.judge.quantity import parse_quantity
from xpushare.judge.stability_evidence import (
    SoakData,
    number_or_none,
    process_series,
)
from xpushare.judge.trend import Trend, fit
from xpushare.model.verdict import Check
from xpushare.parsers.pod_log import strip_timestamp
from xpushare.parsers.scheduler_log_parser import SchedulerLogParser
from xpushare.parsers.scheduler_log_records import SchedulerLogSummary


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
        uid, restarts = r.get("uid"), number_or_none(str(r.get("restarts")))
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


def check_clients_registered(rounds: Sequence[Mapping[str, Any]], summary: SchedulerLogSummary | None) -> Check:
    """The premise of every trend and churn check: the scheduler served the rounds' clients.

    ``rounds``: ``soak/rounds.jsonl`` records (their ``pods``, for the completed and timed-out rounds);
    ``summary``: the case's scheduler log parsed (:func:`scan_scheduler_log`), None when there is none.
    A scheduler that registered no client over rounds of pods measured nothing: a flat RSS or FD series then
    says nothing about a leak per registration, so ``ok`` is None (ERROR naming the premise), never True. At
    least one registration is True; the count against the pods is in the values (a long soak's log may have
    lost its oldest lines to rotation, so fewer registrations than pods is recorded, not judged)."""
    pods = sum(int(r.get("pods", 0)) for r in rounds if r.get("status") in ("completed", "timeout"))
    expr = "the scheduler log has >= 1 client registration when the rounds ran pods"
    if summary is None:
        return Check("clients_registered", expr, {"pods": pods}, None,
                     "premise unmet: sut: no scheduler log, so no client registration can be shown")
    values = {"pods": pods, "registrations": summary.registrations_total, "sources": ["soak/rounds.jsonl",
              "scheduler.log (Registered client lines)"]}
    if pods and not summary.registrations_total:
        return Check("clients_registered", expr, values, None, f"premise unmet: sut: the scheduler registered no "
                     f"client over {pods} pod(s) of the rounds: nothing was measured")
    return Check("clients_registered", expr, values, True if pods else None, "" if pods else "no pods ran")


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
        t, v = number_or_none(r.get("ts")), number_or_none(r.get("series_total"))
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


def check_log_storm(scan: LogScan, *, floor_per_min: float, factor: float, span_s: float | None = None) -> Check:
    """No log storm (STAB-002 "日志无异常风暴"): no minute holds more than ``max(floor_per_min, factor ×
    median lines per minute)`` scheduler log lines.

    A log without timestamps (a host-mode scheduler writing to its own file) cannot be split by minute: then,
    given the soak's active seconds ``span_s``, its mean rate must stay under ``floor_per_min`` (a weaker test,
    named in the values); without ``span_s`` nothing is judged."""
    counts = sorted(scan.per_minute.values())
    expr = f"max lines per minute <= max({floor_per_min:g}, {factor:g} x median lines per minute)"
    if not counts and scan.lines and span_s:
        rate = scan.lines / max(span_s / 60.0, 1.0)
        values = {"lines": scan.lines, "span_s": span_s, "mean_per_min": round(rate, 1),
                  "note": "log lines carry no timestamps: the mean rate over the soak is judged"}
        return Check("no_log_storm", f"mean lines per minute <= {floor_per_min:g} (untimestamped log)", values,
                     rate <= floor_per_min, f"{rate:.0f} lines per minute on average" if rate > floor_per_min else "")
    if not counts:
        return Check("no_log_storm", expr, {"lines": scan.lines}, None, "no timestamped scheduler log lines")
    median = statistics.median(counts)
    limit = max(floor_per_min, factor * median)
    peak_minute, peak = max(scan.per_minute.items(), key=lambda kv: kv[1])
    values = {"lines": scan.lines, "minutes": len(counts), "median_per_min": median, "max_per_min": peak,
              "limit_per_min": limit, "peak_minute_unix": peak_minute * 60}
    return Check("no_log_storm", expr, values, peak <= limit,
                 f"{peak} lines in one minute (limit {limit:g})" if peak > limit else "")


def check_scheduler_log_clean(summary: SchedulerLogSummary, rounds: Sequence[Mapping[str, Any]], *,
                              max_protocol_errors: int, exit_race_s: float) -> Check:
    """No FATAL line and at most ``max_protocol_errors`` send/receive failures in the scheduler log
    (STAB-004 "无协议异常").

    A failure on a client whose pod ended within ``exit_race_s`` seconds of it is a disconnect at exit, not a
    protocol error: the scheduler had a message (a DROP_LOCK at the end of a quantum, a LOCK_OK) in flight when
    the process exited, and the kernel answered with a reset (scheduler.c treats every such errno as a dead
    client). The pod comes from the client's ``Registered client`` line, its end from ``rounds`` (the soak's
    per-pod ``finished``, Unix seconds, whole seconds from the kubelet), and it must have Succeeded: a client
    the scheduler dropped while it worked exits on its broken socket (client.c ``true_or_exit``), and that
    pod Failed within the same seconds. A failure without a timestamp, a registration or a known successful
    end counts as a protocol error: nothing shows the client was leaving of its own accord."""
    succeeded = _succeeded(rounds)
    finished = {name: end for name, end in _finish_times(rounds).items() if name in succeeded}
    pods: dict[str, list[tuple[int, str]]] = {}
    for reg in summary.registrations:
        pods.setdefault(reg.cid, []).append((reg.lineno, reg.pod.lower()))
    at_exit: list[str] = []
    errors: list[str] = []
    for failure in summary.connection_failures:
        # the client's latest registration before the failure (ids are not unique across nodes' schedulers)
        pod = max((p for p in pods.get(failure.cid, ()) if p[0] < failure.lineno), default=(0, None))[1]
        end = finished.get(pod) if pod else None
        when = failure.ts.timestamp() if failure.ts else None
        text = f"{failure.kind} {failure.cid} ({pod or 'unregistered'}) line {failure.lineno}"
        if when is not None and end is not None and -exit_race_s <= when - end <= exit_race_s + 1.0:
            at_exit.append(text)
        else:
            errors.append(text)
    errors += ["failure past the parser's event cap"] * (summary.send_failures + summary.receive_failures
                                                          - len(summary.connection_failures))
    values = {"fatal": summary.fatal_count, "send_failures": summary.send_failures,
              "receive_failures": summary.receive_failures, "protocol_errors": errors[:20],
              "disconnects_at_exit": at_exit[:20], "exit_race_s": exit_race_s, "starts": summary.starts,
              "fatal_lines": [ln.text for ln in summary.fatal_lines[:5]]}
    ok = summary.fatal_count == 0 and len(errors) <= max_protocol_errors
    detail = "" if ok else f"{summary.fatal_count} FATAL line(s), {len(errors)} protocol error(s)" + (
        f": {'; '.join(errors[:3])}" if errors else "")
    return Check("scheduler_log_clean", f"fatal == 0 and send/receive failures <= {max_protocol_errors} (a failure "
                 f"within {exit_race_s:g} s of its pod's end is a disconnect at exit)", values, ok, detail)


def _succeeded(rounds: Sequence[Mapping[str, Any]]) -> set[str]:
    return {name.lower() for r in rounds for name, info in (r.get("detail") or {}).items()
            if info.get("phase") == "Succeeded"}


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
