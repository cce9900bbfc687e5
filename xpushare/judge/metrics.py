"""MET-001..008 judgments (seed 000 §11, §16.5, §17.5): pure functions from evidence to a Verdict.

Every function reads a case directory through :class:`~xpushare.evidence.Evidence` (``Evidence.text``)
and never live state, so ``invoke judge`` re-judges a stored run offline. Thresholds are named
parameters with the seed's values as defaults (:data:`DEFAULTS`); a missing key in ``th`` falls back
to its default and the verdict records the value it used.

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
sut-interfaces.md §4.8); the judgments prove it by finding the probe's own series. The probe's
clients are found with a :class:`~xpushare.client_match.ClientMatch` (``client``), whose key depends
on the mode (:func:`~xpushare.client_match.client_match`): the ``pod``/``namespace`` labels in
Kubernetes, ``host_pid`` (and ``client_id``) in host mode, where every client's pod and namespace are
``none``. The ``probe_client_seen`` check and the PASS summary say which key matched
(``matched by host_pid 12345``); the other client families are read by the matched ``client_id``.
Metric names are prefix-agnostic (``xpushare_`` / ``nvshare_``, sut-interfaces.md §0): lookups go
through :class:`~xpushare.collect.metrics.Exposition`.
"""

from __future__ import annotations

import csv
import functools
import io
import itertools
import json
import math
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

from xpushare.client_match import ClientMatch, client_values, matched_clients
from xpushare.collect import dmon as dmon_parser
from xpushare.collect.metrics import CurlResponse, Exposition, Sample, parse_curl_output, parse_exposition
from xpushare.collect.scheduler_log import logged_allocations
from xpushare.evidence import Evidence
from xpushare.model import Check, Status, Verdict, combine

