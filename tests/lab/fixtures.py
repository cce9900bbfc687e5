"""pytest fixtures of the lab Kubernetes cluster (:mod:`tests.lab.cluster`), to wire into conftest.

Enable with ``pytest_plugins = ["tests.lab.fixtures"]`` (test modules import helpers from
:mod:`tests.lab.cluster` and :mod:`tests.lab.kubelab`, never from here, so pytest can rewrite this
module's asserts).

``lab_cluster`` (session) is a started :class:`~tests.lab.cluster.LabCluster`; tests that flip its
broken-lab switches restore them in a ``finally`` (or use ``lab_faults``, which does). ``lab_kubectl``
is an :class:`xpushare.transport.kubectl.Kubectl` that runs the real kubectl through :class:`LocalHost`.

Address block: the default plan (127.0.0.10 API, 127.0.0.12/13 nodes, 127.0.0.22/23 schedulers on
:9402) when it is free; when another lab (another test session on this machine) holds it, a block
``127.<b>.0.x`` with the same last octets. A block is held with a lock file in the temp directory for
the whole session, so concurrent sessions never share one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from tests.lab.cluster import LabCluster, LocalHost, find_kubectl
from tests.lab.kubelab import started_kube_lab
from xpushare.transport.kubectl import Kubectl


@pytest.fixture(scope="session")
def lab_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabCluster]:
    """A started lab cluster (2 nodes × 2 simulated GPUs, the real SUT) for the session."""
    yield from started_kube_lab(tmp_path_factory, "kube-lab")


@pytest.fixture
def lab_kubectl(lab_cluster: LabCluster) -> Kubectl:
    """A fresh :class:`Kubectl` (call count 0) on the lab, namespace ``default``, via :class:`LocalHost`."""
    kubectl = find_kubectl()
    assert kubectl is not None
    return Kubectl(LocalHost(), kubectl=kubectl, kubeconfig=str(lab_cluster.kubeconfig_path), context="lab",
                   namespace="default", request_timeout_s=30)


@pytest.fixture
def lab_faults(lab_cluster: LabCluster) -> Iterator[LabCluster]:
    """The session lab; every broken-lab switch is reset to healthy after the test."""
    try:
        yield lab_cluster
    finally:
        with contextlib.suppress(OSError):
            lab_cluster.clear_faults()
