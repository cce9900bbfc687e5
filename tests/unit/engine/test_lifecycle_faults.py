"""The lifecycle under faults of the harvest (no lab): a harvest that lost evidence to a fault makes the case
ERROR naming it, whatever the judgment on the rest says; a clean harvest leaves the judgment alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.backend import FakeBackend
from xpushare.cases import CaseDef
from xpushare.engine import lifecycle
from xpushare.inventory import schema
from xpushare.model.errors import HarvestIncomplete
from xpushare.model.verdict import Status, Verdict

FAULT = "pods: lab-master: connection lost during 'kubectl'"


def harvesting(fault: bool) -> FakeBackend:
    """A backend whose act does nothing and whose harvest stores pods.json, losing the rest to a fault or not."""
    def harvest(backend: FakeBackend) -> list[str]:
        (backend.case_dir / "pods.json").write_text("[]\n")
        if fault:
            raise HarvestIncomplete(["pods.json"], [FAULT])
        return ["pods.json"]

    return FakeBackend(on_harvest=harvest)


def case(status: Status) -> CaseDef:
    return CaseDef("FUNC-001", "functional", "unit", "W2", "nothing", "pods.json",
                   act=lambda run: None, judge=lambda ev, th, plan: Verdict(status, f"judged {status.value}"))


@pytest.mark.parametrize("judged", [Status.PASS, Status.FAIL, Status.ERROR])
def test_a_harvest_fault_makes_the_case_error_naming_it(tmp_path: Path, judged: Status) -> None:
    backend = harvesting(fault=True)
    record, interrupted = lifecycle.run_case(case(judged), run_id="r", run_dir=tmp_path,
                                             cluster=schema.load(None).cluster("local"), backend=backend,
                                             params={}, required=True)
    assert record.status == "ERROR" and not interrupted
    assert record.summary.startswith(f"evidence incomplete ({FAULT}); judged on what was stored: {judged.value}")
    assert record.error == f"evidence incomplete: {FAULT}"  # `invoke judge` keeps it ERROR
    assert "pods.json" in record.evidence and "cleanup" in backend.calls


def test_a_clean_harvest_leaves_the_judgment(tmp_path: Path) -> None:
    backend = harvesting(fault=False)
    record, _ = lifecycle.run_case(case(Status.PASS), run_id="r", run_dir=tmp_path,
                                   cluster=schema.load(None).cluster("local"), backend=backend,
                                   params={}, required=True)
    assert record.status == "PASS" and record.error is None and "cleanup" in backend.calls
