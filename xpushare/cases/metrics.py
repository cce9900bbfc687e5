"""MET-001..008 (seed 000 §11, §16.5, §17.5; seed 002): the scheduler's metrics endpoint, judged on evidence.

Every capture comes from the scheduler that serves the probe pod's node (one scheduler per GPU node,
docs/sut/log.md §annotation-debug), scraped on that node (:mod:`xpushare.evidence.metrics_target`); cases without a
probe
(MET-001, MET-007, MET-002 in host mode) use the node named by ``met_node``, else the first GPU host
of the inventory that runs a scheduler pod. The acts only act and collect; the judgments are the pure
functions of :mod:`xpushare.judge.metrics`, fed with the plan (``plan.json``), so ``invoke judge``
re-judges a stored run offline.

=======  ===================================================================  =================================
case     act (k8s mode)                                                       evidence
=======  ===================================================================  =================================
MET-001  GET /healthz, GET /metrics                                           metrics_health.txt, metrics.txt
MET-002  W5 probe; poll /metrics until the probe's client shows               metrics_mid.txt
MET-003  W5 probe + node sampler; snapshot once the 3 memory views show;     metrics_mid.txt, sampler/<node>_*,
         then W4 alloc/free beside it, scrape every 1 s until it left          scheduler.log, metrics_series
MET-004  W5 probe annotated 35 %, 4Gi (T4) / 8Gi; snapshot                    metrics_mid.txt
MET-005  W5 probe (30 %, 2Gi); scrape every 1 s; annotate 80 % + 4Gi          metrics_before.txt, metrics_series
MET-006  W5 probe; dmon on its node; scrape every 2 s for 30 s                metrics_series, remote_<node>_dmon
MET-007  no workload; scrape every 2 s for 120 s; GET /healthz after          metrics_series, metrics_health.txt
MET-008  W5 probe filling 85 % of the GPU (oversub on); scrape 2 s for 40 s   metrics_series
=======  ===================================================================  =================================

(``metrics_series`` is ``metrics_series.jsonl``, ``remote_<node>_dmon`` is ``remote_<node>_dmon.txt``.)

Host mode: every case but MET-004 and MET-005 runs against the inventory's ``scheduler.metrics_url`` (the
scheduler of the first GPU host) and SKIPs without it. The probes (W5 as a host process with ``LD_PRELOAD`` of
``sut_lib``; MET-002 runs without one when the backend has no client library, families that need a client then
only need HELP/TYPE) are pinned to that host, so they register with the scheduler that is scraped. MET-003's NVML
side is the host backend's node sampler (every GPU host, the whole case) and its alloc/free loop runs without a
core limit (host mode has none: no lock holders, so running clients and running memory are judged at the log's
zero); MET-006 compares with the backend's ``nvidia-smi dmon``; MET-008's probe gets the oversubscription variable.
MET-004 and MET-005 need Kubernetes (:data:`MET004_NEEDS_KUBERNETES`, :data:`MET005_NEEDS_KUBERNETES`). MET-006
SKIPs where the probe's node has no ``nvidia-smi`` and no ``met006_dmon_command`` is configured (nothing to compare
with). Thresholds: ``judge.thresholds.METRICS``.

The probe's clients on a page are found by :func:`xpushare.evidence.client_match.client_match` for the cluster's
mode: by pod name and namespace in Kubernetes; in host mode, where the scheduler exports every client
with ``pod="none"``/``namespace="none"``, by the probe process's ``host_pid`` (``pods.json``, recorded by
the host backend) and the ``Client ID`` lines of its log. The acts match with the live record and log,
the judgments rebuild the same match from the stored ``pods.json`` and ``pods/<probe>.log``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import Any

from xpushare.backends.base import CAP_CLIENT_LIBRARY, CAP_KUBERNETES
from xpushare.cases.base import CaseDef, CaseRun, register
from xpushare.cases.functional import ample_quota
from xpushare.cases.metrics_scraping import (
    W5_BYTES_PER_N2,
    begin_case,
    client_seen,
    endpoint_target,
    gpu_total_bytes,
    host_scrape_node,
    live_match,
    met008_size,
    passes,
    probe_gpu_index,
    probe_target,
    quota_now,
    settle_scrape,
    skip_case,
    skipped_verdict,
    start_probe,
    stored_client,
    stored_probe_client,
)
from xpushare.evidence.client_match import ClientMatch
from xpushare.evidence.metrics_target import (
    NodeCapture,
    ScrapeTarget,
    has_command,
    node_host,
    sampler_capture,
    scrape_loop,
    spawn_name,
    stamped_log_capture,
)
from xpushare.evidence.store import Evidence
from xpushare.inventory.schema import is_host_mode
from xpushare.judge import thresholds
from xpushare.judge.metrics import (
    ScrapeRecord,
    judge_met001,
    judge_met002,
    judge_met003,
    judge_met004,
    judge_met005,
    judge_met006,
    judge_met007,
    judge_met008,
)
from xpushare.judge.metrics_counters import (
    COUNTER_END_FILE,
    disconnect_check,
    drop_lock_check,
    messages_check,
    with_counter_checks,
)
from xpushare.judge.metrics_gauges import GAUGE_KEYS, SERIES_FILE, gauge_checks
from xpushare.judge.quantity import annotation_bytes, core_limit_value
from xpushare.model.errors import TransportError, XpushareError
from xpushare.model.premises import GPU, NVML, SCHEDULER_METRICS, SUT
from xpushare.model.verdict import Status, Verdict

W4_ALLOC_FREE = "w4_alloc_free"
STAMPED_LOG = "scheduler_stamped.log"
"""Host mode, MET-003: the scheduler's log lines of the case, each behind the time it was read."""
DMON_INTERVAL_S = 1.0
"""``nvidia-smi dmon -d 1`` (the k8s backend's capture): one row per GPU per second."""

