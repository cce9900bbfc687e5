"""What a soak does to a cluster, behind one small interface (:class:`SoakOps`), and its Kubernetes form.

The soak loop (:mod:`xpushare.soak.loop`) only talks to :class:`SoakOps`; unit tests give it a fake,
the cases give it :class:`K8sSoakOps` over the run's backend and its
:class:`~xpushare.backends.base.KubeAccess`.

One sampling tick on Kubernetes costs ``1 + nodes`` remote commands: ``kubectl get pods`` of the
scheduler DaemonSet (node, pod uid, restart count, pod IP), then one SSH command per GPU node that
prints the ``/proc`` status and FD count of every scheduler process (``pgrep -f``, argv[0] anchored)
and the scheduler's ``/metrics`` fetched with curl from that node (:func:`node_script`; the curl argv and the
page's facts are the scraper's, :mod:`xpushare.evidence.scrape_capture`).

Errors: every method may raise :class:`~xpushare.model.errors.TransportError` (SSH) or
:class:`~xpushare.transport.kube_errors.KubeError` (kubectl); the loop turns them into gaps and retries with backoff.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Protocol

from xpushare.backends import scheduler_proc
from xpushare.backends.base import CAP_ANNOTATIONS, CAP_SCHEDULER_PROCESS, Backend, SchedulerFacts, require_part
from xpushare.evidence.previous_logs import harvest_previous_logs
from xpushare.evidence.scrape_capture import endpoint_url, scrape_command
from xpushare.evidence.soak_series import gzip_file
from xpushare.model.errors import HostUnreachable, TransportError, XpushareError
from xpushare.model.workload import WorkloadRecord, WorkloadSpec
from xpushare.parsers import procstat

__all__ = [
    "BackendSoakOps",
    "K8sSoakOps",
    "NodeSample",
    "ProcSample",
    "SchedPod",
    "SoakOps",
    "node_script",
    "parse_node_output",
    "soak_ops",
]


@dataclass(frozen=True)
class SchedPod:
    """A scheduler pod: its node, name, uid, container restart count, readiness and pod IP."""

    node: str
    pod: str
    uid: str
    restarts: int
    ready: bool
    ip: str | None = None


@dataclass(frozen=True)
class ProcSample:
    """A scheduler process seen on a node: pid, VmRSS (bytes), open FDs (None: unreadable), threads."""

    pid: int
    rss_bytes: int | None
    fd_count: int | None
    threads: int | None


@dataclass(frozen=True)
class NodeSample:
    """One node's part of a tick: scheduler processes, the raw ``/metrics`` answer, and an error if the
    node could not be sampled (then ``procs`` is empty and ``metrics_text`` None)."""

    node: str
    procs: tuple[ProcSample, ...] = ()
    metrics_text: str | None = None
    error: str | None = None
    why: str | None = None
    """Set when the node's host did not answer (:attr:`~xpushare.model.errors.HostUnreachable.why`): the node
    dropped out (the soak goes on with the others and records how long it was missing)."""


_NODE_SCRIPT = (
    'pat=$1; pod=$2; url=$3; for p in $(pgrep -f "$pat"); do m=0; '
    'if [ -n "$pod" ] && tr "\\0" "\\n" < "/proc/$p/environ" 2>/dev/null | grep -qx "HOSTNAME=$pod"; then m=1; fi; '
    'echo "@@PROC $p $m"; cat "/proc/$p/status" 2>/dev/null; '
    'if fds=$(ls -1A "/proc/$p/fd" 2>/dev/null); then printf "FD_COUNT=%s\\n" "$(printf "%s\\n" "$fds" | grep -c .)"; '
    'else echo FD_COUNT=; fi; done; '
    'if [ -n "$url" ]; then echo "@@METRICS"; shift 3; "$@"; fi; echo "@@END"'
)


def node_script(scheduler_binary: str, url: str | None, pod: str | None = None, timeout_s: float = 10.0) -> list[str]:
    """argv of one node-side sampling command: every scheduler process's status + FD count, then the
    scheduler's ``/metrics`` via curl (when ``url``), then ``@@END``.

    Scheduler processes are found with ``pgrep -f '^(\\S*/)?<binary>( |$)'`` (argv[0], since ``comm`` is cut
    to 15 characters); the sampling shell itself never matches. A process whose environment holds
    ``HOSTNAME=<pod>`` (the container runtime sets it to the pod name) is marked as the pod's own: when one
    is marked, only marked processes are kept (another scheduler visible on the same host, e.g. a second
    lab on one machine, is then ignored).
    """
    curl = scrape_command(url, timeout_s) if url else []
    return ["sh", "-c", _NODE_SCRIPT, "sh", scheduler_proc.pattern(scheduler_binary), pod or "", url or "", *curl]


def parse_node_output(node: str, text: str) -> NodeSample:
    """Parse the stdout of :func:`node_script`. A missing ``@@END`` (cut output) is an error sample."""
    if "@@END" not in text:
        return NodeSample(node, error="sampling output cut short (no @@END)")
    body, _, _ = text.rpartition("@@END")
    metrics_text: str | None = None
    if "@@METRICS\n" in body:
        body, _, metrics_text = body.partition("@@METRICS\n")
    procs: list[tuple[bool, ProcSample]] = []
    for block in body.split("@@PROC ")[1:]:
        head, _, rest = block.partition("\n")
        words = head.split()
        if not words or not words[0].isdigit():
            continue
        st = procstat.parse(rest)
        if not st.found:
            continue  # the process ended between pgrep and cat
        mine = len(words) > 1 and words[1] == "1"
        procs.append((mine, ProcSample(int(words[0]), st.vm_rss_bytes, st.fd_count, st.threads)))
    if any(m for m, _ in procs):
        procs = [(m, p) for m, p in procs if m]
    return NodeSample(node, tuple(p for _, p in procs), metrics_text)


class SoakOps(Protocol):
    """Cluster operations of a soak (see the module docstring for errors)."""

    def scheduler_pods(self) -> list[SchedPod]:
        """The scheduler DaemonSet's pods, one per node."""

    def sample(self, pods: Sequence[SchedPod]) -> list[NodeSample]:
        """One tick of every node that runs a scheduler pod (a node that fails gets ``error``)."""

    def start_pods(self, specs: Sequence[WorkloadSpec]) -> None:
        """Create a round's pods (idempotent: applying them again changes nothing)."""

    def poll_pods(self) -> list[WorkloadRecord]:
        """Records of every pod of this case that exists now."""

    def delete_pods(self, timeout_s: float) -> None:
        """Delete every pod of this case and wait until they are gone."""

    def annotate(self, pod: str, annotations: dict[str, str]) -> float:
        """Annotate a running pod (``core``/``memory`` keys are mapped to the SUT's); returns the unix time."""

    def pod_log(self, pod: str) -> str:
        """A pod's output so far ('' when unavailable), each line with the time it was written where the
        backend knows it (``kubectl logs --timestamps``)."""

    def rotate_logs(self, dest: Path, index: int, *, since: float | None = None) -> list[Path]:
        """Fetch, compress and restart the case-long log streams (scheduler log, dmon); return local files.

        ``since``: where the new scheduler log stream starts (unix time; default now)."""

    def harvest_previous(self, dest: Path) -> list[Path]:
        """Previous-container logs of SUT pods that restarted (``kubectl logs --previous``)."""

    def end_round(self) -> None:
        """Forget a finished round's pod specs (bounded memory)."""


