"""COMBO-001..008 judgments (seed 000 §8, §16.3, §17.3): pure functions from evidence to a Verdict.

Every function reads the case directory through :class:`~xpushare.evidence.Evidence` and the case's
``plan.json`` (written by :mod:`xpushare.cases.combination`), never live state, so ``invoke judge``
re-judges a stored run offline. Thresholds are named parameters (:data:`DEFAULTS` holds the seed's
values; a key missing from ``th`` falls back to its default and the verdict records what it used).

Each judgment is stricter than the bash harness (bash-harness-cases.md §3):

* COMBO-001: the pod is refused **by the quota** (the library's ``would exceed limit <quota> bytes``,
  not the physical limit and not "any failure"), it never held more than the quota (the rejection
  line's "already held" bytes), the scheduler applied the annotation, and the workload asked for more
  than the quota (otherwise nothing is proven: ERROR).
* COMBO-002: the two quota pods are confirmed on one GPU from the scheduler's registration lines (else
  SKIP, never PASS) and every pod passed, then ``runtime_low > runtime_high``.
* COMBO-003 / 007 / 008: quota series are read from ``metrics_mid*.txt`` (one capture per node where
  the case's pods ran, taken while they ran) **per pod** and compared with the configured values;
  a missing series is FAIL (the bash harness passed COMBO-003 with the metrics missing).
* COMBO-004 / 005 / 006: every annotate call must be followed by the scheduler's ``Memory limit
  changed`` / ``Compute limit changed`` line for that pod, in the order of the calls, and the pod-side
  update line, within ``dynamic_max_latency_s`` (seed §6 P1: 15 s) of the call; a pod line alone or a
  line for another value does not count (bash counted pod-log lines, one update giving two).
* COMBO-008 counts distinct GPUs from the registration lines (``client_info``'s ``gpu_index`` is always
  ``-1``, sut-interfaces.md §11 item 8) and checks per-GPU isolation: each pod's quota series carry its
  own values, its ``gpu_uuid`` label is its registration GPU, and its effective compute quota is scaled
  only by the limits of clients on its own GPU (§5.2).

Evidence files (relative to the case directory): ``pods.json``, ``pods/<pod>.log``, ``scheduler.log``
(kubectl ``--timestamps``), ``annotations.jsonl`` (unix time of every annotate call), ``metrics_mid*.txt``,
``metrics_start.txt`` / ``metrics_end.txt`` (COMBO-004), ``scheduler_proc.txt``.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from xpushare.collect import pod_log
from xpushare.collect.metrics import Exposition, Sample, parse_exposition
from xpushare.collect.scheduler_log import LimitChange, SchedulerLogSummary, parse_text
from xpushare.evidence import Evidence
from xpushare.judge import check_pods_succeeded, check_rejected, check_scheduler_alive, check_terminal, pod_progress
from xpushare.judge_metrics import annotation_bytes, read_capture
from xpushare.judge_quota import annotation_calls, change_applied_at, check_higher_quota_faster, phase_throughput
from xpushare.model import Check, Status, Verdict, combine

__all__ = [
    "DEFAULTS",
    "ChangeFacts",
    "change_facts",
    "check_captures",
    "check_pod_quota_series",
    "judge_all_on",
    "judge_compute_pair",
    "judge_dynamic_sequence",
    "judge_multi_gpu",
    "judge_quota_over_oversub",
    "judge_static_both",
    "oversub_target_bytes",
    "pods_in_capture",
    "split_capture",
]

#: Thresholds of COMBO-001..008 with the seed's values (seed 000 §6, §17.3).
DEFAULTS: dict[str, Any] = {
    # Seed §6 P1 item 2: a dynamic change takes effect within 15 s of the annotate call.
    "dynamic_max_latency_s": 15.0,
    # COMBO-005/006: changes (scheduler line + pod line, in order) that must be applied. The seed's
    # bar is ">= 2" of the 3 it makes; every planned change must arrive by default (seed §6 P0 item 2).
    "combo005_min_changes": 3,
    "combo006_min_changes": 3,
    # COMBO-004/006 "no stall": the largest gap between consecutive QUOTA_PROBE lines (W5 elapsed clock, s).
    "max_probe_gap_s": 30.0,
    # COMBO-006: throughput must move with each quota step by at least this factor (up: x, down: 1/x).
    "combo006_min_step_ratio": 1.2,
    # COMBO-006: the W5 probe interval (its --interval-s, s); each throughput phase skips one after its change.
    "probe_interval_s": 10.0,
    # COMBO-007: pods of 4 that must pass (seed §17.3: >= 3), and be seen in the metrics.
    "combo007_min_success": 3,
    # COMBO-008: distinct GPUs the pods must spread over, and the tolerance (percentage points) of the
    # effective compute quota against config x min(1, 100 / sum of limits on the same GPU).
    "combo008_min_gpus": 2,
    "combo008_effective_tolerance_pct": 2.0,
}


def _th(th: Mapping[str, Any], key: str) -> Any:
    return th[key] if key in th else DEFAULTS[key]


def _used(th: Mapping[str, Any], *keys: str) -> dict[str, Any]:
    """The thresholds as recorded in the verdict: the case's parameters plus the defaults it used."""
    return {**dict(th), **{k: _th(th, k) for k in keys}}


def _skip(plan: Mapping[str, Any], th: Mapping[str, Any]) -> Verdict | None:
    reason = plan.get("skip")
    return Verdict(Status.SKIP, str(reason), [], dict(th)) if reason else None


def _scheduler(ev: Evidence) -> SchedulerLogSummary | None:
    text = ev.text("scheduler.log")
    return parse_text(text) if text is not None else None


# ------------------------------------------------------------------------------------ pod output

_OVERSUB_RE = re.compile(r"\[(?:XPUSHARE|NVSHARE)\]\[OVERSUB\] total_bytes=(?P<total>\d+) \S+ target_bytes=(?P<t>\d+)")