__all__ = [
    "DEFAULTS",
    "RequiredMetrics",
    "ScrapeRecord",
    "annotation_bytes",
    "core_limit_value",
    "env_bytes",
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

#: Thresholds and parameters of MET-001..008 with the seed's values (seed 000 §6, §11, §17.5;
#: bash-harness-cases.md §5 for ``XP_METRIC_*``).
DEFAULTS: dict[str, Any] = {
    # MET-002: every required family must have samples while the probe client runs (else: declared).
    "met002_require_samples": True,
    # MET-003: NVML cross-check tolerance (relative) and the sampler window around metrics_mid (s);
    # without NVML evidence the case is ERROR unless met003_require_nvml is false (CPU lab, no GPU).
    "met003_nvml_tolerance_ratio": 0.10,
    "met003_window_s": 10.0,
    "met003_require_nvml": True,
    # MET-004: the exporter shows annotation quotas only (sut-interfaces.md §6.3); set true when a
    # release exports env limits too.
    "met004_env_in_metrics": False,
    # MET-005: dynamic change visible in the metrics within 15 s (seed 000 §6 item 2, §11.1).
    "met005_max_latency_s": 15.0,
    # MET-006: XP_METRIC_UTIL_MIN_RATIO (0.10); agreement with dmon's sm column in percentage points.
    "met006_min_util": 0.10,
    "met006_max_mean_abs_diff_pct": 20.0,
    # MET-007: 2 s scrapes for XP_METRICS_STRESS_DURATION_SEC (120 s), 100 % success.
    "met007_duration_s": 120.0,
    "met007_interval_s": 2.0,
    "met007_min_success_ratio": 1.0,
    "met007_max_p99_latency_s": 2.0,
    # MET-008: XP_METRIC_HIGH_MEM_ALERT_RATIO (0.80); the alert's `for:` duration (0: one sample).
    "met008_alert_ratio": 0.80,
    "met008_for_s": 0.0,
}


def _th(th: Mapping[str, Any], key: str) -> Any:
    return th[key] if key in th else DEFAULTS[key]


def _used(th: Mapping[str, Any], *keys: str) -> dict[str, Any]:
    return {k: _th(th, k) for k in keys}


# ------------------------------------------------------------------------------------------ data


@dataclass(frozen=True)
class RequiredMetrics:
    """The required-metrics table (``xpushare/data/required_metrics.yaml``), suffixes without prefix.

    ``always``: required on every exporter; ``with_sampler``: required when ``gpu_sampler_up`` >= 1;
    ``needs_client``: families that have sample lines only while a client is registered (or a GPU
    context exists); ``optional``: named in docs but not exported (never required).
    """

    always: tuple[str, ...]
    with_sampler: tuple[str, ...]
    needs_client: tuple[str, ...]
    optional: tuple[str, ...]

    def required(self, sampler_up: bool) -> tuple[str, ...]:
        """Required suffixes, in table order, for an exporter with or without a GPU sampler backend."""
        return self.always + (self.with_sampler if sampler_up else ())


@functools.lru_cache(maxsize=1)
def load_required_metrics() -> RequiredMetrics:
    """Read the required-metrics table from package data (cached). Raises ``ValueError`` if malformed."""
    text = resources.files("xpushare.data").joinpath("required_metrics.yaml").read_text(encoding="utf-8")
    doc = yaml.safe_load(text) or {}
    try:
        return RequiredMetrics(
            always=tuple(str(s) for s in doc["always"]),
            with_sampler=tuple(str(s) for s in doc.get("with_sampler") or ()),
            needs_client=tuple(str(s) for s in doc.get("needs_client") or ()),
            optional=tuple(str(s) for s in doc.get("optional") or ()),
        )
    except (KeyError, TypeError) as exc:
        raise ValueError(f"required_metrics.yaml: bad table ({exc})") from None


# ------------------------------------------------------------------------------ evidence formats


_CODE_ONLY_RE = re.compile(r"\nHTTP_CODE=(?P<code>\d*)\n?(?:CONTENT_TYPE=(?P<ct>[^\n]*)\n?)?\Z")


def read_capture(text: str) -> CurlResponse:
    """A curl capture as ``(body, http_code, content_type)``. Never raises.

    Accepts the trailer of :func:`xpushare.collect.metrics.scrape_command` (``HTTP_CODE=`` and
    ``CONTENT_TYPE=`` lines), a trailer with ``HTTP_CODE=`` only (the bash harness's
    ``metrics_health.txt``, bash-harness-cases.md §1 item 6), or a bare body (code ``None``).
    """
    parsed = parse_curl_output(text)
    if parsed.http_code is not None or parsed.content_type is not None:
        return parsed
    m = _CODE_ONLY_RE.search(text)
    if m is None:
        return CurlResponse(text, None, None)
    code = int(m.group("code")) if m.group("code") else None
    return CurlResponse(text[: m.start()], code, (m.group("ct") or "").strip() or None)


@dataclass(frozen=True)
class ScrapeRecord:
    """One scrape of ``/metrics`` in ``metrics_series.jsonl`` (one JSON object per line).

    ``t``: Unix time (s) when the request started; ``latency_s``: seconds until the whole body was
    read (or the failure); ``status``: HTTP status, ``None`` without a response; ``error``: why there
    was no (complete) response; ``body``: the exposition text (``None`` when not kept).
    JSON keys: ``t``, ``latency_s``, ``status``, ``error``, ``body``.
    """

    t: float
    latency_s: float
    status: int | None
    error: str | None = None
    body: str | None = None

    @property
    def t_end(self) -> float:
        """Unix time the response was complete (``t + latency_s``)."""
        return self.t + self.latency_s

    @property
    def responded(self) -> bool:
        """HTTP 200 and no transport error."""
        return self.status == 200 and self.error is None

    def to_json_line(self) -> str:
        """The record as one JSON line (with the trailing newline)."""
        d = {"t": round(self.t, 3), "latency_s": round(self.latency_s, 4), "status": self.status,
             "error": self.error, "body": self.body}
        return json.dumps(d, ensure_ascii=False) + "\n"


def parse_series(text: str) -> tuple[list[ScrapeRecord], list[int]]:
    """Records of a ``metrics_series.jsonl`` text and the 1-based numbers of unreadable lines. Never raises."""
    records: list[ScrapeRecord] = []
    bad: list[int] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            status = d.get("status")
            records.append(ScrapeRecord(
                t=float(d["t"]),
                latency_s=float(d.get("latency_s") or 0.0),
                status=None if status is None else int(status),
                error=None if d.get("error") is None else str(d["error"]),
                body=None if d.get("body") is None else str(d["body"]),
            ))
        except (ValueError, TypeError, KeyError, AttributeError):
            bad.append(lineno)
    records.sort(key=lambda r: r.t)
    return records, bad


# ---------------------------------------------------------------------------- quota value parsing

_NUMBER_RE = re.compile(r"^\s*(?P<num>[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)\s*(?P<suffix>[A-Za-z]*)\s*$")
_ANNOTATION_UNITS = {"": 1, "b": 1, "ki": 2**10, "kib": 2**10, "mi": 2**20, "mib": 2**20, "gi": 2**30, "gib": 2**30}
_ENV_UNITS = {**_ANNOTATION_UNITS, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9}


def annotation_bytes(text: str | None) -> int:
    """Bytes of a ``<gen>.com/gpu-memory-limit`` annotation as the scheduler parses it (0 = ignored).

    ``parse_memory_size`` (sut-interfaces.md §5.1): a number (decimals allowed), optional spaces, a
    case-insensitive suffix ``Gi``/``GiB``, ``Mi``/``MiB``, ``Ki``/``KiB``, ``B`` or none (bytes). Any
    other suffix (``G``, ``GB``, ``Ti`` ...), a negative or an unparsable value gives 0.
    """
    if text is None:
        return 0
    m = _NUMBER_RE.match(text)
    if m is None:
        return 0
    unit = _ANNOTATION_UNITS.get(m.group("suffix").lower())
    value = float(m.group("num"))
    if unit is None or not value > 0 or not math.isfinite(value):
        return 0
    return int(value * unit)


def env_bytes(text: str | None) -> int | None:
    """Bytes of ``<PREFIX>GPU_MEMORY_LIMIT`` as the client library parses it; ``None`` if unparsable.

    Per the probe table of sut-interfaces.md §5.1: binary ``Ki``/``Mi``/``Gi`` (and ``KiB``...),
    decimal ``K``/``M``/``G`` (and ``KB``...), bytes without a suffix or with ``B``; any other suffix
    is ignored (``2Ti`` is 2 bytes).
    """
    if text is None:
        return None
    m = _NUMBER_RE.match(text)
    if m is None:
        return None
    value = float(m.group("num"))
    if not math.isfinite(value) or value < 0:
        return None
    return int(value * _ENV_UNITS.get(m.group("suffix").lower(), 1))


def core_limit_value(text: str | int | None) -> int:
    """The core limit the scheduler applies for an annotation value: ``atoi`` in 1..100, else 100.

    sut-interfaces.md §5.1: ``"50%"`` is 50, ``"0.5"`` is 0 (invalid, so 100); absent is 100.
    """
    if text is None:
        return 100
    if isinstance(text, int):
        value = text
    else:
        m = re.match(r"\s*([+-]?\d+)", text)
        value = int(m.group(1)) if m else 0
    return value if 1 <= value <= 100 else 100


# -------------------------------------------------------------------------------------- helpers


def _capture(ev: Evidence, names: Sequence[str]) -> tuple[str | None, CurlResponse | None]:
    """The first of ``names`` that was collected, read as a curl capture."""
    for name in names:
        text = ev.text(name)
        if text is not None:
            return name, read_capture(text)
    return None, None


def _missing(name: str, what: str) -> Check:
    return Check(name, f"evidence: {what}", {}, None, f"{what} was not collected")


def _parse_check(exp: Exposition, source: str) -> Check:
    detail = ""
    if not exp.ok:
        detail = f"{source} line {exp.offending_lineno}: {exp.offending_line!r} ({exp.error})"
    return Check("exposition_parses", f"{source} parses as Prometheus text 0.0.4",
                 {"error": exp.error, "offending_line": exp.offending_line, "lineno": exp.offending_lineno},
                 exp.ok, detail)


def _client_samples(exp: Exposition, client: ClientMatch) -> list[Sample]:
    """The probe's ``client_info`` samples (found by the match's key)."""
    return [s for s, _ in matched_clients(exp, client)]


def _client_seen(exp: Exposition, client: ClientMatch) -> Check:
    """``probe_client_seen``: the probe has a ``client_info`` series on the page, matched by its key.

    ``values``: the match, ``matched_by`` (``client_id -> key``, e.g. ``host_pid 478``); on a miss the
    detail lists what is registered instead (client id, pod, host_pid).
    """
    hits = matched_clients(exp, client)
    by = {s.label("client_id") or "?": key for s, key in hits}
    values: dict[str, Any] = {"workload": client.workload, "match": client.to_dict(), "matched_by": by}
    expr = (f"client_info of {client.workload} present, matched by {client.describe()} "
            "(the scraped scheduler serves it)")
    if not client.usable:  # host mode: no pid recorded and no Client ID line: the evidence to match is missing
        return Check("probe_client_seen", expr, values, None,
                     f"nothing identifies {client.workload}'s clients: {client.describe()} (pods.json host_pid, "
                     "pods/<probe>.log)")
    if hits:
        return Check("probe_client_seen", expr, values, True,
                     "; ".join(f"{cid} matched by {key}" for cid, key in by.items()))
    others = [f"{s.label('client_id')} (pod {s.label('pod')}, host_pid {s.label('host_pid')})"
              for s in exp.values("client_info")]
    values["registered"] = others
    return Check("probe_client_seen", expr, values, False,
                 f"no client_info series matched by {client.describe()}: wrong node's scheduler, or not registered"
                 f" (registered: {', '.join(others) or 'none'})")


def _matched_note(exp: Exposition, client: ClientMatch | None) -> str:
    """`` (<workload> matched by <key>)`` for a PASS summary; empty without a match."""
    if client is None:
        return ""
    keys = sorted({key for _, key in matched_clients(exp, client)})
    return f" ({client.workload} matched by {', '.join(keys)})" if keys else ""


def _per_client(exp: Exposition, metric: str, clients: Iterable[Sample]) -> dict[str, float | None]:
    """``client_id -> value`` of a client metric for the given client_info samples (None: no series)."""
    out: dict[str, float | None] = {}
    for c in clients:
        cid = c.label("client_id") or "?"
        found = exp.values(metric, client_id=cid)
        out[cid] = math.fsum(s.value for s in found) if found else None
    return out


def gpu_rows_for_key(exp: Exposition, metric: str, key: str | None) -> list[Sample]:
    """Device rows of a GPU metric for a client's GPU key.

    The key is what the client reported (sut-interfaces.md §4.2): a UUID (NVML prefix-matches it, so
    either may be a prefix of the other), or an index such as ``0`` outside Kubernetes. With a single
    device row and no match, that row.
    """
    rows = exp.values(metric)
    if not key:
        return []
    hits = [s for s in rows if (u := s.label("gpu_uuid") or "") and (key.startswith(u) or u.startswith(key))]
    if not hits and key.isdigit():
        hits = [s for s in rows if s.label("gpu_index") == key]
    if not hits and len(rows) == 1:
        hits = rows
    return hits


def _percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) with linear interpolation between ranks; None for no values."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _find(ev: Evidence, prefix: str, suffix: str) -> list[str]:
    """Names of evidence files ``<prefix>*<suffix>`` (in memory, then in the case dir), sorted."""
    names = {n for n in ev.files if n.startswith(prefix) and n.endswith(suffix)}
    if ev.case_dir is not None:
        parent = ev.case_dir / prefix.rpartition("/")[0] if "/" in prefix else ev.case_dir
        stem = prefix.rpartition("/")[2]
        if parent.is_dir():
            for p in parent.iterdir():
                if p.name.startswith(stem) and p.name.endswith(suffix):
                    names.add(str(p.relative_to(ev.case_dir)))
    return sorted(names)


