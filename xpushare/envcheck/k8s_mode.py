"""Envcheck Kubernetes mode (:func:`run_k8s`): the stack DaemonSet (the stack probe, then the node health capture of
:mod:`xpushare.evidence.gpu_health`, judged by :mod:`xpushare.envcheck.node_health` as in SSH mode), one GPU Pod/Job
per node and the hostNetwork cross-node all-reduce through kubectl on the master (see
:mod:`xpushare.envcheck.runner`).
Split out of :mod:`xpushare.envcheck.runner`.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from fnmatch import fnmatchcase
from typing import Any

from xpushare.envcheck import checks, manifests
from xpushare.envcheck.context import CROSS_DIR, NodeRaw, RunContext, StepRaw, finish, nccl_plan_note, safe_name
from xpushare.evidence import gpu_health
from xpushare.model.errors import UsageError
from xpushare.model.exit_status import ExitStatus
from xpushare.model.verdict import Status, Verdict
from xpushare.report import run_store

# ---------------------------------------------------------------------------------------------- Kubernetes mode


def node_filter(names: Sequence[str], limit: str | None) -> list[str]:
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


def _wait_logs(kubectl: Any, sel: str, wanted: Sequence[str], steps: Sequence[str], timeout_s: float,
               sleep: Callable[[float], None] = time.sleep) -> tuple[dict[str, str], dict[str, Any]]:
    """(log per node, pod per node) of the pods matching ``sel``, once each wanted node's log has the exit line
    of every one of ``steps`` or ``timeout_s`` has passed."""
    deadline = time.monotonic() + timeout_s
    while True:
        pods = {p.name: p for p in kubectl.list_pods(sel)}
        logs = kubectl.logs_by_pod(sel, timestamps=False)
        by_node = {pods[name].node: text for name, text in logs.items() if name in pods and pods[name].node}
        done = [n for n in wanted if set(steps) <= set(checks.exit_codes(by_node.get(n, "")))]
        if len(done) == len(wanted) or time.monotonic() > deadline:
            return by_node, {p.node: p for p in pods.values() if p.node}
        sleep(POLL_S)


def health_step(ctx: RunContext, node: str, log: str | None, state: str) -> StepRaw:
    """The health step of ``node`` from its stack pod's log (the ``health`` block: the capture's output, kept as
    ``health.txt`` as in SSH mode); ``state``: the pod's state, for a log without it."""
    doc, error = checks.try_block(log or "", "health")
    code = checks.exit_codes(log or "").get("health")
    if doc is None or not isinstance(doc.get("capture"), str):
        ctx.write(node, "health.txt", f"# no health capture in the stack pod's log: {error}\n")
        return StepRaw(error=f"health capture {f'exit {code}' if code is not None else 'missing'} "
                             f"({state or 'no stack pod ran on this node'})", exit_code=code)
    ctx.write(node, "health.txt", doc["capture"])
    if code != 0:
        return StepRaw(error=f"health capture exit {code}", exit_code=code)
    return StepRaw({"capture": doc["capture"]}, None, code)


def run_k8s(ctx: RunContext, kubectl: Any, *, limit: str | None) -> ExitStatus:
    """In-cluster mode through ``kubectl`` (a :class:`~xpushare.transport.kubectl.Kubectl`); returns the exit status."""
    from xpushare.transport.kube_errors import KubeError, KubePodStuck, KubeTimeout

    p = ctx.params
    settings = p.k8s_settings()
    label_sel = ",".join(f"{k}={v}" for k, v in p.node_selector.items()) or None
    all_nodes = kubectl.list_nodes(label_sel)
    names = node_filter([n.name for n in all_nodes], limit)
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
        health_argv = gpu_health.capture_argv(env=p.health_env) if p.health else None
        objs.append(manifests.render_stack_daemonset(run, settings, probe_args=ctx.probe_args(),
                                                     nodes=names if limit else None, health_argv=health_argv))
        kubectl.apply(manifests.to_yaml(objs))
        stack_sel = manifests.selector(run, "stack")
        try:
            kubectl.wait_pods(stack_sel, until="running", count=len(names), timeout_s=p.pod_timeout_s, poll_s=POLL_S)
        except (KubeTimeout, KubePodStuck) as exc:
            ctx.log(f"warning: {exc}")
        logs, stack_pods = _wait_logs(kubectl, stack_sel, names, ("stack", "health") if p.health else ("stack",),
                                      p.step_timeout_s)
        for node in names:
            if node in logs:
                ctx.write(node, "stack-pod.log", logs[node])
            if node in stack_pods:
                states[(node, "stack")] = pod_state(stack_pods[node])
            stack = record(node, "stack", logs.get(node), "stack")
            raws[node].stack = stack
            raws[node].plan = checks.gpu_plan(stack.doc, skip_gpu=ctx.skip_gpu, cpu_smoke=p.cpu_smoke,
                                              smoke_procs=p.smoke_procs)
            if p.health:
                raws[node].health = health_step(ctx, node, logs.get(node), states.get((node, "stack"), ""))
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
    cross_dir = ctx.base / safe_name(ctx.cluster.name) / CROSS_DIR
    for node, text in logs.items():
        run_store.atomic_write_text(cross_dir / f"{safe_name(node)}.log", text)
    first = logs.get(ready[0])
    doc, error = checks.try_block(first, "nccl") if first is not None else (None, "no pod log of rank 0")
    if doc is not None:
        run_store.atomic_write_text(cross_dir / "nccl.json", json.dumps(doc, indent=1, sort_keys=True) + "\n")
    codes = [checks.exit_codes(logs.get(n, "")).get("nccl") for n in ready]
    bad = next((c for c in codes if c not in (0, None)), None if None in codes else 0)
    if bad is None and doc is not None:
        bad = -1  # a rank's pod gave no exit line: it did not finish
    return checks.judge_nccl(doc, exit_code=bad, sizes=ctx.sizes(), nominal_busbw=p.cross_min_busbw_gbps,
                             min_pct=100.0, error=error, what="cross-node all-reduce")
