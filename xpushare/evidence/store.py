"""Read-only view of a case directory: the only input judgments get (never live cluster state).

Pod records come from ``pods.json``; pod outputs from ``pods/<name>.log``; everything else by file name.
An :class:`Evidence` can also be built in memory (``Evidence.from_parts``) for judgment tests.

The GPU of each pod is derived here, when the evidence is loaded, never at harvest: harvest stores what
the backend observed (``pods.json``), the scheduler's log (``scheduler.log``) and, in host mode, the pid
of each workload process; :func:`gpu_assignments` matches every pod to its ``Registered client ... on GPU
<key>`` line (:mod:`xpushare.evidence.client_match`: by pod name and namespace in Kubernetes, by ``host_pid`` /
``client_id`` in host mode) and the loaded records carry that GPU in ``WorkloadRecord.gpu``. A pod with no
registration keeps the GPU ``pods.json`` recorded (in host mode the backend's own placement), and its
:class:`GpuAssignment` says so. So ``invoke judge`` on a stored run re-derives the mapping with the
current parser, and :func:`write_gpu_mapping` writes ``gpu_mapping.txt`` from it at judgment time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from xpushare.evidence.client_match import client_match, registrations_of
from xpushare.evidence.nvml_placement import NvmlPlacement, key_uuid, nvml_placement
from xpushare.inventory.schema import MODE_HOST, MODE_K8S, is_host_mode, is_kubernetes_mode
from xpushare.model.atomic_file import atomic_write_text
from xpushare.model.workload import WorkloadRecord, read_pod_records
from xpushare.parsers.scheduler_log import parse_text
from xpushare.parsers.scheduler_log_records import Registration, SchedulerLogSummary

__all__ = [
    "SCHEDULER_NODE_FILE",
    "SOURCE_NONE",
    "SOURCE_RECORDED",
    "SOURCE_REGISTRATION",
    "Evidence",
    "GpuAssignment",
    "gpu_assignments",
    "write_gpu_mapping",
]

SOURCE_REGISTRATION = "registration"
"""The GPU key of the pod's last ``Registered client`` line (where the scheduler put the client)."""
SOURCE_RECORDED = "pods.json"
"""No registration: the GPU ``pods.json`` recorded (host mode: the backend's own placement)."""
SOURCE_NONE = "none"
"""Neither a registration nor a recorded GPU."""

SCHEDULER_NODE_FILE = "scheduler_node.txt"
"""Host mode: the host whose scheduler wrote ``scheduler.log`` (only its pods' pids are matched there)."""


@dataclass(frozen=True)
class GpuAssignment:
    """Where one pod ran, as the judgments see it.

    ``gpu``: the registration's GPU key (``source`` :data:`SOURCE_REGISTRATION`), else the recorded GPU
    (:data:`SOURCE_RECORDED`), else None (:data:`SOURCE_NONE`); ``matched_by``: the key that found the
    registration (``pod default/x``, ``host_pid 478 and client_id ...``); ``recorded``: ``pods.json``'s
    ``gpu`` (host mode: the backend's placement); ``client_ids``: the scheduler client ids of every matched
    registration, in log order (a pod whose process registered again has several).
    """

    pod: str
    node: str | None
    gpu: str | None
    source: str
    matched_by: str | None = None
    recorded: str | None = None
    client_ids: tuple[str, ...] = ()
    registered_key: str | None = None
    """The GPU key of the matched registration (the SUT's account), None without one."""
    nvml: NvmlPlacement | None = None
    """NVML's placement of the process (host mode, from the node sampler); None where no pid is known."""

    @property
    def nvml_gpu(self) -> str | None:
        """The one GPU UUID NVML saw the process on (None: not seen, several, or no NVML evidence)."""
        return self.nvml.uuid if self.nvml is not None else None

    @property
    def key_gpu(self) -> str | None:
        """The UUID the SUT's registered key names on the pod's node (None: no registration, or the key names
        no GPU there; see :func:`xpushare.evidence.nvml_placement.key_uuid`)."""
        return key_uuid(self.registered_key, self.nvml.gpus if self.nvml is not None else {})

    @property
    def identity_agrees(self) -> bool | None:
        """Whether the SUT's registered GPU is the GPU NVML saw the process on (None: one of them unknown)."""
        if self.registered_key is None or self.nvml is None or not self.nvml.uuids:
            return None
        return self.key_gpu is not None and self.key_gpu in self.nvml.uuids and len(self.nvml.uuids) == 1

    def describe(self) -> str:
        """``registration (host_pid 478); NVML GPU-...``, ``pods.json: tool placement, no registration`` ..."""
        nvml = f"; NVML {', '.join(self.nvml.uuids)}" if self.nvml is not None and self.nvml.uuids else ""
        if self.source == SOURCE_REGISTRATION:
            return f"registration ({self.matched_by}){nvml}"
        if self.source == SOURCE_RECORDED:
            return f"pods.json {self.gpu} (no registration in the evidence){nvml}"
        return f"unknown (no registration, no GPU in pods.json){nvml}"


