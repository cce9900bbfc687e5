"""Isolation judged by what a workload could do: the memory probe's figures against the memory quota.

Pure functions over :class:`~xpushare.evidence.store.Evidence` (pod records, pod logs with the probe's
``[XPUSHARE][MEM_PROBE]`` lines, :mod:`xpushare.parsers.mem_probe`; ``annotations.jsonl`` for the dynamic
cases). For one allocation path and a memory quota of Q bytes, with the probe's step S and tolerance T
(``iso_memory_tolerance_ratio`` x Q):

* **held**: accepted <= Q + T. Evaluable only when the probe could ask for more than Q + T (its cap above it,
  or a refusal); a probe capped at or below Q + T proves nothing (ERROR, never PASS).
* **usable**: accepted >= Q - S (the quota's room can really be taken, to within one block).
* **accuracy** = accepted / Q, reported (metrics ``accuracy``), not judged.
* **outcome** (metrics ``outcome``, the verdict's summary): ``held`` (both hold), ``held, not usable`` (held, but
  less than Q - S could be taken: e.g. MPS, whose context counts against its pinned-memory limit), ``bypassed``
  (more than Q + T); ``usable_short_bytes`` = Q - accepted and ``bypass_bytes`` = accepted - Q say how far off.
* HAMi-core and MPS must show each workload in their own evidence (:mod:`xpushare.judge.sut_proof`): without
  it the case is ERROR, premise ``sut``, whatever the figures.

A probe line with ``status=unavailable`` (no torch, no CUDA, a driver without the entry point) is a missing
node prerequisite: ERROR, never a verdict on the SUT; ``status=error`` is the probe's own failure: ERROR.
Source: issue 26, docs/isolation.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from xpushare.evidence.store import Evidence
from xpushare.judge import quota as quota_judge
from xpushare.judge.checks import check_pods_succeeded, check_terminal
from xpushare.judge.performance_checks import ideal_factor, tolerance_for
from xpushare.judge.sut_proof import check_system_in_path
from xpushare.judge.thresholds import used
from xpushare.model.premises import TWO_PODS_ONE_GPU, unmet
from xpushare.model.verdict import Check, Status, Verdict, combine
from xpushare.parsers.compute_probe import ComputeProbeLine
from xpushare.parsers.compute_probe import parse_text as parse_compute_text
from xpushare.parsers.mem_probe import MemProbeLine, parse_text

__all__ = [
    "COMPUTE_HELD",
    "HELD",
    "SOURCES_AGREE",
    "USABLE",
    "ComputeShare",
    "check_compute_held",
    "check_compute_lines",
    "check_held",
    "check_one_gpu_total",
    "check_probe_line",
    "check_sources_agree",
    "check_usable",
    "compute_lines",
    "compute_share",
    "judge_compute_path",
    "judge_dynamic_memory",
    "judge_memory_path",
    "outcome_figures",
    "outcome_summary",
    "overlapping",
    "phase_line",
    "phase_lines",
    "probe_lines",
    "tolerance_bytes",
]

HELD = "accepted_bytes <= quota_bytes + tolerance_bytes"
USABLE = "accepted_bytes >= quota_bytes - step_bytes"


def probe_lines(ev: Evidence, pod: str) -> list[MemProbeLine]:
    """The pod's probe lines in order (empty without a log)."""
    return parse_text(ev.logs.get(pod) or "")


def tolerance_bytes(th: Mapping[str, Any], quota_bytes: int) -> int:
    """T = ``iso_memory_tolerance_ratio`` x the quota, in bytes (rounded down)."""
    return int(float(th["iso_memory_tolerance_ratio"]) * quota_bytes)


def check_probe_line(line: MemProbeLine | None, pod: str, *, name: str = "probe_measured") -> Check:
    """The probe measured (``status=ok``); unevaluable (ERROR) without a line or with another status."""
    expr = "a probe line with status=ok"
    if line is None:
        return Check(name, expr, {"pod": pod}, None, f"no [XPUSHARE][MEM_PROBE] line in {pod}'s log")
    values = {"pod": pod, "path": line.path, "status": line.status, "error": line.error}
    if line.status == "unavailable":
        return Check(name, expr, values, None,
                     f"node prerequisite missing for path {line.path}: {line.error} (not a verdict on the SUT)")
    if line.status != "ok":
        return Check(name, expr, values, None, f"the probe failed on path {line.path}: {line.error}")
    return Check(name, expr, values, True)


