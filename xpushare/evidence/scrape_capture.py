"""The files an HTTP scrape of the scheduler's exporter leaves in a case directory: one owner for writing
and reading them.

* **Capture** (``metrics.txt``, ``metrics_health.txt``, ``metrics_mid*.txt``, ...): the body as served, then
  curl's ``-w`` trailer ``\\nHTTP_CODE=<ddd>\\nCONTENT_TYPE=<type>\\n`` (:data:`FULL_TRAILER`,
  :func:`scrape_command`, parsed by :func:`parse_curl_output`), or ``HTTP_CODE=`` alone (:data:`CODE_TRAILER`:
  the backends' scrapes, the bash harness's ``metrics_health.txt``). Every curl argv of the tool takes its
  ``-w`` format from here. Without any HTTP response: ``# no response: <why>`` and ``HTTP_CODE=000``
  (:func:`capture_text`; curl itself prints ``000`` then). The k8s backend may add a note after the trailer
  (``# curl: <stderr>``) or write ``# scrape of <url> from <host> failed: <why>`` when SSH failed.
  The backends' curl argv is :func:`curl_capture_argv`; their notes are written by :func:`failed_capture_text`
  and :func:`with_curl_note`. Written by :func:`capture_text`; read by :func:`read_capture` (body, status,
  content type), :func:`split_capture` (the backend's note), :func:`split_http` (body and status, the first
  trailer anywhere in the text) and :func:`split_trailer` (body and status, the last trailer).
* **Series** (``metrics_series.jsonl``): one :class:`ScrapeRecord` per line as JSON
  (:meth:`ScrapeRecord.to_json_line`), read by :func:`parse_series`.

Pure functions; the readers never raise on bad input.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import NamedTuple

__all__ = [
    "CODE_TRAILER",
    "FULL_TRAILER",
    "TIMED_TRAILER",
    "CurlResponse",
    "ScrapeRecord",
    "capture_text",
    "curl_argv",
    "curl_capture_argv",
    "failed_capture_text",
    "parse_curl_output",
    "parse_series",
    "read_capture",
    "scrape_command",
    "split_capture",
    "split_http",
    "split_trailer",
    "with_curl_note",
]


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
    """Records of a ``metrics_series.jsonl`` text (sorted by ``t``) and the 1-based numbers of unreadable
    lines. Never raises."""
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


def capture_text(record: ScrapeRecord, content_type: str | None) -> str:
    """A capture file's text: body + ``HTTP_CODE``/``CONTENT_TYPE`` trailer, or the error with ``HTTP_CODE=000``."""
    if record.status is None:
        why = (record.error or "no response").replace("\n", " ")
        return f"# no response: {why}\nHTTP_CODE=000\nCONTENT_TYPE=\n"
    return f"{record.body or ''}\nHTTP_CODE={record.status:03d}\nCONTENT_TYPE={content_type or ''}\n"


# curl's ``-w`` formats (curl expands the ``\\n`` escapes itself; the argv holds no newline).
#: The trailer of the backends' captures and the scheduler sampling command: status only.
CODE_TRAILER = r"\nHTTP_CODE=%{http_code}\n"
#: Status and Content-Type (:func:`scrape_command`, read by :func:`parse_curl_output`).
FULL_TRAILER = r"\nHTTP_CODE=%{http_code}\nCONTENT_TYPE=%{content_type}\n"
#: :data:`FULL_TRAILER` and curl's own total time in seconds (``TIME_TOTAL=``).
TIMED_TRAILER = FULL_TRAILER + r"TIME_TOTAL=%{time_total}\n"


def curl_argv(url: str, timeout_s: float = 10.0, *, trailer: str = FULL_TRAILER, curl: str = "curl") -> list[str]:
    """``curl -sS -m <timeout_s> -o - -w <trailer> <url>``: a GET (never ``-I``: HEAD gets 404 from
    ``/metrics``, docs/sut/metrics.md §http) whose stdout is the body then ``trailer``. ``timeout_s``: curl's
    limit on the whole transfer, in seconds."""
    return [curl, "-sS", "-m", f"{timeout_s:g}", "-o", "-", "-w", trailer, url]


def curl_capture_argv(url: str, timeout_s: float = 10.0) -> list[str]:
    """argv of a GET of ``url`` whose stdout is a capture with the ``HTTP_CODE=`` trailer only
    (:data:`CODE_TRAILER`): the form the backends store."""
    return curl_argv(url, timeout_s, trailer=CODE_TRAILER)


def scrape_command(url: str, timeout_s: float = 10.0, *, curl: str = "curl") -> list[str]:
    """argv that fetches ``url`` and appends the HTTP status and content type after the body
    (:data:`FULL_TRAILER`). Works for ``/metrics``, ``/healthz`` and unknown paths alike; parse with
    :func:`parse_curl_output`.

    Raises:
        ValueError: an empty URL or a non-positive timeout.
    """
    if not url:
        raise ValueError("url must be non-empty")
    if not timeout_s > 0:
        raise ValueError("timeout_s must be positive")
    return curl_argv(url, timeout_s, curl=curl)


