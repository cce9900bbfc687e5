"""Judgments of the performance suite PERF-001..011 (seed 000 sections 6 P1, 9, 16.4, 17.4).

Pure functions from a case's stored evidence (:class:`~xpushare.evidence.Evidence`: ``pods.json``,
``pods/*.log``, ``scheduler.log``, ``annotations.jsonl``, scraped metrics files) and the case's
``plan.json`` to a :class:`~xpushare.model.Verdict`; nothing here reads live state, so
``invoke judge --run-id X --set perf_quota_tolerance=0.1`` re-judges a stored run offline.

Quota model (sut-interfaces.md §5.2): a core limit is a hard cap. A pod at ``q`` % alone on its GPU runs
``100 / q`` times as long as the same workload without a limit (its baseline ``B``). Limits of one GPU
that sum to ``S > 100`` are scaled by ``100 / S``. Hence the ideal runtime of a pod is
``B * 100 / q_eff`` and its **error** is ``runtime / ideal - 1`` (a fraction: -0.05 = 5 % faster than
ideal, i.e. the cap let through 5 % more compute than configured). Unlike the bash harness (±40 %), the
seed's tolerances are the defaults: ±8 % single task, ±10 % mixed on one GPU, ±12 % on a T4.

Every ratio is recorded with its inputs in the verdict's metrics (runtimes in seconds, ratios unitless).
Common measurements of every case (recorded, not judged): GPU utilisation p50/p95 per GPU from
``remote_<node>_dmon.txt`` (``sm`` column, percent) or the node sampler's ``sampler/<host>_gpu.csv``, and
the scheduler's LOCK_OK / DROP_LOCK counts and rates (per second over the log's time span).
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from xpushare.collect import dmon, pod_log
from xpushare.collect.metrics import parse_exposition
from xpushare.collect.scheduler_log import parse_text
from xpushare.evidence import Evidence
from xpushare.judge import check_pods_succeeded, check_terminal, pod_progress
from xpushare.judge_quota import annotation_calls, check_dynamic_change
from xpushare.model import Check, Status, Verdict, combine

# ------------------------------------------------------------------------------------------------ helpers


def ideal_factor(quota: float, co_quotas: Sequence[float] = ()) -> float:
    """Ideal runtime / baseline runtime of a pod at ``quota`` % (hard cap, sut-interfaces.md §5.2).

    ``co_quotas``: every limited quota on the same GPU, this pod's included; when they sum to
    ``S > 100`` each budget is scaled by ``100 / S``. A quota of 100 (or more) means no limit (factor 1).
    Raises ValueError for a quota <= 0.
    """
    if quota <= 0:
        raise ValueError(f"quota must be > 0, not {quota}")
    if quota >= 100:
        return 1.0
    total = sum(q for q in co_quotas if q < 100) or quota
    effective = quota * 100 / total if total > 100 else quota
    return 100 / effective


def runtime_error(runtime_s: float, baseline_s: float, factor: float) -> float:
    """``runtime / (baseline * factor) - 1``: the relative error of a runtime against its ideal."""
    return runtime_s / (baseline_s * factor) - 1


def tolerance_for(th: Mapping[str, Any], plan: Mapping[str, Any], *, mixed: bool) -> tuple[float, str]:
    """The quota tolerance (fraction) that applies, and the name of the parameter it came from.

    Single task: ``perf_quota_tolerance`` (0.08). Mixed on one GPU: ``perf_mixed_tolerance`` (0.10), or
    ``perf_mixed_tolerance_t4`` (0.12) when the plan's GPU model names a T4 (seed 000 section 6 P1).
    """
    if not mixed:
        return float(th["perf_quota_tolerance"]), "perf_quota_tolerance"
    model = str(plan.get("gpu_model") or "").upper()
    if "T4" in model and th.get("perf_mixed_tolerance_t4") is not None:
        return float(th["perf_mixed_tolerance_t4"]), "perf_mixed_tolerance_t4"
    return float(th["perf_mixed_tolerance"]), "perf_mixed_tolerance"


def percentile(values: Sequence[float], pct: float) -> float | None:
    """Linear-interpolated percentile (0..100) of ``values``; None when empty."""
    data = sorted(values)
    if not data:
        return None
    k = (len(data) - 1) * pct / 100
    lo, hi = math.floor(k), math.ceil(k)
    return data[lo] + (data[hi] - data[lo]) * (k - lo)


def _median(values: Sequence[float]) -> float | None:
    return percentile(values, 50)


def _r(value: float | None, nd: int = 4) -> float | None:
    return None if value is None else round(value, nd)


def gpu_utilisation(ev: Evidence) -> dict[str, Any]:
    """SM utilisation p50/p95 (percent) per GPU, from dmon (``remote_*_dmon.txt``) or the node sampler.

    Returns ``{"source": "dmon"|"sampler"|None, "gpus": {"<node>/gpu<idx>": {"p50", "p95", "samples"}}}``.
    Only files listed in the case dir are read; an absent source is ``source: None`` (not an error).
    """
    out: dict[str, Any] = {"source": None, "gpus": {}}
    if ev.case_dir is None:
        names = [n for n in ev.files if n.endswith("_dmon.txt") or n.endswith("_gpu.csv")]
    else:
        names = sorted(p.relative_to(ev.case_dir).as_posix() for p in ev.case_dir.glob("remote_*_dmon.txt"))
        names += sorted(p.relative_to(ev.case_dir).as_posix() for p in ev.case_dir.glob("sampler/*_gpu.csv"))
    for name in names:
        text = ev.text(name) or ""
        if name.endswith("_dmon.txt"):
            node = name.removeprefix("remote_").removesuffix("_dmon.txt")
            parsed = dmon.parse(text)
            for gpu in parsed.gpus():
                vals = [v for v in dmon.sm_series(parsed, gpu) if v is not None]
                if vals:
                    out["source"] = out["source"] or "dmon"
                    out["gpus"][f"{node}/gpu{gpu}"] = _util_row(vals)
        else:
            host = name.removeprefix("sampler/").removesuffix("_gpu.csv")
            per: dict[str, list[float]] = {}
            for row in csv.DictReader(io.StringIO(text)):
                try:
                    per.setdefault(row.get("gpu_index") or "?", []).append(float(row["sm_util_pct"]))
                except (KeyError, TypeError, ValueError):
                    continue
            for gpu, vals in per.items():
                out["source"] = out["source"] or "sampler"
                out["gpus"][f"{host}/gpu{gpu}"] = _util_row(vals)
    return out


def _util_row(vals: Sequence[float]) -> dict[str, Any]:
    return {"p50": _r(percentile(vals, 50), 1), "p95": _r(percentile(vals, 95), 1), "samples": len(vals)}


def scheduler_rates(ev: Evidence) -> dict[str, Any] | None:
    """LOCK_OK / DROP_LOCK sends and throttles in ``scheduler.log``, with rates per second over its span.

    None without a scheduler log. The span is first to last kubectl timestamp (None without timestamps).
    """
    text = ev.text("scheduler.log")
    if text is None:
        return None
    s = parse_text(text)
    span = (s.last_ts - s.first_ts).total_seconds() if s.first_ts and s.last_ts else None
    lock, drop = s.sent.get("LOCK_OK", 0), s.sent.get("DROP_LOCK", 0)

    def rate(n: int) -> float | None:
        return round(n / span, 4) if span else None

    return {
        "lock_ok": lock,
        "drop_lock": drop,
        "throttles": s.throttles,
        "span_s": _r(span, 3),
        "lock_ok_per_s": rate(lock),
        "drop_lock_per_s": rate(drop),
    }


def common_measurements(ev: Evidence) -> dict[str, Any]:
    """The measurements every PERF verdict records: ``gpu_util`` and ``scheduler`` (see the module doc)."""
    return {"gpu_util": gpu_utilisation(ev), "scheduler": scheduler_rates(ev)}


def _verdict(
    ev: Evidence, th: Mapping[str, Any], checks: list[Check], metrics: dict[str, Any], pass_summary: str
) -> Verdict:
    status, summary = combine(checks, pass_summary=pass_summary)
    return Verdict(status, summary, checks, dict(th), {**metrics, **common_measurements(ev)}, ev.pod_files())


def _skip(ev: Evidence, th: Mapping[str, Any], reason: str, checks: list[Check] | None = None,
          metrics: dict[str, Any] | None = None) -> Verdict:
    return Verdict(Status.SKIP, reason, checks or [], dict(th), metrics or {}, ev.pod_files())


def runtimes(ev: Evidence, pods: Sequence[str]) -> dict[str, float | None]:
    """Runtime in seconds (the last ``--- N seconds ---``) of each pod; None where missing."""
    return {p: pod_progress(ev, p)["runtime_s"] for p in pods}


def check_baseline(ev: Evidence, th: Mapping[str, Any], pods: Sequence[str]) -> tuple[list[Check], float | None]:
    """The baseline pods passed and their median runtime is at least ``perf_baseline_min_s``.

    A baseline shorter than the guard is unevaluable (ERROR, never PASS or FAIL): quota windows
    (2-4 s on the SUT) would quantise the ratios by more than the tolerance. Returns the checks and the
    baseline (median runtime, s) or None.
    """
    checks = [check_succeeded(ev, pods, "baseline_succeeded")]
    vals = [v for v in runtimes(ev, pods).values() if v is not None]
    base = _median(vals)
    minimum = float(th["perf_baseline_min_s"])
    if base is None:
        checks.append(Check("baseline_runtime", f"baseline_s >= {minimum}", {"baseline_s": None}, None,
                            "no baseline runtime"))
        return checks, None
    ok = base >= minimum
    checks.append(
        Check(
            "baseline_long_enough",
            f"baseline_s >= perf_baseline_min_s ({minimum})",
            {"baseline_s": round(base, 3), "samples": len(vals)},
            True if ok else None,
            "" if ok else f"baseline {base:.2f} s < {minimum} s: too short to measure; lengthen the workload "
            "(workload_args) or lower perf_baseline_min_s",
        )
    )
    return checks, base


def check_succeeded(ev: Evidence, pods: Sequence[str], name: str = "pods_succeeded") -> Check:
    """Terminal and succeeded (exit 0, PASS, runtime) folded into one check named ``name``."""
    term = check_terminal(ev.pods, pods)
    if term.ok is False:
        return Check(name, term.expression, term.values, False, term.detail)
    return check_pods_succeeded(ev, pods, check_name=name)


# ------------------------------------------------------------------------------------------------ PERF-001


def judge_baseline(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    """PERF-001: the baseline workload (W6 on CUDA, W7 on NPU) without a quota, per GPU model.

    PASS: every baseline pod succeeded and the median runtime >= ``perf_baseline_min_s``. Metrics:
    ``baseline_runtime_s`` (median), every sample, ``gpu_model``, ``workload``, node and GPU per pod.
    """
    pods = list(plan.get("baseline_pods") or plan.get("pods") or [])
    checks, base = check_baseline(ev, th, pods)
    samples = runtimes(ev, pods)
    where = {p: [r.node, r.gpu] for p in pods if (r := ev.pod(p))}
    metrics = {
        "gpu_model": plan.get("gpu_model"),
        "workload": plan.get("workload"),
        "baseline_runtime_s": _r(base, 3),
        "samples_s": samples,
        "placement": where,
    }
    vals = [v for v in samples.values() if v is not None]
    if len(vals) > 1:
        mean = sum(vals) / len(vals)
        metrics["cv"] = _r(math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1)) / mean)
    summary = f"baseline {plan.get('workload')} on {plan.get('gpu_model')}: {base:.2f} s" if base else ""
    return _verdict(ev, th, checks, metrics, summary)


# ------------------------------------------------------------------------------------------------ PERF-003 / 011


def judge_quota_ladder(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any], *, judge_error: bool) -> Verdict:
    """PERF-011 (``judge_error``) and PERF-003: one pod at a time at each quota, against the baseline.

    ``plan``: ``baseline_pods`` (no quota; with ``perf_baseline_bracket`` one before and one after the
    quota pods) and ``quota_pods`` ``{"25": pod, ...}``. For each quota ``q``: ``ratio_q = runtime_q /
    baseline`` (the median sample, s) against the ideal ``100 / q``; ``error_q = ratio_q / ideal - 1``.
    Checks: baseline (guard), every pod succeeded, runtimes strictly decrease with the quota and, when
    ``judge_error``, ``|error_q| <= perf_quota_tolerance`` for every quota (seed P1: ±8 %) against every
    baseline sample: within against all of them is PASS, beyond against all of them is FAIL, and a
    verdict that the baseline's drift during the case decides is ERROR (inconclusive), never PASS.
    """
    quota_pods: dict[str, str] = dict(plan["quota_pods"])
    checks, base = check_baseline(ev, th, plan["baseline_pods"])
    samples = [v for v in runtimes(ev, plan["baseline_pods"]).values() if v is not None]
    checks.append(check_succeeded(ev, list(quota_pods.values()), "quota_pods_succeeded"))
    rts = {q: pod_progress(ev, p)["runtime_s"] for q, p in quota_pods.items()}
    qs = sorted(rts, key=float)
    tol, tol_name = tolerance_for(th, plan, mixed=False)
    metrics: dict[str, Any] = {"baseline_s": _r(base, 3), "runtime_s": rts, "tolerance": tol,
                               "tolerance_param": tol_name}
    if len(samples) > 1:
        metrics.update(baseline_samples_s=[_r(v, 3) for v in samples], baseline_drift=_r(baseline_drift(samples)))
    if all(rts[q] is not None for q in qs):
        mono = all(rts[a] > rts[b] for a, b in itertools.pairwise(qs))
        checks.append(Check("monotonic", " > ".join(f"runtime_{q}" for q in qs), {"runtime_s": rts}, mono,
                            "" if mono else f"runtimes {rts}"))
    if base is not None and all(rts[q] is not None for q in qs):
        rows = {}
        for q in qs:
            factor = ideal_factor(float(q))
            rows[q] = {
                "runtime_s": round(rts[q], 3),
                "ratio_vs_baseline": round(rts[q] / base, 4),
                "ideal_ratio": round(factor, 4),
                "error": round(runtime_error(rts[q], base, factor), 4),
            }
            if len(samples) > 1:  # the slowest baseline gives the lowest error
                rows[q]["error_range"] = [round(runtime_error(rts[q], b, factor), 4)
                                          for b in (max(samples), min(samples))]
        metrics["ratios"] = rows
        worst = max(rows, key=lambda q: abs(rows[q]["error"]))
        metrics["max_abs_error"] = abs(rows[worst]["error"])
        if judge_error:
            checks.append(check_quota_precision(rows, tol, tol_name, base, samples))
    errs = ", ".join(f"q{q} {r['error']:+.1%}" for q, r in (metrics.get("ratios") or {}).items())
    summary = f"runtime decreases with the quota; errors vs ideal 1/q: {errs}"
    if judge_error:
        summary = f"quota precision within ±{tol:.0%}: {errs}"
    return _verdict(ev, th, checks, metrics, summary)


def baseline_drift(samples: Sequence[float]) -> float:
    """Relative change of the baseline runtime from the first sample to the last (0.05: 5 % slower after)."""
    return samples[-1] / samples[0] - 1


def check_quota_precision(rows: Mapping[str, Mapping[str, Any]], tol: float, tol_name: str, base: float,
                          samples: Sequence[float]) -> Check:
    """``|error_q| <= tol`` for every quota row, against every baseline sample (``error_range``, else ``error``).

    ok is True when every quota is within against every sample, False when some quota is beyond against
    every sample, and None (inconclusive: the baseline drifted across the tolerance) otherwise.
    """
    def errors(r: Mapping[str, Any]) -> list[float]:
        return list(r.get("error_range") or [r["error"]])

    beyond = [q for q, r in rows.items() if all(abs(e) > tol for e in errors(r))]
    unsure = [q for q, r in rows.items() if q not in beyond and any(abs(e) > tol for e in errors(r))]

    def span(q: str) -> str:
        e = errors(rows[q])
        return f"q{q} {min(e):+.1%}" if len(e) == 1 else f"q{q} {min(e):+.1%}..{max(e):+.1%}"

    if beyond:
        ok, detail = False, f"error beyond ±{tol:.0%}: {', '.join(span(q) for q in beyond)}"
    elif unsure:
        ok, detail = None, (f"inconclusive: the baseline drifted {baseline_drift(samples):+.1%} during the case "
                            f"({' -> '.join(f'{v:.2f}' for v in samples)} s); within ±{tol:.0%} against only "
                            f"some samples: {', '.join(span(q) for q in unsure)}")
    else:
        ok, detail = True, ""
    return Check(
        "quota_precision",
        f"|runtime_q / (baseline * 100/q) - 1| <= {tol_name} ({tol}) for q in {list(rows)}, against every "
        "baseline sample",
        {"baseline_s": _r(base, 3), "baseline_samples_s": [_r(v, 3) for v in samples], "ratios": dict(rows)},
        ok,
        detail,
    )


# ------------------------------------------------------------------------------------------------ PERF-004


def check_colocated(ev: Evidence, pair: Sequence[str]) -> tuple[bool | None, dict[str, Any]]:
    """Whether the two pods ran on one GPU (node and GPU UUID from ``pods.json``, filled from the
    scheduler's registration lines). None when a GPU identity is unknown."""
    recs = [ev.pod(p) for p in pair]
    placement = {p: [r.node, r.gpu] if r else None for p, r in zip(pair, recs, strict=True)}
    if any(r is None or r.gpu is None for r in recs):
        return None, placement
    a, b = recs
    return (a.node, a.gpu) == (b.node, b.gpu), placement  # type: ignore[union-attr]


def judge_mixed(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    """PERF-004: 30 % + 60 % on one GPU; runtime ratios against the ideal within ±10 % (T4 ±12 %).

    ``plan``: ``pair`` [low pod, high pod], ``pair_quotas`` [30, 60], ``baseline_pods``, ``pods``.
    Co-location is confirmed from ``pods.json`` (the GPU of each pod, from the registration lines);
    when it was not obtained (``plan["colocation_failed"]`` or different GPUs) the case is SKIP, never PASS.
    Checks: ``runtime_low / runtime_high`` against ``ideal_low / ideal_high`` (2.0 for 30/60) and each
    pod's runtime against ``baseline * 100 / q_eff``, all within the tolerance.
    """
    if plan.get("colocation_failed"):
        return _skip(ev, th, f"co-location on one GPU not obtained after {len(plan.get('attempts') or [])} "
                     f"attempt(s): {plan.get('attempts')}")
    low, high = plan["pair"]
    q_low, q_high = (float(q) for q in plan["pair_quotas"])
    same, placement = check_colocated(ev, [low, high])
    if same is False:
        return _skip(ev, th, f"co-location on one GPU not obtained (placement {placement})",
                     metrics={"placement": placement})
    checks, base = check_baseline(ev, th, plan["baseline_pods"])
    checks.append(check_succeeded(ev, plan["pods"], "pods_succeeded"))
    if same is None:
        checks.append(Check("colocated", "both pods on one GPU (registration lines)", {"placement": placement},
                            None, "GPU of a pod unknown (no registration line)"))
    tol, tol_name = tolerance_for(th, plan, mixed=True)
    r_low, r_high = pod_progress(ev, low)["runtime_s"], pod_progress(ev, high)["runtime_s"]
    quotas = [q_low, q_high]
    f_low, f_high = ideal_factor(q_low, quotas), ideal_factor(q_high, quotas)
    metrics: dict[str, Any] = {"placement": placement, "baseline_s": _r(base, 3), "runtime_low_s": r_low,
                               "runtime_high_s": r_high, "quotas": quotas, "tolerance": tol,
                               "tolerance_param": tol_name}
    if r_low is None or r_high is None or r_high <= 0:
        checks.append(Check("runtime_ratio", "runtimes of both pods", {"low": r_low, "high": r_high}, None,
                            "runtime missing"))
        return _verdict(ev, th, checks, metrics, "")
    ideal_ratio = f_low / f_high
    ratio = r_low / r_high
    err = ratio / ideal_ratio - 1
    metrics.update(ratio_low_over_high=_r(ratio), ideal_ratio=_r(ideal_ratio), ratio_error=_r(err))
    ok = abs(err) <= tol
    checks.append(
        Check(
            "runtime_ratio",
            f"|(runtime_{q_low:g} / runtime_{q_high:g}) / {ideal_ratio:.3f} - 1| <= {tol_name} ({tol})",
            {"runtime_low_s": r_low, "runtime_high_s": r_high, "ratio": _r(ratio), "ideal": _r(ideal_ratio),
             "error": _r(err)},
            ok,
            "" if ok else f"ratio {ratio:.3f} vs ideal {ideal_ratio:.3f} ({err:+.1%})",
        )
    )
    if base is not None:
        rows = {}
        for name, q, rt, f in ((low, q_low, r_low, f_low), (high, q_high, r_high, f_high)):
            rows[f"{q:g}"] = {"pod": name, "runtime_s": _r(rt, 3), "ratio_vs_baseline": _r(rt / base),
                              "ideal_ratio": _r(f), "error": _r(runtime_error(rt, base, f))}
        metrics["ratios"] = rows
        bad = [f"q{q} {r['error']:+.1%}" for q, r in rows.items() if abs(r["error"]) > tol]
        checks.append(
            Check(
                "runtime_vs_baseline",
                f"|runtime_q / (baseline * 100/q_eff) - 1| <= {tol_name} ({tol}) for both pods",
                {"baseline_s": _r(base, 3), "ratios": rows},
                not bad,
                "" if not bad else f"error beyond ±{tol:.0%}: {', '.join(bad)}",
            )
        )
    summary = (f"{q_low:g}%+{q_high:g}% on one GPU: ratio {ratio:.3f} vs ideal {ideal_ratio:.3f} "
               f"({err:+.1%}, tolerance ±{tol:.0%})")
    return _verdict(ev, th, checks, metrics, summary)


# ------------------------------------------------------------------------------------------------ PERF-002


_HTTP_RE = re.compile(r"\nHTTP_CODE=(\d{3})")


def split_http(text: str) -> tuple[str, int | None]:
    """Body and HTTP status of a scrape file (the backend appends ``HTTP_CODE=<n>`` after the body)."""
    m = _HTTP_RE.search(text)
    if m is None:
        return text, None
    return text[: m.start()] + "\n", int(m.group(1))


def read_jsonl(ev: Evidence, name: str) -> list[dict[str, Any]]:
    """Records of a JSON-lines evidence file; an absent file is an empty list, bad lines are skipped."""
    out = []
    for line in (ev.text(name) or "").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def judge_overhead(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    """PERF-002: metrics overhead ``(runtime_on - runtime_off) / runtime_off * 100 <= perf_metrics_overhead_max_pct``.

    ``plan``: ``mode`` (``scrape``: not scraped vs scraped every ``interval_s``; ``exporter``: exporter
    disabled vs enabled and scraped), ``off_pods`` and ``on_pods`` (medians when repeated), ``scrapes``
    (``metrics_stress.jsonl``: one record per scrape, ``ok`` = HTTP 200). The "on" load must really have
    happened: no successful scrape during the on runs is ERROR, never PASS.
    """
    mode = plan.get("mode", "scrape")
    off, on = list(plan.get("off_pods") or []), list(plan.get("on_pods") or [])
    checks = [check_succeeded(ev, off + on)]
    r_off = [v for v in runtimes(ev, off).values() if v is not None]
    r_on = [v for v in runtimes(ev, on).values() if v is not None]
    scrapes = read_jsonl(ev, "metrics_stress.jsonl")
    ok_scrapes = 0
    for s in scrapes:
        body = ev.text(str(s.get("file"))) if s.get("file") else None
        code = split_http(body)[1] if body is not None else None
        ok_scrapes += code == 200
    interval = plan.get("interval_s")
    label = ("exporter disabled vs enabled (DaemonSet redeployed) and scraped" if mode == "exporter"
             else "not scraped vs scraped") + (f" every {interval:g} s" if interval else "")
    checks.append(Check("load_applied", "at least one successful scrape (HTTP 200) during the 'on' run(s)",
                        {"scrapes": len(scrapes), "ok": ok_scrapes}, True if ok_scrapes else None,
                        "" if ok_scrapes else "no successful scrape: the metrics load was not applied"))
    limit = float(th["perf_metrics_overhead_max_pct"])
    metrics: dict[str, Any] = {"mode": mode, "comparison": label, "runtime_off_s": r_off, "runtime_on_s": r_on,
                               "scrapes": len(scrapes), "scrapes_ok": ok_scrapes}
    m_off, m_on = _median(r_off), _median(r_on)
    if m_off is None or m_on is None or m_off <= 0:
        checks.append(Check("overhead", f"overhead_pct <= {limit}", {"off": r_off, "on": r_on}, None,
                            "runtime missing"))
        return _verdict(ev, th, checks, metrics, "")
    pct = (m_on - m_off) / m_off * 100
    metrics.update(runtime_off_median_s=_r(m_off, 3), runtime_on_median_s=_r(m_on, 3), overhead_pct=_r(pct, 3))
    ok = pct <= limit
    checks.append(
        Check(
            "overhead",
            f"(median_on - median_off) / median_off * 100 <= perf_metrics_overhead_max_pct ({limit})",
            {"median_off_s": _r(m_off, 3), "median_on_s": _r(m_on, 3), "overhead_pct": _r(pct, 3)},
            ok,
            "" if ok else f"overhead {pct:.2f} % > {limit} % ({label})",
        )
    )
    return _verdict(ev, th, checks, metrics, f"metrics overhead {pct:+.2f} % <= {limit} % ({label})")


# ------------------------------------------------------------------------------------------------ PERF-005/006


def judge_oversub_cost(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    """PERF-005/006: W1 with oversubscription off and on (both must pass), and the oversubscription workload
    at ``factors`` x GPU memory with it on (must pass): the cost curve ``runtime_on / runtime_off - 1``.

    ``plan``: ``skip`` (reason) or ``off_pod``, ``on_pod``, ``factor_pods`` ``{"1.25": pod}``. The cost is
    recorded; it is judged only when ``perf_oversub_max_cost_pct`` is set (default None: record only,
    as the seed asks).
    """
    if plan.get("skip"):
        return _skip(ev, th, str(plan["skip"]))
    off, on = plan["off_pod"], plan["on_pod"]
    factor_pods: dict[str, str] = dict(plan.get("factor_pods") or {})
    checks = [check_succeeded(ev, [off, on], "w1_off_on_succeeded")]
    if factor_pods:
        checks.append(check_succeeded(ev, list(factor_pods.values()), "oversubscribed_succeeded"))
    r_off, r_on = pod_progress(ev, off)["runtime_s"], pod_progress(ev, on)["runtime_s"]
    curve = {f: pod_progress(ev, p)["runtime_s"] for f, p in factor_pods.items()}
    metrics: dict[str, Any] = {"runtime_off_s": r_off, "runtime_on_s": r_on, "oversub_runtime_s": curve,
                               "gpu_model": plan.get("gpu_model")}
    cost = None
    if r_off and r_on is not None:
        cost = (r_on / r_off - 1) * 100
        metrics["cost_pct"] = _r(cost, 3)
    limit = th.get("perf_oversub_max_cost_pct")
    if limit is not None:
        ok = cost is not None and cost <= float(limit)
        checks.append(Check("oversub_cost", f"(runtime_on / runtime_off - 1) * 100 <= {limit}",
                            {"cost_pct": _r(cost, 3)}, None if cost is None else ok,
                            "" if ok else f"cost {cost} %"))
    summary = f"oversubscription cost {cost:+.2f} % (W1 on vs off); curve {curve}" if cost is not None else ""
    return _verdict(ev, th, checks, metrics, summary)


# ------------------------------------------------------------------------------------------------ PERF-007


def probe_points(ev: Evidence, pod: str) -> list[tuple[float, int]]:
    """``(unix time, cumulative iterations)`` of a W5 pod's QUOTA_PROBE lines (kubectl timestamps)."""
    return [(p.ts.timestamp(), p.iterations) for p in pod_log.quota_probes(ev.logs.get(pod, "")) if p.ts is not None]


def throughput_series(points: Sequence[tuple[float, int]]) -> list[tuple[float, float]]:
    """``(end time, iterations/s)`` of each interval between consecutive probe points."""
    return [(tb, (ib - ia) / (tb - ta)) for (ta, ia), (tb, ib) in itertools.pairwise(points) if tb > ta]


def step_time(points: Sequence[tuple[float, int]], at: float, settle_s: float) -> dict[str, Any]:
    """Equivalent step time of a throughput change after ``at`` (unix s), from cumulative iterations.

    ``r0``: mean rate before ``at`` (first probe to the last probe at or before ``at``); ``r1``: mean rate
    from ``at + settle_s`` to the end. With the last pre-change point ``(ta, ia)`` and the first point
    after ``at + settle_s`` ``(tm, im)``, a single step from ``r0`` to ``r1`` at ``t`` explains
    ``im - ia = r0 (t - ta) + r1 (tm - t)``, so ``t = (im - ia + r0 ta - r1 tm) / (r0 - r1)``, clipped to
    ``[ta, tm]``. Resolution is below one probe interval. Returns the inputs and ``t`` (None when there
    are not enough points or ``r0 == r1``).
    """
    pre = [p for p in points if p[0] <= at]
    post = [p for p in points if p[0] >= at + settle_s]
    out: dict[str, Any] = {"r0": None, "r1": None, "t": None, "pre_points": len(pre), "post_points": len(post)}
    if len(pre) < 2 or len(post) < 2:
        return out
    (t0, i0), (ta, ia) = pre[0], pre[-1]
    (tm, im), (te, ie) = post[0], post[-1]
    r0 = (ia - i0) / (ta - t0) if ta > t0 else None
    r1 = (ie - im) / (te - tm) if te > tm else None
    out.update(r0=_r(r0, 3), r1=_r(r1, 3))
    if r0 is None or r1 is None or r0 == r1:
        return out
    t = (im - ia + r0 * ta - r1 * tm) / (r0 - r1)
    out["t"] = min(max(t, ta), tm)
    return out


def metric_observations(ev: Evidence, pod: str, name: str = "metrics_probe.jsonl") -> list[dict[str, Any]]:
    """Each scrape of ``name`` (JSON lines ``{"t0", "t1", "file"}``) with the pod's configured and effective
    core quota (``client_core_quota_config_percent`` / ``..._effective_percent``; None when absent)."""
    out = []
    for rec in read_jsonl(ev, name):
        text = ev.text(str(rec.get("file"))) if rec.get("file") else None
        cfg = eff = None
        code = None
        if text is not None:
            body, code = split_http(text)
            expo = parse_exposition(body)
            cfg_v = [s.value for s in expo.values("client_core_quota_config_percent") if s.label("pod") == pod]
            eff_v = [s.value for s in expo.values("client_core_quota_effective_percent") if s.label("pod") == pod]
            cfg = cfg_v[-1] if cfg_v else None
            eff = eff_v[-1] if eff_v else None
        out.append({"t0": rec.get("t0"), "t1": rec.get("t1"), "http": code, "config": cfg, "effective": eff})
    return out


def judge_dynamic_latency(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    """PERF-007: W5 at ``from`` %, annotated to ``to`` % while it runs; two latencies, each <= 15 s.

    * metric latency: first scrape (``metrics_probe.jsonl``) whose ``client_core_quota_config_percent`` of
      the pod equals ``to``, its completion time minus the annotate call (``annotations.jsonl``);
    * throughput latency: the equivalent step time of the W5 throughput (:func:`step_time`, from the
      probe lines' kubectl timestamps) minus the annotate call; the rate must rise by
      ``perf007_min_gain`` (after / before).
    The scheduler's ``Compute limit changed`` line and the pod's update line are checked too
    (:func:`~xpushare.judge_quota.check_dynamic_change`). Clocks: annotate times are taken on the
    machine running the tool, kubectl timestamps by the node: they must be NTP-synchronised.
    """
    pod = plan["pods"][0]
    q_to = int(plan["to"])
    limit = float(th["dynamic_max_latency_s"])
    calls = annotation_calls(ev)
    checks = [check_succeeded(ev, [pod])]
    metrics: dict[str, Any] = {"from": plan.get("from"), "to": q_to}
    if not calls:
        checks.append(Check("annotated", "annotations.jsonl has the annotate call", {}, None, "no annotate call"))
        return _verdict(ev, th, checks, metrics, "")
    at = float(calls[0]["time"])
    metrics["annotated_at"] = at
    checks += check_dynamic_change(ev, pod=pod, namespace=plan.get("namespace", "default"), kind="compute",
                                   new=q_to, annotated_at=at, max_latency_s=limit)
    obs = metric_observations(ev, pod)
    seen = next((o for o in obs if o["config"] is not None and int(o["config"]) == q_to and o["t1"]), None)
    metrics["metric_scrapes"] = len(obs)
    if seen is None:
        checks.append(Check("metric_latency", f"exported config percent == {q_to} within the polls",
                            {"scrapes": len(obs), "last": obs[-1] if obs else None},
                            False if obs else None,
                            "the exported value never changed" if obs else "no metrics scrape"))
    else:
        lat = float(seen["t1"]) - at
        metrics["metric_latency_s"] = round(lat, 3)
        checks.append(Check("metric_latency", f"scrape_time - annotate_time <= dynamic_max_latency_s ({limit})",
                            {"latency_s": round(lat, 3), "effective": seen["effective"]}, lat <= limit,
                            "" if lat <= limit else f"exported after {lat:.1f} s"))
    points = probe_points(ev, pod)
    settle = float(th["perf007_settle_s"])
    step = step_time(points, at, settle)
    metrics["throughput"] = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in step.items()}
    gain_min = float(th["perf007_min_gain"])
    r0, r1 = step["r0"], step["r1"]
    if r0 is None or r1 is None:
        checks.append(Check("throughput_latency", "probe lines before and after the change", step, None,
                            "not enough QUOTA_PROBE lines (with kubectl timestamps) around the change"))
    else:
        gain = r1 / r0 if r0 > 0 else math.inf
        metrics["throughput"]["gain"] = _r(gain, 3)
        rose = gain >= gain_min
        checks.append(Check("throughput_changed", f"rate_after / rate_before >= perf007_min_gain ({gain_min})",
                            {"r0": r0, "r1": r1, "gain": _r(gain, 3)}, rose,
                            "" if rose else f"throughput {r0:.1f} -> {r1:.1f} it/s"))
        if rose and step["t"] is not None:
            lat = step["t"] - at
            metrics["throughput_latency_s"] = round(lat, 3)
            checks.append(Check("throughput_latency",
                                f"step_time - annotate_time <= dynamic_max_latency_s ({limit})",
                                {"latency_s": round(lat, 3), "step_time": round(step["t"], 3)}, lat <= limit,
                                "" if lat <= limit else f"throughput changed after {lat:.1f} s"))
    summary = (f"{plan.get('from')}% -> {q_to}%: exported after {metrics.get('metric_latency_s')} s, "
               f"throughput changed after {metrics.get('throughput_latency_s')} s (<= {limit:g} s)")
    return _verdict(ev, th, checks, metrics, summary)


# ------------------------------------------------------------------------------------------------ PERF-008


def ladder_steps(ev: Evidence, plan: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per step ``n``: per-pod throughput (runs/s = 1 / runtime), aggregate throughput
    ``n / makespan`` (runs/s; makespan = last finish - first start from ``pods.json``), and counts."""
    out = []
    for step in plan.get("steps") or []:
        pods = list(step["pods"])
        recs = [r for p in pods if (r := ev.pod(p)) is not None]
        rts = runtimes(ev, pods)
        per_pod = {p: (1 / v if v else None) for p, v in rts.items()}
        starts = [r.started for r in recs if r.started is not None]
        ends = [r.finished for r in recs if r.finished is not None]
        makespan = max(ends) - min(starts) if starts and ends and len(ends) == len(pods) else None
        ok = sum(1 for r in recs if r.phase == "Succeeded")
        tps = [v for v in per_pod.values() if v is not None]
        out.append({
            "n": int(step["n"]),
            "succeeded": ok,
            "makespan_s": _r(makespan, 3),
            "aggregate_runs_per_s": _r(len(pods) / makespan, 5) if makespan else None,
            "per_pod_runs_per_s": {p: _r(v, 5) for p, v in per_pod.items()},
            "per_pod_mean": _r(sum(tps) / len(tps), 5) if tps else None,
            "per_pod_min": _r(min(tps), 5) if tps else None,
        })
    return out


def judge_scale_ladder(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    """PERF-008: 2/4/8/16... pods (capped by capacity; the cap is in the summary), every pod succeeds, and
    no cliff: each step's aggregate throughput >= (1 - ``perf008_max_drop``) x the best earlier step.

    ``plan``: ``steps`` [{"n", "pods"}], ``cap``, ``cap_reason``, ``dropped`` (steps above the cap).
    """
    if plan.get("skip"):
        return _skip(ev, th, str(plan["skip"]))
    steps = ladder_steps(ev, plan)
    checks = [check_succeeded(ev, [p for s in plan["steps"] for p in s["pods"]], "all_pods_succeeded")]
    drop = float(th["perf008_max_drop"])
    cliffs = []
    best = 0.0
    for s in steps:
        agg = s["aggregate_runs_per_s"]
        if agg is None:
            continue
        if best and agg < (1 - drop) * best:
            cliffs.append(f"n={s['n']}: {agg:.4g} < {(1 - drop):.2f} x {best:.4g} runs/s")
        best = max(best, agg)
    known = all(s["aggregate_runs_per_s"] is not None for s in steps)
    checks.append(Check("no_cliff", f"aggregate_n >= (1 - perf008_max_drop ({drop})) * max(aggregate of earlier steps)",
                        {"aggregate_runs_per_s": {s["n"]: s["aggregate_runs_per_s"] for s in steps}},
                        (not cliffs) if known else None,
                        "; ".join(cliffs) if cliffs else ("" if known else "makespan unknown for a step")))
    cap = f"capped at {plan.get('cap')} pods ({plan.get('cap_reason')})"
    if plan.get("dropped"):
        cap += f"; steps dropped: {plan['dropped']}"
    metrics = {"steps": steps, "cap": plan.get("cap"), "cap_reason": plan.get("cap_reason"),
               "dropped": plan.get("dropped") or []}
    v = _verdict(ev, th, checks, metrics, f"ladder {[s['n'] for s in steps]} without a cliff; {cap}")
    if v.status is not Status.PASS:
        v.summary += f" ({cap})"
    return v


# ------------------------------------------------------------------------------------------------ PERF-009/010


def gpu_groups(ev: Evidence, pods: Sequence[str]) -> dict[str, list[str]]:
    """Pods grouped by ``<node>/<gpu uuid>`` (from ``pods.json``); pods without a GPU identity are left out."""
    groups: dict[str, list[str]] = {}
    for p in pods:
        r = ev.pod(p)
        if r is not None and r.gpu is not None:
            groups.setdefault(f"{r.node}/{r.gpu}", []).append(p)
    return groups


def judge_linearity(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any], *, multi_card: bool) -> Verdict:
    """PERF-009 (one card shared by ``c`` pods) and PERF-010 (pods across cards), no quotas.

    Per GPU with ``c`` pods: ``ratio = span / baseline`` against the ideal ``c`` (time-sharing one GPU), where
    ``span`` is the time from the first of the GPU's pods starting its work to the last one finishing (from the
    timestamped runtime lines: pods never start at once, and a pod that starts late runs part of its work with
    fewer neighbours, so their mean runtime is below ``c x baseline`` on a perfectly shared GPU); without
    timestamps, the mean runtime. ``|ratio / c - 1| <= perf_linearity_tolerance`` (default 0.10; the bash band
    was [0.6c, 1.9c]); PERF-010's pods on separate GPUs are each their own span.
    A missing runtime fails the case (the bash divided by the pod count anyway). PERF-009 judges the
    GPUs with >= 2 pods and is SKIP without one; PERF-010 judges every GPU and is SKIP on fewer than 2.
    """
    pods = list(plan["load_pods"])
    groups = gpu_groups(ev, pods)
    placement = {g: len(ps) for g, ps in groups.items()}
    if multi_card and len(groups) < 2:
        return _skip(ev, th, f"fewer than 2 distinct GPUs used ({placement})", metrics={"placement": placement})
    judged = groups if multi_card else {g: ps for g, ps in groups.items() if len(ps) >= 2}
    if not judged:
        return _skip(ev, th, f"no GPU shared by 2 or more pods ({placement or 'no GPU identity'})",
                     metrics={"placement": placement})
    checks, base = check_baseline(ev, th, plan["baseline_pods"])
    checks.append(check_succeeded(ev, pods, "load_pods_succeeded"))
    tol = float(th["perf_linearity_tolerance"])
    rows = {}
    for g, ps in judged.items():
        rts = [pod_progress(ev, p)["runtime_s"] for p in ps]
        if base is None or any(v is None for v in rts):
            continue
        mean = sum(rts) / len(rts)
        intervals = [pod_log.run_interval(ev.logs.get(p) or "") for p in ps]
        known = [iv for iv in intervals if iv is not None]
        span = max(e for _, e in known) - min(s for s, _ in known) if len(known) == len(ps) else None
        ratio = (span if span is not None else mean) / base
        rows[g] = {"pods": len(ps), "mean_runtime_s": round(mean, 3), "span_s": _r(span, 3), "ratio": round(ratio, 4),
                   "ratio_of": "span" if span is not None else "mean_runtime", "ideal": len(ps),
                   "error": round(ratio / len(ps) - 1, 4)}
    if base is not None:
        bad = [f"{g}: {r['ratio']} vs {r['ideal']}" for g, r in rows.items() if abs(r["error"]) > tol]
        complete = len(rows) == len(judged)
        checks.append(Check("linearity", f"|span / baseline / pods_on_gpu - 1| <= perf_linearity_tolerance "
                                         f"({tol}) per GPU", {"baseline_s": _r(base, 3), "gpus": rows},
                            (not bad) if complete else None,
                            "; ".join(bad) if bad else ("" if complete else "a runtime is missing")))
    metrics = {"baseline_s": _r(base, 3), "gpus": rows, "placement": placement, "tolerance": tol}
    what = "across cards" if multi_card else "on one card"
    return _verdict(ev, th, checks, metrics, f"{len(pods)} pods {what}: runtime ~ pods per GPU within ±{tol:.0%}")

