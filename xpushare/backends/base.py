"""What every backend (host processes, Kubernetes pods) offers a test case.

A case asks for workloads (:class:`~xpushare.model.workload.WorkloadSpec`), waits, changes limits, and leaves
evidence files in its case directory; the backend decides how a "pod" exists (a process on a GPU node, or a
Kubernetes pod). Its records (:class:`~xpushare.model.workload.WorkloadRecord`) are written to ``pods.json`` so
judgments never read live state.

:class:`Backend` is what every backend offers; what a cluster may lack is a part (:class:`BackendParts`), each a
small ABC (:class:`KubeAccess`, :class:`SchedulerControl`, :class:`Annotator`, :class:`Placement`,
:class:`EvidenceRotation`) or None. The capability names (``CAP_*``) are the premises' vocabulary, derived from
the parts (:attr:`BackendParts.capabilities`).
"""

from __future__ import annotations

import secrets
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from xpushare.model.errors import XpushareError
from xpushare.model.unreached import Unreached
from xpushare.model.workload import WorkloadRecord, WorkloadSpec

if TYPE_CHECKING:  # annotations only: judges import this module without the transport's SSH stack
    from xpushare.inventory.sut import SutNames
    from xpushare.transport.base import Host
    from xpushare.transport.kube_objects import DaemonSetStatus, Node, Pod

_P = TypeVar("_P")

#: Capabilities a case may require (its ``requires``); a backend has those its parts give.
CAP_KUBERNETES = "kubernetes"
CAP_CLIENT_LIBRARY = "client-library"
CAP_ANNOTATIONS = "annotations"
#: The backend puts each tenant's pods (:attr:`WorkloadSpec.tenant`) in a namespace of its own, which it creates and
#: removes: Kubernetes with a namespace per run (the inventory names no fixed ``namespace``). The premise
#: ``tenant-namespaces`` of the tenancy cases.
CAP_TENANT_NAMESPACES = "tenant-namespaces"
#: The backend can follow the SUT's scheduler: its process (``/proc``: RSS, FDs), its ``/healthz`` and ``/metrics``
#: (:meth:`SchedulerControl.scheduler_facts`), and restart it (:meth:`SchedulerControl.restart_scheduler`).
CAP_SCHEDULER_PROCESS = "scheduler-process"


@dataclass(frozen=True)
class SchedulerProcess:
    """One scheduler process as ``/proc`` shows it: pid, VmRSS (bytes), open FDs and threads (None: unreadable)."""

    pid: int
    rss_bytes: int | None
    fd_count: int | None
    threads: int | None


@dataclass(frozen=True)
class SchedulerFacts:
    """The scheduler serving one node (Kubernetes node name, or GPU host name in host mode), seen now.

    ``processes``: its processes (empty: not running); ``instance``: what changes when the scheduler is
    replaced (k8s: the pod uid; host: the pid of the oldest process), None when not running; ``restarts``:
    container restarts (k8s; always 0 in host mode, where a new ``instance`` is the restart);
    ``healthy``: ``/healthz`` answered 200 (and the pod is ready, k8s); ``metrics_text``: the ``/metrics``
    answer with curl's ``HTTP_CODE=`` trailer when asked for (None: not asked, or no endpoint known);
    ``pod``: the scheduler pod's name (k8s) or ``pid-<pid>`` (host); ``error``: why the node could not be
    observed (then the other fields say nothing).
    """

    node: str
    processes: tuple[SchedulerProcess, ...] = ()
    instance: str | None = None
    restarts: int = 0
    healthy: bool = False
    metrics_text: str | None = None
    pod: str = ""
    error: str | None = None


@dataclass(frozen=True)
class SchedulerRestart:
    """What :meth:`SchedulerControl.restart_scheduler` did: ``action`` (for humans), the unix time ``at``, and the
    ``instance`` of every node's scheduler before it (see :class:`SchedulerFacts`)."""

    action: str
    at: float
    before: dict[str, str | None] = field(default_factory=dict)


def run_spawn_prefix(run_id: str) -> str:
    """``xp<length>-<run id>-``: how every spawn name (pid file, log, sampler directory on a host) of run
    ``run_id`` begins. The run id's length makes the prefix exact: ``xp8-20261128-`` never begins a name of run
    ``20261128-101824`` (``xp15-20261128-101824-``), so a run's entries are found by prefix without those of a
    run whose id begins with its id (``invoke clean --run-id``, :mod:`xpushare.backends.leftovers`). Run ids
    are ``[A-Za-z0-9._-]`` (:func:`xpushare.report.run_store.validate_run_id`): valid in a spawn name as is."""
    return f"xp{len(run_id)}-{run_id}-"


