"""What the k8s backend stores of a case beyond its pods (see :mod:`xpushare.backends.k8s` for the list):
the scheduler's and device plugin's logs, each node's scrapes, scheduler ``/proc`` figures, ``nvidia-smi`` and
dmon, and the cluster snapshot.

Every function stores files in the case directory and returns their names relative to it; a failure is noted
in ``harvest-errors.txt`` and never raised, so one missing piece leaves the rest of the evidence. A piece lost
to a fault (a lost connection, a kubectl timeout, an API server error; not an object that is simply absent) is
also added to the caller's ``faults``, which makes the harvest incomplete (:mod:`xpushare.backends.harvest_faults`,
shared with host mode).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from xpushare.backends import scheduler_proc as scheduler_proc_mod
from xpushare.backends.base import KubeAccess
from xpushare.backends.harvest_faults import fault, note
from xpushare.inventory.sut import SutNames
from xpushare.model.atomic_file import atomic_write_text
from xpushare.model.errors import TransportError, XpushareError
from xpushare.transport.base import Host
from xpushare.transport.kubectl import Kubectl

__all__ = ["cluster_snapshot", "node_evidence", "scheduler_logs", "scheduler_proc"]

def scheduler_logs(case_dir: Path, master: Host, stream_name: str, kubectl: Kubectl, names: SutNames,
                   since: datetime, faults: list[str]) -> list[str]:
    """``scheduler.log`` from the log stream ``stream_name`` spawned on ``master`` (empty name: none), else a
    ``kubectl logs --since-time`` fetch; ``device-plugin.log`` always from kubectl."""
    files: list[str] = []
    text = ""
    if stream_name:
        try:
            log = master.stop(stream_name)
            master.get(log, case_dir / "scheduler.log")
            text = (case_dir / "scheduler.log").read_text(encoding="utf-8", errors="replace")
        except TransportError as exc:
            note(case_dir, f"scheduler log stream: {exc}")  # the --since-time read below replaces it
    if not text.strip():
        try:
            text = kubectl.logs(selector=names.scheduler_label, since_time=since, prefix=True,
                                namespace=names.namespace)
            atomic_write_text(case_dir / "scheduler.log", text)
        except XpushareError as exc:
            fault(case_dir, "scheduler log", exc, faults)
    if (case_dir / "scheduler.log").exists():
        files.append("scheduler.log")
    try:
        dp = kubectl.logs(selector=names.device_plugin_label, since_time=since, prefix=True,
                          namespace=names.namespace)
        atomic_write_text(case_dir / "device-plugin.log", dp)
        files.append("device-plugin.log")
    except XpushareError as exc:
        fault(case_dir, "device-plugin log", exc, faults)
    return files


def node_evidence(case_dir: Path, kube: KubeAccess, nodes: list[str], names: SutNames, smi_hosts: set[str],
                  dmon_spawn: Callable[[str], str],
                  smi_argv: Callable[[str], list[str]] = lambda _host: ["nvidia-smi"]) -> list[str]:
    """Per node of ``nodes`` (the first without a suffix, the others ``_<node>``): ``metrics.txt`` and
    ``metrics_health.txt`` from its scheduler pod, ``scheduler_proc.txt``, and, on GPU hosts in ``smi_hosts``,
    ``remote_<node>_nvidia_smi.txt`` and the dmon stream ``dmon_spawn(host)`` as ``remote_<node>_dmon.txt``;
    ``smi_argv(host)``: the argv of nvidia-smi on that host."""
    files: list[str] = []
    sched = kube.scheduler_pods()
    for i, node in enumerate(nodes):
        suffix = "" if i == 0 else f"_{node}"
        for path, name in (("/metrics", f"metrics{suffix}.txt"), ("/healthz", f"metrics_health{suffix}.txt")):
            body = kube.curl_scheduler(node, path, sched)
            if body is not None:
                atomic_write_text(case_dir / name, body)
                files.append(name)
        host_name = kube.host_for_node(node)
        if host_name is None:
            note(case_dir, f"node {node}: no inventory GPU host maps to it (no node evidence)")
            continue
        host = kube.gpu_host(host_name)
        files += scheduler_proc(case_dir, host, names.scheduler_binary, suffix)
        if host_name in smi_hosts:
            try:
                smi = host.run(smi_argv(host_name), timeout=60)
                atomic_write_text(case_dir / f"remote_{node}_nvidia_smi.txt", smi.stdout + smi.stderr)
                files.append(f"remote_{node}_nvidia_smi.txt")
                log = host.stop(dmon_spawn(host_name))
                host.get(log, case_dir / f"remote_{node}_dmon.txt")
                files.append(f"remote_{node}_dmon.txt")
            except TransportError as exc:
                note(case_dir, f"node {node}: {exc}")
    return files


def scheduler_proc(case_dir: Path, host: Host, binary: str, suffix: str = "") -> list[str]:
    """``scheduler_proc<suffix>.txt`` (:func:`xpushare.backends.scheduler_proc.store_status`); an SSH failure is
    noted instead."""
    try:
        return [scheduler_proc_mod.store_status(case_dir, host, binary, suffix)]
    except TransportError as exc:
        note(case_dir, f"scheduler /proc: {exc}")
        return []


def cluster_snapshot(case_dir: Path, kubectl: Kubectl, faults: list[str]) -> list[str]:
    """``cluster_snapshot.txt``: ``kubectl get nodes -o wide`` and ``get pods -A -o wide``."""
    try:
        snap = kubectl.run(["get", "nodes", "-o", "wide"], namespace=None).stdout
        snap += "\n" + kubectl.run(["get", "pods", "-A", "-o", "wide"], namespace=None).stdout
    except XpushareError as exc:
        fault(case_dir, "cluster snapshot", exc, faults)
        return []
    atomic_write_text(case_dir / "cluster_snapshot.txt", snap)
    return ["cluster_snapshot.txt"]