def _figures(line: MemProbeLine, quota: int, tol: int) -> dict[str, Any]:
    return {
        "accepted_bytes": line.accepted_bytes,
        "quota_bytes": quota,
        "tolerance_bytes": tol,
        "step_bytes": line.step_bytes,
        "cap_bytes": line.cap_bytes,
        "refused_bytes": line.refused_bytes,
        "error": line.error,
        "mem_free_bytes": line.mem_free,
        "mem_total_bytes": line.mem_total,
        "detail": line.detail,
        "phase": line.phase,
    }


def check_held(line: MemProbeLine, quota: int, tol: int, *, name: str = "quota_held") -> Check:
    """accepted <= Q + T; unevaluable when the probe never asked beyond Q + T (capped, no refusal)."""
    values = _figures(line, quota, tol)
    if line.accepted_bytes > quota + tol:
        return Check(name, HELD, values, False,
                     f"{line.path} held {_mib(line.accepted_bytes)} under a quota of {_mib(quota)} "
                     f"(+{_mib(tol)} tolerance): bypassed")
    if not line.refused and line.cap_bytes <= quota + tol:
        return Check(name, HELD, values, None,
                     f"the probe's cap {_mib(line.cap_bytes)} is not above the quota + tolerance: the card's free "
                     "memory or the probe's flags left nothing to refuse")
    return Check(name, HELD, values, True)


def check_usable(line: MemProbeLine, quota: int, *, name: str = "quota_usable") -> Check:
    """accepted >= Q - S; unevaluable when the cap itself was below Q - S."""
    values = _figures(line, quota, 0)
    if line.accepted_bytes >= quota - line.step_bytes:
        return Check(name, USABLE, values, True)
    if not line.refused and line.cap_bytes < quota - line.step_bytes:
        return Check(name, USABLE, values, None,
                     f"the probe's cap {_mib(line.cap_bytes)} is below the quota: the card cannot show it")
    return Check(name, USABLE, values, False,
                 f"{line.path} got only {_mib(line.accepted_bytes)} of a {_mib(quota)} quota "
                 f"(refused {_mib(line.refused_bytes)}: {line.error})")


