"""The isolation table of the reports: allocation path x memory quota -> held / bypassed, with the accuracy.

Built from the stored results of the isolation suite alone (the metrics ``path``, ``quota_bytes``,
``quota_source``, ``held``, ``accuracy`` that :func:`xpushare.judge.isolation.judge_memory_path` records).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from xpushare.report.summaries import Result, record_status

__all__ = ["HEADER", "isolation_rows"]

HEADER = ("Cluster", "Case", "Path", "Memory quota", "Quota", "Accuracy", "Status")
"""Columns of :func:`isolation_rows`; Quota is ``held``, ``bypassed`` or ``not judged`` (ERROR/SKIP)."""


def isolation_rows(results: Sequence[Result]) -> list[list[str]]:
    """One row per isolation case: cluster, case id, path, quota (``<MiB> MiB (env|annotation)``), held /
    bypassed / not judged, accuracy (accepted / quota, 3 decimals, ``-`` when not measured), status."""
    rows: list[list[str]] = []
    for r in results:
        if r.get("suite") != "isolation":
            continue
        m: dict[str, Any] = r.get("metrics") or {}
        quota = m.get("quota_bytes")
        quota_text = f"{int(quota) / 2**20:.0f} MiB ({m.get('quota_source') or '?'})" if quota else "-"
        held = m.get("held")
        verdict = "held" if held is True else "bypassed" if held is False else "not judged"
        accuracy = m.get("accuracy")
        rows.append([str(r.get("cluster", "")), str(r.get("case_id", "")), str(m.get("path") or "-"), quota_text,
                     verdict, f"{float(accuracy):.3f}" if accuracy is not None else "-", record_status(r).value])
    return rows
