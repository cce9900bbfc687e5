"""Run envcheck on a cluster: over SSH fan-out (``mode="ssh"``) or in-cluster as Kubernetes objects (``"k8s"``).

Both modes run the same node-side scripts (``workloads/envcheck/``) and the same judgments
(:mod:`xpushare.envcheck.checks`), then write the fleet report (:mod:`xpushare.envcheck.fleet`)::

    .tmplog/<run-id>/envcheck/fleet-report.md, fleet.json
    .tmplog/<run-id>/envcheck/<cluster>/<node>/   stack.json, cublas.json, nccl.json, *.log, verdict.json
    .tmplog/<run-id>/envcheck/<cluster>/_cross-node/   nccl.json, <node>.log

SSH mode (:func:`run_ssh`): the cluster's ``gpu`` hosts (``--limit`` applies) are handled ``forks`` at
a time. Per node: copy the scripts (to ``<workdir or ~/.xpushare>/envcheck``, each file written under a
temporary name and renamed, so nodes sharing an NFS home never read a half-written script), run the
stack probe, then, when the node has usable GPUs, cuBLAS per GPU and the single-node all-reduce
(``torch.distributed.run --standalone --nproc-per-node <GPUs>``). With two or more nodes, the cross-node
all-reduce then runs on all of them at once (all ranks must be up together, so ``forks`` does not
bound it): MASTER_ADDR is ``envcheck_master_addr``, else the first node's inventory address, else the
first address of ``hostname -I`` on it; the port is ``envcheck_master_port``, else a free port found on
that node.

Kubernetes mode (:func:`run_k8s`): kubectl runs on the cluster's master (:class:`~xpushare.transport.kubectl.Kubectl`).
The stack probe is a DaemonSet (pods hold after printing, and are read with ``kubectl logs``); the
GPU steps are one run-once Pod per node pinned with ``nodeName`` (or a Job with
``envcheck_workload_kind: job``), and the cross-node all-reduce one Pod per node with
``hostNetwork`` and MASTER_ADDR = the first node's InternalIP. Every object carries the run's label
and is deleted at the end, also after an error or Ctrl-C.

Without GPUs (``--skip-gpu``, or no NVIDIA GPU on a node) the GPU steps are SKIP with the reason and
the stack check still runs. ``envcheck_cpu_smoke: true`` runs the GPU steps on the CPU (gloo, tiny
sizes): a test of the plumbing on machines without GPUs, never a GPU verdict.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import os
import re
import shlex
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, TextIO

from xpushare.envcheck import checks, fleet, manifests
from xpushare.envcheck.nominal import lookup
from xpushare.inventory.schema import ClusterSpec, HostSpec
from xpushare.model.errors import CommandTimeout, ConnectionLost, TransportError, UsageError
from xpushare.model.exit_status import ExitStatus
from xpushare.model.overrides import parse_overrides
from xpushare.model.verdict import Status, Verdict
from xpushare.report import artifacts
from xpushare.transport.base import CommandResult, Host
from xpushare.transport.fanout import DEFAULT_FORKS, fan_out
from xpushare.transport.hosts import connect
from xpushare.transport.local import LocalHost

MIB = 1 << 20
MODES = ("ssh", "k8s")
CROSS_DIR = "_cross-node"

# ---------------------------------------------------------------------------------------------- parameters


@dataclass(frozen=True)
class EnvcheckParams:
    """Thresholds and knobs; each is set as ``envcheck_<name>`` in the inventory ``params`` or with ``--set``.

    Sizes in bytes, times in seconds, bandwidths in GB/s (1e9 B/s), TFLOP/s = 1e12 FLOP/s.
    """

    cublas: bool = True
    """Run the cuBLAS step (false: SKIP it, e.g. to test only a sample of the fleet with ``--limit``)."""
    cublas_n: int = 8192
    cublas_warmup: int = 5
    cublas_iters: int = 50
    cublas_min_pct: float = 70.0
    """A GPU passes with at least this % of its model's nominal dense bf16 TFLOP/s."""
    nominal_bf16_tflops: float | None = None
    """Overrides the nominal table (xpushare/envcheck/nominal.py) for this cluster's GPUs."""
    nccl_min_bytes: int = 8 * MIB
    nccl_max_bytes: int = 1024 * MIB
    nccl_warmup: int = 5
    nccl_iters: int = 20
    nccl_min_busbw_pct: float = 60.0
    """A node passes with a peak single-node busbw of at least this % of its model's NVLink figure."""
    nominal_busbw_gbps: float | None = None
    cross_node: bool = True
    cross_min_busbw_gbps: float | None = None
    """Cross-node floor for the peak busbw (None: correctness only, figures reported)."""
    master_addr: str | None = None
    master_port: int | None = None
    """None: a free port found on the first node (SSH); 29512 in Kubernetes mode."""
    step_timeout_s: float = 900.0
    pod_timeout_s: float = 1200.0
    probe_torch: bool = True
    freeze_source: str = "pip"
    ignore_keys: tuple[str, ...] = ()
    """Stack keys left out of the alignment comparison (e.g. ``[kernel]``)."""
    cpu_smoke: bool = False
    smoke_procs: int = 2
    python: str | None = None
    """Interpreter on the nodes (default: the inventory's ``python``; ``python3`` in pods)."""
    image: str = "sglang:v0.5.7"
    scripts: str = "configmap"
    workdir: str = "/xpushare"
    gpu_resource: str = "nvidia.com/gpu"
    node_selector: dict[str, str] = field(default_factory=dict)
    host_network: bool = True
    workload_kind: str = "pod"
    runtime_class: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {f"envcheck_{k}": (list(v) if isinstance(v, tuple) else v)
                for k, v in dataclasses.asdict(self).items()}


