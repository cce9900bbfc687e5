"""Fault injection of FAIL-001..004 (seed 000 §10.3, §16.6, §17.6; seed 003 fault-testing practice).

Every fault follows the same order (as Dynamo's fault-tolerance tests do: load -> fault -> recovery ->
logs -> restore -> checks):

1. refuse unless ``allow_disruptive`` is set (``invoke fail --allow-disruptive``): the case SKIPs;
2. start a load and wait until it runs; snapshot the SUT's logs (``scheduler_before_fault.log``);
3. inject the fault and time the recovery (rollout complete and every scheduler healthy; replacements of
   drained pods running elsewhere; metrics back after heavy load);
4. in ``finally``: harvest logs first (previous-container logs of SUT pods that restarted,
   ``previous/``), then restore (``rollout status`` until ready, ``uncordon``) and record whether that
   worked (``plan.restored``);
5. wait for every workload pod to end, then start a probe pod that must succeed.

What the judgment needs goes to ``plan.json`` (timings, pods, restore outcome); the engine then harvests
pod logs, the scheduler log stream and node evidence before it cleans up.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from xpushare.backends.base import CAP_SCHEDULER_PROCESS, KubeAccess, SchedulerFacts, require_part
from xpushare.evidence.previous_logs import harvest_previous_logs
from xpushare.evidence.scrape_capture import ScrapeFacts, scrape_facts, split_trailer
from xpushare.model.atomic_file import atomic_write_text, open_append
from xpushare.model.errors import XpushareError
from xpushare.model.workload import WorkloadRecord, WorkloadSpec
from xpushare.transport.kube_errors import KubeError
from xpushare.transport.kube_objects import Pod

if TYPE_CHECKING:  # cases import this module: no import of xpushare.cases at run time
    from xpushare.cases.base import CaseRun

__all__ = ["SKIP_REASON", "fail_drain", "fail_heavy_node", "fail_restart_daemonset", "fail_restart_scheduler",
           "start_recorded"]

SKIP_REASON = "needs --allow-disruptive (restarts DaemonSets / drains nodes of the cluster)"
W2 = "w2_medium_add"
W5 = "w5_quota_probe"


def _disallowed(run: CaseRun) -> bool:
    if not run.params.get("allow_disruptive"):
        run.plan["skip"] = SKIP_REASON
        run.save_plan()
        return True
    return False


def _k8s(run: CaseRun) -> KubeAccess:
    """The run's Kubernetes operations; the FAIL cases require Kubernetes, so none is a usage error."""
    kube = run.backend.parts.kubernetes
    if kube is None:
        raise XpushareError(f"fault injection needs Kubernetes, not a {run.backend.mode} backend")
    return kube


def _healthy_nodes(run: CaseRun) -> dict[str, bool]:
    """``node -> /healthz answered 200`` for every node that runs a scheduler pod (ready or not)."""
    b = _k8s(run)
    sched = b.scheduler_pods()
    out = {}
    for node in sched:
        body = b.curl_scheduler(node, "/healthz", sched)
        ready = all(c.ready for c in sched[node].containers) if sched[node].containers else False
        out[node] = body is not None and split_trailer(body)[1] == 200 and ready
    return out


def _snapshot_logs(run: CaseRun, name: str) -> None:
    b, names = _k8s(run), run.backend.names
    for label, stem in ((names.scheduler_label, "scheduler"), (names.device_plugin_label, "device-plugin")):
        try:
            text = b.sut_logs(label)
        except KubeError as exc:
            text = f"# kubectl logs -l {label}: {exc}\n"
        atomic_write_text(run.case_dir / f"{stem}_{name}.log", text)


def _harvest_previous(run: CaseRun) -> None:
    try:
        kube = run.backend.parts.kubernetes
        if kube is not None:  # host mode: a restarted scheduler's log file goes on, no previous container
            harvest_previous_logs(kube, run.backend.names, run.case_dir / "previous")
    except Exception as exc:  # evidence collection never hides the fault's outcome
        with open_append(run.case_dir / "harvest-errors.txt") as fh:
            fh.write(f"previous logs: {type(exc).__name__}: {exc}\n")


