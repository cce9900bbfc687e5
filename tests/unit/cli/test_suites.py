"""The suite-task factory: shared flags in one order, each suite's scope, and the one collection."""

from __future__ import annotations

import pytest

from xpushare.cli.collection import namespace
from xpushare.cli.suites import SUITE_TASKS, SuiteFlags, by_prefix, by_suite, fail, matrix

SHARED = ["cluster", "case", "playbook", "run_id", "resume", "set_", "root", "inventory_", "wait", "dry_run",
          "output", "verbose", "maxfail", "repeat"]


def test_every_suite_task_takes_the_shared_flags_in_order() -> None:
    for t in SUITE_TASKS:
        names = [a.name for a in t.get_arguments()]
        extra = {"fail": ["allow_disruptive"], "matrix": ["suite"]}.get(t.name, [])
        assert names == [SHARED[0], *extra, *SHARED[1:]], t.name
        assert {"case", "set_"} <= set(t.iterable), t.name
        assert namespace[t.name] is t
    assert "suite" in matrix.iterable


def test_scopes_select_suites_or_cases() -> None:
    assert by_suite("functional")(SuiteFlags("local")).suites == ("functional",)
    chosen = by_suite("functional")(SuiteFlags("local", cases=("FUNC-002",)))
    assert chosen.suites == () and chosen.case_ids == ("FUNC-002",)
    assert by_suite("metrics")(SuiteFlags("local", playbook="smoke")).suites == ()
    stab = by_prefix("STAB")(SuiteFlags("c1"))
    assert stab.case_ids and all(c.startswith("STAB-") for c in stab.case_ids)
    assert by_prefix("STAB")(SuiteFlags("c1", playbook="smoke")).case_ids == ()


def test_a_suite_task_hands_the_engine_its_request(monkeypatch: pytest.MonkeyPatch) -> None:
    from invoke import Context

    from xpushare.engine import suite_run

    seen: list[suite_run.RunRequest] = []
    monkeypatch.setattr(suite_run, "run", lambda request: seen.append(request) or 0)
    fail(Context(), "c1", allow_disruptive=True, set_=["x=1"], root="/r")
    fail(Context(), "c1", case=["FAIL-002"], wait=True)
    matrix(Context(), "local", suite=["func"], case=["PERF-001"])
    fail(Context(), "c1", maxfail="2")
    fail(Context(), "c1", repeat="3")
    assert seen[0].overrides == ("x=1", "allow_disruptive=true") and str(seen[0].root) == "/r"
    assert seen[0].case_ids and all(c.startswith("FAIL-") for c in seen[0].case_ids)
    assert seen[1].overrides == () and seen[1].case_ids == ("FAIL-002",) and seen[1].suites == ()
    assert seen[1].wait and not seen[0].wait
    assert seen[2].suites == ("func",) and seen[2].case_ids == ("PERF-001",) and seen[2].cluster == "local"
    assert seen[0].maxfail is None and seen[3].maxfail == 2
    assert seen[0].repeat == 1 and seen[4].repeat == 3


@pytest.mark.parametrize("bad", ["0", "x", "-1"])
def test_a_bad_maxfail_is_one_line_exit_2(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    from invoke import Context
    from invoke.exceptions import Exit

    with pytest.raises(Exit) as exc:
        fail(Context(), "c1", maxfail=bad)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--maxfail" in err and len(err.strip().splitlines()) == 1
