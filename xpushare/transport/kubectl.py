"""kubectl wrapper: argv building, typed errors, and typed views parsed from ``kubectl -o json``.

Every call runs the real ``kubectl`` on the cluster's master host through a transport ``host``
(:mod:`xpushare.transport`: ``host.run(argv, timeout=, stdin=)`` returning a ``CommandResult``). The
argv always starts with the cluster's connection flags, so nothing depends on the remote shell's
``KUBECONFIG`` or current context::

    [kubectl, "--kubeconfig", <path>, "--context", <ctx>, "--request-timeout", "30s", "-n", <ns>, <verb> ...]

(``--kubeconfig``/``--context`` only when the inventory names them). Every call counts in
:attr:`Kubectl.calls` (reported per case as "kubectl calls").

Views (:class:`Pod`, :class:`Node`, :class:`DaemonSetStatus`) are frozen dataclasses with times as
timezone-aware UTC ``datetime`` (Kubernetes writes whole seconds) and the original JSON in ``raw``.

Errors: a non-zero exit becomes :class:`KubeError` (with the argv, stderr and exit code), or a subclass
picked from kubectl's stderr: :class:`KubeNotFound` (``Error from server (NotFound)``),
:class:`KubeAlreadyExists`, :class:`KubeTimeout` (``timed out waiting``; also raised by
:meth:`Kubectl.wait_pods` with the last pods seen), :class:`KubeUnavailable` (API server unreachable);
:class:`KubePodStuck` when a waited-for pod can never start (image pull / container creation errors).
Transport failures (:class:`~xpushare.errors.TransportError`) pass through unchanged.

Pitfalls handled here (sut-interfaces.md §11, bash-harness.md §6):
``kubectl logs -l`` prints only 10 lines per pod unless ``--tail=-1``; ``--since-time`` is sent with
whole seconds; ``--request-timeout`` also cuts streams and waits, so long waits raise it; a label
selector matching nothing is not an error (``No resources found`` on stderr, exit 0).
"""

from __future__ import annotations

import json
import math
import re
import shlex
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal, Protocol

from xpushare.errors import XpushareError
from xpushare.transport import CommandResult

# ------------------------------------------------------------------------------------- errors


_GLOBAL_WITH_VALUE = frozenset({"--kubeconfig", "--context", "--request-timeout", "-n", "--namespace"})


def _verb(argv: Sequence[str]) -> str:
    """The kubectl verb of an argv (first word after the executable and the global flags)."""
    skip = False
    for arg in argv[1:]:
        if skip:
            skip = False
        elif arg in _GLOBAL_WITH_VALUE:
            skip = True
        elif not arg.startswith("-"):
            return arg
    return "?"


class KubeError(XpushareError):
    """kubectl exited non-zero (or a wait failed): the argv, kubectl's stderr and its exit code."""

    def __init__(self, command: Sequence[str], stderr: str, exit_code: int, message: str | None = None) -> None:
        self.command = list(command)
        self.stderr = stderr
        self.exit_code = exit_code
        tail = stderr.strip().splitlines()[-1] if stderr.strip() else ""
        super().__init__(message or f"kubectl {_verb(self.command)} failed (exit {exit_code}): {tail}")


class KubeNotFound(KubeError):
    """The object does not exist (``Error from server (NotFound)``)."""


class KubeAlreadyExists(KubeError):
    """``create`` of an object that exists (``Error from server (AlreadyExists)``)."""


class KubeUnavailable(KubeError):
    """kubectl could not reach the API server (refused, no route, TLS, or request timeout)."""


class KubeTimeout(KubeError):
    """A wait ran out: kubectl's ``timed out waiting for the condition``, or :meth:`Kubectl.wait_pods`.

    ``pods`` holds the last pods observed (empty when the timeout came from kubectl itself).
    """

    def __init__(self, command: Sequence[str], stderr: str, exit_code: int, message: str | None = None,
                 pods: Sequence[Pod] = ()) -> None:
        super().__init__(command, stderr, exit_code, message)
        self.pods: tuple[Pod, ...] = tuple(pods)


