"""``invoke lab.up`` gives the cluster ``lab`` exactly the lab tests' parameter set (tests/lab/env.py
``lab_params``), so that a suite task on ``--cluster lab`` gives the verdicts CI gives (docs/verdicts.md).

The labs' processes are replaced by stand-ins that record what ``up`` asked of them: what is checked here is the
inventory ``up`` writes, not the labs (tests/test_lab_*.py and the end-to-end tests run those)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
import yaml

from tests.lab import env
from tests.paths import REPO_ROOT
from tests.toolrun import run_tool
from xpushare.inventory import schema


class FakeSsh:
    def __init__(self, workdir: Path, detached: bool = False) -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.hosts: dict[str, Any] = {}

    def add_host(self, name: str, address: str) -> None:
        self.hosts[name] = SimpleNamespace(address=address, port=2222, user="lab", identity=self.workdir / "id")

    def host(self, name: str) -> Any:
        return self.hosts[name]

    def write_known_hosts(self) -> None:
        pass

    def write_ssh_config(self) -> None:
        pass

    def to_json(self) -> dict[str, Any]:
        return {}


class FakeKube:
    started: ClassVar[list[dict[str, Any]]] = []

    def __init__(self, workdir: Path, **options: Any) -> None:
        self.options = options
        self.kubeconfig_path = workdir / "kubeconfig"
        self.simgpu_dir = workdir / "simgpu"
        self.gpu_memory_bytes = options["gpu_memory_bytes"]
        self.real_gpus = False

    def simgpu_config(self, node: str) -> str:
        return f"{self.simgpu_dir}/{node}.json"

    def kmsg(self, node: str) -> str:
        return f"{self.simgpu_dir}/{node}.kmsg"

    def start(self) -> None:
        FakeKube.started.append(self.options)


@pytest.fixture
def fake_labs(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeKube.started = []
    monkeypatch.setattr(env, "SshLab", FakeSsh)
    monkeypatch.setattr(env, "LabCluster", FakeKube)
    monkeypatch.setattr(env, "reserve_address_block", lambda: (7, None))
    monkeypatch.setattr(env, "source_tree", lambda source=None: Path(source or "/sut/src"))


def test_lab_up_writes_exactly_the_lab_tests_parameter_set(fake_labs: None, tmp_path: Path) -> None:
    path = env.up(tmp_path / ".lab")
    data = yaml.safe_load(path.read_text())
    kube = FakeKube(tmp_path / ".lab" / "kube", **env.LAB_OPTIONS)
    assert data["clusters"]["lab"]["params"] == yaml.safe_load(yaml.safe_dump(env.lab_params(kube)))
    assert FakeKube.started and FakeKube.started[0]["window_ms"] == env.LAB_OPTIONS["window_ms"]
    assert FakeKube.started[0]["gpu_memory_bytes"] == env.LAB_GPU_MEMORY_BYTES
    # the sizes the issue's newcomer run lacked: COMBO-001's limit under the workload, PERF's baseline floor
    params = schema.parse(path.read_text()).cluster("lab").params
    assert params["combo001_memory_limit"] == "32Mi" and params["perf_baseline_min_s"] == 5
    assert params["perf003_workload"] == "w6_fixed_add"


def test_lab_inventory_overrides_only_what_a_test_names(fake_labs: None, tmp_path: Path) -> None:
    ssh, kube = FakeSsh(tmp_path), FakeKube(tmp_path, **env.LAB_OPTIONS)
    for name, address, _role in env.LAB_HOSTS:
        ssh.add_host(name, address)
    base = env.lab_inventory(ssh, kube)["clusters"]["lab"]["params"]  # type: ignore[arg-type]
    assert base == env.lab_params(kube)  # type: ignore[arg-type]
    sized = env.lab_inventory(ssh, kube, params={"pod_timeout_s": 1})["clusters"]["lab"]["params"]  # type: ignore[arg-type]
    assert sized == {**base, "pod_timeout_s": 1}


def test_lab_up_without_a_source_tree_starts_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from tests.lab.sut import SourceMissing

    def no_ssh(*_: Any, **__: Any) -> None:
        raise AssertionError("an sshd lab was started without a SUT source tree")

    monkeypatch.setattr(env, "SshLab", no_ssh)
    with pytest.raises(SourceMissing):
        env.up(tmp_path / ".lab", sut_src=str(tmp_path / "no-such-tree"))


def test_a_failed_lab_start_stops_what_it_started(fake_labs: None, monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    stopped: list[Path] = []

    def failing_start(self: FakeKube) -> None:
        raise RuntimeError("make failed")

    monkeypatch.setattr(FakeKube, "start", failing_start)
    monkeypatch.setattr(env, "down", stopped.append)
    with pytest.raises(RuntimeError, match="make failed"):
        env.up(tmp_path / ".lab")
    assert stopped == [tmp_path / ".lab"]


def test_lab_up_cli_says_how_to_pass_the_source_in_one_line(tmp_path: Path) -> None:
    import sys

    root = REPO_ROOT
    proc = run_tool([sys.executable, "-m", "invoke", "lab.up", "--sut-src", str(tmp_path / "none")], cwd=root,
                    timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "--sut-src DIR" in proc.stderr and str(tmp_path / "none") in proc.stderr
