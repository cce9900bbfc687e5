"""The last basis of a case's expected duration: a static estimate per case, for the dry run and the progress lines
when neither an earlier run of the case on the cluster nor its sizes and time windows say more
(:func:`xpushare.engine.plan.expected_case_duration`; README.md "Progress").

The figures are rough, of the seed's workload sizes on the slowest GPU of the seed (a Tesla T4: one W2 run of
40000 adds of n 14000 took 392 s in seed 004's baseline, ``pytorch-small-baseline``), pods started and deleted
included; a faster GPU, the lab's simulated GPUs or CPU-sized workloads take less. They say how long to wait, not
how long a case must take: no verdict reads them.
"""

from __future__ import annotations

__all__ = ["STATIC_BASIS", "STATIC_CASE_S", "W2_T4_S", "static_case_duration"]

W2_T4_S = 392.0
"""One W2 run on a Tesla T4 (seed 004's ``pytorch-small-baseline``), seconds."""

_ISO_MEMORY_S = 30.0  # one memory probe pod: start, the allocation steps, delete (lab: 2.4-7.4 s of probe)
_ISO_COMPUTE_S = 90.0  # one compute probe pod (and its neighbour): start, the measurement windows, delete
_LEAK_ROUNDS_S = 20 * 60.0  # 20 rounds of short pods (leak_rounds, leak_churn_rounds)

STATIC_CASE_S: dict[str, float] = {
    # functional: W2 on a T4 per run; two on one GPU share it (about twice as long); W1 under oversubscription
    "FUNC-001": W2_T4_S + 30, "FUNC-002": 2 * W2_T4_S + 30, "FUNC-003": W2_T4_S + 60,
    "FUNC-004": 300.0, "FUNC-005": 600.0, "FUNC-006": 60.0, "FUNC-007": W2_T4_S + 30,
    "FUNC-008": 3 * W2_T4_S, "FUNC-009": 2 * W2_T4_S + 60, "FUNC-010": 200.0, "FUNC-011": 200.0,
    "FUNC-012": 200.0, "FUNC-013": 2 * _ISO_MEMORY_S,
    # combination: a quota case's length plus the second feature's checks
    "COMBO-001": 600.0, "COMBO-002": 2 * W2_T4_S + 60, "COMBO-003": 2 * W2_T4_S + 60, "COMBO-004": 300.0,
    "COMBO-005": 300.0, "COMBO-006": 200.0, "COMBO-007": 3 * W2_T4_S, "COMBO-008": 300.0,
    # isolation: one probe pod per path
    **{f"ISO-{n:03d}": _ISO_MEMORY_S for n in range(1, 11)},
    **{f"ISO-{n:03d}": _ISO_COMPUTE_S for n in range(11, 17)},
    # metrics: the settle time (met_settle_s, 60 s) and the case's own windows
    "MET-001": 90.0, "MET-002": 120.0, "MET-003": 120.0, "MET-004": 120.0, "MET-005": 120.0, "MET-006": 120.0,
    "MET-007": 200.0, "MET-008": 120.0,
    # performance: fixed-work runs of at least perf_baseline_min_s (60 s), baselines included
    "PERF-001": 600.0, "PERF-002": 900.0, "PERF-003": 6 * W2_T4_S, "PERF-004": 900.0, "PERF-005": 900.0,
    "PERF-006": 900.0, "PERF-007": 200.0, "PERF-008": 1800.0, "PERF-009": 600.0, "PERF-010": 900.0,
    "PERF-011": 1200.0, "PERF-012": 3 * 2 * _ISO_COMPUTE_S,  # per slice: the probe alone, then beside a neighbour
    "PERF-013": 5 * 20.0,  # five short probe processes, each started and deleted
    # stability: soaks last stab_duration_s (their parameter gives it first); leaks run their rounds; faults
    # a load of fail_load_s around the fault and the recovery
    "STAB-001": 6 * 3600.0, "STAB-002": 24 * 3600.0, "STAB-003": 6 * 3600.0, "STAB-004": 6 * 3600.0,
    "LEAK-001": _LEAK_ROUNDS_S, "LEAK-002": _LEAK_ROUNDS_S, "LEAK-003": 2 * W2_T4_S, "LEAK-004": _LEAK_ROUNDS_S,
    "LEAK-005": _LEAK_ROUNDS_S,
    "FAIL-001": 400.0, "FAIL-002": 400.0, "FAIL-003": 400.0, "FAIL-004": 400.0,
    "FAIL-005": 120.0, "FAIL-006": 120.0, "FAIL-007": 120.0,
}
"""Case id -> static estimate in seconds (every case of the matrix has one: tests/unit/cases/test_estimates.py)."""

STATIC_BASIS = "static estimate of the case (the seed's sizes on a T4; xpushare/cases/estimates.py)"


def static_case_duration(case_id: str) -> tuple[float, str] | None:
    """``(seconds, basis)`` of :data:`STATIC_CASE_S`; None for a case it does not know (a legacy scenario)."""
    seconds = STATIC_CASE_S.get(case_id)
    return None if seconds is None else (seconds, STATIC_BASIS)