#: Parameters every MET case has (k8s: where and how long to look).
COMMON: dict[str, Any] = {
    # Node whose scheduler MET-001/007 (and host-less MET-002) check; None: the first inventory GPU
    # host that runs a scheduler pod.
    "met_node": None,
    # Poll /metrics of the probe's scheduler until it shows the probe as configured (s, s).
    "met_settle_s": 60.0,
    "met_poll_s": 1.0,
    # Per-request timeout of every scrape (s).
    "met_scrape_timeout_s": 10.0,
    # W5 probe runtime (s); the probe is deleted when the case ends, this only bounds it.
    "met_probe_duration_s": 600.0,
}


def _params(no: str, **extra: Any) -> dict[str, Any]:
    """COMMON + this case's thresholds from ``judge.thresholds.METRICS`` (``met<no>_*``) + its act parameters."""
    return {**COMMON, **{k: v for k, v in thresholds.METRICS.items() if k.startswith(f"met{no}_")}, **extra}


# ------------------------------------------------------------------------------------------- acts


def _met001(run: CaseRun) -> None:
    begin_case(run)
    target = endpoint_target(run)
    if target is None:
        return
    try:
        target.capture(run.case_dir, "/healthz", "metrics_health.txt")
        target.capture(run.case_dir, "/metrics", "metrics.txt")
    finally:
        target.close()


def _settle_mid(run: CaseRun, target: ScrapeTarget, pod: str,
                judge: Callable[[Evidence, ClientMatch, str | None], Verdict]) -> None:
    """Settle ``metrics_mid.txt`` on the live probe ``pod`` (:func:`settle_scrape`: poll until
    ``judge(evidence, client, prefix)`` passes, or ``met_settle_s`` runs out); the kept capture's Unix time
    goes to ``plan["mid_at"]``. Raises what the capture raises."""
    prefix, client = run.plan["prefix"], live_match(run, pod)
    record = settle_scrape(run, target, "metrics_mid.txt", lambda ev: passes(judge(ev, client, prefix)))
    run.plan["mid_at"] = record.t
    run.save_plan()