_CHOICES = {"freeze_source": ("pip", "metadata"), "scripts": ("configmap", "image"), "workload_kind": ("pod", "job")}
#: Smaller defaults under ``envcheck_cpu_smoke`` (unless set explicitly).
SMOKE_DEFAULTS = {"cublas_n": 256, "cublas_warmup": 1, "cublas_iters": 3, "nccl_min_bytes": 64 * 1024,
                  "nccl_max_bytes": 256 * 1024, "nccl_warmup": 1, "nccl_iters": 3}


def _coerce(name: str, value: Any, default: Any) -> Any:
    """``value`` converted to the type of parameter ``name`` (whose default is ``default``)."""
    ftype = {f.name: str(f.type) for f in dataclasses.fields(EnvcheckParams)}[name]
    where = f"envcheck_{name}"
    if value is None:
        if "None" in ftype:
            return None
        raise UsageError(f"{where}: a value is required")
    try:
        if ftype.startswith("bool"):
            if isinstance(value, bool):
                return value
            if str(value).lower() in ("true", "yes", "1", "on", "false", "no", "0", "off"):
                return str(value).lower() in ("true", "yes", "1", "on")
            raise ValueError(value)
        if ftype.startswith("int"):
            if isinstance(value, bool) or float(value) != int(float(value)):
                raise ValueError(value)
            return int(float(value))
        if ftype.startswith("float"):
            if isinstance(value, bool):
                raise ValueError(value)
            return float(value)
        if ftype.startswith("tuple"):
            items = [value] if isinstance(value, str) else list(value)
            return tuple(str(v) for v in items)
        if ftype.startswith("dict"):
            if not isinstance(value, Mapping):
                raise ValueError(value)
            return {str(k): str(v) for k, v in value.items()}
        text = str(value)
        if name in _CHOICES and text not in _CHOICES[name]:
            raise UsageError(f"{where}: {text!r} is not one of {', '.join(_CHOICES[name])}")
        return text
    except (TypeError, ValueError):
        raise UsageError(f"{where}: bad value {value!r} (expected {ftype.replace(' | None', ' or null')})") from None


def resolve_params(cluster_params: Mapping[str, Any], overrides: Mapping[str, Any]) -> EnvcheckParams:
    """Parameters from the cluster's inventory ``params`` (keys ``envcheck_*``) then ``--set`` overrides.

    Raises:
        UsageError: an unknown ``envcheck_*`` name (inventory or ``--set``), any other ``--set`` name, or a
            value of the wrong type.
    """
    defaults = EnvcheckParams()
    known = {f.name for f in dataclasses.fields(EnvcheckParams)}
    values: dict[str, Any] = {}
    for source, layer, only_prefixed in (("inventory params", cluster_params, True), ("--set", overrides, False)):
        for key, value in layer.items():
            if not key.startswith("envcheck_"):
                if only_prefixed:
                    continue
                raise UsageError(f"unknown parameter {key!r} for --set (envcheck parameters start with envcheck_)")
            name = key[len("envcheck_"):]
            if name not in known:
                raise UsageError(f"{source}: unknown envcheck parameter {key!r} "
                                 f"(known: {', '.join(sorted('envcheck_' + k for k in known))})")
            values[name] = _coerce(name, value, getattr(defaults, name))
    if values.get("cpu_smoke"):
        for name, small in SMOKE_DEFAULTS.items():
            values.setdefault(name, small)
    params = dataclasses.replace(defaults, **values)
    if params.nccl_min_bytes < 4 or params.nccl_max_bytes < params.nccl_min_bytes:
        raise UsageError("envcheck_nccl_min_bytes must be >= 4 and <= envcheck_nccl_max_bytes")
    return params


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


