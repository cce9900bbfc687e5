"""Every case of the matrix has an expected duration before it runs: its earlier runs, else its sizes or time
windows, else its static estimate (xpushare/cases/estimates.py); a soak's comes from its ``stab_duration_s``."""

from __future__ import annotations

import dataclasses

from xpushare.cases import REGISTRY
from xpushare.cases.estimates import STATIC_CASE_S
from xpushare.engine import dry_run
from xpushare.engine.plan import Selection, expected_case_duration
from xpushare.inventory import schema


def test_every_case_has_a_static_estimate() -> None:
    assert sorted(set(REGISTRY) - set(STATIC_CASE_S)) == []
    assert sorted(set(STATIC_CASE_S) - set(REGISTRY)) == []
    assert all(seconds > 0 for seconds in STATIC_CASE_S.values())


def test_every_case_that_runs_has_an_expected_duration_in_the_dry_run(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # a Kubernetes cluster with every capability: every case RUNs (the disruptive ones are allowed)
    k8s = dataclasses.replace(schema.local_cluster(), mode="k8s", sut_lib="/opt/xpushare/libxpushare.so")
    caps = frozenset({"kubernetes", "annotations", "client-library", "scheduler-process"})
    cases = list(REGISTRY.values())
    plan = dry_run.plan_run(cases, k8s, Selection(cases=cases, required=set()), {"allow_disruptive": True}, caps,
                            tmp_path)
    running = [c for c in plan["cases"] if c["plan"] == "RUN"]
    assert len(running) > len(cases) // 2
    assert [c["case_id"] for c in running if not c["expected_duration_s"]] == []
    assert "expected s" in dry_run.render(plan, "table")
    assert all(c["expected_duration_s"] == 0.0 for c in plan["cases"] if c["plan"] == "SKIP")


def test_a_soak_expects_its_own_duration() -> None:
    local = schema.local_cluster()
    seconds, basis = expected_case_duration(REGISTRY["STAB-002"], local, {**REGISTRY["STAB-002"].params,
                                                                         "stab_duration_s": 120}, None)
    assert seconds is not None and 120 <= seconds < 200 and "stab_duration_s" in basis