def _met002(run: CaseRun) -> None:
    begin_case(run)
    if not run.cluster.is_kubernetes:
        target = endpoint_target(run)
        if target is None:
            return
        try:
            if not run.backend.parts.client_library:  # no process would register: no probe
                run.plan["probe"] = None
                record = target.capture(run.case_dir, "/metrics", "metrics_mid.txt")
            else:
                pod, _node = start_probe(run, node=host_scrape_node(run))
                client = live_match(run, pod)
                prefix = run.plan["prefix"]
                record = settle_scrape(run, target, "metrics_mid.txt",
                                 lambda ev: passes(judge_met002(ev, run.params, client=client, prefix=prefix)))
            run.plan["mid_at"] = record.t
            run.save_plan()
        finally:
            target.close()
        return
    pod, node = start_probe(run)
    target = probe_target(run, node)
    try:
        _settle_mid(run, target, pod, lambda ev, client, prefix: judge_met002(ev, run.params, client=client,
                                                                               prefix=prefix))
    finally:
        target.close()


def _host_probe_node(run: CaseRun) -> tuple[bool, str | None]:
    """``(go on, node to pin the probe to)``: Kubernetes ``(True, None)``; host mode the first GPU host, whose
    scheduler ``scheduler.metrics_url`` serves, or ``(False, None)`` with a SKIP reason in the plan without one."""
    node = host_scrape_node(run)
    return run.cluster.is_kubernetes or node is not None, node


def _met003(run: CaseRun) -> None:
    begin_case(run)
    go, pin = _host_probe_node(run)
    if not go:
        return
    stamped = _stamp_scheduler_log(run, pin)
    try:
        _met003_probe(run, pin)
    finally:
        if stamped is not None:
            stamped.stop(run.case_dir)
            stamped.host.close()


def _stamp_scheduler_log(run: CaseRun, node: str | None) -> NodeCapture | None:
    """Host mode: the scheduler's log (``scheduler.log_file``) followed from now with the time of each line
    (:func:`stamped_log_capture`, into :data:`STAMPED_LOG`), as ``kubectl logs --timestamps`` gives it in Kubernetes;
    None in Kubernetes, without a log file (the judgment then finds the log's times missing: ERROR), or when it
    cannot start (noted in the plan)."""
    log = run.cluster.scheduler.log_file
    if run.cluster.is_kubernetes or node is None or not log:
        return None
    capture = stamped_log_capture(node_host(run.backend, run.cluster, node), spawn_name(run.backend, run.case_id,
                                  "log"), str(run.params.get("node_sampler_python") or run.cluster.python), log,
                                  STAMPED_LOG)
    try:
        capture.start()
    except TransportError as exc:
        capture.host.close()
        run.plan["stamped_log"] = {"error": str(exc)}
        run.save_plan()
        return None
    run.plan["stamped_log"] = {"file": STAMPED_LOG, "of": log, "node": node, "started_at": capture.started_at}
    run.save_plan()
    return capture


