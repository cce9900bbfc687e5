"""FAIL-005..007: the SUT's reaction to a GPU fault injected into clients (docs/faults.md "Injected faults").

Inputs: ``plan.json`` (written by :mod:`xpushare.cases.gpu_fault_acts`: the fault, the victims, the scheduler's
facts before and after, the ``/metrics`` page after the load, the probe), ``pods.json`` and ``pods/*.log`` (W5
progress lines, docs/sut/workloads.md §inline), ``scheduler.log``. Checks:

* ``fault_injected``: every victim ended Failed and its log names the injected CUDA error (else the fault did not
  happen and nothing is judged: ERROR);
* ``scheduler_survived``: every scheduler is the same instance after the fault and answers ``/healthz``;
* ``progress_same_gpu`` / ``progress_other_gpu``: each neighbour (a load pod without the fault) succeeded and its
  iterations per second after the fault are at least ``fail_progress_min_ratio`` x those before it (rates from its
  own W5 lines, windows ``fail_rate_margin_s`` away from the victims' ends); on a lost GPU its neighbours must have
  ended (failed with it), not hung; a node with one GPU has no other-GPU neighbour (noted, not judged);
* ``failed_clients_removed``: the scheduler log has ``Removing client <id>`` for every registration of a client that
  died, and the ``/metrics`` page after the load exports none of them (``client_info``: host pid in host mode, pod
  name in Kubernetes): no ghost;
* ``metrics_recovered``: ``/metrics`` answers 200 and parses after the load;
* ``probe_after_fault``: a new pod on the faulted GPU (lost GPU: on another) succeeds;
* ``lost_gpu_reported`` (FAIL-006 only, :mod:`xpushare.judge.lost_gpu`): the GPU that NVML (the node's health
  capture after the fault) reports lost is not exported by ``/metrics`` as a present GPU (its series gone, or marked
  lost/unavailable); finding 22 of docs/findings.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from xpushare.evidence.store import Evidence
from xpushare.judge.checks import check_pods_succeeded, check_terminal, plan_skip
from xpushare.judge.lost_gpu import check_lost_gpu_reported
from xpushare.model.gpu_faults import KINDS
from xpushare.model.verdict import Check, Status, Verdict, combine
from xpushare.model.workload import WorkloadRecord
from xpushare.parsers.pod_log import Probe, quota_probes
from xpushare.parsers.scheduler_log import parse_text

__all__ = ["judge_gpu_fault", "window_rates"]


def _wall(probe: Probe, rec: WorkloadRecord | None) -> float | None:
    """Unix time of a progress line: its kubectl timestamp, else the pod's start + the loop's elapsed seconds
    (the loop starts a little after the process: the margin absorbs that)."""
    if probe.ts is not None:
        return probe.ts.timestamp()
    if rec is None or rec.started is None:
        return None
    return rec.started + probe.elapsed_s


def _rate(points: Sequence[tuple[float, Probe]]) -> float | None:
    if len(points) < 2:
        return None
    first, last = points[0][1], points[-1][1]
    span = last.elapsed_s - first.elapsed_s
    return (last.iterations - first.iterations) / span if span > 0 else None


def window_rates(log: str, rec: WorkloadRecord | None, fault_start: float, fault_end: float,
                 margin_s: float) -> tuple[float | None, float | None, int, int]:
    """Iterations per second of a W5 pod before ``fault_start - margin_s`` and after ``fault_end + margin_s`` (unix
    seconds), from its progress lines; None where a window has fewer than 2 lines. Also the lines in each window."""
    points = [(w, p) for p in quota_probes(log) if (w := _wall(p, rec)) is not None]
    before = [x for x in points if x[0] <= fault_start - margin_s]
    after = [x for x in points if x[0] >= fault_end + margin_s]
    return _rate(before), _rate(after), len(before), len(after)


def _fault_injected(ev: Evidence, fault: Mapping[str, Any], victims: Sequence[str]) -> Check:
    kind = KINDS.get(str(fault.get("kind")))
    marks = (kind.cuda_error_name, kind.description, f"CUDA error {kind.cuda_error}") if kind else ()
    seen, missing = {}, []
    for name in victims:
        rec, log = ev.pod(name), ev.logs.get(name, "")
        hit = next((m for m in marks if m in log), None)
        seen[name] = {"phase": rec.phase if rec else None, "exit_code": rec.exit_code if rec else None, "error": hit}
        if rec is None or rec.phase != "Failed" or hit is None:
            missing.append(name)
    detail = "" if not missing else (
        f"the fault did not show in {', '.join(missing)} (no failure with {kind.cuda_error_name if kind else '?'} "
        "in its log): nothing to judge")
    return Check("fault_injected", "every victim Failed with the injected CUDA error in its log", seen,
                 None if missing else True, detail)


def _scheduler_survived(plan: Mapping[str, Any]) -> Check:
    before = {f["node"]: f for f in plan.get("scheduler_before") or []}
    after = {f["node"]: f for f in plan.get("scheduler_after") or []}
    values = {"before": before, "after": after}
    if not before or any(f.get("error") for f in [*before.values(), *after.values()]) or not after:
        return Check("scheduler_survived", "same scheduler instance after the fault, healthy", values, None,
                     "the scheduler could not be observed before and after the fault")
    bad = [n for n, f in before.items() if n not in after or after[n]["instance"] != f["instance"]
           or not after[n]["healthy"] or after[n].get("restarts", 0) != f.get("restarts", 0)]
    return Check("scheduler_survived", "same scheduler instance after the fault, healthy", values, not bad,
                 f"the scheduler on {', '.join(bad)} restarted, died or is unhealthy after the fault" if bad else "")


def _progress(ev: Evidence, th: Mapping[str, Any], names: Sequence[str], start: float, end: float,
              which: str) -> tuple[Check, dict[str, Any]]:
    ratio, margin = float(th["fail_progress_min_ratio"]), float(th["fail_rate_margin_s"])
    rows: dict[str, Any] = {}
    bad, unknown = [], []
    for name in names:
        rec = ev.pod(name)
        b, a, nb, na = window_rates(ev.logs.get(name, ""), rec, start, end, margin)
        rows[name] = {"phase": rec.phase if rec else None, "gpu": rec.gpu if rec else None, "rate_before": b,
                      "rate_after": a, "lines_before": nb, "lines_after": na}
        if rec is None or rec.phase != "Succeeded":
            bad.append(f"{name} did not succeed ({rec.phase if rec else 'no record'})")
        elif b is None or a is None or b <= 0:
            unknown.append(name)
        elif a < ratio * b:
            bad.append(f"{name} slowed from {b:.2f} to {a:.2f} it/s")
    expr = f"every {which} neighbour succeeded, it/s after >= {ratio:g} x before"
    if bad:
        return Check(f"progress_{which}", expr, rows, False, "; ".join(bad)), rows
    if unknown:
        return Check(f"progress_{which}", expr, rows, None,
                     f"too few progress lines before or after the fault for {', '.join(unknown)} (fail_load_s, "
                     "fail_fault_after_s)"), rows
    return Check(f"progress_{which}", expr, rows, True), rows


def _removed(ev: Evidence, plan: Mapping[str, Any], dead: Sequence[str]) -> list[Check]:
    pages = plan.get("metrics_after") or {}
    ok = bool(pages) and all(p.get("ok") for p in pages.values())
    checks = [Check("metrics_recovered", "/metrics answers 200 and parses after the fault",
                    {n: {"file": p.get("file"), "http_code": p.get("http_code")} for n, p in pages.items()}, ok,
                    "" if ok else "no parseable /metrics page after the fault")]
    summary = parse_text(ev.text("scheduler.log") or "")
    not_logged = {}
    ghosts = []
    for name in dead:
        a, rec = ev.assignment(name), ev.pod(name)
        ids = a.client_ids if a else ()
        if not ids or any(cid not in summary.disconnected_clients for cid in ids):
            not_logged[name] = list(ids)
        for page in pages.values():
            for i, (_ns, pod) in enumerate(page.get("client_info") or []):
                pid = (page.get("client_pids") or [None] * (i + 1))[i]
                if pod == name or (rec is not None and rec.host_pid is not None and pid == rec.host_pid):
                    ghosts.append(f"{name} (client_info {pod}, host_pid {pid})")
    values = {"dead_clients": list(dead), "not_removed_in_log": not_logged, "ghosts_in_metrics": ghosts}
    if ghosts:
        checks.append(Check("failed_clients_removed", "Removing client <id> logged and no client_info left",
                             values, False, "still exported after the client died: " + ", ".join(ghosts)))
    elif not_logged:
        no_reg = [n for n, ids in not_logged.items() if not ids]
        checks.append(Check("failed_clients_removed", "Removing client <id> logged and no client_info left", values,
                            None if no_reg else False,
                            f"no registration of {', '.join(no_reg)} in scheduler.log" if no_reg else
                            "no Removing client line for " + ", ".join(not_logged)))
    elif not ok:
        checks.append(Check("failed_clients_removed", "Removing client <id> logged and no client_info left", values,
                            None, "no /metrics page to look for ghosts in"))
    else:
        checks.append(Check("failed_clients_removed", "Removing client <id> logged and no client_info left",
                            values, True))
    return checks


_PLACEHOLDER_UUID = re.compile(r'gpu_uuid="GPU-\d+"')


def _lost_gpu_series(ev: Evidence, plan: Mapping[str, Any], lost: Sequence[str]) -> list[str]:
    """What ``/metrics`` still says about a lost GPU after the loss (informational, finding 22 of docs/findings.md): the
    series labelled with its UUID, and any with NVML's placeholder UUID ``GPU-<index>`` (a failed UUID query)."""
    out = []
    for page in (plan.get("metrics_after") or {}).values():
        text = ev.text(str(page.get("file"))) if page.get("file") else None
        for line in (text or "").splitlines():
            if not line.startswith("#") and (any(f'"{u}"' in line for u in lost) or _PLACEHOLDER_UUID.search(line)):
                out.append(line)
    return out[:40]


