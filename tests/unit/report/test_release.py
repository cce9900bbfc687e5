"""The release decision (report/summaries.py ``release_decision``, docs/release.md) and what the run listings say
(report/runs.py): YES only for a run that selected every case of its cluster's release profile, on a cluster
whose SUT was in the path of every verdict, all PASS; a partial selection is n/a; a cluster without the SUT is NO;
an INTERMITTENT case refuses the release; the profile that decided is in every report; ``invoke runs`` shows
INTERRUPTED and INCOMPLETE runs as such and its overall column is the release decision; ``invoke diff`` marks a
flip of one SUT build."""

from __future__ import annotations

import json
import os
import socket
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from tests.unit.report.test_artifacts import make_record, put
from xpushare.model.case_record import CaseRecord
from xpushare.report import build, run_store, summaries
from xpushare.report.runs import INCOMPLETE, INTERRUPTED, RUNNING, diff_results, list_runs

SUT_OK = {"name": "sut_in_path", "expression": "registered", "values": {}, "ok": True}
PROFILE = ["FUNC-001", "FUNC-002", "MET-001"]
SUITE = {"FUNC": "functional", "MET": "metrics"}


def profile(required: list[str] = PROFILE, *, sut: bool = True, name: str = "seed-t4") -> dict[str, Any]:
    return {"profile": name, "source": "inventory release_profile", "required": required, "sut": sut,
            "sut_reason": "" if sut else "host mode without sut_lib"}


def record(case_id: str, status: str = "PASS", **kw: Any) -> dict[str, Any]:
    """A record of a case that ran workloads with the SUT in their path (MET-001 runs none)."""
    workloads = not case_id.startswith("MET")
    base = make_record(case_id=case_id, suite=SUITE[case_id.split("-")[0]], status=status,
                       checks=[SUT_OK] if workloads else [], evidence=["pods/a.log"] if workloads else [])
    return {**base, **kw}


def meta(selected: list[str], *, sut: bool = True, **kw: Any) -> dict[str, Any]:
    return {"run_id": "r1", "clusters": ["c1"], "exit_status": 0, "interrupted": False,
            "selected": [{"cluster": "c1", "suite": SUITE[c.split("-")[0]], "case_id": c} for c in selected],
            "release_profiles": {"c1": profile(sut=sut)}, "sut_judging_suites": ["functional", "metrics"], **kw}


def decide(results: list[dict[str, Any]], m: dict[str, Any]) -> summaries.ReleaseDecision:
    return summaries.decision_of_run([CaseRecord.from_json(r) for r in results], m)


def test_a_full_profile_all_pass_with_the_sut_in_the_path_is_yes() -> None:
    d = decide([record(c) for c in PROFILE], meta(PROFILE))
    assert d.ready and d.label == "YES" and d.reasons == ()
    assert d.profiles == ("c1: seed-t4 (inventory release_profile), 3 required case(s)",)


def test_a_partial_selection_is_not_applicable_never_yes() -> None:
    d = decide([record("FUNC-001"), record("FUNC-002")], meta(["FUNC-001", "FUNC-002"]))
    assert not d.ready and d.answer == "n/a"
    assert d.label == "n/a (partial selection: 2 of 3 required cases)"
    assert any("not selected: MET-001" in r for r in d.reasons)


def test_a_cluster_without_the_sut_is_no_whatever_was_selected() -> None:
    for selected in (PROFILE, ["FUNC-001"]):
        d = decide([record(c, checks=[], evidence=["pods/a.log"]) for c in selected], meta(selected, sut=False))
        assert d.label == "NO" and any("cluster c1 has no SUT: host mode without sut_lib" in r for r in d.reasons)


