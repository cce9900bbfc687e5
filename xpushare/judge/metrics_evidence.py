"""Evidence of the metrics suite: the required-metrics table, curl captures, the scrape series, and how
a judgment finds them in a case directory (names are those of :mod:`xpushare.judge.metrics`).

Pure readers: text or :class:`~xpushare.evidence.store.Evidence` in, typed values out; they never raise on
bad input (a malformed line is reported, not fatal), except a malformed package table.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources

import yaml

from xpushare.collect.metrics import CurlResponse, parse_curl_output
from xpushare.evidence.store import Evidence


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


def read_first_capture(ev: Evidence, names: Sequence[str]) -> tuple[str | None, CurlResponse | None]:
    """The first of ``names`` that was collected, read as a curl capture."""
    for name in names:
        text = ev.text(name)
        if text is not None:
            return name, read_capture(text)
    return None, None


def find_evidence(ev: Evidence, prefix: str, suffix: str) -> list[str]:
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


def load_series(ev: Evidence, name: str = "metrics_series.jsonl") -> tuple[list[ScrapeRecord], list[int]] | None:
    """The scrape records of ``name`` and its unreadable line numbers; None when it was not collected."""
    text = ev.text(name)
    return None if text is None else parse_series(text)


def metrics_source(ev: Evidence, source: str | None, default: Sequence[str]) -> tuple[str | None, str | None]:
    """``(name, body)`` of ``source``, else of the first of ``default`` collected; ``(None, None)`` without one."""
    for name in ([source] if source else list(default)):
        text = ev.text(name)
        if text is not None:
            return name, read_capture(text).body
    return None, None
