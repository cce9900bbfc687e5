"""envcheck's node-side scripts as real processes, and ``envcheck_task`` on the built-in ``local`` cluster.

No GPU here: nvidia-smi is a fake on PATH where a test needs one, and the GPU steps run as the CPU smoke
test (gloo, tiny sizes) where a test needs them to run.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import REPO_ROOT
from xpushare.envcheck import checks, envcheck_task
from xpushare.model.errors import UsageError
from xpushare.model.exit_status import ExitStatus

ROOT = REPO_ROOT
SCRIPTS = ROOT / "workloads" / "envcheck"
FAST_PROBE = ["--set", "envcheck_probe_torch=false", "--set", "envcheck_freeze_source=metadata"]

FAKE_SMI = r"""#!/bin/sh
[ -n "$FAKE_SMI_FAIL" ] && { echo "NVIDIA-SMI has failed because it couldn't communicate with the driver" >&2; exit 9; }
case "$1" in
  --query-gpu=*) printf '0, NVIDIA H200, GPU-aaa, 143771, 580.159.04, 00000000:18:00.0\n'
                 printf '1, NVIDIA H200, GPU-bbb, 143771, 580.159.04, 00000000:2A:00.0\n' ;;
  topo) printf '\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV18\t0-31\nGPU1\tNV18\t X \t0-31\n' ;;
  *) echo '| NVIDIA-SMI 580.159.04   Driver Version: 580.159.04   CUDA Version: 13.0 |' ;;
esac
"""


def probe(tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(0o755)
    full_env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", **env}
    proc = subprocess.run([sys.executable, str(SCRIPTS / "stack_probe.py"), "--no-torch", "--freeze-source",
                           "metadata"], capture_output=True, text=True, env=full_env, timeout=60)
    return proc, checks.extract_block(proc.stdout, "stack")


def test_stack_probe_reads_nvidia_smi_env_and_packages(tmp_path: Path) -> None:
    proc, doc = probe(tmp_path, NCCL_IB_HCA="mlx5_0", XPUSHARE_ENVCHECK_NODE="node7", CUDA_VISIBLE_DEVICES="1")
    assert proc.returncode == 0, proc.stderr
    assert doc["node"] == "node7" and doc["errors"] == []
    smi = doc["nvidia_smi"]
    assert smi["driver_version"] == "580.159.04" and smi["cuda_driver_version"] == "13.0"
    assert [g["uuid"] for g in smi["gpus"]] == ["GPU-aaa", "GPU-bbb"] and smi["gpus"][0]["memory_mib"] == 143771
    assert checks.topology_links(smi["topology"]) == ["NV18"]
    assert doc["nccl_env"]["NCCL_IB_HCA"] == "mlx5_0" and doc["visible_devices"] == {"CUDA_VISIBLE_DEVICES": "1"}
    freeze = doc["pip_freeze"]
    assert freeze["source"] == "metadata" and any(line.startswith("PyYAML==") for line in freeze["lines"])
    assert len(freeze["sha256"]) == 64 and doc["torch"] is None
    values = checks.stack_values(doc)
    assert values["gpu_count"] == "2" and values["torch_version"] != checks.ABSENT  # from the package list


def test_stack_probe_records_a_broken_driver(tmp_path: Path) -> None:
    proc, doc = probe(tmp_path, FAKE_SMI_FAIL="1")
    assert proc.returncode == 0
    assert doc["nvidia_smi"]["gpus"] == [] and "exited 9" in doc["errors"][0]
    assert "couldn't communicate with the driver" in doc["errors"][0]


def test_node_steps_prints_exit_lines_and_stderr_tails() -> None:
    proc = subprocess.run([sys.executable, str(SCRIPTS / "node_steps.py"), "--stack", "--no-torch --freeze-source "
                           "metadata", "--cublas", "--n notanumber"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2  # the first failing step's exit code (argparse)
    assert checks.exit_codes(proc.stdout) == {"stack": 0, "cublas": 2}
    assert checks.extract_block(proc.stdout, "stack")["schema"] == "xpushare.envcheck.stack/1"
    assert "[cublas] " in proc.stdout and "invalid int value" in proc.stdout
    with pytest.raises(checks.BlockError):
        checks.extract_block(proc.stdout, "cublas")


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has nvidia-smi")
def test_local_cluster_without_nvidia_smi_is_error_naming_it_and_skips_gpu_checks(tmp_path: Path) -> None:
    """Issue 35: ``invoke envcheck --cluster local`` on a machine without nvidia-smi said PASS."""
    out = io.StringIO()
    status = envcheck_task("local", run_id="nogpu", out=out, root=tmp_path, overrides=FAST_PROBE[1::2])
    assert status is ExitStatus.FAILED, out.getvalue()
    report = json.loads((tmp_path / ".tmplog" / "nogpu" / "envcheck" / "fleet.json").read_text())
    node = report["nodes"][0]
    assert node["status"] == "ERROR" and node["steps"]["stack"]["status"] == "ERROR"
    assert "missing prerequisite: nvidia-smi not found" in node["steps"]["stack"]["summary"]
    assert "missing prerequisite: nvidia-smi not found" in node["steps"]["health"]["summary"]
    for step in ("cublas", "nccl"):
        assert node["steps"][step]["status"] == "SKIP"
        assert "no NVIDIA GPU" in node["steps"][step]["summary"]
    assert (tmp_path / ".tmplog" / "nogpu" / "envcheck" / "local" / "localhost" / "stack.json").exists()
    md = (tmp_path / ".tmplog" / "nogpu" / "envcheck" / "fleet-report.md").read_text()
    assert "Not measured: no NVIDIA GPU on this node" in md
    skipped = envcheck_task("local", run_id="skip", out=io.StringIO(), root=tmp_path, skip_gpu=True,
                            overrides=FAST_PROBE[1::2])
    assert skipped is ExitStatus.FAILED  # --skip-gpu skips the GPU steps, not the node's prerequisites


def test_local_cpu_smoke_runs_cublas_and_the_single_node_all_reduce(tmp_path: Path) -> None:
    out = io.StringIO()
    status = envcheck_task("local", run_id="smoke", out=out, root=tmp_path,
                           overrides=[*FAST_PROBE[1::2], "envcheck_cpu_smoke=true"])
    assert status is ExitStatus.OK, out.getvalue()  # the CPU smoke test asks for no nvidia-smi
    base = tmp_path / ".tmplog" / "smoke" / "envcheck"
    node = json.loads((base / "fleet.json").read_text())["nodes"][0]
    assert node["steps"]["cublas"]["status"] == "PASS" and node["steps"]["nccl"]["status"] == "PASS"
    nccl = json.loads((base / "local" / "localhost" / "nccl.json").read_text())
    assert nccl["backend"] == "gloo" and nccl["world_size"] == 2 and nccl["ok"] is True
    assert [s["bytes"] for s in nccl["sizes"]] == [65536, 131072, 262144]
    assert "CPU smoke test" in (base / "fleet-report.md").read_text()


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"mode": "mpi"}, "bad --mode"),
    ({"forks": 0}, "--forks"),
    ({"run_id": "../x"}, "invalid run id"),
    ({"limit": "nothing*"}, "no host"),
    ({"overrides": ["envcheck_cublas_n=x"]}, "bad value"),
])
def test_task_usage_errors(tmp_path: Path, kwargs: dict, words: str) -> None:
    with pytest.raises(UsageError, match=words):
        envcheck_task("local", out=io.StringIO(), root=tmp_path, **kwargs)
