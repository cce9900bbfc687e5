"""The parameters of the features above the cases (``envcheck_*``, ``deploy_*``, ``legacy_*``) keep the one schema
at the edge, like every other parameter: a wrong type, a count below its least, a memory limit that is no quantity
or a name their owner does not have is one ``error:`` line naming the parameter, exit 2, from ``--set``, the
inventory's ``params`` (also ``invoke hosts``) and a playbook's ``params``.

Before, the schema left these names to their owners: the inventory's ``envcheck_cublas_iters: -1``, ``legacy_pods:
abc`` or ``deploy_virtual_devices: -1`` were accepted by every task (``invoke hosts``, a run), a misspelt
``deploy_mak`` or ``legacy_pod`` was ignored, ``invoke deploy --set deploy_virtual_devices=-1`` and ``invoke
envcheck --set envcheck_cublas_iters=-1`` ran with them, and a legacy task's ``--set deploy_tga=x`` was dropped."""

from __future__ import annotations

from pathlib import Path

import pytest

import xpushare.cli.collection  # noqa: F401  (the command line: every owner of parameters imported)
from tests.inprocess import run_xpushare
from xpushare.deploy import k8s_pipeline
from xpushare.engine.cluster_params import check_cluster_params
from xpushare.engine.plan import check_vacuous
from xpushare.envcheck.params import resolve_params
from xpushare.inventory import schema
from xpushare.inventory.schema import ClusterSpec, HostSpec
from xpushare.legacy.run import LegacyRequest, scenario_params
from xpushare.legacy.scenarios import SCENARIOS
from xpushare.model import param_owners
from xpushare.model.errors import InventoryError, UsageError

BAD = [
    ("envcheck_cublas_iters", -1, "at least 1"),
    ("envcheck_cublas_iters", "abc", "whole number"),
    ("envcheck_nccl_warmup", -5, "at least 0"),
    ("envcheck_cublas_min_pct", 150, "0..100"),
    ("envcheck_step_timeout_s", 0, "more than 0"),
    ("envcheck_freeze_source", "conda", "not one of"),
    ("envcheck_cublas", "maybe", "true or false"),
    ("envcheck_cublas_itres", 5, "unknown parameter"),
    ("deploy_virtual_devices", -1, "at least 1"),
    ("deploy_plugin_gpus", "two", "whole number"),
    ("deploy_make_timeout_s", -3, "0..1e+09"),
    ("deploy_make", "", "empty command"),
    ("deploy_excludes", ".git", "list"),
    ("deploy_images", {"scheduler": 5}, "image names"),
    ("deploy_mak", "make", "unknown parameter"),
    ("legacy_pods", -1, "at least 1"),
    ("legacy_pods", "abc", "whole number"),
    ("legacy_core_limit", 500, "whole percent"),
    ("legacy_monitor_s", float("nan"), "finite"),
    ("legacy_memlimit_low", "lots", "memory limit"),
    ("legacy_dynamic_limits", ["2Gi", "0Mi"], "above 0"),
    ("legacy_entrypoint", "sometimes", "true or false"),
    ("legacy_pod", 3, "unknown parameter"),
]
GOOD = {"envcheck_cublas_n": 1024, "envcheck_nominal_bf16_tflops": None, "envcheck_ignore_keys": "kernel",
        "envcheck_master_port": 29500, "deploy_make": "make build-base all", "deploy_tag": None,
        "deploy_plugin_gpus": 0, "legacy_pods": 4, "legacy_images": {}, "legacy_memlimit_low": "512Mi",
        "legacy_util_tolerance": 15}


def _cluster(params: dict[str, object], mode: str = "host") -> ClusterSpec:
    hosts = (HostSpec("h1", ("gpu",), local=True),) if mode == "host" else (
        HostSpec("m", ("master",), address="127.0.0.9"),)
    return ClusterSpec(name="c1", mode=mode, sut="xpushare", backend="cuda", gpu_model=None, gpu_memory_gib=None,
                       hosts=hosts, params=params)


