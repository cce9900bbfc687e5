"""The controller installs light; the ``node`` extra brings what the workloads import (issue: a remote-only
controller got torch and the CUDA wheels; every workload's log began with torch's NumPy warning)."""

from __future__ import annotations

import re

import pytest

from tests.paths import REPO_ROOT

tomllib = pytest.importorskip("tomllib")


def names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower() for r in requirements}


def test_the_controller_needs_no_workload_packages_and_the_node_extra_has_them() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    base = names(project["dependencies"])
    assert not base & {"torch", "numpy", "nvidia-ml-py", "matplotlib"}, base
    assert {"torch", "numpy", "nvidia-ml-py"} <= names(project["optional-dependencies"]["node"])