@dataclass
class Evidence:
    """Evidence of one case: pod records, pod logs by pod key (:func:`pod_key`: the pod's name, unless pods of
    two namespaces have that name), other files by relative path.

    ``mode``: ``"k8s"`` or ``"host"`` (how pods are matched to registrations); ``assignments``: pod name ->
    :class:`GpuAssignment` of every record (without a scheduler log: the GPU ``pods.json`` recorded).
    """

    pods: list[WorkloadRecord]
    logs: dict[str, str]
    files: dict[str, str] = field(default_factory=dict)
    case_dir: Path | None = None
    mode: str | None = None
    assignments: dict[str, GpuAssignment] = field(default_factory=dict)

    @property
    def on_kubernetes(self) -> bool:
        """The workloads were Kubernetes pods (``mode`` k8s), not processes on the GPU hosts."""
        return self.mode is not None and is_kubernetes_mode(self.mode)

    @property
    def on_hosts(self) -> bool:
        """The workloads were processes on the GPU hosts (``mode`` host), matched to registrations by host pid."""
        return self.mode is not None and is_host_mode(self.mode)

    @classmethod
    def load(cls, case_dir: Path, mode: str | None = None) -> Evidence:
        """Read ``pods.json`` and ``pods/*.log`` of a case dir and derive each pod's GPU from
        ``scheduler.log``; other files are read on demand. ``mode``: the cluster's mode (None: host when
        a record carries a host pid, else k8s)."""
        pods = read_pod_records(case_dir)
        logs = {}
        for rec in pods:
            key = pod_key(rec, pods)
            path = case_dir / "pods" / f"{key}.log"
            if path.exists():
                logs[key] = path.read_text(encoding="utf-8", errors="replace")
        return cls.from_parts(pods, logs, case_dir=case_dir, mode=mode)

    @classmethod
    def from_parts(
        cls,
        pods: list[WorkloadRecord],
        logs: Mapping[str, str],
        files: Mapping[str, str] | None = None,
        *,
        case_dir: Path | None = None,
        mode: str | None = None,
    ) -> Evidence:
        """Evidence from records, logs and files (``files`` wins over ``case_dir``). Each record's ``gpu``
        becomes its derived GPU (:func:`gpu_assignments`: the registration's, with a ``scheduler.log``)."""
        ev = cls(pods=list(pods), logs=dict(logs), files=dict(files or {}), case_dir=case_dir)
        ev.mode = mode or (MODE_HOST if any(p.host_pid is not None for p in ev.pods) else MODE_K8S)
        # without a scheduler log nothing registered: every pod keeps the GPU pods.json recorded
        ev.assignments = gpu_assignments(ev.pods, parse_text(ev.text("scheduler.log") or ""), ev.mode, ev.logs,
                                         scheduler_node=(ev.text(SCHEDULER_NODE_FILE) or "").strip() or None,
                                         read=ev.text)
        ev.pods = [dataclasses.replace(p, gpu=ev.assignments[pod_key(p, ev.pods)].gpu) for p in ev.pods]
        return ev

    def key(self, rec: WorkloadRecord) -> str:
        """The key of ``rec`` in :attr:`logs` and :attr:`assignments` (:func:`pod_key`)."""
        return pod_key(rec, self.pods)

    def text(self, name: str) -> str | None:
        """Content of a case file (relative path), or None when it was not collected."""
        if name in self.files:
            return self.files[name]
        if self.case_dir is not None and (self.case_dir / name).exists():
            return (self.case_dir / name).read_text(encoding="utf-8", errors="replace")
        return None

    def pod(self, name: str) -> WorkloadRecord | None:
        return next((p for p in self.pods if p.name == name), None)

    def assignment(self, name: str) -> GpuAssignment | None:
        """The pod's :class:`GpuAssignment` (None: no record of that pod)."""
        return self.assignments.get(name)

    def pod_files(self) -> list[str]:
        """Relative paths of the pod logs that exist (for the verdict's evidence list)."""
        return [f"pods/{n}.log" for n in sorted(self.logs)]


