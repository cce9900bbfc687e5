"""Workload pod output: runtime, pass marker, OOM markers, quota probes, tqdm progress (the client library's
own lines: :mod:`xpushare.parsers.client_lines`).

Input is the text of ``kubectl logs [--timestamps] <pod>`` (or a host-mode process's combined
stdout/stderr). Every function is pure and never raises on malformed input; missing evidence is
``None`` or an empty list, so a judge can turn it into ERROR/FAIL (never PASS).

Interfaces: docs/sut/client.md §memory-quota (OOM / rejection lines and the client-library lines),
docs/sut/workloads.md §output (output
contract: tqdm refreshes joined by ``\\r``, ``PASS``, ``--- <float> seconds ---``), docs/sut/workloads.md §inline (W5
``QUOTA_PROBE`` lines), docs/sut/README.md §pitfalls items 11 and 14, docs/sut/log.md §regex (regexes). Both naming
generations are accepted
(``[XPUSHARE]`` and ``[NVSHARE]`` prefixes, docs/sut/README.md §naming).

kubectl ``--timestamps`` prefixes every *newline-separated* line with an RFC3339 timestamp and one
space; :func:`strip_timestamp` removes it. A tqdm history is one such line (its refreshes are joined by
``\\r``), so only its first segment carries the timestamp.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

__all__ = [
    "Probe",
    "Rejection",
    "TqdmSegment",
    "has_pass_marker",
    "last_tqdm",
    "oom_markers",
    "parse_timestamp",
    "quota_probes",
    "rejections",
    "runtime_seconds",
    "strip_timestamp",
    "timestamped_lines",
]

# --------------------------------------------------------------------------------------------------
# kubectl --timestamps prefix (RFC3339 / RFC3339Nano, e.g. "2026-02-14T10:00:00.123456789Z ")

_TS_RE = re.compile(
    r"(?P<y>\d{4})-(?P<mo>\d{2})-(?P<d>\d{2})[Tt](?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2})"
    r"(?:\.(?P<frac>\d+))?(?P<tz>[Zz]|[+-]\d{2}:?\d{2})"
)
_TS_PREFIX_RE = re.compile(_TS_RE.pattern + r"(?: |$)")


def parse_timestamp(text: str) -> datetime | None:
    """Parse one RFC3339 timestamp as kubectl prints it (``2026-02-14T10:00:00.123456789Z``).

    Returns a timezone-aware :class:`datetime` (fractions beyond microseconds are truncated), or
    ``None`` if ``text`` is not exactly such a timestamp or names an impossible date. Never raises.
    Source: kubectl ``logs --timestamps`` (RFC3339Nano); docs/sut/log.md ("use kubectl logs
    --timestamps"), docs/sut/log.md §regex ("strip the kubectl --timestamps prefix first").
    """
    m = _TS_RE.fullmatch(text.strip())
    return _ts_from_match(m) if m else None


def _ts_from_match(m: re.Match[str]) -> datetime | None:
    frac = m.group("frac") or ""
    micro = int((frac + "000000")[:6]) if frac else 0
    tz_text = m.group("tz")
    try:
        if tz_text in ("Z", "z"):
            tz = timezone.utc
        else:
            sign = -1 if tz_text[0] == "-" else 1
            digits = tz_text[1:].replace(":", "")
            tz = timezone(sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:])))
        return datetime(
            int(m.group("y")),
            int(m.group("mo")),
            int(m.group("d")),
            int(m.group("h")),
            int(m.group("mi")),
            int(m.group("s")),
            micro,
            tzinfo=tz,
        )
    except ValueError:
        return None


def strip_timestamp(line: str) -> tuple[datetime | None, str]:
    """Split an optional kubectl ``--timestamps`` prefix off one log line.

    ``"2026-02-14T10:00:00.5Z PASS"`` -> ``(datetime(2026, 2, 14, 10, 0, 0, 500000, UTC), "PASS")``;
    a line without a (valid) prefix is returned unchanged with ``None``. Trailing ``\\n``/``\\r\\n`` is
    not removed here. Never raises. Source: docs/sut/log.md §regex (header sentence).
    """
    m = _TS_PREFIX_RE.match(line)
    if m is None:
        return None, line
    ts = _ts_from_match(m)
    if ts is None:
        return None, line
    return ts, line[m.end() :]


def timestamped_lines(text: str) -> Iterator[tuple[datetime | None, str]]:
    """Yield ``(timestamp, line)`` for each newline-separated line, prefix stripped, EOL removed."""
    for raw in text.split("\n"):
        ts, rest = strip_timestamp(raw)
        yield ts, rest.rstrip("\r")


# --------------------------------------------------------------------------------------------------
# Runtime and pass marker (docs/sut/workloads.md §output, docs/sut/README.md §pitfalls item 11)

# docs/sut/log.md §regex gives `--- (?P<sec>[0-9.]+) seconds ---`; an optional exponent is accepted as well, because
# Python's repr of a float can be e.g. "1e-05".
_RUNTIME_RE = re.compile(r"--- (?P<sec>[0-9.]+(?:[eE][-+]?[0-9]+)?) seconds ---")


def runtime_seconds(text: str) -> float | None:
    """Workload runtime in seconds: the number in the LAST ``--- <float> seconds ---`` of the log.

    Returns ``None`` when there is no such line, or when the last one's number is not a valid
    non-negative finite float (e.g. ``--- 1.2.3 seconds ---``): an unparsable runtime is missing
    evidence, never a pass. Source: docs/sut/workloads.md §output (stdout contract), §inline
    (``xp_extract_runtime_seconds``: the last match), docs/sut/log.md §regex.
    """
    last: str | None = None
    for _ts, line in timestamped_lines(text):
        for m in _RUNTIME_RE.finditer(line):
            last = m.group("sec")
    if last is None:
        return None
    try:
        value = float(last)
    except ValueError:
        return None
    if value != value or value in (float("inf"), float("-inf")):
        return None
    return value


def run_interval(text: str) -> tuple[float, float] | None:
    """The workload's run as ``(start, end)`` in unix seconds, from a log with timestamps: ``end`` is the time of
    the last ``--- <float> seconds ---`` line, ``start`` is ``end`` minus that runtime. None when the line, its
    timestamp or the runtime is missing (a log fetched without ``--timestamps``). Source: docs/sut/workloads.md §output.
    """
    runtime = runtime_seconds(text)
    end: datetime | None = None
    for ts, line in timestamped_lines(text):
        if _RUNTIME_RE.search(line):
            end = ts
    if runtime is None or end is None:
        return None
    return end.timestamp() - runtime, end.timestamp()


_MISSING_MODULE_RE = re.compile(r"ModuleNotFoundError: No module named '(?P<module>[^']+)'")


def missing_module(text: str) -> str | None:
    """The Python module a workload could not import (``ModuleNotFoundError: No module named 'torch'``), or None.

    A workload that dies on a missing package never reached the GPU or the SUT: the node lacks a prerequisite
    (e.g. the ``node`` extra's torch). Source: the workloads' output contract (a traceback on stderr, exit 1).
    """
    m = _MISSING_MODULE_RE.search(text)
    return m.group("module") if m else None


def has_pass_marker(text: str) -> bool:
    """True if some line (timestamp stripped, surrounding whitespace ignored) is exactly ``PASS``.

    ``BYPASS``, ``PASSED`` or ``... PASS ...`` do not count. ``\\r``-separated segments are checked
    separately, because tqdm output on stderr (no trailing newline) can be merged in front of the
    stdout ``PASS``. Source: docs/sut/workloads.md §output, docs/sut/log.md §regex (``^PASS$``).
    """
    for _ts, line in timestamped_lines(text):
        if "PASS" not in line:
            continue
        for seg in line.split("\r"):
            if seg.strip() == "PASS":
                return True
    return False


# --------------------------------------------------------------------------------------------------
# OOM and quota rejections (docs/sut/client.md §memory-quota, docs/sut/README.md §pitfalls item 14)

_REJECTION_RE = re.compile(
    r"(?P<api>\w+) rejected: (?P<sum>\d+) \+ (?P<req>\d+) "
    r"(?:= \d+ would exceed limit (?P<limit>\d+) bytes|exceeds physical allocatable (?P<phys>\d+) bytes)"
)
_OOM_RE = re.compile(
    r"\w+ rejected: \d+ \+ \d+"  # library WARN, CUDA (cuMemAlloc...) and NPU (aclrtMalloc...) paths
    r"|cuMemAlloc rejected:"
    r"|CUDA out of memory"  # PyTorch RuntimeError text
    r"|OutOfMemoryError"  # torch.cuda.OutOfMemoryError (PyTorch >= 1.13)
    r"|CUDA_ERROR_OUT_OF_MEMORY"  # driver error name, e.g. "<cuFunc> returned CUDA_ERROR_OUT_OF_MEMORY"
    r"|NPU out of memory"  # torch_npu
    r"|OOM when allocating tensor"  # TensorFlow ResourceExhaustedError (tf-matmul workloads)
)


def oom_markers(text: str) -> list[str]:
    """Lines that prove an out-of-memory / quota rejection, in log order (timestamp stripped).

    Matched: ``<api> rejected: <sum> + <req> ...`` (library WARN, any API, e.g. ``cuMemAlloc`` or
    ``aclrtMalloc``), ``cuMemAlloc rejected:``, ``CUDA out of memory``, ``OutOfMemoryError``,
    ``CUDA_ERROR_OUT_OF_MEMORY``, ``NPU out of memory``, TensorFlow's ``OOM when allocating tensor``.
    Deliberately NOT matched: ``memory limit`` / ``GPU memory limit set to ...`` (the library's
    startup INFO: a false positive), a bare ``OOM`` word, and the legacy nvshare warning
    ``Memory allocations exceeded physical GPU memory capacity`` (an oversubscription warning, not
    a rejection). Each line appears at most once. Source: docs/sut/client.md §memory-quota,
    docs/sut/README.md §pitfalls item 14, docs/sut/log.md §regex.
    """
    out: list[str] = []
    for _ts, line in timestamped_lines(text):
        if _OOM_RE.search(line):
            out.append(line)
    return out


@dataclass(frozen=True)
class Rejection:
    """One library quota rejection line (docs/sut/client.md §memory-quota steps 2-3, docs/sut/log.md §regex "quota
    rejection").

    ``api``: the hooked API (``cuMemAlloc``, ``aclrtMalloc`` ...). ``allocated_bytes``: bytes already
    held; ``requested_bytes``: the refused request; ``limit_bytes``: the quota (limit rejection) or
    ``None``; ``physical_bytes``: the physical allocatable size (physical rejection) or ``None``.
    ``ts``: the kubectl timestamp, if the line had one.
    """

    api: str
    allocated_bytes: int
    requested_bytes: int
    limit_bytes: int | None
    physical_bytes: int | None
    ts: datetime | None
    line: str


def rejections(text: str) -> list[Rejection]:
    """All structured ``<api> rejected: ...`` lines, in order. See :class:`Rejection`. Never raises."""
    out: list[Rejection] = []
    for ts, line in timestamped_lines(text):
        if "rejected: " not in line:
            continue
        m = _REJECTION_RE.search(line)
        if m is None:
            continue
        out.append(
            Rejection(
                api=m.group("api"),
                allocated_bytes=int(m.group("sum")),
                requested_bytes=int(m.group("req")),
                limit_bytes=int(m.group("limit")) if m.group("limit") else None,
                physical_bytes=int(m.group("phys")) if m.group("phys") else None,
                ts=ts,
                line=line,
            )
        )
    return out


# --------------------------------------------------------------------------------------------------
# W5 quota probes (docs/sut/workloads.md §inline)

_PROBE_RE = re.compile(
    r"\[(?:XPUSHARE|NVSHARE)\]\[QUOTA_PROBE\] elapsed=(?P<el>[0-9.]+)s it=(?P<it>\d+) "
    r"it_per_sec=(?P<ips>[0-9.]+)"
)


@dataclass(frozen=True)
class Probe:
    """One W5 ``[XPUSHARE][QUOTA_PROBE]`` line (docs/sut/workloads.md §inline, docs/sut/log.md §regex).

    ``elapsed_s``: seconds since the loop started; ``iterations``: cumulative iteration count;
    ``it_per_sec``: cumulative average rate (iterations per second) since the loop started, as
    printed (2 decimals). ``ts``: kubectl timestamp of the line, if any.
    """

    elapsed_s: float
    iterations: int
    it_per_sec: float
    ts: datetime | None = None


def quota_probes(text: str) -> list[Probe]:
    """All quota-probe lines in order (``[XPUSHARE]`` or ``[NVSHARE]`` prefix). Never raises.

    Lines whose numbers do not parse (``elapsed=1.2.3s``) are skipped. Source: docs/sut/workloads.md §inline (W5),
    docs/sut/README.md §pitfalls item 11, docs/sut/log.md §regex.
    """
    out: list[Probe] = []
    for ts, line in timestamped_lines(text):
        if "QUOTA_PROBE" not in line:
            continue
        for m in _PROBE_RE.finditer(line):
            try:
                out.append(Probe(float(m.group("el")), int(m.group("it")), float(m.group("ips")), ts))
            except ValueError:
                continue
    return out


# --------------------------------------------------------------------------------------------------
# tqdm progress (docs/sut/workloads.md §output)

_TQDM_RE = re.compile(
    r"(?P<pct>\d+)%\|.*?\| (?P<n>\d+)/(?P<total>\d+) "
    r"\[(?P<elapsed>[0-9:]+)<(?P<remain>[0-9:]+|\?),\s*(?P<rate>[0-9.]+|\?)(?P<unit>it/s|s/it)(?:,[^\]]*)?\]"
)


@dataclass(frozen=True)
class TqdmSegment:
    """One tqdm refresh (docs/sut/workloads.md §output, docs/sut/log.md §regex "tqdm segment").

    ``percent``: 0-100 as printed; ``n``/``total``: iterations done / planned; ``elapsed_s`` and
    ``remaining_s``: seconds (``remaining_s`` is ``None`` for ``?``); ``rate_it_s``: iterations per
    second (an ``s/it`` rate is converted to its reciprocal; ``None`` for ``?`` or a zero ``s/it``);
    ``text``: the matched segment; ``ts``: the line's kubectl timestamp, if any (it belongs to the
    whole ``\\r``-joined line, i.e. to its first refresh).
    """

    percent: int
    n: int
    total: int
    elapsed_s: float
    remaining_s: float | None
    rate_it_s: float | None
    text: str
    ts: datetime | None = None


def _clock_seconds(text: str) -> float | None:
    """``"MM:SS"`` / ``"H:MM:SS"`` -> seconds; ``None`` if malformed."""
    parts = text.split(":")
    if not parts or any(not p.isdigit() for p in parts) or len(parts) > 3:
        return None
    total = 0
    for p in parts:
        total = total * 60 + int(p)
    return float(total)


def _tqdm_from_match(m: re.Match[str], ts: datetime | None) -> TqdmSegment | None:
    elapsed = _clock_seconds(m.group("elapsed"))
    if elapsed is None:
        return None
    remain_text = m.group("remain")
    remaining = None if remain_text == "?" else _clock_seconds(remain_text)
    rate: float | None = None
    if m.group("rate") != "?":
        try:
            r = float(m.group("rate"))
        except ValueError:
            r = -1.0
        if m.group("unit") == "it/s":
            rate = r if r >= 0 else None
        elif r > 0:  # "s/it": seconds per iteration -> its reciprocal
            rate = 1.0 / r
    return TqdmSegment(
        percent=int(m.group("pct")),
        n=int(m.group("n")),
        total=int(m.group("total")),
        elapsed_s=elapsed,
        remaining_s=remaining,
        rate_it_s=rate,
        text=m.group(0),
        ts=ts,
    )


def last_tqdm(text: str) -> TqdmSegment | None:
    """The last tqdm refresh in the log: split every line on ``\\r`` and keep the last segment that
    matches the docs/sut/log.md §regex tqdm pattern (extended to ``s/it`` rates, ``?`` placeholders, the padding tqdm
    puts before the rate, e.g. ``[00:04<00:36,  4.00s/it]``, and a postfix).

    ``None`` if no segment matches. (The legacy bash took the *first* match, i.e. an early refresh;
    docs/sut/legacy-scripts.md §drivers.) Source: docs/sut/workloads.md §output, docs/sut/README.md §pitfalls item 11,
    docs/sut/log.md §regex.
    """
    found: TqdmSegment | None = None
    for ts, line in timestamped_lines(text):
        if "%|" not in line:
            continue
        for i, seg in enumerate(line.split("\r")):
            if "%|" not in seg:
                continue
            last_m: re.Match[str] | None = None
            for m in _TQDM_RE.finditer(seg):
                last_m = m
            if last_m is not None:
                parsed = _tqdm_from_match(last_m, ts if i == 0 else None)
                if parsed is not None:
                    found = parsed
    return found
