"""Helpers of the metrics suite (:mod:`xpushare.cases.metrics`): the W5 probe (start, sizing of MET-008,
its client on a live or stored page), where to scrape (:class:`~xpushare.evidence.metrics_target.ScrapeTarget`),
polling /metrics until a page settles, and the plan/evidence lookups the judge wrappers share.
Split out of :mod:`xpushare.cases.metrics`, which keeps the case rows, acts and judge wrappers.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import Any

from xpushare.backends.k8s_names import dns1123
from xpushare.cases.base import CaseRun
from xpushare.evidence.client_match import ClientMatch, client_match, live_matches, matched_clients
from xpushare.evidence.metrics_target import (
    ScrapeTarget,
    host_target,
    k8s_target,
    metric_prefix,
)
from xpushare.evidence.store import Evidence
from xpushare.inventory.schema import MODE_K8S, is_kubernetes_mode
from xpushare.judge.metrics import (
    ScrapeRecord,
    gpu_rows_for_key,
    parse_series,
    quota_state,
)
from xpushare.model.errors import XpushareError
from xpushare.model.verdict import Status, Verdict
from xpushare.model.workload import WorkloadRecord
from xpushare.parsers.metrics import parse_exposition

W5 = "w5_quota_probe"
PROBE_MARKER = "[XPUSHARE][QUOTA_PROBE]"
#: Bytes W5 keeps per n² (x, y and two alternating z, fp32): ``16 n²`` (workloads/README.md).
W5_BYTES_PER_N2 = 16


# ------------------------------------------------------------------------------------ act helpers


def begin_case(run: CaseRun) -> None:
    """Record the metric prefix, namespace and mode in the plan (saved)."""
    run.plan.update(prefix=metric_prefix(run.cluster), namespace=run.namespace, mode=run.cluster.mode)
    run.save_plan()


def skip_case(run: CaseRun, reason: str) -> None:
    """Record a SKIP reason in the plan (the judgment returns SKIP with it)."""
    run.plan["skip"] = reason
    run.save_plan()


def _timeout(run: CaseRun) -> float:
    return float(run.params["met_scrape_timeout_s"])


def endpoint_target(run: CaseRun) -> ScrapeTarget | None:
    """The scheduler a case without a probe checks; None (and a SKIP reason) in host mode without metrics_url."""
    if run.cluster.is_kubernetes:
        node = run.params.get("met_node")
        target = k8s_target(run.backend, run.cluster, str(node) if node else None, timeout_s=_timeout(run))
    else:
        found = host_target(run.backend, run.cluster, timeout_s=_timeout(run))
        if found is None:
            skip_case(run, f"host mode: cluster {run.cluster.name} names no scheduler.metrics_url in the inventory")
            return None
        target = found
    run.plan["target"] = target.describe()
    run.save_plan()
    return target


def probe_target(run: CaseRun, node: str) -> ScrapeTarget:
    """The scrape target of the scheduler serving ``node``, recorded in the plan: Kubernetes, the scheduler pod
    on that node; host mode, the inventory's ``scheduler.metrics_url`` (the scheduler of the first GPU host, where
    :func:`start_probe` pins the probe). Raises :class:`XpushareError` in host mode without ``metrics_url``
    (the cases check it before their probe starts, :func:`host_scrape_node`)."""
    if run.cluster.is_kubernetes:
        target = k8s_target(run.backend, run.cluster, node, timeout_s=_timeout(run))
    else:
        found = host_target(run.backend, run.cluster, timeout_s=_timeout(run))
        if found is None:
            raise XpushareError(f"host mode: cluster {run.cluster.name} names no scheduler.metrics_url")
        target = found
    run.plan["target"] = target.describe()
    run.save_plan()
    return target


def host_scrape_node(run: CaseRun) -> str | None:
    """Host mode: the GPU host whose scheduler the inventory's ``scheduler.metrics_url`` serves (the first GPU
    host: a probe placed elsewhere would register with a scheduler nobody scrapes), None in Kubernetes (the
    probe's node decides) and None with a SKIP reason in the plan where no ``metrics_url`` is configured."""
    if run.cluster.is_kubernetes:
        return None
    if not run.cluster.scheduler.metrics_url:
        skip_case(run, f"host mode: cluster {run.cluster.name} names no scheduler.metrics_url in the inventory")
        return None
    host = run.backend.parts.scheduler_host
    if host is None:  # pragma: no cover - every host backend has one
        raise XpushareError("host backend without a scheduler host")
    return host.name


def _record(records: list[WorkloadRecord], name: str) -> WorkloadRecord | None:
    return next((r for r in records if r.name in (name, dns1123(name))), None)


def start_probe(run: CaseRun, *, args: tuple[str, ...] = (), **kw: Any) -> tuple[str, str]:
    """Start the W5 probe pod, wait until it runs and prints its first probe line; ``(pod, node)``.

    Raises :class:`XpushareError` (the case is ERROR) when it does not run, ends early, or prints no
    ``[XPUSHARE][QUOTA_PROBE]`` line within ``pod_timeout_s``.
    """
    duration = float(run.params["met_probe_duration_s"])
    spec = run.pod("probe", W5, args=("--duration-s", f"{duration:g}", "--interval-s", "1", "--no-progress", *args),
                   **kw)
    run.plan.update(pods=[spec.name], probe=spec.name)
    run.save_plan()
    timeout = float(run.params["pod_timeout_s"])
    run.backend.start_pods([spec])
    rec = _record(run.backend.wait_running([spec.name], timeout), spec.name)
    if rec is None or rec.phase != "Running" or not rec.node:
        what = "missing" if rec is None else f"{rec.phase} (exit {rec.exit_code}, node {rec.node})"
        raise XpushareError(f"probe pod {spec.name} is {what}, not Running")
    if not run.wait_for_line(rec.name, PROBE_MARKER, timeout):
        now = _record(run.backend.wait_running([spec.name], 0.0), spec.name)
        if now is not None and now.terminal:
            raise XpushareError(f"probe pod {rec.name} ended ({now.phase}, exit {now.exit_code}) before its first "
                                f"{PROBE_MARKER} line")
        raise XpushareError(f"probe pod {rec.name} printed no {PROBE_MARKER} line in {timeout:g} s")
    run.plan.update(probe=rec.name, node=rec.node)
    run.save_plan()
    return rec.name, rec.node


def _page(text: str) -> Evidence:
    """An in-memory evidence holding one /metrics page as ``metrics_mid.txt`` (for settle checks)."""
    return Evidence.from_parts([], {}, {"metrics_mid.txt": text})


def settle_scrape(run: CaseRun, target: ScrapeTarget, name: str, accept: Callable[[Evidence], bool]) -> ScrapeRecord:
    """Capture /metrics into ``name`` every ``met_poll_s`` until ``accept`` holds or ``met_settle_s`` passes.

    The last capture stays as the evidence (judged as it is, settled or not); ``plan["settle"]``
    records the polls, whether it settled and the Unix time of the kept capture.
    """
    deadline = time.monotonic() + float(run.params["met_settle_s"])
    polls = 0
    while True:
        record = target.capture(run.case_dir, "/metrics", name)
        polls += 1
        text = (run.case_dir / name).read_text(encoding="utf-8")
        settled = record.status == 200 and accept(_page(text))
        if settled or time.monotonic() >= deadline:
            break
        run.sleep(float(run.params["met_poll_s"]))
    run.plan["settle"] = {"file": name, "polls": polls, "settled": settled, "at": record.t}
    run.save_plan()
    return record


def live_match(run: CaseRun, name: str) -> ClientMatch:
    """The probe's :class:`ClientMatch` from its current record and output (act side; host mode needs
    the recorded pid and the ``Client ID`` line, both there once the probe printed its first probe line).
    The match goes to ``plan["client"]`` (for the reader; the judgment rebuilds it from the evidence)."""
    match = live_matches(run.backend, [name], namespace=run.namespace)[0]
    run.plan["client"] = match.to_dict()
    run.save_plan()
    return match


def client_seen(run: CaseRun, client: ClientMatch) -> Callable[[Evidence], bool]:
    """A page test: true when the probe's ``client`` shows on ``metrics_mid.txt``."""
    prefix = run.plan.get("prefix")

    def accept(ev: Evidence) -> bool:
        return bool(matched_clients(parse_exposition(ev.text("metrics_mid.txt") or "", prefix), client))
    return accept


def passes(verdict: Verdict) -> bool:
    """True when ``verdict`` is PASS."""
    return verdict.status is Status.PASS


def quota_now(body: str | None, client: ClientMatch, prefix: str | None) -> tuple[float | None, float | None]:
    """``(core percent, memory bytes)`` the page exports for the probe's clients (None: no series)."""
    return quota_state(parse_exposition(body or "", prefix), client)


def met008_size(fill_ratio: float, total_bytes: float) -> int:
    """W5's ``--n`` whose footprint (``16 n²`` bytes) is ``fill_ratio`` of ``total_bytes``. ValueError if ≤ 0."""
    if not (fill_ratio > 0 and total_bytes > 0):
        raise ValueError("fill ratio and total memory must be positive")
    return max(1, int(math.sqrt(fill_ratio * total_bytes / W5_BYTES_PER_N2)))


def gpu_total_bytes(run: CaseRun) -> float:
    """The GPU memory MET-008 fills: the inventory's ``gpu.memory_gib``, else the smallest
    ``gpu_memory_total_bytes`` the default node's scheduler exports."""
    if run.cluster.gpu_memory_gib:
        return float(run.cluster.gpu_memory_gib) * 2**30
    target = endpoint_target(run)
    if target is None:  # pragma: no cover - MET-008 requires Kubernetes
        raise XpushareError("no scheduler to read gpu_memory_total_bytes from")
    try:
        record, _ = target.get("/metrics")
    finally:
        target.close()
    totals = [s.value for s in parse_exposition(record.body or "", run.plan.get("prefix")).values(
        "gpu_memory_total_bytes") if s.value > 0]
    if not totals:
        raise XpushareError("MET-008: set gpu.memory_gib in the inventory or met008_n (no gpu_memory_total_bytes)")
    return min(totals)


# ---------------------------------------------------------------------------------------- judge helpers


def skipped_verdict(plan: Mapping[str, Any]) -> Verdict | None:
    """SKIP with the plan's ``skip`` reason, None when the act recorded none."""
    return Verdict(Status.SKIP, str(plan["skip"])) if plan.get("skip") else None


def stored_client(ev: Evidence, plan: Mapping[str, Any]) -> ClientMatch | None:
    """The probe's match, rebuilt from the evidence for the plan's ``mode`` (None without a probe).

    Kubernetes: the probe pod's name in the plan's ``namespace``; host mode: the probe's ``host_pid``
    from ``pods.json`` and the ``Client ID`` lines of ``pods/<probe>.log``
    (:func:`xpushare.evidence.client_match.client_match`). Plans written before the mode was recorded are k8s.
    """
    probe = plan.get("probe")
    if not probe:
        return None
    mode = str(plan.get("mode") or MODE_K8S)
    return client_match(mode, str(probe), namespace=plan.get("namespace") if is_kubernetes_mode(mode) else None,
                        record=ev.pod(str(probe)), log=ev.logs.get(str(probe)))


def stored_probe_client(ev: Evidence, plan: Mapping[str, Any]) -> ClientMatch:
    """:func:`stored_client` for the cases that always have a probe (``plan["probe"]``; KeyError without one)."""
    found = stored_client(ev, plan)
    if found is None:
        raise KeyError("plan.json names no probe")
    return found


def probe_gpu_index(ev: Evidence, match: ClientMatch, prefix: str | None) -> str | None:
    """The ``gpu_index`` of the probe's GPU: its ``client_info`` GPU key mapped onto the
    ``gpu_utilization_ratio`` rows (first scrape of ``metrics_series.jsonl`` that has both); None if unknown."""
    records, _ = parse_series(ev.text("metrics_series.jsonl") or "")
    for r in records:
        if not (r.responded and r.body):
            continue
        exp = parse_exposition(r.body, prefix)
        for client, _key in matched_clients(exp, match):
            rows = gpu_rows_for_key(exp, "gpu_utilization_ratio", client.label("gpu_uuid"))
            if rows and rows[0].label("gpu_index") is not None:
                return rows[0].label("gpu_index")
    return None


