"""What the PERF-001..011 judgments share: the quota model (ideal runtime, error, tolerance), the common
measurements every case records (GPU utilisation, the scheduler's lock rates), pod runtimes and the
baseline check, the HTTP trailer of a curl capture and JSON-lines evidence, the verdict (with the
common measurements) and SKIP. Units: runtimes in seconds, ratios unitless, utilisation in percent.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from typing import Any

from xpushare.evidence.store import Evidence
from xpushare.judge.checks import check_pods_succeeded, check_terminal, pod_progress
from xpushare.judge.stats import median, percentile, rounded
from xpushare.judge.thresholds import used
from xpushare.model.premises import unmet
from xpushare.model.verdict import Check, Status, Verdict, combine
from xpushare.parsers import dmon
from xpushare.parsers.scheduler_log import parse_text


def ideal_factor(quota: float, co_quotas: Sequence[float] = ()) -> float:
    """Ideal runtime / baseline runtime of a pod at ``quota`` % (hard cap, docs/sut/scheduler.md §compute-quota).

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
    return {"p50": rounded(percentile(vals, 50), 1), "p95": rounded(percentile(vals, 95), 1), "samples": len(vals)}


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
        "span_s": rounded(span, 3),
        "lock_ok_per_s": rate(lock),
        "drop_lock_per_s": rate(drop),
    }


def common_measurements(ev: Evidence) -> dict[str, Any]:
    """The measurements every PERF verdict records: ``gpu_util`` and ``scheduler`` (see the module doc)."""
    return {"gpu_util": gpu_utilisation(ev), "scheduler": scheduler_rates(ev)}


def perf_verdict(
    ev: Evidence, th: Mapping[str, Any], checks: list[Check], metrics: dict[str, Any], pass_summary: str
) -> Verdict:
    """The verdict of ``checks`` with ``metrics`` plus :func:`common_measurements`, the case's thresholds and
    pod files as evidence."""
    status, summary = combine(checks, pass_summary=pass_summary)
    return Verdict(status, summary, checks, used(th), {**metrics, **common_measurements(ev)}, ev.pod_files())


def perf_skip(ev: Evidence, th: Mapping[str, Any], reason: str, checks: list[Check] | None = None,
              metrics: dict[str, Any] | None = None) -> Verdict:
    """SKIP with ``reason`` (never counted as a PASS), keeping what was checked and measured."""
    return Verdict(Status.SKIP, reason, checks or [], used(th), metrics or {}, ev.pod_files())


def perf_premise_error(ev: Evidence, th: Mapping[str, Any], premise: str, why: str,
                       metrics: dict[str, Any] | None = None) -> Verdict:
    """ERROR ``premise unmet: <premise>: <why>`` (:mod:`xpushare.model.premises`): found in the evidence, the case's
    premise did not hold, so there is nothing to judge; never a PASS, never a FAIL of the SUT."""
    return Verdict(Status.ERROR, unmet(premise, why), [], used(th), metrics or {}, ev.pod_files())


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
    base = median(vals)
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


def read_jsonl(ev: Evidence, name: str) -> list[dict[str, Any]]:
    """Records of a JSON-lines evidence file; an absent file is an empty list, bad lines are skipped."""
    out = []
    for line in (ev.text(name) or "").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out