def judge_gpu_fault(ev: Evidence, th: Mapping[str, Any], plan: Mapping[str, Any]) -> Verdict:
    """FAIL-005/006/007 (see the module docstring). Never PASS without the fault having happened."""
    skipped = plan_skip(plan, th)
    if skipped:
        return skipped
    fault = plan.get("fault") or {}
    victims = list(plan.get("victim_pods") or [])
    neighbours = list(plan.get("neighbour_pods") or [])
    checks = [_fault_injected(ev, fault, victims), check_terminal(ev.pods, victims + neighbours),
              _scheduler_survived(plan)]
    ends = [r.finished for r in ev.pods if r.name in victims and r.finished is not None]
    victim_gpus = {r.gpu for r in ev.pods if r.name in victims and r.gpu is not None}
    lost = fault.get("kind") == "device-lost"
    same = [r.name for r in ev.pods if r.name in neighbours and r.gpu in victim_gpus]
    other = [n for n in neighbours if n not in same]
    metrics: dict[str, Any] = {"fault": fault.get("kind"), "victims": victims, "victim_gpus": sorted(victim_gpus)}
    notes = []
    if ends:
        start, end = min(ends), max(ends)
        metrics["fault_window"] = [start, end]
        if same and not lost:
            check, metrics["same_gpu"] = _progress(ev, th, same, start, end, "same_gpu")
            checks.append(check)
        if other:
            check, metrics["other_gpu"] = _progress(ev, th, other, start, end, "other_gpu")
            checks.append(check)
        else:
            notes.append("no neighbour on another GPU (one GPU?): other-GPU progress not judged")
    else:
        checks.append(Check("fault_window", "the victims' end times are known", {}, None, "no victim end time"))
    dead = victims + [n for n in same if lost]
    checks += _removed(ev, plan, dead)
    probes = list(plan.get("probe_pods") or [])
    on_lost = [r.name for r in ev.pods if lost and r.name in probes and r.gpu in victim_gpus]
    if on_lost:  # Kubernetes placed it: where the device plugin offers a lost GPU nothing can run there
        checks.append(Check("probe_after_fault", "a new pod on another GPU succeeds", {"on_lost_gpu": on_lost}, None,
                            f"{', '.join(on_lost)} was placed on the lost GPU: nothing to judge about the scheduler"))
    elif probes:
        checks.append(check_pods_succeeded(ev, probes, check_name="probe_after_fault"))
    elif plan.get("probe_note"):
        notes.append(str(plan["probe_note"]))
    if lost:
        checks.append(check_lost_gpu_reported(ev, plan, sorted(victim_gpus)))
    if checks[0].ok is None:  # the fault did not happen (or the GPU was unusable before it): nothing was judged
        return Verdict(Status.ERROR, f"{checks[0].name}: {checks[0].detail}", checks, dict(th), metrics,
                       [*ev.pod_files(), "plan.json"])
    status, summary = combine(checks, pass_summary=(
        f"{fault.get('kind')} in {len(victims)} client(s): scheduler survived, "
        + (f"{len(same)} client(s) of the lost GPU ended with it, " if lost else
           f"{len(same)} same-GPU neighbour(s) and ") + f"{len(other)} other-GPU neighbour(s) kept progress, no ghost, "
        "metrics recovered, probe passed" + (", the lost GPU not exported as present" if lost else "")))
    if notes and status is Status.PASS:
        summary += " (" + "; ".join(notes) + ")"
    metrics["notes"] = notes
    if lost:
        metrics["lost_gpu_series"] = _lost_gpu_series(ev, plan, sorted(victim_gpus))
    files = [*ev.pod_files(), "plan.json", "scheduler_before_fault.txt", "scheduler_after_fault.txt", "scheduler.log"]
    files += [p["file"] for p in (plan.get("metrics_after") or {}).values() if p.get("file")]
    if lost:
        files += [f for c in checks if c.name == "lost_gpu_reported" for side in c.values.get("nvml", [])
                  for f in side.get("files", []) if ev.text(f) is not None]
    return Verdict(status, summary, checks, dict(th), metrics, files)