class CurlResponse(NamedTuple):
    """``(body, http_code, content_type)`` from :func:`parse_curl_output`.

    ``http_code``: the status (``0`` when curl got no response: it prints ``000``), or ``None``
    when the trailer is missing (curl did not run to the end); ``content_type``: the
    ``Content-Type`` header (``text/plain; version=0.0.4; charset=utf-8`` for ``/metrics``,
    docs/sut/metrics.md §http), ``None`` if the trailer is missing or the header was absent.
    """

    body: str
    http_code: int | None
    content_type: str | None


_TRAILER_RE = re.compile(r"\nHTTP_CODE=(?P<code>\d*)\nCONTENT_TYPE=(?P<ct>[^\n]*)\n?\Z")


def parse_curl_output(text: str) -> CurlResponse:
    """Split the stdout of :func:`scrape_command` into body, status and content type. Never raises.

    The body is returned exactly as served (the ``\\n`` that starts the trailer is removed). Without a
    well-formed trailer at the end, the whole text is the body and both other fields are ``None``.
    """
    m = _TRAILER_RE.search(text)
    if m is None:
        return CurlResponse(text, None, None)
    code_text = m.group("code")
    code = int(code_text) if code_text else None
    ct = m.group("ct").strip() or None
    return CurlResponse(text[: m.start()], code, ct)


def failed_capture_text(url: str, host: str, why: object) -> str:
    """The capture of a scrape that never ran (SSH to ``host`` failed): ``# scrape of <url> from <host> failed:
    <why>`` and ``HTTP_CODE=000`` (read back by :func:`split_capture`)."""
    return f"# scrape of {url} from {host} failed: {why}\nHTTP_CODE=000\n"


def with_curl_note(capture: str, note: str) -> str:
    """``capture`` (curl's stdout) with ``# curl: <note>`` after its trailer, when curl exited non-zero;
    ``note`` must be one line (read back by :func:`split_capture`)."""
    return capture + f"\n# curl: {note}"


_CODE_ONLY_RE = re.compile(r"\nHTTP_CODE=(?P<code>\d*)\n?(?:CONTENT_TYPE=(?P<ct>[^\n]*)\n?)?\Z")


def read_capture(text: str) -> CurlResponse:
    """A curl capture as ``(body, http_code, content_type)``. Never raises.

    Accepts the trailer of :func:`scrape_command` (``HTTP_CODE=`` and
    ``CONTENT_TYPE=`` lines), a trailer with ``HTTP_CODE=`` only (the bash harness's
    ``metrics_health.txt``, docs/sut/bash-harness.md §scraping), or a bare body (code ``None``).
    """
    parsed = parse_curl_output(text)
    if parsed.http_code is not None or parsed.content_type is not None:
        return parsed
    m = _CODE_ONLY_RE.search(text)
    if m is None:
        return CurlResponse(text, None, None)
    code = int(m.group("code")) if m.group("code") else None
    return CurlResponse(text[: m.start()], code, (m.group("ct") or "").strip() or None)


_CURL_NOTE_RE = re.compile(r"\n# curl: (?P<note>[^\n]*)\n?\Z")
_SCRAPE_FAILED_RE = re.compile(r"^# scrape of .* failed: (?P<note>[^\n]*)", re.M)


def split_capture(text: str) -> tuple[str, str | None]:
    """A capture of the k8s backend without its error notes: ``(capture, why the scrape failed or None)``.

    The backend appends ``# curl: <stderr>`` after the ``HTTP_CODE=`` trailer when curl complained (timeout,
    refused, partial transfer) and writes ``# scrape of <url> from <host> failed: ...`` when SSH failed.
    """
    note = None
    m = _CURL_NOTE_RE.search(text)
    if m is not None:
        text, note = text[: m.start()].rstrip("\n") + "\n", m.group("note").strip()
    failed = _SCRAPE_FAILED_RE.search(text)
    if failed is not None:
        note = failed.group("note").strip()
    return text, note


_HTTP_RE = re.compile(r"\nHTTP_CODE=(\d{3})")


def split_http(text: str) -> tuple[str, int | None]:
    """Body (with its final newline) and HTTP status of a capture, the first ``HTTP_CODE=<ddd>`` line wherever
    it stands (a note after it is dropped with it); ``(text, None)`` without one."""
    m = _HTTP_RE.search(text)
    if m is None:
        return text, None
    return text[: m.start()] + "\n", int(m.group(1))


_LAST_CODE_RE = re.compile(r"\nHTTP_CODE=(?P<code>\d*)\n")


def split_trailer(text: str) -> tuple[str, int | None]:
    """Body (without the newline that starts the trailer) and HTTP status of a capture, the *last*
    ``\\nHTTP_CODE=<digits>\\n`` line wherever it stands (what follows it, a ``CONTENT_TYPE=`` line or a note, is
    dropped). An empty code is ``None``; no trailer: ``(text, None)``. Never raises."""
    last = None
    for m in _LAST_CODE_RE.finditer(text):
        last = m
    if last is None:
        return text, None
    code = last.group("code")
    return text[: last.start()], int(code) if code else None