def test_a_pass_without_the_sut_in_its_path_is_no() -> None:
    absent = [record("FUNC-001", checks=[]), record("FUNC-002"), record("MET-001")]
    d = decide(absent, meta(PROFILE))
    assert d.label == "NO" and any("PASS without the SUT in the path: c1/functional/FUNC-001" in r for r in d.reasons)
    bad = {**SUT_OK, "ok": None, "detail": "SUT not in the path: p: preload refused"}
    d = decide([record("FUNC-001"), record("FUNC-002", checks=[bad]), record("MET-001")], meta(PROFILE))
    assert d.label == "NO" and any("preload refused" in r for r in d.reasons)


def test_an_intermittent_case_refuses_the_release_even_in_a_partial_selection() -> None:
    flaky = record("FUNC-002", "INTERMITTENT", verdicts=["PASS", "FAIL", "FAIL"], pass_count=1)
    d = decide([record("FUNC-001"), flaky, record("MET-001")], meta(PROFILE))
    assert d.label == "NO" and any(r.startswith("INTERMITTENT: c1/functional/FUNC-002") for r in d.reasons)
    d = decide([flaky], meta(["FUNC-002"]))
    assert d.label == "NO"  # a failure refuses whatever the selection


def test_an_error_in_a_full_selection_is_no_and_in_a_partial_one_n_a() -> None:
    assert decide([record("FUNC-001", "ERROR"), record("FUNC-002"), record("MET-001")], meta(PROFILE)).label == "NO"
    assert decide([record("FUNC-001", "ERROR")], meta(["FUNC-001"])).answer == "n/a"


def write_run(root: Path, run_id: str, results: list[dict[str, Any]], m: dict[str, Any] | None) -> Path:
    run_dir = run_store.run_dir(root, run_id)
    run_dir.mkdir(parents=True)
    for r in results:
        put(run_dir, **{**r, "run_id": run_id})
    if m is not None:
        run_store.write_run_meta(run_dir, {**m, "run_id": run_id})
    return run_dir


def test_every_report_names_the_profile_and_the_decision(tmp_path: Path) -> None:
    run_dir = write_run(tmp_path, "r1", [record("FUNC-001"), record("FUNC-002")], meta(["FUNC-001", "FUNC-002"]))
    paths = build.build(run_dir)
    text = paths.markdown.read_text(encoding="utf-8")
    assert "release_ready: **n/a (partial selection: 2 of 3 required cases)**" in text
    assert "release profile: c1: seed-t4 (inventory release_profile), 3 required case(s)" in text
    page = paths.html.read_text(encoding="utf-8")
    assert "n/a (partial selection: 2 of 3 required cases)" in page and "seed-t4" in page


def test_intermittent_is_counted_reported_and_a_junit_failure(tmp_path: Path) -> None:
    flaky = record("FUNC-002", "INTERMITTENT", summary="1 of 3 attempt(s) PASS", verdicts=["PASS", "FAIL", "FAIL"],
                   pass_count=1, attempts_run=[{"attempt": 1, "status": "PASS", "summary": "ok", "dir": "attempts/1"},
                                               {"attempt": 2, "status": "FAIL", "summary": "x", "dir": "attempts/2"},
                                               {"attempt": 3, "status": "FAIL", "summary": "y", "dir": "."}])
    run_dir = write_run(tmp_path, "r1", [record("FUNC-001"), flaky, record("MET-001")], meta(PROFILE))
    paths = build.build(run_dir)
    assert summaries.counts(run_store.load_results(run_dir))["INTERMITTENT"] == 1
    cases = ET.parse(paths.junit).getroot().iter("testcase")
    case = next(tc for tc in cases if tc.get("name", "").startswith("FUNC-002"))
    failure = case.find("failure")
    assert failure is not None and failure.get("type") == "INTERMITTENT"
    assert "attempt 2 FAIL (c1/functional/FUNC-002/attempts/2)" in (failure.text or "")
    assert ET.parse(paths.junit).getroot().get("failures") == "1"
    text = paths.markdown.read_text(encoding="utf-8")
    assert "release_ready: **NO**" in text and "**INTERMITTENT** c1/functional/FUNC-002" in text
    assert summaries.aggregate_status(["PASS", "INTERMITTENT", "ERROR"]).value == "INTERMITTENT"


