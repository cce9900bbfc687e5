"""The memory probe's figures added to the memory-quota cases' log-line verdicts (``judge/quota_probe``): a
static quota (FUNC-006/007, COMBO-001) and one changed while the probe runs (COMBO-005), held / usable, and
never PASS on a missing or failed probe."""

from __future__ import annotations

import importlib
import json
import sys
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.paths import REPO_ROOT
from xpushare.evidence.store import Evidence
from xpushare.judge.quota_probe import add_phase_figures, add_soak_figures, add_static_figures
from xpushare.model.verdict import Check, Status, Verdict
from xpushare.model.workload import WorkloadRecord

WORKLOADS = REPO_ROOT / "xpushare" / "data" / "workloads"
sys.path.insert(0, str(WORKLOADS))
probe: Any = importlib.import_module("mem_probe")

MIB = 1 << 20
TH = {"iso_memory_tolerance_ratio": 0.02, "dynamic_probe_settle_s": 7}
WORK, PROBE = "func-006-w2-quota-low", "func-006-probe"
T0 = 1_790_000_000.0


def line(accepted: int, *, quota: int = 256 * MIB, refused: int = 64 * MIB, status: str = "ok",
         error: str = "cuMemAlloc_v2 returned CUDA_ERROR_OUT_OF_MEMORY(2)", at: float | None = None,
         round_no: int = 0) -> str:
    a = probe.Attempt("cuMemAlloc", 2 * quota, 64 * MIB, accepted, refused, error, status, 1, 2, "-")
    text = str(probe.format_line(a, round_no, "start", 0.5))
    if at is None:
        return text
    stamp = datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f000Z")
    return f"{stamp} {text}"


def base(status: Status = Status.PASS) -> Verdict:
    return Verdict(status, "allocation refused as expected", [Check("pod_rejected", "marker", {}, True)],
                   {"pod_timeout_s": 300}, {"oom_markers": 1}, [f"pods/{WORK}.log"])


def static_evidence(probe_log: str | None) -> Evidence:
    recs = [WorkloadRecord(WORK, "Failed", 1, "n1", started=T0, finished=T0 + 5, log=f"pods/{WORK}.log")]
    logs = {WORK: "cuMemAlloc rejected\n"}
    if probe_log is not None:
        recs.append(WorkloadRecord(PROBE, "Succeeded", 0, "n1", started=T0 + 6, finished=T0 + 8,
                                   log=f"pods/{PROBE}.log"))
        logs[PROBE] = probe_log + "\nPASS\n--- 1.0 seconds ---\n"
    return Evidence.from_parts(recs, logs)


PLAN = {"pods": [WORK, PROBE], "quota_probe": {"pod": PROBE, "path": "cuMemAlloc", "quota_bytes": 256 * MIB,
                                               "quota_source": "env", "memory_limit": "256Mi"}}


def test_a_quota_held_and_usable_keeps_pass_and_adds_the_probe_figures() -> None:
    v = add_static_figures(base(), static_evidence(line(256 * MIB)), TH, PLAN)
    assert v.status is Status.PASS, v.summary
    assert v.summary.startswith("allocation refused as expected; probe (cuMemAlloc) held 256 MiB of a 256 MiB")
    fig = v.metrics["quota_probe"]
    assert (fig["accepted_bytes"], fig["refused_bytes"], fig["accuracy"], fig["quota_source"]) == (
        256 * MIB, 64 * MIB, 1.0, "env")
    assert v.metrics["oom_markers"] == 1 and v.thresholds["iso_memory_tolerance_ratio"] == 0.02
    assert [c.name for c in v.checks][-3:] == ["probe_measured", "probe_quota_held", "probe_quota_usable"]


def test_the_log_lines_pass_but_the_probe_holds_twice_the_quota() -> None:
    v = add_static_figures(base(), static_evidence(line(512 * MIB, refused=0, error="none")), TH, PLAN)
    assert v.status is Status.FAIL and v.summary.startswith("probe_quota_held:"), v.summary
    assert "bypassed" in v.summary