def exact_part(text: str) -> str:
    """``<length>-<text>``: a name part that a prefix match cannot confuse with a longer one (a cluster
    ``a`` beside a cluster ``a-b`` on one machine)."""
    return f"{len(text)}-{text}"


def new_attempt() -> str:
    """A fresh attempt token (6 hex digits): the identity of one attempt of a case (:class:`CaseContext`)."""
    return secrets.token_hex(3)


@dataclass(frozen=True)
class CaseContext:
    """The case a backend serves, given once to :meth:`Backend.begin_case`: ``case_dir`` (the case directory,
    where every evidence file of the case goes), ``case_id`` (``FUNC-001``) and ``attempt``, a token new for
    each attempt of the case (a ``--resume`` after a crash, each ``--repeat``): every name the attempt gives
    on a host (spawn names, so its pid files, logs, ``.rc``/``.end`` files) or in Kubernetes (the
    ``xpushare/attempt`` label of its pods) carries it, so files or pods an earlier, dead attempt left are
    never read as this attempt's evidence."""

    case_dir: Path
    case_id: str
    attempt: str = field(default_factory=new_attempt)


class Backend(ABC):
    """How a case's workloads run and how evidence is gathered on one cluster.

    The backend serves one case at a time: :meth:`begin_case` takes the case (its :class:`CaseContext`) and
    every case-level method after it (pods, waits, logs, harvest, cleanup) works in that case's directory.
    Everything a cluster may lack is a part (:attr:`parts`, :class:`BackendParts`): an object, or None where the
    cluster has none; a caller tests the part for None, never the mode.
    """

    mode: str
    names: SutNames
    """Names of the SUT generation under test (labels, annotations, environment variables, resource)."""
    run_id: str = ""
    """The run this backend serves: set by :meth:`prepare_run`, ``""`` before."""
    case: CaseContext | None = None
    """The case this backend serves: set by :meth:`begin_case`, None before the first."""

    @property
    @abstractmethod
    def parts(self) -> BackendParts:
        """What this backend offers beyond running a case's pods (:class:`BackendParts`); its capabilities
        (:attr:`BackendParts.capabilities`) are derived from it."""

    @property
    def case_dir(self) -> Path:
        """The directory of the case begun last (:attr:`case`). Raises
        :class:`~xpushare.model.errors.XpushareError` before :meth:`begin_case`."""
        if self.case is None:
            raise XpushareError("no case begun on this backend (begin_case first)")
        return self.case.case_dir

    @abstractmethod
    def prepare_run(self, run_id: str) -> None:
        """Once per run: remove leftovers of earlier runs (only what carries our labels/pid files). A host that
        does not answer is recorded (:meth:`unreachable`) and the run goes on without it; raises
        :class:`~xpushare.model.errors.HostUnreachable` when no host of the cluster that its cases need answers
        (host mode: every GPU host; Kubernetes: the master)."""

    @abstractmethod
    def unreachable(self) -> list[Unreached]:
        """The cluster's hosts that did not answer at :meth:`prepare_run`, in inventory order (docs/reliability.md
        §partial clusters): the run goes on without them; whatever needs one of them (a pod placed there, its
        scheduler, the cluster's GPU count) raises :class:`~xpushare.model.errors.HostUnreachable` naming it."""

    @abstractmethod
    def begin_case(self, case_dir: Path, case_id: str) -> CaseContext:
        """Take the case (set :attr:`case`, first of all, so that :meth:`harvest` and :meth:`cleanup` work even
        when the rest fails) and start case-long evidence (samplers, dmon, log streams); return the context."""

    @abstractmethod
    def start_pods(self, pods: Sequence[WorkloadSpec]) -> None:
        """Create the pods (manifests and records in :attr:`case_dir`). Raises
        :class:`~xpushare.model.errors.XpushareError` on failure."""

    @abstractmethod
    def wait_terminal(self, names: Sequence[str], timeout_s: float) -> list[WorkloadRecord]:
        """Wait until the pods end or ``timeout_s`` passes; return their records either way (and write
        ``pods.json``)."""

    @abstractmethod
    def wait_running(self, names: Sequence[str], timeout_s: float) -> list[WorkloadRecord]:
        """Wait until the pods run (or ended); return their records (and write ``pods.json``)."""

    @abstractmethod
    def read_log(self, pod: str, *, timestamps: bool = False) -> str:
        """The pod's output so far, ``""`` when none can be read (for waits on a workload line; evidence is
        still taken by :meth:`harvest`). ``timestamps``: each line prefixed with the time it was written
        (RFC 3339, ``kubectl logs --timestamps``) where the backend knows it; host mode has no such time and
        returns the text as written."""

    @abstractmethod
    def case_pods(self) -> list[WorkloadRecord]:
        """Records of the current case's pods that exist now (``pods.json`` untouched)."""

    @abstractmethod
    def delete_case_pods(self, timeout_s: float) -> None:
        """Stop every pod of the current case and wait up to ``timeout_s`` s until they are gone; case-long
        evidence (samplers, log streams) keeps running."""

    @abstractmethod
    def harvest(self) -> list[str]:
        """Pull every evidence file into :attr:`case_dir` (pod logs, samplers, scheduler); return their paths."""

    @abstractmethod
    def cleanup(self) -> None:
        """Remove everything the case created (idempotent; runs in ``finally``)."""

    @abstractmethod
    def close(self) -> None:
        """Release connections (and what the run created for itself) at the end of a run."""