def test_runs_never_list_an_unfinished_run_as_passed(tmp_path: Path) -> None:
    done = meta(PROFILE)
    write_run(tmp_path, "a-full", [record(c) for c in PROFILE], {**done, "started": "2026-01-01T10:00:00+00:00"})
    # killed: no exit_status, its process is gone
    dead = {**done, "started": "2026-01-01T11:00:00+00:00", "exit_status": None,
            "process": {"machine": socket.gethostname(), "pid": 2 ** 22 + 12345}}
    write_run(tmp_path, "b-killed", [record("FUNC-001")], dead)
    # stopped by a full disk after 1 of 3 cases, yet an exit status was written
    write_run(tmp_path, "c-short", [record("FUNC-001")], {**done, "started": "2026-01-01T12:00:00+00:00",
                                                          "exit_status": 1})
    # no run.json end and an older version's run.json (no process): interrupted
    write_run(tmp_path, "d-old", [record("FUNC-001")], {"run_id": "d-old", "started": "2026-01-01T13:00:00+00:00"})
    live = {**done, "started": "2026-01-01T14:00:00+00:00", "exit_status": None,
            "process": {"machine": socket.gethostname(), "pid": os.getpid()}}
    write_run(tmp_path, "e-live", [record("FUNC-001")], live)
    write_run(tmp_path, "f-interrupted", [record(c) for c in PROFILE],
              {**done, "started": "2026-01-01T15:00:00+00:00", "exit_status": 130, "interrupted": True})
    runs = {r.run_id: r for r in list_runs(tmp_path)}
    assert runs["a-full"].overall == "YES" and runs["a-full"].release == "YES" and runs["a-full"].exit_status == 0
    assert runs["b-killed"].overall == INTERRUPTED and runs["b-killed"].exit_status is None
    assert runs["c-short"].overall == INCOMPLETE and runs["c-short"].verdicts == "PASS"
    assert runs["d-old"].overall == INTERRUPTED
    assert runs["e-live"].overall == RUNNING
    assert runs["f-interrupted"].overall == INTERRUPTED and runs["f-interrupted"].release == "NO"
    assert all(r.overall != "PASS" for r in runs.values())


def test_the_overall_column_is_the_release_decision(tmp_path: Path) -> None:
    write_run(tmp_path, "p", [record("FUNC-001")], {**meta(["FUNC-001"]), "started": "2026-01-01T10:00:00+00:00"})
    write_run(tmp_path, "n", [record(c) for c in PROFILE],
              {**meta(PROFILE, sut=False), "started": "2026-01-01T11:00:00+00:00"})
    runs = {r.run_id: r for r in list_runs(tmp_path)}
    assert runs["p"].overall == "n/a (partial selection: 1 of 3 required cases)" and runs["p"].verdicts == "PASS"
    assert runs["n"].overall == "NO"
    assert json.loads(json.dumps(runs["p"].to_dict()))["state"] == "COMPLETE"


def test_diff_marks_a_flip_of_one_sut_build() -> None:
    a = [CaseRecord.from_json(record(c)) for c in ("FUNC-001", "FUNC-002")]
    b = [CaseRecord.from_json(record(c, "FAIL")) for c in ("FUNC-001", "FUNC-002")]
    same = {"c1": {"id": "abc123", "parts": ["x"]}}
    d = diff_results(a, b, a_builds=same, b_builds=same)
    assert [(c.case, c.same_build, c.build) for c in d.verdict_changes] == [
        ("functional/FUNC-001", True, "abc123"), ("functional/FUNC-002", True, "abc123")]
    assert d.verdict_changes[0].note.startswith("flip: same SUT build abc123")
    other = diff_results(a, b, a_builds=same, b_builds={"c1": {"id": "def456"}})
    assert other.verdict_changes[0].same_build is False and other.verdict_changes[0].note == "SUT build changed"
    unknown = diff_results(a, b)
    assert unknown.verdict_changes[0].same_build is None and unknown.verdict_changes[0].note == ""
