"""Kubernetes mode: workloads are pods created with kubectl on the cluster's master; evidence from
kubectl, the GPU nodes (over SSH) and the scheduler's metrics endpoint.

Evidence of a case (seed 000 sections 13 and 17.1; issue "Evidence in k8s mode"):

* ``pods/<pod>.log`` (``kubectl logs --timestamps --tail=-1``, one call for all pods), ``pods.json``;
* ``scheduler.log``: ``kubectl logs -f`` of the scheduler pods started in the background on the master
  for the whole case and pulled at the end (fallback: a ``--since-time`` fetch); ``device-plugin.log``;
* ``metrics.txt`` / ``metrics_health.txt``: ``curl`` from the GPU node to the scheduler pod **on the node
  where the case's pods ran** (``<pod IP>:9402``);
* ``scheduler_proc.txt``: the scheduler's ``/proc/<pid>/status`` and FD count, read on that node;
* ``remote_<node>_nvidia_smi.txt`` and ``remote_<node>_dmon.txt`` (dmon for the case's whole duration);
* ``cluster_snapshot.txt``.

``pods.json`` records no GPU: only the scheduler's ``Registered client ... on GPU <uuid> with Pod name =
...`` lines tell which GPU a pod got, and the pod -> GPU mapping is derived from them when the evidence is
loaded for judging (:mod:`xpushare.evidence.store`, which also writes ``gpu_mapping.txt``).
"""

from __future__ import annotations

import contextlib
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from xpushare.backends import harvest_faults, k8s_harvest, k8s_manifests
from xpushare.backends.base import (
    CAP_ANNOTATIONS,
    CAP_CLIENT_LIBRARY,
    CAP_KUBERNETES,
    CAP_SCHEDULER_PROCESS,
    CAP_TENANT_NAMESPACES,
    Backend,
    BackendParts,
    CaseContext,
    run_spawn_prefix,
)
from xpushare.backends.harvest_faults import note
from xpushare.backends.k8s_access import K8sAccess, K8sAnnotator, K8sPlacement, K8sRotation, K8sScheduler
from xpushare.backends.k8s_names import (
    ATTEMPT_LABEL,
    MANAGED_BY,
    RUN_ID_LABEL,
    dns1123,
    label_value,
    run_labels,
    run_namespace,
    tenant_namespace,
)
from xpushare.data import manifests_dir, workloads_dir
from xpushare.evidence import events, gpu_health
from xpushare.evidence.metrics_target import NodeCapture, sampler_capture
from xpushare.evidence.store import pod_key
from xpushare.inventory.schema import MODE_K8S, ClusterSpec
from xpushare.inventory.sut import sut_names
from xpushare.model.atomic_file import atomic_write_text
from xpushare.model.errors import HostUnreachable, TransportError, XpushareError
from xpushare.model.lease import LeaseSettings
from xpushare.model.unreached import Unreached
from xpushare.model.workload import WorkloadRecord, WorkloadSpec, write_pod_records
from xpushare.transport import interrupt, kube_lease, reach
from xpushare.transport.base import Host
from xpushare.transport.cluster_kubectl import kubectl_for, master_spec
from xpushare.transport.hosts import connect
from xpushare.transport.kube_errors import KubeError, KubeNotFound, KubePodStuck, KubeTimeout
from xpushare.transport.kube_objects import Pod
from xpushare.transport.kube_retry import DEFAULT_BACKOFF_S, DEFAULT_RETRIES
from xpushare.transport.manifest_yaml import dump_manifests

MANIFESTS = manifests_dir()
WORKLOADS = workloads_dir()

