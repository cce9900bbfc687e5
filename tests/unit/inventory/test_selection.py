"""Selection as users type it: ``--case`` globs and comma lists, ``--limit`` node sets (ClusterShell syntax)."""

from __future__ import annotations

from pathlib import Path

import pytest

from xpushare.engine import plan
from xpushare.inventory import schema
from xpushare.inventory.selection import expand, fold, select_hosts
from xpushare.model.errors import UsageError

INVENTORY = """
clusters:
  c1:
    mode: k8s
    hosts:
      m: {roles: [master]}
      rack[1:2]-gpu[1-2]: {roles: [gpu]}
      n[1-3,5]: {roles: [gpu]}
"""


def names(limit: str, role: str = "all") -> list[str]:
    return [h.name for h in select_hosts(schema.parse(INVENTORY).cluster("c1"), role=role, limit=limit)]


def test_case_globs_and_comma_lists_in_matrix_order() -> None:
    ids = [c.case_id for c in plan.select(case_ids=["FUNC-00*"]).cases]
    assert ids == [f"FUNC-00{i}" for i in range(1, 10)]
    assert [c.case_id for c in plan.select(case_ids=["perf-001,FUNC-002"]).cases] == ["FUNC-002", "PERF-001"]
    mixed = [c.case_id for c in plan.select(case_ids=["FUNC-*,PERF-001"]).cases]
    assert mixed[-1] == "PERF-001" and all(c.startswith("FUNC-") for c in mixed[:-1]) and len(mixed) > 10


@pytest.mark.parametrize(("given", "message"), [
    ("NOPE-*", "--case NOPE-*: matches no case"),
    ("FUNC-001,,FUNC-002", "empty item"),
    ("FUNC-999", "unknown case id(s): FUNC-999"),
])
def test_a_case_pattern_that_matches_nothing_is_named(given: str, message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("*", r"\*").replace("(", r"\(").replace(")", r"\)")):
        plan.select(case_ids=[given])


def test_inventory_keys_take_multi_ranges() -> None:
    assert names("rack*") == ["rack1-gpu1", "rack1-gpu2", "rack2-gpu1", "rack2-gpu2"]
    assert names("n*") == ["n1", "n2", "n3", "n5"]


@pytest.mark.parametrize(("limit", "want"), [
    ("n[1-3,5]", ["n1", "n2", "n3", "n5"]),
    ("rack[1-2]-gpu2", ["rack1-gpu2", "rack2-gpu2"]),
    ("n[1-5]&n[3-9]", None),  # n4, n6.. are no hosts: refused below
    ("n*&n[3-9]", ["n3", "n5"]),
    ("n*!n[2-3]", ["n1", "n5"]),
    ("n*,!n3", ["n1", "n2", "n5"]),
    ("!n*", ["m", "rack1-gpu1", "rack1-gpu2", "rack2-gpu1", "rack2-gpu2"]),
    ("m,n1", ["m", "n1"]),
])
def test_limit_node_sets(limit: str, want: list[str] | None) -> None:
    if want is None:
        with pytest.raises(UsageError, match="no such host in cluster 'c1': n4"):
            names(limit)
        return
    assert names(limit) == want


def test_limit_from_a_file(tmp_path: Path) -> None:
    f = tmp_path / "hosts.txt"
    f.write_text("# the first rack\nrack1-gpu[1-2]\nn5  # and one more\n\n")
    assert names(f"@{f}") == ["rack1-gpu1", "rack1-gpu2", "n5"]
    assert names(f"@{f}!rack1-gpu2") == ["rack1-gpu1", "n5"]
    with pytest.raises(UsageError, match="no host of cluster"):
        names(f"@{f}", role="master")


@pytest.mark.parametrize(("limit", "message"), [
    ("n[1-", "bad host pattern"),
    ("n[3-1]", "bad host pattern"),
    ("n1,,n2", "operator ','"),
    ("n1&", "ends with an operator"),
    ("[1-2]n", "bad host pattern"),
    ("@/nonexistent/hosts.txt", "cannot read the host file"),
    ("n9", "no such host"),
])
def test_bad_limits_are_usage_errors(limit: str, message: str) -> None:
    with pytest.raises(UsageError, match=message) as exc:
        names(limit)
    assert "\n" not in str(exc.value)


def test_folded_names_paste_back_into_limit() -> None:
    every = ["m", "n1", "n2", "n3", "n5", "rack1-gpu1", "rack1-gpu2", "rack2-gpu1", "rack2-gpu2"]
    for chosen in (every, ["n1", "n2", "n5"], ["rack1-gpu2", "rack2-gpu2", "m"], ["n3"]):
        folded = fold(chosen)
        assert expand(folded, every) == set(chosen), folded
    assert fold(["node01", "node02", "node03"]) == "node[01-03]"
    assert fold(["rack1-gpu1", "rack1-gpu2", "rack2-gpu1", "rack2-gpu2"]) == "rack[1-2]-gpu[1-2]"


def test_hosts_prints_each_cluster_folded_per_role() -> None:
    from xpushare import adhoc

    line = adhoc.hosts_folded([schema.parse(INVENTORY).cluster("c1")])
    assert line == "c1: all=m,n[1-3,5],rack[1-2]-gpu[1-2] master=m gpu=n[1-3,5],rack[1-2]-gpu[1-2]"
    assert names(line.split("gpu=")[1]) == names("n*,rack*")
