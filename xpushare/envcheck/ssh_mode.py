"""Envcheck SSH mode (:func:`run_ssh`): per-node steps over SSH fan-out, then the cross-node all-reduce
(see :mod:`xpushare.envcheck.runner` for the flow). Split out of :mod:`xpushare.envcheck.runner`.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shlex
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from xpushare.envcheck import checks, manifests
from xpushare.envcheck.context import CROSS_DIR, NodeRaw, RunContext, StepRaw, finish, nccl_plan_note, safe_name
from xpushare.evidence import gpu_health
from xpushare.inventory.schema import HostSpec
from xpushare.model.errors import CommandTimeout, ConnectionLost, HostUnreachable, TransportError
from xpushare.model.exit_status import ExitStatus
from xpushare.model.verdict import Status, Verdict
from xpushare.report import run_store
from xpushare.transport.base import CommandResult, Host
from xpushare.transport.fanout import fan_out
from xpushare.transport.hosts import connect
from xpushare.transport.local import LocalHost

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

    def health(self) -> StepRaw:
        """The node health capture (evidence/gpu_health's command); kept as ``health.txt``."""
        env = {k: v.replace("{node}", self.host.name) for k, v in self.ctx.params.health_env.items()}
        argv = gpu_health.capture_argv(env=env)
        try:
            res = self.host.run(argv, timeout=self.ctx.params.step_timeout_s)
        except (CommandTimeout, ConnectionLost) as exc:
            self.ctx.write(self.host.name, "health.txt", f"# {exc}\n")
            return StepRaw(error=exc.message)
        self.ctx.write(self.host.name, "health.txt", res.stdout)
        if not res.ok:
            return StepRaw(error=f"health capture exit {res.exit_code}: {res.stderr.strip()[:200]}",
                           exit_code=res.exit_code)
        return StepRaw({"capture": res.stdout}, None, res.exit_code)

    def run(self) -> NodeRaw:
        ctx = self.ctx
        raw = NodeRaw(self.host.name)
        self.install()
        raw.stack = self.step("stack", [self.python, f"{self.scripts}/stack_probe.py", *ctx.probe_args()])
        if ctx.params.health:
            raw.health = self.health()
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
    cross_dir = ctx.base / safe_name(ctx.cluster.name) / CROSS_DIR
    codes: list[int] = []
    doc: dict[str, Any] | None = None
    error: str | None = None
    for o in outcomes:
        argv = argv_of(by_host[o.host])
        if o.value is None:
            run_store.atomic_write_text(cross_dir / f"{safe_name(o.host)}.log", f"$ {shlex.join(argv)}\n{o.error}\n")
            error = error or str(o.error)
            codes.append(-1)
            continue
        res = o.value
        codes.append(res.exit_code)
        run_store.atomic_write_text(cross_dir / f"{safe_name(o.host)}.log",
                                    f"$ {shlex.join(argv)}\nexit {res.exit_code} after {res.duration_s:.1f} s\n"
                                    f"--- stdout ---\n{res.stdout}\n--- stderr ---\n{res.stderr}")
        if ranks[o.host] == 0:
            doc, err = checks.try_block(res.stdout, "nccl")
            error = error or err
    if doc is not None:
        run_store.atomic_write_text(cross_dir / "nccl.json", json.dumps(doc, indent=1, sort_keys=True) + "\n")
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
        # each connection closed once its node is done: at most ``forks`` open at once, so memory stays flat with
        # the node count (the cross-node step connects again to the nodes it needs)
        outcomes = fan_out(conns, lambda h: nodes[h.name].run(), forks=forks, close_each=True)
        raws: list[NodeRaw] = []
        for o in outcomes:
            if o.value is not None:
                raws.append(o.value)
            else:
                if isinstance(o.error, HostUnreachable):  # the others are still checked
                    ctx.log(f"{o.host}: {o.error.describe()}")
                    raws.append(NodeRaw(o.host, error=o.error.message, unreachable=True, why=o.error.why))
                else:
                    ctx.log(f"{o.host}: ERROR: {o.error}")
                    raws.append(NodeRaw(o.host, error=str(o.error)))
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