class KubePodStuck(KubeError):
    """A waited-for pod can never get there (image pull or container-creation error, admission failure).

    ``pods`` holds the pods of the last observation.
    """

    def __init__(self, command: Sequence[str], message: str, pods: Sequence[Pod]) -> None:
        super().__init__(command, message, -1, message)
        self.pods: tuple[Pod, ...] = tuple(pods)


_TIMEOUT_RE = re.compile(r"timed out waiting|context deadline exceeded|\(Timeout\)")
_UNAVAILABLE_RE = re.compile(
    r"Unable to connect to the server|The connection to the server .* was refused|no route to host|"
    r"Client\.Timeout exceeded|i/o timeout|\(ServiceUnavailable\)"
)


def classify(command: Sequence[str], stderr: str, exit_code: int) -> KubeError:
    """The typed exception for a failed kubectl call, from its stderr."""
    if "(NotFound)" in stderr:
        return KubeNotFound(command, stderr, exit_code)
    if "(AlreadyExists)" in stderr:
        return KubeAlreadyExists(command, stderr, exit_code)
    if _UNAVAILABLE_RE.search(stderr):
        return KubeUnavailable(command, stderr, exit_code)
    if _TIMEOUT_RE.search(stderr):
        return KubeTimeout(command, stderr, exit_code)
    return KubeError(command, stderr, exit_code)


# -------------------------------------------------------------------------------------- views


def parse_time(text: str | None) -> datetime | None:
    """A Kubernetes RFC3339 time (``2026-11-21T14:28:57Z``, fractions and offsets allowed) as aware UTC."""
    if not text:
        return None
    m = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)", text.strip())
    if not m:
        raise ValueError(f"not an RFC3339 time: {text!r}")
    frac = (m.group(2) or ".0")[1:7].ljust(6, "0")
    tz = "+00:00" if m.group(3) == "Z" else m.group(3)
    return datetime.fromisoformat(f"{m.group(1)}.{frac}{tz}").astimezone(timezone.utc)


def format_time(when: datetime) -> str:
    """RFC3339 with whole seconds in UTC, as kubectl's ``--since-time`` sends it.

    Raises:
        ValueError: ``when`` is naive (its zone would be a guess).
    """
    if when.tzinfo is None:
        raise ValueError("a naive datetime is ambiguous; pass a timezone-aware one (e.g. datetime.now(timezone.utc))")
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def duration(seconds: float) -> str:
    """A Go duration string for kubectl flags: whole seconds, rounded up (``0`` means no limit)."""
    return f"{max(0, math.ceil(seconds))}s"


PodPhase = Literal["Pending", "Running", "Succeeded", "Failed", "Unknown"]
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
#: Waiting reasons after which a container will not start without someone changing the pod.
STUCK_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError",
                           "CreateContainerError", "ErrImageNeverPull"})


@dataclass(frozen=True)
class ContainerStatus:
    """One entry of ``status.containerStatuses``.

    ``state`` is ``waiting``, ``running``, ``terminated`` or ``unknown``; ``reason``/``message`` come from
    that state (e.g. ``ContainerCreating``, ``CrashLoopBackOff``, ``Completed``, ``Error``, ``OOMKilled``);
    ``exit_code``/``finished_at`` only when terminated; ``last_*`` from ``lastState.terminated`` (the run
    before the last restart).
    """

    name: str
    state: str
    reason: str | None
    message: str | None
    exit_code: int | None
    started_at: datetime | None
    finished_at: datetime | None
    restart_count: int
    ready: bool
    last_exit_code: int | None = None
    last_reason: str | None = None


