"""Where each workload ran, as NVML saw it: the second source of placement, beside the SUT's registrations.

The node sampler (``workloads/node_sampler.py``) runs on every GPU host during a case and stores
``sampler/<node>_procs.csv`` (NVML's compute processes: host pid -> GPU index), ``sampler/<node>_gpu.csv``
(GPU index -> UUID) and ``sampler/<node>_pids.csv`` (each pid's ``HOSTNAME``, a pod's name in Kubernetes);
:mod:`xpushare.parsers.sampler_csv` parses them. A workload whose recorded ``host_pid`` (host mode), or whose
pod name (Kubernetes), appears in its node's process rows ran on those GPUs, whatever the client library
reported to the scheduler.

The SUT's own account is the GPU key of its ``Registered client ... on GPU <key>`` line: the first token of
``NVIDIA_VISIBLE_DEVICES`` else ``CUDA_VISIBLE_DEVICES`` the client saw (a UUID, or an index into the host's
GPUs), or ``default``. :func:`key_uuid` resolves such a key to a UUID so that the two accounts compare.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from xpushare.parsers.sampler_csv import gpu_rows, index_to_uuid, pid_rows, proc_rows

__all__ = ["NvmlPlacement", "key_uuid", "nvml_placement", "pod_pids", "sampler_files"]


@dataclass(frozen=True)
class NvmlPlacement:
    """NVML's view of one workload process.

    ``uuids``: the GPUs NVML listed the pid on (in first-seen order; empty: never seen); ``samples``: how many
    process rows named it; ``gpus``: the node's NVML index -> UUID (to resolve the SUT's index keys);
    ``note``: why there is no placement (no sampler files, no GPU on the node, the pid never listed).
    """

    uuids: tuple[str, ...]
    samples: int
    gpus: Mapping[int, str]
    note: str | None = None

    @property
    def uuid(self) -> str | None:
        """The one GPU NVML saw the process on (None: none, or several)."""
        return self.uuids[0] if len(self.uuids) == 1 else None


def sampler_files(node: str) -> tuple[str, str]:
    """The case-relative names of ``node``'s sampler files: ``(procs.csv, gpu.csv)``."""
    return f"sampler/{node}_procs.csv", f"sampler/{node}_gpu.csv"


def pod_pids(read: Callable[[str], str | None], node: str, pod: str) -> tuple[int, ...]:
    """The host pids NVML listed on ``node`` whose ``HOSTNAME`` is ``pod`` (``sampler/<node>_pids.csv``: in
    Kubernetes the container runtime sets a pod's HOSTNAME to its name), in first-seen order."""
    return tuple(dict.fromkeys(r.pid for r in pid_rows(read(f"sampler/{node}_pids.csv") or "") if r.hostname == pod))


def nvml_placement(read: Callable[[str], str | None], node: str | None, pid: int | None,
                   *, pod: str | None = None) -> NvmlPlacement:
    """NVML's placement of a workload on ``node`` from the case's sampler files (``read``: case-relative name ->
    text, None when the file was not stored): the process with host pid ``pid`` (host mode), else every
    process the sampler named ``pod`` (Kubernetes, :func:`pod_pids`)."""
    if node is None or (pid is None and pod is None):
        return NvmlPlacement((), 0, {}, "no node, host pid or pod name recorded")
    procs_name, gpu_name = sampler_files(node)
    procs_text, gpu_text = read(procs_name), read(gpu_name)
    gpus = index_to_uuid(gpu_rows(gpu_text or ""))
    if procs_text is None or gpu_text is None:
        why = "the node has no GPU (sampler no_gpu.txt)" if read(f"sampler/{node}_no_gpu.txt") is not None \
            else f"no NVML samples ({procs_name}, {gpu_name} not stored)"
        return NvmlPlacement((), 0, gpus, why)
    pids = (pid,) if pid is not None else pod_pids(read, node, pod or "")
    seen: dict[str, None] = {}
    samples = 0
    for row in proc_rows(procs_text):
        if row.pid in pids:
            samples += 1
            seen.setdefault(gpus.get(row.gpu_index, f"index {row.gpu_index}"), None)
    who = f"pid {pid}" if pid is not None else f"pod {pod} (pids {', '.join(map(str, pids)) or 'none named'})"
    note = None if seen else f"{who} never in NVML's process list ({procs_name})"
    return NvmlPlacement(tuple(seen), samples, gpus, note)


def key_uuid(key: str | None, gpus: Mapping[int, str]) -> str | None:
    """The UUID a SUT GPU key names: the key itself when it is a ``GPU-``/``MIG-`` UUID (or a unique prefix of
    one of ``gpus``), the UUID at that NVML index when it is a number; None when it names no GPU of the node
    (``default``, an index past the node's GPUs)."""
    if not key:
        return None
    if key.isdigit():
        return gpus.get(int(key))
    if key.startswith(("GPU-", "MIG-")):
        matches = [u for u in gpus.values() if u.startswith(key)]
        return matches[0] if len(matches) == 1 else key
    return None
