"""engine/run.py (one Run for every kind of run), model/case_record.py and the verdict's thresholds.

* every kind of run holds the cluster's lease: a soak and a legacy scenario on a cluster another live run holds
  stop with LeaseHeld before anything is set up or written (the lab test of a soak against ``invoke func`` is
  tests/e2e/test_soak_lease.py);
* run.json has one writer: UTC times and ``tool_version`` for every kind; a run that extends a stored one (legacy
  scenarios under one id) accumulates clusters and required cases, and its exit status is its own cases';
* CaseRecord round-trips result.json, keeps keys it does not know, and replays an older record's thresholds;
* ``Verdict.thresholds`` holds the parameters the judgment read, and only those.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.backend import FakeBackend
from xpushare.cases.base import CaseDef
from xpushare.engine import lifecycle
from xpushare.engine.run import Reuse, Run, RunHooks, RunSelection
from xpushare.evidence.store import Evidence
from xpushare.inventory.schema import ClusterSpec, local_cluster
from xpushare.judge.thresholds import ReadParams, used
from xpushare.model.case_record import CaseRecord
from xpushare.model.errors import LeaseHeld
from xpushare.model.exit_status import ExitStatus
from xpushare.model.lease import Holder, LeaseSettings
from xpushare.model.verdict import Status, Verdict
from xpushare.transport.local import LocalHost
from xpushare.transport.lock_file import LockFileStore

SETTINGS = LeaseSettings(renew_s=1.0, stale_s=60.0)


@pytest.fixture
def held_local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LockFileStore]:
    """The local cluster's lease (in ``tmp_path``) held by a live run of another user's tool: this process."""
    monkeypatch.setenv("XPUSHARE_LEASE_DIR", str(tmp_path))
    store = LockFileStore(LocalHost(), str(tmp_path / "xpushare-run.lease"))
    holder = Holder(run_id="busy-run", user="ana", machine=socket.gethostname(), pid=os.getpid(),
                    started="2026-01-01T00:00:00+00:00", token="feedfacefeedface")
    assert store.create(holder, SETTINGS)
    yield store


def test_a_soak_on_a_held_cluster_stops_before_writing_anything(tmp_path: Path, held_local: LockFileStore) -> None:
    from xpushare.soak.task import SoakRequest, soak

    with pytest.raises(LeaseHeld, match="cluster local is in use by run busy-run"):
        soak(SoakRequest(cluster="local", duration_s=60.0, run_id="s1", root=tmp_path), out=open(os.devnull, "w"))  # noqa: SIM115
    assert not (tmp_path / ".tmplog" / "s1").exists()


def test_a_legacy_scenario_holds_the_lease_around_its_setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from xpushare.deploy import k8s_pipeline
    from xpushare.engine import lease
    from xpushare.legacy.run import LegacyRequest, run_scenario

    inv = tmp_path / "inventory.yaml"
    inv.write_text("clusters:\n  k: {mode: k8s, hosts: {k-m: {address: 127.0.0.9, roles: [master]}}}\n")
    taken: list[tuple[list[str], str]] = []

    def refuse(clusters: list[ClusterSpec], run_id: str, **_: Any) -> Any:
        taken.append(([c.name for c in clusters], run_id))
        raise LeaseHeld("cluster k is in use by run busy-run")

    def no_setup(*_: Any, **__: Any) -> ExitStatus:
        raise AssertionError("the setup ran without the lease")

    monkeypatch.setattr(lease, "held_all", refuse)
    monkeypatch.setattr(k8s_pipeline, "run_deploy", no_setup)
    with pytest.raises(LeaseHeld):
        run_scenario(LegacyRequest(scenario="cross-gpu", cluster="k", run_id="l1", inventory_path=str(inv),
                                   root=tmp_path), out=open(os.devnull, "w"))  # noqa: SIM115
    assert taken == [(["k"], "l1")]
    assert not (tmp_path / ".tmplog" / "l1").exists()


class _Hooks(RunHooks):
    def __init__(self) -> None:
        self.done: list[str] = []

    def backend(self, cluster: ClusterSpec) -> Any:
        return FakeBackend()  # no capabilities: every case SKIPs before acting

    def case_done(self, run: Run, cluster: ClusterSpec, case: CaseDef, record: CaseRecord) -> None:
        self.done.append(f"{case.case_id} {record.status}")


def _case(case_id: str, requires: frozenset[str] = frozenset()) -> CaseDef:
    return CaseDef(case_id, "legacy", f"title {case_id}", "W1", "op", "files", params={"a": 1},
                   act=lambda run: None, judge=lambda ev, th, plan: Verdict(Status.PASS, "ok"), requires=requires)


def _selection(cluster: ClusterSpec, *cases: CaseDef) -> RunSelection:
    return RunSelection(label="legacy", cases=cases, required=frozenset(c.case_id for c in cases),
                        todo={cluster.name: list(cases)}, params=lambda case, _cluster: dict(case.params))


def test_an_extending_run_accumulates_run_json_in_utc_with_the_tool_version(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XPUSHARE_LEASE_DIR", str(tmp_path))
    cluster = local_cluster()
    devnull = open(os.devnull, "w")  # noqa: SIM115 - closed with the process
    first, hooks = Run(root=tmp_path, clusters=[cluster], run_id="x", reuse=Reuse.EXTEND, out=devnull), _Hooks()
    missing = _case("one", requires=frozenset({"kubernetes"}))  # SKIP: not a failure
    assert first.execute(_selection(cluster, missing), hooks) == ExitStatus.OK
    assert hooks.done == ["one SKIP"]
    meta = json.loads((first.dir / "run.json").read_text())
    assert meta["tool_version"] and meta["started"].endswith("+00:00") and meta["ended"].endswith("+00:00")
    second = Run(root=tmp_path, clusters=[cluster], run_id="x", reuse=Reuse.EXTEND, out=devnull)
    two = _case("two", requires=frozenset({"annotations"}))
    assert second.execute(_selection(cluster, two), _Hooks()) == ExitStatus.OK
    meta2 = json.loads((second.dir / "run.json").read_text())
    assert meta2["required"] == ["one", "two"] and meta2["started"] == meta["started"]
    assert [s["case_id"] for s in meta2["selected"]] == ["one", "two"] and meta2["clusters"] == ["local"]
    with pytest.raises(Exception, match="already stored"):
        Run(root=tmp_path, clusters=[cluster], run_id="x", reuse=Reuse.REFUSE, out=devnull)
    assert not (tmp_path / "xpushare-run.lease").exists()  # released


# -- CaseRecord ---------------------------------------------------------------------------------------------------


def test_case_record_round_trips_and_keeps_unknown_keys() -> None:
    record = CaseRecord(run_id="r", cluster="c", suite="functional", case_id="FUNC-001", title="t", mode="k8s",
                        attempt=1, status="PASS", summary="ok", thresholds={"x": 1}, params={"x": 1, "y": 2})
    doc = record.to_json()
    assert list(doc)[:14] == ["run_id", "cluster", "suite", "case_id", "title", "mode", "attempt", "status",
                              "summary", "started", "ended", "duration_s", "phases_s", "thresholds"]
    assert "not_run" not in doc and "rejudgments" not in doc
    assert CaseRecord.from_json(doc) == record
    stored = {**doc, "future_key": [1], "case_log_dir": "c/functional/FUNC-001"}
    again = CaseRecord.from_json(stored)
    assert again.to_json()["future_key"] == [1] and "case_log_dir" not in again.to_json()


def test_an_older_record_replays_its_thresholds() -> None:
    old = {"run_id": "r", "cluster": "c", "suite": "s", "case_id": "X", "status": "FAIL", "summary": "s",
           "thresholds": {"every": 1, "param": 2}}
    assert CaseRecord.from_json(old).replay_params == {"every": 1, "param": 2}
    assert "params" not in CaseRecord.from_json(old).to_json()  # not invented on rewrite


# -- the verdict's thresholds -----------------------------------------------------------------------------------


def test_read_params_remember_what_was_read() -> None:
    th = ReadParams({"a": 1, "b": 2, "c": 3})
    assert "b" in th and th["a"] == 1 and th.get("c") == 3 and th.get("zz") is None and th.get("d", 0.5) == 0.5
    assert used(th) == {"a": 1, "c": 3, "d": 0.5}  # a default the judgment applied is what it used
    assert used({"a": 1, "b": 2}) == {"a": 1, "b": 2}  # a plain mapping: every one


def test_judge_case_records_only_the_parameters_the_judgment_read(tmp_path: Path) -> None:
    def judge(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
        limit = th["limit"]
        th.get("missing_with_default", 7)
        return Verdict(Status.PASS, f"under {limit}", thresholds=used(th))

    case = CaseDef("T-1", "legacy", "t", "W", "op", "files", params={}, act=lambda run: None, judge=judge)
    verdict = lifecycle.judge_case(case, tmp_path, {"limit": 5, "pod_timeout_s": 600, "unused": "x"})
    assert verdict.status is Status.PASS and verdict.thresholds == {"limit": 5, "missing_with_default": 7}
