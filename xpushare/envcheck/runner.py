"""Run envcheck on a cluster: over SSH fan-out (``mode="ssh"``) or in-cluster as Kubernetes objects (``"k8s"``).

Both modes run the same node-side scripts (``workloads/envcheck/``) and the same judgments
(:mod:`xpushare.envcheck.checks`), then write the fleet report (:mod:`xpushare.envcheck.fleet`)::

    .tmplog/<run-id>/envcheck/fleet-report.md, fleet.json
    .tmplog/<run-id>/envcheck/<cluster>/<node>/   stack.json, cublas.json, nccl.json, *.log, verdict.json
    .tmplog/<run-id>/envcheck/<cluster>/_cross-node/   nccl.json, <node>.log

SSH mode (:func:`xpushare.envcheck.ssh_mode.run_ssh`): the cluster's ``gpu`` hosts (``--limit`` applies) are
handled ``forks`` at a time. Per node: copy the scripts (to ``<workdir or ~/.xpushare>/envcheck``, each file
written under a temporary name and renamed, so nodes sharing an NFS home never read a half-written script),
run the stack probe, then, when the node has usable GPUs, cuBLAS per GPU and the single-node all-reduce
(``torch.distributed.run --standalone --nproc-per-node <GPUs>``). With two or more nodes, the cross-node
all-reduce then runs on all of them at once (all ranks must be up together, so ``forks`` does not bound it):
MASTER_ADDR is ``envcheck_master_addr``, else the first node's inventory address, else the first address of
``hostname -I`` on it; the port is ``envcheck_master_port``, else a free port found on that node.

Kubernetes mode (:func:`xpushare.envcheck.k8s_mode.run_k8s`): kubectl runs on the cluster's master
(:class:`~xpushare.transport.kubectl.Kubectl`). The stack probe is a DaemonSet (pods hold after printing, and
are read with ``kubectl logs``); the GPU steps are one run-once Pod per node pinned with ``nodeName`` (or a
Job with ``envcheck_workload_kind: job``), and the cross-node all-reduce one Pod per node with ``hostNetwork``
and MASTER_ADDR = the first node's InternalIP. Every object carries the run's label and is deleted at the end,
also after an error or Ctrl-C.

Without GPUs (``--skip-gpu``, or no NVIDIA GPU on a node) the GPU steps are SKIP with the reason and
the stack check still runs. ``envcheck_cpu_smoke: true`` runs the GPU steps on the CPU (gloo, tiny
sizes): a test of the plumbing on machines without GPUs, never a GPU verdict.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from xpushare.envcheck import fleet
from xpushare.envcheck.context import NodeRaw, RunContext, finish
from xpushare.envcheck.k8s_mode import run_k8s
from xpushare.envcheck.params import resolve_params
from xpushare.envcheck.ssh_mode import run_ssh
from xpushare.inventory.schema import ClusterSpec
from xpushare.model.errors import HostUnreachable, UsageError
from xpushare.model.exit_status import ExitStatus
from xpushare.model.overrides import parse_overrides
from xpushare.report import run_store
from xpushare.report.output import render
from xpushare.transport.base import Host
from xpushare.transport.fanout import DEFAULT_FORKS
from xpushare.transport.hosts import connect

MODES = ("ssh", "k8s")


# ---------------------------------------------------------------------------------------------- entry point


def envcheck_task(cluster: str, *, limit: str | None = None, forks: int = DEFAULT_FORKS, mode: str = "ssh",
                  inventory_path: str | None = None, run_id: str | None = None, skip_gpu: bool = False,
                  out: TextIO | None = None, overrides: Sequence[str] = (), root: str | os.PathLike[str] = ".",
                  cluster_spec: ClusterSpec | None = None, kubectl: Any = None, fmt: str = "table") -> ExitStatus:
    """``invoke envcheck``: node acceptance of ``cluster`` with a fleet report; returns the exit status.

    ``fmt`` table prints the progress and the per-node summary on ``out``; json or yaml print them on stderr and
    then only the fleet record (``fleet.json``, docs/envcheck.md) on ``out``.

    Args:
        cluster: inventory cluster name (``local`` always exists).
        limit: comma-separated globs on node names; ``!`` excludes (SSH: inventory ``gpu`` hosts;
            Kubernetes: node names).
        forks: nodes handled at once in SSH mode.
        mode: ``ssh`` (fan-out) or ``k8s`` (DaemonSet + pods through kubectl on the cluster's master).
        inventory_path: ``--inventory`` (default ``$XPUSHARE_INVENTORY``, else ``inventory/inventory.yaml``).
        run_id: ``[A-Za-z0-9._-]{1,64}``; default ``YYYYmmdd-HHMMSS`` now (local time).
        skip_gpu: stack check only; cuBLAS and all-reduce are SKIP.
        out: progress and summary stream (default stdout); with ``fmt`` json or yaml, the record's.
        fmt: ``table``, ``json`` or ``yaml`` (:mod:`xpushare.report.output`).
        overrides: ``--set envcheck_<name>=<YAML value>`` items (:class:`EnvcheckParams`).
        root: directory holding ``.tmplog/``.
        cluster_spec, kubectl: for tests and embedding: use this cluster instead of the inventory's, and
            this :class:`~xpushare.transport.kubectl.Kubectl` instead of one on the master (its connection
            stays the caller's: only the one opened here is closed).

    Returns:
        :class:`ExitStatus` OK (0), FAILED (1: a node or the cross-node step FAIL/ERROR), UNREACHABLE (3).
    Raises:
        UsageError / InventoryError (exit 2): bad mode, forks, run id, parameter, cluster or selection.
    """
    from xpushare.inventory import schema

    stream = out if out is not None else sys.stdout
    if mode not in MODES:
        raise UsageError(f"bad --mode {mode!r} (choose from: {', '.join(MODES)})")
    if int(forks) < 1:
        raise UsageError("--forks must be >= 1")
    spec = cluster_spec or schema.load(inventory_path).cluster(cluster)
    params = resolve_params(spec.params, parse_overrides(list(overrides)))
    rid = run_id or run_store.new_run_id(datetime.now())
    try:
        run_store.validate_run_id(rid)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    ctx = RunContext(spec, params, run_id=rid, root=Path(root), mode=mode, skip_gpu=skip_gpu,
                     out=stream if fmt == "table" else sys.stderr)
    status = _run(ctx, spec, limit=limit, forks=int(forks), kubectl=kubectl)
    record = ctx.base / fleet.REPORT_JSON
    if fmt != "table" and record.is_file():
        print(render(json.loads(record.read_text(encoding="utf-8")), fmt), file=stream, flush=True)
    return status


def _run(ctx: RunContext, spec: ClusterSpec, *, limit: str | None, forks: int, kubectl: Any) -> ExitStatus:
    """The check itself in ``ctx.mode`` (ssh fan-out or Kubernetes pods), its fleet report written."""
    from xpushare.inventory.selection import select_hosts

    mode = ctx.mode
    if mode == "ssh":
        role = "gpu" if spec.by_role("gpu") else "all"
        return run_ssh(ctx, select_hosts(spec, role=role, limit=limit), forks=int(forks))
    owned: Host | None = None
    if kubectl is None:
        from xpushare.transport.cluster_kubectl import kubectl_for, master_spec

        owned = connect(master_spec(spec, "run kubectl on (--mode k8s)"))
        kubectl = kubectl_for(spec, owned)
    try:
        return run_k8s(ctx, kubectl, limit=limit)
    except HostUnreachable as exc:  # the master: no node can be reached through it, the fleet report says so
        ctx.log(f"{exc.host}: {exc.describe()}")
        return finish(ctx, [NodeRaw(exc.host, error=exc.message, unreachable=True, why=exc.why)], None,
                      notes=[f"the master {exc.host} did not answer: no node was checked"])
    finally:
        if owned is not None:  # a kubectl the caller gave keeps its connection
            owned.close()