def oversub_target_bytes(text: str | None) -> int | None:
    """Bytes the oversubscription workload set out to allocate (its ``[XPUSHARE][OVERSUB] ... target_bytes=``
    line, workloads/oversub.py), or None without such a line. Never raises."""
    if not text:
        return None
    found = _OVERSUB_RE.findall(text)
    return int(found[-1][1]) if found else None


# ------------------------------------------------------------------------------------ metrics


_CURL_NOTE_RE = re.compile(r"\n# curl: (?P<note>[^\n]*)\n?\Z")
_SCRAPE_FAILED_RE = re.compile(r"^# scrape of .* failed: (?P<note>[^\n]*)", re.M)


def split_capture(text: str) -> tuple[str, str | None]:
    """A capture of the k8s backend without its error notes: ``(capture, why the scrape failed or None)``.

    The backend appends ``# curl: <stderr>`` after the ``HTTP_CODE=`` trailer when curl complained (timeout,
    refused, partial transfer) and writes ``# scrape of <url> from <host> failed: ...`` when SSH failed.
    """
    note = None
    m = _CURL_NOTE_RE.search(text)
    if m is not None:
        text, note = text[: m.start()].rstrip("\n") + "\n", m.group("note").strip()
    failed = _SCRAPE_FAILED_RE.search(text)
    if failed is not None:
        note = failed.group("note").strip()
    return text, note


def check_captures(ev: Evidence, names: Sequence[str], what: str) -> tuple[list[Exposition], Check]:
    """Read the metrics captures ``names`` (curl output with an ``HTTP_CODE=`` trailer, or a bare body).

    Returns the parsed expositions and a check: ok None (ERROR: nothing to judge) when no capture was
    planned, one was not collected, or its scrape failed (curl error, no HTTP response); False when the
    endpoint answered other than 200, or with a page that is empty or does not parse as Prometheus text;
    else True. A page that parses but lacks a series is judged by the caller (FAIL, never PASS).
    """
    if not names:
        return [], Check(f"{what}_captured", f"{what} scraped while the pods ran", {}, None, f"no {what} capture")
    exps: list[Exposition] = []
    facts: dict[str, Any] = {}
    bad: list[str] = []
    failed: list[str] = []
    for name in names:
        text = ev.text(name)
        if text is None:
            return [], Check(f"{what}_captured", f"{name} collected", {"files": list(names)}, None,
                             f"{name} was not collected")
        text, note = split_capture(text)
        cap = read_capture(text)
        exp = parse_exposition(cap.body)
        facts[name] = {"http_code": cap.http_code, "parse_error": exp.error, "scrape_error": note}
        if note is not None or cap.http_code == 0:
            failed.append(f"{name}: scrape failed ({note or 'no HTTP response'})")
        elif cap.http_code not in (200, None):
            bad.append(f"{name}: HTTP {cap.http_code}")
        elif not exp.ok:
            bad.append(f"{name}: {exp.error}")
        elif not exp.families:
            bad.append(f"{name}: empty page")
        else:
            exps.append(exp)
    expr = "every capture answered 200 and parses as Prometheus text"
    if bad:
        return exps, Check(f"{what}_captured", expr, facts, False, "; ".join(bad + failed))
    if failed:
        return exps, Check(f"{what}_captured", expr, facts, None, "; ".join(failed))
    return exps, Check(f"{what}_captured", expr, facts, True)


def _series(exps: Sequence[Exposition], metric: str, **labels: Any) -> list[Sample]:
    return [s for exp in exps for s in exp.values(metric, **labels)]


def pods_in_capture(exp: Exposition, namespace: str | None = None) -> set[str]:
    """Pods that have at least one series (any family, label ``pod``) in the page; ``namespace`` filters."""
    out: set[str] = set()
    for fam in exp.families:
        for s in fam.samples:
            pod = s.label("pod")
            if pod is not None and (namespace is None or s.label("namespace") == namespace):
                out.add(pod)
    return out


def check_pod_quota_series(
    exps: Sequence[Exposition], pod: str, namespace: str, *, memory_bytes: int | None, core: int | None,
    name: str = "quota_metrics",
) -> Check:
    """One pod's quota series in the captures equal its configuration (sut-interfaces.md §6.3).

    ``client_info`` present (registered at the scraped scheduler); every ``client_memory_quota_bytes``
    series == ``memory_bytes`` and every ``client_core_quota_config_percent`` == ``core`` (skipped when
    None); every ``client_core_quota_effective_percent`` in ``(0, core]`` (scaling only lowers it).
    A missing series is a failure: the exporter did not show the quota.
    """
    sel = {"pod": pod, "namespace": namespace}
    info = _series(exps, "client_info", **sel)
    mem = [s.value for s in _series(exps, "client_memory_quota_bytes", **sel)]
    cfg = [s.value for s in _series(exps, "client_core_quota_config_percent", **sel)]
    eff = [s.value for s in _series(exps, "client_core_quota_effective_percent", **sel)]
    values = {"client_info": len(info), "memory_quota_bytes": mem, "core_config_percent": cfg,
              "core_effective_percent": eff, "expected": {"memory_bytes": memory_bytes, "core_percent": core}}
    problems: list[str] = []
    if not info:
        problems.append("no client_info series")
    if memory_bytes is not None:
        if not mem:
            problems.append("no client_memory_quota_bytes series")
        elif any(v != memory_bytes for v in mem):
            problems.append(f"client_memory_quota_bytes {mem} != {memory_bytes}")
    if core is not None:
        if not cfg:
            problems.append("no client_core_quota_config_percent series")
        elif any(v != core for v in cfg):
            problems.append(f"client_core_quota_config_percent {cfg} != {core}")
        if not eff:
            problems.append("no client_core_quota_effective_percent series")
        elif any(not 0 < v <= core for v in eff):
            problems.append(f"client_core_quota_effective_percent {eff} not in (0, {core}]")
    expr = f"series of pod {pod} == configured (memory {memory_bytes} B, core {core} %)"
    return Check(f"{name}[{pod}]", expr, values, not problems, "; ".join(problems))


