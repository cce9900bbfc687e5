"""The lifecycle under faults of the harvest (no lab): a harvest that lost evidence to a fault makes the case
ERROR naming it, whatever the judgment on the rest says; a clean harvest leaves the judgment alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from xpushare.cases import CaseDef
from xpushare.engine import lifecycle
from xpushare.inventory import schema
from xpushare.model.errors import HarvestIncomplete
from xpushare.model.verdict import Status, Verdict

FAULT = "pods: lab-master: connection lost during 'kubectl'"


class HarvestBackend:
    """A backend whose act does nothing and whose harvest stores pods.json, losing the rest to a fault or not."""

    mode = "host"
    capabilities: frozenset[str] = frozenset()

    def __init__(self, fault: bool) -> None:
        self.fault = fault
        self.cleaned = False

    def kubectl_calls(self) -> int | None:
        return None

    def kubectl_retries(self) -> int | None:
        return None

    def begin_case(self, case_dir: Path, case_id: str) -> None:
        self.case_dir = case_dir

    def harvest(self) -> list[str]:
        (self.case_dir / "pods.json").write_text("[]\n")
        if self.fault:
            raise HarvestIncomplete(["pods.json"], [FAULT])
        return ["pods.json"]

    def cleanup(self) -> None:
        self.cleaned = True


def case(status: Status) -> CaseDef:
    return CaseDef("FUNC-001", "functional", "unit", "W2", "nothing", "pods.json",
                   act=lambda run: None, judge=lambda ev, th, plan: Verdict(status, f"judged {status.value}"))


@pytest.mark.parametrize("judged", [Status.PASS, Status.FAIL, Status.ERROR])
def test_a_harvest_fault_makes_the_case_error_naming_it(tmp_path: Path, judged: Status) -> None:
    backend = HarvestBackend(fault=True)
    record, interrupted = lifecycle.run_case(case(judged), run_id="r", run_dir=tmp_path,
                                             cluster=schema.load(None).cluster("local"), backend=backend,  # type: ignore[arg-type]
                                             params={}, required=True)
    assert record.status == "ERROR" and not interrupted
    assert record.summary.startswith(f"evidence incomplete ({FAULT}); judged on what was stored: {judged.value}")
    assert record.error == f"evidence incomplete: {FAULT}"  # `invoke judge` keeps it ERROR
    assert "pods.json" in record.evidence and backend.cleaned


def test_a_clean_harvest_leaves_the_judgment(tmp_path: Path) -> None:
    backend = HarvestBackend(fault=False)
    record, _ = lifecycle.run_case(case(Status.PASS), run_id="r", run_dir=tmp_path,
                                   cluster=schema.load(None).cluster("local"), backend=backend,  # type: ignore[arg-type]
                                   params={}, required=True)
    assert record.status == "PASS" and record.error is None and backend.cleaned
