"""Which of the scheduler's clients are one of our workloads: the matching key, chosen by the cluster's mode.

The scheduler knows a client by what the client library sent at REGISTER and by the socket peer
(docs/sut/log.md §registration, docs/sut/protocol.md §message-types, docs/sut/metrics.md §catalogue;
docs/sut/client.md §identity):

* in Kubernetes (``mode: k8s``) the library sends the pod's name (``$HOSTNAME``) and namespace, so a
  workload is matched by the ``pod`` (and ``namespace``) label; the tool never knows the host pid of a
  container's process;
* outside Kubernetes (``mode: host``, the built-in ``local`` cluster) pod and namespace are both the
  string ``none`` for every client, so a workload is matched by ``host_pid`` (the pid the host backend
  recorded for the process, ``WorkloadRecord.host_pid``; the scheduler exports the SO_PEERCRED pid) and by
  ``client_id`` (the ``Client ID = <id16>`` lines of the workload's own log), never by pod name.

:func:`client_match` is the one place that picks the key by mode; every judge and check takes the
resulting :class:`ClientMatch` and works the same way in both modes. A match says which key matched
(:meth:`ClientMatch.key_of`, e.g. ``"host_pid 12345"``), so verdicts can show it.

Where the keys are found (sources, exact formats):

* ``/metrics``: ``<gen>_client_info{namespace,pod,client_id,gpu_uuid,gpu_index,host_pid} 1``
  (metrics_exporter.c ``format_client_metrics``); the other client families carry
  ``namespace,pod,client_id,gpu_uuid`` only, so they are looked up by the matched ``client_id``;
* the scheduler log: ``Registered client <id16> on GPU <key> with Pod name = <pod>, Pod namespace = <ns>``
  (scheduler.c, INFO), preceded in debug mode by ``SO_PEERCRED: client fd=<fd> pid=<pid> (client
  reported pid=<pid>)`` (DEBUG) which :mod:`xpushare.parsers.scheduler_log` attaches to the
  registration as ``host_pid``; removal is ``Removing client <id16>`` (the id only).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from xpushare.backends.base import Backend
from xpushare.inventory.schema import MODE_K8S, is_kubernetes_mode
from xpushare.model.workload import WorkloadRecord
from xpushare.parsers import client_lines
from xpushare.parsers.metrics import Exposition, Sample
from xpushare.parsers.scheduler_log_records import Registration, SchedulerLogSummary

__all__ = [
    "KEY_HOST_PID",
    "KEY_POD",
    "ClientMatch",
    "client_match",
    "client_values",
    "live_matches",
    "matched_clients",
    "registration_labels",
    "registrations_of",
    "workload_labels",
]

KEY_POD = "pod"
"""Kubernetes: the client's ``pod`` (and ``namespace``) label is the workload's pod."""
KEY_HOST_PID = "host_pid"
"""Host mode: the client's ``host_pid`` is the workload process's pid (or its ``client_id`` one the
workload logged)."""


@dataclass(frozen=True)
class ClientMatch:
    """How the scheduler's clients of one workload are recognised.

    ``workload``: our name of the workload (the pod name in Kubernetes, the WorkloadSpec name in host mode);
    ``key``: :data:`KEY_POD` or :data:`KEY_HOST_PID` (chosen by :func:`client_match`, never by hand);
    ``pod``/``namespace``: k8s only (``namespace`` None: any); ``host_pids``: host only, the pids of
    the workload's process as the scheduler sees them (host pid namespace); ``client_ids``: host only,
    16-hex-digit ids from the workload's ``Client ID = <id16>`` lines (one per CUDA process start).
    """

    workload: str
    key: str
    pod: str | None = None
    namespace: str | None = None
    host_pids: tuple[int, ...] = ()
    client_ids: tuple[str, ...] = ()

    @property
    def usable(self) -> bool:
        """Whether anything can match: a pod name (k8s), or a pid or client id (host)."""
        if self.key == KEY_POD:
            return bool(self.pod)
        return bool(self.host_pids or self.client_ids)

    def describe(self) -> str:
        """What is matched on, for expressions and evidence: ``pod default/probe``, ``host_pid 478``,
        ``host_pid 478 or client_id 0600a8daa2b6e910``; ``host_pid unknown`` when nothing is known."""
        if self.key == KEY_POD:
            return f"pod {self.namespace}/{self.pod}" if self.namespace else f"pod {self.pod}"
        parts = [f"host_pid {', '.join(str(p) for p in self.host_pids)}"] if self.host_pids else []
        if self.client_ids:
            parts.append(f"client_id {', '.join(self.client_ids)}")
        return " or ".join(parts) if parts else "host_pid unknown (not recorded) and no Client ID line"

    def key_of(self, labels: Mapping[str, str | None]) -> str | None:
        """The key by which a client with these labels is this workload's, or None when it is not.

        ``labels``: a client's ``pod``, ``namespace``, ``host_pid`` (decimal text) and ``client_id``
        (a ``client_info`` sample's labels, or :func:`registration_labels`). Returns e.g.
        ``"pod default/probe"``, ``"host_pid 478"``, ``"client_id 0600a8daa2b6e910"`` or
        ``"host_pid 478 and client_id 0600a8daa2b6e910"``.
        """
        if self.key == KEY_POD:
            if not self.pod or labels.get("pod") != self.pod:
                return None
            if self.namespace is not None and labels.get("namespace") != self.namespace:
                return None
            return self.describe()
        hits: list[str] = []
        pid = (labels.get("host_pid") or "").strip()
        if pid.isdigit() and int(pid) in self.host_pids:
            hits.append(f"host_pid {int(pid)}")
        cid = labels.get("client_id")
        if cid and cid in self.client_ids:
            hits.append(f"client_id {cid}")
        return " and ".join(hits) or None

    def matches(self, labels: Mapping[str, str | None]) -> bool:
        """Whether a client with these labels is this workload's (:meth:`key_of` is not None)."""
        return self.key_of(labels) is not None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (for ``plan.json``)."""
        return {"workload": self.workload, "key": self.key, "pod": self.pod, "namespace": self.namespace,
                "host_pids": list(self.host_pids), "client_ids": list(self.client_ids)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ClientMatch:
        """Inverse of :meth:`to_dict`. Raises ``KeyError``/``ValueError`` on a malformed dict."""
        key = str(data["key"])
        if key not in (KEY_POD, KEY_HOST_PID):
            raise ValueError(f"unknown client match key {key!r}")
        return cls(str(data["workload"]), key, data.get("pod"), data.get("namespace"),
                   tuple(int(p) for p in data.get("host_pids") or ()),
                   tuple(str(c) for c in data.get("client_ids") or ()))


def client_match(mode: str, workload: str, *, namespace: str | None = None, record: WorkloadRecord | None = None,
                 log: str | None = None) -> ClientMatch:
    """The match of one workload, its key chosen by the cluster ``mode`` (``"k8s"`` or anything else: host).

    * ``k8s``: :data:`KEY_POD` on ``record.name`` (else ``workload``), in ``namespace`` (None: any);
      ``log`` and pids are not used (a container's host pid is not known to the tool);
    * host: :data:`KEY_HOST_PID` on ``record.host_pid`` (the pid the host backend recorded; None when
      not recorded yet) and on every ``Client ID = <id16>`` of ``log`` (the workload's output;
      :func:`xpushare.parsers.client_lines.client_ids`). Pod and namespace are ignored: outside Kubernetes
      every client is ``none``/``none``.
    """
    if is_kubernetes_mode(mode):
        return ClientMatch(workload, KEY_POD, pod=record.name if record is not None else workload,
                           namespace=namespace)
    pids = (record.host_pid,) if record is not None and record.host_pid is not None and record.host_pid > 0 else ()
    cids = tuple(dict.fromkeys(client_lines.client_ids(log))) if log else ()
    return ClientMatch(workload, KEY_HOST_PID, host_pids=pids, client_ids=cids)


def live_matches(backend: Backend, names: Sequence[str], *,
                 namespace: str | None = None) -> list[ClientMatch]:
    """The matches of running workloads, for the acts (the judgments rebuild them from the stored evidence).

    Kubernetes: by pod name (in ``namespace``), no call; host mode: from one poll of the backend's records
    (``wait_running`` with a 0 s timeout: the recorded ``host_pid``) and each workload's output so far (its
    ``Client ID`` lines). A host-mode match may still lack the pid or id of a process that just started.
    """
    if is_kubernetes_mode(backend.mode):
        return [client_match(MODE_K8S, name, namespace=namespace) for name in names]
    records = {r.name: r for r in backend.wait_running(names, 0.0)} if names else {}
    return [client_match(backend.mode, name, record=records.get(name), log=backend.read_log(name))
            for name in names]


def matched_clients(exp: Exposition, match: ClientMatch) -> list[tuple[Sample, str]]:
    """The ``client_info`` samples of the workload, each with the key that matched (text order)."""
    out: list[tuple[Sample, str]] = []
    for s in exp.values("client_info"):
        key = match.key_of(s.label_dict)
        if key is not None:
            out.append((s, key))
    return out


def client_values(exp: Exposition, metric: str, match: ClientMatch) -> list[Sample]:
    """Samples of a per-client family (``client_core_quota_config_percent`` ...) of the workload's clients.

    The clients are found in ``client_info`` by the match, then the family is read by their
    ``client_id`` (only ``client_info`` and ``client_nvml_used_bytes`` carry ``host_pid``). Text order.
    """
    ids = {s.label("client_id") for s, _ in matched_clients(exp, match)}
    return [s for s in exp.values(metric) if s.label("client_id") in ids]


def registration_labels(reg: Registration) -> dict[str, str | None]:
    """A registration line's identity as client labels (``host_pid`` only when the log had SO_PEERCRED)."""
    return {"pod": reg.pod, "namespace": reg.namespace, "client_id": reg.cid,
            "host_pid": str(reg.host_pid) if reg.host_pid is not None else None}


def registrations_of(summary: SchedulerLogSummary, match: ClientMatch) -> list[tuple[Registration, str]]:
    """The workload's ``Registered client`` lines (in log order), each with the key that matched."""
    out: list[tuple[Registration, str]] = []
    for r in summary.registrations:
        key = match.key_of(registration_labels(r))
        if key is not None:
            out.append((r, key))
    return out


def workload_labels(registrations: Iterable[Registration], matches: Sequence[ClientMatch]) -> dict[str, str]:
    """``client id -> "<workload> (matched by <key>)"`` for the registrations of our workloads (others left
    out), e.g. for :meth:`~xpushare.parsers.scheduler_log_records.SchedulerLogSummary.distribution_table`."""
    out: dict[str, str] = {}
    for r in registrations:
        for m in matches:
            key = m.key_of(registration_labels(r))
            if key is not None:
                out.setdefault(r.cid, f"{m.workload} (matched by {key})")
                break
    return out