def judge_memory_path(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    """ISO-0xx: one allocation path under a memory quota holds it and can use it.

    ``plan``: ``pods`` (one), ``path`` (the probe's ``--path``), ``quota_bytes``, ``quota_source``
    (``env`` | ``annotation``). Thresholds: ``iso_memory_tolerance_ratio``. Metrics: ``accuracy``
    (accepted / quota), ``accepted_bytes``, ``quota_bytes``, ``held`` (True/False/None) for the isolation table.
    """
    pod = plan["pods"][0]
    quota = int(plan["quota_bytes"])
    tol = tolerance_bytes(th, quota)
    lines = probe_lines(ev, pod)
    line = lines[0] if lines else None
    checks: list[Check] = [check_terminal(ev.pods, [pod]), check_probe_line(line, pod)]
    metrics: dict[str, Any] = {"path": plan.get("path"), "quota_bytes": quota, "quota_source": plan.get("quota_source")}
    metrics.update(sut=plan.get("sut"), quota_var=plan.get("quota_var"))
    proof = check_system_in_path(ev, plan, [pod])
    if proof is not None:
        checks.append(proof)
    usable: Check | None = None
    if line is not None and line.status == "ok":
        held = check_held(line, quota, tol)
        usable = check_usable(line, quota)
        checks += [held, usable]
        metrics.update(accepted_bytes=line.accepted_bytes, accuracy=round(line.accepted_bytes / quota, 4),
                       held=held.ok, usable=usable.ok, refused_error=line.error, detail=line.detail,
                       **outcome_figures(held.ok, usable.ok, line.accepted_bytes, quota))
    status, summary = combine(checks, pass_summary="")
    if proof is not None and proof.ok is None:  # a quota the workload was never under says nothing of the system
        return Verdict(Status.ERROR, proof.detail, checks, used(th), metrics, ev.pod_files())
    if line is not None and usable is not None and status in (Status.PASS, Status.FAIL):
        summary = outcome_summary(line, quota, metrics.get("outcome"), status, summary)
    return Verdict(status, summary, checks, used(th), metrics, ev.pod_files())


def outcome_figures(held: bool | None, usable: bool | None, accepted: int, quota: int) -> dict[str, Any]:
    """The metrics that keep "held" and "usable" apart: ``outcome`` (``held`` | ``held, not usable`` |
    ``bypassed`` | ``not judged``), ``bypass_bytes`` (accepted - quota, > 0 when bypassed) and
    ``usable_short_bytes`` (quota - accepted, > 0 when less than the quota could be taken), with each as a
    fraction of the quota (``bypass_ratio``, ``usable_short_ratio``)."""
    outcome = ("bypassed" if held is False else "held" if held and usable else
               "held, not usable" if held and usable is False else "not judged")
    return {"outcome": outcome, "bypass_bytes": max(0, accepted - quota),
            "bypass_ratio": round(max(0, accepted - quota) / quota, 4),
            "usable_short_bytes": max(0, quota - accepted),
            "usable_short_ratio": round(max(0, quota - accepted) / quota, 4)}


def outcome_summary(line: MemProbeLine, quota: int, outcome: Any, status: Status, fallback: str) -> str:
    """The verdict's one line for a measured path: held (PASS), held but not usable, or bypassed, with how far off."""
    got, q = line.accepted_bytes, quota
    if status is Status.PASS:
        return (f"{line.path}: held at {_mib(got)} of a {_mib(q)} quota "
                f"(accuracy {got / q:.3f}; refused: {line.error})")
    if outcome == "bypassed":
        return (f"quota_held: {line.path} bypassed: held {_mib(got)} under a {_mib(q)} quota "
                f"(+{_mib(got - q)}, {got / q - 1:+.1%}{'; the probe stopped at its cap' if not line.refused else ''})")
    if outcome == "held, not usable":
        return (f"quota_usable: {line.path} held but not usable: only {_mib(got)} of a {_mib(q)} quota could be "
                f"allocated "
                f"(-{_mib(q - got)}, {got / q - 1:+.1%}; refused: {line.error})")
    return fallback


def _mib(nbytes: int) -> str:
    return f"{nbytes / 2**20:.0f} MiB"


def phase_lines(
    lines: Sequence[MemProbeLine], started: float | None, boundary: float, settle_s: float
) -> tuple[list[MemProbeLine], list[MemProbeLine]]:
    """Probe lines measured before ``boundary`` (unix s) and those begun at least ``settle_s`` after it.

    A line's time is its ``kubectl logs --timestamps`` prefix when present, else the process start
    (``started``, unix s) + its ``elapsed_s``; lines without either are in neither list.
    """
    before: list[MemProbeLine] = []
    after: list[MemProbeLine] = []
    for line in lines:
        when = line.timestamp.timestamp() if line.timestamp is not None else (
            started + line.elapsed_s if started is not None else None)
        if when is None:
            continue
        if when < boundary:
            before.append(line)
        elif when >= boundary + settle_s:
            after.append(line)
    return before, after


def judge_dynamic_memory(
    ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any], *, require_pass: bool
) -> Verdict:
    """FUNC-010/011: the log-line checks of :func:`xpushare.judge.quota.judge_dynamic`, plus what the probe could
    hold through ``cuMemAlloc`` in each phase.

    ``plan``: ``pods`` (the probe), ``memory_limits_bytes`` (the initial quota, then one per change, in order),
    ``changes``. Phases: the last probe line before the first annotate call (``annotations.jsonl``) is judged
    against the initial quota; for each change, the first line begun ``dynamic_probe_settle_s`` or more after
    its annotate call (and before the next call) against the new quota: held (accepted <= Q + T) and usable
    (accepted >= Q - step). So a raise whose new room cannot be used, or a decrease that still lets the old
    quota through, is FAIL whatever the log lines say. A phase without a probe line is not evaluable (ERROR).
    Thresholds: ``iso_memory_tolerance_ratio``, ``dynamic_probe_settle_s`` and those of ``judge_dynamic``.
    """
    base = quota_judge.judge_dynamic(ev, th, plan, kind="memory", require_pass=require_pass)
    pod = plan["pods"][0]
    limits = [int(b) for b in plan.get("memory_limits_bytes") or []]
    times = [float(c["time"]) for c in quota_judge.annotation_calls(ev)]
    lines = [x for x in probe_lines(ev, pod) if x.status == "ok"]
    record = ev.pod(pod)
    started = record.started if record is not None else None
    checks = list(base.checks)
    phases: dict[str, Any] = {}
    if not limits:
        checks.append(Check("probe_phases", "plan.json records memory_limits_bytes", {}, None,
                            "plan.json has no memory_limits_bytes: no behaviour to judge"))
    found, measured = phase_checks(lines, started, times, limits, th)
    checks += found
    for label, quota, chosen in measured:
        phases[label] = {"quota_bytes": quota, "accepted_bytes": chosen.accepted_bytes, "round": chosen.round,
                         "accuracy": round(chosen.accepted_bytes / quota, 4)}
    status, summary = combine(checks, pass_summary=base.summary)
    if status is Status.PASS and phases:
        summary += "; probe held " + ", ".join(
            f"{_mib(p['accepted_bytes'])} of {_mib(p['quota_bytes'])}" for p in phases.values())
    return Verdict(status, summary, checks, used(th), {**base.metrics, "probe_phases": phases}, base.evidence)


