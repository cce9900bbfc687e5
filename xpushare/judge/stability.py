"""Judgments of the stability, leak and fault cases (seed 000 §6 P0/P2, §10, §14.4, §16.6, §17.6).

Pure functions: they read the case directory through :class:`~xpushare.evidence.store.Evidence` (the soak's
series under ``soak/``, ``plan.json``, ``pods.json``, the scheduler log) and never live state, so
``invoke judge`` re-judges a stored soak offline with other thresholds.

Leaks are judged by the trend, never first-vs-last (seed §14.4): per scheduler process (node, pid; a
restart starts a new series) the RSS / FD series is fitted by least squares (:func:`xpushare.judge.trend.fit`).
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

from collections.abc import Mapping, Sequence
from typing import Any

from xpushare.evidence.store import Evidence
from xpushare.judge.checks import check_pods_succeeded, check_terminal, plan_skip
from xpushare.judge.stability_checks import (
    check_clients_registered,
    check_coverage,
    check_ghost_clients,
    check_gpu_recovered,
    check_log_storm,
    check_restarts,
    check_rounds,
    check_scheduler_log_clean,
    check_series_bounded,
    check_trend,
    check_updates_applied,
    scan_scheduler_log,
)
from xpushare.judge.stability_evidence import (
    SOAK,
    SoakData,
    has_scheduler_log,
    load_soak,
    process_series,
    scheduler_log_lines,
)
from xpushare.judge.thresholds import used
from xpushare.model.verdict import Check, Status, Verdict, combine

__all__ = [
    "SoakData",
    "check_clients_registered",
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
    "scan_scheduler_log",
]


# ------------------------------------------------------------------------------------------- case judges


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


def _soak_or_verdict(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> SoakData | Verdict:
    """The soak's evidence, or the verdict without it: the plan's skip, else ERROR when there is no soak."""
    skipped = plan_skip(plan, th)
    if skipped:
        return skipped
    data = load_soak(ev)
    if not data.present:
        return Verdict(Status.ERROR, "no soak evidence (soak/checkpoint.json, samples) in the case directory", [],
                       used(th))
    return data


def judge_stab(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    """STAB-001..004: the rounds ran and ended; the scheduler never restarted; RSS/FD show no sustained
    growth; sampling covered the run; GPU memory returned to the idle baseline and no ghost client was left;
    the scheduler log is free of FATAL lines/protocol errors and of storms; STAB-003/004 also check that the
    periodic quota changes took effect."""
    data = _soak_or_verdict(ev, th, plan)
    if isinstance(data, Verdict):
        return data
    checks: list[Check] = []
    checks += check_rounds(data.rounds, min_success_ratio=float(th["stab_min_success_ratio"]))
    checks.append(check_restarts(data.baseline, data.schedulers, data.final))
    checks += _trend_checks(data, th, ("rss", "fd"))
    checks.append(check_coverage(data, max_gap_fraction=float(th["stab_max_gap_fraction"])))
    checks.append(check_gpu_recovered(data.baseline, data.final, tolerance_bytes=float(th["leak_gpu_tolerance_bytes"])))
    checks.append(check_ghost_clients(data.final, max_ghosts=int(th["leak_ghost_max"])))
    if has_scheduler_log(ev):
        scan = scan_scheduler_log(scheduler_log_lines(ev))
        checks.append(check_clients_registered(data.rounds, scan.summary))
        checks.append(check_scheduler_log_clean(scan.summary, data.rounds,
                                                max_protocol_errors=int(th["stab_max_protocol_errors"]),
                                                exit_race_s=float(th["stab_exit_race_s"])))
        active = data.checkpoint.get("active_s")
        checks.append(check_log_storm(scan, floor_per_min=float(th["stab_log_storm_floor_per_min"]),
                                      factor=float(th["stab_log_storm_factor"]),
                                      span_s=float(active) if isinstance(active, (int, float)) else None))
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
    return Verdict(status, summary, checks, used(th), _soak_metrics(data), _soak_files(ev))


def judge_leak(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    """LEAK-001..005 by ``plan["leak"]``: ``rss`` / ``fd`` (trend, and no restart: a restart resets the
    series), ``gpu`` (memory back to the idle baseline), ``ghosts`` (no client_info of our pods after churn),
    ``series`` (series count bounded). The rounds must have run and ended in every case, and but for ``gpu``
    the scheduler must have registered their clients (:func:`check_clients_registered`: else ERROR naming the
    ``sut`` premise, as a flat series of a scheduler that served no client measures nothing)."""
    data = _soak_or_verdict(ev, th, plan)
    if isinstance(data, Verdict):
        return data
    what = plan.get("leak")
    checks = check_rounds(data.rounds, min_success_ratio=0.0)[:2]
    if what != "gpu":  # GPU memory returns to the driver whether or not the scheduler saw the clients
        log = scan_scheduler_log(scheduler_log_lines(ev)).summary if has_scheduler_log(ev) else None
        checks.append(check_clients_registered(data.rounds, log))
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
    return Verdict(status, summary, checks, used(th), metrics, _soak_files(ev))


def judge_fault(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    """FAIL-001..004 from ``plan.json`` (what the act saw and timed) and ``pods.json``:

    the fault was applied; the system recovered within ``fail_recovery_max_s`` (rollout complete and every
    scheduler healthy; after a drain, the replacements running elsewhere; after heavy load, metrics back);
    the cluster was restored (rollout ready / node uncordoned); every workload pod reached a terminal phase
    (none Pending forever); a probe pod started after recovery succeeded.
    """
    skipped = plan_skip(plan, th)
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
        checks.append(check_terminal(ev.pods, pods))
    pending = [r.name for r in ev.pods if r.name in pods and r.phase == "Pending"]
    checks.append(Check("no_pod_pending_forever", "no workload pod still Pending at the end", {"pending": pending},
                        not pending, f"Pending: {', '.join(pending)}" if pending else ""))
    probe = plan.get("probe_pod")
    if probe:
        checks.append(check_pods_succeeded(ev, [probe], check_name="probe_after_recovery"))
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
    return Verdict(status, summary, checks, used(th), metrics, ev.pod_files())


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