def test_a_quota_that_cannot_be_used_is_fail() -> None:
    v = add_static_figures(base(), static_evidence(line(64 * MIB)), TH, PLAN)
    assert v.status is Status.FAIL and v.summary.startswith("probe_quota_usable:"), v.summary


@pytest.mark.parametrize("probe_log", [None, line(0, refused=0, status="unavailable", error="no libcuda")])
def test_no_probe_figures_is_error_never_pass(probe_log: str | None) -> None:
    v = add_static_figures(base(), static_evidence(probe_log), TH, PLAN)
    assert v.status is Status.ERROR and "probe_measured" in v.summary, v.summary


def test_skip_and_runs_stored_before_the_probe_are_left_as_they_were() -> None:
    skipped = base(Status.SKIP)
    assert add_static_figures(skipped, static_evidence(None), TH, PLAN) is skipped
    old = base()
    assert add_static_figures(old, static_evidence(None), TH, {"pods": [WORK]}) is old


# ------------------------------------------------------------------------------ a quota changed while it runs

DYN = "combo-005-probe"
LIMITS = [512 * MIB, 1024 * MIB, 256 * MIB]
CALLS = [T0 + 10, T0 + 20]


def dynamic_evidence(accepted: list[tuple[float, int]]) -> Evidence:
    log = "\n".join(line(a, quota=1024 * MIB, at=T0 + t, round_no=i) for i, (t, a) in enumerate(accepted))
    rec = WorkloadRecord(DYN, "Succeeded", 0, "n1", started=T0, finished=T0 + 30, log=f"pods/{DYN}.log")
    calls = "".join(json.dumps({"time": t, "pod": DYN, "annotations": {}}) + "\n" for t in CALLS)
    return Evidence.from_parts([rec], {DYN: log + "\nPASS\n"}, {"annotations.jsonl": calls})


DPLAN = {"pods": [DYN], "memory_limits_bytes": LIMITS, "changes": []}


def test_each_phase_is_judged_on_its_own_quota() -> None:
    ev = dynamic_evidence([(5, 512 * MIB), (9, 512 * MIB), (18, 1024 * MIB), (28, 256 * MIB)])
    v = add_phase_figures(base(), ev, TH, DPLAN)
    assert v.status is Status.PASS, v.summary
    assert {k: p["accepted_bytes"] // MIB for k, p in v.metrics["probe_phases"].items()} == {
        "initial": 512, "change1": 1024, "change2": 256}
    assert "probe held 512 MiB of 512 MiB, 1024 MiB of 1024 MiB, 256 MiB of 256 MiB" in v.summary
    assert v.thresholds["dynamic_probe_settle_s"] == 7


def test_a_raise_not_usable_and_a_decrease_not_held_fail_their_phase() -> None:
    raise_ignored = dynamic_evidence([(9, 512 * MIB), (18, 512 * MIB), (28, 256 * MIB)])
    v = add_phase_figures(base(), raise_ignored, TH, DPLAN)
    assert v.status is Status.FAIL and v.summary.startswith("change1_usable:"), v.summary
    decrease_ignored = dynamic_evidence([(9, 512 * MIB), (18, 1024 * MIB), (28, 1024 * MIB)])
    v = add_phase_figures(base(), decrease_ignored, TH, DPLAN)
    assert v.status is Status.FAIL and v.summary.startswith("change2_held:"), v.summary


def test_a_phase_measured_before_the_change_settled_is_not_evaluable() -> None:
    v = add_phase_figures(base(), dynamic_evidence([(9, 512 * MIB), (12, 512 * MIB), (28, 256 * MIB)]), TH, DPLAN)
    assert v.status is Status.ERROR and v.summary.startswith("change1_measured:"), v.summary


