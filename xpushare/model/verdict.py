"""Verdict model shared by the engine, the judgments and the reports.

A case ends in exactly one :class:`Status`. Only ``PASS`` counts as a pass anywhere: SKIP, ERROR, INTERRUPTED
and INTERMITTENT are reported as what they are (seed 000 section 6; README.md "Runs, artifacts and verdicts").
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any


class Status(str, Enum):
    """Outcome of one test case."""

    PASS = "PASS"
    FAIL = "FAIL"
    SKIP = "SKIP"
    """Not applicable here (mode, missing feature); the reason is in the summary."""
    ERROR = "ERROR"
    """The harness or the infrastructure failed, so the system under test was not judged."""
    INTERRUPTED = "INTERRUPTED"
    """Stopped by Ctrl-C; ``--resume`` runs it again."""
    INTERMITTENT = "INTERMITTENT"
    """``--repeat N``: the case's attempts did not agree (PASS in some, not in others); counted as a failure
    everywhere (never a pass), the record lists each attempt's verdict."""

    def __str__(self) -> str:
        return self.value


@dataclass
class Check:
    """One judgment expression evaluated on evidence.

    ``expression`` is the rule as written (``runtime_30 > runtime_60``), ``values`` the inputs it saw,
    ``ok`` whether it held. A check with ``ok=None`` could not be evaluated (missing evidence).
    """

    name: str
    expression: str
    values: dict[str, Any]
    ok: bool | None
    detail: str = ""


@dataclass
class Verdict:
    """The judgment of one case: status, one-line summary, the checks behind it, thresholds and metrics.

    ``thresholds``: the parameters the judgment used (name -> value, with any default it applied), and only those;
    the engine has the judgment read its parameters through ``judge.thresholds.ReadParams`` and stores these as
    the record's ``thresholds`` (:mod:`xpushare.model.case_record`)."""

    status: Status
    summary: str
    checks: list[Check] = field(default_factory=list)
    thresholds: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    evidence: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["status"] = self.status.value
        return d


def combine(checks: list[Check], *, pass_summary: str) -> tuple[Status, str]:
    """Fold checks into a status: any failed check is FAIL, any unevaluable check is ERROR, else PASS.

    An empty list is ERROR: a verdict with no evidence behind it is never a PASS.
    """
    if not checks:
        return Status.ERROR, "no checks could be evaluated"
    failed = [c for c in checks if c.ok is False]
    if failed:
        return Status.FAIL, "; ".join(f"{c.name}: {c.detail or c.expression}" for c in failed)
    missing = [c for c in checks if c.ok is None]
    if missing:
        return Status.ERROR, "; ".join(f"{c.name}: {c.detail or 'evidence missing'}" for c in missing)
    return Status.PASS, pass_summary