@dataclass(frozen=True)
class Pod:
    """A pod as ``kubectl get pod -o json`` shows it."""

    name: str
    namespace: str
    uid: str
    phase: str
    node: str | None
    pod_ip: str | None
    host_ip: str | None
    labels: Mapping[str, str] = field(hash=False)
    annotations: Mapping[str, str] = field(hash=False)
    containers: tuple[ContainerStatus, ...]
    created_at: datetime | None
    start_time: datetime | None
    deletion_timestamp: datetime | None
    reason: str | None  # status.reason, e.g. Evicted, UnexpectedAdmissionError
    message: str | None
    unschedulable: str | None  # the PodScheduled=False message, when the scheduler cannot place it
    raw: Mapping[str, Any] = field(repr=False, compare=False, hash=False)

    @property
    def is_terminal(self) -> bool:
        return self.phase in TERMINAL_PHASES

    @property
    def container(self) -> ContainerStatus | None:
        """Status of the first container (the workload's), None before the kubelet reports any."""
        return self.containers[0] if self.containers else None

    @property
    def exit_code(self) -> int | None:
        """Exit code of the first container once terminated."""
        c = self.container
        return c.exit_code if c else None

    @property
    def restart_count(self) -> int:
        return sum(c.restart_count for c in self.containers)

    @property
    def started_at(self) -> datetime | None:
        c = self.container
        return c.started_at if c else None

    @property
    def finished_at(self) -> datetime | None:
        c = self.container
        return c.finished_at if c else None

    @property
    def waiting_reason(self) -> str | None:
        """The first waiting container's reason (``ContainerCreating``, ``CrashLoopBackOff`` …)."""
        return next((c.reason for c in self.containers if c.state == "waiting" and c.reason), None)

    @property
    def owner_kind(self) -> str | None:
        refs = (self.raw.get("metadata") or {}).get("ownerReferences") or []
        return next((r.get("kind") for r in refs if r.get("controller")), None)

    def env(self, name: str, container: str | None = None) -> str | None:
        """Literal ``value`` of an env variable in the pod spec (first container unless named).

        Values from ``valueFrom`` or injected by the device plugin are not in the spec: None.
        """
        for c in (self.raw.get("spec") or {}).get("containers") or []:
            if container is not None and c.get("name") != container:
                continue
            for item in c.get("env") or []:
                if item.get("name") == name:
                    return item.get("value")
            if container is None:
                return None
        return None


def _container_status(obj: Mapping[str, Any]) -> ContainerStatus:
    state = obj.get("state") or {}
    kind = next((k for k in ("running", "terminated", "waiting") if k in state), "unknown")
    detail = state.get(kind) or {}
    last = (obj.get("lastState") or {}).get("terminated") or {}
    return ContainerStatus(
        name=str(obj.get("name", "")),
        state=kind,
        reason=detail.get("reason"),
        message=detail.get("message"),
        exit_code=detail.get("exitCode") if kind == "terminated" else None,
        started_at=parse_time(detail.get("startedAt")),
        finished_at=parse_time(detail.get("finishedAt")) if kind == "terminated" else None,
        restart_count=int(obj.get("restartCount") or 0),
        ready=bool(obj.get("ready")),
        last_exit_code=last.get("exitCode"),
        last_reason=last.get("reason"),
    )


def parse_pod(obj: Mapping[str, Any]) -> Pod:
    """A :class:`Pod` from one pod object of ``-o json``.

    Raises:
        ValueError: ``obj`` is not a Pod.
    """
    if obj.get("kind") not in (None, "Pod"):
        raise ValueError(f"expected a Pod, got {obj.get('kind')!r}")
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    sched: Mapping[str, Any] = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), {})
    by_name = {c.get("name"): c for c in status.get("containerStatuses") or []}
    names = [c.get("name") for c in spec.get("containers") or []] or list(by_name)
    containers = tuple(_container_status(by_name[n]) for n in names if n in by_name)
    return Pod(
        name=str(meta.get("name", "")),
        namespace=str(meta.get("namespace", "")),
        uid=str(meta.get("uid", "")),
        phase=str(status.get("phase", "Unknown")),
        node=spec.get("nodeName") or None,
        pod_ip=status.get("podIP") or None,
        host_ip=status.get("hostIP") or None,
        labels=dict(meta.get("labels") or {}),
        annotations=dict(meta.get("annotations") or {}),
        containers=containers,
        created_at=parse_time(meta.get("creationTimestamp")),
        start_time=parse_time(status.get("startTime")),
        deletion_timestamp=parse_time(meta.get("deletionTimestamp")),
        reason=status.get("reason"),
        message=status.get("message"),
        unschedulable=sched.get("message") if sched.get("status") == "False" else None,
        raw=obj,
    )