def _met003_probe(run: CaseRun, pin: str | None) -> None:
    pod, node = start_probe(run, node=pin)
    target = probe_target(run, node)
    host = node_host(run.backend, run.cluster, node)
    sampler: NodeCapture | None = None
    try:
        if not run.cluster.is_kubernetes:  # the host backend samples every GPU host for the whole case
            run.plan["sampler"] = {"node": node, "source": "backend",
                                   "how": "the host backend's node sampler on every GPU host for the whole case"}
        else:
            try:
                sampler = sampler_capture(host, spawn_name(run.backend, run.case_id, "sampler"),
                                          str(run.params.get("node_sampler_python") or run.cluster.python), node,
                                          env=dict(run.params.get("node_sampler_env") or {}))
                sampler.start()
                run.plan["sampler"] = {"node": node, "started_at": sampler.started_at, "argv": list(sampler.argv)}
            except TransportError as exc:  # evidence missing: the judgment says so (ERROR unless NVML not required)
                sampler = None
                run.plan["sampler"] = {"node": node, "error": str(exc)}
        th = {**run.params, "met003_require_nvml": False}  # settle on the page alone; NVML is judged after
        _settle_mid(run, target, pod, lambda ev, client, prefix: judge_met003(ev, th, client=client, prefix=prefix))
        run.sleep(float(run.params["met003_sampler_tail_s"]))
        if int(run.params["met003_alloc_rounds"]) > 0:
            _gauge_series(run, target, node)
    finally:
        if sampler is not None:
            sampler.stop(run.case_dir)
        target.close()
        host.close()


def _gauge_series(run: CaseRun, target: ScrapeTarget, node: str) -> None:
    """MET-003's alloc/free phase: W4 on the probe's node (``met003_alloc_rounds`` rounds of ``met003_alloc_mib``
    MiB, each block and each freed state held ``met003_alloc_hold_s``; annotated ``met003_alloc_core_limit`` so that
    it requests the lock and joins the running list, docs/sut/client.md §lock-control), /metrics scraped every
    ``met003_series_interval_s`` into ``metrics_series.jsonl`` from before its start until ``met003_series_tail_s``
    after it ended (its client leaves); ``plan["gauges"]``: the loop's pod, node and the window (Unix s)."""
    p = run.params
    rounds, hold = int(p["met003_alloc_rounds"]), float(p["met003_alloc_hold_s"])
    # host mode has no core limit to give (the scheduler takes quotas from annotations only): the loop runs
    # without the lock, so running clients and running memory are judged at the log's 0 lock holders
    core = p["met003_alloc_core_limit"] if run.cluster.is_kubernetes else None
    spec = run.pod("alloc", W4_ALLOC_FREE, node=node, core_limit=None if core is None else int(core),
                   args=("--rounds", str(rounds), "--mib", str(int(p["met003_alloc_mib"])), "--hold-s", f"{hold:g}",
                         "--report-every", "0", "--no-progress"))
    run.plan["pods"] = [*run.plan.get("pods", []), spec.name]
    run.plan["gauges"] = {"mover": spec.name, "node": node, "core_limit": core, "start": time.time(), "end": None}
    run.save_plan()
    run.backend.start_pods([spec])
    tail = float(p["met003_series_tail_s"])
    ended: list[float] = []

    def on_record(_k: int, record: ScrapeRecord) -> bool:
        if not ended:
            now = run.backend.wait_running([spec.name], 0.0)
            if now and now[0].terminal:
                ended.append(record.t)
        return not ended or record.t - ended[0] < tail

    try:
        scrape_loop(target, run.case_dir / "metrics_series.jsonl", interval_s=float(p["met003_series_interval_s"]),
                    duration_s=rounds * 2 * hold + float(p["pod_timeout_s"]) + tail, on_record=on_record,
                    sleep=run.sleep)
    finally:
        run.plan["gauges"]["end"] = time.time()
        run.save_plan()


def _met004(run: CaseRun) -> None:
    begin_case(run)
    core = run.params["met004_core_limit"]
    memory = run.params["met004_memory_limit"] or ample_quota(run)
    env = run.params["met004_memory_limit_env"]
    run.plan.update(core_limit=core, memory_limit=memory, memory_limit_env=env)
    pod, node = start_probe(run, core_limit=None if core is None else int(core), memory_limit=memory,
                             memory_limit_env=env)
    target = probe_target(run, node)
    try:
        _settle_mid(run, target, pod, lambda ev, client, prefix: judge_met004(
            ev, run.params, client=client, core_limit=core, memory_limit=memory, memory_limit_env=env,
            prefix=prefix))
        run.sleep(float(run.params["met004_counter_window_s"]))  # the throttled probe keeps sending DROP_LOCKs
        target.capture(run.case_dir, "/metrics", COUNTER_END_FILE)
    finally:
        target.close()