def gpu_assignments(records: Sequence[WorkloadRecord], summary: SchedulerLogSummary, mode: str,
                    logs: Mapping[str, str] | None = None, *, scheduler_node: str | None = None,
                    read: Callable[[str], str | None] | None = None) -> dict[str, GpuAssignment]:
    """Each pod's GPU: where NVML saw its process, else the scheduler's registration (the last one matched).

    With ``read`` (case-relative name -> text) every record with a ``host_pid`` (host mode), or whose node's
    sampler named its processes (Kubernetes: by the pod's name), also gets NVML's placement
    (:mod:`xpushare.evidence.nvml_placement`, the node sampler's files): NVML is the truth of where a
    workload ran, so the pod's ``gpu`` is the UUID NVML saw it on; otherwise the registration's key, resolved
    to the node's UUID where NVML gave the node's GPUs (so pods seen and unseen by NVML compare).

    * ``k8s``: matched by pod name and, when the record has one, namespace;
    * host: by ``host_pid`` and by the ``Client ID`` lines of the pod's own log (``logs``); pods are
      matched only when they ran on ``scheduler_node`` (the host whose scheduler wrote the log; None:
      any), since pids of other hosts say nothing about this log. The fallback is the recorded
      ``gpu_key`` (the key the client reports for the backend's placement, so it compares with the
      registrations' keys) when the log registered anyone, else the recorded ``gpu``.
    """
    logs = logs or {}
    any_registration = bool(summary.registrations)
    out: dict[str, GpuAssignment] = {}
    for r in records:
        found: list[tuple[Registration, str]] = []
        if not is_host_mode(mode) or scheduler_node is None or r.node == scheduler_node:
            match = client_match(mode, r.name, namespace=r.namespace, record=r, log=logs.get(pod_key(r, records)))
            found = registrations_of(summary, match) if match.usable else []
        nvml = None
        if read is not None and r.host_pid is not None:
            nvml = nvml_placement(read, r.node, r.host_pid)
        elif (read is not None and is_kubernetes_mode(mode) and r.node is not None
              and read(f"sampler/{r.node}_pids.csv")):
            nvml = nvml_placement(read, r.node, None, pod=r.name)
        if found:
            reg, key = found[-1]
            a = GpuAssignment(r.name, r.node, reg.gpu, SOURCE_REGISTRATION, key, r.gpu,
                              tuple(dict.fromkeys(f.cid for f, _ in found)), reg.gpu, nvml)
        else:
            recorded = (r.gpu_key or r.gpu) if is_host_mode(mode) and any_registration else r.gpu
            a = GpuAssignment(r.name, r.node, recorded, SOURCE_RECORDED if recorded is not None else SOURCE_NONE,
                              None, r.gpu, nvml=nvml)
        if nvml is not None and nvml.gpus:  # one namespace of GPU names for every pod: the node's UUIDs
            gpu = a.nvml_gpu or key_uuid(a.gpu, nvml.gpus) or a.gpu
            a = dataclasses.replace(a, gpu=gpu)
        out[pod_key(r, records)] = a
    return out


def pod_key(rec: WorkloadRecord, records: Sequence[WorkloadRecord]) -> str:
    """How a pod is named in the evidence (its log ``pods/<key>.log``, :attr:`Evidence.logs`,
    :attr:`Evidence.assignments`): its name, or ``<namespace>/<name>`` where another record has the same name
    (two tenants' pods in namespaces of their own)."""
    if rec.namespace and sum(1 for r in records if r.name == rec.name) > 1:
        return f"{rec.namespace}/{rec.name}"
    return rec.name


def write_gpu_mapping(ev: Evidence) -> list[str]:
    """``gpu_mapping.txt`` of the case dir from the derived registrations, for people and reports; nothing
    without a case dir, a scheduler log or pods. Tab-separated, ``-`` where a pod never registered:

    * k8s: ``pod node gpu_uuid nvml_gpu_uuid agree``: the registration's GPU, the GPU(s) NVML saw the pod's
      processes on (named by the node sampler by HOSTNAME) and whether they agree;
    * host: ``pod node gpu_key matched_by key_gpu_uuid nvml_gpu_uuid agree``: the SUT's registered key and
      what matched it (``host_pid <pid>`` / ``client_id <id16>``), the UUID that key names on the node, the
      GPU(s) NVML saw the process on, and whether the two agree (``yes``, ``NO``, ``-``: one is unknown).
    """
    if ev.case_dir is None or not ev.pods or ev.text("scheduler.log") is None:
        return []
    rows = []
    for r in ev.pods:
        a = ev.assignments.get(r.name)
        reg = a if a is not None and a.source == SOURCE_REGISTRATION else None
        gpu = (reg.registered_key if reg else None) or "-"
        nvml = ",".join(a.nvml.uuids) if a is not None and a.nvml is not None and a.nvml.uuids else "-"
        agree = {True: "yes", False: "NO", None: "-"}[a.identity_agrees if a is not None else None]
        if ev.on_hosts:
            rows.append(f"{r.name}\t{r.node or '-'}\t{gpu}\t{(reg.matched_by if reg else None) or '-'}\t"
                        f"{(a.key_gpu if a is not None else None) or '-'}\t{nvml}\t{agree}")
        else:
            rows.append(f"{r.name}\t{r.node or '-'}\t{gpu}\t{nvml}\t{agree}")
    header = ("pod\tnode\tgpu_key\tmatched_by\tkey_gpu_uuid\tnvml_gpu_uuid\tagree" if ev.on_hosts
              else "pod\tnode\tgpu_uuid\tnvml_gpu_uuid\tagree")
    atomic_write_text(ev.case_dir / "gpu_mapping.txt", header + "\n" + "\n".join(rows) + "\n")
    return ["gpu_mapping.txt"]