def test_a_probe_beside_the_workload_counts_only_the_calls_on_itself() -> None:
    # COMBO-004: the W5 pod gets every change, the probe only the memory ones
    ev = dynamic_evidence([(9, 512 * MIB), (18, 1024 * MIB), (28, 256 * MIB)])
    other = "".join(json.dumps({"time": t, "pod": "combo-004-w5", "annotations": {}}) + "\n" for t in (T0 + 5, T0 + 15))
    ev = Evidence.from_parts(ev.pods, ev.logs, {"annotations.jsonl": other + ev.text("annotations.jsonl")})
    v = add_phase_figures(base(), ev, TH, {**DPLAN, "pods": ["combo-004-w5", DYN], "memory_probe": DYN})
    assert v.status is Status.PASS, v.summary
    assert v.metrics["probe_phases"]["initial"]["accepted_bytes"] == 512 * MIB


# ------------------------------------------------------------------------------ STAB-004: every phase of a soak

SOAK_TH = {**TH, "probe_interval_s": 1, "dynamic_probe_start_delay_s": 1}
SOAK_PLAN = {"memory_probe_suffix": "-probe", "memory_base_bytes": 512 * MIB}
SPOD = "stab-004-r1-probe"
#: The soak's quota calls on the probe pod (s after its start): 512 -> 128 -> 384 MiB.
SOAK_CALLS = [(12.0, "128Mi"), (24.0, "384Mi")]


def soak_line(accepted: int, elapsed: float, round_no: int, *, refused: int = 64 * MIB) -> str:
    """A probe line as ``kubectl logs`` without timestamps gives it (the soak's logs): timed by ``elapsed_s``."""
    a = probe.Attempt("cuMemAlloc", 768 * MIB, 64 * MIB, accepted, refused,
                      "cuMemAlloc_v2 returned CUDA_ERROR_OUT_OF_MEMORY(2)", "ok", 1, 2, "-")
    return str(probe.format_line(a, round_no, "loop", elapsed))


def soak_evidence(accepted: list[tuple[float, int]] | None, *, finished: float = 45.0,
                  calls: list[tuple[float, str]] = SOAK_CALLS) -> Evidence:
    rounds = {"round": 1, "status": "completed", "detail": {
        "stab-004-r1-w5-1": {"phase": "Succeeded", "started": T0, "finished": T0 + finished},
        SPOD: {"phase": "Succeeded", "started": T0, "finished": T0 + finished}}}
    events = [{"kind": "annotate", "key": "memory", "value": v, "pods": ["stab-004-r1-w5-1", SPOD], "round": 1,
               "at": T0 + t + 0.5, "times": {SPOD: T0 + t, "stab-004-r1-w5-1": T0 + t + 0.5}} for t, v in calls]
    files = {"soak/rounds.jsonl": json.dumps(rounds) + "\n",
             "soak/events.jsonl": "".join(json.dumps(e) + "\n" for e in events)}
    if accepted is not None:
        files[f"soak/probe-pods/{SPOD}.log"] = "\n".join(
            soak_line(a, t, i) for i, (t, a) in enumerate(accepted)) + "\nPASS\n"
    return Evidence.from_parts([], {}, files)


HEALTHY_SOAK = [(3, 512 * MIB), (10, 512 * MIB), (20, 128 * MIB), (32, 384 * MIB), (40, 384 * MIB)]


