"""The isolation table of the reports: allocation or launch path x memory or core quota -> held / bypassed, with
the accuracy.

Built from the stored results of the isolation suite alone (the metrics ``path``, ``quota_bytes`` or
``core_limit``, ``quota_source``, ``held``, ``accuracy`` that :func:`xpushare.judge.isolation.judge_memory_path`
and :func:`xpushare.judge.isolation.judge_compute_path` record; ``neighbour_core_limit`` for a compute case
beside a neighbour).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from xpushare.model.case_record import CaseRecord
from xpushare.report.summaries import record_status

__all__ = ["HEADER", "isolation_rows"]

HEADER = ("Cluster", "Case", "Path", "Quota under test", "Quota", "Accuracy", "Status")
"""Columns of :func:`isolation_rows`; Quota is ``held``, ``held, not usable`` (memory: less than the quota could be
allocated), ``bypassed`` or ``not judged`` (ERROR/SKIP)."""


def isolation_rows(results: Sequence[CaseRecord]) -> list[list[str]]:
    """One row per isolation case of the case records ``results`` (model/case_record.py): cluster, case id, path,
    quota (``<MiB> MiB (env|annotation)`` or ``<q> % core (annotation)``, ``beside <n> %`` with a neighbour), held /
    bypassed / not judged, accuracy (memory: accepted / quota; compute: GPU share / the quota's share; 3 decimals,
    ``-`` when not measured), status."""
    rows: list[list[str]] = []
    for r in results:
        if r.suite != "isolation":
            continue
        m: dict[str, Any] = r.metrics or {}
        quota = m.get("quota_bytes")
        quota_text = f"{int(quota) / 2**20:.0f} MiB ({m.get('quota_source') or '?'})" if quota else "-"
        if m.get("core_limit") is not None:
            quota_text = f"{int(m['core_limit'])} % core ({m.get('quota_source') or '?'})"
            if m.get("neighbour_core_limit") is not None:
                quota_text += f" beside {int(m['neighbour_core_limit'])} %"
        held = m.get("held")
        verdict = "held" if held is True else "bypassed" if held is False else "not judged"
        if held is True and m.get("usable") is False:  # the memory judgment's outcome (judge/isolation)
            verdict = "held, not usable"
        accuracy = m.get("accuracy")
        rows.append([str(r.cluster), str(r.case_id), str(m.get("path") or "-"), quota_text,
                     verdict, f"{float(accuracy):.3f}" if accuracy is not None else "-", record_status(r).value])
    return rows