def _quota_bytes(text: Any) -> int | None:
    return None if text is None else annotation_bytes(str(text))


# ------------------------------------------------------------------------------------ COMBO-001


def _check_quota_held(rej: Sequence[pod_log.Rejection], quota: int) -> Check:
    """The quota was a hard limit from the first allocation on: every rejection line's "already held"
    bytes (its first number) are within the quota. More than the quota held means allocations that were
    never checked against it (e.g. made before the quota reached the client, findings.md #13)."""
    held = [r.allocated_bytes for r in rej]
    over = [h for h in held if h > quota]
    detail = "" if not over else (f"the client already held {max(over)} B, over the {quota} B quota, when it was "
                                  "refused: allocations before that were not checked against the quota")
    return Check("quota_held", f"bytes held at every rejection <= {quota}", {"held_bytes": held[:5],
                 "quota_bytes": quota}, not over, detail)


def judge_quota_over_oversub(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    """COMBO-001: with oversubscription on, the memory quota still refuses what exceeds it.

    ``plan``: ``pods`` (one oversub pod), ``namespace``, ``memory_limit`` (the annotation value, e.g.
    ``10Gi``), optional ``skip`` and ``seed_scope``. PASS needs: the pod ended, failed with a rejection
    marker, the library's rejection names the quota (``would exceed limit <quota> bytes``), no rejection
    line shows more than the quota already held (the quota bound every allocation, :func:`_check_quota_held`),
    the scheduler applied that quota to the pod, and the scheduler lives. ERROR when the workload never asked for more
    than the quota (nothing proven) or evidence is missing.
    """
    if (v := _skip(plan, th)) is not None:
        return v
    pod, ns = plan["pods"][0], plan.get("namespace", "default")
    quota = annotation_bytes(str(plan["memory_limit"]))
    log = ev.logs.get(pod)
    target = oversub_target_bytes(log)
    metrics: dict[str, Any] = {"quota_bytes": quota, "target_bytes": target, "seed_scope": plan.get("seed_scope")}
    if quota <= 0:
        return Verdict(Status.ERROR, f"memory_limit {plan['memory_limit']!r} is not a quantity the scheduler accepts",
                       [], dict(th), metrics, ev.pod_files())
    if target is not None and target <= quota:
        return Verdict(Status.ERROR, f"the workload asked for {target} B, not more than the {quota} B quota: "
                       "nothing proven (raise oversub_factor or lower combo001_memory_limit)",
                       [], dict(th), metrics, ev.pod_files())
    checks = [check_terminal(ev.pods, [pod]), check_rejected(ev, pod)]
    if log is None:
        checks.append(Check("rejected_by_quota", "pod log collected", {}, None, f"no log for {pod}"))
    else:
        rej = pod_log.rejections(log)
        by_quota = [r for r in rej if r.limit_bytes == quota]
        facts = [{"limit_bytes": r.limit_bytes, "physical_bytes": r.physical_bytes,
                  "requested_bytes": r.requested_bytes} for r in rej[:5]]
        detail = ""
        if not by_quota:
            detail = ("refused by the physical limit, not by the quota" if any(r.physical_bytes for r in rej)
                      else "no library rejection naming the quota")
        checks.append(Check("rejected_by_quota", f"a rejection line says 'would exceed limit {quota} bytes'",
                            {"rejections": facts, "quota_bytes": quota}, bool(by_quota), detail))
        metrics["rejection_limit_bytes"] = by_quota[0].limit_bytes if by_quota else None
        if rej:
            checks.append(_check_quota_held(rej, quota))
            metrics["held_bytes_at_rejection"] = max(r.allocated_bytes for r in rej)
    sched = _scheduler(ev)
    if sched is None:
        checks.append(Check("quota_applied_by_scheduler", "scheduler.log collected", {}, None, "no scheduler.log"))
    else:
        applied = [c for c in sched.limit_changes
                   if c.kind == "memory" and c.pod == pod and c.namespace == ns and c.new == quota]
        checks.append(Check("quota_applied_by_scheduler",
                            f"scheduler: 'Applying initial memory limit for {ns}/{pod}: {quota} bytes'",
                            {"matches": len(applied)}, bool(applied), "" if applied else "no such scheduler line"))
    if (alive := check_scheduler_alive(ev)) is not None:
        checks.append(alive)
    status, summary = combine(checks, pass_summary=f"quota {plan['memory_limit']} refused the over-quota allocation "
                              f"({target} B asked) although oversubscription was on")
    if plan.get("seed_scope") and status is Status.PASS:
        summary += f" (seed scope: {plan['seed_scope']})"
    return Verdict(status, summary, checks, dict(th), metrics, ev.pod_files())


# ------------------------------------------------------------------------------------ COMBO-002


def judge_compute_pair(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    """COMBO-002: two pods with different core limits (and oversubscription on) on one GPU.

    ``plan``: ``pods`` (all, fillers included), ``pair`` ([low-quota pod, high-quota pod]), ``cores``
    ({pod: percent}). Every pod must pass ("scheduling stable"); then, only when the registration lines
    put the pair on one GPU (pods.json ``node``/``gpu``), ``runtime_low > runtime_high``. Not co-located,
    or no GPU in the registration lines: SKIP (never PASS).
    """
    names, (low, high) = plan["pods"], plan["pair"]
    cores = {str(k): int(v) for k, v in (plan.get("cores") or {}).items()}
    checks = [check_terminal(ev.pods, names), check_pods_succeeded(ev, names)]
    if (alive := check_scheduler_alive(ev)) is not None:
        checks.append(alive)
    status, summary = combine(checks, pass_summary="")
    a, b = ev.pod(low), ev.pod(high)
    placement = {p.name: [p.node, p.gpu] for p in (a, b) if p}
    metrics: dict[str, Any] = {"placement": placement, "cores": cores}
    if status is not Status.PASS:
        return Verdict(status, summary, checks, dict(th), metrics, ev.pod_files())
    assert a is not None and b is not None  # check_terminal saw both records
    if a.gpu is None or b.gpu is None:
        return Verdict(Status.SKIP, f"co-location not confirmed: no registration GPU for the pair ({placement})",
                       checks, dict(th), metrics, ev.pod_files())
    if (a.node, a.gpu) != (b.node, b.gpu):
        return Verdict(Status.SKIP, f"co-location on one GPU not obtained ({placement})",
                       checks, dict(th), metrics, ev.pod_files())
    r_low, r_high = pod_progress(ev, low)["runtime_s"], pod_progress(ev, high)["runtime_s"]
    q_low, q_high = cores.get(low, "low"), cores.get(high, "high")
    values = {f"runtime_{q_low}": r_low, f"runtime_{q_high}": r_high}
    check, ratio = check_higher_quota_faster(r_low, r_high, q_low=q_low, q_high=q_high, th=th,
                                             ratio_param="combo002_min_ratio")
    values["ratio"] = round(ratio, 4) if ratio is not None else None
    checks.append(check)
    metrics.update(values)
    status, summary = combine(checks, pass_summary=f"the {q_high} % pod finished faster than the {q_low} % pod "
                              f"on one GPU with oversubscription on")
    return Verdict(status, summary, checks, dict(th), metrics, ev.pod_files())


# ------------------------------------------------------------------------------------ COMBO-003


def _check_initial_limits(sched: SchedulerLogSummary | None, pod: str, ns: str, *, memory_bytes: int | None,
                          core: int | None) -> Check:
    """The scheduler applied the pod's annotations at registration (§4.2 step 3 and 5)."""
    if sched is None:
        return Check(f"initial_limits_logged[{pod}]", "scheduler.log collected", {}, None, "no scheduler.log")
    found = {c.kind: c.new for c in sched.limit_changes if c.initial and c.pod == pod and c.namespace == ns}
    missing = []
    if core is not None and found.get("compute") != core:
        missing.append(f"compute {core}%")
    if memory_bytes is not None and found.get("memory") != memory_bytes:
        missing.append(f"memory {memory_bytes} bytes")
    return Check(f"initial_limits_logged[{pod}]", "scheduler: 'Applying initial compute/memory limit' with the "
                 "configured values", {"found": found}, not missing,
                 f"not applied: {', '.join(missing)}" if missing else "")


def judge_static_both(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    """COMBO-003: static memory and compute quotas together: both pods pass, both quotas observable.

    ``plan``: ``pods``, ``namespace``, ``quotas`` ({pod: {"core": percent, "memory": "4Gi"}}),
    ``metrics_mid`` (capture files, one per node, taken while the pods ran). Per pod: the scheduler's
    initial-limit lines and the quota series of :func:`check_pod_quota_series`. Missing metrics: FAIL.
    """
    names, ns = plan["pods"], plan.get("namespace", "default")
    quotas: Mapping[str, Mapping[str, Any]] = plan["quotas"]
    checks = [check_terminal(ev.pods, names), check_pods_succeeded(ev, names)]
    exps, cap = check_captures(ev, plan.get("metrics_mid") or [], "metrics_mid")
    checks.append(cap)
    sched = _scheduler(ev)
    for pod, q in quotas.items():
        mem, core = _quota_bytes(q.get("memory")), q.get("core")
        checks.append(_check_initial_limits(sched, pod, ns, memory_bytes=mem, core=core))
        if cap.ok:
            checks.append(check_pod_quota_series(exps, pod, ns, memory_bytes=mem, core=core))
    status, summary = combine(checks, pass_summary=f"{len(names)} pods passed; memory and compute quotas of every "
                              "pod observable in metrics_mid with the configured values")
    metrics = {"quotas": {p: dict(q) for p, q in quotas.items()}, "runtime_s": {
        p: pod_progress(ev, p)["runtime_s"] for p in names}}
    return Verdict(status, summary, checks, dict(th), metrics, ev.pod_files())


# ------------------------------------------------------------------------------------ COMBO-004/005/006


@dataclass(frozen=True)
class ChangeFacts:
    """What became of one planned annotation change.

    ``kind``: ``memory`` | ``compute``; ``value``: the annotation value; ``new``: bytes or percent;
    ``annotated_at``: unix s of the annotate call (None: not recorded); ``scheduler``: the scheduler line
    matched in order (None: none); ``out_of_order``: a line exists but only before the previous change's;
    ``pod_line``: the pod logged the library's update line; ``latency_s``: scheduler line time minus
    ``annotated_at`` (None when either is unknown).
    """

    kind: str
    value: str
    new: int
    annotated_at: float | None
    scheduler: LimitChange | None
    out_of_order: bool
    pod_line: bool
    latency_s: float | None

    @property
    def applied(self) -> bool:
        return self.scheduler is not None and self.pod_line

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "value": self.value, "new": self.new, "scheduler_line": bool(self.scheduler),
                "lineno": self.scheduler.lineno if self.scheduler else None, "out_of_order": self.out_of_order,
                "pod_line": self.pod_line, "latency_s": None if self.latency_s is None else round(self.latency_s, 3)}


def _kind(key: str) -> str:
    return "compute" if key in ("core", "compute") else "memory"


def change_facts(
    sched: SchedulerLogSummary, log: str | None, *, pod: str, namespace: str,
    changes: Sequence[Mapping[str, Any]], calls: Sequence[Mapping[str, Any]],
) -> list[ChangeFacts]:
    """Match each planned change (in order) to the scheduler's change line and the pod's update line.

    The i-th change is matched to the first ``... limit changed for pod <ns>/<pod>: * -> <new>`` line of
    its kind after the line matched for change i-1 (so a change applied before an earlier one does not
    count); ``calls[i]["time"]`` is its annotate call.
    """
    out: list[ChangeFacts] = []
    prev = 0
    core_updates = pod_log.core_limit_updates(log) if log else []
    mem_updates = pod_log.memory_limit_updates(log) if log else []
    for i, ch in enumerate(changes):
        kind, new = _kind(str(ch["key"])), int(ch["new"])
        cands = [c for c in sched.limit_changes if c.kind == kind and not c.initial and c.pod == pod
                 and c.namespace == namespace and c.new == new]
        after = [c for c in cands if c.lineno > prev]
        match = after[0] if after else None
        if match is not None:
            prev = match.lineno
        if kind == "compute":
            pod_line = any(u.kind in ("applied", "received") and u.percent == new for u in core_updates)
        else:
            pod_line = any(u.kind in ("applied", "received") and u.new_bytes == new for u in mem_updates)
        when = calls[i].get("time") if i < len(calls) else None
        latency = match.ts.timestamp() - float(when) if match and match.ts and when is not None else None
        out.append(ChangeFacts(kind, str(ch["value"]), new, None if when is None else float(when), match,
                               bool(cands) and match is None, pod_line, latency))
    return out


def _change_checks(facts: Sequence[ChangeFacts], max_latency: float, pod: str, namespace: str) -> list[Check]:
    """Per-change checks (every change must arrive): scheduler line in order, pod line, latency."""
    checks: list[Check] = []
    for f in facts:
        line = "Compute limit changed" if f.kind == "compute" else "Memory limit changed"
        unit = "%" if f.kind == "compute" else " bytes"
        detail = "" if f.scheduler else ("logged out of order (before the previous change)" if f.out_of_order
                                         else "no such scheduler line")
        checks.append(Check(f"{f.kind}_change_logged[{f.value}]",
                            f"scheduler: '{line} for pod {namespace}/{pod}: * -> {f.new}{unit}', after the previous "
                            "change's line", f.to_dict(), f.scheduler is not None, detail))
        checks.append(Check(f"{f.kind}_update_in_pod[{f.value}]", "the client library logged the new limit",
                            f.to_dict(), f.pod_line, "" if f.pod_line else "no update line in the pod log"))
        if f.scheduler is not None:
            if f.latency_s is None:
                why = "annotate call not recorded" if f.annotated_at is None else "scheduler.log without timestamps"
                checks.append(Check(f"{f.kind}_latency[{f.value}]", "latency measurable", f.to_dict(), None, why))
            else:
                ok = f.latency_s <= max_latency
                checks.append(Check(f"{f.kind}_latency[{f.value}]", f"latency_s <= {max_latency}",
                                    {"latency_s": round(f.latency_s, 3)}, ok,
                                    "" if ok else f"took {f.latency_s:.1f} s"))
    return checks


def _why_not_applied(f: ChangeFacts) -> str:
    if f.out_of_order:
        return "out of order"
    return "no scheduler line" if f.scheduler is None else "no pod line"


def _count_checks(facts: Sequence[ChangeFacts], minimum: int, max_latency: float, kind: str) -> list[Check]:
    """At least ``minimum`` changes applied (scheduler line in order + pod line), each within the latency."""
    applied = [f for f in facts if f.applied]
    missing = [f"{f.value} ({_why_not_applied(f)})" for f in facts if not f.applied]
    ok = len(applied) >= minimum
    checks = [Check(f"{kind}_changes_applied", f"applied changes >= {minimum} of {len(facts)}",
                    {"applied": len(applied), "changes": [f.to_dict() for f in facts]}, ok,
                    "" if ok else f"{len(applied)}/{len(facts)} applied; missing: {', '.join(missing)}")]
    timed = {f.value: f.latency_s for f in applied if f.latency_s is not None}
    if applied and len(timed) < len(applied):
        checks.append(Check(f"{kind}_latency", "latency measurable for every applied change",
                            {"changes": [f.to_dict() for f in applied]}, None,
                            "annotate call not recorded or scheduler.log without timestamps"))
    elif timed:
        worst = max(timed.values())
        ok = worst <= max_latency
        checks.append(Check(f"{kind}_latency", f"max latency_s <= {max_latency}",
                            {"latency_s": {v: round(t, 3) for v, t in timed.items()}},
                            ok, "" if ok else f"took {worst:.1f} s"))
    return checks


def _check_no_crash(ev: Evidence, pod: str) -> Check:
    """The pod ended with PASS, or with a quota rejection (a lowered limit may refuse allocations)."""
    facts = pod_progress(ev, pod)
    log = ev.logs.get(pod)
    if log is None or facts["phase"] is None:
        return Check("pod_no_crash", "pod passed or refused an allocation", facts, None, "no pod evidence")
    passed = facts["phase"] == "Succeeded" and facts["exit_code"] == 0 and facts["pass_marker"]
    refused = bool(pod_log.oom_markers(log))
    ok = bool(passed or refused)
    return Check("pod_no_crash", "pod ended with PASS, or with a quota rejection (no other failure)",
                 {**facts, "refused": refused}, ok, "" if ok else "the pod failed for another reason")


def _check_probe_gaps(ev: Evidence, pod: str, max_gap: float) -> Check:
    """W5 kept progressing: QUOTA_PROBE lines exist and no two consecutive ones are more than ``max_gap`` s
    apart on the workload's own clock (its ``elapsed=``; a SIGSTOP or a hang shows as a gap)."""
    log = ev.logs.get(pod)
    if log is None:
        return Check("no_stall", "pod log collected", {}, None, f"no log for {pod}")
    probes = pod_log.quota_probes(log)
    if len(probes) < 2:
        return Check("no_stall", "at least 2 QUOTA_PROBE lines", {"probes": len(probes)}, False,
                     f"{len(probes)} QUOTA_PROBE line(s): the probe loop did not run")
    gaps = [(b.elapsed_s - a.elapsed_s, b.elapsed_s) for a, b in itertools.pairwise(probes)]
    worst, at = max(gaps)
    ok = worst <= max_gap
    return Check("no_stall", f"max gap between QUOTA_PROBE lines <= {max_gap} s",
                 {"probes": len(probes), "max_gap_s": round(worst, 3), "at_elapsed_s": at}, ok,
                 "" if ok else f"{worst:.1f} s without a probe line (at elapsed {at:.1f} s)")


def _check_throughput_steps(
    ev: Evidence, pod: str, namespace: str, facts: Sequence[ChangeFacts], initial: int, min_ratio: float, *,
    max_latency: float, interval: float,
) -> Check:
    """Throughput (probe it/s) moves with each compute step: up by ``min_ratio`` when the quota rises,
    down by it when it falls.

    Phases as for FUNC-012 (:func:`~xpushare.judge_quota.judge_dynamic_compute`, read by
    :func:`~xpushare.judge_quota.phase_throughput`): the one before change ``i`` ends when the change
    reached the pod (:func:`~xpushare.judge_quota.change_applied_at`: the pod's update line, else the
    scheduler's ``Compute limit changed`` line for the pod; else the annotate call); the one after it
    starts ``interval`` s later (one probe interval, the W5 ``--interval-s``), or ``max_latency`` +
    ``interval`` s after the annotate call when the change was not seen arriving, so no probe delta that
    mixes two quotas, or follows a change still settling, counts in a phase. ``initial``: the quota (%)
    before the first change.

    Values: ``quotas`` (%, initial then one per change), ``applied_at`` (unix s per change, None where
    neither line has a timestamp), ``applied_from`` (per change: pod | scheduler | annotate | none),
    ``phase_starts`` (unix s, phases 1..n; only when every phase is bounded), ``throughput_it_s`` (per phase).
    Without both the applied and the annotate time of a change the check is not evaluable (ok None).
    """
    quotas = [initial, *[f.new for f in facts]]
    applied = [change_applied_at(ev, pod=pod, namespace=namespace, kind="compute", new=f.new) for f in facts]
    values: dict[str, Any] = {
        "quotas": quotas,
        "applied_at": [None if at is None else round(at, 3) for at, _src in applied],
        "applied_from": [src if at is not None else "annotate" if f.annotated_at is not None else "none"
                         for (at, src), f in zip(applied, facts, strict=True)],
    }
    ends: list[float] = []
    starts: list[float] = []
    for (at, _src), f in zip(applied, facts, strict=True):
        if at is not None:
            ends.append(at)
            starts.append(at + interval)
        elif f.annotated_at is not None:
            ends.append(f.annotated_at)
            starts.append(f.annotated_at + max_latency + interval)
        else:
            return Check("throughput_follows_quota", "phase boundaries known", values, None,
                         f"change to {f.value} %: neither applied nor annotate time known")
    values["phase_starts"] = [round(t, 3) for t in starts]
    tp = phase_throughput(ev, pod, ends, starts=starts)
    values["throughput_it_s"] = [None if v is None else round(v, 3) for v in tp]
    if any(v is None for v in tp):
        return Check("throughput_follows_quota", "a probe delta in every phase", values, None,
                     "not enough timestamped QUOTA_PROBE lines per phase")
    bad = []
    for i, (q0, q1) in enumerate(itertools.pairwise(quotas)):
        t0, t1 = tp[i], tp[i + 1]
        assert t0 is not None and t1 is not None
        rose_enough = t1 >= t0 * min_ratio
        fell_enough = t1 * min_ratio <= t0
        if (q1 > q0 and not rose_enough) or (q1 < q0 and not fell_enough):
            bad.append(f"{q0}->{q1} %: {t0:.1f} -> {t1:.1f} it/s")
    return Check("throughput_follows_quota", f"each step moves throughput by >= x{min_ratio} in its direction",
                 values, not bad, "; ".join(bad))


def judge_dynamic_sequence(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any], *, case: str) -> Verdict:
    """COMBO-004 / 005 / 006: dynamic changes on one running W5 pod, judged from logs and metrics.

    ``plan``: ``pods`` (one), ``namespace``, ``changes`` ([{key: memory|core, value, new}] in annotate
    order), ``initial`` ({core, memory}), ``metrics_start`` / ``metrics_end`` (COMBO-004), ``skip``.

    * ``COMBO-004`` (alternating memory/core): every change logged by the scheduler in the order of the
      calls, logged by the pod, latency <= ``dynamic_max_latency_s``; the pod passes; no probe gap over
      ``max_probe_gap_s``; ``metrics_start`` shows the initial quotas and ``metrics_end`` the final ones.
    * ``COMBO-005`` (oversub + memory up/down): >= ``combo005_min_changes`` memory changes applied (in
      order, scheduler + pod line), each within the latency; the scheduler lives; the pod did not crash.
    * ``COMBO-006`` (oversub + compute): >= ``combo006_min_changes`` compute changes applied within the
      latency; the pod passes; no probe gap over ``max_probe_gap_s``; throughput follows each step by
      ``combo006_min_step_ratio``, each phase starting ``probe_interval_s`` after its change reached the
      pod (:func:`_check_throughput_steps`). Extra metrics: ``throughput_it_s`` (it/s per phase),
      ``applied_at`` (unix s per change), ``applied_from`` (pod | scheduler | annotate | none),
      ``phase_starts`` (unix s, phases 1..n; absent when a change has neither time).
    """
    if (v := _skip(plan, th)) is not None:
        return v
    pod, ns = plan["pods"][0], plan.get("namespace", "default")
    changes = list(plan["changes"])
    max_latency = float(_th(th, "dynamic_max_latency_s"))
    keys = ["dynamic_max_latency_s"]
    checks: list[Check] = [check_terminal(ev.pods, [pod])]
    checks.append(_check_no_crash(ev, pod) if case == "COMBO-005" else check_pods_succeeded(ev, [pod]))
    sched = _scheduler(ev)
    facts: list[ChangeFacts] = []
    if sched is None:
        checks.append(Check("changes_logged", "scheduler.log collected", {}, None, "no scheduler.log"))
    else:
        facts = change_facts(sched, ev.logs.get(pod), pod=pod, namespace=ns, changes=changes,
                             calls=annotation_calls(ev))
        if case == "COMBO-004":
            checks += _change_checks(facts, max_latency, pod, ns)
        else:
            key = "combo005_min_changes" if case == "COMBO-005" else "combo006_min_changes"
            keys.append(key)
            kind = "memory" if case == "COMBO-005" else "compute"
            checks += _count_checks(facts, int(_th(th, key)), max_latency, kind)
    if case in ("COMBO-004", "COMBO-006"):
        keys.append("max_probe_gap_s")
        checks.append(_check_probe_gaps(ev, pod, float(_th(th, "max_probe_gap_s"))))
    steps: Check | None = None
    if case == "COMBO-006" and facts:
        keys += ["combo006_min_step_ratio", "probe_interval_s"]
        start_core = int((plan.get("initial") or {}).get("core", 100))
        steps = _check_throughput_steps(ev, pod, ns, facts, start_core, float(_th(th, "combo006_min_step_ratio")),
                                        max_latency=max_latency, interval=float(_th(th, "probe_interval_s")))
        checks.append(steps)
    if case == "COMBO-004":
        initial: Mapping[str, Any] = plan.get("initial") or {}
        final = {"core": initial.get("core"), "memory": initial.get("memory")}
        for ch in changes:
            final["core" if _kind(str(ch["key"])) == "compute" else "memory"] = ch["value"]
        for what, q in (("metrics_start", initial), ("metrics_end", final)):
            name = plan.get(what)
            exps, cap = check_captures(ev, [name] if name else [], what)
            checks.append(cap)
            if cap.ok:
                core_value = q.get("core")
                core = None if core_value is None else int(core_value)
                checks.append(check_pod_quota_series(exps, pod, ns, memory_bytes=_quota_bytes(q.get("memory")),
                                                     core=core, name=what))
    if (alive := check_scheduler_alive(ev)) is not None:
        checks.append(alive)
    latencies = {f.value: round(f.latency_s, 3) for f in facts if f.latency_s is not None}
    status, summary = combine(checks, pass_summary=f"{sum(f.applied for f in facts)}/{len(changes)} change(s) "
                              "applied in order in place")
    if status is Status.PASS and latencies:
        summary += f"; latency max {max(latencies.values()):.1f} s"
    if status is Status.PASS and plan.get("seed_scope"):
        summary += f" (seed scope: {plan['seed_scope']})"
    metrics: dict[str, Any] = {"latency_s": latencies, "changes": [f.to_dict() for f in facts]}
    if steps is not None:
        metrics.update({k: steps.values[k] for k in ("throughput_it_s", "applied_at", "applied_from", "phase_starts")
                        if k in steps.values})
    return Verdict(status, summary, checks, _used(th, *keys), metrics, ev.pod_files())


# ------------------------------------------------------------------------------------ COMBO-007


def judge_all_on(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    """COMBO-007: 4 mixed pods (core + memory quotas, oversubscription on some) run and are observable.

    ``plan``: ``pods``, ``namespace``, ``quotas`` ({pod: {core, memory}}), ``metrics_mid``. PASS needs:
    every pod ended; >= ``combo007_min_success`` passed; the captures parse; >= that many pods seen in
    them, each seen pod's quota series equal to its configuration; the scheduler alive with no FATAL line.
    """
    names, ns = plan["pods"], plan.get("namespace", "default")
    quotas: Mapping[str, Mapping[str, Any]] = plan["quotas"]
    minimum = int(_th(th, "combo007_min_success"))
    checks = [check_terminal(ev.pods, names)]
    facts = {p: pod_progress(ev, p) for p in names}
    passed = [p for p, f in facts.items() if f["phase"] == "Succeeded" and f["exit_code"] == 0 and f["pass_marker"]
              and f["runtime_s"] is not None]
    ok = len(passed) >= minimum
    checks.append(Check("success_count", f"pods passed >= {minimum} of {len(names)}",
                        {"passed": passed, "facts": facts}, ok,
                        "" if ok else f"{len(passed)}/{len(names)} passed"))
    exps, cap = check_captures(ev, plan.get("metrics_mid") or [], "metrics_mid")
    checks.append(cap)
    if cap.ok:
        seen = set().union(*(pods_in_capture(e, ns) for e in exps)) if exps else set()
        observed = [p for p in quotas if p in seen]
        ok = len(observed) >= minimum
        checks.append(Check("pods_observed", f"pods with series in metrics_mid >= {minimum}",
                            {"observed": observed}, ok, "" if ok else f"{len(observed)}/{len(quotas)} seen"))
        for pod in observed:
            q = quotas[pod]
            checks.append(check_pod_quota_series(exps, pod, ns, memory_bytes=_quota_bytes(q.get("memory")),
                                                 core=q.get("core")))
    sched = _scheduler(ev)
    if sched is None:
        checks.append(Check("scheduler_no_fatal", "scheduler.log collected", {}, None, "no scheduler.log"))
    else:
        fatal = [line.text for line in sched.fatal_lines[:3]]
        checks.append(Check("scheduler_no_fatal", "no FATAL line in scheduler.log",
                            {"fatal_count": sched.fatal_count, "lines": fatal}, sched.fatal_count == 0,
                            "" if sched.fatal_count == 0 else f"{sched.fatal_count} FATAL line(s): {fatal[:1]}"))
    if (alive := check_scheduler_alive(ev)) is not None:
        checks.append(alive)
    status, summary = combine(checks, pass_summary=f"{len(passed)}/{len(names)} mixed pods passed; quotas observable")
    return Verdict(status, summary, checks, _used(th, "combo007_min_success"),
                   {"success_count": len(passed), "pods": len(names)}, ev.pod_files())


# ------------------------------------------------------------------------------------ COMBO-008


def _gpu_match(a: str | None, b: str | None) -> bool:
    """GPU keys agree (a UUID may be a prefix of the other, as NVML prefix-matches, §6.3)."""
    return bool(a and b and (a.startswith(b) or b.startswith(a)))


def _check_effective_scaling(exps: Sequence[Exposition], pods: Sequence[str], ns: str, tol: float) -> Check:
    """Per capture (one scheduler, one node) and per GPU key: each case pod's effective compute quota equals
    config x min(1, 100 / S), S = sum of the limits < 100 of the clients on **that** GPU (§5.2)."""
    rows: dict[str, Any] = {}
    bad: list[str] = []
    for exp in exps:
        cfg = exp.values("client_core_quota_config_percent")
        by_gpu: dict[str, float] = {}
        for s in cfg:
            if s.value < 100:
                by_gpu[s.label("gpu_uuid") or "?"] = by_gpu.get(s.label("gpu_uuid") or "?", 0.0) + s.value
        for s in cfg:
            pod = s.label("pod")
            if pod not in pods or s.label("namespace") != ns or s.value >= 100:
                continue
            gpu = s.label("gpu_uuid") or "?"
            total = by_gpu[gpu]
            expected = s.value * (100.0 / total if total > 100 else 1.0)
            eff = exp.values("client_core_quota_effective_percent", client_id=s.label("client_id") or "")
            got = eff[0].value if eff else None
            rows[f"{pod}/{s.label('client_id')}"] = {"gpu": gpu, "config": s.value, "gpu_limit_sum": total,
                                                    "expected": round(expected, 2), "effective": got}
            if got is None:
                bad.append(f"{pod}: no effective series")
            elif abs(got - expected) > tol:
                bad.append(f"{pod}: effective {got:g} != {expected:.1f} (sum {total:g} on {gpu})")
    if not rows:
        return Check("per_gpu_isolation", "effective quota scaled by its own GPU only", rows, False,
                     "no limited client of the case in the captures")
    return Check("per_gpu_isolation", f"|effective - config x min(1, 100/sum_on_own_gpu)| <= {tol}", rows,
                 not bad, "; ".join(bad))


def judge_multi_gpu(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    """COMBO-008: many W5 pods with mixed quotas spread over GPUs, and GPUs do not contaminate each other.

    ``plan``: ``pods``, ``namespace``, ``quotas`` ({pod: {core, memory}}), ``metrics_mid``,
    ``gpus_available`` (None: unknown). PASS needs: every pod passed; the registration lines (pods.json
    ``gpu``, from ``gpu_mapping``) put the pods on >= ``combo008_min_gpus`` distinct (node, GPU);
    per pod, the quota series equal its own configuration and its ``gpu_uuid`` label equals its
    registration GPU; per GPU, effective quotas are scaled only by that GPU's limits. SKIP when the
    cluster has fewer GPUs than ``combo008_min_gpus``.
    """
    names, ns = plan["pods"], plan.get("namespace", "default")
    quotas: Mapping[str, Mapping[str, Any]] = plan["quotas"]
    minimum = int(_th(th, "combo008_min_gpus"))
    tol = float(_th(th, "combo008_effective_tolerance_pct"))
    used = _used(th, "combo008_min_gpus", "combo008_effective_tolerance_pct")
    checks = [check_terminal(ev.pods, names), check_pods_succeeded(ev, names)]
    available = plan.get("gpus_available")
    placement = {p: (r.node, r.gpu) for p in names if (r := ev.pod(p)) is not None}
    distinct = sorted({f"{n}/{g}" for n, g in placement.values() if g})
    metrics: dict[str, Any] = {"distinct_gpus": len(distinct), "gpus": distinct, "gpus_available": available,
                               "placement": {p: list(w) for p, w in placement.items()}}
    if available is not None and int(available) < minimum:
        status, _ = combine(checks, pass_summary="")
        if status is Status.PASS:
            return Verdict(Status.SKIP, f"the cluster offers {available} GPU(s), fewer than {minimum}", checks, used,
                           metrics, ev.pod_files())
    known = [p for p, (_n, g) in placement.items() if g]
    if not known:
        checks.append(Check("distinct_gpus", f"distinct registration GPUs >= {minimum}", metrics, None,
                            "no registration GPU for any pod (scheduler.log without 'on GPU')"))
    else:
        ok = len(distinct) >= minimum
        checks.append(Check("distinct_gpus", f"distinct registration GPUs >= {minimum}",
                            {"gpus": distinct, "gpus_available": available}, ok,
                            "" if ok else f"all pods on {distinct}"))
    exps, cap = check_captures(ev, plan.get("metrics_mid") or [], "metrics_mid")
    checks.append(cap)
    if cap.ok:
        for pod, q in quotas.items():
            checks.append(check_pod_quota_series(exps, pod, ns, memory_bytes=_quota_bytes(q.get("memory")),
                                                 core=q.get("core")))
        labels = {p: sorted({s.label("gpu_uuid") or "" for s in _series(exps, "client_info", pod=p, namespace=ns)})
                  for p in quotas}
        wrong = [f"{p}: label {labels[p]} vs registration {placement[p][1]}" for p in quotas
                 if placement.get(p, (None, None))[1] and labels[p]
                 and not all(_gpu_match(g, placement[p][1]) for g in labels[p])]
        checks.append(Check("gpu_label_matches_registration", "client_info gpu_uuid == registration GPU",
                            {"labels": labels}, not wrong, "; ".join(wrong)))
        checks.append(_check_effective_scaling(exps, list(quotas), ns, tol))
    status, summary = combine(checks, pass_summary=f"{len(names)} pods passed on {len(distinct)} GPUs; each pod's "
                              "quotas its own, effective quotas scaled per GPU")
    return Verdict(status, summary, checks, used, metrics, ev.pod_files())