def phase_checks(
    lines: Sequence[MemProbeLine], started: float | None, times: Sequence[float], limits: Sequence[int],
    th: Mapping[str, Any],
) -> tuple[list[Check], list[tuple[str, int, MemProbeLine]]]:
    """Held and usable checks for each phase of a dynamic memory quota (``limits``: bytes, the initial quota then
    one per change; ``times``: the annotate calls' epoch seconds; phases as :func:`phase_line`), named
    ``initial_held``/``_usable`` and ``change<i>_held``/``_usable``; a phase without a line is
    ``<label>_measured``, not evaluable. Thresholds: ``dynamic_probe_settle_s``, ``iso_memory_tolerance_ratio``.
    Returns the checks and, per measured phase, its label, quota and the line judged."""
    settle = float(th["dynamic_probe_settle_s"])
    checks: list[Check] = []
    measured: list[tuple[str, int, MemProbeLine]] = []
    for i, quota in enumerate(limits):
        label = "initial" if i == 0 else f"change{i}"
        chosen = phase_line(lines, started, times, i, settle)
        if chosen is None:
            checks.append(Check(f"{label}_measured", "a probe line in the phase", {"quota_bytes": quota}, None,
                                f"no probe measurement in phase {label} (quota {_mib(quota)})"))
            continue
        checks += [check_held(chosen, quota, tolerance_bytes(th, quota), name=f"{label}_held"),
                   check_usable(chosen, quota, name=f"{label}_usable")]
        measured.append((label, quota, chosen))
    return checks, measured


def phase_line(
    lines: Sequence[MemProbeLine], started: float | None, times: Sequence[float], phase: int, settle_s: float
) -> MemProbeLine | None:
    """Phase 0: the last line before the first annotate call; phase i: the first line begun ``settle_s`` or more
    after call i (1-based) and before call i + 1. None when the phase has no line (or its call is missing)."""
    if phase == 0:
        if not times:
            return None
        before, _ = phase_lines(lines, started, times[0], settle_s)
        return before[-1] if before else None
    if phase - 1 >= len(times):
        return None
    _, after = phase_lines(lines, started, times[phase - 1], settle_s)
    if phase < len(times):
        after, _ = phase_lines(after, started, times[phase], 0.0)  # only those before the next call
    return after[0] if after else None


# ---------------------------------------------------------------------------------------------------------
# Compute: the share of the GPU's time one launch path got under a core quota (ISO-011..016)
# ---------------------------------------------------------------------------------------------------------

COMPUTE_HELD = "|busy_events / ideal_share - 1| <= tolerance"
SOURCES_AGREE = "0 < kernel_ms_events <= kernel_ms_wall x (1 + iso_compute_sources_tolerance)"


@dataclass(frozen=True)
class ComputeShare:
    """The GPU-time share of one probe over its judged intervals.

    ``kernel_ms_events`` / ``kernel_ms_wall``: the shortest kernel over the intervals by each clock (ms);
    ``busy_events`` / ``busy_wall`` = kernels x that / wall (fractions); ``kernels_per_s`` = kernels / wall.
    """

    intervals: int
    kernels: int
    wall_s: float
    kernel_ms_events: float
    kernel_ms_wall: float

    @property
    def busy_events(self) -> float:
        return self.kernels * self.kernel_ms_events / 1000.0 / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def busy_wall(self) -> float:
        return self.kernels * self.kernel_ms_wall / 1000.0 / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def kernels_per_s(self) -> float:
        return self.kernels / self.wall_s if self.wall_s > 0 else 0.0

    def figures(self) -> dict[str, Any]:
        return {"intervals": self.intervals, "kernels": self.kernels, "wall_s": round(self.wall_s, 3),
                "kernels_per_s": round(self.kernels_per_s, 3), "kernel_ms_events": round(self.kernel_ms_events, 4),
                "kernel_ms_wall": round(self.kernel_ms_wall, 4), "busy_events": round(self.busy_events, 4),
                "busy_wall": round(self.busy_wall, 4)}


