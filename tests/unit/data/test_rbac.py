"""The shipped RBAC manifest (xpushare/data/manifests/rbac/xpushare-tester.yaml) grants every API request the
Kubernetes backend, the run lease and ``invoke clean`` make, and nothing cluster-wide that they do not need.

The kubectl calls are not listed by hand: the backend runs against a recording master (no cluster), and each
kubectl argv it sends is turned into the API requests kubectl makes for it (verb, API group, resource,
namespace), which the manifest's ClusterRole or the Role of that namespace must allow.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from xpushare.backends import k8s_harvest, leftovers
from xpushare.backends.base import CaseContext
from xpushare.backends.k8s import K8sBackend
from xpushare.data import manifests_dir
from xpushare.inventory import schema
from xpushare.model.errors import XpushareError
from xpushare.model.lease import Holder, LeaseSettings
from xpushare.model.workload import WorkloadSpec
from xpushare.transport.base import CommandResult
from xpushare.transport.kube_lease import HOLDER_ANNOTATION, KubeLeaseStore
from xpushare.transport.kubectl import Kubectl

MANIFEST = manifests_dir() / "rbac" / "xpushare-tester.yaml"
SUT_NS = "xpushare-system"
INV = """
clusters:
  c1:
    mode: k8s
    sut: xpushare
    hosts:
      m: {address: 127.0.0.1, roles: [master]}
    params: {pod_image: "img:1"}
"""
HOLDER = Holder("r1", "u", "m", 1, "2026-11-28T00:00:00Z", "tok")

#: kubectl's resource words -> (API group, resource)
RESOURCES = {
    "pod": ("", "pods"), "pods": ("", "pods"), "configmap": ("", "configmaps"), "configmaps": ("", "configmaps"),
    "namespace": ("", "namespaces"), "namespaces": ("", "namespaces"), "node": ("", "nodes"), "nodes": ("", "nodes"),
    "serviceaccount": ("", "serviceaccounts"), "daemonset": ("apps", "daemonsets"),
    "daemonsets": ("apps", "daemonsets"), "leases.coordination.k8s.io": ("coordination.k8s.io", "leases"),
    "Pod": ("", "pods"), "ConfigMap": ("", "configmaps"), "Namespace": ("", "namespaces"),
    "Lease": ("coordination.k8s.io", "leases"),
}
CLUSTER_SCOPED = {"namespaces", "nodes"}
Need = tuple[str, str, str, str | None]  # verb, group, resource, namespace (None: cluster-wide)


class RecordingMaster:
    """The master: records kubectl's argv and stdin, answers reads with empty lists or the held lease."""

    name = "m"
    spawn_dir = "/tmp"

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], str | None]] = []

    def run(self, argv: list[str], *, stdin: str | None = None, **_: Any) -> CommandResult:
        self.calls.append((list(argv), stdin))
        out = ""
        if "leases.coordination.k8s.io" in argv and "get" in argv:
            out = json.dumps({"kind": "Lease", "metadata": {"resourceVersion": "1", "annotations": {
                HOLDER_ANNOTATION: HOLDER.to_json()}}, "spec": {}})
        elif "get" in argv and "namespace" in argv:  # none of the run's namespaces exists yet
            return CommandResult("m", tuple(argv), "", 'Error from server (NotFound): namespaces "x" not found', 1, 0.0)
        elif "get" in argv and "-o" in argv and argv[argv.index("-o") + 1] == "json":
            out = json.dumps({"kind": "List", "items": []})
        return CommandResult("m", tuple(argv), out, "", 0, 0.0)

    def close(self) -> None:
        pass


def needs(argv: list[str], stdin: str | None) -> Iterator[Need]:
    """The API requests kubectl makes for ``argv`` (kubectl's global flags first, as Kubectl.argv writes them)."""
    args = argv[argv.index("--request-timeout") + 2:]
    ns: str | None = None
    if args[:1] == ["-n"]:
        ns, args = args[1], args[2:]
    verb, rest = args[0], args[1:]

    def scoped(kind: str, namespace: str | None) -> tuple[str, str, str | None]:
        group, resource = RESOURCES[kind]
        return group, resource, None if resource in CLUSTER_SCOPED else namespace

    if verb in ("apply", "create", "replace"):
        for doc in yaml.safe_load_all(stdin or ""):
            group, resource, where = scoped(doc["kind"], doc["metadata"].get("namespace") or ns)
            verbs = {"apply": ("get", "create", "patch"), "create": ("create",), "replace": ("update",)}[verb]
            yield from ((v, group, resource, where) for v in verbs)
    elif verb == "get":
        every = "-A" in rest
        for kind in rest[0].split(","):
            group, resource, where = scoped(kind, None if every else ns)
            named = len(rest) > 1 and not rest[1].startswith("-")
            yield ("get" if named else "list", group, resource, where)
    elif verb == "delete":
        for kind in rest[0].split(","):
            group, resource, where = scoped(kind, ns)
            yield ("delete", group, resource, where)
            if rest[1] == "-l":
                yield ("list", group, resource, where)
            if "--wait=true" in rest:
                yield ("watch", group, resource, where)
    elif verb in ("annotate", "label"):
        yield from (("get", "", "pods", ns), ("patch", "", "pods", ns))
    elif verb == "logs":
        yield ("get", "", "pods/log", ns)
        yield ("list" if "-l" in rest else "get", "", "pods", ns)
    elif verb in ("rollout", "set"):
        kind = rest[1].split("/")[0]
        group, resource, where = scoped(kind, ns)
        yield from (("get", group, resource, where), ("watch" if rest[0] == "status" else "patch", group, resource,
                                                      where))
    elif verb in ("cordon", "uncordon", "drain"):
        yield from (("get", "", "nodes", None), ("patch", "", "nodes", None))
        if verb == "drain":
            yield from (("list", "", "pods", None), ("create", "", "pods/eviction", None),
                        ("get", "apps", "daemonsets", None))
    else:
        raise AssertionError(f"unknown kubectl verb in {argv}")