def test_every_owner_declares_its_parameters_on_the_command_line() -> None:
    for prefix in param_owners.OWNED_PREFIXES:
        owner = param_owners.owner_of(prefix + "x")
        assert owner is not None and owner.defaults and all(n.startswith(prefix) for n in owner.defaults), prefix


@pytest.mark.parametrize(("name", "value", "words"), BAD)
def test_the_inventorys_owned_params_keep_the_schema(name: str, value: object, words: str) -> None:
    with pytest.raises(InventoryError, match=f"params.{name}") as info:
        check_cluster_params(_cluster({name: value}))
    assert words in str(info.value)


@pytest.mark.parametrize(("name", "value", "words"), BAD)
def test_a_playbooks_owned_params_keep_the_schema(name: str, value: object, words: str) -> None:
    with pytest.raises(UsageError, match=f"playbook x: params: .*{name}") as info:
        check_vacuous({name: value}, "playbook x: params")
    assert words in str(info.value)


def test_good_owned_values_pass_everywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XPUSHARE_SSH_USER", "ops")  # the bare-metal example names its login by the environment
    check_cluster_params(_cluster(GOOD))
    check_vacuous(GOOD, "playbook x: params")
    for path in sorted((Path(schema.__file__).parents[2] / "inventory").glob("*.yaml")):
        for cluster in schema.load(path).clusters.values():
            check_cluster_params(cluster)


@pytest.mark.parametrize(("name", "value", "words"), [b for b in BAD if b[0].startswith("envcheck_")])
def test_envcheck_set_keeps_the_same_rules(name: str, value: object, words: str) -> None:
    with pytest.raises(UsageError, match=name):
        resolve_params({}, {name: value})


@pytest.mark.parametrize("item", ["deploy_virtual_devices=-1", "deploy_make_timeout_s=-3", "deploy_make=''",
                                  "deploy_images={scheduler: 5}"])
def test_deploy_set_keeps_the_same_rules(item: str) -> None:
    with pytest.raises(UsageError, match=f"bad --set {item.partition('=')[0]}="):
        k8s_pipeline.deploy_params(_cluster({}, "k8s"), [item], lenient=False)


def test_a_legacy_tasks_set_refuses_an_unknown_deploy_name_it_used_to_drop() -> None:
    with pytest.raises(UsageError, match="deploy_tga"):
        k8s_pipeline.deploy_params(_cluster({}, "k8s"), ["deploy_tga=abc", "legacy_step_s=3"], lenient=True)
    assert k8s_pipeline.deploy_params(_cluster({}, "k8s"), ["legacy_step_s=3"], lenient=True)["deploy_tag"] is None


def test_a_legacy_scenarios_set_keeps_its_own_rules() -> None:
    request = LegacyRequest(scenario="memlimit", cluster="c1", overrides=["legacy_memlimit_low=lots"])
    with pytest.raises(UsageError, match="bad --set legacy_memlimit_low='lots'"):
        scenario_params(SCENARIOS["memlimit"], _cluster({}, "k8s"), request)


@pytest.mark.parametrize(("name", "value"), [("envcheck_cublas_iters", "-1"), ("legacy_pods", "abc"),
                                             ("deploy_virtual_devices", "-1"), ("deploy_mak", "x")])
def test_invoke_hosts_refuses_a_bad_owned_param_in_one_line(tmp_path: Path, name: str, value: str) -> None:
    inv = tmp_path / "inv.yaml"
    inv.write_text("clusters:\n  c1:\n    mode: host\n    hosts:\n      h1: {connection: local, roles: [gpu]}\n"
                   f"    params: {{{name}: {value}}}\n")
    ran = run_xpushare(["hosts", "-i", str(inv)], cwd=tmp_path)
    assert ran.code == 2, ran
    assert ran.err.count("\n") == 1 and ran.err.startswith(f"error: inventory cluster 'c1': params.{name}"), ran.err
    assert "Traceback" not in ran.err
