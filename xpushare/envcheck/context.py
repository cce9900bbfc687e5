"""One envcheck run's state and its judging: the raw step records (:class:`StepRaw`, :class:`NodeRaw`),
:class:`RunContext` (files under ``.tmplog/<run-id>/envcheck/``, node-side argv, progress), and
:func:`judge_nodes` / :func:`finish` (verdicts, fleet report, exit status). Shared by the SSH and
Kubernetes modes; split out of :mod:`xpushare.envcheck.runner`.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from xpushare.envcheck import checks, fleet, node_health
from xpushare.envcheck.nominal import lookup
from xpushare.envcheck.params import EnvcheckParams
from xpushare.inventory.schema import ClusterSpec
from xpushare.model import atomic_file
from xpushare.model.exit_status import ExitStatus
from xpushare.model.verdict import Status, Verdict
from xpushare.report import run_store

CROSS_DIR = "_cross-node"


# ---------------------------------------------------------------------------------------------- run context


@dataclass
class StepRaw:
    """What one step left: its document (None when unreadable), why not, and the exit code."""

    doc: dict[str, Any] | None = None
    error: str | None = None
    exit_code: int | None = None


@dataclass
class NodeRaw:
    """Everything collected on one node before judging."""

    node: str
    stack: StepRaw | None = None
    plan: checks.GpuPlan | None = None
    cublas: StepRaw | None = None
    nccl: StepRaw | None = None
    error: str | None = None
    unreachable: bool = False
    why: str | None = None
    """Why the node did not answer (:attr:`~xpushare.model.errors.HostUnreachable.why`), when ``unreachable``."""
    health: StepRaw | None = None
    """The health step: its capture text in ``doc["capture"]`` (SSH mode: the command's output; Kubernetes mode:
    the ``health`` block of the stack pod's log), or why there is none."""


class RunContext:
    """One envcheck run: where its files go, its parameters, and a thread-safe progress printer."""

    def __init__(self, cluster: ClusterSpec, params: EnvcheckParams, *, run_id: str, root: Path, mode: str,
                 skip_gpu: bool, out: TextIO) -> None:
        self.cluster = cluster
        self.params = params
        self.run_id = run_store.validate_run_id(run_id)
        self.base = Path(root) / ".tmplog" / run_id / "envcheck"
        self.mode = mode
        self.skip_gpu = skip_gpu
        self.out = out
        self.started = now_utc()
        self._lock = threading.Lock()
        self._claimed = False

    def log(self, message: str) -> None:
        with self._lock:
            print(message, file=self.out, flush=True)

    def node_dir(self, node: str) -> Path:
        return self.base / safe_name(self.cluster.name) / safe_name(node)

    def write(self, node: str, name: str, text: str) -> Path:
        self.claim()
        return run_store.atomic_write_text(self.node_dir(node) / name, text)

    def claim(self) -> Path:
        """The run's directory, made a tree the tool owns (no link below it is written through); once."""
        if not self._claimed:
            atomic_file.claim_tree(self.base.parent)
            self._claimed = True
        return self.base

    # -- node-side argv ------------------------------------------------------------------------------

    def probe_args(self) -> list[str]:
        args = ["--freeze-source", self.params.freeze_source]
        return args + ([] if self.params.probe_torch else ["--no-torch"])

    def cublas_args(self, plan: checks.GpuPlan) -> list[str]:
        p = self.params
        return ["--n", str(p.cublas_n), "--warmup", str(p.cublas_warmup), "--iters", str(p.cublas_iters),
                "--device", "cpu" if plan.device == "cpu" else "cuda"]

    def nccl_args(self, plan: checks.GpuPlan) -> list[str]:
        p = self.params
        return ["--min-bytes", str(p.nccl_min_bytes), "--max-bytes", str(p.nccl_max_bytes),
                "--warmup", str(p.nccl_warmup), "--iters", str(p.nccl_iters),
                "--backend", "gloo" if plan.device == "cpu" else "nccl"]

    def sizes(self) -> list[int]:
        return checks.expected_sizes(self.params.nccl_min_bytes, self.params.nccl_max_bytes)


def now_utc() -> str:
    """Now in UTC as ``YYYY-mm-ddTHH:MM:SSZ`` (the report's start/end stamps)."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def safe_name(name: str) -> str:
    """A path component from a node/cluster name: ``[A-Za-z0-9._-]``, never ``.``/``..``."""
    text = re.sub(r"[^A-Za-z0-9._-]", "_", name)[:64]
    return text if text not in ("", ".", "..") else "_"


def nccl_plan_note(plan: checks.GpuPlan) -> str | None:
    """Why the single-node all-reduce does not run on a node that runs the GPU steps (one GPU)."""
    if plan.gpus < 2:
        return f"{plan.gpus} GPU(s): no intra-node all-reduce"
    return None


# ---------------------------------------------------------------------------------------------- judging


def judge_nodes(ctx: RunContext, raws: Sequence[NodeRaw]) -> tuple[list[fleet.NodeResult], dict[str, fleet.Majority]]:
    """Fleet majority of the stack keys, then every node's verdicts (also written as ``verdict.json``)."""
    p = ctx.params
    values = {r.node: checks.stack_values(r.stack.doc) for r in raws if r.stack and r.stack.doc}
    keys = [k for k in checks.ALIGN_KEYS if k not in p.ignore_keys]
    table = fleet.majority(values, keys)
    results = []
    for raw in raws:
        res = fleet.NodeResult(raw.node, unreachable=raw.unreachable, error=raw.error, why=raw.why,
                               artifacts_dir=str(ctx.node_dir(raw.node)))
        if raw.stack is None:
            results.append(res)
            continue
        doc = raw.stack.doc
        res.gpu_name, res.gpu_count = checks.gpu_name(doc), checks.gpu_count(doc)
        # a GPU node without nvidia-smi misses a prerequisite (ERROR); the CPU smoke test asks for none
        res.steps["stack"] = checks.judge_stack(doc, fleet.deviations_of(raw.node, table, p.ignore_keys),
                                                error=raw.stack.error, require_nvidia_smi=not p.cpu_smoke)
        if raw.health is not None:
            res.steps["health"] = node_health.judge_health(
                (raw.health.doc or {}).get("capture"), now=datetime.now(timezone.utc), window_h=p.xid_window_h,
                ecc_uncorrected_max=p.ecc_uncorrected_max, error=raw.health.error,
                require_nvidia_smi=not p.cpu_smoke)
        plan = raw.plan or checks.gpu_plan(doc, skip_gpu=ctx.skip_gpu, cpu_smoke=p.cpu_smoke,
                                           smoke_procs=p.smoke_procs)
        if not plan.run:
            for step in ("cublas", "nccl"):
                res.steps[step] = Verdict(plan.status or Status.SKIP, plan.reason)
        else:
            entry = lookup(res.gpu_name) if plan.device == "cuda" else None
            nominal = p.nominal_bf16_tflops or (entry.bf16_dense_tflops if entry else None)
            source = "envcheck_nominal_bf16_tflops" if p.nominal_bf16_tflops else (
                f"{entry.key}: {entry.source}" if entry else f"no table entry for {res.gpu_name!r}")
            c = raw.cublas or StepRaw(error="not run")
            if not p.cublas:
                res.steps["cublas"] = Verdict(Status.SKIP, "envcheck_cublas is false")
            else:
                res.steps["cublas"] = checks.judge_cublas(c.doc, exit_code=c.exit_code, nominal_tflops=nominal,
                                                          nominal_source=source, min_pct=p.cublas_min_pct,
                                                          error=c.error)
            note = nccl_plan_note(plan)
            if note:
                res.steps["nccl"] = Verdict(Status.SKIP, note)
            else:
                n = raw.nccl or StepRaw(error="not run")
                busbw = p.nominal_busbw_gbps or (entry.nvlink_busbw_gbps if entry else None)
                links = checks.topology_links(((doc or {}).get("nvidia_smi") or {}).get("topology"))
                res.steps["nccl"] = checks.judge_nccl(n.doc, exit_code=n.exit_code, sizes=ctx.sizes(),
                                                      nominal_busbw=busbw, min_pct=p.nccl_min_busbw_pct,
                                                      links=links, error=n.error, what="single-node all-reduce")
        results.append(res)
        ctx.write(raw.node, "verdict.json", json.dumps(res.to_dict(), indent=2, default=str) + "\n")
    return results, table


def finish(ctx: RunContext, raws: Sequence[NodeRaw], cross: Verdict | None, notes: Sequence[str] = ()) -> ExitStatus:
    """Judge, write the fleet report, print the per-node summary; return the exit status."""
    nodes, table = judge_nodes(ctx, raws)
    if ctx.params.cpu_smoke:
        notes = [*notes, "CPU smoke test (envcheck_cpu_smoke): the GPU steps ran on CPUs with gloo and tiny sizes; "
                 "their figures say nothing about GPUs."]
    result = fleet.FleetResult(ctx.run_id, ctx.cluster.name, ctx.mode, ctx.started, now_utc(), nodes, table,
                               cross, params=ctx.params.to_dict() | {"skip_gpu": ctx.skip_gpu}, notes=list(notes))
    md, js = fleet.write_report(result, ctx.claim())
    ctx.log("")
    for line in summary_lines(result):
        ctx.log(line)
    status = result.exit_status()
    ctx.log(f"report: {md}\njson:   {js}\nexit status {int(status)} ({status.name})")
    return status


def summary_lines(result: fleet.FleetResult) -> list[str]:
    """The terminal summary of a fleet: one line per outcome group (:func:`fleet.outcomes`: failing groups first,
    ``label  count  node set  summary``), the cross-node line, and the deviating nodes folded per key list; as
    many lines at 1,000 nodes as there are distinct outcomes."""
    groups = result.outcomes()
    width = max((len(o.label) for o in groups), default=5)
    count_width = max((len(str(len(o.nodes))) for o in groups), default=1)
    lines = [f"{o.label:<{width}}  {len(o.nodes):>{count_width}}  {o.nodeset}"
             + (f"  {o.text}" if o.label != Status.PASS.value else "") for o in groups]
    if result.cross_node is not None:
        lines.append(f"{'cross-node':<{width}}  {result.cross_node.status.value}  {result.cross_node.summary}")
    deviating = result.deviating_groups()
    if deviating:
        lines.append("deviating: " + "; ".join(f"{nodeset} ({', '.join(keys)})" for nodeset, keys in deviating))
    return lines