def _met005(run: CaseRun) -> None:
    begin_case(run)
    p = run.params
    core_from, mem_from = int(p["met005_core_from"]), str(p["met005_memory_from"])
    core_to, mem_to = str(p["met005_core_to"]), str(p["met005_memory_to"])
    run.plan.update(core_from=core_from, memory_from=mem_from, core_to=core_to, memory_to=mem_to)
    pod, node = start_probe(run, core_limit=core_from, memory_limit=mem_from)
    target = probe_target(run, node)
    prefix, client = run.plan["prefix"], live_match(run, pod)
    interval = float(p["met005_interval_s"])
    before = max(1, math.ceil(float(p["met005_before_s"]) / interval))
    timeout = float(p["met005_timeout_s"])
    want = (float(core_limit_value(core_to)), float(annotation_bytes(mem_to)))
    changed: list[float] = []

    def on_record(k: int, record: ScrapeRecord) -> bool:
        if not changed:
            if k + 1 >= before:
                changed.append(run.annotator.annotate(pod, {"core": core_to, "memory": mem_to}))
                run.plan["changed_at"] = changed[0]
                run.save_plan()
            return True
        if record.t >= changed[0] and record.responded and quota_now(record.body, client, prefix) == want:
            return False
        return record.t - changed[0] <= timeout

    try:
        settle_scrape(run, target, "metrics_before.txt", lambda ev: passes(judge_met004(
            ev, p, client=client, core_limit=core_from, memory_limit=mem_from, prefix=prefix)))
        scrape_loop(target, run.case_dir / "metrics_series.jsonl", interval_s=interval,
                    duration_s=(before + 1) * interval + timeout, on_record=on_record, sleep=run.sleep)
    finally:
        target.close()
    if not changed:
        raise XpushareError("the series ended before the annotation change was made")


def _met006(run: CaseRun) -> None:
    begin_case(run)
    go, pin = _host_probe_node(run)
    if not go:
        return
    pod, node = start_probe(run, node=pin)
    host = node_host(run.backend, run.cluster, node)
    dmon: NodeCapture | None = None
    target: ScrapeTarget | None = None
    try:
        command = run.params["met006_dmon_command"]
        if has_command(host, "nvidia-smi"):
            run.plan["dmon"] = {"source": "backend", "node": node,
                                "how": f"nvidia-smi dmon -s u -d 1 on the node for the whole case ({run.backend.mode} "
                                       "backend)"}
        elif command:
            argv = [str(a).replace("{node}", node) for a in command]
            dmon = NodeCapture(host, spawn_name(run.backend, run.case_id, "dmon"), argv,
                               log_to=f"remote_{node}_dmon.txt")
            dmon.start()
            run.plan["dmon"] = {"source": "met006_dmon_command", "node": node, "argv": argv,
                                "started_at": dmon.started_at}
        else:
            skip_case(run, f"node {node} has no nvidia-smi and no met006_dmon_command is set: no dmon to compare with")
            return
        run.save_plan()
        target = probe_target(run, node)
        settle_scrape(run, target, "metrics_mid.txt", client_seen(run, live_match(run, pod)))
        scrape_loop(target, run.case_dir / "metrics_series.jsonl", interval_s=float(run.params["met006_interval_s"]),
                    duration_s=float(run.params["met006_duration_s"]), sleep=run.sleep)
    finally:
        if dmon is not None:
            dmon.stop(run.case_dir)
        if target is not None:
            target.close()
        host.close()


def _met007(run: CaseRun) -> None:
    begin_case(run)
    target = endpoint_target(run)
    if target is None:
        return
    try:
        scrape_loop(target, run.case_dir / "metrics_series.jsonl", interval_s=float(run.params["met007_interval_s"]),
                    duration_s=float(run.params["met007_duration_s"]), sleep=run.sleep)
        target.capture(run.case_dir, "/healthz", "metrics_health.txt")
    finally:
        target.close()