def _load(run: CaseRun, count: int, *, node: str | None = None, workload: str = W5,
          tag: str = "load") -> list[WorkloadSpec]:
    args: tuple[str, ...] = ()
    if workload == W5:
        args = ("--duration-s", f"{float(run.params['fail_load_s']):g}")
    return [run.pod(f"{tag}-{i}", workload, args=args, node=node) for i in range(1, count + 1)]


def start_recorded(run: CaseRun, specs: Sequence[WorkloadSpec], key: str) -> None:
    """Start ``specs`` and record their names in the case's plan under ``key`` and ``pods`` (saved first, so a
    harvest after a crash still knows them)."""
    run.plan.setdefault(key, [])
    run.plan[key] += [s.name for s in specs]
    run.plan.setdefault("pods", [])
    run.plan["pods"] += [s.name for s in specs]
    run.save_plan()
    run.backend.start_pods(specs)


def _probe(run: CaseRun, node: str | None = None) -> None:
    """A W2 pod started after recovery: new work must be admitted and run (on ``node`` when given)."""
    spec = run.pod("probe", W2, node=node)
    run.plan["probe_pod"] = spec.name
    start_recorded(run, [spec], "probe_pods")
    run.backend.wait_terminal([spec.name], float(run.params["pod_timeout_s"]))


def _wait_all(run: CaseRun) -> list[WorkloadRecord]:
    names = list(run.plan.get("load_pods") or []) + list(run.plan.get("replacement_pods") or [])
    return run.backend.wait_terminal(names, float(run.params["pod_timeout_s"]))


def _wait_healthy(run: CaseRun, t0: float, deadline_s: float) -> float | None:
    """Poll until every scheduler is ready and answers /healthz 200; seconds since ``t0`` or None."""
    end = time.monotonic() + deadline_s
    while True:
        try:
            health = _healthy_nodes(run)
        except KubeError:
            health = {}
        if health and all(health.values()):
            return time.time() - t0
        if time.monotonic() >= end:
            run.plan["health_at_timeout"] = health
            return None
        run.sleep(1.0)


def fail_restart_daemonset(run: CaseRun, which: str) -> None:
    """FAIL-001 (``which="scheduler"``) / FAIL-002 (``"device-plugin"``): ``rollout restart`` under load."""
    if _disallowed(run):
        return
    b, names = _k8s(run), run.backend.names
    ds = names.scheduler_daemonset if which == "scheduler" else names.device_plugin_daemonset
    ns = names.namespace
    run.plan.update(namespace=run.namespace, daemonset=ds, min_succeeded=None)
    specs = _load(run, int(run.params["fail_pods"]))
    start_recorded(run, specs, "load_pods")
    run.backend.wait_running([s.name for s in specs], float(run.params["pod_timeout_s"]))
    run.sleep(float(run.params["fail_pre_fault_s"]))
    _snapshot_logs(run, "before_fault")
    fault: dict[str, Any] = {"kind": f"rollout restart daemonset/{ds}", "applied": False}
    run.plan["fault"] = fault
    timeout = float(run.params["fail_restart_timeout_s"])
    t0 = time.time()
    rolled = False
    try:
        try:
            b.restart_daemonset(ds)
            fault["applied"] = True
            fault["at"] = t0
        except KubeError as exc:
            fault["error"] = str(exc)
            run.save_plan()
            return
        try:
            out = b.await_daemonset(ds, timeout_s=timeout)
            rolled = True
            run.plan["rollout_s"] = round(time.time() - t0, 3)
            run.plan["rollout_output"] = out[-500:]
        except KubeError as exc:
            run.plan["rollout_error"] = str(exc)
        if rolled:
            rec = _wait_healthy(run, t0, max(0.0, timeout - (time.time() - t0)))
            run.plan["recovery_s"] = None if rec is None else round(rec, 3)
            run.plan["recovery_what"] = "rollout complete and every scheduler ready with /healthz 200"
        run.save_plan()
    finally:
        _harvest_previous(run)
        _snapshot_logs(run, "after_fault")
        if fault["applied"]:
            _restore_daemonset(run, ds, ns, already=rolled)
        run.save_plan()
    _wait_all(run)
    _probe(run)
    run.save_plan()