class RunContext:
    """One envcheck run: where its files go, its parameters, and a thread-safe progress printer."""

    def __init__(self, cluster: ClusterSpec, params: EnvcheckParams, *, run_id: str, root: Path, mode: str,
                 skip_gpu: bool, out: TextIO) -> None:
        self.cluster = cluster
        self.params = params
        self.run_id = artifacts.validate_run_id(run_id)
        self.base = Path(root) / ".tmplog" / run_id / "envcheck"
        self.mode = mode
        self.skip_gpu = skip_gpu
        self.out = out
        self.started = _now()
        self._lock = threading.Lock()

    def log(self, message: str) -> None:
        with self._lock:
            print(message, file=self.out, flush=True)

    def node_dir(self, node: str) -> Path:
        return self.base / _safe(self.cluster.name) / _safe(node)

    def write(self, node: str, name: str, text: str) -> Path:
        return artifacts.atomic_write_text(self.node_dir(node) / name, text)

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


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _safe(name: str) -> str:
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
        res = fleet.NodeResult(raw.node, unreachable=raw.unreachable, error=raw.error,
                               artifacts_dir=str(ctx.node_dir(raw.node)))
        if raw.stack is None:
            results.append(res)
            continue
        doc = raw.stack.doc
        res.gpu_name, res.gpu_count = checks.gpu_name(doc), checks.gpu_count(doc)
        res.steps["stack"] = checks.judge_stack(doc, fleet.deviations_of(raw.node, table, p.ignore_keys),
                                                error=raw.stack.error)
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
    result = fleet.FleetResult(ctx.run_id, ctx.cluster.name, ctx.mode, ctx.started, _now(), nodes, table,
                               cross, params=ctx.params.to_dict() | {"skip_gpu": ctx.skip_gpu}, notes=list(notes))
    md, js = fleet.write_report(result, ctx.base)
    width = max((len(n.node) for n in nodes), default=4)
    ctx.log("")
    for n in nodes:
        steps = " ".join(f"{s}={v.status.value}" for s, v in n.steps.items())
        ctx.log(f"{n.node:<{width}}  {n.status.value:<5}  {steps}  {n.summary if n.status is not Status.PASS else ''}")
    if cross is not None:
        ctx.log(f"{'cross-node':<{width}}  {cross.status.value:<5}  {cross.summary}")
    deviating = result.deviating_nodes
    if deviating:
        ctx.log("deviating: " + "; ".join(f"{n} ({', '.join(k)})" for n, k in deviating.items()))
    status = result.exit_status()
    ctx.log(f"report: {md}\njson:   {js}\nexit status {int(status)} ({status.name})")
    return status


# ---------------------------------------------------------------------------------------------- SSH mode


class _SshNode:
    """The node-side work of SSH mode on one host."""

    def __init__(self, ctx: RunContext, host: Host, spec: HostSpec) -> None:
        self.ctx = ctx
        self.host = host
        self.spec = spec
        self.python = ""
        self.scripts = ""

    def install(self) -> None:
        """Pick the interpreter and put the scripts on the host (atomically per file)."""
        ctx, host = self.ctx, self.host
        configured = ctx.params.python or ctx.cluster.python
        if isinstance(host, LocalHost):
            self.python = sys.executable if configured == "python3" else configured
            self.scripts = str(manifests.SCRIPTS_DIR)
            return
        self.python = configured
        base = ctx.cluster.workdir or host.run(["sh", "-c", 'printf %s "$HOME"'], timeout=60, check=True).stdout.strip()
        if not base:
            base = ".xpushare"
        elif not ctx.cluster.workdir:
            base = f"{base}/.xpushare"
        target = f"{base}/envcheck"
        tag = f"{os.getpid()}-{threading.get_ident()}"
        for name in manifests.SCRIPT_NAMES:
            tmp = f"{target}/.{name}.{tag}.tmp"
            host.put(manifests.SCRIPTS_DIR / name, tmp)
            host.run(["mv", "-f", tmp, f"{target}/{name}"], timeout=60, check=True)
        self.scripts = target

    def step(self, name: str, argv: list[str]) -> StepRaw:
        """Run one step; keep ``<name>.json`` (its document) and ``<name>.log`` (argv, exit, stderr)."""
        try:
            res = self.host.run(argv, timeout=self.ctx.params.step_timeout_s)
        except (CommandTimeout, ConnectionLost) as exc:
            self.ctx.write(self.host.name, f"{name}.log", f"$ {shlex.join(argv)}\n{exc}\n")
            return StepRaw(error=exc.message)
        return record_step(self.ctx, self.host.name, name, argv, res)

    def run(self) -> NodeRaw:
        ctx = self.ctx
        raw = NodeRaw(self.host.name)
        self.install()
        raw.stack = self.step("stack", [self.python, f"{self.scripts}/stack_probe.py", *ctx.probe_args()])
        plan = checks.gpu_plan(raw.stack.doc, skip_gpu=ctx.skip_gpu, cpu_smoke=ctx.params.cpu_smoke,
                               smoke_procs=ctx.params.smoke_procs)
        raw.plan = plan
        if plan.run and ctx.params.cublas:
            raw.cublas = self.step("cublas", [self.python, f"{self.scripts}/cublas_bf16.py", *ctx.cublas_args(plan)])
        if plan.run and nccl_plan_note(plan) is None:
            raw.nccl = self.step("nccl", [self.python, "-m", "torch.distributed.run", "--standalone",
                                          "--nproc-per-node", str(plan.gpus),
                                          f"{self.scripts}/nccl_allreduce.py", *ctx.nccl_args(plan)])
        ctx.log(f"{self.host.name}: stack {'ok' if raw.stack.doc else 'failed'}"
                + (f", GPU steps: {plan.reason}" if not plan.run else f", {plan.gpus} {plan.device} process(es)"))
        return raw