def _series(ev: Evidence, name: str = "metrics_series.jsonl") -> tuple[list[ScrapeRecord], list[int]] | None:
    text = ev.text(name)
    return None if text is None else parse_series(text)


def _verdict(checks: list[Check], th: Mapping[str, Any], keys: Sequence[str], metrics: dict[str, Any],
             evidence: list[str], pass_summary: str) -> Verdict:
    status, summary = combine(checks, pass_summary=pass_summary)
    return Verdict(status, summary, checks, _used(th, *keys), metrics, evidence)


def _metrics_source(ev: Evidence, source: str | None, default: Sequence[str]) -> tuple[str | None, str | None]:
    for name in ([source] if source else list(default)):
        text = ev.text(name)
        if text is not None:
            return name, read_capture(text).body
    return None, None


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
    _, health = _capture(ev, ["metrics_health.txt"])
    if health is None:
        checks.append(_missing("healthz_200", "metrics_health.txt"))
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
    _, cap = _capture(ev, ["metrics.txt"])
    if cap is None:
        checks.append(_missing("metrics_has_prefix", "metrics.txt"))
    else:
        evidence.append("metrics.txt")
        if cap.http_code is not None:
            metrics["metrics_http_code"] = cap.http_code
            checks.append(Check("metrics_200", "HTTP_CODE(/metrics) == 200", {"http_code": cap.http_code},
                                cap.http_code == 200, "" if cap.http_code == 200 else f"answered {cap.http_code}"))
        exp = parse_exposition(cap.body, prefix)
        checks.append(_parse_check(exp, "metrics.txt"))
        own = [s for f in exp.families for s in f.samples if exp.prefix and s.name.startswith(exp.prefix + "_")]
        metrics["samples"] = len(own)
        metrics["families"] = len(exp.family_names())
        checks.append(Check("metrics_has_prefix", f"count(samples named {exp.prefix or '<prefix>'}_*) >= 1",
                            {"prefix": exp.prefix, "samples": len(own)}, bool(own),
                            "" if own else "no sample of the SUT's prefix in metrics.txt"))
    return _verdict(checks, th, [], metrics, evidence, "healthz 200 OK and /metrics serves the SUT's metrics")


