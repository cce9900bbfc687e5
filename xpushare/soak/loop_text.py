"""The soak loop's human-readable output: the progress line and the interim report (Markdown), both made
from the loop's live status (:meth:`xpushare.soak.loop.SoakLoop.status`). Pure functions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from xpushare.soak.loop_trends import LiveTrends

__all__ = ["fmt_hms", "interim_lines", "mib", "progress_line"]


def fmt_hms(seconds: float | None) -> str:
    """``HH:MM:SS`` of whole seconds (negative as 0), ``-`` for None."""
    if seconds is None:
        return "-"
    s = int(max(0, seconds))
    return f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"


def mib(value: float | None) -> str:
    """Bytes as ``<x.y>MiB``, ``-`` for None."""
    return "-" if value is None else f"{value / 2**20:.1f}MiB"


def progress_line(st: Mapping[str, Any]) -> str:
    """One progress line from a status dict: elapsed, remaining, rounds, pods, last sample, anomalies, gaps."""
    run = st["running"]
    running = f", running round {run['round']} ({run['terminal']}/{run['pods']} done)" if run else ""
    procs = "; ".join(
        f"{n} rss {mib(ps[0]['rss_bytes'])} fd {ps[0]['fd_count']}" for n, ps in sorted(st["schedulers"].items())
        if ps
    )
    age = st["last_sample_age_s"]
    return (
        f"{fmt_hms(st['elapsed_s'])} elapsed, {fmt_hms(st['remaining_s'])} left | rounds {st['rounds']}"
        f"{running} | pods ok {st['pods_ok']}, bad {st['pods_bad']} | last sample "
        f"{'-' if age is None else f'{age:.0f}s ago'}: {procs or '-'} | anomalies {st['anomalies']}, "
        f"gaps {st['gaps']}{' (in gap: ' + ','.join(st['in_gap']) + ')' if st['in_gap'] else ''}"
    )


def interim_lines(k: int, label: str, st: Mapping[str, Any], trends: LiveTrends) -> list[str]:
    """Lines of interim report ``k`` of case ``label``: the status, then one table row per live process."""
    lines = [
        f"# Interim report {k}: {label}", "",
        f"- elapsed {fmt_hms(st['elapsed_s'])}, remaining {fmt_hms(st['remaining_s'])}",
        f"- rounds {st['rounds']}, pods ok {st['pods_ok']}, failed or stuck {st['pods_bad']}",
        f"- samples {st['samples']}, gaps {st['gaps']}, anomalies {st['anomalies']}", "",
        "| node | pid | points | RSS last | RSS slope /h | RSS growth | FD last | FD slope /h |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key, reg in trends.rss.items():
        fd = trends.fd.get(key)
        slope = reg.slope
        fd_slope = fd.slope if fd else None
        lines.append(
            f"| {key[0]} | {key[1]} | {reg.n} | {mib(reg.last)} | "
            f"{'-' if slope is None else mib(slope * 3600)} | {mib(reg.growth)} | "
            f"{'-' if fd is None else int(fd.last)} | {'-' if fd_slope is None else f'{fd_slope * 3600:.2f}'} |"
        )
    lines += ["", "Live slopes are plain least squares (no significance test); the verdict refits the stored",
              "series with the autocorrelation-corrected test (xpushare/judge/trend.py).", ""]
    return lines
