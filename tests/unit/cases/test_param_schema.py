"""One schema per parameter (xpushare/cases/param_schema.py) serves ``--set``, a playbook's ``params``, the
inventory's ``params`` (also shown by ``invoke hosts``) and ``invoke judge --set``: each value below was accepted
silently by at least one of them before the schema (a ratio of 5 can never be reached, a timeout of 0 ends every
wait at once, a count of 1e11 never ends, a memory quota ``abc`` made the case ERROR halfway through its run)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from tests.inprocess import run_xpushare
from xpushare.cases import REGISTRY
from xpushare.cases.param_schema import ParamSpec
from xpushare.engine import stored_run
from xpushare.engine.cluster_params import check_cluster_params
from xpushare.engine.plan import check_overrides, check_vacuous, parameter_defaults
from xpushare.inventory import schema
from xpushare.model.errors import InventoryError, UsageError
from xpushare.report import run_store

BAD = [
    ("func002_min_overlap_ratio", 5, "fraction"),
    ("pod_timeout_s", 0, "more than 0"),
    ("perf001_repeats", 100_000_000_000, "at most"),
    ("func006_memory_limit", "abc", "memory quantity"),
    ("func006_memory_limit", "4G", "memory quantity"),
    ("func006_memory_limit", "0Mi", "0 bytes"),
    ("func008_quotas", [0, 150], "core"),
    ("combo003_quotas", [{"core": 40, "memory": "lots"}], "memory quantity"),
    ("combo003_quotas", [{"core": 140, "memory": "4Gi"}], "core"),
    ("perf002_mode", "bogus", "not one of"),
    ("fail005_kind", "nope", "not one of"),
    ("trend_samples", "some", "not one of"),
    ("met_poll_s", 0, "more than 0"),
]
GOOD = [("func002_min_overlap_ratio", 0.8), ("pod_timeout_s", 60), ("func006_memory_limit", "512Mi"),
        ("func008_quotas", [10, 100]), ("combo003_quotas", [{"core": 40, "memory": "256Mi"}]),
        ("perf002_mode", "exporter"), ("func003_pods", None), ("legacy_util_tolerance", 15)]
CLUSTER_BAD = [("metrics_port", 0, "port"), ("metrics_port", 99_999_999, "port"),
               ("kubectl_read_retries", -3, "0..100"),
               ("poll_s", 0, "more than 0"), ("lease_renew_s", "abc", "expected a number"),
               ("lease_stale_s", -1, "0..1e+09"), ("probe_image", [1, 2], "text"),
               ("metrics_check_settle_s", float("nan"), "finite"), ("lease_bogus", 1, "unknown parameter")]


def _spec(name: str) -> ParamSpec:
    defaults = parameter_defaults(list(REGISTRY.values()))
    defaults.setdefault("legacy_util_tolerance", [15])
    return ParamSpec(name, tuple(defaults[name]))


@pytest.mark.parametrize(("name", "value", "words"), BAD)
def test_a_value_breaking_its_parameters_rule_is_refused_by_set_and_playbooks(name: str, value: object,
                                                                               words: str) -> None:
    problem = _spec(name).problem(value)
    assert problem and words in problem
    with pytest.raises(UsageError, match=f"bad --set {name}="):
        check_overrides(list(REGISTRY.values()), {name: value})
    with pytest.raises(UsageError, match=f"playbook x: params: bad {name}="):
        check_vacuous({name: value}, "playbook x: params")


@pytest.mark.parametrize(("name", "value"), GOOD)
def test_values_within_the_rules_pass(name: str, value: object) -> None:
    assert _spec(name).problem(value) is None


def test_a_playbook_value_of_the_wrong_type_is_refused_not_only_a_vacuous_one() -> None:
    with pytest.raises(UsageError, match="pod_timeout_s"):
        check_vacuous({"pod_timeout_s": "abc"}, "playbook x: params")


def _cluster(params: dict[str, object]) -> schema.ClusterSpec:
    inv = schema.parse("clusters:\n  c1:\n    mode: host\n    hosts:\n      h1: {connection: local, roles: [gpu]}\n")
    return schema.ClusterSpec(**{**inv.cluster("c1").__dict__, "params": params})


@pytest.mark.parametrize(("name", "value", "words"), [(n, v, w) for n, v, w in BAD] + CLUSTER_BAD)
def test_the_inventorys_params_keep_the_same_rules(name: str, value: object, words: str) -> None:
    with pytest.raises(InventoryError, match=f"params.{name}") as info:
        check_cluster_params(_cluster({name: value}))
    assert words in str(info.value)


def test_shipped_inventories_and_cluster_settings_pass() -> None:
    check_cluster_params(_cluster({"metrics_port": 9402, "lease_renew_s": 5, "lease_stale_s": 30, "probe_image": "x",
                                   "envcheck_cublas_n": 1024, "legacy_images": {}, "kubectl_read_retries": 0}))


def _invoke(*words: str, cwd: Path) -> tuple[int, str]:
    ran = run_xpushare(words, cwd=cwd)
    return ran.code, ran.err


def test_invoke_hosts_refuses_an_inventory_a_run_would_refuse(tmp_path: Path) -> None:
    inv = tmp_path / "inv.yaml"
    inv.write_text("clusters:\n  c1:\n    mode: host\n    hosts:\n      h1: {connection: local, roles: [gpu]}\n"
                   "    params: {metrics_port: 99999999}\n")
    code, err = _invoke("hosts", "-i", str(inv), cwd=tmp_path)
    assert code == 2 and err.startswith("error: inventory cluster 'c1': params.metrics_port"), err


def test_invoke_judge_set_keeps_the_same_rules(tmp_path: Path) -> None:
    run_dir = run_store.run_dir(tmp_path, "r1")
    case = run_dir / "local" / "functional" / "FUNC-002"
    case.mkdir(parents=True)
    (case / "result.json").write_text('{"case_id": "FUNC-002", "cluster": "local", "suite": "functional", '
                                      '"status": "PASS", "summary": "ok", "mode": "host"}')
    with pytest.raises(UsageError, match="fraction"):
        stored_run.rejudge("r1", ["func002_min_overlap_ratio=5"], root=tmp_path, out=io.StringIO())
    code, err = _invoke("judge", "r1", "--set", "func002_min_overlap_ratio=5", "--root", str(tmp_path), cwd=tmp_path)
    assert code == 2 and err.count("\n") == 1 and "fraction" in err, err