class Placement(ABC):
    """Where a case's pods can go: the GPU hosts, how many GPUs, and how to put two pods on one GPU."""

    @abstractmethod
    def gpu_node_hosts(self) -> dict[str, Host]:
        """The hosts whose GPUs the case's workloads can use, by inventory name, for GPU process queries
        (owned by the backend: do not close them). Empty where none can be reached."""

    @abstractmethod
    def gpu_count(self) -> int | None:
        """Physical GPUs the case's workloads can be placed on (schedulable nodes or GPU hosts); None where
        it cannot be told. FUNC-003 judges the spread only when it knows there is more than one."""

    @abstractmethod
    def colocation_target(self) -> tuple[str | None, int]:
        """Where to put pods that must share one GPU: ``(node, gpu_count)``.

        ``node`` None means the backend places pods on one GPU itself (``WorkloadSpec.same_gpu_as``);
        otherwise ``gpu_count + 1`` pods pinned to ``node`` are certain to put two on one GPU.
        """


class EvidenceRotation(ABC):
    """What a long case (a soak) needs to bound its evidence: rotate the case-long streams, forget old pods."""

    @abstractmethod
    def restart_log_streams(self, dest: Path, tag: str, *, since: datetime | None = None) -> list[Path]:
        """Rotate the case-long evidence streams into ``dest`` (``scheduler-<tag>.log``, ``dmon-<host>-<tag>.txt``)
        and restart them; return the local files (uncompressed). Kubernetes: the scheduler's stream restarts
        from ``since`` (default now); a stream that cannot be copied is restarted anyway, then the error is
        raised; a dmon that cannot be stopped or copied is skipped. Host mode: the scheduler log file's bytes
        since the last rotation (``since`` unused; nothing when the inventory names no log file)."""

    @abstractmethod
    def forget_pod_specs(self) -> None:
        """Drop the specs of the case's pods started so far (a long case bounds its memory; a pod started
        later with ``same_gpu_as`` an earlier one then is placed freely)."""


class SchedulerControl(ABC):
    """The SUT's scheduler as a process to follow and restart (the premise ``scheduler-process``)."""

    @abstractmethod
    def scheduler_facts(self, *, metrics: bool = False) -> list[SchedulerFacts]:
        """Every scheduler the backend's workloads use, one entry per node, with ``/proc`` figures and health
        (and the ``/metrics`` page when ``metrics``). Raises :class:`~xpushare.model.errors.TransportError`
        when the host cannot be reached at all (k8s: KubeError)."""

    @abstractmethod
    def restart_scheduler(self) -> SchedulerRestart:
        """Restart the scheduler now, the way its operator would see it fail: k8s ``rollout restart`` of its
        DaemonSet; host mode ``kill -TERM`` of the scheduler process (only a supervisor brings it back).
        Returns at once (recovery is for the caller to watch with :meth:`scheduler_facts`); raises
        :class:`~xpushare.model.errors.XpushareError` when nothing could be done."""


class Annotator(ABC):
    """Pod annotations changed while the pod runs (the SUT's core and memory limits; the premise ``annotations``)."""

    @abstractmethod
    def annotate(self, pod: str, annotations: dict[str, str]) -> float:
        """Set annotations on a running pod of the case (``core``/``memory`` stand for the SUT's limit
        annotations), recorded in ``annotations.jsonl`` of the case directory; return the unix time of the call."""