# ---------------------------------------------------------------------------------------- MET-002


def judge_met002(ev: Evidence, th: Mapping[str, Any], *, client: ClientMatch | None = None,
                 prefix: str | None = None, source: str | None = None) -> Verdict:
    """MET-002: every required family exists (``xpushare/data/required_metrics.yaml``).

    Evidence: ``source``, else ``metrics_mid.txt``, else ``metrics.txt``. With a probe (``client``,
    its :class:`~xpushare.client_match.ClientMatch`) its client must be in the page (so the scraped
    scheduler is the probe's node's) and, with
    ``met002_require_samples``, every required family needs sample lines; without a probe, families
    that need a client only need their HELP/TYPE. GPU families are required when
    ``gpu_sampler_up`` >= 1. Every required family must have ``# HELP`` and ``# TYPE``.
    Metrics: ``missing_metrics`` (full names), ``missing_metric_count``, ``optional_present``.
    """
    keys = ["met002_require_samples"]
    name, text = _metrics_source(ev, source, ["metrics_mid.txt", "metrics.txt"])
    if text is None or name is None:
        return _verdict([_missing("required_metrics", "metrics_mid.txt / metrics.txt")], th, keys, {}, [],
                        "")
    exp = parse_exposition(text, prefix)
    table = load_required_metrics()
    checks = [_parse_check(exp, name)]
    if client is not None:
        checks.append(_client_seen(exp, client))
    sampler_up = (exp.sum("gpu_sampler_up") or 0.0) >= 1
    need_samples = bool(_th(th, "met002_require_samples")) and client is not None
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
    return _verdict(checks, th, keys, metrics, [name],
                    f"all {len(table.required(sampler_up))} required families present{_matched_note(exp, client)}")


# ---------------------------------------------------------------------------------------- MET-003


@dataclass(frozen=True)
class _NvmlRow:
    t: float
    key: str  # pid (procs.csv) or uuid (gpu.csv)
    gpu_index: str
    used: float | None


def _read_sampler(text: str, kind: str) -> list[_NvmlRow]:
    """Rows of the node sampler's ``procs.csv`` (``kind="procs"``) or ``gpu.csv`` (``kind="gpu"``)."""
    rows: list[_NvmlRow] = []
    reader = csv.DictReader(io.StringIO(text))
    for r in reader:
        try:
            t = float(r["timestamp"])
            if kind == "procs":
                key, used_text = str(int(r["pid"])), r.get("used_bytes") or ""
            else:
                key, used_text = (r.get("uuid") or "").strip(), r.get("mem_used_bytes") or ""
            used = float(used_text) if used_text.strip() else None
        except (KeyError, TypeError, ValueError):
            continue
        rows.append(_NvmlRow(t, key, (r.get("gpu_index") or "").strip(), used))
    return rows


def _in_range(value: float, seen: Sequence[float], tol: float) -> bool:
    return min(seen) * (1 - tol) <= value <= max(seen) * (1 + tol)


