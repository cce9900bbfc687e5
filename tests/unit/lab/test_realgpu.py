"""The lab on real GPUs (``invoke lab.up --gpus real``, tests/lab/realgpu.py), what can be checked without a GPU:
the GPU discovery's parsing, the node/GPU assignment, the environment a GPU pod gets, the sizes from a calibration,
the expected durations from the sizes, the inventory of a real-GPU lab and the start script's argument handling."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.lab import env, realgpu
from tests.lab.kubelet import LabSettings, gpu_container_env
from tests.paths import REPO_ROOT
from tests.toolrun import run_tool
from xpushare.cases import REGISTRY, sizing
from xpushare.inventory.sut import sut_names

ROOT = REPO_ROOT
UUIDS = [f"GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd" for i in range(4)]
QUERY = "".join(f"{i}, {u}, NVIDIA H100 80GB HBM3, 81559\n" for i, u in enumerate(UUIDS))


def gpus(count: int = 4) -> list[realgpu.RealGpu]:
    return realgpu.parse_gpu_query(QUERY)[:count]


def test_nvidia_smi_query_is_parsed_in_index_order() -> None:
    found = realgpu.parse_gpu_query("1, GPU-b, NVIDIA H200, 143771\n\n0, GPU-a, NVIDIA H200, 143771\n")
    assert [(g.index, g.uuid, g.name, g.memory_bytes) for g in found] == [
        (0, "GPU-a", "NVIDIA H200", 143771 * 2**20), (1, "GPU-b", "NVIDIA H200", 143771 * 2**20)]
    with pytest.raises(realgpu.GpuDiscoveryError, match="unexpected nvidia-smi line"):
        realgpu.parse_gpu_query("0, not-a-uuid, NVIDIA H100, 81559")
    with pytest.raises(realgpu.GpuDiscoveryError):
        realgpu.parse_gpu_query("x, GPU-a, NVIDIA H100, lots")


def test_each_node_owns_its_share_of_the_gpus_in_index_order() -> None:
    assert {n: [g.uuid for g in gs] for n, gs in realgpu.assign_gpus(gpus(1)).items()} == {"lab-node1": UUIDS[:1]}
    two = realgpu.assign_gpus(gpus(4), gpus_per_node=2)
    assert {n: [g.index for g in gs] for n, gs in two.items()} == {"lab-node1": [0, 1], "lab-node2": [2, 3]}
    assert list(realgpu.assign_gpus(gpus(3), gpus_per_node=2)) == ["lab-node1"]  # the odd GPU stays unused
    with pytest.raises(realgpu.GpuDiscoveryError, match="1 GPU"):
        realgpu.assign_gpus(gpus(1), gpus_per_node=2)
    with pytest.raises(realgpu.GpuDiscoveryError):
        realgpu.assign_gpus(gpus(2), nodes=3)
    with pytest.raises(ValueError):
        realgpu.assign_gpus(gpus(2), gpus_per_node=0)


def test_real_lab_plan_gives_each_node_its_uuids_and_addresses() -> None:
    plan = realgpu.real_lab_plan(realgpu.assign_gpus(gpus(2)), block=7)
    assert plan["api_address"] == "127.7.0.10" and plan["gpu_mode"] == "real"
    node2 = plan["nodes"]["lab-node2"]
    assert node2["address"] == "127.7.0.13" and node2["scheduler_address"] == "127.7.0.23"
    assert node2["gpu_uuids"] == [UUIDS[1]] and node2["gpu_indexes"] == [1]
    assert node2["gpu_memory_bytes"] == 81559 * 2**20 and node2["gpu_name"] == "NVIDIA H100 80GB HBM3"


def settings(tmp_path: Path, *, real: bool) -> LabSettings:
    return LabSettings(sut_names("xpushare"), tmp_path, ROOT, "tok", "127.0.0.10", 1, sys.executable,
                       tmp_path / "sut", None if real else tmp_path / "simgpu", 2, "sa", tmp_path / "ca.crt",
                       real_gpus=real)


def test_a_gpu_pod_on_a_real_node_sees_only_its_gpu_by_uuid(tmp_path: Path) -> None:
    devices = [f"{UUIDS[2]}__3", f"{UUIDS[2]}__1"]
    got = gpu_container_env(settings(tmp_path, real=True), "lab-node1", devices, tmp_path / "sut")
    assert got == {"NVIDIA_VISIBLE_DEVICES": UUIDS[2], "CUDA_VISIBLE_DEVICES": UUIDS[2],
                   "LD_PRELOAD": str(tmp_path / "sut" / "libxpushare.so")}  # no simulated driver on any path
    two = gpu_container_env(settings(tmp_path, real=True), "lab-node1", [f"{UUIDS[1]}__1", f"{UUIDS[0]}__2"],
                            tmp_path / "sut")
    assert two["CUDA_VISIBLE_DEVICES"] == two["NVIDIA_VISIBLE_DEVICES"] == f"{UUIDS[0]},{UUIDS[1]}"


def test_a_gpu_pod_on_a_simulated_node_keeps_the_simulated_driver(tmp_path: Path) -> None:
    got = gpu_container_env(settings(tmp_path, real=False), "lab-node1", ["GPU-lab-lab-node1-0__1"], tmp_path / "s")
    assert got["NVIDIA_VISIBLE_DEVICES"] == "GPU-lab-lab-node1-0" and "CUDA_VISIBLE_DEVICES" not in got
    assert got["LD_LIBRARY_PATH"] == str(tmp_path / "simgpu")
    assert got["SIMGPU_CONFIG"].endswith("nodes/lab-node1/simgpu/devices")


def test_sizes_from_the_calibration_keep_the_simulated_durations() -> None:
    args = realgpu.real_workload_args(47000.0)
    assert args["w2_medium_add"][:4] == ["--n", "2048", "--iters", "94000"]  # 2.0 s at 47000 adds/s
    assert args["w6_fixed_add"][:4] == ["--n", "2048", "--iters", "282000"]  # 6.0 s
    assert args["w5_quota_probe"] == env.LAB_WORKLOAD_ARGS["w5_quota_probe"]  # a time, not a size
    assert sizing.iters_for(47000.0, 2.0) == 94000 and sizing.iters_for(10.0, 1.0) == 1000
    with pytest.raises(ValueError):
        sizing.iters_for(0.0, 1.0)
    # no calibration: the model's bandwidth, launch-bound at small n; unknown model: none
    assert realgpu.model_adds_per_s("NVIDIA H100 80GB HBM3") == sizing.LAUNCH_BOUND_ADDS_PER_S
    assert realgpu.model_adds_per_s("Tesla T4", 14000) == pytest.approx(0.24e12 / (12 * 14000**2))
    assert realgpu.model_adds_per_s("lab") is None


def test_quota_cases_get_an_expected_duration_from_the_sizes() -> None:
    w2 = {"w2_medium_add": ["--n", "2048", "--iters", "94000"], "w6_fixed_add": ["--n", "2048", "--iters", "282000"]}
    run_s = 94000 / sizing.LAUNCH_BOUND_ADDS_PER_S  # 2.0 s
    seconds, basis = sizing.sized_case_duration("FUNC-008", {"func008_quotas": [25, 50, 75], "workload_args": w2},
                                                "NVIDIA H100 80GB HBM3") or (0.0, "")
    assert seconds == pytest.approx(run_s * (4 + 2 + 4 / 3) + 3 * sizing.POD_OVERHEAD_S, abs=0.1)
    assert "w2_medium_add" in basis and "25/50/75" in basis
    perf, _ = sizing.sized_case_duration("PERF-004", {"perf004_quotas": [30, 60], "perf_workload": "auto",
                                                      "workload_args": w2}, "H100") or (0.0, "")
    assert perf == pytest.approx(6.0 / 0.3 + 6.0 + 2 * sizing.POD_OVERHEAD_S, abs=0.1)  # the pair + 1 baseline
    assert sizing.sized_case_duration("MET-006", {"workload_args": w2}, "H100") is None  # a time window
    assert sizing.sized_case_duration("FUNC-008", {"func008_quotas": [25]}, "lab") is None  # unknown model
    # cases of time windows: their windows, dynamic_step_s per phase, one pod's overhead
    func010, why010 = sizing.window_case_duration("FUNC-010", {"dynamic_probe_start_delay_s": 1, "dynamic_step_s": 8,
                                                               "func010_memory_limits": ["256Mi", "512Mi"]}) or (0, "")
    assert func010 == 1 + 2 * 8 + sizing.POD_OVERHEAD_S and "2 x dynamic_step_s" in why010
    met006 = sizing.window_case_duration("MET-006", {"met006_duration_s": 10.0})
    assert met006 is not None and met006[0] == 10 + sizing.POD_OVERHEAD_S
    assert sizing.window_case_duration("FUNC-008", {}) is None
    # the plan of the dry run and of plan.json take it where no earlier run tells
    from xpushare.engine.plan import expected_case_duration

    cluster = SimpleNamespace(name="lab", gpu_model="NVIDIA H100 80GB HBM3")
    got, why = expected_case_duration(REGISTRY["FUNC-008"], cluster,  # type: ignore[arg-type]
                                      {"func008_quotas": [50], "workload_args": w2}, None)
    assert got == pytest.approx(run_s * 2 + sizing.POD_OVERHEAD_S, abs=0.1) and why.startswith("sizing:")


class RealKube:
    """A real-GPU LabCluster as the inventory sees it (one node owning one H100)."""

    real_gpus = True
    gpu_memory_bytes = 81559 * 2**20

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.kubeconfig_path = workdir / "kubeconfig"
        plan = realgpu.real_lab_plan(realgpu.assign_gpus(gpus(1)), block=7)
        self.node_specs: dict[str, dict[str, Any]] = plan["nodes"]
        self.nodes = list(self.node_specs)


def test_the_inventory_of_a_real_gpu_lab(tmp_path: Path) -> None:
    kube = RealKube(tmp_path)
    (tmp_path / env.CALIBRATION_FILE).write_text(json.dumps({"adds_per_s": 47000.0}))
    ssh = SimpleNamespace(workdir=tmp_path, hosts={}, host=lambda name: SimpleNamespace(
        address="127.0.0.1", port=22, user="root", identity=tmp_path / "id"))
    ssh.hosts = {"lab-master": ssh.host("lab-master")}
    cluster = env.lab_inventory(ssh, kube)["clusters"]["lab"]  # type: ignore[arg-type]
    assert list(cluster["hosts"]) == ["lab-master", "lab-node1"]  # one GPU host per lab node
    assert cluster["gpu"] == {"model": "NVIDIA H100 80GB HBM3", "memory_gib": 79}
    params = cluster["params"]
    assert params["workload_args"]["w2_medium_add"][3] == "94000"
    assert "SIMGPU_CONFIG" not in params["node_sampler_env"] and "LD_LIBRARY_PATH" not in params["node_sampler_env"]
    assert params["met006_dmon_command"][1:] == ["dmon", "-s", "u", "-d", "1"]
    assert params["met008_n"] == env.met008_n(kube.gpu_memory_bytes, env.REAL_CONTEXT_BYTES)


def up_sh(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(ROOT / "tests/lab/gpu/up.sh"), *args], cwd=cwd, capture_output=True,
                          text=True, timeout=30, check=False)


@pytest.mark.parametrize("args, message", [
    (["--gpus-per-node", "0"], "--gpus-per-node must be a positive integer"),
    (["--gpus-per-node", "two"], "--gpus-per-node must be a positive integer"),
    (["--bogus"], "unknown argument: --bogus"),
    (["--sut-src", "/no/such/tree"], "no SUT source tree at /no/such/tree"),
    (["--sut-src"], "Usage"),
])
def test_the_start_script_refuses_bad_arguments_before_it_touches_the_machine(args: list[str], message: str) -> None:
    proc = up_sh(*args)
    assert proc.returncode == 2 and message in proc.stderr


def test_the_start_script_runs_only_from_the_repository_root(tmp_path: Path) -> None:
    proc = up_sh("--check", cwd=tmp_path)
    assert proc.returncode == 2 and "repository root" in proc.stderr


def test_lab_up_refuses_an_unknown_gpu_mode() -> None:
    proc = run_tool([sys.executable, "-m", "invoke", "lab.up", "--gpus", "fake"], cwd=ROOT, timeout=120, check=False)
    assert proc.returncode == 2 and proc.stderr.strip().startswith("error: --gpus must be one of sim, real")
    assert "Traceback" not in proc.stderr


def test_a_real_gpu_lab_writes_no_simulated_gpu_and_attaches_as_real(monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    from tests.lab import sut
    from tests.lab.cluster import LabCluster

    monkeypatch.setattr(sut, "build_sut", lambda source=None: SimpleNamespace(
        directory=tmp_path / "build", source=tmp_path / "src", digest="d"))
    plan = realgpu.real_lab_plan(realgpu.assign_gpus(gpus(2)), block=7)
    lab = LabCluster(tmp_path / "kube", window_ms=500, **plan)
    lab.prepare()
    cfg = json.loads(lab.config_path.read_text())
    assert cfg["gpu_mode"] == "real" and cfg["simgpu_dir"] == ""
    assert cfg["nodes"]["lab-node2"]["gpus"] == [UUIDS[1]] and cfg["nodes"]["lab-node2"]["gpu_indexes"] == [1]
    assert not (tmp_path / "kube" / "nodes" / "lab-node1" / "simgpu").exists()
    again = LabCluster.attach(tmp_path / "kube")
    assert again.real_gpus and again.simgpu_dir is None and again.gpu_uuids("lab-node1") == [UUIDS[0]]
    with pytest.raises(ValueError):
        LabCluster(tmp_path / "other", gpu_mode="fake")