def compute_lines(ev: Evidence, pod: str) -> list[ComputeProbeLine]:
    """The pod's compute-probe lines in order (empty without a log)."""
    return parse_compute_text(ev.logs.get(pod) or "")


def compute_share(lines: Sequence[ComputeProbeLine], skip: int) -> ComputeShare | None:
    """The share over the ``status=ok`` lines from interval ``skip`` on (the first ones include the start-up);
    None when no such line. The kernel time is the minimum over those lines (an undelayed kernel)."""
    judged = [x for x in lines if x.status == "ok" and x.interval >= skip and x.wall_s > 0]
    if not judged:
        return None
    return ComputeShare(len(judged), sum(x.kernels for x in judged), sum(x.wall_s for x in judged),
                        min(x.kernel_ms_events for x in judged), min(x.kernel_ms_wall for x in judged))


def overlapping(lines: Sequence[ComputeProbeLine], window: Sequence[ComputeProbeLine]) -> list[ComputeProbeLine] | None:
    """The ``lines`` whose interval lies at least half inside the span of the ``window`` lines, by their
    ``kubectl logs --timestamps`` prefixes (a line is printed at its interval's end; it began ``wall_s`` earlier):
    a neighbour judged only while the probe ran, whatever its own interval numbers (a neighbour kept waiting
    through the probe's whole run shows as one long interval). None without timestamps on both sides."""
    stamped = [x for x in window if x.timestamp is not None]
    if not stamped or not lines or any(x.timestamp is None for x in lines):
        return None
    w_start = min(x.timestamp.timestamp() - x.wall_s for x in stamped if x.timestamp is not None)
    w_end = max(x.timestamp.timestamp() for x in stamped if x.timestamp is not None)
    out = []
    for x in lines:
        assert x.timestamp is not None
        end = x.timestamp.timestamp()
        inside = min(end, w_end) - max(end - x.wall_s, w_start)
        if x.wall_s > 0 and inside >= x.wall_s / 2:
            out.append(x)
    return out


def check_compute_lines(lines: Sequence[ComputeProbeLine], pod: str, skip: int, *,
                        name: str = "probe_measured") -> Check:
    """Every line ``status=ok`` and at least one past the skipped intervals; unavailable/error: ERROR."""
    expr = f"status=ok probe lines from interval {skip} on"
    bad = next((x for x in lines if x.status != "ok"), None)
    values: dict[str, Any] = {"pod": pod, "lines": len(lines)}
    if bad is not None:
        values.update(path=bad.path, status=bad.status, error=bad.error)
        why = "node prerequisite missing" if bad.status == "unavailable" else "the probe failed"
        suffix = " (not a verdict on the SUT)" if bad.status == "unavailable" else ""
        return Check(name, expr, values, None, f"{why} for path {bad.path}: {bad.error}{suffix}")
    if not any(x.interval >= skip for x in lines):
        return Check(name, expr, values, None, f"no [XPUSHARE][COMPUTE_PROBE] line past interval {skip} in {pod}'s log")
    return Check(name, expr, values, True)


def check_sources_agree(share: ComputeShare, th: Mapping[str, Any], *, name: str = "clocks_agree") -> Check:
    """The GPU's events and the process's clock are consistent: the events' kernel time is positive and not longer
    than the process saw a whole batch take per kernel (``kernel_ms_wall``, an upper bound that includes launch
    overheads and waits). Otherwise the events cannot be trusted: not evaluable (ERROR), never a verdict."""
    tol = float(th["iso_compute_sources_tolerance"])
    values = {**share.figures(), "tolerance": tol}
    if share.kernel_ms_events <= 0:
        return Check(name, SOURCES_AGREE, values, None, "no GPU time measured by the events")
    gap = share.kernel_ms_events / share.kernel_ms_wall - 1 if share.kernel_ms_wall > 0 else float("inf")
    values["gap"] = round(gap, 4)
    if gap > tol:
        return Check(name, SOURCES_AGREE, values, None,
                     f"the events give {share.kernel_ms_events:.3f} ms per kernel, longer than the process's own clock "
                     f"saw ({share.kernel_ms_wall:.3f} ms, {gap:+.1%} > {tol:.0%}): the measurement is not trustworthy")
    return Check(name, SOURCES_AGREE, values, True)


