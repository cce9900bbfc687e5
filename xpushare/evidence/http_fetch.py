"""One HTTP GET of the scheduler's exporter, from this machine or from a node: the fetchers behind
``invoke metrics-check`` and the MET cases' scrapes.

A fetcher is ``fetch(url) -> (status_code, content_type, body)`` (:data:`Fetch`) that raises
:class:`FetchError` when no HTTP response came back (refused, timed out, DNS, reset before the headers);
HTTP errors (404 ...) are answers. :func:`urllib_fetcher` GETs from this machine; :func:`curl_fetcher` and
:func:`timed_curl_fetcher` run curl on a host through the transport (a pod IP is only reachable from the
nodes) and read its output in the capture format (:mod:`xpushare.evidence.scrape_capture`).
"""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from collections.abc import Callable
from http.client import HTTPException
from urllib.parse import unquote, urlsplit, urlunsplit

from xpushare.evidence.scrape_capture import TIMED_TRAILER, CurlResponse, curl_argv, parse_curl_output, scrape_command
from xpushare.model.errors import TransportError, XpushareError
from xpushare.transport.base import Host

__all__ = ["Fetch", "FetchError", "FetchResult", "TimedFetch", "TimedResult", "curl_fetcher", "timed",
           "timed_curl_fetcher", "urllib_fetcher"]

FetchResult = tuple[int, str | None, str]
"""``(status_code, content_type, body)`` of one HTTP GET (content type ``None`` without the header)."""
Fetch = Callable[[str], FetchResult]

TimedResult = tuple[int, str | None, str, float | None]
"""``(status_code, content_type, body, seconds)``: a GET with the time the transfer took where the
fetcher measured it itself (curl's ``time_total`` on the node), else ``None``."""
TimedFetch = Callable[[str], TimedResult]


class FetchError(XpushareError):
    """No HTTP response came back (connection refused, timed out, DNS, reset before the headers)."""


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


def without_credentials(url: str) -> tuple[str, str | None]:
    """``url`` without its ``user:password@`` part, and that part as a curl config line (``user = "u:p"``, for
    ``curl -K -`` on standard input) or None when it has none: credentials never travel on a command line (``ps``
    on the node, ``debug.log``)."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = unquote(f"{parts.username or ''}:{parts.password or ''}")
    quoted = user.replace("\\", "\\\\").replace('"', '\\"')
    return urlunsplit(parts._replace(netloc=netloc)), f'user = "{quoted}"\n'


def _curl(host: Host, argv: list[str], url: str, timeout_s: float,
          trailer: Callable[[str], tuple[str, float | None]]) -> tuple[CurlResponse, float | None]:
    """Run a curl ``argv`` (whose last word is ``url``) on ``host``; ``trailer`` splits any line after
    ``CONTENT_TYPE=`` off the output. Credentials in ``url`` go to curl on its standard input
    (:func:`without_credentials`).

    Raises :class:`FetchError` on a transport failure or when curl printed no status (``000``, no trailer).
    """
    bare, config = without_credentials(url)
    url = bare
    if config is not None:
        argv = [argv[0], "-K", "-", *argv[1:-1], bare]
    try:
        res = host.run(argv, timeout=timeout_s + 15, stdin=config)
    except TransportError as exc:
        raise FetchError(f"curl on {host.name}: {exc}") from None
    out, seconds = trailer(res.stdout)
    parsed = parse_curl_output(out)
    if not parsed.http_code:
        tail = (res.stderr.strip().splitlines() or [f"exit {res.exit_code}"])[-1]
        raise FetchError(f"curl {url} on {host.name}: {tail}")
    return parsed, seconds


def curl_fetcher(host: Host, *, timeout_s: float = 10.0, curl: str = "curl") -> Fetch:
    """A ``fetch`` that runs ``curl`` on ``host`` (a GPU node) through the transport.

    Uses :func:`xpushare.evidence.scrape_capture.scrape_command` (a GET whose ``-w`` trailer carries the HTTP
    status and the Content-Type) and :func:`~xpushare.evidence.scrape_capture.parse_curl_output`. curl's
    ``000`` (no response), a missing trailer or a transport failure raise :class:`FetchError`.
    """

    def fetch(url: str) -> FetchResult:
        parsed, _ = _curl(host, scrape_command(url, timeout_s, curl=curl), url, timeout_s, lambda out: (out, None))
        assert parsed.http_code  # _curl raised otherwise
        return parsed.http_code, parsed.content_type, parsed.body

    return fetch


def timed(fetch: Fetch) -> TimedFetch:
    """A plain :data:`Fetch` as a :data:`TimedFetch` (no own timing)."""
    def get(url: str) -> TimedResult:
        status, ctype, body = fetch(url)
        return status, ctype, body, None
    return get


_TIME_RE = re.compile(r"\nTIME_TOTAL=(?P<t>[^\n]*)\n?\Z")


def _seconds(text: str) -> float | None:
    try:
        return float(text.strip().replace(",", "."))
    except ValueError:
        return None


def _time_total(out: str) -> tuple[str, float | None]:
    """curl's output without its ``TIME_TOTAL=`` line, and that time (s; None without a readable one)."""
    m = _TIME_RE.search(out)
    return (out[: m.start()] + "\n", _seconds(m.group("t"))) if m else (out, None)


def timed_curl_fetcher(host: Host, *, timeout_s: float = 10.0, curl: str = "curl") -> TimedFetch:
    """GET through ``curl`` on ``host`` (a node), timed by curl itself (``-w %{time_total}``, seconds).

    The command is :func:`xpushare.evidence.scrape_capture.scrape_command`'s with a ``TIME_TOTAL=`` line after its
    ``HTTP_CODE``/``CONTENT_TYPE`` trailer, so the latency is the exporter's as seen from the node, without
    the SSH round trip that carries the command. curl's ``000`` (no response), a missing trailer or a
    transport failure raise :class:`FetchError`.
    """

    def get(url: str) -> TimedResult:
        argv = curl_argv(url, timeout_s, trailer=TIMED_TRAILER, curl=curl)
        parsed, seconds = _curl(host, argv, url, timeout_s, _time_total)
        assert parsed.http_code  # _curl raised otherwise
        return parsed.http_code, parsed.content_type, parsed.body, seconds

    return get