def judge_met003(ev: Evidence, th: Mapping[str, Any], *, client: ClientMatch, node: str | None = None,
                 mid_at: float | None = None, prefix: str | None = None) -> Verdict:
    """MET-003: the probe's three memory views are > 0 and consistent with each other and with NVML.

    Views in ``metrics_mid.txt`` (else ``metrics.txt``), for the probe's clients (``client``, matched
    by pod in Kubernetes, by host_pid / client_id in host mode):
    ``client_nvml_used_bytes`` (NVML per process), ``client_managed_allocated_bytes`` (the library's
    allocations; the seed's ``memory_need_estimated`` is not exported, sut-interfaces.md §6.3) and
    ``gpu_memory_used_bytes`` of the pod's GPU. Semantics: a process's NVML memory is part of its
    device's used memory (``nvml <= gpu_used``). NVML cross-check with the node sampler
    (``sampler/<node>_procs.csv`` by the pod's ``host_pid``, ``sampler/<node>_gpu.csv`` by UUID):
    each metric lies within the range the sampler saw ± ``met003_nvml_tolerance_ratio``, over the
    samples within ``met003_window_s`` of ``mid_at`` (Unix s, when ``metrics_mid`` was taken; all
    samples when None). Without sampler evidence the cross-check is ERROR, unless
    ``met003_require_nvml`` is false (then it is left out and the summary says so). Scheduler-log
    cross-check (seed 000 MET-003 compares the scheduler log too): where ``scheduler.log`` holds the
    debug-mode ``Received MEM_UPDATE from <id>: <n> MB`` lines of a probe client, its managed allocation
    in whole MiB must equal the last one logged by ``mid_at``
    (:func:`~xpushare.collect.scheduler_log.logged_allocations`); without such lines it is left out and
    the summary says so.
    """
    keys = ["met003_nvml_tolerance_ratio", "met003_window_s", "met003_require_nvml"]
    name, text = _metrics_source(ev, None, ["metrics_mid.txt", "metrics.txt"])
    if text is None or name is None:
        return _verdict([_missing("memory_views", "metrics_mid.txt")], th, keys, {}, [], "")
    exp = parse_exposition(text, prefix)
    evidence = [name]
    checks = [_parse_check(exp, name), _client_seen(exp, client)]
    clients = _client_samples(exp, client)
    metrics: dict[str, Any] = {}
    if not clients:
        return _verdict(checks, th, keys, metrics, evidence, "")
    managed = _per_client(exp, "client_managed_allocated_bytes", clients)
    nvml = _per_client(exp, "client_nvml_used_bytes", clients)
    gpu_used: dict[str, float | None] = {}
    for c in clients:
        rows = gpu_rows_for_key(exp, "gpu_memory_used_bytes", c.label("gpu_uuid"))
        gpu_used[c.label("client_id") or "?"] = math.fsum(r.value for r in rows) if rows else None
    metrics.update({"client_managed_allocated_bytes": managed, "client_nvml_used_bytes": nvml,
                    "gpu_memory_used_bytes": gpu_used})
    for label, view in (("managed_allocated", managed), ("nvml_used", nvml), ("gpu_used", gpu_used)):
        bad = [cid for cid, v in view.items() if v is None or not v > 0]
        checks.append(Check(f"{label}_positive", f"{label}(probe clients) > 0", {"values": view}, not bad,
                            f"not > 0 (or absent) for client(s) {', '.join(bad)}" if bad else ""))
    pairs = {cid: (nvml[cid], gpu_used[cid]) for cid in nvml}
    incons = [cid for cid, (n, g) in pairs.items() if n is not None and g is not None and n > g]
    checks.append(Check("nvml_within_gpu_used", "client_nvml_used_bytes <= gpu_memory_used_bytes(its GPU)",
                        {"pairs": pairs}, not incons,
                        f"process memory exceeds the device's used memory for {', '.join(incons)}" if incons else ""))
    log_note = _log_check(ev, checks, managed, mid_at, evidence)

    tol = float(_th(th, "met003_nvml_tolerance_ratio"))
    window = float(_th(th, "met003_window_s"))
    procs_files = [f"sampler/{node}_procs.csv"] if node else _find(ev, "sampler/", "_procs.csv")
    gpu_files = [f"sampler/{node}_gpu.csv"] if node else _find(ev, "sampler/", "_gpu.csv")
    procs = [r for f in procs_files if (t := ev.text(f)) is not None for r in _read_sampler(t, "procs")]
    gpus = [r for f in gpu_files if (t := ev.text(f)) is not None for r in _read_sampler(t, "gpu")]
    if mid_at is not None:
        procs = [r for r in procs if abs(r.t - mid_at) <= window]
        gpus = [r for r in gpus if abs(r.t - mid_at) <= window]
    if not procs and not gpus:
        if bool(_th(th, "met003_require_nvml")):
            checks.append(Check("nvml_cross_check", "metrics within the node sampler's NVML values",
                                {"files": procs_files + gpu_files}, None,
                                "no NVML samples from the node sampler (sampler/<node>_procs.csv, _gpu.csv)"))
        verdict = _verdict(checks, th, keys, metrics, evidence,
                           f"memory views > 0 and consistent{_matched_note(exp, client)}")
        if verdict.status is Status.PASS:
            verdict.summary += " (NVML cross-check not possible: no node sampler evidence)" + log_note
        return verdict
    evidence += [f for f in procs_files + gpu_files if ev.text(f) is not None]
    per_pid: dict[str, Any] = {}
    bad_pid: list[str] = []
    for c in clients:
        cid, pid = c.label("client_id") or "?", c.label("host_pid") or ""
        seen = [r.used for r in procs if r.key == pid and r.used is not None]
        value = nvml.get(cid)
        ok = bool(seen) and value is not None and _in_range(value, seen, tol)
        per_pid[pid] = {"metric": value, "nvml_min": min(seen, default=None), "nvml_max": max(seen, default=None)}
        if not ok:
            bad_pid.append(pid)
    checks.append(Check("nvml_process_memory_matches",
                        f"client_nvml_used_bytes within [min, max] of NVML per-process memory ± {tol:.0%}",
                        {"by_host_pid": per_pid}, not bad_pid,
                        f"no matching NVML memory for host_pid {', '.join(bad_pid)}" if bad_pid else ""))
    per_gpu: dict[str, Any] = {}
    bad_gpu: list[str] = []
    for c in clients:
        rows = gpu_rows_for_key(exp, "gpu_memory_used_bytes", c.label("gpu_uuid"))
        for r in rows:
            uuid = r.label("gpu_uuid") or ""
            seen = [g.used for g in gpus if g.key == uuid and g.used is not None]
            ok = bool(seen) and _in_range(r.value, seen, tol)
            per_gpu[uuid] = {"metric": r.value, "nvml_min": min(seen) if seen else None,
                             "nvml_max": max(seen) if seen else None}
            if not ok:
                bad_gpu.append(uuid)
    checks.append(Check("nvml_gpu_memory_matches",
                        f"gpu_memory_used_bytes within [min, max] of NVML device memory ± {tol:.0%}",
                        {"by_gpu": per_gpu}, None if not per_gpu else not bad_gpu,
                        "no device row to compare" if not per_gpu
                        else (f"differs from NVML on {', '.join(sorted(set(bad_gpu)))}" if bad_gpu else "")))
    metrics["nvml_by_host_pid"] = per_pid
    return _verdict(checks, th, keys, metrics, evidence,
                    f"memory views > 0 and consistent with NVML{_matched_note(exp, client)}{log_note}")


