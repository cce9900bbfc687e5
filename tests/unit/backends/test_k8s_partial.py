"""Kubernetes mode with a GPU node whose SSH does not answer (docs/reliability.md §partial clusters): the backend
records it with why, reads nothing more there (an :class:`UnreachableHost` fails at once), and a case with a pod
on that node cannot PASS: its harvest names the node and the host as a fault (the case is ERROR). kubectl is a
stand-in; the dead host is a real SSH connection refused on 127.0.0.1."""

from __future__ import annotations

import socket
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from xpushare.backends import k8s_harvest
from xpushare.backends.base import CaseContext
from xpushare.backends.k8s import K8sBackend
from xpushare.inventory import schema
from xpushare.model.errors import HarvestIncomplete, HostUnreachable
from xpushare.model.workload import WorkloadRecord
from xpushare.transport import kube_lease


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Kubectl:
    """What prepare_run and harvest ask of kubectl: two nodes, one pod on the given node (in the inventory's fixed
    namespace, which the backend does not create)."""

    calls = retries = 0
    namespace: str | None = None

    def __init__(self, pod_node: str) -> None:
        self.pod_node = pod_node

    def delete(self, *_: Any, **__: Any) -> None:
        return None

    def list_nodes(self, *_: Any) -> list[Any]:
        return [SimpleNamespace(name="g1", internal_ip=None), SimpleNamespace(name="g2", internal_ip=None)]

    def list_pods(self, *_: Any, **__: Any) -> list[Any]:
        return [SimpleNamespace(name="func-001-w2", node=self.pod_node)]

    def logs_by_pod(self, *_: Any, **__: Any) -> dict[str, str]:
        return {}


@pytest.mark.parametrize("pod_node", ["g1", "g2"])
def test_a_pod_on_a_node_whose_host_is_unreachable_makes_the_harvest_incomplete(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pod_node: str) -> None:
    inv = f"""
defaults: {{ssh: {{connect_timeout: 2, connect_retries: 1, host_key_policy: ignore}}}}
clusters:
  k:
    mode: k8s
    namespace: tests
    hosts:
      m: {{connection: local, roles: [master]}}
      g1: {{connection: local, roles: [gpu]}}
      g2: {{address: 127.0.0.1, port: {closed_port()}, roles: [gpu]}}
    params: {{pod_workload_configmap: false, node_nvidia_smi: [nvidia-smi]}}
"""
    backend = K8sBackend(schema.parse(inv).cluster("k"))
    backend.kubectl = Kubectl(pod_node)  # type: ignore[assignment]
    monkeypatch.setattr(kube_lease, "live_run", lambda *_: None)
    for name in ("scheduler_logs", "node_evidence", "cluster_snapshot"):
        monkeypatch.setattr(k8s_harvest, name, lambda *_, **__: [])
    monkeypatch.setattr(K8sBackend, "_record",
                        lambda self, p: WorkloadRecord(name=p.name, phase="Succeeded", node=p.node))
    backend.prepare_run("r1")
    assert [(u.host, u.role, u.why) for u in backend.unreachable()] == [("g2", "gpu", "refused")]
    with pytest.raises(HostUnreachable, match=r"g2: UNREACHABLE \(refused\)"):
        backend.gpu_host("g2").run(["true"])
    assert backend.smi_hosts == {"g1"}
    backend.case = CaseContext(tmp_path, "FUNC-001")
    if pod_node == "g1":
        assert "pods.json" in backend.harvest()
        return
    with pytest.raises(HarvestIncomplete, match=r"node g2: g2: UNREACHABLE \(refused\): cannot connect"):
        backend.harvest()
