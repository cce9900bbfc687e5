"""Typed views of Kubernetes objects parsed from ``kubectl -o json`` (pure, no I/O).

:class:`Pod`, :class:`Node`, :class:`DaemonSetStatus` are frozen dataclasses with times as timezone-aware
UTC ``datetime`` (Kubernetes writes whole seconds) and the original JSON in ``raw``; :func:`parse_time`,
:func:`format_time` and :func:`duration` convert Kubernetes times and durations; :func:`split_prefixed_logs`
splits ``kubectl logs --prefix`` output per pod. :mod:`xpushare.transport.kubectl` runs the commands.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal


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



