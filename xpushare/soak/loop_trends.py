"""The soak loop's live trends: one constant-size least-squares regression of RSS and of the fd count per
scheduler process ``(node, pid)``, at most :data:`MAX_LIVE_SERIES` of each (the oldest dropped first).

Live slopes only feed anomalies and interim reports; the verdict refits the stored series
(:mod:`xpushare.judge.trend`).
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

from xpushare.evidence.soak_series import iter_csv
from xpushare.judge.trend import OnlineRegression

__all__ = ["MAX_LIVE_SERIES", "LiveTrends"]

#: At most this many per-process regressions are kept live (restarts add new pids).
MAX_LIVE_SERIES = 256


def _live(table: OrderedDict[tuple[str, int], OnlineRegression], key: tuple[str, int]) -> OnlineRegression:
    reg = table.get(key)
    if reg is None:
        reg = table[key] = OnlineRegression()
        while len(table) > MAX_LIVE_SERIES:
            table.popitem(last=False)
    return reg


class LiveTrends:
    """``rss`` and ``fd``: ``(node, pid) ->`` regression of RSS (bytes) / fd count over unix time (s)."""

    def __init__(self) -> None:
        self.rss: OrderedDict[tuple[str, int], OnlineRegression] = OrderedDict()
        self.fd: OrderedDict[tuple[str, int], OnlineRegression] = OrderedDict()

    def add_rss(self, key: tuple[str, int], ts: float, rss_bytes: float) -> OnlineRegression:
        """Add one RSS point of process ``key``; returns its regression."""
        reg = _live(self.rss, key)
        reg.add(ts, rss_bytes)
        return reg

    def add_fd(self, key: tuple[str, int], ts: float, fd_count: float) -> None:
        """Add one fd-count point of process ``key``."""
        _live(self.fd, key).add(ts, fd_count)

    def rebuild(self, samples_csv: Path) -> None:
        """On resume: the regressions from ``samples.csv`` (streamed; one regression per process)."""
        for row in iter_csv(samples_csv):
            try:
                key = (row["node"], int(row["pid"]))
                ts = float(row["ts"])
            except (KeyError, ValueError):
                continue
            if row.get("rss_bytes"):
                self.add_rss(key, ts, float(row["rss_bytes"]))
            if row.get("fd_count"):
                self.add_fd(key, ts, float(row["fd_count"]))