def _log_check(ev: Evidence, checks: list[Check], managed: Mapping[str, float | None], mid_at: float | None,
               evidence: list[str]) -> str:
    """``managed_matches_scheduler_log``: each probe client's ``client_managed_allocated_bytes``, in whole MiB,
    equals the last MEM_UPDATE the scheduler logged for it by ``mid_at`` (``scheduler.log``).

    Appended to ``checks`` only when the log holds a MEM_UPDATE line of a probe client (debug mode); else
    nothing is judged and the returned note (for a PASS summary) says so.
    """
    text = ev.text("scheduler.log")
    logged = logged_allocations(text, mid_at) if text is not None else {}
    seen = {cid: logged[cid.lower()] for cid in managed if cid.lower() in logged}
    if not seen:
        return (" (no scheduler log" if text is None else " (no MEM_UPDATE line of the probe in the scheduler log,"
                " debug mode off?") + ": managed allocation not compared with it)"
    evidence.append("scheduler.log")
    pairs = {cid: {"metric_mib": None if (v := managed[cid]) is None else math.floor(v / 2**20), "logged_mib": mb}
             for cid, mb in seen.items()}
    bad = [cid for cid, p in pairs.items() if p["metric_mib"] != p["logged_mib"]]
    checks.append(Check("managed_matches_scheduler_log",
                        "floor(client_managed_allocated_bytes / MiB) == last logged MEM_UPDATE (MB) of the client",
                        {"by_client": pairs}, not bad,
                        "; ".join(f"{cid}: metric {pairs[cid]['metric_mib']} MiB, log {pairs[cid]['logged_mib']} MB"
                                  for cid in bad)))
    return ""


# ---------------------------------------------------------------------------------------- MET-004


def judge_met004(ev: Evidence, th: Mapping[str, Any], *, client: ClientMatch,
                 core_limit: str | int | None = None, memory_limit: str | None = None,
                 memory_limit_env: str | None = None, prefix: str | None = None) -> Verdict:
    """MET-004: the exported quotas equal the configured ones exactly.

    Configured (the case's plan): ``core_limit`` (annotation value), ``memory_limit`` (annotation,
    e.g. ``"4Gi"``), ``memory_limit_env`` (``<PREFIX>GPU_MEMORY_LIMIT``). Expected exports, per
    client of the probe (``client``: its match, by pod in Kubernetes) in ``metrics_mid.txt``:
    ``client_core_quota_config_percent`` = :func:`core_limit_value` (100 without an annotation),
    ``client_memory_quota_bytes`` = :func:`annotation_bytes` of the annotation; with only an env
    limit, 0 (the exporter does not show env limits, sut-interfaces.md §6.3) unless
    ``met004_env_in_metrics`` (then the library's parse, :func:`env_bytes`).
    """
    keys = ["met004_env_in_metrics"]
    name, text = _metrics_source(ev, None, ["metrics_mid.txt", "metrics.txt"])
    if text is None or name is None:
        return _verdict([_missing("quota_metrics", "metrics_mid.txt")], th, keys, {}, [], "")
    exp = parse_exposition(text, prefix)
    checks = [_parse_check(exp, name), _client_seen(exp, client)]
    clients = _client_samples(exp, client)
    if not clients:
        return _verdict(checks, th, keys, {}, [name], "")
    want_core = core_limit_value(core_limit)
    if memory_limit is not None:
        want_mem: int | None = annotation_bytes(memory_limit)
        mem_src = f"annotation {memory_limit!r}"
    elif memory_limit_env is not None and bool(_th(th, "met004_env_in_metrics")):
        want_mem = env_bytes(memory_limit_env)
        mem_src = f"env {memory_limit_env!r}"
    else:
        want_mem = 0
        mem_src = "no annotation (env limits are not exported)" if memory_limit_env else "no limit"
    core = _per_client(exp, "client_core_quota_config_percent", clients)
    mem = _per_client(exp, "client_memory_quota_bytes", clients)
    bad_core = [cid for cid, v in core.items() if v != want_core]
    checks.append(Check("core_quota_matches", f"client_core_quota_config_percent == {want_core}",
                        {"configured": core_limit, "expected": want_core, "exported": core}, not bad_core,
                        f"exported {[core[c] for c in bad_core]} for configured {core_limit!r}" if bad_core else ""))
    if want_mem is None:
        checks.append(Check("memory_quota_matches", "client_memory_quota_bytes == configured", {"configured": mem_src},
                            None, f"cannot parse the configured memory limit ({mem_src})"))
    else:
        bad_mem = [cid for cid, v in mem.items() if v != want_mem]
        checks.append(Check("memory_quota_matches", f"client_memory_quota_bytes == {want_mem} ({mem_src})",
                            {"expected": want_mem, "exported": mem}, not bad_mem,
                            f"exported {[mem[c] for c in bad_mem]}, configured {want_mem}" if bad_mem else ""))
    first = clients[0].label("client_id") or "?"
    metrics = {"metric_core_quota_percent": core.get(first), "metric_memory_quota_bytes": mem.get(first),
               "expected_core_quota_percent": want_core, "expected_memory_quota_bytes": want_mem}
    return _verdict(checks, th, keys, metrics, [name], f"exported quotas equal the configuration "
                    f"(core {want_core}%, memory {want_mem} bytes){_matched_note(exp, client)}")


# ---------------------------------------------------------------------------------------- MET-005


def quota_state(exp: Exposition, client: ClientMatch) -> tuple[float | None, float | None]:
    """``(core percent, memory bytes)`` the page exports for the workload's clients (the last series of
    ``client_core_quota_config_percent`` / ``client_memory_quota_bytes``; None: no series)."""
    core = [s.value for s in client_values(exp, "client_core_quota_config_percent", client)]
    mem = [s.value for s in client_values(exp, "client_memory_quota_bytes", client)]
    return (core[-1] if core else None), (mem[-1] if mem else None)


