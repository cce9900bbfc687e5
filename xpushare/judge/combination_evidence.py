"""Evidence of the combination suite and the checks over it: the scheduler log, the library's
oversubscription line, the ``metrics_mid*.txt`` captures (with the note a failed scrape leaves) and the
per-pod quota series in them; the suite's thresholds (:data:`xpushare.judge.thresholds.COMBINATION`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from xpushare.evidence.scrape_capture import read_capture, split_capture
from xpushare.evidence.store import Evidence
from xpushare.judge import thresholds
from xpushare.judge.quantity import annotation_bytes
from xpushare.model.verdict import Check
from xpushare.parsers.metrics import Exposition, Sample, parse_exposition
from xpushare.parsers.scheduler_log import parse_text
from xpushare.parsers.scheduler_log_records import SchedulerLogSummary


def combo_th(th: Mapping[str, Any], key: str) -> Any:
    """A COMBO threshold: the case's value, else the seed's default."""
    return thresholds.threshold(th, key, thresholds.COMBINATION)


def combo_used(th: Mapping[str, Any], *keys: str) -> dict[str, Any]:
    """The thresholds as recorded in the verdict: the case's parameters plus the defaults it used."""
    return {**thresholds.used(th), **{k: combo_th(th, k) for k in keys}}


def scheduler_summary(ev: Evidence) -> SchedulerLogSummary | None:
    """The parsed ``scheduler.log``; None when it was not collected."""
    text = ev.text("scheduler.log")
    return parse_text(text) if text is not None else None


_OVERSUB_RE = re.compile(r"\[(?:XPUSHARE|NVSHARE)\]\[OVERSUB\] total_bytes=(?P<total>\d+) \S+ target_bytes=(?P<t>\d+)")


def oversub_target_bytes(text: str | None) -> int | None:
    """Bytes the oversubscription workload set out to allocate (its ``[XPUSHARE][OVERSUB] ... target_bytes=``
    line, workloads/oversub.py), or None without such a line. Never raises."""
    if not text:
        return None
    found = _OVERSUB_RE.findall(text)
    return int(found[-1][1]) if found else None


def check_captures(ev: Evidence, names: Sequence[str], what: str) -> tuple[list[Exposition], Check]:
    """Read the metrics captures ``names`` (curl output with an ``HTTP_CODE=`` trailer, or a bare body).

    Returns the parsed expositions and a check: ok None (ERROR: nothing to judge) when no capture was
    planned, one was not collected, or its scrape failed (curl error, no HTTP response); False when the
    endpoint answered other than 200, or with a page that is empty or does not parse as Prometheus text;
    else True. A page that parses but lacks a series is judged by the caller (FAIL, never PASS).
    """
    if not names:
        return [], Check(f"{what}_captured", f"{what} scraped while the pods ran", {}, None, f"no {what} capture")
    exps: list[Exposition] = []
    facts: dict[str, Any] = {}
    bad: list[str] = []
    failed: list[str] = []
    for name in names:
        text = ev.text(name)
        if text is None:
            return [], Check(f"{what}_captured", f"{name} collected", {"files": list(names)}, None,
                             f"{name} was not collected")
        text, note = split_capture(text)
        cap = read_capture(text)
        exp = parse_exposition(cap.body)
        facts[name] = {"http_code": cap.http_code, "parse_error": exp.error, "scrape_error": note}
        if note is not None or cap.http_code == 0:
            failed.append(f"{name}: scrape failed ({note or 'no HTTP response'})")
        elif cap.http_code not in (200, None):
            bad.append(f"{name}: HTTP {cap.http_code}")
        elif not exp.ok:
            bad.append(f"{name}: {exp.error}")
        elif not exp.families:
            bad.append(f"{name}: empty page")
        else:
            exps.append(exp)
    expr = "every capture answered 200 and parses as Prometheus text"
    if bad:
        return exps, Check(f"{what}_captured", expr, facts, False, "; ".join(bad + failed))
    if failed:
        return exps, Check(f"{what}_captured", expr, facts, None, "; ".join(failed))
    return exps, Check(f"{what}_captured", expr, facts, True)


def capture_series(exps: Sequence[Exposition], metric: str, **labels: Any) -> list[Sample]:
    """Samples of ``metric`` with ``labels`` over every capture."""
    return [s for exp in exps for s in exp.values(metric, **labels)]


def pods_in_capture(exp: Exposition, namespace: str | None = None) -> set[str]:
    """Pods that have at least one series (any family, label ``pod``) in the page; ``namespace`` filters."""
    out: set[str] = set()
    for fam in exp.families:
        for s in fam.samples:
            pod = s.label("pod")
            if pod is not None and (namespace is None or s.label("namespace") == namespace):
                out.add(pod)
    return out


def check_pod_quota_series(
    exps: Sequence[Exposition], pod: str, namespace: str, *, memory_bytes: int | None, core: int | None,
    name: str = "quota_metrics",
) -> Check:
    """One pod's quota series in the captures equal its configuration (docs/sut/metrics.md §catalogue).

    ``client_info`` present (registered at the scraped scheduler); every ``client_memory_quota_bytes``
    series == ``memory_bytes`` and every ``client_core_quota_config_percent`` == ``core`` (skipped when
    None); every ``client_core_quota_effective_percent`` in ``(0, core]`` (scaling only lowers it).
    A missing series is a failure: the exporter did not show the quota.
    """
    sel = {"pod": pod, "namespace": namespace}
    info = capture_series(exps, "client_info", **sel)
    mem = [s.value for s in capture_series(exps, "client_memory_quota_bytes", **sel)]
    cfg = [s.value for s in capture_series(exps, "client_core_quota_config_percent", **sel)]
    eff = [s.value for s in capture_series(exps, "client_core_quota_effective_percent", **sel)]
    values = {"client_info": len(info), "memory_quota_bytes": mem, "core_config_percent": cfg,
              "core_effective_percent": eff, "expected": {"memory_bytes": memory_bytes, "core_percent": core}}
    problems: list[str] = []
    if not info:
        problems.append("no client_info series")
    if memory_bytes is not None:
        if not mem:
            problems.append("no client_memory_quota_bytes series")
        elif any(v != memory_bytes for v in mem):
            problems.append(f"client_memory_quota_bytes {mem} != {memory_bytes}")
    if core is not None:
        if not cfg:
            problems.append("no client_core_quota_config_percent series")
        elif any(v != core for v in cfg):
            problems.append(f"client_core_quota_config_percent {cfg} != {core}")
        if not eff:
            problems.append("no client_core_quota_effective_percent series")
        elif any(not 0 < v <= core for v in eff):
            problems.append(f"client_core_quota_effective_percent {eff} not in (0, {core}]")
    expr = f"series of pod {pod} == configured (memory {memory_bytes} B, core {core} %)"
    return Check(f"{name}[{pod}]", expr, values, not problems, "; ".join(problems))


def annotation_quota_bytes(text: Any) -> int | None:
    """The bytes the scheduler applies for a planned memory annotation (0: ignored); None when none was planned."""
    return None if text is None else annotation_bytes(str(text))
