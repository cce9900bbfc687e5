"""FAIL-005..007: a GPU fault injected into clients under load, and what the SUT does about it (docs/faults.md).

Order (as FAIL-001..004, :mod:`xpushare.cases.fault_acts`): refuse unless ``allow_disruptive``; snapshot the
scheduler (``scheduler_before_fault.txt``); start the load (W5 pods of ``fail_fault_load_s`` printing progress
lines; the victims carry the fault specification in their environment, :mod:`xpushare.model.gpu_faults`), so that
the fault strikes ``fail_fault_after_s`` seconds into the victims' run; wait for every load pod to end; snapshot
the scheduler again and scrape ``/metrics`` (``metrics_after_fault.txt``, after ``fail_settle_s``); start a probe
pod. The judgment (:mod:`xpushare.judge.faults`) reads ``plan.json`` and the pods' logs.

Where the fault comes from (:mod:`xpushare.cases.gpu_fault_injector`, resolved before any pod; none: SKIP
``premise unmet: fault-injector: ...``): the CUDA error-injection shim (``workloads/faultshim/``) named by
``fault_shim`` or installed by ``invoke deploy`` on every GPU host, the victims getting ``LD_PRELOAD="<client library>
<shim>"`` and ``CUDA_FAULT_INJECT`` (host mode, where the tool knows the client library's path; README of the shim for
why this order); or, with ``fault_injector: simulated-gpu``, the lab's simulated GPU (``SIMGPU_FAULT``).

Scenarios (``plan.scenario``):

* ``client-error`` (FAIL-005): one victim (``fail005_kind``, default ``illegal-address``); one neighbour on its GPU,
  the others wherever the backend puts them (on another GPU where the node has one);
* ``device-lost`` (FAIL-006): one victim loses its GPU (Xid 79): every client on that GPU fails with it; the
  neighbours on other GPUs must go on; probes go to the other GPUs only (the lost GPU is gone until a reset);
* ``ecc-storm`` (FAIL-007): every load pod on the victim's GPU gets an uncorrectable ECC error, a second apart; the
  neighbours elsewhere must go on and a probe on the stormed GPU must run (a retired page is not a dead GPU).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from xpushare.backends.base import CAP_SCHEDULER_PROCESS, SchedulerFacts, require_part
from xpushare.cases.fault_acts import SKIP_REASON, start_recorded
from xpushare.cases.gpu_fault_injector import PREMISE, Injector, find_injector
from xpushare.evidence.scrape_capture import scrape_facts
from xpushare.model.atomic_file import atomic_write_text
from xpushare.model.errors import XpushareError
from xpushare.model.gpu_faults import KINDS, fault_spec
from xpushare.model.workload import WorkloadSpec

if TYPE_CHECKING:  # cases import this module: no import of xpushare.cases at run time
    from xpushare.cases.base import CaseRun

__all__ = ["SCENARIOS", "fail_gpu_fault"]

W2 = "w2_medium_add"
W5 = "w5_quota_probe"
SCENARIOS = ("client-error", "device-lost", "ecc-storm")
METRICS_AFTER = "metrics_after_fault.txt"


def _w5(run: CaseRun, name: str, *, env: tuple[tuple[str, str], ...] = (), node: str | None = None,
        same_gpu_as: str | None = None) -> WorkloadSpec:
    args = ("--duration-s", f"{float(run.params['fail_fault_load_s']):g}",
            "--interval-s", f"{float(run.params['fail_probe_interval_s']):g}")
    return run.pod(name, W5, args=args, env=env, node=node, same_gpu_as=same_gpu_as)


def _load(run: CaseRun, scenario: str, injector: Injector) -> tuple[list[WorkloadSpec], list[WorkloadSpec]]:
    """The victims and the neighbours. Host mode (the backend places pods): the first victim first, then
    ``fail_neighbours_same_gpu`` pods on its GPU, then the other neighbours, which go to the least loaded GPUs.
    Kubernetes: every pod on the node with the fewest GPUs, one more than it has GPUs (so two share one)."""
    after = float(run.params["fail_fault_after_s"])
    node, gpus = run.backend.parts.placement.colocation_target()
    kind = str(run.params.get("fail005_kind") or "illegal-address") if scenario == "client-error" else (
        "device-lost" if scenario == "device-lost" else "ecc-uncorrectable")
    if kind not in KINDS:
        raise XpushareError(f"fail005_kind: unknown GPU fault kind {kind!r} (known: {', '.join(KINDS)})")
    lib = run.cluster.sut_lib
    victims = [_w5(run, "victim-1", env=injector.victim_env(lib, fault_spec(kind, after_s=after)), node=node)]
    same = int(run.params["fail_neighbours_same_gpu"])
    others = int(run.params["fail_neighbours"])
    same_as = None if node else victims[0].name
    if scenario == "ecc-storm":  # every client of the stormed GPU is struck, one second after the other
        victims += [_w5(run, f"victim-{i}", env=injector.victim_env(lib, fault_spec(kind, after_s=after + i - 1)),
                        node=node, same_gpu_as=same_as) for i in range(2, same + 2)]
        neighbours = []
    else:
        neighbours = [_w5(run, f"same-{i}", node=node, same_gpu_as=same_as) for i in range(1, same + 1)]
    if node is not None:
        others = max(others, gpus + 1 - len(victims) - len(neighbours))
    neighbours += [_w5(run, f"other-{i}", node=node) for i in range(1, others + 1)]
    run.plan.update(fault={"kind": kind, "applied": False, "after_s": after, "victims": [v.name for v in victims],
                           "via": injector.via})
    return victims, neighbours


def _facts(run: CaseRun, name: str) -> list[dict[str, Any]]:
    try:
        facts = require_part(run.backend.parts.scheduler, CAP_SCHEDULER_PROCESS).scheduler_facts()
    except XpushareError as exc:
        facts = [SchedulerFacts("?", error=str(exc))]
    out: list[dict[str, Any]] = [{"node": f.node, "instance": f.instance, "healthy": f.healthy,
                                  "restarts": f.restarts, "error": f.error} for f in facts]
    lines = [f"{f.node} instance={f.instance} healthy={f.healthy} restarts={f.restarts} error={f.error} "
             f"pids={','.join(str(p.pid) for p in f.processes)}" for f in facts]
    atomic_write_text(run.case_dir / name, "\n".join(lines) + "\n")
    return out


def _scrape_after(run: CaseRun) -> None:
    """``/metrics`` of every scheduler after the load: which clients it still exports (``client_info``)."""
    try:
        facts = require_part(run.backend.parts.scheduler, CAP_SCHEDULER_PROCESS).scheduler_facts(metrics=True)
    except XpushareError as exc:
        facts = [SchedulerFacts("?", error=str(exc))]
    pages: dict[str, Any] = {}
    for f in facts:
        name = METRICS_AFTER if len(facts) == 1 else f"metrics_after_fault_{f.node}.txt"
        if f.metrics_text is not None:
            atomic_write_text(run.case_dir / name, f.metrics_text)
        page = scrape_facts(f.metrics_text, full=True)
        pages[f.node] = {"file": name if f.metrics_text is not None else None, "ok": page.ok, "error": f.error,
                         "http_code": page.http_code, "client_info": [list(c) for c in page.client_info],
                         "client_pids": list(page.client_pids)}
    run.plan["metrics_after"] = pages


#: Why FAIL-006 does not run on a Kubernetes cluster: the device plugin keeps offering the lost GPU, so the probe
#: that must prove the other GPUs still work can be placed on it (a FAIL that says nothing about the SUT), and the
#: GPU stays lost for every later case on the cluster until its node is reset.
LOST_GPU_ON_KUBERNETES = ("a lost GPU needs host mode: in Kubernetes the device plugin keeps offering it, so the "
                          "probe may land on it, and it stays lost for every later case until its node is reset")


def fail_gpu_fault(run: CaseRun, scenario: str) -> None:
    """FAIL-005/006/007 (``scenario``: one of :data:`SCENARIOS`). Raises XpushareError on a bad parameter."""
    if not run.params.get("allow_disruptive"):
        run.plan["skip"] = SKIP_REASON
        run.save_plan()
        return
    if scenario == "device-lost" and run.backend.parts.kubernetes is not None:
        run.plan["skip"] = LOST_GPU_ON_KUBERNETES
        run.save_plan()
        return
    found = find_injector(run.cluster, run.params, run.backend.parts.placement.gpu_node_hosts)
    if isinstance(found, str):  # known before the act: SKIP at once, no snapshot, no pod
        run.plan["skip"] = PREMISE + found
        run.save_plan()
        return
    run.plan["injector"] = found.describe()
    run.plan["scenario"] = scenario
    run.plan["scheduler_before"] = _facts(run, "scheduler_before_fault.txt")
    victims, neighbours = _load(run, scenario, found)
    t0 = time.time()
    start_recorded(run, victims, "victim_pods")
    start_recorded(run, neighbours, "neighbour_pods")
    run.plan["load_started_at"] = t0
    timeout = float(run.params["pod_timeout_s"])
    records = run.backend.wait_terminal([s.name for s in [*victims, *neighbours]], timeout)
    fault = run.plan["fault"]
    fault["applied"] = True
    fault["victims_ended"] = {r.name: {"phase": r.phase, "exit_code": r.exit_code, "finished": r.finished,
                                       "gpu": r.gpu, "node": r.node} for r in records if r.name in fault["victims"]}
    run.save_plan()
    run.sleep(float(run.params["fail_settle_s"]))
    run.plan["scheduler_after"] = _facts(run, "scheduler_after_fault.txt")
    _scrape_after(run)
    run.save_plan()
    node = run.backend.parts.placement.colocation_target()[0]
    if scenario == "device-lost":  # the lost GPU is gone: the probe goes where a neighbour on another GPU ran
        lost = {r.gpu for r in records if r.name in fault["victims"]}
        run.plan["lost_gpus"] = sorted(g for g in lost if g)
        spared = [r.name for r in records if r.name not in fault["victims"] and r.gpu not in lost]
        if node is None and not spared:
            run.plan["probe_note"] = "no neighbour ran on another GPU: no probe"
            run.save_plan()
            return
        probe = run.pod("probe-other", W2, node=node, same_gpu_as=None if node else spared[0])
    else:
        probe = run.pod("probe-same", W2, node=node, same_gpu_as=None if node else victims[0].name)
    start_recorded(run, [probe], "probe_pods")
    run.backend.wait_terminal([probe.name], timeout)
    run.save_plan()
