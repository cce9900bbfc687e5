"""Checks the MET-001..008 judgments share: exposition parses, the probe client is seen (by its
:class:`~xpushare.evidence.client_match.ClientMatch` key), per-client values, the GPU rows of a client, and the
verdict with the thresholds used (defaults: :data:`xpushare.judge.thresholds.METRICS`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from xpushare.evidence.client_match import ClientMatch, matched_clients
from xpushare.evidence.scrape_capture import ScrapeRecord
from xpushare.evidence.store import Evidence
from xpushare.judge import thresholds
from xpushare.judge.metrics_evidence import load_series
from xpushare.model.verdict import Check, Verdict, combine
from xpushare.parsers.metrics import Exposition, Sample


def th_value(th: Mapping[str, Any], key: str) -> Any:
    """A MET threshold: the case's value, else the seed's default."""
    return thresholds.threshold(th, key, thresholds.METRICS)


def th_used(th: Mapping[str, Any], *keys: str) -> dict[str, Any]:
    """The thresholds ``keys`` as a verdict records them (key -> value used)."""
    return {k: th_value(th, k) for k in keys}


def missing_check(name: str, what: str) -> Check:
    """An unevaluable check (``ok=None``, so ERROR): the evidence ``what`` was not collected."""
    return Check(name, f"evidence: {what}", {}, None, f"{what} was not collected")


def parse_check(exp: Exposition, source: str) -> Check:
    """``exposition_parses``: the capture ``source`` is Prometheus text 0.0.4 (else the offending line)."""
    detail = ""
    if not exp.ok:
        detail = f"{source} line {exp.offending_lineno}: {exp.offending_line!r} ({exp.error})"
    return Check("exposition_parses", f"{source} parses as Prometheus text 0.0.4",
                 {"error": exp.error, "offending_line": exp.offending_line, "lineno": exp.offending_lineno},
                 exp.ok, detail)


def client_samples(exp: Exposition, client: ClientMatch) -> list[Sample]:
    """The probe's ``client_info`` samples (found by the match's key)."""
    return [s for s, _ in matched_clients(exp, client)]


def client_seen_check(exp: Exposition, client: ClientMatch) -> Check:
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


def matched_note(exp: Exposition, client: ClientMatch | None) -> str:
    """`` (<workload> matched by <key>)`` for a PASS summary; empty without a match."""
    if client is None:
        return ""
    keys = sorted({key for _, key in matched_clients(exp, client)})
    return f" ({client.workload} matched by {', '.join(keys)})" if keys else ""


def per_client(exp: Exposition, metric: str, clients: Iterable[Sample]) -> dict[str, float | None]:
    """``client_id -> value`` of a client metric for the given client_info samples (None: no series)."""
    out: dict[str, float | None] = {}
    for c in clients:
        cid = c.label("client_id") or "?"
        found = exp.values(metric, client_id=cid)
        out[cid] = math.fsum(s.value for s in found) if found else None
    return out


def gpu_rows_for_key(exp: Exposition, metric: str, key: str | None) -> list[Sample]:
    """Device rows of a GPU metric for a client's GPU key.

    The key is what the client reported (docs/sut/log.md §registration): a UUID (NVML prefix-matches it, so
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


def metrics_verdict(checks: list[Check], th: Mapping[str, Any], keys: Sequence[str], metrics: dict[str, Any],
             evidence: list[str], pass_summary: str) -> Verdict:
    """The verdict of ``checks`` (:func:`~xpushare.model.verdict.combine`) with the thresholds ``keys`` it used."""
    status, summary = combine(checks, pass_summary=pass_summary)
    return Verdict(status, summary, checks, th_used(th, *keys), metrics, evidence)


def series_or_missing(ev: Evidence, th: Mapping[str, Any], keys: Sequence[str],
                      check: str) -> tuple[list[ScrapeRecord], list[int]] | Verdict:
    """The records of ``metrics_series.jsonl`` and its unreadable line numbers, or the verdict without the file
    (check ``check`` missing, thresholds ``keys``)."""
    loaded = load_series(ev)
    if loaded is None:
        return metrics_verdict([missing_check(check, "metrics_series.jsonl")], th, keys, {}, [], "")
    return loaded