#: Defaults of the k8s parameters (a cluster's inventory ``params`` override them).
K8S_DEFAULTS: dict[str, Any] = {
    "pod_image": "registry.cn-hangzhou.aliyuncs.com/lgytest1/xpushare:pytorch-add-small-5fed3e5b",
    "pod_python": "python3",
    "pod_workload_dir": "/opt/xpushare/workloads",
    "pod_workload_configmap": True,
    "poll_s": 2.0,
    # waits for pods back off from poll_s to poll_max_s while nothing changes (Kubectl.wait_pods)
    "poll_max_s": 10.0,
    "metrics_port": 9402,
    "vgpus_per_gpu": 10,
    "kubectl_request_timeout_s": 30,  # kubectl's --request-timeout: an API server that does not answer in time
    # reads retried after a 5xx/429 or a lost connection, the first after the backoff, doubling (kube_retry)
    "kubectl_read_retries": DEFAULT_RETRIES,
    "kubectl_retry_backoff_s": DEFAULT_BACKOFF_S,
    # argv of nvidia-smi on the GPU hosts ("{host}" is the inventory host name), for hosts whose nvidia-smi is not
    # on the login PATH or is a stand-in (the test lab's simulated GPUs); None: "nvidia-smi" where it is found
    "node_nvidia_smi": None,
    # the node sampler on each GPU node (NVML per process, the pods' pids by HOSTNAME): its interpreter (None: the
    # cluster's python) and extra environment, where a node's driver library is not on the SSH session's default
    # path ("{node}" is the node's name)
    "node_sampler_python": None,
    "node_sampler_env": {},
    # extra environment of the GPU health capture on each GPU node (evidence/gpu_health: nvidia-smi's health query
    # and the kernel log), where the node's driver or kernel log is not what its SSH sessions see ("{node}" is the
    # node's name)
    "node_health_env": {},
}


#: How long a new namespace may take to get its ``default`` ServiceAccount (a pod created before it is refused).
SERVICE_ACCOUNT_WAIT_S = 60.0
#: How long the run waits for a terminating namespace of its own name to be gone before it makes it again.
NAMESPACE_GONE_WAIT_S = 300.0


def owns_namespaces(cluster: ClusterSpec) -> bool:
    """Whether the tool owns the run's namespace on ``cluster`` (the inventory names no fixed ``namespace``):
    only then tenants get namespaces of their own."""
    return cluster.namespace is None


def k8s_capabilities(cluster: ClusterSpec) -> frozenset[str]:
    """What a k8s backend on ``cluster`` can do, from its inventory alone (for dry runs): the capabilities of
    the parts :class:`K8sBackend` builds (:attr:`BackendParts.capabilities`)."""
    caps = {CAP_KUBERNETES, CAP_ANNOTATIONS, CAP_CLIENT_LIBRARY, CAP_SCHEDULER_PROCESS}
    if owns_namespaces(cluster):
        caps.add(CAP_TENANT_NAMESPACES)
    return frozenset(caps)