def judge_met005(ev: Evidence, th: Mapping[str, Any], *, client: ClientMatch, changed_at: float,
                 core_limit: str | int | None = None, memory_limit: str | None = None,
                 prefix: str | None = None) -> Verdict:
    """MET-005: after an annotation change the probe's quota series show the new values within 15 s.

    ``client``: the probe's match (its series are read by the ``client_id`` of its matched
    ``client_info``, :func:`quota_state`); ``changed_at``: Unix time (s) of the annotate call;
    ``core_limit``/``memory_limit``: the new annotation values (at least one). Evidence:
    ``metrics_series.jsonl`` polled across the change; the state before comes from records that
    ended before ``changed_at``, else from
    ``metrics_before.txt``, and must differ from the target (otherwise nothing was measured). The
    latency is the end of the first scrape that shows every target value minus ``changed_at`` (an
    upper bound, resolution = the poll interval). Threshold ``met005_max_latency_s``.
    """
    keys = ["met005_max_latency_s"]
    if core_limit is None and memory_limit is None:
        raise ValueError("judge_met005 needs the new core_limit and/or memory_limit")
    want_core = None if core_limit is None else float(core_limit_value(core_limit))
    want_mem = None if memory_limit is None else float(annotation_bytes(memory_limit))
    loaded = _series(ev)
    if loaded is None:
        return _verdict([_missing("change_observed", "metrics_series.jsonl")], th, keys, {}, [], "")
    records, bad_lines = loaded
    evidence = ["metrics_series.jsonl"]

    def matches(state: tuple[float | None, float | None]) -> bool:
        return (want_core is None or state[0] == want_core) and (want_mem is None or state[1] == want_mem)

    before: tuple[float | None, float | None] | None = None
    for r in records:
        if r.t_end < changed_at and r.responded and r.body is not None:
            st = quota_state(parse_exposition(r.body, prefix), client)
            if st != (None, None):
                before = st
    if before is None and (text := ev.text("metrics_before.txt")) is not None:
        st = quota_state(parse_exposition(read_capture(text).body, prefix), client)
        before = st if st != (None, None) else None
        evidence.append("metrics_before.txt")
    checks: list[Check] = []
    targets = {"core_percent": want_core, "memory_bytes": want_mem}
    if before is None:
        checks.append(Check("state_before_known", "the pod's quota series before the change", {}, None,
                            "no scrape before the change shows the pod's quota series"))
    else:
        differs = not matches(before)
        checks.append(Check("state_before_differs", "quota(before) != target",
                            {"before": {"core_percent": before[0], "memory_bytes": before[1]}, "target": targets},
                            differs, "" if differs else "the pod already had the target values: nothing to measure"))
    after = [r for r in records if r.t >= changed_at]
    seen: tuple[float | None, float | None] = (None, None)
    latency: float | None = None
    for r in after:
        if not (r.responded and r.body is not None):
            continue
        seen = quota_state(parse_exposition(r.body, prefix), client)
        if matches(seen):
            latency = r.t_end - changed_at
            break
    limit = float(_th(th, "met005_max_latency_s"))
    polled = (after[-1].t_end - changed_at) if after else 0.0
    if latency is None:
        checks.append(Check("change_observed", "a scrape after the change shows the target values",
                            {"target": targets, "last_seen": {"core_percent": seen[0], "memory_bytes": seen[1]},
                             "scrapes_after": len(after), "polled_s": round(polled, 3)},
                            False if after else None,
                            f"not seen in {polled:.1f} s of polling (last: core {seen[0]}, memory {seen[1]})"
                            if after else "no scrape after the change"))
    else:
        checks.append(Check("change_latency", f"latency_s <= {limit:g}", {"latency_s": round(latency, 3)},
                            latency <= limit, "" if latency <= limit else f"{latency:.1f} s > {limit:g} s"))
    metrics = {"dynamic_quota_metric_latency_sec": None if latency is None else round(latency, 3),
               "scrapes": len(records), "unreadable_lines": bad_lines}
    summary_ok = (f"new quota visible in the metrics after {latency:.1f} s (series of {client.workload}, "
                  f"by {client.describe()})" if latency is not None else "")
    return _verdict(checks, th, keys, metrics, evidence, summary_ok)


