"""Evidence of the metrics suite: the required-metrics table, and how a judgment finds the curl captures and
the scrape series in a case directory (names are those of :mod:`xpushare.judge.metrics`; the file formats are
:mod:`xpushare.evidence.scrape_capture`'s).

Pure readers: text or :class:`~xpushare.evidence.store.Evidence` in, typed values out; they never raise on
bad input (a malformed line is reported, not fatal), except a malformed package table.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources

import yaml

from xpushare.evidence.scrape_capture import CurlResponse, ScrapeRecord, parse_series, read_capture
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