@dataclass(frozen=True)
class Node:
    """A node as ``kubectl get node -o json`` shows it. Quantities stay strings (``"20"``, ``"16Gi"``)."""

    name: str
    labels: Mapping[str, str] = field(hash=False)
    annotations: Mapping[str, str] = field(hash=False)
    unschedulable: bool
    ready: bool
    internal_ip: str | None
    capacity: Mapping[str, str] = field(hash=False)
    allocatable: Mapping[str, str] = field(hash=False)
    taints: tuple[tuple[str, str, str], ...]  # (key, value, effect)
    kubelet_version: str | None
    raw: Mapping[str, Any] = field(repr=False, compare=False, hash=False)

    def allocatable_count(self, resource: str) -> int:
        """An integer resource's allocatable count (e.g. ``xpushare.com/gpu``); 0 when absent."""
        try:
            return int(self.allocatable.get(resource, "0"))
        except ValueError:
            return 0


def parse_node(obj: Mapping[str, Any]) -> Node:
    """A :class:`Node` from one node object of ``-o json``."""
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    ip = next((a.get("address") for a in status.get("addresses") or [] if a.get("type") == "InternalIP"), None)
    return Node(
        name=str(meta.get("name", "")),
        labels=dict(meta.get("labels") or {}),
        annotations=dict(meta.get("annotations") or {}),
        unschedulable=bool(spec.get("unschedulable")),
        ready=ready,
        internal_ip=ip,
        capacity={k: str(v) for k, v in (status.get("capacity") or {}).items()},
        allocatable={k: str(v) for k, v in (status.get("allocatable") or {}).items()},
        taints=tuple((t.get("key", ""), t.get("value", ""), t.get("effect", "")) for t in spec.get("taints") or []),
        kubelet_version=(status.get("nodeInfo") or {}).get("kubeletVersion"),
        raw=obj,
    )


@dataclass(frozen=True)
class DaemonSetStatus:
    """A DaemonSet's generation and rollout counters (``status`` of ``kubectl get ds -o json``)."""

    name: str
    namespace: str
    generation: int
    observed_generation: int
    desired: int
    current: int
    ready: int
    updated: int
    available: int
    unavailable: int
    misscheduled: int
    raw: Mapping[str, Any] = field(repr=False, compare=False, hash=False)

    @property
    def rolled_out(self) -> bool:
        """What ``kubectl rollout status`` waits for: spec observed, every pod updated and available."""
        return (self.observed_generation >= self.generation and self.updated >= self.desired
                and self.available >= self.desired)


def parse_daemonset(obj: Mapping[str, Any]) -> DaemonSetStatus:
    """A :class:`DaemonSetStatus` from one DaemonSet object of ``-o json``."""
    meta, status = obj.get("metadata") or {}, obj.get("status") or {}
    return DaemonSetStatus(
        name=str(meta.get("name", "")),
        namespace=str(meta.get("namespace", "")),
        generation=int(meta.get("generation") or 0),
        observed_generation=int(status.get("observedGeneration") or 0),
        desired=int(status.get("desiredNumberScheduled") or 0),
        current=int(status.get("currentNumberScheduled") or 0),
        ready=int(status.get("numberReady") or 0),
        updated=int(status.get("updatedNumberScheduled") or 0),
        available=int(status.get("numberAvailable") or 0),
        unavailable=int(status.get("numberUnavailable") or 0),
        misscheduled=int(status.get("numberMisscheduled") or 0),
        raw=obj,
    )


