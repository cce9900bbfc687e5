"""A memory quota set through the workload's environment, per system (cases/base.CaseRun.env_memory_quota): FUNC-006/007
and their probe under HAMi-core or MPS set that system's own variable, never the project's SUT's, which they ignore
(a quota that was never set would FAIL the system for a limit it was not given)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.fakes.backend import FakeBackend
from xpushare.cases import REGISTRY
from xpushare.cases.base import CaseRun
from xpushare.inventory.schema import ClusterSpec, HostSpec


def cluster(sut: str, mode: str = "host") -> ClusterSpec:
    return dataclasses.replace(
        ClusterSpec("c", mode, "xpushare", "cuda", "NVIDIA H200", None, (HostSpec("h", ("gpu",), local=True),),
                    sut_lib="/opt/lib.so"), sut=sut)


@pytest.mark.parametrize(("sut", "expected"), [
    ("xpushare", {"memory_limit_env": "1Gi"}),
    ("nvshare", {"memory_limit_env": "1Gi"}),
    ("hami-core", {"env": (("CUDA_DEVICE_MEMORY_LIMIT", "1024m"),)}),
    ("mps", {"env": (("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "0=1024M"),)}),
])
def test_each_system_gets_its_own_variable(sut: str, expected: dict, tmp_path: Path) -> None:
    run = CaseRun("FUNC-006", tmp_path, FakeBackend(), cluster(sut), {})
    assert run.env_memory_quota("1Gi") == expected


@pytest.mark.parametrize("case_id", ["FUNC-006", "FUNC-007"])
def test_func006_and_007_and_their_probe_carry_hami_cores_quota(case_id: str, tmp_path: Path) -> None:
    backend = FakeBackend()  # every pod ends at once
    params = {**REGISTRY[case_id].params, "pod_timeout_s": 1, "workload_args": {},
              "func006_memory_limit": "1Gi", "func007_memory_limit": "2Gi"}
    act = REGISTRY[case_id].act
    assert act is not None
    act(CaseRun(case_id, tmp_path, backend, cluster("hami-core"), params))
    quota = {"FUNC-006": "1024m", "FUNC-007": "2048m"}[case_id]
    assert [dict(p.env) for p in backend.started] == [{"CUDA_DEVICE_MEMORY_LIMIT": quota}] * 2
    assert all(p.memory_limit_env is None for p in backend.started)


def test_kubernetes_keeps_the_sut_variable(tmp_path: Path) -> None:
    run = CaseRun("FUNC-006", tmp_path, FakeBackend(), cluster("xpushare", "k8s"), {})
    assert run.env_memory_quota("512Mi") == {"memory_limit_env": "512Mi"}


def test_iso_memory_cases_take_the_same_variable(tmp_path: Path) -> None:
    backend = FakeBackend()  # every pod ends at once
    case = REGISTRY["ISO-001"]
    params = {**case.params, "pod_timeout_s": 1, "workload_args": {}, "iso_memory_limit": "1Gi"}
    assert case.act is not None
    case.act(CaseRun("ISO-001", tmp_path, backend, cluster("mps"), params))
    assert [dict(p.env) for p in backend.started] == [{"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=1024M"}]