def record_step(ctx: RunContext, node: str, name: str, argv: Sequence[str], res: CommandResult) -> StepRaw:
    """Parse one step's output and keep its files (``<name>.json`` and ``<name>.log``)."""
    doc, error = checks.try_block(res.stdout, name)
    if doc is not None:
        ctx.write(node, f"{name}.json", json.dumps(doc, indent=1, sort_keys=True) + "\n")
    log = f"$ {shlex.join(argv)}\nexit {res.exit_code} after {res.duration_s:.1f} s\n--- stderr ---\n{res.stderr}"
    if doc is None:
        log += f"\n--- stdout ---\n{res.stdout}"
        tail = (res.stderr.strip().splitlines() or [""])[-1]
        error = f"{error} (exit {res.exit_code}{': ' + tail if tail else ''})"
    ctx.write(node, f"{name}.log", log)
    return StepRaw(doc, error, res.exit_code)


def _discover_addr(host: Host, spec: HostSpec) -> str:
    """MASTER_ADDR of a node: its inventory address, else the first address of ``hostname -I`` on it."""
    if spec.address:
        return spec.address
    res = host.run(["sh", "-c", "hostname -I 2>/dev/null"], timeout=60)
    for word in res.stdout.split():
        try:
            if not ipaddress.ip_address(word).is_loopback:
                return word
        except ValueError:
            continue
    raise TransportError(host.name, "cannot discover its address for MASTER_ADDR (set envcheck_master_addr)")


_FREE_PORT = "import socket; s = socket.socket(); s.bind(('', 0)); print(s.getsockname()[1])"


def run_cross_ssh(ctx: RunContext, nodes: Sequence[_SshNode], plans: Mapping[str, checks.GpuPlan]) -> Verdict:
    """The cross-node all-reduce over ``nodes`` (all ranks at once); rank 0 is the first node."""
    p = ctx.params
    cpu = any(plans[n.host.name].device == "cpu" for n in nodes)
    nproc = 1 if cpu else min(plans[n.host.name].gpus for n in nodes)
    master = nodes[0]
    try:
        addr = p.master_addr or _discover_addr(master.host, master.spec)
        port = p.master_port or int(master.host.run([master.python, "-c", _FREE_PORT], timeout=60,
                                                    check=True).stdout.split()[0])
    except (TransportError, ValueError, IndexError) as exc:
        return Verdict(Status.ERROR, f"cross-node all-reduce not started: {exc}")
    plan = checks.GpuPlan(True, nproc, "cpu" if cpu else "cuda")
    ranks = {n.host.name: r for r, n in enumerate(nodes)}
    by_host = {n.host.name: n for n in nodes}
    ctx.log(f"cross-node all-reduce: {len(nodes)} node(s) x {nproc}, MASTER_ADDR={addr}:{port}")

    def argv_of(node: _SshNode) -> list[str]:
        return [node.python, "-m", "torch.distributed.run", "--nnodes", str(len(nodes)),
                "--node-rank", str(ranks[node.host.name]), "--nproc-per-node", str(nproc),
                "--master-addr", addr, "--master-port", str(port),
                f"{node.scripts}/nccl_allreduce.py", *ctx.nccl_args(plan)]

    outcomes = fan_out([n.host for n in nodes], lambda h: h.run(argv_of(by_host[h.name]),
                                                               timeout=p.step_timeout_s), forks=len(nodes))
    cross_dir = ctx.base / _safe(ctx.cluster.name) / CROSS_DIR
    codes: list[int] = []
    doc: dict[str, Any] | None = None
    error: str | None = None
    for o in outcomes:
        argv = argv_of(by_host[o.host])
        if o.value is None:
            artifacts.atomic_write_text(cross_dir / f"{_safe(o.host)}.log", f"$ {shlex.join(argv)}\n{o.error}\n")
            error = error or str(o.error)
            codes.append(-1)
            continue
        res = o.value
        codes.append(res.exit_code)
        artifacts.atomic_write_text(cross_dir / f"{_safe(o.host)}.log",
                                    f"$ {shlex.join(argv)}\nexit {res.exit_code} after {res.duration_s:.1f} s\n"
                                    f"--- stdout ---\n{res.stdout}\n--- stderr ---\n{res.stderr}")
        if ranks[o.host] == 0:
            doc, err = checks.try_block(res.stdout, "nccl")
            error = error or err
    if doc is not None:
        artifacts.atomic_write_text(cross_dir / "nccl.json", json.dumps(doc, indent=1, sort_keys=True) + "\n")
    bad = next((c for c in codes if c != 0), 0)
    return checks.judge_nccl(doc, exit_code=bad, sizes=ctx.sizes(), nominal_busbw=p.cross_min_busbw_gbps,
                             min_pct=100.0, error=error, what="cross-node all-reduce")


