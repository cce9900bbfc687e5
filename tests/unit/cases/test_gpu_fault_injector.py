"""FAIL-005..007's injector (xpushare/cases/gpu_fault_injector.py): found before any pod, or SKIP at once.

A fake host backend records every pod it is asked to start and every scheduler snapshot: a case without an injector
asks for neither. The injector's path is checked on the GPU hosts (here this machine, through LocalHost).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.fakes.backend import FakeBackend, FakePlacement, FakeScheduler
from xpushare.cases import REGISTRY
from xpushare.cases.base import COMMON_PARAMS, CaseRun
from xpushare.cases.gpu_fault_injector import PREMISE, find_injector
from xpushare.engine import lifecycle
from xpushare.inventory.schema import ClusterSpec, HostSpec, SchedulerSpec
from xpushare.model.errors import XpushareError
from xpushare.model.gpu_faults import SHIM_ENV, SIM_ENV, deployed_shim
from xpushare.model.verdict import Status
from xpushare.transport.local import LocalHost


def recording() -> FakeBackend:
    """The backend calls FAIL-005..007 make, recorded; anything past the injector check is a failure here."""
    return FakeBackend.having({"scheduler-process", "client-library"},
                              placement=FakePlacement(hosts={"gpu1": LocalHost("gpu1")}))


def snapshots(backend: FakeBackend) -> int:
    scheduler = backend.parts.scheduler
    assert isinstance(scheduler, FakeScheduler)
    return scheduler.snapshots


def asked_hosts(backend: FakeBackend) -> int:
    placement = backend.parts.placement
    assert isinstance(placement, FakePlacement)
    return placement.asked_hosts


def cluster(mode: str = "host", *, state_dir: str | None = None, sut_lib: str | None = "/opt/libxpushare.so"
            ) -> ClusterSpec:
    hosts = (HostSpec("gpu1", ("gpu",), local=True),) if mode == "host" else (
        HostSpec("m", ("master",), local=True), HostSpec("gpu1", ("gpu",), local=True))
    return ClusterSpec("c", mode, "xpushare", "cuda", None, None, hosts, sut_lib=sut_lib,
                       scheduler=SchedulerSpec(state_dir=state_dir))


def act(case_id: str, tmp_path: Path, spec: ClusterSpec, **over: Any) -> tuple[FakeBackend, Any]:
    case = REGISTRY[case_id]
    params = {**COMMON_PARAMS, **case.params, "allow_disruptive": True, **over}
    backend = recording()
    case_dir = tmp_path / case_id
    case_dir.mkdir()
    assert case.act is not None
    case.act(CaseRun(case_id, case_dir, backend, spec, params))
    return backend, lifecycle.judge_case(case, case_dir, params)


@pytest.mark.parametrize("case_id", ["FAIL-005", "FAIL-006", "FAIL-007"])
def test_no_injector_skips_before_any_pod(case_id: str, tmp_path: Path) -> None:
    """A real GPU host without fault_shim and without the shim deploy installs: SKIP naming the premise, and not
    one pod started, not one scheduler snapshot taken (before: the load ran its 100 s and the verdict was ERROR)."""
    backend, verdict = act(case_id, tmp_path, cluster(state_dir=str(tmp_path / "state")))
    assert verdict.status is Status.SKIP and verdict.summary.startswith(PREMISE), verdict.summary
    assert f"no shim installed by invoke deploy at {tmp_path}/state/faultshim/libcuda.so.1 on gpu1" in verdict.summary
    assert backend.started == [] and snapshots(backend) == 0


def test_kubernetes_without_a_simulated_gpu_skips_naming_why(tmp_path: Path) -> None:
    backend, verdict = act("FAIL-005", tmp_path, cluster("k8s", sut_lib=None))
    assert verdict.status is Status.SKIP and verdict.summary.startswith(PREMISE), verdict.summary
    assert "workload image" in verdict.summary and backend.started == [] and asked_hosts(backend) == 0


def test_a_fault_shim_that_is_not_there_skips(tmp_path: Path) -> None:
    backend, verdict = act("FAIL-005", tmp_path, cluster(), fault_shim=str(tmp_path / "nope.so"))
    assert verdict.status is Status.SKIP and "is not a file on gpu1" in verdict.summary, verdict.summary
    assert backend.started == []


def test_the_shim_deploy_installed_is_found(tmp_path: Path) -> None:
    state = tmp_path / "state"
    shim = Path(deployed_shim(str(state)))
    shim.parent.mkdir(parents=True)
    shim.write_bytes(b"[FAULTSHIM]")
    found = find_injector(cluster(state_dir=str(state)), {}, lambda: {"gpu1": LocalHost("gpu1")})
    assert not isinstance(found, str) and found.shim == str(shim) and found.via == "faultshim"
    assert found.source == f"invoke deploy ({shim})"
    env = dict(found.victim_env("/opt/libxpushare.so", "illegal-address:after_s=4"))
    assert env == {"LD_PRELOAD": f"/opt/libxpushare.so {shim}", SHIM_ENV: "illegal-address:after_s=4"}
    # the default state directory is deploy's
    assert deployed_shim(None) == "/var/lib/xpushare/faultshim/libcuda.so.1"


def test_the_simulated_gpu_injects_by_itself(tmp_path: Path) -> None:
    for mode in ("host", "k8s"):
        found = find_injector(cluster(mode), {"fault_injector": "simulated-gpu"}, lambda: pytest.fail("asked"))
        assert not isinstance(found, str) and found.shim is None and found.via == "simulated GPU"
        assert dict(found.victim_env(None, "ecc-uncorrectable:after_s=1")) == {SIM_ENV: "ecc-uncorrectable:after_s=1"}
    with pytest.raises(XpushareError, match="fault_injector: 'magic'"):
        find_injector(cluster(), {"fault_injector": "magic"}, dict)
