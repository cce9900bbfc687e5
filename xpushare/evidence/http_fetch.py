"""One HTTP GET of the scheduler's exporter from this machine, with the standard library: the fetcher of
``invoke metrics-check --url`` and of the MET cases where the exporter is reachable from here.

A fetcher is ``fetch(url) -> (status_code, content_type, body)`` (:data:`Fetch`) that raises
:class:`FetchError` when no HTTP response came back (refused, timed out, DNS, reset before the headers);
HTTP errors (404 ...) are answers. The fetch types, and the fetchers that run curl on a node through the
transport (a pod IP is only reachable from the nodes), are the scraper's
(:mod:`xpushare.evidence.scrape_capture`); this module holds the fetch that needs no command.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from http.client import HTTPException

from xpushare.evidence.scrape_capture import (
    Fetch,
    FetchError,
    FetchResult,
    TimedFetch,
    TimedResult,
    without_credentials,
)

__all__ = ["Fetch", "FetchError", "FetchResult", "TimedFetch", "TimedResult", "timed", "urllib_fetcher"]


def urllib_fetcher(timeout_s: float = 10.0) -> Fetch:
    """A ``fetch`` that GETs from this machine with the standard library (no proxy; ``timeout_s`` s).

    HTTP errors (404 ...) are answers, returned as results; only a missing answer raises
    :class:`FetchError`.
    """
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def fetch(url: str) -> FetchResult:
        try:
            with opener.open(urllib.request.Request(url, method="GET"), timeout=timeout_s) as resp:
                return resp.status, resp.headers.get("Content-Type"), resp.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as exc:
            body = exc.read().decode("utf-8", "replace") if exc.fp is not None else ""
            return exc.code, exc.headers.get("Content-Type") if exc.headers else None, body
        except (urllib.error.URLError, OSError, HTTPException, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise FetchError(f"GET {without_credentials(url)[0]}: {reason}") from None

    return fetch


def timed(fetch: Fetch) -> TimedFetch:
    """A plain :data:`Fetch` as a :data:`TimedFetch` (no own timing)."""
    def get(url: str) -> TimedResult:
        status, ctype, body = fetch(url)
        return status, ctype, body, None
    return get