# ---------------------------------------------------------------------------------------- MET-006


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
    :mod:`xpushare.collect.dmon`, which finds ``sm`` from the header (column 1 under ``-s u``,
    column 4 in the default layout). ``gpu_index``: the pod's GPU (default: the GPU whose metric
    peaks highest). Checks: max metric ≥ ``met006_min_util``; max dmon sm ≥ the same in percent (the
    GPU really was busy); mean |util×100 − sm| over aligned samples ≤
    ``met006_max_mean_abs_diff_pct`` (aligned by ``dmon_started_at``, Unix s, when known; else by the
    best lag).
    """
    keys = ["met006_min_util", "met006_max_mean_abs_diff_pct"]
    loaded = _series(ev)
    if loaded is None:
        return _verdict([_missing("metric_util_rises", "metrics_series.jsonl")], th, keys, {}, [], "")
    records, _ = loaded
    evidence = ["metrics_series.jsonl"]
    points = _util_points(records, prefix)
    checks: list[Check] = []
    min_util = float(_th(th, "met006_min_util"))
    if not points:
        checks.append(Check("metric_util_rises", f"max(gpu_utilization_ratio) >= {min_util}", {}, None,
                            "no gpu_utilization_ratio sample in the series (no sampler backend?)"))
        return _verdict(checks, th, keys, {}, evidence, "")
    gpu = str(gpu_index) if gpu_index is not None else max(points, key=lambda g: max(u for _, u in points[g]))
    series = points.get(gpu, [])
    max_util = max((u for _, u in series), default=None)
    checks.append(Check("metric_util_rises", f"max(gpu_utilization_ratio{{gpu_index={gpu}}}) >= {min_util}",
                        {"max_util": max_util, "samples": len(series)},
                        None if max_util is None else max_util >= min_util,
                        "no sample for that GPU" if max_util is None
                        else ("" if max_util >= min_util else f"peak {max_util:.2f}")))
    dmon_names = [f"remote_{node}_dmon.txt"] if node else _find(ev, "remote_", "_dmon.txt")
    dmon_texts = [(n, t) for n in dmon_names if (t := ev.text(n)) is not None]
    metrics: dict[str, Any] = {"max_gpu_util_ratio": max_util, "gpu_index": gpu}
    if len(dmon_texts) != 1:
        detail = "no dmon capture" if not dmon_texts else f"several dmon captures, name the node: {dmon_names}"
        checks.append(Check("dmon_follows", "metrics follow dmon sm", {"files": dmon_names}, None, detail))
        return _verdict(checks, th, keys, metrics, evidence, "")
    dname, dtext = dmon_texts[0]
    evidence.append(dname)
    parsed = dmon_parser.parse(dtext)
    if not parsed.has_column("sm"):
        checks.append(Check("dmon_follows", "dmon capture has an sm column", {"columns": list(parsed.columns)}, None,
                            f"{dname} has no sm column (dmon run without -s u?)"))
        return _verdict(checks, th, keys, metrics, evidence, "")
    sm = dmon_parser.sm_series(parsed, gpu)
    sm_max = max((v for v in sm if v is not None), default=None)
    metrics["max_dmon_sm_pct"] = sm_max
    checks.append(Check("dmon_sm_rises", f"max(dmon sm, gpu {gpu}) >= {min_util * 100:g}",
                        {"max_sm_pct": sm_max, "rows": len(sm)}, None if sm_max is None else sm_max >= min_util * 100,
                        f"no dmon rows for GPU {gpu}" if sm_max is None
                        else ("" if sm_max >= min_util * 100 else f"dmon peak {sm_max:g} %: the GPU was not busy")))
    mad, pairs, lag = _align(series, sm, dmon_interval_s, dmon_started_at)
    limit = float(_th(th, "met006_max_mean_abs_diff_pct"))
    how = "dmon_started_at" if dmon_started_at is not None else f"best lag {lag} rows"
    metrics.update({"mean_abs_diff_pct": None if mad is None else round(mad, 2), "aligned_pairs": pairs,
                    "alignment": how})
    checks.append(Check("dmon_follows", f"mean(|util×100 − sm|) <= {limit:g} points ({how})",
                        {"mean_abs_diff_pct": mad, "pairs": pairs, "lag": lag}, None if mad is None else mad <= limit,
                        "no overlapping samples of metrics and dmon" if mad is None
                        else ("" if mad <= limit else f"differs by {mad:.1f} points on average")))
    return _verdict(checks, th, keys, metrics, evidence,
                    f"utilisation peaks at {max_util or 0:.2f} and follows dmon sm (±{mad or 0:.1f} points)")


# ---------------------------------------------------------------------------------------- MET-007


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
    loaded = _series(ev)
    if loaded is None:
        return _verdict([_missing("scrapes", "metrics_series.jsonl")], th, keys, {}, [], "")
    records, bad_lines = loaded
    duration = float(_th(th, "met007_duration_s"))
    interval = float(_th(th, "met007_interval_s"))
    expected = max(1, int(duration / interval))
    span = (records[-1].t - records[0].t) if records else 0.0
    flags = [_record_ok(r, prefix) for r in records]
    ok = [r for r, good in zip(records, flags, strict=True) if good]
    failures = [r for r, good in zip(records, flags, strict=True) if not good]
    ratio = len(ok) / len(records) if records else 0.0
    gaps = [b.t - a.t for a, b in itertools.pairwise(records)]
    median_gap = statistics.median(gaps) if gaps else None
    lat = [r.latency_s for r in ok]
    p50, p99 = _percentile(lat, 50), _percentile(lat, 99)
    checks = [
        Check("scrape_count", f"scrapes >= {expected} over >= {duration - interval:g} s",
              {"scrapes": len(records), "span_s": round(span, 3), "unreadable_lines": bad_lines},
              len(records) >= expected and span >= duration - interval,
              "" if len(records) >= expected and span >= duration - interval
              else f"{len(records)} scrapes over {span:.1f} s"),
        Check("scrape_success", f"success_ratio >= {_th(th, 'met007_min_success_ratio')}",
              {"ok": len(ok), "total": len(records),
               "first_failures": [{"t": r.t, "status": r.status, "error": r.error} for r in failures[:5]]},
              bool(records) and ratio >= float(_th(th, "met007_min_success_ratio")),
              "" if records and not failures else f"{len(failures)}/{len(records)} scrapes failed"
              + (f" (first: {failures[0].error or failures[0].status})" if failures else "")),
        Check("scrape_cadence", f"median gap <= {1.5 * interval:g} s", {"median_gap_s": median_gap},
              None if median_gap is None else median_gap <= 1.5 * interval,
              "fewer than 2 scrapes" if median_gap is None
              else ("" if median_gap <= 1.5 * interval else f"median gap {median_gap:.2f} s")),
        Check("scrape_latency_p99", f"p99 latency <= {_th(th, 'met007_max_p99_latency_s')} s",
              {"p50_s": p50, "p99_s": p99}, None if p99 is None else p99 <= float(_th(th, "met007_max_p99_latency_s")),
              "no successful scrape" if p99 is None
              else ("" if p99 <= float(_th(th, "met007_max_p99_latency_s")) else f"p99 {p99:.3f} s")),
    ]
    evidence = ["metrics_series.jsonl"]
    _, health = _capture(ev, ["metrics_health.txt"])
    if health is None:
        checks.append(_missing("healthz_after", "metrics_health.txt"))
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
    return _verdict(checks, th, keys, metrics, evidence, pass_summary)


# ---------------------------------------------------------------------------------------- MET-008


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
    loaded = _series(ev)
    if loaded is None:
        return _verdict([_missing("alert_trips", "metrics_series.jsonl")], th, keys, {}, [], "")
    records, _ = loaded
    threshold = float(_th(th, "met008_alert_ratio"))
    for_s = float(_th(th, "met008_for_s"))
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
    return _verdict([check], th, keys, metrics, ["metrics_series.jsonl"], pass_summary)