def run_ssh(ctx: RunContext, hosts: Sequence[HostSpec], *, forks: int) -> ExitStatus:
    """SSH fan-out mode over ``hosts`` (see the module docstring); returns the exit status."""
    ctx.log(f"envcheck {ctx.cluster.name} (ssh): {len(hosts)} node(s), {forks} at a time, run {ctx.run_id}")
    specs = {h.name: h for h in hosts}
    conns = [connect(h) for h in hosts]
    nodes = {c.name: _SshNode(ctx, c, specs[c.name]) for c in conns}
    try:
        outcomes = fan_out(conns, lambda h: nodes[h.name].run(), forks=forks)
        raws: list[NodeRaw] = []
        for o in outcomes:
            if o.value is not None:
                raws.append(o.value)
            else:
                ctx.log(f"{o.host}: {'UNREACHABLE' if o.unreachable else 'ERROR'}: {o.error}")
                raws.append(NodeRaw(o.host, error=str(o.error), unreachable=o.unreachable))
        cross = None
        plans = {r.node: r.plan for r in raws if r.plan is not None and r.plan.run}
        if ctx.params.cross_node and len(hosts) > 1:
            ready = [nodes[r.node] for r in raws if r.node in plans]
            if len(ready) >= 2:
                cross = run_cross_ssh(ctx, ready, plans)
            elif not ctx.skip_gpu and any(r.plan and r.plan.status is not Status.SKIP for r in raws):
                cross = Verdict(Status.ERROR, f"only {len(ready)} node(s) could run the GPU steps")
            else:
                cross = Verdict(Status.SKIP, "fewer than two nodes with usable GPUs")
        return finish(ctx, raws, cross)
    finally:
        for c in conns:
            c.close()


# ---------------------------------------------------------------------------------------------- Kubernetes mode


def _node_filter(names: Sequence[str], limit: str | None) -> list[str]:
    """Node names matching ``--limit`` (comma-separated globs, ``!`` excludes), in order."""
    if not limit:
        return list(names)
    patterns = [p.strip() for p in limit.split(",") if p.strip()]
    include = [p for p in patterns if not p.startswith("!")]
    exclude = [p[1:] for p in patterns if p.startswith("!")]
    return [n for n in names if (not include or any(fnmatchcase(n, p) for p in include))
            and not any(fnmatchcase(n, p) for p in exclude)]


POLL_S = 0.5


def pod_state(pod: Any) -> str:
    """One line on why a pod has no result: ``pod NAME: phase P, container waiting CrashLoopBackOff ...``."""
    text = f"pod {pod.name}: phase {pod.phase}"
    c = pod.container
    if c is not None:
        text += f", container {c.state}" + "".join(f" {x}" for x in (c.reason, c.message) if x)
        if c.exit_code is not None:
            text += f", exit code {c.exit_code}"
        if c.last_reason:
            text += f", last run {c.last_reason} (exit code {c.last_exit_code})"
    elif pod.unschedulable or pod.reason:
        text += f", {pod.reason or 'Unschedulable'}: {pod.message or pod.unschedulable}"
    return text[:300]