class K8sBackend(Backend):
    """Pods on a Kubernetes cluster running nvshare / xpushare. Its parts (:attr:`parts`) are views of it
    (:mod:`xpushare.backends.k8s_access`): the :class:`KubeAccess`, the scheduler, annotations, placement and
    evidence rotation; every one is there on every Kubernetes cluster.

    Namespaces (docs/config.md §namespaces): with no ``namespace`` in the inventory the run's pods live in a
    namespace of its own (:func:`~xpushare.backends.k8s_names.run_namespace`) and each tenant's in one beside it
    (:func:`~xpushare.backends.k8s_names.tenant_namespace`), created labelled with the run id and deleted when
    the run ends; a fixed ``namespace`` is used as it is, never created or deleted.
    """

    mode = MODE_K8S

    def __init__(self, cluster: ClusterSpec) -> None:
        self.cluster = cluster
        self.namespace = cluster.home_namespace
        """The run's namespace: the inventory's fixed one, or (after :meth:`prepare_run`) the run's own."""
        self.owned_namespaces: list[str] = []
        """Namespaces this backend created (the run's own and the tenants'), deleted by :meth:`close`."""
        self.names = sut_names(cluster.generation)
        self.params = {**K8S_DEFAULTS, **{k: v for k, v in cluster.params.items() if k in K8S_DEFAULTS}}
        self.master_spec = master_spec(cluster)
        self.master = connect(self.master_spec)
        self.kubectl = kubectl_for(cluster, self.master,
                                   request_timeout_s=float(self.params["kubectl_request_timeout_s"]))
        self.gpu_specs = {h.name: h for h in cluster.by_role("gpu")}
        self.gpu_hosts: dict[str, Host] = {}
        self.node_host: dict[str, str] = {}
        self.samplers: list[NodeCapture] = []
        """The node samplers of the current case (started by :meth:`begin_case`, pulled back at harvest)."""
        self.smi_hosts: set[str] = set()
        self.run_id = ""
        self.case_id = ""
        self.case_start = datetime.now(timezone.utc)
        self.prefix = ""
        self.stream_name = ""
        self.pods: list[WorkloadSpec] = []
        self.health_nodes: list[str] = []
        """Nodes whose GPU health was captured before the current case (captured again at harvest)."""
        self.dead: dict[str, HostUnreachable] = {}
        """The GPU hosts whose SSH did not answer at :meth:`prepare_run` (their nodes' evidence cannot be read)."""
        self.kube = K8sAccess(self)
        """The Kubernetes-only operations (:attr:`BackendParts.kubernetes`)."""
        self.annotator = K8sAnnotator(self)
        """The pod annotations (:attr:`BackendParts.annotations`)."""
        self._parts = BackendParts(
            placement=K8sPlacement(self), rotation=K8sRotation(self), kubernetes=self.kube,
            scheduler=K8sScheduler(self.kube), annotations=self.annotator, client_library=True,
            tenant_namespaces=owns_namespaces(cluster))

    @property
    def parts(self) -> BackendParts:
        return self._parts

    def unreachable(self) -> list[Unreached]:
        return [Unreached.of(error, "gpu") for error in self.dead.values()]

    def gpu_host(self, name: str) -> Host:
        """The connection to GPU host ``name`` (opened on first use, kept until :meth:`close`)."""
        if name not in self.gpu_hosts:
            self.gpu_hosts[name] = connect(self.gpu_specs[name])
        return self.gpu_hosts[name]

    def dmon_spawn(self, host: str) -> str:
        """The spawn name of the case's dmon stream on GPU host ``host``; it names the host, so hosts that share one
        home directory (the test lab's, several sshd on one machine) never stop each other's stream."""
        return f"{self.prefix}-dmon-{host}"

    def nvidia_smi_argv(self, host: str, *args: str) -> list[str]:
        """argv of ``nvidia-smi *args`` on GPU host ``host``: the ``node_nvidia_smi`` parameter (``{host}``
        replaced by the host's name) when set, else ``nvidia-smi``."""
        configured = self.params["node_nvidia_smi"]
        base = [str(word).replace("{host}", host) for word in configured] if configured else ["nvidia-smi"]
        return [*base, *args]

    def case_pods(self) -> list[WorkloadRecord]:
        return [self._record(p) for p in self.list_case_pods()]

    def pod_namespace(self, tenant: str | None = None) -> str:
        if tenant is None:
            return self.namespace
        return tenant_namespace(self.namespace, tenant)

    def case_namespaces(self) -> list[str]:
        """The namespaces of the current case's pods: the run's, and those of the tenants it started."""
        return sorted({self.namespace, *(self.pod_namespace(p.tenant) for p in self.pods)})

    def list_case_pods(self) -> list[Pod]:
        """The current case's pods in every namespace it uses (one kubectl call a namespace)."""
        return [p for ns in self.case_namespaces() for p in self.kubectl.list_pods(self.selector(), namespace=ns)]

    def delete_case_pods(self, timeout_s: float) -> None:
        for ns in self.case_namespaces():
            self.kubectl.delete(self.selector(), wait=True, timeout_s=timeout_s, namespace=ns)

    # -- helpers -----------------------------------------------------------------------------------

    def selector(self, case_id: str | None = None) -> str:
        """The pods of a case of this run; of the case's current attempt (its ``xpushare/attempt`` label) when
        ``case_id`` is None: pods an earlier, dead attempt left are never this attempt's."""
        sel = f"{MANAGED_BY},xpushare/run-id={label_value(self.run_id)}"
        sel = f"{sel},xpushare/case={label_value((case_id or self.case_id).lower())}"
        return sel if case_id is not None or self.case is None else f"{sel},{ATTEMPT_LABEL}={self.case.attempt}"

    # -- run level ---------------------------------------------------------------------------------
    def prepare_run(self, run_id: str) -> None:
        """Clear earlier runs' pods, map nodes to GPU hosts and probe each GPU host's SSH: one that does not answer
        is recorded (:meth:`unreachable`, an :class:`~xpushare.transport.reach.UnreachableHost` in its place) and
        a case with a pod on its node is ERROR naming it (:meth:`harvest`). Raises :class:`HostUnreachable` when
        the master does not answer."""
        self.run_id = run_id
        self.dead = reach.probe([self.gpu_host(name) for name in self.gpu_specs])
        for name, error in self.dead.items():
            self.gpu_hosts.pop(name).close()
            self.gpu_hosts[name] = reach.UnreachableHost(error)
        # Leftovers carrying our label only, and never those of the live run holding the cluster's lease (which
        # lives in the home namespace, where the kubectl points until the run's namespace exists).
        live = kube_lease.live_run(self.kubectl, LeaseSettings.from_params(self.cluster.params))
        spare = f",{RUN_ID_LABEL} notin ({label_value(live)})" if live and live != run_id else ""
        self.kubectl.delete(MANAGED_BY + spare, kind="pods,configmaps", wait=True, timeout_s=120)
        if self.cluster.namespace is None:
            # earlier runs' namespaces (a resumed run keeps its own: same id, same name)
            keep = sorted({label_value(r) for r in (live, run_id) if r})
            self.kubectl.delete(f"{MANAGED_BY},{RUN_ID_LABEL} notin ({','.join(keep)})", kind="namespaces",
                                wait=False, namespace=None)
            self.namespace = run_namespace(run_id)
            self._create_namespace(self.namespace)
        self.kubectl.namespace = self.namespace
        by_address: dict[str, str] = {}
        for spec in self.gpu_specs.values():
            by_address[spec.address or spec.name] = spec.name
        for node in self.kubectl.list_nodes():
            if node.name in self.gpu_specs:
                self.node_host[node.name] = node.name
            elif node.internal_ip and node.internal_ip in by_address:
                self.node_host[node.name] = by_address[node.internal_ip]
        for name in self.gpu_specs:
            if name in self.dead:
                continue
            if self.params["node_nvidia_smi"]:  # configured: no need to look for it
                self.smi_hosts.add(name)
                continue
            try:
                res = self.gpu_host(name).run(["sh", "-c", "command -v nvidia-smi"], timeout=30)
            except TransportError as exc:
                print(f"warning: {exc}", file=sys.stderr)
                continue
            if res.ok:
                self.smi_hosts.add(name)
        if self.params["pod_workload_configmap"]:
            self._apply_workloads_configmap()

    def _create_namespace(self, name: str) -> None:
        """Create namespace ``name`` labelled with the run (applied: a resumed run finds its own) and wait until
        its ``default`` ServiceAccount exists (the API server refuses pods before; a controller adds it)."""
        if name in self.owned_namespaces:
            return
        self._await_namespace_gone(name)
        doc = {"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "xpushare",
                                                     **run_labels(self.run_id)}}}
        self.kubectl.apply(dump_manifests(doc), namespace=None)
        self.owned_namespaces.append(name)
        deadline = time.monotonic() + SERVICE_ACCOUNT_WAIT_S
        while True:
            try:
                self.kubectl.run(["get", "serviceaccount", "default", "-o", "name"], namespace=name)
                return
            except KubeError as exc:
                if time.monotonic() >= deadline:
                    raise XpushareError(f"namespace {name}: no default ServiceAccount after "
                                        f"{SERVICE_ACCOUNT_WAIT_S:g}s ({exc})") from None
            interrupt.sleep(1.0)

    def _await_namespace_gone(self, name: str) -> None:
        """Wait (up to :data:`NAMESPACE_GONE_WAIT_S`) while namespace ``name`` is terminating: the run's own, deleted
        at the end of an earlier part of the run (``--resume``, a legacy scenario after another) takes no pods until
        it is gone."""
        deadline = time.monotonic() + NAMESPACE_GONE_WAIT_S
        while True:
            try:
                doc = self.kubectl.get_json(["get", "namespace", name], namespace=None)
            except KubeNotFound:
                return
            if not (doc.get("metadata") or {}).get("deletionTimestamp"):
                return
            if time.monotonic() >= deadline:
                raise XpushareError(f"namespace {name} is still terminating after {NAMESPACE_GONE_WAIT_S:g}s")
            interrupt.sleep(2.0)

    def _configmap_name(self) -> str:
        return dns1123(f"xpushare-workloads-{self.run_id}")

    def _apply_workloads_configmap(self) -> None:
        doc = yaml.safe_load((MANIFESTS / "workloads-configmap.yaml").read_text(encoding="utf-8"))
        doc["metadata"]["name"] = self._configmap_name()
        doc["metadata"]["labels"].update(run_labels(self.run_id))
        doc["data"] = {p.name: p.read_text(encoding="utf-8") for p in sorted(WORKLOADS.glob("*.py"))}
        for ns in [self.namespace, *(n for n in self.owned_namespaces if n != self.namespace)]:
            doc["metadata"]["namespace"] = ns
            self.kubectl.apply(dump_manifests(doc), namespace=ns)

    # -- case level --------------------------------------------------------------------------------
    def begin_case(self, case_dir: Path, case_id: str) -> CaseContext:
        self.case = CaseContext(case_dir, case_id)
        self.case_id = case_id
        self.case_start = datetime.now(timezone.utc)
        self.pods = []
        # exact run prefix and the attempt's token: a dead attempt's streams and files are never this one's
        self.prefix = re.sub(r"[^A-Za-z0-9_.-]", "-", f"{run_spawn_prefix(self.run_id)}{case_id}-{self.case.attempt}")
        self.stream_name = f"{self.prefix}-schedlog"
        argv = self.kubectl.logs_follow_argv(
            self.names.scheduler_label, self.case_start, namespace=self.names.namespace
        )
        try:
            self.master.spawn(self.stream_name, argv)
        except TransportError as exc:
            print(f"warning: scheduler log stream not started ({exc}); falling back to --since-time", file=sys.stderr)
            self.stream_name = ""
        for name in sorted(self.smi_hosts):
            try:
                self.gpu_host(name).spawn(self.dmon_spawn(name), self.nvidia_smi_argv(name, "dmon", "-s", "u", "-d",
                                                                                        "1"))
            except TransportError as exc:
                print(f"warning: {exc}", file=sys.stderr)
        self.health_nodes = self._capture_health(case_dir, "before", sorted(self.node_host))
        self.samplers = []
        for node, host_name in sorted(self.node_host.items()):
            if host_name not in self.gpu_specs:
                continue
            try:  # NVML's view of each pod's process: the second source of placement (evidence/nvml_placement)
                python = str(self.params["node_sampler_python"] or self.cluster.python)
                # one name a node: the hosts of a cluster may share a home directory, and so a spawn directory
                sampler = sampler_capture(self.gpu_host(host_name), f"{self.prefix}-sampler-{node}", python, node,
                                          env=dict(self.params["node_sampler_env"] or {}))
                sampler.start()
                self.samplers.append(sampler)
            except TransportError as exc:
                print(f"warning: node sampler on {node} not started ({exc})", file=sys.stderr)
        return self.case

    def _capture_health(self, case_dir: Path, tag: str, nodes: list[str]) -> list[str]:
        """The GPU health capture ``tag`` of each of ``nodes`` that maps to a GPU host (evidence/gpu_health);
        returns the nodes captured. A host that cannot be reached is noted in ``harvest-errors.txt`` (and printed
        as a warning before the case), as the other node captures are (:mod:`~xpushare.backends.k8s_harvest`);
        the ``gpu_health`` check then names the node as not observable."""
        done: list[str] = []
        for node in nodes:
            host_name = self.node_host.get(node)
            if host_name not in self.gpu_specs:
                continue
            env = {k: str(v).replace("{node}", node) for k, v in dict(self.params["node_health_env"] or {}).items()}
            try:
                gpu_health.capture(self.gpu_host(host_name), case_dir, node, tag, smi=self.nvidia_smi_argv(host_name),
                                   env=env)
                done.append(node)
            except TransportError as exc:  # as the other node captures: noted (the check names it not observable)
                if tag == "before":
                    print(f"warning: GPU health of node {node} not captured ({exc})", file=sys.stderr)
                note(case_dir, f"node {node}: GPU health {tag}: {exc}")
        return done

    def render_pod(self, spec: WorkloadSpec) -> dict[str, Any]:
        """The pod manifest of a :class:`WorkloadSpec` (:func:`xpushare.backends.k8s_manifests.workload_pod`)."""
        node = spec.node
        if not node and spec.same_gpu_as:  # the GPU of another pod of the case: its node
            other = next((p for p in self.pods if p.name == spec.same_gpu_as and p.tenant == spec.tenant), None)
            node = other.node if other is not None else None
        pods = k8s_manifests.WorkloadPods(
            names=self.names, image=str(self.params["pod_image"]), python=str(self.params["pod_python"]),
            workload_dir=str(self.params["pod_workload_dir"]),
            configmap=self._configmap_name() if self.params["pod_workload_configmap"] else None)
        return k8s_manifests.render(k8s_manifests.workload_pod(
            spec, pods, namespace=self.pod_namespace(spec.tenant), run_id=self.run_id, case_id=self.case_id,
            attempt=self.case.attempt if self.case is not None else None, node=node))

    def start_pods(self, pods: Sequence[WorkloadSpec]) -> None:
        case_dir = self.case_dir
        tenants = sorted({p.tenant for p in pods if p.tenant is not None})
        if tenants and not self._parts.tenant_namespaces:
            raise XpushareError(f"tenants {', '.join(tenants)}: no namespace of their own on a cluster with a "
                                f"fixed namespace ({self.namespace})")
        for tenant in tenants:
            if self.pod_namespace(tenant) not in self.owned_namespaces:
                self._create_namespace(self.pod_namespace(tenant))
                if self.params["pod_workload_configmap"]:
                    self._apply_workloads_configmap()
        docs = []
        for spec in pods:
            self.pods.append(spec)
            docs.append(self.render_pod(spec))
        text = dump_manifests(*docs)
        atomic_write_text(case_dir / "manifests.yaml", text)
        # every pod names its namespace (tenants' differ): kubectl refuses an explicit -n one of them differs from
        self.kubectl.apply(text, namespace=None)

    def _record(self, pod: Pod) -> WorkloadRecord:
        spec = next((p for p in self.pods if dns1123(p.name) == pod.name
                     and self.pod_namespace(p.tenant) == (pod.namespace or self.namespace)), None)
        return WorkloadRecord(
            name=pod.name,
            namespace=pod.namespace,
            phase=pod.phase,
            exit_code=pod.exit_code,
            node=pod.node,
            gpu=None,
            started=pod.started_at.timestamp() if pod.started_at else None,
            finished=pod.finished_at.timestamp() if pod.finished_at else None,
            spec=asdict(spec) if spec else {},
            log=f"pods/{pod.name}.log",
        )

    def _wait(self, case_dir: Path, names: Sequence[str], timeout_s: float, until: str) -> list[WorkloadRecord]:
        wanted = {dns1123(n) for n in names}
        # a name names one pod in each namespace that has it (tenants' pods may share a name)
        count = sum(1 for p in self.pods if dns1123(p.name) in wanted) or len(wanted)
        namespaces = self.case_namespaces()
        interrupt.check()
        try:
            pods = self.kubectl.wait_pods(
                self.selector(), until=until, count=count, timeout_s=timeout_s,  # type: ignore[arg-type]
                poll_s=float(self.params["poll_s"]), poll_max_s=float(self.params["poll_max_s"]),
                sleep=interrupt.sleep,
                **({"namespace": namespaces[0]} if len(namespaces) == 1 else {"all_namespaces": True}),
            )
        except (KubeTimeout, KubePodStuck) as exc:
            pods = list(exc.pods)
        records = _keyed([self._record(p) for p in pods
                          if p.name in wanted and (p.namespace or self.namespace) in namespaces])
        write_pod_records(case_dir, records)
        gone = sorted(wanted - {p.name for p in pods})
        if gone:  # deleted behind the run's back, or lost with their node: nothing of them to judge
            raise XpushareError(f"pod(s) {', '.join(gone)} gone before they got {until} (deleted, or their node "
                                "went down)")
        return records

    def wait_terminal(self, names: Sequence[str], timeout_s: float) -> list[WorkloadRecord]:
        case_dir = self.case_dir
        records = self._wait(case_dir, names, timeout_s, "terminal")
        events.pod_phases(records, "terminal")
        return records

    def wait_running(self, names: Sequence[str], timeout_s: float) -> list[WorkloadRecord]:
        case_dir = self.case_dir
        records = self._wait(case_dir, names, timeout_s, "running")
        events.pod_phases(records, "running")
        return records

    def read_log(self, pod: str, tenant: str | None = None, *, timestamps: bool = False) -> str:
        try:
            return self.kubectl.logs(dns1123(pod), timestamps=timestamps, namespace=self.pod_namespace(tenant))
        except KubeError:
            return ""

    # -- evidence ----------------------------------------------------------------------------------
    def harvest(self) -> list[str]:
        """Store the case's evidence; each piece on its own, so that a fault in one (a lost connection, a
        kubectl timeout) loses only that piece. Raises :class:`HarvestIncomplete` (with the files stored) when
        a piece was lost to such a fault rather than absent (:mod:`xpushare.backends.harvest_faults`)."""
        case_dir = self.case_dir
        faults: list[str] = []
        files: list[str] = []
        records: list[WorkloadRecord] = []
        try:
            records = _keyed([self._record(p) for p in self.list_case_pods()])
            write_pod_records(case_dir, records)
            files.append("pods.json")
            for ns in sorted({r.namespace or self.namespace for r in records}):  # logs per namespace: one call each
                logs = self.kubectl.logs_by_pod(self.selector(), namespace=ns)
                for rec in records:
                    if (rec.namespace or self.namespace) == ns and rec.name in logs and rec.log:
                        path = case_dir / rec.log
                        path.parent.mkdir(parents=True, exist_ok=True)
                        atomic_write_text(path, logs[rec.name])
                        files.append(rec.log)
        except XpushareError as exc:
            harvest_faults.fault(case_dir, "pods", exc, faults)
        files += k8s_harvest.scheduler_logs(case_dir, self.master, self.stream_name, self.kubectl, self.names,
                                            self.case_start, faults)
        nodes = sorted({r.node for r in records if r.node})
        for node in nodes:  # the case's pods ran there, but nothing of that node can be read
            dead = self.dead.get(self.node_host.get(node) or "")
            if dead is not None:
                faults.append(f"node {node}: {dead.host}: {dead.describe()}")
        files += k8s_harvest.node_evidence(case_dir, self.kube, nodes, self.names, self.smi_hosts, self.dmon_spawn,
                                           self.nvidia_smi_argv)
        for sampler in self.samplers:
            files += sampler.stop(case_dir)
        self.samplers = []
        files += [gpu_health.file_name(node, "before") for node in self.health_nodes]
        files += [gpu_health.file_name(node, "after")
                  for node in self._capture_health(case_dir, "after", self.health_nodes)]
        files += k8s_harvest.cluster_snapshot(case_dir, self.kubectl, faults)
        return harvest_faults.complete(files, faults)

    def cleanup(self) -> None:
        case_dir = self.case_dir
        for ns in self.case_namespaces():
            try:
                result = self.kubectl.delete(self.selector(), wait=True, timeout_s=60, namespace=ns)
                if result.forced:
                    note(case_dir, f"cleanup: pods force-deleted: {', '.join(result.deleted)}")
            except KubeError as exc:
                note(case_dir, f"cleanup: {exc}")
        for name in sorted(self.smi_hosts):
            try:
                self.gpu_host(name).stop(self.dmon_spawn(name))
            except TransportError:
                continue
        for sampler in self.samplers:  # not harvested (an interrupted case): stop it, keep what it wrote
            sampler.stop(case_dir)
        self.samplers = []
        # The stream and dmon outputs were pulled into the case dir: remove them from the hosts.
        for host in [self.master, *(self.gpu_host(n) for n in sorted(self.smi_hosts))]:
            try:
                host.run(["sh", "-c", 'cd "$1" 2>/dev/null && rm -f -- "$2"-*', "sh", host.spawn_dir, self.prefix],
                         timeout=60)
            except TransportError:
                continue

    def close(self) -> None:
        if self.params["pod_workload_configmap"] and self.run_id and self.cluster.namespace is not None:
            with contextlib.suppress(KubeError, TransportError):
                self.kubectl.delete(name=self._configmap_name(), kind="configmap", wait=False)
        for ns in self.owned_namespaces:  # with whatever is left in them; only namespaces this run created
            with contextlib.suppress(KubeError, TransportError):
                self.kubectl.delete(name=ns, kind="namespace", wait=False, namespace=None)
        self.owned_namespaces = []
        for host in [self.master, *self.gpu_hosts.values()]:
            host.close()



def _keyed(records: list[WorkloadRecord]) -> list[WorkloadRecord]:
    """``records`` with each log path ``pods/<key>.log`` (:func:`~xpushare.evidence.store.pod_key`: pods of two
    namespaces with one name get ``pods/<namespace>/<name>.log``)."""
    for rec in records:
        rec.log = f"pods/{pod_key(rec, records)}.log"
    return records