def check_one_gpu_total(share: ComputeShare, neighbour: ComputeShare, th: Mapping[str, Any], *,
                        name: str = "shares_fit_one_gpu") -> Check:
    """The probe's and its neighbour's GPU shares, measured over the same intervals of one GPU, add up to at most
    the whole GPU (1 + ``iso_compute_sources_tolerance``). More than the whole GPU means the kernels' durations do
    not measure the GPU time each got (e.g. a kernel that spins on a clock lasts the same wall time while another
    context time-slices the GPU with it): not evaluable (ERROR), never a verdict on the SUT."""
    tol = float(th["iso_compute_sources_tolerance"])
    total = share.busy_events + neighbour.busy_events
    values = {"probe_share": round(share.busy_events, 4), "neighbour_share": round(neighbour.busy_events, 4),
              "total": round(total, 4), "tolerance": tol}
    if total > 1 + tol:
        return Check(name, f"probe + neighbour <= 1 + {tol}", values, None,
                     f"the probe's and the neighbour's shares add up to {total:.3f} of one GPU (> 1 + {tol:.0%}): "
                     "the kernels' durations do not measure the GPU time each got")
    return Check(name, f"probe + neighbour <= 1 + {tol}", values, True)


def check_compute_held(share: ComputeShare, ideal: float, tol: float, tol_name: str, *,
                       name: str = "core_quota_held") -> Check:
    """``|busy / ideal - 1| <= tol`` (seed 000 §6 P1: ±8 % alone, ±10 % beside a neighbour)."""
    error = share.busy_events / ideal - 1
    values = {**share.figures(), "ideal_share": round(ideal, 4), "error": round(error, 4), "tolerance": tol,
              "tolerance_param": tol_name}
    expr = f"{COMPUTE_HELD} ({tol_name} = {tol})"
    if abs(error) <= tol:
        return Check(name, expr, values, True)
    what = "bypassed: more than its quota" if error > 0 else "starved: less than its quota"
    return Check(name, expr, values, False,
                 f"GPU share {share.busy_events:.3f} against the quota's {ideal:.3f} ({error:+.1%}, beyond "
                 f"±{tol:.0%}): {what}")


