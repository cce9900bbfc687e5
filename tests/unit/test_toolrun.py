"""tests/toolrun.py: a forked run of the tool gives a test what ``subprocess.run`` gives it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import toolrun
from tests.paths import REPO_ROOT


def both(argv: list[str], env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str], ...]:
    """The command line run in a fresh interpreter, then forked."""
    fresh = subprocess.run(argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    return fresh, toolrun.run_tool(argv, cwd=REPO_ROOT, env=env, timeout=120)


def test_a_usage_error_and_a_listing_read_as_from_a_fresh_interpreter() -> None:
    for args in (["func", "--cluster", "no-such-cluster"], ["cases"]):
        fresh, forked = both([sys.executable, "-m", "invoke", *args])
        assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert fresh.returncode == 0 and "FUNC-001" in fresh.stdout


def test_the_child_gets_the_calls_environment_and_directory_and_reports_its_cpu(tmp_path: Path) -> None:
    inventory = tmp_path / "elsewhere.yaml"
    env = {**os.environ, "XPUSHARE_INVENTORY": str(inventory)}
    before = toolrun.cpu_seconds()
    fresh, forked = both([sys.executable, "-m", "invoke", "hosts"], env=env)
    assert forked.returncode == fresh.returncode == 2, forked.stderr
    assert forked.stderr == fresh.stderr and str(inventory) in forked.stderr
    assert toolrun.cpu_seconds() > before


def test_the_premise_free_entry_point_waives_in_the_child_only(tmp_path: Path) -> None:
    argv = ["func", "--cluster", "local", "--case", "FUNC-001", "--dry-run", "--root", str(tmp_path)]
    waived = toolrun.run_tool([sys.executable, "-m", "tests.premise_free", *argv], cwd=REPO_ROOT, timeout=120)
    plain = toolrun.run_tool([sys.executable, "-m", "invoke", *argv], cwd=REPO_ROOT, timeout=120)
    assert waived.returncode == plain.returncode == 0, waived.stderr + plain.stderr
    assert "1 case(s), 1 will SKIP" in plain.stdout  # the next forked child starts from the unwaived registry
    assert "1 case(s), 0 will SKIP" in waived.stdout


def test_a_run_past_its_timeout_is_killed_and_raises() -> None:
    argv = [sys.executable, "-m", "invoke", "run", "--cluster", "local", "--", "sleep", "30"]
    with pytest.raises(subprocess.TimeoutExpired):
        toolrun.run_tool(argv, cwd=REPO_ROOT, timeout=1.5)


def test_any_other_command_line_runs_in_a_subprocess() -> None:
    proc = toolrun.run_tool([sys.executable, "-c", "import sys; print('out'); sys.exit(3)"])
    assert (proc.returncode, proc.stdout) == (3, "out\n")
