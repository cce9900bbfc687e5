"""Parameters a careless user gives (``--set``, an inventory's ``params``): a value of the wrong type, NaN, infinite
or a negative quantity, and a misspelt name, are one error line before anything runs."""

from __future__ import annotations

import pytest

from xpushare.cases import REGISTRY
from xpushare.engine.cluster_params import check_cluster_params
from xpushare.engine.plan import check_overrides
from xpushare.inventory import schema
from xpushare.model.errors import InventoryError, UsageError

FUNC = [REGISTRY["FUNC-001"], REGISTRY["FUNC-002"]]


@pytest.mark.parametrize("override", [
    {"pod_timeout_s": -5}, {"pod_timeout_s": float("nan")}, {"pod_timeout_s": float("inf")},
    {"func002_min_overlap_ratio": -3}, {"func002_min_overlap_ratio": float("nan")},
    {"func002_min_overlap_ratio": 1e308}, {"pod_timeout_s": "abc"},
])
def test_a_bad_set_value_is_refused(override: dict[str, object]) -> None:
    with pytest.raises(UsageError, match="expected"):
        check_overrides(FUNC, override)


def test_good_set_values_pass() -> None:
    check_overrides(FUNC, {"pod_timeout_s": 0.5, "func002_min_overlap_ratio": 0.9})


def cluster(params: str) -> schema.ClusterSpec:
    text = ("clusters:\n  c9:\n    mode: host\n    hosts:\n      c9-gpu1: {address: 127.0.0.1, roles: [gpu, master]}\n"
            f"    params: {params}\n")
    return schema.parse(text).cluster("c9")


@pytest.mark.parametrize(("params", "word"), [
    ("{pod_timeout_s: abc}", "bad value 'abc'"),
    ("{pod_timout_s: 60}", "unknown parameter"),
    ("{func002_min_overlap_ratio: -3}", "bad value -3"),
    ("{pod_timeout_s: .inf}", "bad value inf"),
    ("{workload_args: 5}", "bad value 5"),
    ("{pod_image: [a]}", "bad value"),
])
def test_inventory_params_are_checked_like_set(params: str, word: str) -> None:
    with pytest.raises(InventoryError, match="params") as info:
        check_cluster_params(cluster(params))
    assert word in str(info.value) and "c9" in str(info.value)


def test_good_inventory_params_pass() -> None:
    check_cluster_params(cluster("{pod_timeout_s: 120, pod_image: img, lease_stale_s: 30, envcheck_cublas_n: 1024, "
                                 "probe_image: busybox, kubectl_read_retries: 2}"))


def test_a_failing_value_is_never_printed_rounded_onto_its_threshold() -> None:
    from xpushare.judge.thresholds import shown

    assert shown(0.9995, 0.99999) == "0.9995"
    assert shown(0.42, 0.5) == "0.42" and shown(1.49999, 1.5, digits=4) == "1.49999"