def fail_restart_scheduler(run: CaseRun) -> None:
    """FAIL-001: restart the scheduler under load. Kubernetes: :func:`fail_restart_daemonset` (``rollout
    restart``). Elsewhere (host mode): :meth:`~xpushare.backends.base.SchedulerControl.restart_scheduler` kills the
    scheduler process, then recovery is a scheduler process with a new pid answering ``/healthz`` 200 on every
    node; with nothing to restart it (no supervisor) there is none, and ``scheduler_came_back`` says so."""
    if run.backend.parts.kubernetes is not None:
        fail_restart_daemonset(run, "scheduler")
        return
    if _disallowed(run):
        return
    backend = run.backend
    scheduler = require_part(backend.parts.scheduler, CAP_SCHEDULER_PROCESS)
    run.plan.update(min_succeeded=None)
    specs = _load(run, int(run.params["fail_pods"]))
    start_recorded(run, specs, "load_pods")
    backend.wait_running([s.name for s in specs], float(run.params["pod_timeout_s"]))
    run.sleep(float(run.params["fail_pre_fault_s"]))
    _write_facts(run, "scheduler_before_fault.txt", scheduler.scheduler_facts())
    fault: dict[str, Any] = {"kind": "restart the scheduler", "applied": False}
    run.plan["fault"] = fault
    timeout = float(run.params["fail_restart_timeout_s"])
    came_back: dict[str, Any] = {"name": "scheduler_came_back",
                                 "expression": "a new scheduler process answers /healthz 200 on every node"}
    try:
        try:
            restart = scheduler.restart_scheduler()
        except XpushareError as exc:
            fault["error"] = str(exc)
            run.save_plan()
            return
        fault.update(kind=restart.action, applied=True, at=restart.at, before=restart.before)
        run.save_plan()
        end = time.monotonic() + timeout
        facts: list[SchedulerFacts] = []
        while True:
            try:
                facts = scheduler.scheduler_facts()
            except XpushareError as exc:
                facts = [SchedulerFacts("?", error=str(exc))]
            back = [f for f in facts if f.error is None and f.processes and f.healthy
                    and f.instance != restart.before.get(f.node)]
            if facts and len(back) == len(facts):
                run.plan["recovery_s"] = round(time.time() - restart.at, 3)
                break
            if time.monotonic() >= end:
                run.plan["recovery_s"] = None
                break
            run.sleep(0.5)
        run.plan["recovery_what"] = "a new scheduler process (new pid) answering /healthz 200"
        down = [f.node for f in facts if f.error is None and not f.processes]
        came_back["values"] = {"after": [{"node": f.node, "instance": f.instance, "healthy": f.healthy,
                                          "error": f.error} for f in facts]}
        came_back["ok"] = run.plan["recovery_s"] is not None
        came_back["detail"] = "" if came_back["ok"] else (
            f"no scheduler process on {', '.join(down)} {timeout:g} s after the kill: nothing restarted it (not "
            "supervised? `invoke deploy` runs it under a supervisor)" if down else
            f"the scheduler did not come back healthy within {timeout:g} s")
        run.plan["extra_checks"] = [came_back]
        run.save_plan()
    finally:
        try:
            after = scheduler.scheduler_facts()
            _write_facts(run, "scheduler_after_fault.txt", after)
            run.plan["restored"] = bool(after) and all(f.processes and f.healthy for f in after)
            run.plan["restore_detail"] = "; ".join(
                f"{f.node}: {'pid ' + str(f.instance) if f.processes else 'not running'}, "
                f"{'healthy' if f.healthy else 'not healthy'}" for f in after)
        except XpushareError as exc:
            run.plan["restored"] = None
            run.plan["restore_detail"] = f"cannot observe the scheduler: {exc}"
        run.save_plan()
    _wait_all(run)
    _probe(run)
    run.save_plan()


def _write_facts(run: CaseRun, name: str, facts: Sequence[SchedulerFacts]) -> None:
    lines = [f"{f.node} instance={f.instance} healthy={f.healthy} error={f.error} pids="
             f"{','.join(str(p.pid) for p in f.processes)}" for f in facts]
    atomic_write_text(run.case_dir / name, "\n".join(lines) + "\n")