def _wait_logs(kubectl: Any, sel: str, wanted: Sequence[str], step: str, timeout_s: float,
               sleep: Callable[[float], None] = time.sleep) -> tuple[dict[str, str], dict[str, Any]]:
    """(log per node, pod per node) of the pods matching ``sel``, once each wanted node's log has ``step``'s
    exit line or ``timeout_s`` has passed."""
    deadline = time.monotonic() + timeout_s
    while True:
        pods = {p.name: p for p in kubectl.list_pods(sel)}
        logs = kubectl.logs_by_pod(sel, timestamps=False)
        by_node = {pods[name].node: text for name, text in logs.items() if name in pods and pods[name].node}
        done = [n for n in wanted if step in checks.exit_codes(by_node.get(n, ""))]
        if len(done) == len(wanted) or time.monotonic() > deadline:
            return by_node, {p.node: p for p in pods.values() if p.node}
        sleep(POLL_S)


def run_k8s(ctx: RunContext, kubectl: Any, *, limit: str | None) -> ExitStatus:
    """In-cluster mode through ``kubectl`` (a :class:`~xpushare.transport.kubectl.Kubectl`); returns the exit status."""
    from xpushare.transport.kubectl import KubeError, KubePodStuck, KubeTimeout

    p = ctx.params
    settings = manifests.K8sSettings(image=p.image, python=p.python or "python3", scripts=p.scripts,
                                     workdir=p.workdir, gpu_resource=p.gpu_resource, node_selector=p.node_selector,
                                     host_network=p.host_network, workload_kind=p.workload_kind,
                                     runtime_class=p.runtime_class)
    label_sel = ",".join(f"{k}={v}" for k, v in p.node_selector.items()) or None
    all_nodes = kubectl.list_nodes(label_sel)
    names = _node_filter([n.name for n in all_nodes], limit)
    if not names:
        raise UsageError(f"no Kubernetes node of cluster {ctx.cluster.name!r} matches "
                         f"{label_sel or 'any label'} and --limit {limit or '*'}")
    ips = {n.name: n.internal_ip for n in all_nodes}
    run = ctx.run_id
    ctx.log(f"envcheck {ctx.cluster.name} (k8s): {len(names)} node(s), run {run}, image {p.image}")
    kinds = ["daemonsets", "jobs" if p.workload_kind == "job" else "pods"]
    if p.workload_kind == "job":
        kinds.append("pods")
    if p.scripts == "configmap":
        kinds.append("configmaps")
    raws = {n: NodeRaw(n) for n in names}
    kind_note = "Jobs" if p.workload_kind == "job" else "plain Pods (restartPolicy Never, pinned with nodeName)"
    notes = [f"Stack probe ran as a DaemonSet; GPU steps as {kind_note}."]
    cross: Verdict | None = None

    def apply(docs: Sequence[Mapping[str, Any]]) -> None:
        wrapped = [manifests.wrap_job(d) if p.workload_kind == "job" and d.get("kind") == "Pod" else d for d in docs]
        kubectl.apply(manifests.to_yaml(wrapped))

    states: dict[tuple[str, str], str] = {}  # (node, component) -> pod state, for results that are missing

    def wait_done(sel: str, count: int, step: str) -> dict[str, str]:
        try:
            kubectl.wait_pods(sel, until="terminal", count=count, timeout_s=p.pod_timeout_s, poll_s=POLL_S)
        except (KubeTimeout, KubePodStuck) as exc:
            ctx.log(f"warning: {exc}")
        out: dict[str, str] = {}
        for pod in kubectl.list_pods(sel):
            if pod.node is None:
                continue
            states[(pod.node, step)] = pod_state(pod)
            try:
                out[pod.node] = kubectl.logs(pod.name, timestamps=False)
            except KubeError as exc:
                out[pod.node] = f"(no log: {exc})"
            ctx.write(pod.node, f"{step}-pod.log", out[pod.node])
        return out

    def record(node: str, step: str, text: str | None, component: str) -> StepRaw:
        state = states.get((node, component), f"no {component} pod ran on this node")
        doc, error = checks.try_block(text or "", step)
        code = checks.exit_codes(text or "").get(step)
        if doc is not None:
            ctx.write(node, f"{step}.json", json.dumps(doc, indent=1, sort_keys=True) + "\n")
        else:
            error = f"{error} ({f'exit {code}; ' if code is not None else ''}{state})"
        return StepRaw(doc, error, code)

    try:
        objs: list[Mapping[str, Any]] = []
        if p.scripts == "configmap":
            objs.append(manifests.render_scripts_configmap(run))
        objs.append(manifests.render_stack_daemonset(run, settings, probe_args=ctx.probe_args(),
                                                     nodes=names if limit else None))
        kubectl.apply(manifests.to_yaml(objs))
        stack_sel = manifests.selector(run, "stack")
        try:
            kubectl.wait_pods(stack_sel, until="running", count=len(names), timeout_s=p.pod_timeout_s, poll_s=POLL_S)
        except (KubeTimeout, KubePodStuck) as exc:
            ctx.log(f"warning: {exc}")
        logs, stack_pods = _wait_logs(kubectl, stack_sel, names, "stack", p.step_timeout_s)
        for node in names:
            if node in logs:
                ctx.write(node, "stack-pod.log", logs[node])
            if node in stack_pods:
                states[(node, "stack")] = pod_state(stack_pods[node])
            stack = record(node, "stack", logs.get(node), "stack")
            raws[node].stack = stack
            raws[node].plan = checks.gpu_plan(stack.doc, skip_gpu=ctx.skip_gpu, cpu_smoke=p.cpu_smoke,
                                              smoke_procs=p.smoke_procs)
        kubectl.delete(manifests.selector(run, "stack"), kind="daemonsets", wait=False)
        ready = [n for n in names if (pl := raws[n].plan) is not None and pl.run]
        answered = sum(1 for n in names if (st := raws[n].stack) is not None and st.doc is not None)
        ctx.log(f"stack: {answered}/{len(names)} answered; "
                f"GPU steps on {len(ready)} node(s)")
        pods = []
        for node in ready:
            plan = raws[node].plan
            assert plan is not None
            args = ["--cublas", shlex.join(ctx.cublas_args(plan))] if p.cublas else []
            if nccl_plan_note(plan) is None:
                args += ["--nccl", shlex.join(ctx.nccl_args(plan)),
                         "--torchrun", f"--standalone --nproc-per-node {plan.gpus}"]
            if args:
                pods.append(manifests.render_step_pod(run, "gpu", node, settings, steps_args=args,
                                                      gpus=plan.gpus if plan.device == "cuda" else 0))
        if pods:
            apply(pods)
            gpu_logs = wait_done(manifests.selector(run, "gpu"), len(pods), "gpu")
            for node in ready:
                if p.cublas:
                    raws[node].cublas = record(node, "cublas", gpu_logs.get(node), "gpu")
                plan = raws[node].plan
                if plan is not None and nccl_plan_note(plan) is None:
                    raws[node].nccl = record(node, "nccl", gpu_logs.get(node), "gpu")
        if p.cross_node and len(names) > 1:
            cross = _cross_k8s(ctx, ready, raws, ips, settings, apply, wait_done)
        return finish(ctx, list(raws.values()), cross, notes)
    finally:
        for kind in kinds:
            try:
                kubectl.delete(manifests.selector(run), kind=kind, wait=kind == "pods", timeout_s=60)
            except KubeError as exc:
                ctx.log(f"warning: cleanup of {kind} failed: {exc}")


