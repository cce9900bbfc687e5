"""Host mode sets each system's environment on a workload (backends/host.pod_env with the cluster's SUT profile)."""

from __future__ import annotations

import dataclasses

from xpushare.backends.base import CAP_CLIENT_LIBRARY
from xpushare.backends.host import HostBackend, host_capabilities
from xpushare.inventory.schema import SchedulerSpec, local_cluster
from xpushare.model.workload import WorkloadSpec


def _backend(sut: str, sut_lib: str | None = "/opt/lib/x.so", state_dir: str | None = None) -> HostBackend:
    cluster = dataclasses.replace(local_cluster(), sut=sut, sut_lib=sut_lib,
                                  scheduler=SchedulerSpec(state_dir=state_dir))
    return HostBackend(cluster, poll_s=0.01)


def test_xpushare_keeps_its_variables_and_preload() -> None:
    env = _backend("xpushare").pod_env(WorkloadSpec("p", "mem_probe", memory_limit_env="1Gi"), "w0", 0)
    assert env["XPUSHARE_GPU_MEMORY_LIMIT"] == "1Gi" and env["LD_PRELOAD"] == "/opt/lib/x.so"
    assert env["XPUSHARE_DEBUG"] == "1" and env["CUDA_VISIBLE_DEVICES"] == "0"


def test_hami_core_gets_its_library_its_log_level_and_the_quota_the_case_gives() -> None:
    spec = WorkloadSpec("p", "mem_probe", env=(("CUDA_DEVICE_MEMORY_LIMIT", "1024m"),))
    backend = _backend("hami-core", "/opt/hami/libvgpu.so")
    env = backend.pod_env(spec, "xp2-r1-FUNC-1-p", 1)
    assert env["LD_PRELOAD"] == "/opt/hami/libvgpu.so" and env["CUDA_DEVICE_MEMORY_LIMIT"] == "1024m"
    assert env["LIBCUDA_LOG_LEVEL"] == "2" and "XPUSHARE_DEBUG" not in env and env["CUDA_VISIBLE_DEVICES"] == "1"
    # a shared region per workload: limits a region keeps never cross from one case (or pod) to the next
    assert env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] == "xp2-r1-FUNC-1-p.cudevshr.cache"
    assert backend.pod_env(spec, "other", 1)["CUDA_DEVICE_MEMORY_SHARED_CACHE"] == "other.cudevshr.cache"


def test_mps_preloads_nothing_and_points_at_its_daemon() -> None:
    spec = WorkloadSpec("p", "mem_probe", env=(("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=1024M"),))
    env = _backend("mps", sut_lib="/opt/lib/x.so", state_dir="/srv/mps").pod_env(spec, "w0", 0)
    assert "LD_PRELOAD" not in env and "XPUSHARE_DEBUG" not in env and "CUDA_DEVICE_MEMORY_SHARED_CACHE" not in env
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == "/srv/mps/pipe" and env["CUDA_MPS_LOG_DIRECTORY"] == "/srv/mps/log"
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=1024M"


def test_mps_is_in_the_path_without_a_library() -> None:
    mps = dataclasses.replace(local_cluster(), sut="mps")
    assert CAP_CLIENT_LIBRARY in host_capabilities(mps)
    for sut in ("xpushare", "hami-core"):
        assert CAP_CLIENT_LIBRARY not in host_capabilities(dataclasses.replace(local_cluster(), sut=sut))


def test_oversubscription_is_each_systems_own_switch() -> None:
    spec = WorkloadSpec("p", "oversub", oversub=True)
    assert _backend("xpushare").pod_env(spec, "w0", 0)["XPUSHARE_ENABLE_SINGLE_OVERSUB"] == "1"
    hami = _backend("hami-core", "/opt/hami/libvgpu.so").pod_env(spec, "w0", 0)
    assert hami["CUDA_OVERSUBSCRIBE"] == "true" and "XPUSHARE_ENABLE_SINGLE_OVERSUB" not in hami
    off = _backend("hami-core", "/opt/hami/libvgpu.so").pod_env(WorkloadSpec("p", "oversub"), "w0", 0)
    assert "CUDA_OVERSUBSCRIBE" not in off  # off means absent, as the case asks