class BackendSoakOps:
    """:class:`SoakOps` over any backend with ``scheduler-process`` (host mode: the first GPU host's scheduler
    process), inside a case (``begin_case`` ran). Everything goes through the :class:`Backend` interface.

    One sampling tick is one remote command (:meth:`SchedulerControl.scheduler_facts` with ``/metrics``); the scheduler
    "pod" is the process: its ``uid`` is the oldest scheduler pid, so a new pid is a restart. A restarted host
    scheduler leaves no previous-container log: its log file goes on (:meth:`harvest_previous` gets nothing).
    """

    def __init__(self, backend: Backend, case_dir: Path) -> None:
        self.backend = backend
        self.case_dir = Path(case_dir)
        self._facts: dict[str, SchedulerFacts] = {}
        self._dead: HostUnreachable | None = None

    def scheduler_pods(self) -> list[SchedPod]:
        try:
            facts = require_part(self.backend.parts.scheduler, CAP_SCHEDULER_PROCESS).scheduler_facts(metrics=True)
        except HostUnreachable as exc:  # the scheduler's host dropped out: a node sample of its own (sample)
            self._facts, self._dead = {}, exc
            return []
        self._dead = None
        self._facts = {f.node: f for f in facts}
        return [SchedPod(f.node, f.pod or "-", f.instance or "", f.restarts, f.healthy) for f in facts
                if f.error is None and f.instance is not None]

    def sample(self, pods: Sequence[SchedPod]) -> list[NodeSample]:
        # every GPU host the backend lost (at the run's start or since): the soak records how long it is missing
        dead = {u.host: NodeSample(u.host, error=u.detail, why=u.why) for u in self.backend.unreachable()}
        if self._dead is not None:
            dead.setdefault(self._dead.host, NodeSample(self._dead.host, error=self._dead.message, why=self._dead.why))
            return list(dead.values())
        out = list(dead.values())
        for node, f in sorted(self._facts.items()):
            if node in dead:
                continue
            if f.error is not None:
                out.append(NodeSample(node, error=f.error))
            elif not f.processes:
                out.append(NodeSample(node, error="no scheduler process running"))
            else:
                procs = tuple(ProcSample(p.pid, p.rss_bytes, p.fd_count, p.threads) for p in f.processes)
                out.append(NodeSample(node, procs, f.metrics_text))
        return out

    def start_pods(self, specs: Sequence[WorkloadSpec]) -> None:
        self.backend.start_pods(specs)

    def poll_pods(self) -> list[WorkloadRecord]:
        return self.backend.case_pods()

    def delete_pods(self, timeout_s: float) -> None:
        self.backend.delete_case_pods(timeout_s)

    def annotate(self, pod: str, annotations: dict[str, str]) -> float:
        return float(require_part(self.backend.parts.annotations, CAP_ANNOTATIONS).annotate(pod, annotations))

    def pod_log(self, pod: str) -> str:
        # With the kubelet's times: STAB-004 dates each memory-probe line by them (the pod's start plus the
        # probe's own clock is early by the interpreter's start, enough to put a line in the wrong phase).
        return str(self.backend.read_log(pod, timestamps=True))

    def end_round(self) -> None:
        self.backend.parts.rotation.forget_pod_specs()

    def rotate_logs(self, dest: Path, index: int, *, since: float | None = None) -> list[Path]:
        start = None if since is None else datetime.fromtimestamp(since, timezone.utc)
        rotation = self.backend.parts.rotation
        return [gzip_file(p) for p in rotation.restart_log_streams(dest, f"{index:04d}", since=start)]

    def harvest_previous(self, dest: Path) -> list[Path]:
        return []