def _restore_daemonset(run: CaseRun, ds: str, ns: str, *, already: bool) -> None:
    b = _k8s(run)
    detail = "rollout complete"
    if not already:
        try:
            b.await_daemonset(ds, timeout_s=float(run.params["fail_restart_timeout_s"]))
        except KubeError as exc:
            detail = f"rollout status: {exc}"
    try:
        status = b.daemonset_status(ds)
        run.plan["restored"] = bool(status.rolled_out and status.ready >= status.desired)
        run.plan["restore_detail"] = (f"{detail}; desired {status.desired}, ready {status.ready}, updated "
                                      f"{status.updated}, available {status.available}")
    except KubeError as exc:
        run.plan["restored"] = None
        run.plan["restore_detail"] = f"cannot read daemonset {ds}: {exc}"


def fail_drain(run: CaseRun) -> None:
    """FAIL-003: drain a node under load, re-submit the evicted work (bare pods are not rescheduled by
    Kubernetes), require it to run elsewhere (no pod Pending forever), uncordon in ``finally``."""
    if _disallowed(run):
        return
    b = _k8s(run)
    run.plan.update(namespace=run.namespace, min_succeeded=None)
    specs = _load(run, int(run.params["fail_pods"]))
    start_recorded(run, specs, "load_pods")
    records = run.backend.wait_running([s.name for s in specs], float(run.params["pod_timeout_s"]))
    node = run.params.get("fail003_node") or _busiest_node(records)
    if not node:
        run.plan["fault"] = {"kind": "drain", "applied": None, "error": "no node runs the load"}
        run.save_plan()
        return
    evicted = [r.name for r in records if r.node == node and not r.terminal]
    run.plan.update(node=node, evicted=evicted)
    run.plan["load_pods"] = [n for n in run.plan["load_pods"] if n not in evicted]
    run.sleep(float(run.params["fail_pre_fault_s"]))
    _snapshot_logs(run, "before_fault")
    fault: dict[str, Any] = {"kind": f"drain node/{node}", "applied": False, "node": node}
    run.plan["fault"] = fault
    t0 = time.time()
    try:
        try:
            out = b.drain_node(node, timeout_s=float(run.params["fail_drain_timeout_s"]),
                               grace_period_s=int(run.params["fail_drain_grace_s"]))
            fault.update(applied=True, at=t0, output=out[-1000:])
        except KubeError as exc:
            fault.update(error=str(exc), drain_failed=True)
            run.save_plan()
            return
        by_name = {s.name: s for s in specs}
        replacements = [dataclasses.replace(by_name[n], name=f"{n}-re", node=None) for n in evicted if n in by_name]
        if replacements:
            start_recorded(run, replacements, "replacement_pods")
            recs = run.backend.wait_running([s.name for s in replacements],
                                            float(run.params["fail_pending_max_s"]))
            running = [r for r in recs if r.phase != "Pending"]
            if len(running) == len(replacements):
                run.plan["recovery_s"] = round(time.time() - t0, 3)
            on_drained = [r.name for r in recs if r.node == node]
            run.plan["extra_checks"] = [{
                "name": "replacements_elsewhere", "expression": "no replacement pod runs on the cordoned node",
                "values": {"node": node, "placement": {r.name: r.node for r in recs}}, "ok": not on_drained,
                "detail": f"on the drained node: {', '.join(on_drained)}" if on_drained else ""}]
        else:
            run.plan["recovery_s"] = round(time.time() - t0, 3)
        run.plan["recovery_what"] = "drain finished and the evicted work runs again elsewhere"
        run.save_plan()
    finally:
        _harvest_previous(run)
        _snapshot_logs(run, "after_fault")
        _uncordon(run, node)
        run.save_plan()
    _wait_all(run)
    _probe(run, node=node)
    run.save_plan()


def _busiest_node(records: Sequence[WorkloadRecord]) -> str | None:
    counts: dict[str, int] = {}
    for r in records:
        if r.node and not r.terminal:
            counts[r.node] = counts.get(r.node, 0) + 1
    return max(sorted(counts), key=lambda n: counts[n]) if counts else None


def _uncordon(run: CaseRun, node: str) -> None:
    b = _k8s(run)
    try:
        b.uncordon_node(node)
        run.plan["restored"] = not b.node(node).unschedulable
        run.plan["restore_detail"] = f"node {node} uncordoned"
    except KubeError as exc:
        run.plan["restored"] = None
        run.plan["restore_detail"] = f"UNCORDON FAILED, run: kubectl uncordon {node} ({exc})"
        print(f"warning: node {node} may still be cordoned: kubectl uncordon {node}")


