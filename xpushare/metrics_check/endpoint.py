"""Fetching for ``invoke metrics-check``: the three answers of an exporter (``/healthz``, ``/metrics``, an unknown
path), a ``/metrics`` scraper for the load part, and a fixed-rate series (``metrics_series.jsonl`` records).

``fetch`` is a :data:`~xpushare.evidence.http_fetch.Fetch` (default: ``urllib_fetcher()`` from this machine);
network failures are recorded (``status`` None and the error), never raised.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from xpushare.evidence.http_fetch import Fetch, FetchError, urllib_fetcher
from xpushare.evidence.scrape_capture import ScrapeRecord, base_url_of

__all__ = ["DEFAULT_NOTFOUND_PATH", "EndpointEvidence", "HttpResponse", "fetch_endpoint", "metrics_scraper",
           "scrape_series"]

#: The unknown path of seed 002 §6 (any path not starting with /metrics or /healthz is 404, §6.1).
DEFAULT_NOTFOUND_PATH = "/notexist"


@dataclass(frozen=True)
class HttpResponse:
    """One GET: ``status`` (``None`` when no response came back, then ``error`` says why),
    ``content_type`` (the header, ``None`` if absent), ``body`` (text), ``elapsed_s`` (seconds)."""

    url: str
    status: int | None
    content_type: str | None
    body: str
    error: str | None
    elapsed_s: float

    @property
    def answered(self) -> bool:
        return self.status is not None


def _get(fetch: Fetch, url: str, clock: Callable[[], float]) -> HttpResponse:
    start = clock()
    try:
        status, ctype, body = fetch(url)
    except FetchError as exc:
        return HttpResponse(url, None, None, "", str(exc), clock() - start)
    return HttpResponse(url, int(status), ctype, body, None, clock() - start)


@dataclass(frozen=True)
class EndpointEvidence:
    """The three answers of a scheduler's exporter at ``base_url`` (``http://HOST:PORT``)."""

    base_url: str
    healthz: HttpResponse
    metrics: HttpResponse
    notfound: HttpResponse

    @property
    def unreachable(self) -> bool:
        """No request got any HTTP response (the endpoint is down or not reachable from here)."""
        return not (self.healthz.answered or self.metrics.answered or self.notfound.answered)


def fetch_endpoint(base_url: str, fetch: Fetch | None = None, *, notfound_path: str = DEFAULT_NOTFOUND_PATH,
                   clock: Callable[[], float] = time.monotonic) -> EndpointEvidence:
    """GET ``/healthz``, ``/metrics`` and ``notfound_path`` of ``base_url`` (a trailing ``/metrics`` is
    ignored). ``fetch`` defaults to :func:`urllib_fetcher`. Never raises for network failures: a
    request without a response is recorded with its error."""
    fetch = fetch or urllib_fetcher()
    base = base_url_of(base_url)
    return EndpointEvidence(
        base_url=base,
        healthz=_get(fetch, base + "/healthz", clock),
        metrics=_get(fetch, base + "/metrics", clock),
        notfound=_get(fetch, base + notfound_path, clock),
    )


def metrics_scraper(url: str, fetch: Fetch | None = None) -> Callable[[], HttpResponse]:
    """A no-argument GET of ``<base>/metrics`` (``url`` with or without ``/metrics``), for :func:`run_load_checks`."""
    fetch = fetch or urllib_fetcher()
    target = base_url_of(url) + "/metrics"
    return lambda: _get(fetch, target, time.monotonic)


def scrape_series(url: str, fetch: Fetch | None = None, *, interval_s: float = 2.0, duration_s: float = 120.0,
                  keep_body: bool = True, clock: Callable[[], float] = time.time,
                  sleep: Callable[[float], None] = time.sleep) -> list[ScrapeRecord]:
    """Scrape ``url`` every ``interval_s`` seconds (fixed rate from the first start) for ``duration_s``.

    Returns :class:`~xpushare.evidence.scrape_capture.ScrapeRecord` rows (Unix start time, latency, status,
    error, body) for ``metrics_series.jsonl`` (``record.to_json_line()``), the evidence of
    MET-005..008. A scrape that overruns its slot delays the next one (it is not skipped).
    """
    fetch = fetch or urllib_fetcher()
    records: list[ScrapeRecord] = []
    t0 = clock()
    k = 0
    while True:
        due = t0 + k * interval_s
        if due - t0 > duration_s + 1e-9:
            break
        now = clock()
        if due > now:
            sleep(due - now)
        start = clock()
        try:
            status, _ctype, body = fetch(url)
            records.append(ScrapeRecord(start, clock() - start, int(status), None, body if keep_body else None))
        except FetchError as exc:
            records.append(ScrapeRecord(start, clock() - start, None, str(exc), None))
        k += 1
    return records

