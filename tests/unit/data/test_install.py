"""A non-editable install runs the ``xpushare`` command from any directory, with the data it ships.

The wheel is built from a copy of the package sources (``pyproject.toml``, ``README.md``, ``xpushare/``)
and installed with ``pip --target`` into a temporary directory (dependencies come from the running
environment); the command then runs from another directory with only that install on ``PYTHONPATH``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.paths import REPO_ROOT
from xpushare.data import baselines_dir, manifests_dir, playbooks_dir, workloads_dir

ROOT = REPO_ROOT
#: A playbook that runs FUNC-001 with a tiny workload (the local cluster runs on the CPU).
PROBE_PLAYBOOK = 'cases: [FUNC-001]\nparams:\n  workload_args: {w2_medium_add: [--n, "64", --iters, "50"]}\n'
#: Files of xpushare/data the wheel must carry (a suite needs each of them at run time).
DATA = ("data/playbooks/local.yaml", "data/manifests/pod.yaml", "data/manifests/legacy/scheduler.yaml",
        "data/manifests/envcheck/gpu-job.yaml", "data/baselines/t4-seed004.yaml", "data/workloads/w2_medium_add.py",
        "data/workloads/_driver.py", "data/workloads/_common.py", "data/workloads/_cudadrv.py",
        "data/workloads/_output.py", "data/workloads/_sampler_sources.py", "data/workloads/envcheck/node_steps.py",
        "data/required_metrics.yaml")


def pip(*args: str, cwd: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "pip", *args], cwd=cwd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``--target`` directory of a non-editable install of this repository's package."""
    base = tmp_path_factory.mktemp("install")
    src = base / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "xpushare", src / "xpushare", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    pip("wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(base / "wheel"), str(src), cwd=base)
    (wheel,) = (base / "wheel").glob("xpushare-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
    missing = [f for f in DATA if f"xpushare/{f}" not in names]
    assert not missing, f"the wheel lacks {missing}"
    assert any(n.endswith("entry_points.txt") for n in names)
    target = base / "target"
    pip("install", "--no-deps", "--no-index", "--target", str(target), str(wheel), cwd=base)
    return target


def run_installed(target: Path, cwd: Path, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(target)}
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_installed_command_lists_the_tasks(installed: Path, tmp_path: Path) -> None:
    proc = run_installed(installed, tmp_path, str(installed / "bin" / "xpushare"), "--list")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in ("func", "combo", "perf", "metrics", "matrix", "soak", "judge", "legacy.cross-gpu", "lab.up"):
        assert f"  {name} " in proc.stdout, name
    where = run_installed(installed, tmp_path, sys.executable, "-c",
                          "import xpushare.cli.program as p, xpushare.data as d; print(p.__file__); "
                          "print(d.workloads_dir())")
    assert where.returncode == 0, where.stderr
    assert all(Path(line).is_relative_to(installed) for line in where.stdout.split()), where.stdout
    module = run_installed(installed, tmp_path, sys.executable, "-m", "xpushare", "--version")
    assert module.returncode == 0 and module.stdout.startswith("xpushare "), module.stdout + module.stderr


@pytest.mark.slow
def test_installed_command_runs_a_suite_from_another_directory(installed: Path, tmp_path: Path) -> None:
    # A playbook only the installed copy has: the run finds it only through the installed package's data.
    marker = installed / "xpushare" / "data" / "playbooks" / "installed-probe.yaml"
    marker.write_text(PROBE_PLAYBOOK, encoding="utf-8")
    proc = run_installed(installed, tmp_path, str(installed / "bin" / "xpushare"), "func", "--cluster", "local",
                         "--playbook", "installed-probe", "--run-id", "inst1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = tmp_path / ".tmplog" / "inst1" / "xpushare"
    for name in ("case-summary.tsv", "run.json", "junit.xml", "run-report.md"):
        assert (run_dir / name).is_file(), name
    # `local` has no SUT: the case SKIPs naming its premise, as the README's first command shows
    result = json.loads((run_dir / "local" / "functional" / "FUNC-001" / "result.json").read_text())
    assert result["status"] == "SKIP" and result["summary"].startswith("premise unmet: sut"), result["summary"]
    usage = run_installed(installed, tmp_path, str(installed / "bin" / "xpushare"), "func", "--cluster", "local",
                          "--playbook", "no-such-playbook")
    assert usage.returncode == 2 and "installed-probe" in usage.stderr, usage.stderr


def test_repository_paths_are_the_package_data() -> None:
    # The documented repository paths (workloads/..., playbooks/...) are links to the package's data.
    for name, found in (("playbooks", playbooks_dir()), ("manifests", manifests_dir()),
                        ("baselines", baselines_dir()), ("workloads", workloads_dir())):
        assert (ROOT / name).resolve() == found.resolve(), name