def test_stab004_judges_every_phase_of_the_soak_on_its_quota() -> None:
    v = add_soak_figures(base(), soak_evidence(HEALTHY_SOAK), SOAK_TH, SOAK_PLAN)
    assert v.status is Status.PASS, v.summary
    phases = v.metrics["probe_phases"]
    assert {k: (p["direction"], p["quota_bytes"] // MIB, p["accepted_bytes"] // MIB) for k, p in phases.items()} == {
        "r1_initial": ("start", 512, 512), "r1_change1": ("decrease", 128, 128), "r1_change2": ("raise", 384, 384)}
    assert "memory probe held and used its quota in 3 phase(s) (1 raise(s), 1 decrease(s))" in v.summary
    assert [c.name for c in v.checks][-3:] == ["probe_measured", "probe_quota_held", "probe_quota_usable"]
    assert v.thresholds["probe_interval_s"] == 1 and v.thresholds["iso_memory_tolerance_ratio"] == 0.02


def test_stab004_a_decrease_logged_but_not_enforced_is_fail() -> None:
    ignored = [(10, 512 * MIB), (20, 512 * MIB), (32, 384 * MIB)]
    v = add_soak_figures(base(), soak_evidence(ignored), SOAK_TH, SOAK_PLAN)
    assert v.status is Status.FAIL and v.summary.startswith("probe_quota_held: r1_change1:"), v.summary
    assert v.metrics["probe_phases"]["r1_change1"]["held"] is False


def test_stab004_a_raise_logged_but_not_enforced_is_fail() -> None:
    ignored = [(10, 512 * MIB), (20, 128 * MIB), (32, 128 * MIB)]
    v = add_soak_figures(base(), soak_evidence(ignored), SOAK_TH, SOAK_PLAN)
    assert v.status is Status.FAIL and v.summary.startswith("probe_quota_usable: r1_change2:"), v.summary


@pytest.mark.parametrize("accepted", [None, [(10, 512 * MIB), (20, 128 * MIB)]])
def test_stab004_a_missing_probe_log_or_phase_line_is_error_never_pass(accepted: list | None) -> None:
    v = add_soak_figures(base(), soak_evidence(accepted), SOAK_TH, SOAK_PLAN)
    assert v.status is Status.ERROR and v.summary.startswith("probe_measured:"), v.summary


def test_stab004_a_change_too_close_to_the_pods_end_is_listed_not_judged() -> None:
    # the return to the base at 40 s leaves the 45 s pod 5 s: less than the 7 s settle
    calls = [*SOAK_CALLS, (40.0, "512Mi")]
    v = add_soak_figures(base(), soak_evidence(HEALTHY_SOAK, calls=calls), SOAK_TH, SOAK_PLAN)
    assert v.status is Status.PASS, v.summary
    last = v.metrics["probe_phases"]["r1_change3"]
    assert (last["measured"], last["expected"], last["direction"]) == (False, False, "raise")


def test_stab004_without_a_probe_pod_is_error_and_old_runs_keep_their_verdict() -> None:
    ev = soak_evidence(HEALTHY_SOAK)
    v = add_soak_figures(base(), ev, SOAK_TH, {**SOAK_PLAN, "memory_probe_suffix": "-other"})
    assert v.status is Status.ERROR and "no memory probe pod" in v.summary, v.summary
    old = base()
    assert add_soak_figures(old, ev, SOAK_TH, {}) is old


def test_stab004_dates_the_probe_lines_by_the_kubelets_timestamps() -> None:
    """The probe's own clock starts with its interpreter, 1.5 s after the pod here: by the pod's start plus
    ``elapsed_s`` the 128 MiB line measured just after the first change (12.5 s) reads 11 s, before the call, and
    would be judged as the 512 MiB base phase (FAIL, seen on a loaded lab); the kubelet's timestamps, which the soak
    keeps since, put it after the call."""
    start = 1.5
    measured = [(9.0, 512 * MIB), (11.0, 128 * MIB), (20.0, 128 * MIB), (31.0, 384 * MIB), (38.0, 384 * MIB)]
    untimed = soak_evidence(measured)
    assert add_soak_figures(base(), untimed, SOAK_TH, SOAK_PLAN).status is Status.FAIL
    stamp = "%Y-%m-%dT%H:%M:%S.%f000Z"  # kubectl logs --timestamps (RFC 3339, nanoseconds)
    log = "".join(f"{datetime.fromtimestamp(T0 + start + t, UTC).strftime(stamp)} {soak_line(a, t, i)}\n"
                  for i, (t, a) in enumerate(measured))
    timed = Evidence.from_parts([], {}, {**{k: untimed.text(k) or "" for k in ("soak/rounds.jsonl",
                                                                               "soak/events.jsonl")},
                                         f"soak/probe-pods/{SPOD}.log": log})
    v = add_soak_figures(base(), timed, SOAK_TH, SOAK_PLAN)
    assert v.status is Status.PASS, v.summary
    assert v.metrics["probe_phases"]["r1_initial"]["accepted_bytes"] == 512 * MIB
