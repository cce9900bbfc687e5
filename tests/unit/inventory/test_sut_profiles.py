"""SUT profiles (inventory/sut_profiles): each system's quota variables, its proof, and the inventory's sut values."""

from __future__ import annotations

import pytest

from xpushare.inventory import schema
from xpushare.inventory.sut_profiles import PROFILES, mps_dirs, profile
from xpushare.model.errors import InventoryError

GIB = 1 << 30


def test_every_system_sets_its_own_memory_quota_variable() -> None:
    assert profile("xpushare").memory_env(GIB) == {"XPUSHARE_GPU_MEMORY_LIMIT": "1024Mi"}
    assert profile("nvshare").memory_env(GIB) == {"NVSHARE_GPU_MEMORY_LIMIT": "1024Mi"}
    # HAMi-core's get_limit_from_env: a number with k/m/g; MPS: <ordinal>=<limit> with K/M/G
    assert profile("hami-core").memory_env(GIB) == {"CUDA_DEVICE_MEMORY_LIMIT": "1024m"}
    assert profile("mps").memory_env(GIB) == {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=1024M"}
    assert profile("hami-core").memory_env(GIB + 1) == {"CUDA_DEVICE_MEMORY_LIMIT": str(GIB + 1)}
    assert profile("mps").memory_env(GIB + 1) == {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={GIB + 1}"}


def test_core_quota_variables_and_the_system_without_one() -> None:
    assert profile("hami-core").core_env(25) == {"CUDA_DEVICE_SM_LIMIT": "25"}
    assert profile("mps").core_env(50) == {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50"}
    assert profile("hami-core").host_core_quota is None and profile("mps").host_core_quota is None
    assert "annotation" in str(profile("xpushare").host_core_quota)
    with pytest.raises(ValueError, match="sets no core quota"):
        profile("xpushare").core_env(50)


def test_oversubscription_switch_per_system() -> None:
    assert profile("xpushare").oversub_env == {"XPUSHARE_ENABLE_SINGLE_OVERSUB": "1"}
    assert profile("hami-core").oversub_env == {"CUDA_OVERSUBSCRIBE": "true"}
    assert profile("mps").oversub_env is None
    assert profile("mps").no_oversubscription == "sut mps has no switch to oversubscribe GPU memory"
    assert profile("hami-core").no_oversubscription is None


def test_client_env_preload_and_proof_per_system() -> None:
    assert profile("xpushare").client_env(None, "w") == {"XPUSHARE_DEBUG": "1"}
    assert profile("hami-core").client_env(None, "w") == {"LIBCUDA_LOG_LEVEL": "2",
                                                         "CUDA_DEVICE_MEMORY_SHARED_CACHE": "w.cudevshr.cache"}
    assert profile("mps").client_env("/srv/mps", "w") == {"CUDA_MPS_PIPE_DIRECTORY": "/srv/mps/pipe",
                                                      "CUDA_MPS_LOG_DIRECTORY": "/srv/mps/log"}
    assert mps_dirs(None) == ("/tmp/xpushare-mps/pipe", "/tmp/xpushare-mps/log")
    assert [p.needs_preload for p in PROFILES.values()] == [True, True, True, False]
    assert "Initializing" in profile("hami-core").proof and "New client" in profile("mps").proof
    assert {p.proof_premise for p in PROFILES.values()} == {"sut"}
    with pytest.raises(ValueError, match="known: nvshare, xpushare, hami-core, mps"):
        profile("gpushare")


def _inventory(mode: str, sut: str) -> str:
    master = "      m: {address: 127.0.0.1, roles: [master, gpu]}\n"
    return f"clusters:\n  c1:\n    mode: {mode}\n    sut: {sut}\n    hosts:\n{master}"


@pytest.mark.parametrize("sut", ["hami-core", "mps"])
def test_the_inventory_takes_hami_core_and_mps_in_host_mode_only(sut: str) -> None:
    c = schema.parse(_inventory("host", sut), source="inv.yaml").cluster("c1")
    assert c.sut == sut and c.profile.name == sut and c.generation == "xpushare"
    with pytest.raises(InventoryError) as info:
        schema.parse(_inventory("k8s", sut), source="inv.yaml")
    message = str(info.value)
    assert "\n" not in message and f"sut {sut} in mode k8s" in message and "use mode: host" in message


def test_the_project_sut_keeps_its_generation() -> None:
    c = schema.parse(_inventory("k8s", "nvshare"), source="inv.yaml").cluster("c1")
    assert c.generation == "nvshare" and c.profile.core_quota_var is None
