"""Shared pytest fixtures: the SSH test lab (real sshd daemons on 127.0.0.0/8, see tests/lab/README.md).

Without OpenSSH the lab fixtures skip; with ``XPUSHARE_REQUIRE_LAB=1`` (set in CI) they fail instead.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

_REPO_ROOT = str(Path(__file__).resolve().parent.parent)
if _REPO_ROOT not in sys.path:  # plain `pytest` only puts tests/ on sys.path; the lab is tests.lab
    sys.path.insert(0, _REPO_ROOT)

from tests.lab.sshd import SshLab, lab_unavailable_reason  # noqa: E402

#: (name, address) of the standard lab hosts.
LAB_HOSTS: tuple[tuple[str, str], ...] = (
    ("lab-master", "127.0.0.11"),
    ("lab-node1", "127.0.0.12"),
    ("lab-node2", "127.0.0.13"),
)


def _require_lab() -> None:
    """Skip the test if the lab cannot run here; fail instead when XPUSHARE_REQUIRE_LAB=1."""
    reason = lab_unavailable_reason()
    if reason is None:
        return
    if os.environ.get("XPUSHARE_REQUIRE_LAB") == "1":
        pytest.fail(f"SSH lab required (XPUSHARE_REQUIRE_LAB=1) but unavailable: {reason}", pytrace=False)
    pytest.skip(f"SSH lab unavailable: {reason}")


def _lab(workdir: Path) -> Iterator[SshLab]:
    """Start the standard hosts in ``workdir``, write ssh_config/known_hosts there, yield, stop."""
    _require_lab()
    with SshLab(workdir) as lab:
        for name, address in LAB_HOSTS:
            lab.add_host(name, address)
        lab.write_known_hosts()
        lab.write_ssh_config()
        yield lab


@pytest.fixture(scope="session")
def ssh_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshLab]:
    """Session-wide lab with lab-master/lab-node1/lab-node2; do not break its hosts (see fresh_ssh_lab)."""
    yield from _lab(tmp_path_factory.mktemp("ssh-lab"))


@pytest.fixture
def fresh_ssh_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshLab]:
    """A private lab per test, same hosts: for tests that rotate keys, stop hosts or kill sessions."""
    yield from _lab(tmp_path_factory.mktemp("fresh-ssh-lab"))


#: Lab end-to-end modules whose runtime (minutes each) or timing sensitivity does not fit CI's budget on
#: two cores; run them on demand with ``pytest -m heavy`` (README, "Development").
HEAVY_MODULES = {
    "test_k8s_metrics_e2e.py",
    "test_k8s_perf_e2e.py",
    "test_k8s_stability_e2e.py",
    "test_legacy_lab.py",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.name in HEAVY_MODULES:
            item.add_marker(pytest.mark.heavy)