def judge_compute_path(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    """ISO-011..016: one kernel launch path under a core quota gets the quota's share of the GPU's time.

    ``plan``: ``pods`` (the probe first, then the neighbour if any), ``path``, ``core_limit`` (percent),
    ``neighbour`` (pod name or None), ``neighbour_core_limit`` (percent), ``quota_source``. The probe's share
    is kernels x the shortest kernel (by the GPU's events) / wall time over the intervals from
    ``iso_compute_skip_intervals`` on; the ideal share is ``1 / ideal_factor(core_limit, co_quotas)``
    (docs/sut/scheduler.md §compute-quota: budgets scaled when the quotas of one GPU sum past 100). Checks: every
    pod ended, every pod succeeded (a probe whose status is not ok exits 1: its line is the ERROR's reason), the probe
    measured, the two clocks are consistent (:func:`check_sources_agree`, ``iso_compute_sources_tolerance``;
    else ERROR), and ``|share / ideal - 1|`` within ``perf_quota_tolerance``
    alone or ``perf_mixed_tolerance`` beside a neighbour (seed 000 §6 P1). Beside a neighbour its share, over its
    intervals that overlap the probe's judged ones (:func:`overlapping`), is held to its own quota the same way
    (``neighbour_quota_held``: a path that takes the neighbour's time FAILs even when its own share happens to
    match its quota). With a neighbour, the pair must share one GPU (``pods.json`` node/gpu from the
    registration lines): not co-located or unknown is ERROR, premise ``two-pods-one-gpu``, never PASS.
    Metrics for the isolation table: ``path``, ``core_limit``, ``held``, ``accuracy`` (share / ideal), the
    share's figures and, with a neighbour, its share and ``neighbour_held``.
    """
    pods = list(plan["pods"])
    probe, neighbour = pods[0], plan.get("neighbour")
    skip = int(th["iso_compute_skip_intervals"])
    q = float(plan["core_limit"])
    co = [q, float(plan["neighbour_core_limit"])] if neighbour else [q]
    ideal = 1 / ideal_factor(q, co)
    tol, tol_name = tolerance_for(th, plan, mixed=bool(neighbour))
    lines = compute_lines(ev, probe)
    measured = check_compute_lines(lines, probe, skip)
    # a probe that could not measure exits 1: its line (ERROR) says why, its exit must not turn that into FAIL
    must_succeed = [p for p in pods if p != probe or measured.ok]
    checks: list[Check] = [check_terminal(ev.pods, pods), check_pods_succeeded(ev, must_succeed), measured]
    proof = check_system_in_path(ev, plan, pods)
    if proof is not None:
        checks.append(proof)
    metrics: dict[str, Any] = {"path": plan.get("path"), "core_limit": int(q), "quota_source": plan.get("quota_source"),
                               "sut": plan.get("sut"), "quota_var": plan.get("quota_var"),
                               "ideal_share": round(ideal, 4), "neighbour": neighbour,
                               "neighbour_core_limit": plan.get("neighbour_core_limit")}
    neighbour_held: Check | None = None
    n_share: ComputeShare | None = None
    if neighbour:
        n_lines = compute_lines(ev, neighbour)
        checks.append(check_compute_lines(n_lines, neighbour, skip, name="neighbour_measured"))
        beside = overlapping(n_lines, [x for x in lines if x.interval >= skip])
        n_share = compute_share(n_lines, skip) if beside is None else compute_share(beside, 0)
        if n_share is not None:
            metrics["neighbour_share"] = n_share.figures()
            n_ideal = 1 / ideal_factor(co[1], co)
            neighbour_held = check_compute_held(n_share, n_ideal, tol, tol_name, name="neighbour_quota_held")
    share = compute_share(lines, skip)
    held: Check | None = None
    if share is not None:
        metrics.update(share.figures())
        checks.append(check_sources_agree(share, th))
        total = check_one_gpu_total(share, n_share, th) if n_share is not None else None
        if total is not None:
            checks.append(total)
        if total is None or total.ok:  # shares that cannot be GPU time are no evidence of a quota, either way
            held = check_compute_held(share, ideal, tol, tol_name)
        else:
            neighbour_held = None
    status, summary = combine(checks, pass_summary="")
    if neighbour and status is Status.PASS:
        a, b = ev.pod(probe), ev.pod(neighbour)
        placement = {p.name: [p.node, p.gpu] for p in (a, b) if p}
        metrics["placement"] = placement
        if a is None or b is None or a.gpu is None or b.gpu is None or (a.node, a.gpu) != (b.node, b.gpu):
            return Verdict(Status.ERROR, unmet(TWO_PODS_ONE_GPU, "co-location of the probe and its neighbour on one "
                           f"GPU not confirmed ({placement})"), checks, used(th), metrics, ev.pod_files())
    if held is not None:
        checks.append(held)
    if neighbour and neighbour_held is not None:  # the probe's path must not take the neighbour's share either
        checks.append(neighbour_held)
        metrics["neighbour_held"] = neighbour_held.ok
    if held is not None:
        metrics.update(held=held.ok, accuracy=round(share.busy_events / ideal, 4) if share else None,
                       error=held.values.get("error"))
    status, summary = combine(checks, pass_summary="")
    if proof is not None and proof.ok is None:
        return Verdict(Status.ERROR, proof.detail, checks, used(th), metrics, ev.pod_files())
    if status is Status.PASS and share is not None:
        next_to = ""
        if neighbour:
            n_fig = metrics.get("neighbour_share") or {}
            next_to = (f" beside a {metrics['neighbour_core_limit']} % neighbour (its share "
                       f"{n_fig.get('busy_events', float('nan')):.3f})")
        summary = (f"{plan.get('path')}: GPU share {share.busy_events:.3f} under a {int(q)} % core quota{next_to} "
                   f"(ideal {ideal:.3f}, error {share.busy_events / ideal - 1:+.1%}, within ±{tol:.0%})")
    return Verdict(status, summary, checks, used(th), metrics, ev.pod_files())
