"""MET-003..005: a probe client's own values in the metrics: memory against NVML (MET-003), the
configured quotas (MET-004) and a dynamic quota change (MET-005). Evidence and thresholds as in
:mod:`xpushare.judge.metrics` (the suite's public face, which re-exports these judgments).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from xpushare.evidence.client_match import ClientMatch, client_values
from xpushare.evidence.scrape_capture import read_capture
from xpushare.evidence.store import Evidence
from xpushare.judge.metrics_evidence import (
    find_evidence,
    metrics_source,
)
from xpushare.judge.metrics_exposition_checks import (
    client_samples,
    client_seen_check,
    gpu_rows_for_key,
    matched_note,
    metrics_verdict,
    missing_check,
    parse_check,
    per_client,
    series_or_missing,
    th_value,
)
from xpushare.judge.quantity import annotation_bytes, core_limit_value, env_bytes
from xpushare.model.verdict import Check, Status, Verdict
from xpushare.parsers.metrics import Exposition, parse_exposition
from xpushare.parsers.sampler_csv import gpu_rows, proc_rows
from xpushare.parsers.scheduler_log import logged_allocations


@dataclass(frozen=True)
class _NvmlRow:
    t: float
    key: str  # pid (procs.csv) or uuid (gpu.csv)
    gpu_index: str
    used: float | None


def _read_sampler(text: str, kind: str) -> list[_NvmlRow]:
    """Rows of the node sampler's ``procs.csv`` (``kind="procs"``) or ``gpu.csv`` (``kind="gpu"``), parsed by
    :mod:`xpushare.parsers.sampler_csv` (the one reader of the sampler's files)."""
    if kind == "procs":
        return [_NvmlRow(r.t, str(r.pid), str(r.gpu_index), r.used_bytes) for r in proc_rows(text)]
    return [_NvmlRow(r.t, r.uuid, str(r.gpu_index), r.used_bytes) for r in gpu_rows(text)]


def _in_range(value: float, seen: Sequence[float], tol: float) -> bool:
    return min(seen) * (1 - tol) <= value <= max(seen) * (1 + tol)


def judge_met003(ev: Evidence, th: Mapping[str, Any], *, client: ClientMatch, node: str | None = None,
                 mid_at: float | None = None, prefix: str | None = None) -> Verdict:
    """MET-003: the probe's three memory views are > 0 and consistent with each other and with NVML.

    Views in ``metrics_mid.txt`` (else ``metrics.txt``), for the probe's clients (``client``, matched
    by pod in Kubernetes, by host_pid / client_id in host mode):
    ``client_nvml_used_bytes`` (NVML per process), ``client_managed_allocated_bytes`` (the library's
    allocations; the seed's ``memory_need_estimated`` is not exported, docs/sut/metrics.md §catalogue) and
    ``gpu_memory_used_bytes`` of the pod's GPU. Semantics: a process's NVML memory is part of its
    device's used memory (``nvml <= gpu_used``). NVML cross-check with the node sampler
    (``sampler/<node>_procs.csv`` by the pod's ``host_pid``, ``sampler/<node>_gpu.csv`` by UUID):
    each metric lies within the range the sampler saw ± ``met003_nvml_tolerance_ratio``, over the
    samples within ``met003_window_s`` of ``mid_at`` (Unix s, when ``metrics_mid`` was taken; all
    samples when None). Without sampler evidence the cross-check is ERROR, unless
    ``met003_require_nvml`` is false (then it is left out and the summary says so). Scheduler-log
    cross-check (seed 000 MET-003 compares the scheduler log too): where ``scheduler.log`` holds the
    debug-mode ``Received MEM_UPDATE from <id>: <n> MB`` lines of a probe client, its managed allocation
    in whole MiB must equal the last one logged by ``mid_at``
    (:func:`~xpushare.parsers.scheduler_log.logged_allocations`); without such lines it is left out and
    the summary says so.
    """
    keys = ["met003_nvml_tolerance_ratio", "met003_window_s", "met003_require_nvml"]
    name, text = metrics_source(ev, None, ["metrics_mid.txt", "metrics.txt"])
    if text is None or name is None:
        return metrics_verdict([missing_check("memory_views", "metrics_mid.txt")], th, keys, {}, [], "")
    exp = parse_exposition(text, prefix)
    evidence = [name]
    checks = [parse_check(exp, name), client_seen_check(exp, client)]
    clients = client_samples(exp, client)
    metrics: dict[str, Any] = {}
    if not clients:
        return metrics_verdict(checks, th, keys, metrics, evidence, "")
    managed = per_client(exp, "client_managed_allocated_bytes", clients)
    nvml = per_client(exp, "client_nvml_used_bytes", clients)
    gpu_used: dict[str, float | None] = {}
    for c in clients:
        rows = gpu_rows_for_key(exp, "gpu_memory_used_bytes", c.label("gpu_uuid"))
        gpu_used[c.label("client_id") or "?"] = math.fsum(r.value for r in rows) if rows else None
    metrics.update({"client_managed_allocated_bytes": managed, "client_nvml_used_bytes": nvml,
                    "gpu_memory_used_bytes": gpu_used})
    for label, view in (("managed_allocated", managed), ("nvml_used", nvml), ("gpu_used", gpu_used)):
        bad = [cid for cid, v in view.items() if v is None or not v > 0]
        checks.append(Check(f"{label}_positive", f"{label}(probe clients) > 0", {"values": view}, not bad,
                            f"not > 0 (or absent) for client(s) {', '.join(bad)}" if bad else ""))
    pairs = {cid: (nvml[cid], gpu_used[cid]) for cid in nvml}
    incons = [cid for cid, (n, g) in pairs.items() if n is not None and g is not None and n > g]
    checks.append(Check("nvml_within_gpu_used", "client_nvml_used_bytes <= gpu_memory_used_bytes(its GPU)",
                        {"pairs": pairs}, not incons,
                        f"process memory exceeds the device's used memory for {', '.join(incons)}" if incons else ""))
    log_note = _log_check(ev, checks, managed, mid_at, evidence)

    tol = float(th_value(th, "met003_nvml_tolerance_ratio"))
    window = float(th_value(th, "met003_window_s"))
    procs_files = [f"sampler/{node}_procs.csv"] if node else find_evidence(ev, "sampler/", "_procs.csv")
    gpu_files = [f"sampler/{node}_gpu.csv"] if node else find_evidence(ev, "sampler/", "_gpu.csv")
    procs = [r for f in procs_files if (t := ev.text(f)) is not None for r in _read_sampler(t, "procs")]
    gpus = [r for f in gpu_files if (t := ev.text(f)) is not None for r in _read_sampler(t, "gpu")]
    if mid_at is not None:
        procs = [r for r in procs if abs(r.t - mid_at) <= window]
        gpus = [r for r in gpus if abs(r.t - mid_at) <= window]
    if not procs and not gpus:
        if bool(th_value(th, "met003_require_nvml")):
            checks.append(Check("nvml_cross_check", "metrics within the node sampler's NVML values",
                                {"files": procs_files + gpu_files}, None,
                                "no NVML samples from the node sampler (sampler/<node>_procs.csv, _gpu.csv)"))
        verdict = metrics_verdict(checks, th, keys, metrics, evidence,
                           f"memory views > 0 and consistent{matched_note(exp, client)}")
        if verdict.status is Status.PASS:
            verdict.summary += " (NVML cross-check not possible: no node sampler evidence)" + log_note
        return verdict
    evidence += [f for f in procs_files + gpu_files if ev.text(f) is not None]
    per_pid: dict[str, Any] = {}
    bad_pid: list[str] = []
    for c in clients:
        cid, pid = c.label("client_id") or "?", c.label("host_pid") or ""
        seen = [r.used for r in procs if r.key == pid and r.used is not None]
        value = nvml.get(cid)
        ok = bool(seen) and value is not None and _in_range(value, seen, tol)
        per_pid[pid] = {"metric": value, "nvml_min": min(seen, default=None), "nvml_max": max(seen, default=None)}
        if not ok:
            bad_pid.append(pid)
    checks.append(Check("nvml_process_memory_matches",
                        f"client_nvml_used_bytes within [min, max] of NVML per-process memory ± {tol:.0%}",
                        {"by_host_pid": per_pid}, not bad_pid,
                        f"no matching NVML memory for host_pid {', '.join(bad_pid)}" if bad_pid else ""))
    per_gpu: dict[str, Any] = {}
    bad_gpu: list[str] = []
    for c in clients:
        rows = gpu_rows_for_key(exp, "gpu_memory_used_bytes", c.label("gpu_uuid"))
        for r in rows:
            uuid = r.label("gpu_uuid") or ""
            seen = [g.used for g in gpus if g.key == uuid and g.used is not None]
            ok = bool(seen) and _in_range(r.value, seen, tol)
            per_gpu[uuid] = {"metric": r.value, "nvml_min": min(seen) if seen else None,
                             "nvml_max": max(seen) if seen else None}
            if not ok:
                bad_gpu.append(uuid)
    checks.append(Check("nvml_gpu_memory_matches",
                        f"gpu_memory_used_bytes within [min, max] of NVML device memory ± {tol:.0%}",
                        {"by_gpu": per_gpu}, None if not per_gpu else not bad_gpu,
                        "no device row to compare" if not per_gpu
                        else (f"differs from NVML on {', '.join(sorted(set(bad_gpu)))}" if bad_gpu else "")))
    metrics["nvml_by_host_pid"] = per_pid
    return metrics_verdict(checks, th, keys, metrics, evidence,
                    f"memory views > 0 and consistent with NVML{matched_note(exp, client)}{log_note}")


def _log_check(ev: Evidence, checks: list[Check], managed: Mapping[str, float | None], mid_at: float | None,
               evidence: list[str]) -> str:
    """``managed_matches_scheduler_log``: each probe client's ``client_managed_allocated_bytes``, in whole MiB,
    equals the last MEM_UPDATE the scheduler logged for it by ``mid_at`` (``scheduler.log``).

    Appended to ``checks`` only when the log holds a MEM_UPDATE line of a probe client (debug mode); else
    nothing is judged and the returned note (for a PASS summary) says so.
    """
    text = ev.text("scheduler.log")
    logged = logged_allocations(text, mid_at) if text is not None else {}
    seen = {cid: logged[cid.lower()] for cid in managed if cid.lower() in logged}
    if not seen:
        return (" (no scheduler log" if text is None else " (no MEM_UPDATE line of the probe in the scheduler log,"
                " debug mode off?") + ": managed allocation not compared with it)"
    evidence.append("scheduler.log")
    pairs = {cid: {"metric_mib": None if (v := managed[cid]) is None else math.floor(v / 2**20), "logged_mib": mb}
             for cid, mb in seen.items()}
    bad = [cid for cid, p in pairs.items() if p["metric_mib"] != p["logged_mib"]]
    checks.append(Check("managed_matches_scheduler_log",
                        "floor(client_managed_allocated_bytes / MiB) == last logged MEM_UPDATE (MB) of the client",
                        {"by_client": pairs}, not bad,
                        "; ".join(f"{cid}: metric {pairs[cid]['metric_mib']} MiB, log {pairs[cid]['logged_mib']} MB"
                                  for cid in bad)))
    return ""


def judge_met004(ev: Evidence, th: Mapping[str, Any], *, client: ClientMatch,
                 core_limit: str | int | None = None, memory_limit: str | None = None,
                 memory_limit_env: str | None = None, prefix: str | None = None) -> Verdict:
    """MET-004: the exported quotas equal the configured ones exactly.

    Configured (the case's plan): ``core_limit`` (annotation value), ``memory_limit`` (annotation,
    e.g. ``"4Gi"``), ``memory_limit_env`` (``<PREFIX>GPU_MEMORY_LIMIT``). Expected exports, per
    client of the probe (``client``: its match, by pod in Kubernetes) in ``metrics_mid.txt``:
    ``client_core_quota_config_percent`` = :func:`core_limit_value` (100 without an annotation),
    ``client_memory_quota_bytes`` = :func:`annotation_bytes` of the annotation; with only an env
    limit, 0 (the exporter does not show env limits, docs/sut/metrics.md §catalogue) unless
    ``met004_env_in_metrics`` (then the library's parse, :func:`env_bytes`).
    """
    keys = ["met004_env_in_metrics"]
    name, text = metrics_source(ev, None, ["metrics_mid.txt", "metrics.txt"])
    if text is None or name is None:
        return metrics_verdict([missing_check("quota_metrics", "metrics_mid.txt")], th, keys, {}, [], "")
    exp = parse_exposition(text, prefix)
    checks = [parse_check(exp, name), client_seen_check(exp, client)]
    clients = client_samples(exp, client)
    if not clients:
        return metrics_verdict(checks, th, keys, {}, [name], "")
    want_core = core_limit_value(core_limit)
    if memory_limit is not None:
        want_mem: int | None = annotation_bytes(memory_limit)
        mem_src = f"annotation {memory_limit!r}"
    elif memory_limit_env is not None and bool(th_value(th, "met004_env_in_metrics")):
        want_mem = env_bytes(memory_limit_env)
        mem_src = f"env {memory_limit_env!r}"
    else:
        want_mem = 0
        mem_src = "no annotation (env limits are not exported)" if memory_limit_env else "no limit"
    core = per_client(exp, "client_core_quota_config_percent", clients)
    mem = per_client(exp, "client_memory_quota_bytes", clients)
    bad_core = [cid for cid, v in core.items() if v != want_core]
    checks.append(Check("core_quota_matches", f"client_core_quota_config_percent == {want_core}",
                        {"configured": core_limit, "expected": want_core, "exported": core}, not bad_core,
                        f"exported {[core[c] for c in bad_core]} for configured {core_limit!r}" if bad_core else ""))
    if want_mem is None:
        checks.append(Check("memory_quota_matches", "client_memory_quota_bytes == configured", {"configured": mem_src},
                            None, f"cannot parse the configured memory limit ({mem_src})"))
    else:
        bad_mem = [cid for cid, v in mem.items() if v != want_mem]
        checks.append(Check("memory_quota_matches", f"client_memory_quota_bytes == {want_mem} ({mem_src})",
                            {"expected": want_mem, "exported": mem}, not bad_mem,
                            f"exported {[mem[c] for c in bad_mem]}, configured {want_mem}" if bad_mem else ""))
    first = clients[0].label("client_id") or "?"
    metrics = {"metric_core_quota_percent": core.get(first), "metric_memory_quota_bytes": mem.get(first),
               "expected_core_quota_percent": want_core, "expected_memory_quota_bytes": want_mem}
    return metrics_verdict(checks, th, keys, metrics, [name], f"exported quotas equal the configuration "
                    f"(core {want_core}%, memory {want_mem} bytes){matched_note(exp, client)}")


def quota_state(exp: Exposition, client: ClientMatch) -> tuple[float | None, float | None]:
    """``(core percent, memory bytes)`` the page exports for the workload's clients (the last series of
    ``client_core_quota_config_percent`` / ``client_memory_quota_bytes``; None: no series)."""
    core = [s.value for s in client_values(exp, "client_core_quota_config_percent", client)]
    mem = [s.value for s in client_values(exp, "client_memory_quota_bytes", client)]
    return (core[-1] if core else None), (mem[-1] if mem else None)


def judge_met005(ev: Evidence, th: Mapping[str, Any], *, client: ClientMatch, changed_at: float,
                 core_limit: str | int | None = None, memory_limit: str | None = None,
                 prefix: str | None = None) -> Verdict:
    """MET-005: after an annotation change the probe's quota series show the new values within 15 s.

    ``client``: the probe's match (its series are read by the ``client_id`` of its matched
    ``client_info``, :func:`quota_state`); ``changed_at``: Unix time (s) of the annotate call;
    ``core_limit``/``memory_limit``: the new annotation values (at least one). Evidence:
    ``metrics_series.jsonl`` polled across the change; the state before comes from records that
    ended before ``changed_at``, else from
    ``metrics_before.txt``, and must differ from the target (otherwise nothing was measured). The
    latency is the end of the first scrape that shows every target value minus ``changed_at`` (an
    upper bound, resolution = the poll interval). Threshold ``met005_max_latency_s``.
    """
    keys = ["met005_max_latency_s"]
    if core_limit is None and memory_limit is None:
        raise ValueError("judge_met005 needs the new core_limit and/or memory_limit")
    want_core = None if core_limit is None else float(core_limit_value(core_limit))
    want_mem = None if memory_limit is None else float(annotation_bytes(memory_limit))
    loaded = series_or_missing(ev, th, keys, "change_observed")
    if isinstance(loaded, Verdict):
        return loaded
    records, bad_lines = loaded
    evidence = ["metrics_series.jsonl"]

    def matches(state: tuple[float | None, float | None]) -> bool:
        return (want_core is None or state[0] == want_core) and (want_mem is None or state[1] == want_mem)

    before: tuple[float | None, float | None] | None = None
    for r in records:
        if r.t_end < changed_at and r.responded and r.body is not None:
            st = quota_state(parse_exposition(r.body, prefix), client)
            if st != (None, None):
                before = st
    if before is None and (text := ev.text("metrics_before.txt")) is not None:
        st = quota_state(parse_exposition(read_capture(text).body, prefix), client)
        before = st if st != (None, None) else None
        evidence.append("metrics_before.txt")
    checks: list[Check] = []
    targets = {"core_percent": want_core, "memory_bytes": want_mem}
    if before is None:
        checks.append(Check("state_before_known", "the pod's quota series before the change", {}, None,
                            "no scrape before the change shows the pod's quota series"))
    else:
        differs = not matches(before)
        checks.append(Check("state_before_differs", "quota(before) != target",
                            {"before": {"core_percent": before[0], "memory_bytes": before[1]}, "target": targets},
                            differs, "" if differs else "the pod already had the target values: nothing to measure"))
    after = [r for r in records if r.t >= changed_at]
    seen: tuple[float | None, float | None] = (None, None)
    latency: float | None = None
    for r in after:
        if not (r.responded and r.body is not None):
            continue
        seen = quota_state(parse_exposition(r.body, prefix), client)
        if matches(seen):
            latency = r.t_end - changed_at
            break
    limit = float(th_value(th, "met005_max_latency_s"))
    polled = (after[-1].t_end - changed_at) if after else 0.0
    if latency is None:
        checks.append(Check("change_observed", "a scrape after the change shows the target values",
                            {"target": targets, "last_seen": {"core_percent": seen[0], "memory_bytes": seen[1]},
                             "scrapes_after": len(after), "polled_s": round(polled, 3)},
                            False if after else None,
                            f"not seen in {polled:.1f} s of polling (last: core {seen[0]}, memory {seen[1]})"
                            if after else "no scrape after the change"))
    else:
        checks.append(Check("change_latency", f"latency_s <= {limit:g}", {"latency_s": round(latency, 3)},
                            latency <= limit, "" if latency <= limit else f"{latency:.1f} s > {limit:g} s"))
    metrics = {"dynamic_quota_metric_latency_sec": None if latency is None else round(latency, 3),
               "scrapes": len(records), "unreadable_lines": bad_lines}
    summary_ok = (f"new quota visible in the metrics after {latency:.1f} s (series of {client.workload}, "
                  f"by {client.describe()})" if latency is not None else "")
    return metrics_verdict(checks, th, keys, metrics, evidence, summary_ok)