class K8sSoakOps(BackendSoakOps):
    """:class:`SoakOps` over a Kubernetes backend inside a case (``begin_case`` ran): the pod operations are
    :class:`BackendSoakOps`'s; the tick lists the scheduler DaemonSet's pods and samples each pod's own
    processes (:func:`node_script`), and restarted SUT pods leave previous-container logs.

    Uses the backend's Kubernetes operations and node connections (one thread, so no concurrent use). Raises
    :class:`~xpushare.model.errors.XpushareError` when the backend is not Kubernetes (its ``kubernetes`` part is None).
    """

    def __init__(self, backend: Backend, case_dir: Path) -> None:
        kube = backend.parts.kubernetes
        if kube is None:
            raise XpushareError(f"a soak needs Kubernetes, not a {backend.mode} backend")
        super().__init__(backend, case_dir)
        self.kube = kube
        self.names = backend.names

    def scheduler_pods(self) -> list[SchedPod]:
        pods = self.kube.sut_pods(self.names.scheduler_label)
        out = []
        for p in pods:
            if not p.node:
                continue
            ready = bool(p.containers) and all(c.ready for c in p.containers)
            out.append(SchedPod(p.node, p.name, p.uid, p.restart_count, ready, p.pod_ip))
        return out

    def sample(self, pods: Sequence[SchedPod]) -> list[NodeSample]:
        out: list[NodeSample] = []
        port = self.kube.metrics_port
        for sp in pods:
            host_name = self.kube.host_for_node(sp.node)
            if host_name is None:
                out.append(NodeSample(sp.node, error="no inventory GPU host maps to this node"))
                continue
            url = endpoint_url(sp.ip, port, "/metrics") if sp.ip else None
            argv = node_script(self.names.scheduler_binary, url, sp.pod)
            try:
                res = self.kube.gpu_host(host_name).run(argv, timeout=60)
            except TransportError as exc:
                why = exc.why if isinstance(exc, HostUnreachable) else None
                out.append(NodeSample(sp.node, error=exc.message, why=why))
                continue
            out.append(parse_node_output(sp.node, res.stdout))
        return out

    def harvest_previous(self, dest: Path) -> list[Path]:
        return harvest_previous_logs(self.kube, self.names, dest)


def soak_ops(backend: Backend, case_dir: Path) -> SoakOps:
    """The soak operations for ``backend``: Kubernetes' own where it has them, else :class:`BackendSoakOps`."""
    if backend.parts.kubernetes is not None:
        return K8sSoakOps(backend, case_dir)
    return BackendSoakOps(backend, case_dir)