def _met008(run: CaseRun) -> None:
    begin_case(run)
    go, pin = _host_probe_node(run)
    if not go:
        return
    fill = float(run.params["met008_fill_ratio"])
    n = run.params["met008_n"]
    total = None
    if not n:
        total = gpu_total_bytes(run)
        n = met008_size(fill, total)
    run.plan["met008"] = {"n": int(n), "fill_ratio": fill, "gpu_total_bytes": total,
                          "w5_footprint_bytes": W5_BYTES_PER_N2 * int(n) ** 2}
    pod, node = start_probe(run, oversub=True, node=pin, args=("--n", str(int(n))))
    target = probe_target(run, node)
    try:
        settle_scrape(run, target, "metrics_mid.txt", client_seen(run, live_match(run, pod)))
        scrape_loop(target, run.case_dir / "metrics_series.jsonl", interval_s=float(run.params["met008_interval_s"]),
                    duration_s=float(run.params["met008_duration_s"]), sleep=run.sleep)
    finally:
        target.close()


# ---------------------------------------------------------------------------------------- judges


def _judge001(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    return skipped_verdict(plan) or judge_met001(ev, th, prefix=plan.get("prefix"))


def _judge002(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    return skipped_verdict(plan) or judge_met002(ev, th, client=stored_client(ev, plan), prefix=plan.get("prefix"))


def _judge003(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    skipped = skipped_verdict(plan)
    if skipped is not None:
        return skipped
    verdict = judge_met003(ev, th, client=stored_probe_client(ev, plan), node=plan.get("node"),
                           mid_at=plan.get("mid_at"), prefix=plan.get("prefix"))
    gauges = plan.get("gauges")
    if not gauges:  # a run stored before the series existed, or met003_alloc_rounds 0
        return verdict
    mover = stored_client(ev, {**plan, "probe": gauges["mover"]})
    assert mover is not None
    node = gauges.get("node")
    log = STAMPED_LOG if plan.get("stamped_log") else "scheduler.log"  # host mode: the log with times
    checks = gauge_checks(ev, th, mover=mover, others=[str(plan["probe"])], node=node,
                          start=float(gauges["start"]), end=float(gauges.get("end") or math.inf),
                          prefix=plan.get("prefix"), log_file=log,
                          host_mode=is_host_mode(str(plan.get("mode") or "")))
    if verdict.status is Status.PASS:
        verdict.summary += ("; the gauges followed the alloc/free loop: client count and running clients against "
                            "scheduler.log, managed and running memory against the clients' own reports, NVML "
                            "process and device memory against the node sampler")
    verdict = with_counter_checks(verdict, checks)
    verdict.thresholds.update({k: th[k] for k in GAUGE_KEYS if k in th})
    verdict.evidence = sorted(set(verdict.evidence) | {SERIES_FILE, f"pods/{gauges['mover']}.log", log,
                                                       f"sampler/{node}_procs.csv", f"sampler/{node}_gpu.csv"})
    return verdict


def _judge004(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    skipped = skipped_verdict(plan)
    if skipped is not None:
        return skipped
    verdict = judge_met004(ev, th, client=stored_probe_client(ev, plan), core_limit=plan.get("core_limit"),
                           memory_limit=plan.get("memory_limit"), memory_limit_env=plan.get("memory_limit_env"),
                           prefix=plan.get("prefix"))
    prefix = plan.get("prefix")
    verdict = with_counter_checks(verdict, [drop_lock_check(ev, th, prefix), messages_check(ev, th, prefix),
                                            disconnect_check(ev, th, prefix)])
    verdict.evidence = sorted(set(verdict.evidence) | {"metrics_mid.txt", COUNTER_END_FILE, "scheduler.log"})
    return verdict


def _judge005(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    skipped = skipped_verdict(plan)
    if skipped is not None:
        return skipped
    if plan.get("changed_at") is None:
        return Verdict(Status.ERROR, "no annotation change was made (plan.json has no changed_at)")
    return judge_met005(ev, th, client=stored_probe_client(ev, plan), changed_at=float(plan["changed_at"]),
                        core_limit=plan.get("core_to"), memory_limit=plan.get("memory_to"), prefix=plan.get("prefix"))


def _judge006(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    skipped = skipped_verdict(plan)
    if skipped is not None:
        return skipped
    gpu = probe_gpu_index(ev, stored_probe_client(ev, plan), plan.get("prefix"))
    return judge_met006(ev, th, node=plan.get("node"), gpu_index=gpu, dmon_interval_s=DMON_INTERVAL_S,
                        prefix=plan.get("prefix"))


def _judge007(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    return skipped_verdict(plan) or judge_met007(ev, th, prefix=plan.get("prefix"))


def _judge008(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    return skipped_verdict(plan) or judge_met008(ev, th, prefix=plan.get("prefix"))


# -------------------------------------------------------------------------------------- the cases

_METRICS = frozenset({SCHEDULER_METRICS})
_K8S = frozenset({CAP_KUBERNETES, SUT, GPU}) | _METRICS
#: MET-003, 006, 008 in both modes: a probe that registers with the scheduler (host mode: the client library, sut_lib).
_LIB = frozenset({CAP_CLIENT_LIBRARY, SUT, GPU}) | _METRICS
SUITE = "metrics"
#: Why MET-004 and MET-005 need Kubernetes (docs/sut/client.md §environment, docs/sut/metrics.md §catalogue).
MET004_NEEDS_KUBERNETES = (
    "the scheduler takes quotas only from pod annotations (the Kubernetes API); a host-mode process's only quota, "
    "the client library's GPU_MEMORY_LIMIT variable, is not visible to the scheduler or its metrics, and the "
    "library has no core-limit variable: no configured quota for the metrics to equal")
MET005_NEEDS_KUBERNETES = ("it changes the probe pod's quota annotations at runtime, which the scheduler watches "
                           "through the Kubernetes API; a host-mode process has no annotations to change")

register(CaseDef(
    "MET-001", SUITE, "/healthz and /metrics reachable", "-",
    "GET /healthz and /metrics of the scheduler (k8s: on met_node, curl from the node; host: scheduler.metrics_url)",
    "metrics_health.txt (HTTP_CODE, OK), metrics.txt (parses, SUT-prefixed samples)",
    requires=_METRICS, params=_params("001"), act=_met001, judge=_judge001,
))
register(CaseDef(
    "MET-002", SUITE, "Required metrics present", "W5",
    "W5 probe; poll its node's /metrics until the probe's client shows (host mode: probe only with sut_lib, "
    "matched by host_pid)",
    "metrics_mid.txt against xpushare/data/required_metrics.yaml (missing_metrics, missing_metric_count)",
    requires=_METRICS | {SUT, GPU}, params=_params("002"), act=_met002, judge=_judge002,
))
register(CaseDef(
    "MET-003", SUITE, "Memory metrics consistent", "W5",
    "W5 probe and the node sampler on its node; /metrics snapshot once the three memory views show; then W4 "
    "(alloc/free loop, each state held met003_alloc_hold_s) on the same node, /metrics every second until it left",
    "metrics_mid.txt (managed / NVML / GPU used > 0), sampler/<node>_procs.csv, _gpu.csv (NVML), "
    "scheduler.log (MEM_UPDATE lines, debug mode); metrics_series.jsonl while W4 allocates and frees beside the "
    "probe: client count, running clients, managed allocation, running memory, NVML process and device memory "
    "against scheduler.log, the loop's own 'Reported memory usage' lines and the node sampler",
    requires=_LIB | {NVML},
    params=_params("003", met003_sampler_tail_s=3.0, node_sampler_python=None, node_sampler_env={},
                                  met003_alloc_rounds=3, met003_alloc_mib=256, met003_alloc_hold_s=4.0,
                                  met003_alloc_core_limit=50,
                                  met003_series_interval_s=1.0, met003_series_tail_s=4.0, met003_series_lag_s=1.0,
                                  met003_nvml_lag_s=2.0,
                                  met003_series_min_scrapes=5),
    act=_met003, judge=_judge003,
))
register(CaseDef(
    "MET-004", SUITE, "Quota metrics equal the configuration", "W5",
    "W5 probe with gpu-core-limit 35 and gpu-memory-limit 4Gi (T4) / 8Gi; /metrics snapshot, and another "
    "met004_counter_window_s later (drop_lock_total against the log's DROP_LOCK lines); Kubernetes only: "
    + MET004_NEEDS_KUBERNETES,
    "metrics_mid.txt: client_core_quota_config_percent, client_memory_quota_bytes vs the annotations; "
    "metrics_end.txt - metrics_mid.txt: scheduler_drop_lock_total, messages_total{REQ_LOCK, LOCK_RELEASED} and "
    "client_disconnect_total vs scheduler.log's DROP_LOCK, Received and Removing client lines",
    requires=_K8S, premise_notes={CAP_KUBERNETES: MET004_NEEDS_KUBERNETES},
    params=_params("004", met004_core_limit=35, met004_memory_limit=None, met004_memory_limit_env=None,
                   met004_counter_window_s=5.0, met_counter_slack=2),
    act=_met004, judge=_judge004,
))
register(CaseDef(
    "MET-005", SUITE, "Dynamic change latency", "W5",
    "W5 probe at 30 % / 2Gi; scrape every 1 s; annotate 80 % + 4Gi; stop when the metrics show it; Kubernetes "
    "only: " + MET005_NEEDS_KUBERNETES,
    "metrics_before.txt, metrics_series.jsonl, annotations.jsonl (dynamic_quota_metric_latency_sec)",
    requires=_K8S, premise_notes={CAP_KUBERNETES: MET005_NEEDS_KUBERNETES},
    params=_params("005", met005_core_from=30, met005_memory_from="2Gi", met005_core_to=80,
                   met005_memory_to="4Gi", met005_interval_s=1.0, met005_before_s=3.0, met005_timeout_s=60.0),
    act=_met005, judge=_judge005,
))
register(CaseDef(
    "MET-006", SUITE, "GPU utilization follows dmon", "W5",
    "W5 probe; scrape its node's /metrics every 2 s for 30 s while nvidia-smi dmon runs on the node",
    "metrics_series.jsonl (gpu_utilization_ratio), remote_<node>_dmon.txt (sm column from the header)",
    requires=_LIB | {NVML},
    params=_params("006", met006_duration_s=30.0, met006_interval_s=2.0, met006_dmon_command=None),
    act=_met006, judge=_judge006,
))
register(CaseDef(
    "MET-007", SUITE, "Scrape at 2 s", "-",
    "no workload; scrape /metrics every 2 s for met007_duration_s (120 s), then GET /healthz",
    "metrics_series.jsonl (success ratio, scrape latency p50/p99), metrics_health.txt",
    requires=_METRICS, params=_params("007"), act=_met007, judge=_judge007,
))
register(CaseDef(
    "MET-008", SUITE, "High-memory alert", "W5",
    "W5 probe sized to 85 % of the GPU memory (oversub on); scrape every 2 s for 40 s",
    "metrics_series.jsonl: gpu_memory_used_bytes / gpu_memory_total_bytes > 0.80 (peak_gpu_memory_used_ratio)",
    requires=_LIB, params=_params("008", met008_fill_ratio=0.85, met008_n=None, met008_duration_s=40.0,
                                  met008_interval_s=2.0),
    act=_met008, judge=_judge008,
))