def _node_facts(run: CaseRun, node: str) -> tuple[Pod | None, ScrapeFacts]:
    b = _k8s(run)
    sched = b.scheduler_pods()
    pod = sched.get(node)
    return pod, scrape_facts(b.curl_scheduler(node, "/metrics", sched)) if pod else scrape_facts(None)


def fail_heavy_node(run: CaseRun) -> None:
    """FAIL-004: many pods pinned to one node, then the node's scheduler state and metrics must return to
    the idle baseline (no client left, GPU memory back), the scheduler must not restart, and a probe pod
    on that node must succeed."""
    if _disallowed(run):
        return
    node = run.params.get("fail004_node") or _largest_node(run)
    run.plan.update(namespace=run.namespace, node=node, min_succeeded=int(run.params["fail004_min_succeeded"]))
    base_pod, base = _node_facts(run, node)
    base_id = (base_pod.uid, base_pod.restart_count) if base_pod else (None, None)
    run.plan["baseline"] = {"pod": base_pod.name if base_pod else None, "uid": base_id[0],
                            "restarts": base_id[1], "scrape_ok": base.ok,
                            "gpu_used": dict(base.gpu_used)}
    fault: dict[str, Any] = {"kind": f"{int(run.params['fail004_pods'])} pods pinned to node/{node}",
                             "applied": False, "node": node}
    run.plan["fault"] = fault
    specs = _load(run, int(run.params["fail004_pods"]), node=node, workload=W2)
    start_recorded(run, specs, "load_pods")
    fault["applied"] = True
    t_end = time.time()
    try:
        run.backend.wait_terminal([s.name for s in specs], float(run.params["pod_timeout_s"]))
        t_end = time.time()
        tol = float(run.params["leak_gpu_tolerance_bytes"])
        limit = time.monotonic() + float(run.params["fail_recovery_max_s"])
        prefix = f"{run.case_id.lower()}-"
        while True:
            pod, facts = _node_facts(run, node)
            over = [g for g, v in facts.gpu_used if v > dict(base.gpu_used).get(g, 0.0) + tol]
            healthy = bool(pod and facts.ok and not facts.ours(prefix) and not over)
            if healthy:
                run.plan["recovery_s"] = round(time.time() - t_end, 3)
                break
            if time.monotonic() >= limit:
                break
            run.sleep(1.0)
        run.plan["recovery_what"] = "node metrics back: no client of the load, GPU memory within tolerance of idle"
        restarted = pod is None or (pod.uid, pod.restart_count) != base_id
        run.plan["after"] = {"pod": pod.name if pod else None, "scrape_ok": facts.ok,
                             "gpu_used": dict(facts.gpu_used), "clients_left": facts.ours(prefix)}
        run.plan["extra_checks"] = [
            {"name": "scheduler_no_restart", "expression": "node's scheduler pod uid and restart count unchanged",
             "values": {"before": run.plan["baseline"], "after": run.plan["after"]}, "ok": not restarted,
             "detail": "the scheduler restarted under the load" if restarted else ""},
            {"name": "node_metrics_recovered",
             "expression": f"no client_info of the load and GPU used <= idle + {tol:g}",
             "values": {"after": run.plan["after"]}, "ok": run.plan.get("recovery_s") is not None,
             "detail": "" if run.plan.get("recovery_s") is not None else "metrics did not return to idle"},
        ]
        run.save_plan()
    finally:
        _harvest_previous(run)
        run.plan["restored"] = True
        run.plan["restore_detail"] = "nothing to restore (no cluster object was changed)"
        run.save_plan()
    _probe(run, node=node)
    run.save_plan()


def _largest_node(run: CaseRun) -> str:
    b, resource = _k8s(run), run.backend.names.resource
    best: tuple[int, str] | None = None
    for n in b.nodes():
        v = n.allocatable_count(resource)
        if n.unschedulable or not n.ready or v <= 0:
            continue
        if best is None or v > best[0]:
            best = (v, n.name)
    if best is None:
        raise KubeError([], "", 0, f"no schedulable node offers {resource}")
    return best[1]