@dataclass(frozen=True)
class BackendParts:
    """The parts of a backend (:attr:`Backend.parts`): each an object, or None where the cluster has none.

    ``placement`` and ``rotation`` every backend has; ``kubernetes`` (:class:`KubeAccess`) where workloads are
    pods; ``scheduler`` (:class:`SchedulerControl`) where the SUT's scheduler can be followed as a process;
    ``annotations`` (:class:`Annotator`) where limits are pod annotations; ``scheduler_host`` is host mode's
    connection to the host whose scheduler the inventory's ``scheduler`` settings describe (``metrics_url``,
    ``log_file``; owned by the backend: do not close it). ``client_library``: the workloads reach the SUT
    (its preload library, or a system that needs none); ``tenant_namespaces``: each tenant's pods get a
    namespace of their own (:data:`CAP_TENANT_NAMESPACES`).
    """

    placement: Placement
    rotation: EvidenceRotation
    kubernetes: KubeAccess | None = None
    scheduler: SchedulerControl | None = None
    annotations: Annotator | None = None
    scheduler_host: Host | None = None
    client_library: bool = False
    tenant_namespaces: bool = False

    @property
    def capabilities(self) -> frozenset[str]:
        """The premise vocabulary (``CAP_*``) these parts give: the one truth of a backend's capabilities."""
        caps = {name for name, there in ((CAP_KUBERNETES, self.kubernetes is not None),
                                         (CAP_SCHEDULER_PROCESS, self.scheduler is not None),
                                         (CAP_ANNOTATIONS, self.annotations is not None),
                                         (CAP_CLIENT_LIBRARY, self.client_library),
                                         (CAP_TENANT_NAMESPACES, self.tenant_namespaces)) if there}
        return frozenset(caps)