def allowed(docs: list[dict[str, Any]], need: Need) -> bool:
    verb, group, resource, ns = need
    for doc in docs:
        if doc["kind"] not in ("ClusterRole", "Role"):
            continue
        if doc["kind"] == "Role" and doc["metadata"]["namespace"] != ns:
            continue
        for rule in doc["rules"]:
            if group in rule["apiGroups"] and resource in rule["resources"] and verb in rule["verbs"]:
                return True
    return False


def exercised() -> list[tuple[list[str], str | None]]:
    """Every kubectl call of a run: prepare, a case with two tenants, the KubeAccess operations, harvest, cleanup,
    the lease and ``invoke clean``."""
    cluster = schema.parse(INV).cluster("c1")
    b = K8sBackend(cluster)
    master = RecordingMaster()
    b.master = master  # type: ignore[assignment]
    b.kubectl.host = master
    b.gpu_specs = {}
    b.prepare_run("r1")
    with tempfile.TemporaryDirectory() as tmp:
        b.case, b.case_id = CaseContext(Path(tmp), "FUNC-013"), "FUNC-013"
        b.start_pods([WorkloadSpec("p", "mem_probe", memory_limit="1Gi"), WorkloadSpec("p", "mem_probe", tenant="a")])
        with contextlib.suppress(XpushareError):  # the recording master has no pods: the wait's request counts
            b.wait_terminal(["p"], 0)
        b.annotator.annotate("p", {"memory": "2Gi"})
        b.read_log("p")
        b.case_pods()
        b.kube.delete_pod("p")
        b.delete_case_pods(5)
        since = datetime.now(timezone.utc)
        k8s_harvest.scheduler_logs(Path(tmp), master, "", b.kubectl, b.names, since, [])  # type: ignore[arg-type]
        k8s_harvest.cluster_snapshot(Path(tmp), b.kubectl, [])
        for ds in (b.names.scheduler_daemonset, b.names.device_plugin_daemonset):
            b.kube.restart_daemonset(ds)
            b.kube.await_daemonset(ds, 5)
            b.kube.daemonset_status(ds)
            b.kube.daemonset_env(ds, "X")
            b.kube.set_daemonset_env(ds, "X", "1")
        b.kube.scheduler_log()
        b.kube.sut_pods(b.names.scheduler_label)
        b.kube.sut_logs(b.names.scheduler_label)
        b.kube.previous_log("s")
        b.kube.nodes()
        b.kube.node("n")
        b.kube.drain_node("n", timeout_s=5)
        b.kube.uncordon_node("n")
        b.cleanup()
        b.close()
    home = Kubectl(master, namespace=cluster.home_namespace)
    store = KubeLeaseStore(home)
    settings = LeaseSettings.from_params({})
    store.create(HOLDER, settings)
    store.renew(HOLDER, settings)
    store.release(HOLDER)
    home.delete(leftovers.kube_selector("r1"), kind="namespaces", wait=False, namespace=None)
    home.delete(leftovers.kube_selector("r1"), kind="pods", wait=True, timeout_s=5)
    home.delete(leftovers.kube_selector("r1"), kind="configmaps", wait=True, timeout_s=5)
    return [(argv, stdin) for argv, stdin in master.calls if argv[0] == "kubectl"]


def test_the_manifest_grants_every_request_of_a_run() -> None:
    docs = [d for d in yaml.safe_load_all(MANIFEST.read_text(encoding="utf-8")) if d]
    calls = exercised()
    assert len(calls) > 30
    seen = {n for argv, stdin in calls for n in needs(argv, stdin)}
    missing = sorted((n for n in seen if not allowed(docs, n)), key=str)
    assert not missing, missing
    # the run's own namespaces were created, and pods went into them: the reason the pod rules are cluster-wide
    assert ("create", "", "namespaces", None) in seen and ("create", "", "pods", "xpushare-r1-a") in seen


def test_the_manifest_grants_nothing_it_does_not_use() -> None:
    """Least privilege: no wildcard, no secrets, no RBAC objects, no escalation verbs."""
    docs = [d for d in yaml.safe_load_all(MANIFEST.read_text(encoding="utf-8")) if d]
    rules = [r for d in docs if d["kind"] in ("ClusterRole", "Role") for r in d["rules"]]
    assert rules
    for rule in rules:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"] and "*" not in rule["apiGroups"]
        assert not {"secrets", "roles", "rolebindings", "clusterroles", "clusterrolebindings"} & set(rule["resources"])
        assert not {"bind", "escalate", "impersonate", "deletecollection"} & set(rule["verbs"])
    roles = {(d["kind"], d["metadata"].get("namespace")) for d in docs if d["kind"] in ("Role", "ClusterRole")}
    assert roles == {("ClusterRole", None), ("Role", SUT_NS), ("Role", "default")}
