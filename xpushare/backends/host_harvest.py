"""What the host backend stores of a case beyond ``pods.json`` (see :mod:`xpushare.backends.host`): each pod's
output, and per GPU host ``nvidia-smi``, the dmon stream and the node sampler's files.

Every function stores files in the case directory and returns their names relative to it. Each piece is read
on its own: a transport fault (a lost connection, a timeout, an unreachable host) loses only that piece, is
noted in ``harvest-errors.txt`` and added to the caller's ``faults``, which makes the harvest incomplete; a
file or spawned command that does not exist on the host is not a fault (:mod:`xpushare.backends.harvest_faults`,
shared with Kubernetes mode).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from xpushare.backends.harvest_faults import fault, is_absent
from xpushare.evidence import gpu_health, workload_env
from xpushare.model.atomic_file import atomic_write_text
from xpushare.model.errors import TransportError
from xpushare.transport.base import Host

__all__ = ["gpu_health_after", "node_evidence", "pod_environs", "pod_logs"]

#: The node's ``nvidia-smi``, or a line saying there is none (a host without GPUs is not a fault).
NVIDIA_SMI = ["sh", "-c", "command -v nvidia-smi >/dev/null || { echo 'nvidia-smi: not found'; exit 0; }; nvidia-smi"]
SAMPLER_FILES = ("gpu.csv", "procs.csv", "pids.csv", "no_gpu.txt")


def pod_logs(case_dir: Path, pods: Iterable[tuple[str, Host, str]], faults: list[str]) -> list[str]:
    """``pods/<pod>.log`` of each ``(pod, host, spawn name)``: the output its wrapper kept on the host."""
    files: list[str] = []
    for pod, host, spawn_name in pods:
        local = case_dir / "pods" / f"{pod}.log"
        try:
            host.get(f"{host.spawn_dir}/{spawn_name}.log", local)
            files.append(str(local.relative_to(case_dir)))
        except TransportError as exc:
            fault(case_dir, f"pod {pod} log", exc, faults)
    return files


def pod_environs(case_dir: Path, pods: Iterable[tuple[str, Host, str]], faults: list[str]) -> list[str]:
    """``pods/<pod>.environ.txt`` of each ``(pod, host, spawn name)``: the environment the workload process really
    had (``<spawn>.environ``, read from ``/proc`` while it ran; :mod:`xpushare.evidence.workload_env` redacts it).
    A pod that ended before any poll saw it has none (an absence, not a fault)."""
    files: list[str] = []
    for pod, host, spawn_name in pods:
        rel = workload_env.environ_file(pod)
        raw = case_dir / "pods" / f".{pod}.environ.raw"
        try:
            host.get(f"{host.spawn_dir}/{spawn_name}.environ", raw)
            atomic_write_text(case_dir / rel, workload_env.render(raw.read_bytes()))
            files.append(rel)
        except TransportError as exc:
            if not is_absent(exc):
                fault(case_dir, f"pod {pod} environment", exc, faults)
        finally:
            raw.unlink(missing_ok=True)
    return files


def node_evidence(case_dir: Path, name: str, host: Host, case_prefix: str, faults: list[str]) -> list[str]:
    """Of GPU host ``name``: ``remote_<name>_nvidia_smi.txt``, the dmon stream ``<case_prefix>-dmon`` as
    ``remote_<name>_dmon.txt`` (none on a host without GPUs: it was not started), and the node sampler
    ``<case_prefix>-sampler`` stopped, its files as ``sampler/<name>_<file>`` (those it wrote)."""
    files: list[str] = []
    what = f"node {name}"
    try:
        smi = host.run(NVIDIA_SMI, timeout=60)
        atomic_write_text(case_dir / f"remote_{name}_nvidia_smi.txt", smi.stdout + smi.stderr)
        files.append(f"remote_{name}_nvidia_smi.txt")
    except TransportError as exc:
        fault(case_dir, f"{what}: nvidia-smi", exc, faults)
    local_name = f"remote_{name}_dmon.txt"
    try:
        host.get(host.stop(f"{case_prefix}-dmon"), case_dir / local_name)
        files.append(local_name)
    except TransportError as exc:
        if not is_absent(exc):  # absent: not started, no GPU on this host (the sampler records that)
            fault(case_dir, f"{what}: dmon", exc, faults)
    try:
        host.stop(f"{case_prefix}-sampler")
    except TransportError as exc:
        fault(case_dir, f"{what}: sampler", exc, faults)
    sampler_dir = f"{host.spawn_dir}/{case_prefix}-sampler"
    for fname in SAMPLER_FILES:
        local = case_dir / "sampler" / f"{name}_{fname}"
        try:
            host.get(f"{sampler_dir}/{fname}", local)
            files.append(str(local.relative_to(case_dir)))
        except TransportError as exc:
            if not is_absent(exc):  # absent: the sampler writes only some of them (no_gpu.txt or gpu.csv)
                fault(case_dir, f"{what}: sampler {fname}", exc, faults)
    return files


def gpu_health_after(case_dir: Path, name: str, host: Host, faults: list[str]) -> list[str]:
    """Of GPU host ``name``: the GPU health capture after the case, ``gpu_health/<name>-after.txt``, and the one
    taken before it (:meth:`HostBackend.begin_case`) when it exists (:mod:`xpushare.evidence.gpu_health`)."""
    before = gpu_health.file_name(name, "before")
    files = [before] if (case_dir / before).exists() else []
    try:
        files.append(gpu_health.capture(host, case_dir, name, "after"))
    except TransportError as exc:
        fault(case_dir, f"node {name}: GPU health", exc, faults)
    return files