class KubeAccess(ABC):
    """The Kubernetes-only operations of a backend (:attr:`BackendParts.kubernetes`, there exactly when the
    backend has :data:`CAP_KUBERNETES`), for cases that act on the cluster itself (scheduler pods and their
    ``/metrics``, DaemonSets, nodes) rather than on their pods. Every operation a caller needs is a method
    here; kubectl itself stays inside the backend.

    Node names are Kubernetes node names; "GPU host" names are those of the inventory's ``gpu`` hosts;
    DaemonSets and SUT pods are those of the SUT's namespace (:attr:`SutNames.namespace`).
    Errors: :class:`~xpushare.transport.kube_errors.KubeError` from kubectl,
    :class:`~xpushare.model.errors.TransportError` from SSH, unless a method says otherwise.
    """

    @abstractmethod
    def kubectl_calls(self) -> int:
        """kubectl invocations so far."""

    @abstractmethod
    def kubectl_retries(self) -> int:
        """Of :meth:`kubectl_calls`, the retries of reads after a transient API failure
        (:mod:`xpushare.transport.kube_retry`)."""

    @abstractmethod
    def pod_namespace(self, tenant: str | None = None) -> str:
        """The namespace the case's pods run in (``tenant``'s: that tenant's own, see :attr:`WorkloadSpec.tenant`).
        Known after :meth:`Backend.prepare_run`."""

    # -- the SUT's pods and DaemonSets (kubectl on the master, in the SUT's namespace) ---------------
    @abstractmethod
    def sut_pods(self, selector: str) -> list[Pod]:
        """The SUT's pods carrying the label ``selector`` (e.g. the scheduler's, every pod of a rollout),
        sorted by name; one kubectl call."""

    @abstractmethod
    def sut_logs(self, selector: str) -> str:
        """The current containers' logs of the SUT's pods carrying ``selector``, each line prefixed with
        ``[pod/<name>/<container>]`` (``kubectl logs -l <selector> --prefix``, kubectl's timestamps)."""

    @abstractmethod
    def previous_log(self, pod: str) -> str:
        """The log of the previous container of the SUT's pod ``pod`` (``kubectl logs --previous``)."""

    @abstractmethod
    def restart_daemonset(self, name: str) -> None:
        """``kubectl rollout restart daemonset/<name>``; returns at once."""

    @abstractmethod
    def await_daemonset(self, name: str, timeout_s: float) -> str:
        """Wait up to ``timeout_s`` s until DaemonSet ``name``'s rollout is complete (``kubectl rollout
        status``); return kubectl's output. Raises :class:`~xpushare.transport.kube_errors.KubeTimeout`."""

    @abstractmethod
    def daemonset_status(self, name: str) -> DaemonSetStatus:
        """DaemonSet ``name``'s desired/ready/updated/available counts. Raises KubeNotFound."""

    @abstractmethod
    def daemonset_env(self, name: str, variable: str) -> str | None:
        """The value of ``variable`` in DaemonSet ``name``'s pod template (the last container that sets it;
        None: no container sets it)."""

    @abstractmethod
    def set_daemonset_env(self, name: str, variable: str, value: str | None) -> None:
        """Set ``variable`` to ``value`` in DaemonSet ``name``'s containers (``kubectl set env``; None removes
        it); the rollout that follows is for :meth:`await_daemonset` to wait for."""

    # -- nodes --------------------------------------------------------------------------------------
    @abstractmethod
    def nodes(self) -> list[Node]:
        """Every node of the cluster, sorted by name."""

    @abstractmethod
    def node(self, name: str) -> Node:
        """One node. Raises KubeNotFound."""

    @abstractmethod
    def drain_node(self, node: str, *, timeout_s: float, grace_period_s: int | None = None) -> str:
        """``kubectl drain --ignore-daemonsets --delete-emptydir-data --force`` of ``node``; kubectl's output."""

    @abstractmethod
    def uncordon_node(self, node: str) -> None:
        """``kubectl uncordon <node>``."""

    @property
    @abstractmethod
    def case_start(self) -> datetime:
        """When the current case began (:meth:`Backend.begin_case`), timezone-aware UTC."""

    @property
    @abstractmethod
    def metrics_port(self) -> int:
        """TCP port of the scheduler pods' metrics endpoint (parameter ``metrics_port``, default 9402)."""

    @property
    @abstractmethod
    def vgpus_per_gpu(self) -> int:
        """Extended-resource units the device plugin offers per physical GPU (parameter ``vgpus_per_gpu``)."""

    @abstractmethod
    def node_hosts(self) -> dict[str, str]:
        """``node -> GPU host`` for every node :meth:`Backend.prepare_run` mapped (same name, else the host
        whose address is the node's InternalIP); a copy. Empty before ``prepare_run``."""

    @abstractmethod
    def host_for_node(self, node: str | None) -> str | None:
        """The GPU host of ``node`` (see :meth:`node_hosts`); None for None or an unmapped node."""

    @abstractmethod
    def gpu_host(self, name: str) -> Host:
        """The backend's connection to GPU host ``name`` (opened on first use, kept until
        :meth:`Backend.close`: do not close it). ``KeyError`` for a name that is not an inventory GPU host."""

    @abstractmethod
    def scheduler_pods(self) -> dict[str, Pod]:
        """``node -> scheduler pod`` (the SUT's scheduler DaemonSet, one pod per node; the last listed where
        a rollout shows two). Empty when kubectl fails (never raises)."""

    @abstractmethod
    def curl_scheduler(self, node: str, path: str, sched: dict[str, Pod] | None = None) -> str | None:
        """GET ``http://<scheduler pod IP>:<metrics_port><path>`` with curl on ``node``'s GPU host.

        Returns curl's output: the body then ``\nHTTP_CODE=<ddd>\n``, with a ``# curl: exit ...`` line
        appended when curl failed, or ``# scrape of ... failed: ...`` and ``HTTP_CODE=000`` when the host
        could not be reached. None when ``node`` runs no scheduler pod, the pod has no IP, or no GPU host
        maps to the node. ``sched``: a :meth:`scheduler_pods` answer to reuse (saves a kubectl call).
        """

    @abstractmethod
    def scrape_metrics(self, name: str, node: str | None = None) -> str | None:
        """Scrape ``/metrics`` of the scheduler serving ``node`` (default: the first node, by name, that runs
        a pod of the current case) into ``name`` in :attr:`Backend.case_dir` in :meth:`curl_scheduler`'s format; return
        ``name``, or None when nothing could be scraped (no node, no scheduler pod there)."""

    @abstractmethod
    def scheduler_log(self, *, prefix: bool = True, timestamps: bool = True) -> str:
        """The scheduler pods' log since :attr:`case_start` (``kubectl logs -l <scheduler> --since-time``),
        each line prefixed with ``[pod/<name>/<container>]`` when ``prefix``, with kubectl's RFC 3339
        timestamp when ``timestamps``. Raises :class:`~xpushare.transport.kube_errors.KubeError`."""

    @abstractmethod
    def delete_pod(self, name: str, timeout_s: float = 60.0) -> None:
        """Delete one pod of the case (its :class:`WorkloadSpec` name) and wait up to ``timeout_s`` s until it is
        gone; the case's log streams and samplers keep running."""


def require_part(part: _P | None, premise: str) -> _P:
    """``part`` of a backend's :class:`BackendParts`, for a case whose premise ``premise`` (a ``CAP_*`` name)
    says the cluster has it. Raises :class:`~xpushare.model.errors.XpushareError` naming the premise when it
    has not (the case ERRORs: a premise that did not hold is never a verdict on the SUT)."""
    if part is None:
        raise XpushareError(f"premise {premise} does not hold: the backend has no such part")
    return part
