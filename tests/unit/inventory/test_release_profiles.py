"""Release profiles (inventory/release.py, data/release_profiles.yaml; docs/release.md): the seed's matrix per
cluster, a one-GPU machine without two-GPU cases, host mode without Kubernetes-only cases; the inventory's
``release_profile`` key names one (an unknown name is an inventory error), the default follows mode and GPUs; the
profile a run used is recorded in run.json."""

from __future__ import annotations

from pathlib import Path

import pytest

from xpushare.backends.base import CAP_KUBERNETES
from xpushare.cases import REGISTRY
from xpushare.engine.plan import select
from xpushare.engine.release import profile_record
from xpushare.inventory import release, schema
from xpushare.model.errors import InventoryError

SEED = Path(__file__).resolve().parents[3] / "inventory" / "inventory.yaml"


def test_the_seed_profiles_follow_the_seed_s_cluster_columns() -> None:
    t4, a800 = set(release.profile("seed-t4").cases), set(release.profile("seed-a800").cases)
    # seed 000 sections 7-9: C1-only cases and the C2-only PERF-006
    assert {"FUNC-003", "FUNC-004", "COMBO-001", "COMBO-005", "PERF-005"} <= t4 - a800
    assert a800 - t4 == {"PERF-006"}
    assert {f"MET-00{i}" for i in range(1, 9)} <= t4 & a800 and "COMBO-008" in t4 & a800
    assert not any(c.startswith(("STAB", "LEAK", "FAIL", "ISO")) for c in t4 | a800)


def test_every_profile_names_registered_cases_and_the_small_ones_leave_out_what_they_cannot_hold() -> None:
    for p in release.profiles().values():
        assert set(p.cases) <= set(REGISTRY), p.name
    for name in ("one-gpu", "host-one-gpu"):
        assert not {"FUNC-003", "COMBO-008", "PERF-010"} & set(release.profile(name).cases)
    for name in ("host", "host-one-gpu"):
        assert not [c for c in release.profile(name).cases if CAP_KUBERNETES in REGISTRY[c].requires]


def test_the_default_profile_follows_mode_and_gpus() -> None:
    inv = schema.load(SEED)
    assert inv.cluster("c1").release_profile_name == "seed-t4"
    assert inv.cluster("c2").release_profile_name == "seed-a800"
    assert inv.cluster("local").release_profile_name == "host"
    one = schema.parse("clusters:\n  g: {mode: k8s, hosts: {m: {roles: [master]}, n: {roles: [gpu], gpus: 1}}}\n")
    assert one.cluster("g").release_profile_name == "one-gpu"
    bm = schema.parse("clusters:\n  b: {mode: host, gpu: {count: 1}, hosts: {n: {roles: [gpu]}}}\n")
    assert bm.cluster("b").release_profile_name == "host-one-gpu"


def test_the_inventory_names_a_profile_and_an_unknown_one_is_refused() -> None:
    inv = schema.parse("clusters:\n  g: {mode: k8s, release_profile: one-gpu, hosts: {m: {roles: [master]}}}\n")
    assert inv.cluster("g").release_profile_name == "one-gpu"
    with pytest.raises(InventoryError, match=r"clusters\.g\.release_profile: unknown release profile 'gold'"):
        schema.parse("clusters:\n  g: {mode: k8s, release_profile: gold, hosts: {m: {roles: [master]}}}\n")


def test_the_run_records_the_profile_and_whether_the_sut_is_there() -> None:
    local = schema.load(SEED).cluster("local")
    rec = profile_record(local, select(case_ids=["FUNC-001"]))
    assert rec["profile"] == "host" and rec["sut"] is False and "sut_lib" in rec["sut_reason"]
    assert rec["required"] == list(release.profile("host").cases) and rec["source"].startswith("default for host")
    c1 = schema.load(SEED).cluster("c1")
    assert profile_record(c1, select(case_ids=["FUNC-001"]))["sut"] is True


def test_a_playbook_s_required_list_replaces_the_profile(tmp_path: Path) -> None:
    book = tmp_path / "gate.yaml"
    book.write_text("cases: [FUNC-001, FUNC-002]\nrequired: [FUNC-001]\n")
    c1 = schema.load(SEED).cluster("c1")
    rec = profile_record(c1, select(playbook=str(book)), str(book))
    assert rec["required"] == ["FUNC-001"] and rec["source"] == "the playbook's required list"
    assert rec["profile"] == f"playbook:{book}"


def test_the_documents_list_the_shipped_profiles() -> None:
    from tests.lab.matrix import release_profiles_section

    docs = Path(__file__).resolve().parents[3] / "docs"
    assert "\n".join(release_profiles_section()) in (docs / "verdicts.md").read_text(encoding="utf-8")
    page = (docs / "release.md").read_text(encoding="utf-8")
    for p in release.profiles().values():
        assert f"| `{p.name}` |" in page and f"({len(p.cases)}) |" in page, p.name
