"""Legacy tasks end to end on the lab: real SSH to the lab hosts, real kubectl, the lab cluster running the
real SUT (the upstream scheduler and client library on simulated GPUs, tests/lab/README-kube.md).

* ``invoke deploy`` against a lab SSH host as the build host, whose ``make`` is a stub script (the SUT
  itself is not rebuilt: the lab runs its cached build): the source tree goes over SFTP when rsync is
  missing, the stub runs in the synced directory, the DaemonSets are rendered from the upstream test
  manifests, deleted, re-applied (the lab kubelet runs the SUT's scheduler image as the real
  ``xpushare-scheduler``, with the manifest's env), rolled out, and the real scheduler's
  ``Scheduling mode: SERIAL (one task at a time per GPU)`` line is read back from each node's log;
* a failing build step stops the pipeline with exit status 1 before the cluster is touched;
* ``invoke legacy.cross-gpu 2 --skip-setup`` passes with the legacy tables built from what the real
  system prints: the registration lines (``Registered client <id> on GPU <uuid> ...``) for the GPU
  distribution, and from the pod logs the progress line's last refresh (the real library's stderr lines
  break it, so the final ``100%`` refresh starts a line of its own after a ``\r``) and the library's
  ``Pending Kernel Window is <n>``; failing pods are FAIL.

Workloads are tiny on the simulated GPU (W1/W2 n 128 x 400 iterations: about 5 ms of GPU time), so the
module took 20 s on 2 shared cores (the lab's start, the rollout, five invoke runs).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.lab.cluster import LabCluster, LocalHost, find_kubectl
from tests.lab.env import LAB_GPU_MEMORY_BYTES, write_inventory
from tests.lab.kubelab import started_kube_lab
from tests.lab.sshd import SshLab
from tests.paths import REPO_ROOT
from tests.toolrun import run_tool
from xpushare.deploy import source_sync
from xpushare.inventory import schema
from xpushare.transport.hosts import connect
from xpushare.transport.kubectl import Kubectl

pytestmark = [pytest.mark.lab, pytest.mark.slow]
ROOT = REPO_ROOT
STUB_MAKE = """#!/bin/sh
# stub make of the legacy deploy tests: builds nothing, proves where and how it ran
echo "stub make $* in $(pwd)"
test -f Makefile || { echo "stub make: no Makefile here" >&2; exit 3; }
echo "$*" > .stub-make-ran
"""
FAILING_MAKE = """#!/bin/sh
echo "compiling..."; echo "error: stub build failure" >&2; exit 2
"""
GIT_ENV = {"GIT_AUTHOR_NAME": "lab", "GIT_AUTHOR_EMAIL": "lab@example.invalid", "GIT_COMMITTER_NAME": "lab",
           "GIT_COMMITTER_EMAIL": "lab@example.invalid"}


@pytest.fixture(scope="module")
def kube_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabCluster]:
    yield from started_kube_lab(tmp_path_factory, "legacy-kube", gpu_memory_bytes=LAB_GPU_MEMORY_BYTES)


@pytest.fixture(scope="module")
def env(ssh_lab: SshLab, kube_lab: LabCluster, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("legacy")
    src = base / "sut"
    for rel, text in (("Makefile", "all:\n\ttrue\n"), ("src/scheduler.c", "int main(void){return 0;}\n"),
                      (".idea/workspace.xml", "<x/>\n"), (".tmplog/old.log", "x\n")):
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(text)
    git_env = {**os.environ, **GIT_ENV}
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "lab source"]):
        subprocess.run(["git", "-C", str(src), *args], check=True, capture_output=True, env=git_env)
    tag = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], check=True, capture_output=True,
                         text=True).stdout.strip()[:8]
    bin_dir = base / "bin"
    bin_dir.mkdir()
    for name, text in (("make", STUB_MAKE), ("make-fail", FAILING_MAKE)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    tiny = {"w1_large_add": ["--n", "128", "--iters", "400"], "w2_medium_add": ["--n", "128", "--iters", "400"],
            "w3_idle_add": ["--n", "128", "--steps", "3", "--sleep-s", "0.05"]}
    params: dict[str, Any] = {
        "workload_args": tiny,  # progress on: the tables read the tqdm line
        "legacy_monitor_s": 0.5,
        "deploy_make": [str(bin_dir / "make"), "all"],
        "deploy_remote_dir": str(base / "remote" / "xpushare"),
        "deploy_rsync": "xpushare-no-such-rsync",
        "deploy_rollout_timeout_s": 120,
    }
    inv = write_inventory(base / "inventory.yaml", ssh_lab, kube_lab, params=params)
    return {"base": base, "src": src, "bin": bin_dir, "inv": inv, "root": base / "runs", "tag": Path(tag)}


def run_invoke(env: dict[str, Path], *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return run_tool([sys.executable, "-m", "invoke", *args, "--cluster", "lab", "--inventory", str(env["inv"]),
                     "--root", str(env["root"])], cwd=ROOT, timeout=timeout)


def lab_kubectl(kube_lab: LabCluster) -> Kubectl:
    return Kubectl(LocalHost(), kubectl=find_kubectl() or "kubectl", kubeconfig=str(kube_lab.kubeconfig_path),
                   namespace="default")


def test_sync_falls_back_to_sftp_and_honours_excludes(env: dict[str, Path]) -> None:
    spec = schema.load(str(env["inv"])).cluster("lab").by_role("master")[0]
    host = connect(spec)
    target = str(env["base"] / "sync-direct")
    lines: list[str] = []
    try:
        how = source_sync.sync_source(env["src"], host, spec, target, rsync="xpushare-no-such-rsync",
                                 excludes=[".idea", ".tmplog"], log=lines.append)
    finally:
        host.close()
    assert how.startswith("sftp: 4 files") or how.startswith("sftp: ")
    assert "falling back to a tar archive over SFTP" in lines[0]
    synced = Path(target)
    assert (synced / "Makefile").is_file() and (synced / "src" / "scheduler.c").is_file()
    assert (synced / ".git" / "HEAD").is_file(), ".git travels so the remote tag matches"
    assert not (synced / ".idea").exists() and not (synced / ".tmplog").exists()
    assert not Path(f"{target}.xpushare-sync.tar.gz").exists(), "the archive is removed after extraction"


@pytest.mark.skipif(shutil.which("rsync") is None, reason="rsync not installed (the SFTP fallback is tested)")
def test_sync_with_rsync_over_ssh(env: dict[str, Path]) -> None:
    spec = schema.load(str(env["inv"])).cluster("lab").by_role("master")[0]
    host = connect(spec)
    target = str(env["base"] / "sync-rsync")
    try:
        how = source_sync.sync_source(env["src"], host, spec, target, rsync="rsync", excludes=[".idea", ".tmplog"],
                                 log=lambda _line: None)
    finally:
        host.close()
    assert how.startswith("rsync to")
    assert (Path(target) / "src" / "scheduler.c").is_file() and not (Path(target) / ".idea").exists()


def test_deploy_pipeline_builds_with_the_stub_and_redeploys(env: dict[str, Path], kube_lab: LabCluster) -> None:
    proc = run_invoke(env, "deploy", "--source", str(env["src"]), "--mode", "serial", "--run-id", "deploy1")
    out = proc.stdout
    assert proc.returncode == 0, out[-4000:] + proc.stderr[-2000:]
    banners = [line for line in out.splitlines() if line.startswith("===== ")]
    assert [b.split(".")[0] for b in banners] == [f"===== {i}" for i in range(7)]
    assert "falling back to a tar archive over SFTP" in out and "-> FAILED" not in out
    remote = env["base"] / "remote" / "xpushare"
    assert (remote / ".stub-make-ran").read_text().strip() == "all", "the stub make ran in the synced dir"
    assert not (remote / ".idea").exists()
    tag = str(env["tag"])
    out_dir = env["root"] / ".tmplog" / "deploy1" / "xpushare" / "lab" / "deploy"
    steps = json.loads((out_dir / "deploy.json").read_text())["steps"]
    assert [s["outcome"] for s in steps] == ["skipped", "ok", "ok", "ok", "ok", "ok", "ok"]
    assert "stub make all in" in (out_dir / "build.log").read_text()
    rendered = yaml.safe_load((out_dir / "scheduler.yaml").read_text())
    env_list = rendered["spec"]["template"]["spec"]["containers"][0]["env"]
    assert [e for e in env_list if e["name"] == "XPUSHARE_SCHEDULING_MODE"] == [
        {"name": "XPUSHARE_SCHEDULING_MODE", "value": "serial"}]
    # What the cluster now runs: the re-applied DaemonSet with this source's tag, the mode read back.
    k = lab_kubectl(kube_lab)
    ds = k.get_json(["get", "daemonset", "xpushare-scheduler"], namespace="xpushare-system")
    container = ds["spec"]["template"]["spec"]["containers"][0]
    assert container["image"].endswith(f"/xpushare-scheduler:{tag}")
    assert sum(1 for e in container["env"] if e["name"] == "XPUSHARE_SCHEDULING_MODE") == 1
    modes = (out_dir / "scheduler-mode.log").read_text().splitlines()
    assert len(modes) == len(kube_lab.nodes) and all("Scheduling mode: SERIAL" in m for m in modes)


def test_deploy_stops_at_a_failing_build(env: dict[str, Path]) -> None:
    make = json.dumps([str(env["bin"] / "make-fail"), "all"])
    proc = run_invoke(env, "deploy", "--source", str(env["src"]), "--run-id", "deploy2", "--set", f"deploy_make={make}")
    out = proc.stdout
    assert proc.returncode == 1, out[-3000:] + proc.stderr[-2000:]
    assert "===== 2. Remote Build =====" in out and "  -> FAILED:" in out
    assert "===== 3." not in out and "===== 4." not in out, "nothing after the failed step runs"
    assert "error: stub build failure" in out
    out_dir = env["root"] / ".tmplog" / "deploy2" / "xpushare" / "lab" / "deploy"
    steps = json.loads((out_dir / "deploy.json").read_text())["steps"]
    assert steps[-1]["step"] == 2 and steps[-1]["outcome"] == "FAILED"


def test_cross_gpu_two_pods_prints_the_tables_and_passes(env: dict[str, Path], kube_lab: LabCluster) -> None:
    proc = run_invoke(env, "legacy.cross-gpu", "2", "--skip-setup", "--run-id", "xg")
    out = proc.stdout
    assert proc.returncode == 0, out[-4000:] + proc.stderr[-2000:]
    assert "Scheduler Log Analysis (GPU Distribution):" in out
    dist = [line for line in out.splitlines() if line.startswith("xpushare-cross-gpu-") and "GPU-lab-" in line]
    assert len(dist) == 2
    rows = [line for line in out.splitlines() if line.startswith("xpushare-cross-gpu-") and "| PASS     |" in line]
    assert len(rows) == 2
    # Speed from the last progress refresh, MaxKernelWin from the library's debug line: both present.
    cells = [[c.strip() for c in row.split("|")] for row in rows]
    assert all(c[3].endswith(" it/s") and int(c[4]) > 0 for c in cells), rows
    assert "  Total: 2, Pass: 2, Fail: 0" in out and "All pods finished." in out
    case = env["root"] / ".tmplog" / "xg" / "xpushare" / "lab" / "legacy" / "cross-gpu"
    result = json.loads((case / "result.json").read_text())
    assert result["status"] == "PASS" and result["suite"] == "legacy"
    assert result["metrics"]["gpus_used"] == 2, "two pods on a 2 x 2-GPU lab go to two GPUs"
    assert result["metrics"]["speed_avg_it_s"] is not None
    summary = (env["root"] / ".tmplog" / "xg" / "xpushare" / "case-summary.tsv").read_text()
    assert "lab\tlegacy\tcross-gpu\tPASS" in summary
    assert lab_kubectl(kube_lab).list_pods("app=xpushare-cross-gpu", all_namespaces=True) == [], \
        "pods are removed after the case"


def test_failing_pods_are_fail_never_pass(env: dict[str, Path]) -> None:
    bad = "workload_args={w2_medium_add: [--n, '-1']}"
    proc = run_invoke(env, "legacy.small", "2", "--skip-setup", "--run-id", "bad", "--set", bad)
    out = proc.stdout
    assert proc.returncode == 1, out[-3000:] + proc.stderr[-2000:]
    assert out.count("| FAIL (Failed) |") == 2 and "Total: 2, Pass: 0, Fail: 2" in out
    case = env["root"] / ".tmplog" / "bad" / "xpushare" / "lab" / "legacy" / "small"
    assert json.loads((case / "result.json").read_text())["status"] == "FAIL"