def _cross_k8s(ctx: RunContext, ready: Sequence[str], raws: Mapping[str, NodeRaw], ips: Mapping[str, str | None],
               settings: manifests.K8sSettings, apply: Callable[[Sequence[Mapping[str, Any]]], None],
               wait_done: Callable[[str, int, str], dict[str, str]]) -> Verdict:
    """The cross-node all-reduce as one hostNetwork pod per node; MASTER_ADDR = first node's InternalIP."""
    p = ctx.params
    if len(ready) < 2:
        reason = f"only {len(ready)} node(s) could run the GPU steps"
        return Verdict(Status.SKIP if ctx.skip_gpu or not ready else Status.ERROR, reason)
    plans = [raws[n].plan for n in ready]
    cpu = any(pl is not None and pl.device == "cpu" for pl in plans)
    nproc = 1 if cpu else min(pl.gpus for pl in plans if pl is not None)
    addr = p.master_addr or ips.get(ready[0])
    if not addr:
        return Verdict(Status.ERROR, f"node {ready[0]} has no InternalIP for MASTER_ADDR (set envcheck_master_addr)")
    port = p.master_port or 29512
    plan = checks.GpuPlan(True, nproc, "cpu" if cpu else "cuda")
    ctx.log(f"cross-node all-reduce: {len(ready)} node(s) x {nproc}, MASTER_ADDR={addr}:{port}")
    pods = []
    for rank, node in enumerate(ready):
        torchrun = (f"--nnodes {len(ready)} --node-rank {rank} --nproc-per-node {nproc} "
                    f"--master-addr {shlex.quote(addr)} --master-port {port}")
        pods.append(manifests.render_step_pod(ctx.run_id, "cross", node, settings,
                                              steps_args=["--nccl", shlex.join(ctx.nccl_args(plan)),
                                                          "--torchrun", torchrun],
                                              gpus=0 if cpu else nproc, host_network=p.host_network))
    apply(pods)
    logs = wait_done(manifests.selector(ctx.run_id, "cross"), len(ready), "cross")
    cross_dir = ctx.base / _safe(ctx.cluster.name) / CROSS_DIR
    for node, text in logs.items():
        artifacts.atomic_write_text(cross_dir / f"{_safe(node)}.log", text)
    first = logs.get(ready[0])
    doc, error = checks.try_block(first, "nccl") if first is not None else (None, "no pod log of rank 0")
    if doc is not None:
        artifacts.atomic_write_text(cross_dir / "nccl.json", json.dumps(doc, indent=1, sort_keys=True) + "\n")
    codes = [checks.exit_codes(logs.get(n, "")).get("nccl") for n in ready]
    bad = next((c for c in codes if c not in (0, None)), None if None in codes else 0)
    if bad is None and doc is not None:
        bad = -1  # a rank's pod gave no exit line: it did not finish
    return checks.judge_nccl(doc, exit_code=bad, sizes=ctx.sizes(), nominal_busbw=p.cross_min_busbw_gbps,
                             min_pct=100.0, error=error, what="cross-node all-reduce")


