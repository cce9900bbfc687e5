"""MET-001..008 judgments (seed 000 §11, §16.5, §17.5): pure functions from evidence to a Verdict.

Every function reads a case directory through :class:`~xpushare.evidence.store.Evidence` (``Evidence.text``)
and never live state, so ``invoke judge`` re-judges a stored run offline. Thresholds are named
parameters with the seed's values as defaults (:data:`xpushare.judge.thresholds.METRICS`); a missing
key in ``th`` falls back to its default and the verdict records the value it used.

Evidence files (written by the case's actions; names relative to the case directory):

============================  ===================================================================
``metrics_health.txt``        curl capture of ``GET /healthz``: the body, then ``HTTP_CODE=<ddd>``
                              (and ``CONTENT_TYPE=...``) trailer lines (:func:`read_capture`)
``metrics.txt``               one ``GET /metrics`` capture (body, optionally the same trailer)
``metrics_mid.txt``           a ``/metrics`` capture taken while the probe pod runs
``metrics_before.txt``        MET-005: a capture before the annotation change
``metrics_series.jsonl``      repeated scrapes, one JSON object per line (:class:`ScrapeRecord`)
``remote_<node>_dmon.txt``    ``nvidia-smi dmon`` output of the probe pod's node (MET-006)
``sampler/<node>_procs.csv``  node sampler, NVML per-process memory (MET-003)
``sampler/<node>_gpu.csv``    node sampler, NVML per-GPU memory (MET-003)
``scheduler.log``             the scheduler pods' log (MET-003: MEM_UPDATE lines, debug mode)
============================  ===================================================================

Every capture must come from the scheduler that serves the probe pod's node (a scheduler per node,
docs/sut/log.md §annotation-debug); the judgments prove it by finding the probe's own series. The probe's
clients are found with a :class:`~xpushare.evidence.client_match.ClientMatch` (``client``), whose key depends
on the mode (:func:`~xpushare.evidence.client_match.client_match`): the ``pod``/``namespace`` labels in
Kubernetes, ``host_pid`` (and ``client_id``) in host mode, where every client's pod and namespace are
``none``. The ``probe_client_seen`` check and the PASS summary say which key matched
(``matched by host_pid 12345``); the other client families are read by the matched ``client_id``.
Metric names are prefix-agnostic (``xpushare_`` / ``nvshare_``, docs/sut/README.md §naming): lookups go
through :class:`~xpushare.parsers.metrics.Exposition`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from xpushare.evidence.client_match import ClientMatch
from xpushare.evidence.scrape_capture import ScrapeRecord, parse_series, read_capture
from xpushare.evidence.store import Evidence
from xpushare.judge.metrics_client_values import judge_met003, judge_met004, judge_met005, quota_state
from xpushare.judge.metrics_evidence import (
    RequiredMetrics,
    load_required_metrics,
    metrics_source,
    read_first_capture,
)
from xpushare.judge.metrics_exposition_checks import (
    client_seen_check,
    gpu_rows_for_key,
    matched_note,
    metrics_verdict,
    missing_check,
    parse_check,
    th_value,
)
from xpushare.judge.metrics_under_load import judge_met006, judge_met007, judge_met008
from xpushare.model.verdict import Check, Verdict
from xpushare.parsers.metrics import parse_exposition

__all__ = [
    "RequiredMetrics",
    "ScrapeRecord",
    "gpu_rows_for_key",
    "judge_met001",
    "judge_met002",
    "judge_met003",
    "judge_met004",
    "judge_met005",
    "judge_met006",
    "judge_met007",
    "judge_met008",
    "load_required_metrics",
    "parse_series",
    "quota_state",
    "read_capture",
]


# ---------------------------------------------------------------------------------------- MET-001


def judge_met001(ev: Evidence, th: Mapping[str, Any], *, prefix: str | None = None) -> Verdict:
    """MET-001: ``/healthz`` and ``/metrics`` answer (seed 000 §11.1, §16.5, §17.5).

    Evidence: ``metrics_health.txt`` (code 200, body ``OK``), ``metrics.txt`` (code 200 when the
    capture has a trailer; parses; at least one sample of the SUT's prefix). ``prefix``: the
    generation's metric prefix (``xpushare``/``nvshare``), detected when None.
    """
    checks: list[Check] = []
    evidence: list[str] = []
    metrics: dict[str, Any] = {}
    _, health = read_first_capture(ev, ["metrics_health.txt"])
    if health is None:
        checks.append(missing_check("healthz_200", "metrics_health.txt"))
    else:
        evidence.append("metrics_health.txt")
        metrics["healthz_http_code"] = health.http_code
        checks.append(Check("healthz_200", "HTTP_CODE(/healthz) == 200", {"http_code": health.http_code},
                            None if health.http_code is None else health.http_code == 200,
                            "no HTTP_CODE in metrics_health.txt" if health.http_code is None
                            else ("" if health.http_code == 200 else f"/healthz answered {health.http_code}")))
        body = health.body.strip()
        checks.append(Check("healthz_body", "body(/healthz) == 'OK'", {"body": body[:80]}, body == "OK",
                            "" if body == "OK" else f"body {body[:80]!r}"))
    _, cap = read_first_capture(ev, ["metrics.txt"])
    if cap is None:
        checks.append(missing_check("metrics_has_prefix", "metrics.txt"))
    else:
        evidence.append("metrics.txt")
        if cap.http_code is not None:
            metrics["metrics_http_code"] = cap.http_code
            checks.append(Check("metrics_200", "HTTP_CODE(/metrics) == 200", {"http_code": cap.http_code},
                                cap.http_code == 200, "" if cap.http_code == 200 else f"answered {cap.http_code}"))
        exp = parse_exposition(cap.body, prefix)
        checks.append(parse_check(exp, "metrics.txt"))
        own = [s for f in exp.families for s in f.samples if exp.prefix and s.name.startswith(exp.prefix + "_")]
        metrics["samples"] = len(own)
        metrics["families"] = len(exp.family_names())
        checks.append(Check("metrics_has_prefix", f"count(samples named {exp.prefix or '<prefix>'}_*) >= 1",
                            {"prefix": exp.prefix, "samples": len(own)}, bool(own),
                            "" if own else "no sample of the SUT's prefix in metrics.txt"))
    return metrics_verdict(checks, th, [], metrics, evidence, "healthz 200 OK and /metrics serves the SUT's metrics")


# ---------------------------------------------------------------------------------------- MET-002


def judge_met002(ev: Evidence, th: Mapping[str, Any], *, client: ClientMatch | None = None,
                 prefix: str | None = None, source: str | None = None) -> Verdict:
    """MET-002: every required family exists (``xpushare/data/required_metrics.yaml``).

    Evidence: ``source``, else ``metrics_mid.txt``, else ``metrics.txt``. With a probe (``client``,
    its :class:`~xpushare.evidence.client_match.ClientMatch`) its client must be in the page (so the scraped
    scheduler is the probe's node's) and, with
    ``met002_require_samples``, every required family needs sample lines; without a probe, families
    that need a client only need their HELP/TYPE. GPU families are required when
    ``gpu_sampler_up`` >= 1. Every required family must have ``# HELP`` and ``# TYPE``.
    Metrics: ``missing_metrics`` (full names), ``missing_metric_count``, ``optional_present``.
    """
    keys = ["met002_require_samples"]
    name, text = metrics_source(ev, source, ["metrics_mid.txt", "metrics.txt"])
    if text is None or name is None:
        return metrics_verdict([missing_check("required_metrics", "metrics_mid.txt / metrics.txt")], th, keys, {}, [],
                        "")
    exp = parse_exposition(text, prefix)
    table = load_required_metrics()
    checks = [parse_check(exp, name)]
    if client is not None:
        checks.append(client_seen_check(exp, client))
    sampler_up = (exp.sum("gpu_sampler_up") or 0.0) >= 1
    need_samples = bool(th_value(th, "met002_require_samples")) and client is not None
    pfx = (exp.prefix or "") + "_" if exp.prefix else ""
    missing: list[str] = []
    undeclared: list[str] = []
    for suffix in table.required(sampler_up):
        fam = exp.family(suffix)
        has_samples = bool(exp.values(suffix))
        sample_needed = need_samples or suffix not in table.needs_client
        if fam is None or (sample_needed and not has_samples):
            missing.append(pfx + suffix)
        elif not (fam.has_help and fam.has_type):
            undeclared.append(fam.name)
    checks.append(Check(
        "required_metrics_present",
        "missing_metric_count == 0" + (" (samples required)" if need_samples else ""),
        {"missing": missing, "sampler_up": sampler_up, "required": len(table.required(sampler_up))},
        not missing, f"{len(missing)} missing: {', '.join(missing)}" if missing else ""))
    checks.append(Check("required_metrics_declared", "every required family has # HELP and # TYPE",
                        {"undeclared": undeclared}, not undeclared,
                        f"without HELP/TYPE: {', '.join(undeclared)}" if undeclared else ""))
    optional = [pfx + s for s in table.optional if exp.family(s) is not None]
    metrics = {"missing_metrics": missing, "missing_metric_count": len(missing), "gpu_sampler_up": sampler_up,
               "optional_present": optional}
    return metrics_verdict(checks, th, keys, metrics, [name],
                    f"all {len(table.required(sampler_up))} required families present{matched_note(exp, client)}")


# ---------------------------------------------------------------------------------------- MET-003


# ---------------------------------------------------------------------------------------- MET-004


# ---------------------------------------------------------------------------------------- MET-005


# ---------------------------------------------------------------------------------------- MET-006


# ---------------------------------------------------------------------------------------- MET-007


# ---------------------------------------------------------------------------------------- MET-008


