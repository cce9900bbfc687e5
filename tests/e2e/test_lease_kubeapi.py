"""The Kubernetes lease store against the lab API server with the real kubectl: Lease create (409 AlreadyExists
when held), replace with a resourceVersion (409 Conflict when it changed), delete; ConfigMaps served too."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tests.lab.kubeapi import ApiServer, Store
from tests.lab.kubelab import require_kube_lab
from xpushare.engine import lease
from xpushare.model.lease import LeaseSettings
from xpushare.transport.kube_errors import KubeAlreadyExists, KubeConflict
from xpushare.transport.kube_lease import KubeLeaseStore, live_run
from xpushare.transport.kubectl import Kubectl
from xpushare.transport.local import LocalHost

pytestmark = [pytest.mark.lab]
SETTINGS = LeaseSettings(renew_s=10, stale_s=60)


@pytest.fixture
def kubectl(tmp_path: Path) -> Iterator[Kubectl]:
    binary = require_kube_lab()
    store = Store()
    api = ApiServer(store, "127.0.0.1", 0, logs_dir=tmp_path / "logs")
    store.create("namespaces", "", {"metadata": {"name": "gpu-test"}, "status": {"phase": "Active"}})
    config = tmp_path / "kubeconfig"
    config.write_text("apiVersion: v1\nkind: Config\n"
                      f"clusters:\n- name: lab\n  cluster:\n    server: {api.url}\n"
                      "users:\n- name: lab\n  user: {}\n"
                      "contexts:\n- name: lab\n  context:\n    cluster: lab\n    user: lab\n"
                      "current-context: lab\n")
    api.start()
    try:
        yield Kubectl(LocalHost(), kubectl=binary, kubeconfig=str(config), context="lab", namespace="gpu-test")
    finally:
        api.stop()


def test_lease_store_through_kubectl(kubectl: Kubectl) -> None:
    clock = [datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)]
    store = KubeLeaseStore(kubectl, now=lambda: clock[0])
    assert store.read() is None and live_run(kubectl, SETTINGS) is None
    first, second = lease.new_holder("run-a"), lease.new_holder("run-b")
    assert store.create(first, SETTINGS)
    assert not store.create(second, SETTINGS)  # 409 AlreadyExists
    doc = kubectl.get_json(["get", "leases", "xpushare-run"])
    assert doc["spec"]["holderIdentity"] == f"{first.user}@{first.machine} run-a"
    assert doc["spec"]["leaseDurationSeconds"] == 60 and doc["spec"]["renewTime"].endswith("Z")
    clock[0] += timedelta(seconds=30)
    seen = store.read()
    assert seen is not None and seen.holder == first and seen.age_s == 30
    assert live_run(kubectl, SETTINGS) is None  # by the real clock, renewed back in 2026-01-01: stale
    assert live_run(kubectl, LeaseSettings(renew_s=1, stale_s=1e10)) == "run-a"
    assert store.renew(first, SETTINGS) and not store.renew(second, SETTINGS)
    renewed = store.read()
    assert renewed is not None and renewed.age_s == 0 and renewed.version != seen.version
    assert not store.take(second, SETTINGS, seen)  # an old resourceVersion
    assert store.take(second, SETTINGS, renewed)
    assert store.read().holder == second  # type: ignore[union-attr]
    assert kubectl.get_json(["get", "leases", "xpushare-run"])["spec"]["leaseTransitions"] == 1
    store.release(first)  # not ours any more: stays
    assert store.read() is not None
    store.release(second)
    assert store.read() is None


def test_replace_with_a_stale_resource_version_is_a_conflict(kubectl: Kubectl) -> None:
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm1", "labels": {"xpushare/run-id": "a"}},
            "data": {"k": "1"}}
    created = json.loads(kubectl.run(["create", "-f", "-", "-o", "json"], stdin=json.dumps(body)).stdout)
    with pytest.raises(KubeAlreadyExists):
        kubectl.run(["create", "-f", "-"], stdin=json.dumps(body))
    rv = created["metadata"]["resourceVersion"]
    update = {**body, "metadata": {**body["metadata"], "resourceVersion": rv}, "data": {"k": "2"}}
    kubectl.run(["replace", "-f", "-"], stdin=json.dumps(update))
    assert kubectl.get_json(["get", "configmap", "cm1"])["data"] == {"k": "2"}
    with pytest.raises(KubeConflict):
        kubectl.run(["replace", "-f", "-"], stdin=json.dumps({**update, "data": {"k": "3"}}))
    # Run-start cleanup's selector while run "a" holds the lease: its objects stay, the rest go.
    kubectl.delete("xpushare/run-id notin (a)", kind="pods,configmaps")
    assert kubectl.get_json(["get", "configmap", "cm1"])["data"] == {"k": "2"}
    assert "configmap/cm1" in kubectl.delete("xpushare/run-id", kind="pods,configmaps").deleted
