"""The scraper: every HTTP scrape of the scheduler's exporter (``/metrics``, ``/healthz``, an unknown path) and
the files it leaves in a case directory, with one owner for each step.

* **URL**: :func:`endpoint_url` (``http://<pod IP or host>:<port><path>``), :func:`base_url_of` (a configured URL
  with or without ``/metrics``).
* **Command**: curl's argv, from argv only (the transport quotes it with :func:`shlex.join`): :func:`curl_argv`
  (:func:`curl_prefix` for a node script that appends the URL itself), :func:`curl_capture_argv`,
  :func:`scrape_command`. A GET, never ``-I`` (HEAD gets 404 from ``/metrics``, docs/sut/metrics.md §http).
* **Fetch through a transport** :class:`~xpushare.transport.base.Host`: :func:`capture_on` (the k8s backend's
  capture, never raises), :func:`raw_capture_on` (the host backend's), :func:`status_on` (status only),
  :func:`curl_fetcher` / :func:`timed_curl_fetcher` (a :data:`Fetch` raising :class:`FetchError`).
* **Capture** (``metrics.txt``, ``metrics_health.txt``, ``metrics_mid*.txt``, ...): the body as served, then
  curl's ``-w`` trailer ``\\nHTTP_CODE=<ddd>\\nCONTENT_TYPE=<type>\\n`` (:data:`FULL_TRAILER`,
  :func:`scrape_command`, parsed by :func:`parse_curl_output`), or ``HTTP_CODE=`` alone (:data:`CODE_TRAILER`:
  the backends' scrapes, the bash harness's ``metrics_health.txt``). Every curl argv of the tool takes its
  ``-w`` format from here. Without any HTTP response: ``# no response: <why>`` and ``HTTP_CODE=000``
  (:func:`capture_text`; curl itself prints ``000`` then). The k8s backend may add a note after the trailer
  (``# curl: <stderr>``) or write ``# scrape of <url> from <host> failed: <why>`` when SSH failed
  (:func:`failed_capture_text`, :func:`with_curl_note`). Written by :func:`capture_text`; read by
  :func:`read_capture` (body, status, content type), :func:`split_capture` (the backend's note), :func:`split_http`
  (body and status, the first trailer anywhere in the text) and :func:`split_trailer` (body and status, the last
  trailer).
* **Series** (``metrics_series.jsonl``): one :class:`ScrapeRecord` per line as JSON
  (:meth:`ScrapeRecord.to_json_line`), read by :func:`parse_series`.
* **Facts** of a page: :func:`scrape_facts` (:class:`ScrapeFacts`, the soak's and the fault acts' view), parsed by
  the one exposition parser, :func:`xpushare.parsers.metrics.parse_exposition` (``prometheus_client``'s).

The readers never raise on bad input; only the fetchers run commands.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import NamedTuple
from urllib.parse import unquote, urlsplit, urlunsplit

from xpushare.model.errors import TransportError, XpushareError
from xpushare.parsers.metrics import parse_exposition
from xpushare.transport.base import Host

__all__ = [
    "CODE_TRAILER",
    "FULL_TRAILER",
    "TIMED_TRAILER",
    "CurlResponse",
    "Fetch",
    "FetchError",
    "FetchResult",
    "ScrapeFacts",
    "ScrapeRecord",
    "TimedFetch",
    "TimedResult",
    "base_url_of",
    "capture_on",
    "capture_text",
    "curl_argv",
    "curl_capture_argv",
    "curl_fetcher",
    "curl_prefix",
    "endpoint_url",
    "failed_capture_text",
    "parse_curl_output",
    "parse_series",
    "raw_capture_on",
    "read_capture",
    "scrape_command",
    "scrape_facts",
    "split_capture",
    "split_http",
    "split_trailer",
    "status_on",
    "timed_curl_fetcher",
    "with_curl_note",
    "without_credentials",
]


# ---------------------------------------------------------------------------------------------------- URLs


def endpoint_url(address: str, port: int | str, path: str = "") -> str:
    """``http://<address>:<port><path>``: the exporter of the scheduler at ``address`` (a pod IP or a host name),
    ``path`` (``/metrics``, ``/healthz``, empty for the base URL) after it. Port 9402 in the SUT's DaemonSet
    (docs/sut/metrics.md §http)."""
    return f"http://{address}:{port}{path}"


def base_url_of(url: str) -> str:
    """``http://HOST:PORT`` from a URL given with or without a trailing ``/metrics`` or ``/healthz``."""
    base = url.rstrip("/")
    for suffix in ("/metrics", "/healthz"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
    return base


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


def curl_prefix(timeout_s: float = 10.0, *, trailer: str = FULL_TRAILER, curl: str = "curl") -> list[str]:
    """:func:`curl_argv` without its URL, for a node script that appends the URL itself (``"$@" "$url"``)."""
    return [curl, "-sS", "-m", f"{timeout_s:g}", "-o", "-", "-w", trailer]


def curl_argv(url: str, timeout_s: float = 10.0, *, trailer: str = FULL_TRAILER, curl: str = "curl") -> list[str]:
    """``curl -sS -m <timeout_s> -o - -w <trailer> <url>``: a GET (never ``-I``: HEAD gets 404 from
    ``/metrics``, docs/sut/metrics.md §http) whose stdout is the body then ``trailer``. ``timeout_s``: curl's
    limit on the whole transfer, in seconds."""
    return [*curl_prefix(timeout_s, trailer=trailer, curl=curl), url]


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


# ------------------------------------------------------------------------------- fetch through a transport

FetchResult = tuple[int, str | None, str]
"""``(status_code, content_type, body)`` of one HTTP GET (content type ``None`` without the header)."""
Fetch = Callable[[str], FetchResult]

TimedResult = tuple[int, str | None, str, float | None]
"""``(status_code, content_type, body, seconds)``: a GET with the time the transfer took where the
fetcher measured it itself (curl's ``time_total`` on the node), else ``None``."""
TimedFetch = Callable[[str], TimedResult]


class FetchError(XpushareError):
    """No HTTP response came back (connection refused, timed out, DNS, reset before the headers)."""


def _ssh_timeout(timeout_s: float) -> float:
    """The transport's limit on a curl of ``timeout_s`` s: room for the SSH round trip, at least 30 s."""
    return max(30.0, timeout_s + 20)


def capture_on(host: Host, host_name: str, url: str, timeout_s: float = 10.0) -> str:
    """A capture of ``GET url`` run on ``host`` (called ``host_name`` in the note), as the k8s backend stores it:
    curl's stdout with the ``HTTP_CODE=`` trailer (:data:`CODE_TRAILER`) and, when curl failed, a one-line
    ``# curl:`` note (:func:`with_curl_note`); the ``# scrape of ... failed`` capture (:func:`failed_capture_text`)
    when the transport failed. Never raises."""
    try:
        res = host.run(curl_capture_argv(url, timeout_s), timeout=_ssh_timeout(timeout_s))
    except TransportError as exc:
        return failed_capture_text(url, host_name, exc)
    if res.ok:  # stderr of a successful curl is login-shell noise, not a failed scrape
        return res.stdout
    # one line, so that the judgment's note pattern reads it whole
    why = " | ".join(line.strip() for line in res.stderr.splitlines() if line.strip()) or "no stderr"
    return with_curl_note(res.stdout, f"exit {res.exit_code}: {why}")


def raw_capture_on(host: Host, url: str, timeout_s: float = 10.0) -> str:
    """A capture of ``GET url`` run on ``host`` as the host backend stores it: curl's stdout (body and the
    ``HTTP_CODE=`` trailer), then its stderr as is. Raises :class:`TransportError` when ``host`` cannot run it."""
    res = host.run(curl_capture_argv(url, timeout_s), timeout=_ssh_timeout(timeout_s))
    return res.stdout + res.stderr


def status_on(host: Host, url: str, timeout_s: float = 10.0) -> int:
    """The HTTP status of ``GET url`` run on ``host``; 0 without a response (curl's ``000``, no trailer). Raises
    :class:`TransportError` when ``host`` cannot run it."""
    res = host.run(curl_capture_argv(url, timeout_s), timeout=_ssh_timeout(timeout_s))
    return split_trailer(res.stdout)[1] or 0


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

    Uses :func:`scrape_command` (a GET whose ``-w`` trailer carries the HTTP status and the Content-Type) and
    :func:`parse_curl_output`. curl's ``000`` (no response), a missing trailer or a transport failure raise
    :class:`FetchError`.
    """

    def fetch(url: str) -> FetchResult:
        parsed, _ = _curl(host, scrape_command(url, timeout_s, curl=curl), url, timeout_s, lambda out: (out, None))
        assert parsed.http_code  # _curl raised otherwise
        return parsed.http_code, parsed.content_type, parsed.body

    return fetch


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

    The command is :func:`scrape_command`'s with a ``TIME_TOTAL=`` line after its ``HTTP_CODE``/``CONTENT_TYPE``
    trailer (:data:`TIMED_TRAILER`), so the latency is the exporter's as seen from the node, without the SSH round
    trip that carries the command. curl's ``000`` (no response), a missing trailer or a transport failure raise
    :class:`FetchError`.
    """

    def get(url: str) -> TimedResult:
        argv = curl_argv(url, timeout_s, trailer=TIMED_TRAILER, curl=curl)
        parsed, seconds = _curl(host, argv, url, timeout_s, _time_total)
        assert parsed.http_code  # _curl raised otherwise
        return parsed.http_code, parsed.content_type, parsed.body, seconds

    return get


# ---------------------------------------------------------------------------------------- facts of a page


@dataclass(frozen=True)
class ScrapeFacts:
    """What a soak tick (and a fault act) keeps of one ``/metrics`` answer.

    ``ok``: HTTP 200 and the exposition parsed; ``series_total``: all samples; ``client_series``: samples
    of ``*_client_*`` families; ``client_info``: ``(namespace, pod)`` of every ``client_info`` series;
    ``gpu_used``: ``gpu_uuid -> gpu_memory_used_bytes`` (bytes); ``http_code``: as curl printed it.
    Source: docs/sut/metrics.md §catalogue.
    """

    ok: bool
    series_total: int | None = None
    client_series: int | None = None
    client_info: tuple[tuple[str, str], ...] = ()
    gpu_used: tuple[tuple[str, float], ...] = ()
    http_code: int | None = None
    client_pids: tuple[int | None, ...] = ()
    """``host_pid`` label of each ``client_info`` entry (same order; None where absent)."""

    def ours(self, prefix: str, pids: Collection[int] = ()) -> list[tuple[str, str]]:
        """``client_info`` entries of this case's pods: pod name starting with ``prefix`` (Kubernetes), or
        ``host_pid`` among ``pids`` (host mode, where every client is pod ``none``: shown as
        ``none[host_pid=<pid>]``)."""
        out = []
        for i, (ns, pod) in enumerate(self.client_info):
            pid = self.client_pids[i] if i < len(self.client_pids) else None
            if pod.startswith(prefix):
                out.append((ns, pod))
            elif pid is not None and pid in pids:
                out.append((ns, f"{pod}[host_pid={pid}]"))
        return out

    @property
    def gpu_used_sum(self) -> float | None:
        return sum(v for _, v in self.gpu_used) if self.gpu_used else None


def scrape_facts(text: str | None, *, full: bool = False) -> ScrapeFacts:
    """Facts of one ``/metrics`` answer (body + curl trailer, :func:`split_trailer`), parsed by the one exposition
    parser (:func:`~xpushare.parsers.metrics.parse_exposition`, ``prometheus_client``'s). Never raises.

    A page without any series the parser could read is not ``ok``. Per tick the series read before a line the
    parser stops at still count (the round's trends go on; the raw page is kept); with ``full`` (baseline, final)
    the page must parse whole, else it is not ``ok``. Raw pages of the baseline, the final state and every interim
    report are kept under ``soak/metrics/`` for offline re-parsing. The parser costs some tens of milliseconds a
    500-series page: small beside a soak round of remote commands.
    """
    if text is None:
        return ScrapeFacts(ok=False)
    body, code = split_trailer(text)
    if code != 200:
        return ScrapeFacts(ok=False, http_code=code)
    exp = parse_exposition(body)
    samples = [sample for family in exp.families for sample in family.samples]
    if not samples or (full and not exp.ok):
        return ScrapeFacts(ok=False, http_code=code)
    info: list[tuple[str, str]] = []
    pids: list[int | None] = []
    used: list[tuple[str, float]] = []
    for sample in samples:
        labels = sample.label_dict
        if sample.name.endswith("client_info"):
            info.append((labels.get("namespace", ""), labels.get("pod", "")))
            pid = labels.get("host_pid", "")
            pids.append(int(pid) if pid.isdigit() else None)
        elif sample.name.endswith("gpu_memory_used_bytes"):
            used.append((labels.get("gpu_uuid") or labels.get("gpu_index", "?"), sample.value))
    return ScrapeFacts(ok=True, series_total=len(samples), client_series=sum("_client_" in s.name for s in samples),
                       client_info=tuple(info), gpu_used=tuple(used), http_code=code, client_pids=tuple(pids))