def _items(doc: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The objects of a ``-o json`` answer: the items of a List, or the object itself."""
    if doc.get("kind", "").endswith("List") and "items" in doc:
        return list(doc.get("items") or [])
    return [doc]


_PREFIX_RE = re.compile(r"^\[pod/(?P<pod>[^/\]]+)/(?P<container>[^\]]+)\] ?")


def split_prefixed_logs(text: str) -> dict[str, str]:
    """Split ``kubectl logs --prefix`` output into pod name → its lines (prefix removed, order kept)."""
    out: dict[str, list[str]] = {}
    # Split on newlines only: tqdm refreshes are separated by carriage returns inside one line.
    for line in text.split("\n"):
        if not line:
            continue
        line += "\n"
        m = _PREFIX_RE.match(line)
        if m:
            out.setdefault(m.group("pod"), []).append(line[m.end():])
    return {pod: "".join(lines) for pod, lines in out.items()}


# ------------------------------------------------------------------------------------ kubectl


class Host(Protocol):
    """What :class:`Kubectl` needs from a transport host."""

    name: str

    def run(self, argv: list[str], *, timeout: float | None = None, env: dict[str, str] | None = None,
            check: bool = False, stdin: str | None = None) -> CommandResult: ...


@dataclass(frozen=True)
class DeleteResult:
    """What :meth:`Kubectl.delete` removed (``kind/name`` as kubectl printed them) and whether it forced."""

    deleted: tuple[str, ...]
    forced: bool


_DELETED_RE = re.compile(r'^(?P<kind>[\w.]+) "(?P<name>[^"]+)" (?:force )?deleted', re.M)
_USE_DEFAULT = object()


class Kubectl:
    """kubectl on one cluster's master host.

    Args:
        host: transport host of the master (``host.run(argv, timeout=, stdin=)``).
        kubectl: the kubectl executable on that host.
        kubeconfig: ``--kubeconfig`` path on that host (None: kubectl's default).
        context: ``--context`` (None: the kubeconfig's current context).
        namespace: default ``-n`` of namespaced calls.
        request_timeout_s: ``--request-timeout`` of ordinary calls; waits and streams raise it.
    """

    #: Seconds the transport waits beyond kubectl's own limit before it gives up on the command.
    TRANSPORT_MARGIN_S = 15.0

    def __init__(self, host: Host, *, kubectl: str = "kubectl", kubeconfig: str | None = None,
                 context: str | None = None, namespace: str = "default", request_timeout_s: float = 30) -> None:
        self.host = host
        self.kubectl = kubectl
        self.kubeconfig = kubeconfig
        self.context = context
        self.namespace = namespace
        self.request_timeout_s = request_timeout_s
        self.calls = 0
        self._lock = threading.Lock()

    # -- argv and running

    def argv(self, args: Sequence[str], *, namespace: Any = _USE_DEFAULT,
             request_timeout_s: float | None = None) -> list[str]:
        """The full argv for kubectl ``args``: connection flags, request timeout, ``-n`` (None: none)."""
        ns = self.namespace if namespace is _USE_DEFAULT else namespace
        out = [self.kubectl]
        if self.kubeconfig:
            out += ["--kubeconfig", self.kubeconfig]
        if self.context:
            out += ["--context", self.context]
        rt = self.request_timeout_s if request_timeout_s is None else request_timeout_s
        out += ["--request-timeout", duration(rt)]
        if ns:
            out += ["-n", str(ns)]
        return out + [str(a) for a in args]

    def run(self, args: Sequence[str], *, namespace: Any = _USE_DEFAULT, stdin: str | None = None,
            wait_s: float | None = None, check: bool = True) -> CommandResult:
        """Run kubectl ``args``; ``wait_s`` is how long kubectl itself may wait (raises the timeouts).

        Raises:
            KubeError (or a subclass, see :func:`classify`) when ``check`` and kubectl exits non-zero.
        """
        request_timeout = self.request_timeout_s if wait_s is None else max(self.request_timeout_s, wait_s + 5)
        argv = self.argv(args, namespace=namespace, request_timeout_s=request_timeout)
        with self._lock:
            self.calls += 1
        result = self.host.run(argv, timeout=request_timeout + (wait_s or 0) + self.TRANSPORT_MARGIN_S, stdin=stdin)
        if check and not result.ok:
            raise classify(argv, result.stderr, result.exit_code)
        return result

    def get_json(self, args: Sequence[str], *, namespace: Any = _USE_DEFAULT) -> dict[str, Any]:
        """``kubectl <args> -o json`` parsed.

        Raises:
            KubeError: kubectl failed or printed something that is not JSON.
        """
        result = self.run([*args, "-o", "json"], namespace=namespace)
        try:
            doc = json.loads(result.stdout)
        except json.JSONDecodeError as exc:
            raise KubeError(list(result.argv), result.stderr, result.exit_code,
                            f"kubectl {' '.join(args[:2])}: output is not JSON ({exc})") from None
        if not isinstance(doc, dict):
            raise KubeError(list(result.argv), result.stderr, result.exit_code, "kubectl: JSON is not an object")
        return doc

    # -- objects

    def apply(self, manifest_yaml: str, *, namespace: Any = _USE_DEFAULT) -> list[dict[str, Any]]:
        """``kubectl apply -f -`` with the manifest on stdin; returns the applied objects (``-o json``)."""
        result = self.run(["apply", "-f", "-", "-o", "json"], namespace=namespace, stdin=manifest_yaml)
        try:
            doc = json.loads(result.stdout) if result.stdout.strip() else {"kind": "List", "items": []}
        except json.JSONDecodeError:
            return []
        return [dict(o) for o in _items(doc)]

    def get_pod(self, name: str, *, namespace: Any = _USE_DEFAULT) -> Pod:
        """One pod. Raises KubeNotFound."""
        return parse_pod(self.get_json(["get", "pod", name], namespace=namespace))

    def list_pods(self, selector: str | None = None, *, namespace: Any = _USE_DEFAULT,
                  field_selector: str | None = None, all_namespaces: bool = False) -> list[Pod]:
        """Pods matching a label selector (and field selector), sorted by name; one kubectl call."""
        args = ["get", "pods"]
        if selector:
            args += ["-l", selector]
        if field_selector:
            args += ["--field-selector", field_selector]
        if all_namespaces:
            args.append("-A")
        doc = self.get_json(args, namespace=None if all_namespaces else namespace)
        return sorted((parse_pod(o) for o in _items(doc)), key=lambda p: (p.namespace, p.name))

    def wait_pods(
        self,
        selector: str,
        *,
        until: Literal["running", "terminal"],
        count: int,
        timeout_s: float,
        poll_s: float = 2.0,
        namespace: Any = _USE_DEFAULT,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> list[Pod]:
        """Wait until at least ``count`` pods match ``selector`` and all of them got to ``until``.

        ``running``: every pod has left Pending (phase Running, or already Succeeded/Failed);
        ``terminal``: every pod is Succeeded or Failed. One ``get pods -l`` call per poll.

        Returns:
            The pods of the last poll (sorted by name).
        Raises:
            KubeTimeout: not there after ``timeout_s``; ``.pods`` holds the last pods seen.
            KubePodStuck: a pod will never get there (image/creation error, admission failure).
        """
        if until not in ("running", "terminal"):
            raise ValueError(f"until must be 'running' or 'terminal', not {until!r}")
        done = (lambda p: p.phase != "Pending" and p.phase != "Unknown") if until == "running" else (
            lambda p: p.is_terminal)
        deadline = clock() + timeout_s
        command = self.argv(["get", "pods", "-l", selector, "-o", "json"], namespace=namespace)
        while True:
            pods = self.list_pods(selector, namespace=namespace)
            if len(pods) >= count and all(done(p) for p in pods):
                return pods
            stuck = [p for p in pods if not done(p) and (p.waiting_reason in STUCK_REASONS
                                                         or p.reason == "UnexpectedAdmissionError")]
            if stuck:
                what = ", ".join(f"{p.name}: {p.waiting_reason or p.reason}" for p in stuck)
                raise KubePodStuck(command, f"pods will not become {until}: {what}", pods)
            remaining = deadline - clock()
            if remaining <= 0:
                seen = ", ".join(f"{p.name}={p.phase}" for p in pods) or "none"
                raise KubeTimeout(command, "", -1, f"timed out after {timeout_s:g}s waiting for {count} pod(s) "
                                  f"-l {selector} to be {until}; seen: {seen}", pods=pods)
            sleep(min(poll_s, remaining))

    # -- logs

    def _log_args(self, pod: str | None, selector: str | None, *, timestamps: bool, since_time: datetime | None,
                  tail: int, container: str | None, previous: bool, all_containers: bool, prefix: bool,
                  follow: bool, max_log_requests: int | None) -> list[str]:
        if (pod is None) == (selector is None):
            raise ValueError("pass exactly one of pod= or selector=")
        args = ["logs", pod] if pod is not None else ["logs", "-l", str(selector)]
        if follow:
            args.append("-f")
        if timestamps:
            args.append("--timestamps")
        if since_time is not None:
            args.append(f"--since-time={format_time(since_time)}")
        args.append(f"--tail={tail}")
        if container:
            args += ["-c", container]
        if previous:
            args.append("--previous")
        if all_containers:
            args.append("--all-containers")
        if prefix:
            args.append("--prefix")
        if max_log_requests is not None:
            args.append(f"--max-log-requests={max_log_requests}")
        return args

    def logs(self, pod: str | None = None, selector: str | None = None, *, timestamps: bool = True,
             since_time: datetime | None = None, tail: int = -1, container: str | None = None,
             previous: bool = False, all_containers: bool = False, prefix: bool = False,
             namespace: Any = _USE_DEFAULT) -> str:
        """Container logs of one pod, or of every pod matching ``selector`` (concatenated).

        ``tail=-1`` (the default) means every line: without it kubectl returns only the last 10 lines
        per pod for a selector. ``since_time`` must be timezone-aware; kubectl sends whole seconds.
        With ``timestamps`` each line starts with the kubelet's RFC3339Nano time and a space.

        Raises:
            KubeNotFound: the pod does not exist. KubeError: e.g. the container has not started.
        """
        args = self._log_args(pod, selector, timestamps=timestamps, since_time=since_time, tail=tail,
                              container=container, previous=previous, all_containers=all_containers,
                              prefix=prefix, follow=False, max_log_requests=None)
        return self.run(args, namespace=namespace, wait_s=max(60.0, self.request_timeout_s)).stdout

    def logs_by_pod(self, selector: str, *, timestamps: bool = True, since_time: datetime | None = None,
                    container: str | None = None, namespace: Any = _USE_DEFAULT) -> dict[str, str]:
        """Full logs of every pod matching ``selector`` in one call (``--prefix``), keyed by pod name."""
        text = self.logs(selector=selector, timestamps=timestamps, since_time=since_time, container=container,
                         prefix=True, namespace=namespace)
        return split_prefixed_logs(text)

    def logs_follow_argv(self, selector: str, since_time: datetime | None = None, *, container: str | None = None,
                         timestamps: bool = True, prefix: bool = True, max_log_requests: int = 50,
                         namespace: Any = _USE_DEFAULT) -> list[str]:
        """argv of ``kubectl logs -f -l <selector>`` for the transport's ``spawn`` (no request timeout).

        ``--request-timeout 0s`` keeps the stream open; ``--max-log-requests`` lifts kubectl's limit of
        5 concurrent streams. The call is counted in :attr:`calls`.
        """
        args = self._log_args(None, selector, timestamps=timestamps, since_time=since_time, tail=-1,
                              container=container, previous=False, all_containers=False, prefix=prefix,
                              follow=True, max_log_requests=max_log_requests)
        with self._lock:
            self.calls += 1
        return self.argv(args, namespace=namespace, request_timeout_s=0)

    # -- metadata

    def annotate(self, pod: str, annotations: Mapping[str, str | None], *, overwrite: bool = True,
                 kind: str = "pod", namespace: Any = _USE_DEFAULT) -> None:
        """Set (or, for a None value, remove) annotations of one object."""
        if not annotations:
            raise ValueError("no annotations given")
        pairs = [f"{k}-" if v is None else f"{k}={v}" for k, v in annotations.items()]
        args = ["annotate", kind, pod, *pairs]
        if overwrite:
            args.append("--overwrite")
        self.run(args, namespace=namespace)

    def label(self, name: str, labels: Mapping[str, str | None], *, overwrite: bool = True, kind: str = "pod",
              namespace: Any = _USE_DEFAULT) -> None:
        """Set (or, for a None value, remove) labels of one object."""
        pairs = [f"{k}-" if v is None else f"{k}={v}" for k, v in labels.items()]
        self.run(["label", kind, name, *pairs, *(["--overwrite"] if overwrite else [])], namespace=namespace)

    # -- deletion

    def delete(self, selector: str | None = None, *, name: str | None = None, kind: str = "pods",
               wait: bool = True, timeout_s: float = 60.0, grace_period_s: int | None = None,
               namespace: Any = _USE_DEFAULT) -> DeleteResult:
        """Delete by label selector (or one object by ``name``); missing objects are not an error.

        With ``wait``, kubectl waits up to ``timeout_s`` for the objects to be gone; if that times out,
        the same objects are deleted again with ``--grace-period=0 --force`` (``forced=True``).
        """
        if (selector is None) == (name is None):
            raise ValueError("pass exactly one of selector or name=")
        target = ["-l", selector] if selector is not None else [str(name)]
        args = ["delete", kind, *target, "--ignore-not-found", f"--wait={'true' if wait else 'false'}"]
        if wait:
            args.append(f"--timeout={duration(timeout_s)}")
        if grace_period_s is not None:
            args.append(f"--grace-period={grace_period_s}")
        try:
            result = self.run(args, namespace=namespace, wait_s=timeout_s if wait else None)
        except KubeTimeout as exc:
            forced = self.run(["delete", kind, *target, "--ignore-not-found", "--grace-period=0", "--force",
                               "--wait=false"], namespace=namespace)
            names = _deleted(exc.stderr) + _deleted(forced.stdout)
            return DeleteResult(tuple(dict.fromkeys(names)), True)
        return DeleteResult(tuple(_deleted(result.stdout)), False)

    # -- rollouts and nodes

    def rollout_restart(self, kind: str, name: str, namespace: Any = _USE_DEFAULT) -> None:
        """``kubectl rollout restart <kind>/<name>`` (stamps ``kubectl.kubernetes.io/restartedAt``)."""
        self.run(["rollout", "restart", f"{kind}/{name}"], namespace=namespace)

    def rollout_status(self, kind: str, name: str, namespace: Any = _USE_DEFAULT, timeout_s: float = 180.0) -> str:
        """Wait with ``kubectl rollout status`` until the rollout is complete; returns its output.

        Raises:
            KubeTimeout: not complete after ``timeout_s``.
        """
        args = ["rollout", "status", f"{kind}/{name}", f"--timeout={duration(timeout_s)}"]
        return self.run(args, namespace=namespace, wait_s=timeout_s).stdout

    def cordon(self, node: str) -> None:
        self.run(["cordon", node], namespace=None)

    def uncordon(self, node: str) -> None:
        self.run(["uncordon", node], namespace=None)

    def drain(self, node: str, *, timeout_s: float = 300.0, grace_period_s: int | None = None,
              pod_selector: str | None = None) -> str:
        """``kubectl drain --ignore-daemonsets --delete-emptydir-data --force``; returns its output.

        The caller uncordons in a ``finally``. Raises KubeTimeout when the evictions do not finish.
        """
        args = ["drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--force",
                f"--timeout={duration(timeout_s)}"]
        if grace_period_s is not None:
            args.append(f"--grace-period={grace_period_s}")
        if pod_selector:
            args.append(f"--pod-selector={pod_selector}")
        result = self.run(args, namespace=None, wait_s=timeout_s)
        return result.stdout + result.stderr

    def get_node(self, name: str) -> Node:
        """One node. Raises KubeNotFound."""
        return parse_node(self.get_json(["get", "node", name], namespace=None))

    def list_nodes(self, selector: str | None = None) -> list[Node]:
        args = ["get", "nodes"] + (["-l", selector] if selector else [])
        return sorted((parse_node(o) for o in _items(self.get_json(args, namespace=None))), key=lambda n: n.name)

    def get_daemonset(self, name: str, namespace: Any = _USE_DEFAULT) -> DaemonSetStatus:
        """One DaemonSet's status. Raises KubeNotFound."""
        return parse_daemonset(self.get_json(["get", "daemonset", name], namespace=namespace))

    def pod_env_value(self, pod: Pod | str, name: str, *, container: str | None = None,
                      namespace: Any = _USE_DEFAULT) -> str | None:
        """Literal value of an env variable in a pod's spec (fetches the pod when given its name)."""
        obj = pod if isinstance(pod, Pod) else self.get_pod(pod, namespace=namespace)
        return obj.env(name, container)

    def server_version(self) -> str:
        """The API server's ``gitVersion`` (``kubectl version -o json``)."""
        doc = self.get_json(["version"], namespace=None)
        return str((doc.get("serverVersion") or {}).get("gitVersion", ""))

    def __repr__(self) -> str:
        return f"Kubectl({self.host.name}: {shlex.join(self.argv([], namespace=None))})"


def _deleted(text: str) -> list[str]:
    return [f"{m.group('kind')}/{m.group('name')}" for m in _DELETED_RE.finditer(text or "")]