# ---------------------------------------------------------------------------------------------- entry point


def envcheck_task(cluster: str, *, limit: str | None = None, forks: int = DEFAULT_FORKS, mode: str = "ssh",
                  inventory_path: str | None = None, run_id: str | None = None, skip_gpu: bool = False,
                  out: TextIO | None = None, overrides: Sequence[str] = (), root: str | os.PathLike[str] = ".",
                  cluster_spec: ClusterSpec | None = None, kubectl: Any = None) -> ExitStatus:
    """``invoke envcheck``: node acceptance of ``cluster`` with a fleet report; returns the exit status.

    Args:
        cluster: inventory cluster name (``local`` always exists).
        limit: comma-separated globs on node names; ``!`` excludes (SSH: inventory ``gpu`` hosts;
            Kubernetes: node names).
        forks: nodes handled at once in SSH mode.
        mode: ``ssh`` (fan-out) or ``k8s`` (DaemonSet + pods through kubectl on the cluster's master).
        inventory_path: ``--inventory`` (default ``$XPUSHARE_INVENTORY``, else ``inventory/inventory.yaml``).
        run_id: ``[A-Za-z0-9._-]{1,64}``; default ``YYYYmmdd-HHMMSS`` now (local time).
        skip_gpu: stack check only; cuBLAS and all-reduce are SKIP.
        out: progress and summary stream (default stdout).
        overrides: ``--set envcheck_<name>=<YAML value>`` items (:class:`EnvcheckParams`).
        root: directory holding ``.tmplog/``.
        cluster_spec, kubectl: for tests and embedding: use this cluster instead of the inventory's, and
            this :class:`~xpushare.transport.kubectl.Kubectl` instead of one on the master.

    Returns:
        :class:`ExitStatus` OK (0), FAILED (1: a node or the cross-node step FAIL/ERROR), UNREACHABLE (3).
    Raises:
        UsageError / InventoryError (exit 2): bad mode, forks, run id, parameter, cluster or selection.
    """
    from xpushare.inventory import schema
    from xpushare.inventory.selection import select_hosts

    stream = out if out is not None else sys.stdout
    if mode not in MODES:
        raise UsageError(f"bad --mode {mode!r} (choose from: {', '.join(MODES)})")
    if int(forks) < 1:
        raise UsageError("--forks must be >= 1")
    spec = cluster_spec or schema.load(inventory_path).cluster(cluster)
    params = resolve_params(spec.params, parse_overrides(list(overrides)))
    rid = run_id or artifacts.new_run_id(datetime.now())
    try:
        artifacts.validate_run_id(rid)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    ctx = RunContext(spec, params, run_id=rid, root=Path(root), mode=mode, skip_gpu=skip_gpu, out=stream)
    if mode == "ssh":
        role = "gpu" if spec.by_role("gpu") else "all"
        return run_ssh(ctx, select_hosts(spec, role=role, limit=limit), forks=int(forks))
    if kubectl is None:
        from xpushare.transport.kubectl import Kubectl

        masters = spec.by_role("master")
        if not masters:
            raise UsageError(f"cluster {spec.name!r} has no master host to run kubectl on (--mode k8s)")
        kubectl = Kubectl(connect(masters[0]), kubectl=spec.kubectl, kubeconfig=spec.kubeconfig,
                          context=spec.context, namespace=spec.namespace)
    try:
        return run_k8s(ctx, kubectl, limit=limit)
    finally:
        host = getattr(kubectl, "host", None)
        if isinstance(host, Host):
            host.close()
