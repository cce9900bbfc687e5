"""The broken-system matrix: each SUT mutant and cluster fault against the cases it is about.

A row breaks the lab one way (a mutant build of the real SUT, :mod:`tests.lab.mutants`, or a cluster fault of
:data:`tests.lab.cluster.FAULT_DEFAULTS`), runs the cases the breakage is about through
``invoke matrix --cluster lab`` and records each case's verdict; the healthy row runs the same cases on the
unmodified build. :mod:`tests.e2e.test_verdict_matrix` asserts the expected verdicts; this module's CLI runs the
whole matrix on labs of its own and writes docs/verdicts.md (case x breakage -> verdict, the breakages that
turn each case FAIL, the cases no breakage reaches and why, and the mutation score)::

    python -m tests.lab.matrix --write docs/verdicts.md      # every row not yet in .tmplog/verdicts.json
    python -m tests.lab.matrix --only memory-limit-ignored   # run (again) one row, printed
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import signal
import sys
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.lab.cluster import LabCluster, LocalHost, find_kubectl
from tests.lab.mutants import MUTANTS, build_mutant
from tests.toolrun import run_tool
from xpushare.cases import REGISTRY
from xpushare.cases.premise_table import premises_markdown
from xpushare.engine.plan import parameter_defaults
from xpushare.transport.kubectl import Kubectl

REPO = Path(__file__).resolve().parents[2]
HEALTHY = "healthy"
#: Not a case of the matrix: ``invoke metrics-check --cluster lab`` (its load part included), exit 0/1/3 as
#: PASS/FAIL/ERROR.
METRICS_CHECK = "metrics-check"


@dataclass(frozen=True)
class Row:
    """One breakage and the cases it must turn FAIL.

    ``breakage``: a mutant name (tests/lab/mutants) or a fault name; ``faults``: the fault's switches
    (empty for a mutant); ``cordon``: nodes made unschedulable for the row (a one-node cluster);
    ``expect``: per case the verdicts that count as caught (default FAIL; ERROR where nothing can be judged
    is listed explicitly); ``sets``: ``--set`` overrides of the row; ``repeat``: ``--repeat`` of the row's run,
    for a breakage that a single run catches only by chance (a race window: each attempt that misses it is a
    PASS, so the case is INTERMITTENT or FAIL, never PASS, once one attempt catches it); ``setting``: a name of
    :data:`SETTINGS`,
    a documented configuration of the real scheduler the row runs under (the unmodified build is judged
    under it too, in the row ``healthy@<setting>``); ``covered_by``: the lab tests (``module::function``) that
    run the same breakage and assert every case of the row FAILs, with more detail than the row (the figure
    that breaks, the check that catches it): CI asserts the row through them instead of running it a second
    time in tests/e2e/test_verdict_matrix.py (the ``--write`` run of this module still runs every row);
    ``cases_covered_by``: the same per case, for a row whose other cases no lab test asserts (CI runs those only).
    """

    breakage: str
    cases: tuple[str, ...]
    faults: Mapping[str, Any] = field(default_factory=dict)
    cordon: tuple[str, ...] = ()
    expect: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    sets: tuple[str, ...] = ()
    setting: str | None = None
    repeat: int = 1
    covered_by: tuple[str, ...] = ()
    cases_covered_by: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return "fault" if self.faults else "mutant"

    def expected(self, case: str) -> tuple[str, ...]:
        return tuple(self.expect.get(case, ("FAIL",)))

    def narrowed(self, cases: Sequence[str]) -> Row:
        """The row on ``cases`` (some of its own), with the ``--set`` overrides those cases have a parameter for
        (``invoke`` refuses a ``--set`` no selected case knows)."""
        known = parameter_defaults([REGISTRY[c] for c in cases if c != METRICS_CHECK])
        return dataclasses.replace(self, cases=tuple(cases),
                                   sets=tuple(x for x in self.sets if x.partition("=")[0] in known))

    @property
    def ci_cases(self) -> tuple[str, ...]:
        """The cases CI runs for this row (tests/e2e/test_verdict_matrix.py): none when lab tests cover the whole
        row; else those no lab test covers (``cases_covered_by``), less the cases the unmodified build FAILs
        already (:data:`HEALTHY_FINDINGS`: their FAIL under the breakage shows nothing about catching it)."""
        if self.covered_by:
            return ()
        return tuple(c for c in self.cases if c not in self.cases_covered_by and c not in HEALTHY_FINDINGS)


#: Scheduler configurations some rows need (environment of the real scheduler, docs/sut/scheduler.md §environment): a
#: fixed
#: 1 s switch time with a 2 s compute window in serial mode makes the timer rotate the lock between the clients
#: of one GPU (at the defaults it never does: finding 7 of docs/findings.md).
SETTINGS: dict[str, dict[str, str]] = {
    "fixed-switch-1s": {"XPUSHARE_SCHEDULING_MODE": "serial", "XPUSHARE_SWITCH_TIME_MODE": "fixed",
                        "XPUSHARE_SWITCH_TIME_FIXED": "1", "XPUSHARE_COMPUTE_WINDOW_MS": "2000"},
}

#: Every mutant and every cluster fault, with the cases that are about what it breaks.
ROWS: tuple[Row, ...] = (
    # ISO-012/013/015/016 FAIL on the unmodified build already (finding 20): the row shows them under the mutant too
    Row("no-core-enforcement", ("FUNC-008", "FUNC-009", "COMBO-002", "COMBO-006", "PERF-003", "PERF-004",
                                "PERF-007", "ISO-011", "ISO-012", "ISO-013", "ISO-014", "ISO-015", "ISO-016"),
        cases_covered_by={
            "FUNC-008": ("tests/e2e/test_k8s_functional.py::test_quota_not_enforced_fails_static_compute",),
            **dict.fromkeys(("PERF-004", "PERF-007"), (
                "tests/e2e/test_k8s_performance.py::test_enforcement_off_fails_the_precision_cases",)),
            **dict.fromkeys(("ISO-011", "ISO-014"), (
                "tests/e2e/test_k8s_isolation_compute.py::test_no_core_enforcement_turns_cuLaunchKernel_fail",))}),
    Row("quota-generous-30", ("PERF-011",),
        covered_by=("tests/e2e/test_k8s_performance.py::test_skewed_enforcement_fails_the_precision_cases",)),
    Row("quota-stingy-30", ("PERF-011", "PERF-004"),
        covered_by=("tests/e2e/test_k8s_performance.py::test_skewed_enforcement_fails_the_precision_cases",)),
    Row("memory-limit-ignored", ("FUNC-006", "COMBO-001")),
    Row("oversub-always-on", ("FUNC-004",)),
    Row("oversub-never", ("FUNC-005",)),
    Row("annotations-never-reread", ("FUNC-010", "FUNC-011", "FUNC-012", "COMBO-004", "COMBO-005", "STAB-003",
                                     "STAB-004"),
        cases_covered_by={
            **dict.fromkeys(("FUNC-010", "FUNC-012"), (
                "tests/e2e/test_k8s_functional.py::test_annotations_never_reread_fail_the_dynamic_cases",)),
            "COMBO-004": ("tests/e2e/test_k8s_combination.py::test_annotations_never_reread_fail_the_dynamic_case",)}),
    # MET-005 sees the change late only when the 60 s reread falls after its 15 s latency bound (about 3 runs in 4;
    # one run of 2026-11-28 saw it after 0.9 s): three attempts, missed only when all three are lucky (about 1 in 64)
    Row("annotations-reread-60s", ("FUNC-012", "MET-005"), repeat=3,
        expect={"FUNC-012": ("FAIL", "INTERMITTENT"), "MET-005": ("FAIL", "INTERMITTENT")}),
    # the lab's inventory runs each run in a namespace of its own: quotas of pods outside `default` never arrive
    Row("annotations-default-namespace", ("FUNC-008", "FUNC-009", "COMBO-003", "FUNC-013"),
        cases_covered_by={"FUNC-013": (
            "tests/e2e/test_k8s_functional.py::test_annotations_from_the_default_namespace_fail_the_tenants",)}),
    Row("memory-limit-frozen", ("FUNC-010", "FUNC-011")),
    # one direction of a dynamic memory change: FUNC-010 FAILs on the unmodified build already (finding 18), so a
    # lost raise is told apart where oversubscription lets a raise be used (COMBO-005) or where the raise stays
    # under the pod's first quota (STAB-004's 512Mi -> 128Mi -> 384Mi, the seed's 8Gi -> 2Gi -> 6Gi shape)
    Row("memory-limit-raise-ignored", ("FUNC-010", "COMBO-005", "STAB-004")),
    Row("memory-limit-decrease-ignored", ("FUNC-011", "COMBO-005", "STAB-004"),
        covered_by=("tests/e2e/test_k8s_quota_probe.py::test_decrease_ignored_is_caught_after_the_decrease",
                    "tests/e2e/test_k8s_stability.py::"
                    "test_stab004_memory_probe_fails_a_change_that_is_logged_but_not_enforced")),
    # the cuMemAlloc path, the one the unmodified build holds (ISO-001). A per-request check is masked without
    # oversubscription (the physical allocatable is the first quota, finding 18): COMBO-005 sees it (FUNC-006/007 PASS)
    Row("memory-limit-per-request", ("COMBO-005",),
        covered_by=("tests/e2e/test_k8s_quota_probe.py::test_the_cuMemAlloc_path_broken_two_ways",)),
    Row("dlsym-memalloc-unhooked", ("FUNC-006", "FUNC-007")),
    # STAB-002 with more pods than nodes: the lab's default rounds put one pod on each node's scheduler
    Row("crash-on-second-client", ("FUNC-002", "PERF-008", "PERF-009", "PERF-010", "STAB-001", "STAB-002", "FAIL-004"),
        sets=("stab002_pods_small=2", "stab002_pods_large=4")),
    # enough registrations that 4 MiB and one fd each stand out of the noise floors (8 MiB, 4 fds)
    # FAIL-005/007: the client that died of its GPU error stays in /metrics (FAIL-006 poisons the lab's GPU: host
    # lab only, tests/e2e/test_gpu_faults.py)
    Row("ghost-clients", ("LEAK-004", "LEAK-005", "FAIL-005", "FAIL-007", "MET-003"),
        sets=("leak_churn_rounds=5", "leak_pods=4"),
        cases_covered_by={
            **dict.fromkeys(("LEAK-004", "LEAK-005"), (
                "tests/e2e/test_k8s_stability.py::test_ghost_clients_fail_leak_004_and_leak_005",)),
            "MET-003": ("tests/e2e/test_k8s_metrics.py::test_a_gauge_that_does_not_follow_fails_met003",)}),
    Row("leak-per-registration", ("LEAK-001", "LEAK-002"), sets=("leak_rounds=4", "leak_pods=4"),
        covered_by=("tests/e2e/test_k8s_stability.py::"
                    "test_a_scheduler_leaking_per_registration_fails_leak_001_and_002",)),
    Row("metrics-missing", ("MET-002",),
        covered_by=("tests/e2e/test_k8s_metrics.py::test_metrics_missing_fails_met002",)),
    # no MET case judges a family's TYPE (docs/verdicts.md)
    Row("counter-as-gauge", (METRICS_CHECK,),
        covered_by=("tests/e2e/test_metrics_check.py::test_mutant_fails_its_idle_lines",)),
    # in k8s the probe is matched by pod; host_pid is judged under load
    Row("label-missing", (METRICS_CHECK,),
        covered_by=("tests/e2e/test_metrics_check.py::test_label_missing_fails_the_host_pid_line",)),
    Row("values-off-10", ("MET-003",),
        covered_by=("tests/e2e/test_k8s_metrics.py::test_values_off_10_fails_met003",)),
    Row("healthz-500", ("MET-001", "MET-007"),
        covered_by=("tests/e2e/test_k8s_metrics.py::test_healthz_500_fails_met001_and_met007",)),
    Row("quota-metrics-missing", ("COMBO-003", "COMBO-007", "MET-004"),
        cases_covered_by={"COMBO-003": (
            "tests/e2e/test_k8s_combination.py::test_missing_quota_metrics_fail_combo003",)}),
    Row("utilization-smoothing-halved", ("MET-006",)),
    Row("gpu-memory-sampled-once", ("MET-003", "MET-008"),
        cases_covered_by={"MET-003": (
            "tests/e2e/test_k8s_metrics.py::test_a_gauge_that_does_not_follow_fails_met003",)}),
    Row("drop-lock-not-counted", ("MET-004", METRICS_CHECK),
        covered_by=("tests/e2e/test_k8s_metrics.py::test_drop_lock_not_counted_fails_met004",
                    "tests/e2e/test_metrics_check.py::test_drop_lock_not_counted_fails_the_drop_lock_line")),
    Row("managed-memory-never-shrinks", ("MET-003",),
        covered_by=("tests/e2e/test_k8s_metrics.py::test_a_gauge_that_does_not_follow_fails_met003",)),
    Row("running-clients-high-water", ("MET-003",),
        covered_by=("tests/e2e/test_k8s_metrics.py::test_a_gauge_that_does_not_follow_fails_met003",)),
    # the lab registers within about 1 s: a 3 s limit shows the 5 s delay (sut_in_path, checked on every case)
    Row("register-after-5s", ("MET-002",), sets=("registration_timeout_s=3",),
        covered_by=("tests/e2e/test_k8s_metrics.py::test_a_late_registration_fails_sut_in_path",)),
    # a scheduler that never comes back: FAIL-001/002 wait 30 s for it, not the lab's 90 s (a healthy lab's restart
    # is back within a few seconds, docs/soak.md)
    Row("scheduler_down", ("FUNC-001", "FUNC-005", "FUNC-007", "MET-001", "PERF-001", "FAIL-001", "FAIL-002"),
        faults={"scheduler_down": True}, expect={"MET-001": ("FAIL", "ERROR"), "PERF-001": ("FAIL", "ERROR")},
        sets=("fail_restart_timeout_s=30",),
        cases_covered_by={"FUNC-005": ("tests/e2e/test_k8s_functional.py::test_scheduler_down_fails_oversub_case",),
                          "MET-001": ("tests/e2e/test_k8s_metrics.py::test_scheduler_down_fails_met001",)}),
    Row("annotations_denied", ("FUNC-008", "FUNC-012", "COMBO-001", "COMBO-003", "COMBO-008"),
        faults={"annotations_denied": True},
        cases_covered_by=dict.fromkeys(("COMBO-001", "COMBO-003"), (
            "tests/e2e/test_k8s_combination.py::test_denied_annotations_fail_the_initial_quota_cases",))),
    Row("pack_one_gpu", ("FUNC-003",), faults={"pack_one_gpu": True}, cordon=("lab-node2",)),
    # the pair under lock control (a memory quota) in serial mode: without rotation one waits for the other's end
    Row("lock-never-dropped", ("FUNC-002",), sets=("func002_memory_limit=512Mi",), setting="fixed-switch-1s"),
)

#: Mutants only a host-mode cluster can show (the Kubernetes lab's device plugin sets what they get wrong), and the
#: test that catches them on the host-mode lab (tests/lab/hostlab.py).
HOST_MODE: dict[str, str] = {
    "gpu-key-ignores-cuda-visible-devices": "host-mode FUNC-003 FAIL (`gpu_identity`): every client registers as "
                                            "`default` while NVML sees the processes on both GPUs; "
                                            "tests/e2e/test_host_real_sut.py",
}

#: Breakages of what every verdict about the SUT rests on (judge/sut_path.py: the SUT in each workload's path, its
#: GPU identity against NVML) that no row of the lab's matrix carries, and where each is shown to turn the verdict.
OUTSIDE_MATRIX: dict[str, str] = {
    "a client library the loader refuses": "FUNC-003 ERROR `premise unmet: sut: SUT not in the path: ... preload "
    "refused` on the host-mode "
                                           "lab (tests/e2e/test_host_real_sut.py); FUNC-001/004 ERROR on two H200 "
                                           "(docs/runs/2026-11-27-real-sut-2gpu), where FUNC-004 had passed on "
                                           "PyTorch's own out-of-memory error",
    "a node python without torch": "FUNC-004/006 ERROR `the workload failed before it reached the GPU "
                                   "(ModuleNotFoundError ...)`, not FAIL (docs/runs/2026-11-27-real-sut-2gpu; "
                                   "tests/unit/judge/test_sut_path.py)",
    "a GPU key that ignores the assigned device": "`gpu-key-ignores-cuda-visible-devices`: FUNC-003 FAIL "
                                                  "(`gpu_identity`, key `default` against NVML's two GPUs)",
    "DROP_LOCK not counted": ("`drop-lock-not-counted`: MET-004 FAIL (`drop_lock_counted`: the counter against "
                              "the scheduler log's DROP_LOCK lines) and `invoke metrics-check` FAIL (`DROP_LOCK "
                              "counted under throttling`, the same rule over the load window; "
                              "tests/e2e/test_metrics_check.py)"),
    "a registration later than registration_timeout_s": (
        "`sut_in_path` FAIL `the scheduler was slow to register: <pod>: registered <s> s after it started` "
        "(pods.json's start against the scheduler log's timestamp): `register-after-5s` with "
        "`registration_timeout_s=3`, MET-002 FAIL (tests/e2e/test_k8s_metrics.py); every verdict records "
        "`registration_timeout_s` (60 s)"),
    "gauges sampled once or stuck": "MET-003's series while W4 allocates and frees: `gpu-memory-sampled-once` "
                                    "(`gpu_memory_follows_nvml`), `managed-memory-never-shrinks` "
                                    "(`managed_follows_client_reports`), `running-clients-high-water` "
                                    "(`running_clients_follow_locks`), `ghost-clients` (`client_count_follows_log`) "
                                    "FAIL (tests/e2e/test_k8s_metrics.py)",
    "two CPU-bound processes beside the lab": "no verdict changes: FUNC-002 and PERF-011 (quota 25 %) PASS within "
                                              "the seed's ±8 % (tests/e2e/test_under_load.py)",
    "a GPU fault during the case": "FUNC-001 ERROR `GPU fault on <node> GPU <uuid> during the case (Xid 79: GPU has "
                                   "fallen off the bus): not a verdict on the SUT`, and ERROR naming a rise of "
                                   "uncorrected ECC errors, on the host-mode lab and the Kubernetes lab "
                                   "(tests/e2e/test_gpu_health.py, tests/e2e/test_gpu_health_k8s.py); the same Xid on "
                                   "a GPU the case did not use, or an application Xid (31) on its own, leaves the PASS "
                                   "(docs/faults.md)",
}

#: Mutants no case catches, and why (they stay in the score's denominator).
UNCAUGHT: dict[str, str] = {}

#: Cases the unmodified SUT fails, and the defect of docs/findings.md behind it (a finding, never tuned away).
#: FAIL-006 runs on a host-mode lab of its own (tests/e2e/test_gpu_faults.py: a lost GPU stays lost), not in ROWS.
HEALTHY_FINDINGS: dict[str, int] = {"COMBO-001": 13, "COMBO-004": 18, "PERF-004": 15, "FUNC-010": 18, "ISO-012": 20,
                                    "ISO-013": 20, "ISO-015": 20, "ISO-016": 20, "MET-003": 23, "FAIL-006": 22}

#: Cases that no breakage of the lab can turn FAIL, and why.
UNREACHABLE: dict[str, str] = {
    "PERF-002": "the cost of scraping is the scheduler's CPU time; the simulated GPU's kernels do not slow down "
                "with host CPU load, so no breakage of the lab can make scraping cost GPU time",
    "PERF-005": "runs on T4 only (perf005_gpu_models): the lab's simulated GPUs are no T4, so it SKIPs there",
    "PERF-006": "runs on A800 only (perf006_gpu_models): the lab's simulated GPUs are no A800, so it SKIPs there",
    "FAIL-003": "drain and re-scheduling are Kubernetes' own (the lab's controllers); no SUT mutant changes where "
                "evicted pods go, and a node that never comes back is a test-environment fault, not the SUT's",
    "LEAK-003": "GPU memory goes back to the driver when a process exits, whatever the scheduler or library does; "
                "a library that leaks inside a running client is not visible once the case's pods have ended",
}


def is_healthy(breakage: str) -> bool:
    """The unmodified build: ``healthy`` (default settings) or ``healthy@<setting>``."""
    return breakage == HEALTHY or breakage.startswith(HEALTHY + "@")


def healthy_rows(rows: Sequence[Row]) -> list[Row]:
    """The unmodified build on every case of ``rows``: one row at the default settings, and one per setting of
    :data:`SETTINGS` the rows use (its rows' cases and ``--set`` overrides, under that setting)."""
    out = [Row(HEALTHY, tuple(cases_of(r for r in rows if r.setting is None)))]
    for name in sorted({r.setting for r in rows if r.setting is not None}):
        mine = [r for r in rows if r.setting == name]
        out.append(Row(f"{HEALTHY}@{name}", tuple(cases_of(mine)),
                       sets=tuple(dict.fromkeys(x for r in mine for x in r.sets)), setting=name))
    return out


def cases_of(rows: Iterable[Row]) -> list[str]:
    """Every case the rows name, sorted by suite and number."""
    def order(case: str) -> tuple[bool, str, int]:
        if case == METRICS_CHECK:
            return True, case, 0
        suite, number = case.split("-")
        return False, suite, int(number)

    return sorted({c for r in rows for c in r.cases}, key=order)


@dataclass
class Outcome:
    """What one row gave: case -> (status, summary)."""

    breakage: str
    verdicts: dict[str, tuple[str, str]]

    def to_json(self) -> dict[str, Any]:
        return {"breakage": self.breakage, "verdicts": {k: list(v) for k, v in self.verdicts.items()}}


class MatrixLab:
    """A running lab (the Kubernetes lab plus its ``lab`` inventory) that rows are run on, one at a time."""

    def __init__(self, kube: LabCluster, inventory: Path, root: Path) -> None:
        self.kube = kube
        self.inventory = inventory
        self.root = root
        self.kubectl = Kubectl(LocalHost(), kubectl=find_kubectl() or "kubectl", kubeconfig=str(kube.kubeconfig_path),
                               context="lab", namespace="default", request_timeout_s=30)

    @contextlib.contextmanager
    def broken(self, row: Row) -> Iterator[None]:
        """The lab broken as the row says, restored (healthy build, no faults, nodes uncordoned) afterwards."""
        try:
            for node in row.cordon:
                self.kubectl.cordon(node)
            switches = dict(row.faults)
            if row.setting is not None:
                switches["scheduler_env"] = SETTINGS[row.setting]
            if row.kind == "mutant" and not is_healthy(row.breakage):
                switches["sut"] = str(build_mutant(row.breakage).directory)
            if switches:
                self.kube.set_faults(None, **switches)
            yield
        finally:
            self.kube.clear_faults()
            for node in row.cordon:
                self.kubectl.uncordon(node)

    def run(self, row: Row, *, timeout_s: float = 1800) -> Outcome:
        """Run the row's cases through ``invoke matrix --cluster lab``; read back every case's verdict."""
        run_id = "matrix-" + row.breakage.replace("@", "-at-")
        invoke = [sys.executable, "-m", "invoke"]
        cases = [c for c in row.cases if c != METRICS_CHECK]
        argv = [*invoke, "matrix", "--cluster", "lab", "--inventory", str(self.inventory), "--run-id", run_id,
                "--root", str(self.root)]
        for case in cases:
            argv += ["--case", case]
        # the lab is ours to break: FAIL-00x run, not SKIP (only named where a FAIL case takes it)
        disruptive = ("allow_disruptive=true",) if any(c.startswith("FAIL-") for c in cases) else ()
        for item in (*disruptive, *row.sets):
            argv += ["--set", item]
        if row.repeat > 1:
            argv += ["--repeat", str(row.repeat)]
        verdicts: dict[str, tuple[str, str]] = {}
        output = ""
        with self.broken(row):
            if cases:
                proc = run_tool(argv, cwd=REPO, timeout=timeout_s)
                output = proc.stdout + proc.stderr
            if METRICS_CHECK in row.cases:
                check = run_tool([*invoke, "metrics-check", "--cluster", "lab", "--inventory",
                                  str(self.inventory), "--root", str(self.root)], cwd=REPO, timeout=timeout_s)
                failed = [line for line in check.stdout.splitlines() if "FAIL" in line]
                status = {0: "PASS", 1: "FAIL", 3: "ERROR"}.get(check.returncode, "ERROR")
                verdicts[METRICS_CHECK] = (status, "; ".join(failed)[:300] or (check.stderr.strip()[-300:]))
        for path in (self.root / ".tmplog" / run_id).glob("*/lab/*/*/result.json"):
            result = json.loads(path.read_text(encoding="utf-8"))
            verdicts[path.parent.name] = (str(result["status"]), str(result.get("summary", "")))
        for case in row.cases:
            verdicts.setdefault(case, ("MISSING", output[-500:]))
        return Outcome(row.breakage, verdicts)


def caught(row: Row, outcome: Outcome) -> bool:
    """Whether any of the row's cases gave a verdict the row expects (the breakage was caught)."""
    return any(outcome.verdicts[c][0] in row.expected(c) and outcome.verdicts[c][0] != "PASS" for c in row.cases)


def render(rows: Sequence[Row], outcomes: Mapping[str, Outcome], *, cases: Sequence[str] | None = None) -> str:
    """docs/verdicts.md: the matrix, per case the breakages that turn it FAIL, the unreachable cases, what every
    verdict rests on and the premises of every case (:func:`~xpushare.cases.premise_table.premises_markdown`), the
    score."""
    cases = list(cases or cases_of(rows))
    healthy = outcomes.get(HEALTHY)
    baselines = [r for r in healthy_rows(rows) if r.breakage in outcomes]
    lines = ["# Verdicts under breakage", "",
             "Generated by `python -m tests.lab.matrix --write docs/verdicts.md` from runs of the lab on the real SUT",
             "(tests/lab/matrix.py; asserted by tests/e2e/test_verdict_matrix.py, or by the lab tests a row names as",
             "covering it). Each row breaks the lab one way: a",
             "mutant build of the SUT (tests/lab/mutants/README.md) or a cluster fault (tests/lab/README-kube.md);",
             "`healthy` is the unmodified build. A cell is the case's verdict in that row; `·` = not run.", ""]
    header = ["breakage", "kind", *cases]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in [*baselines, *rows]:
        got = outcomes.get(row.breakage)
        cells = [(got.verdicts.get(c, ("·", ""))[0] if got and c in row.cases else "·") for c in cases]
        kind = "-" if is_healthy(row.breakage) else row.kind
        lines.append("| " + " | ".join([f"`{row.breakage}`", kind, *cells]) + " |")
    lines += ["", "## Per case: what turns it FAIL", ""]
    for case in cases:
        hits = [r.breakage for r in rows if case in r.cases and r.breakage in outcomes
                and outcomes[r.breakage].verdicts[case][0] == "FAIL"]
        base = healthy.verdicts.get(case, ("·", ""))[0] if healthy else "·"
        if case in HEALTHY_FINDINGS and base != "PASS":
            base += f", finding {HEALTHY_FINDINGS[case]} of docs/findings.md"
        for other in baselines:
            if other.setting is not None and case in other.cases:
                base += f"; under `{other.setting}`: {outcomes[other.breakage].verdicts[case][0]}"
        lines.append(f"- **{case}** (healthy: {base}): " + (", ".join(f"`{h}`" for h in hits) or "nothing yet"))
    used = sorted({r.setting for r in rows if r.setting is not None})
    if used:
        lines += ["", "## Scheduler settings", "",
                  "Rows with a setting run every scheduler of the lab with this extra environment (documented settings "
                  "of the real SUT); the row `healthy@<setting>` is the unmodified build under it.", ""]
        lines += [f"- `{name}`: " + ", ".join(f"`{k}={v}`" for k, v in SETTINGS[name].items()) + "; rows: "
                  + ", ".join(f"`{r.breakage}`" for r in rows if r.setting == name) for name in used]
    if UNREACHABLE:
        lines += ["", "## Cases no breakage of the lab reaches", ""]
        lines += [f"- **{case}**: {why}" for case, why in sorted(UNREACHABLE.items())]
    lines += ["", "## What every verdict about the SUT rests on", "",
              "Each FUNC, COMBO, PERF and MET verdict also checks that the SUT was in every workload's path and that "
              "its GPU identity of each is the GPU NVML saw (README, \"Two sources for every verdict about the "
              "SUT\"); every case's verdict, that no GPU it used faulted during it (judge/gpu_faults.py). The "
              "breakages of those checks, and where each is shown:", ""]
    lines += [f"- {what}: {how}" for what, how in OUTSIDE_MATRIX.items()]
    lines += ["", *premises_markdown().rstrip("\n").split("\n")]  # from the registry, no lab run
    mutants = [r for r in rows if r.kind == "mutant"]
    caught_mutants = [r.breakage for r in mutants if r.breakage in outcomes and caught(r, outcomes[r.breakage])]
    caught_mutants += [m for m in HOST_MODE if m in MUTANTS]
    missed = sorted(set(MUTANTS) - set(caught_mutants))
    lines += ["", "## Mutation score", "",
              f"{len(caught_mutants)} of {len(MUTANTS)} mutants caught by at least one case "
              f"({100 * len(caught_mutants) / max(1, len(MUTANTS)):.0f} %)."]
    for name, how in sorted(HOST_MODE.items()):
        lines.append(f"- caught in host mode: `{name}`: {how}")
    for name in missed:
        why = UNCAUGHT.get(name, "its row did not run or no case caught it" if name in {r.breakage for r in mutants}
                           else "no row yet")
        lines.append(f"- not caught: `{name}`: {why}")
    faults = [r for r in rows if r.kind == "fault"]
    caught_faults = [r.breakage for r in faults if r.breakage in outcomes and caught(r, outcomes[r.breakage])]
    lines.append(f"{len(caught_faults)} of {len(faults)} cluster faults caught.")
    lines += ["", *release_profiles_section()]
    return "\n".join(lines) + "\n"


def release_profiles_section() -> list[str]:
    """The "Release profiles" section of docs/verdicts.md, from the shipped profiles (xpushare/inventory/release.py):
    which cases each kind of cluster requires before a run may say release_ready YES (docs/release.md)."""
    from xpushare.inventory import release

    lines = ["## Release profiles", "",
             "A verdict above decides a release only as part of a release profile: `release_ready: YES` needs every "
             "case of the cluster's profile selected, the SUT in the path of every verdict, and each PASS; a partial "
             "selection is `n/a`, a cluster without the SUT NO (docs/release.md, which also covers `--repeat N` and "
             "INTERMITTENT). The profiles (xpushare/data/release_profiles.yaml; the inventory's `release_profile` "
             "picks one):", ""]
    for p in release.profiles().values():
        lines.append(f"- `{p.name}` ({len(p.cases)} cases): {p.description}")
    return lines


@contextlib.contextmanager
def started_lab(workdir: Path, runs: Path | None = None) -> Iterator[MatrixLab]:
    """The SSH lab and the Kubernetes lab under ``workdir`` with the ``lab`` inventory, stopped afterwards;
    the runs' evidence goes under ``runs`` (default ``workdir/runs``)."""
    from tests.lab.env import down, up

    inventory = up(workdir)
    try:
        kube = LabCluster.attach(workdir / "kube")
        yield MatrixLab(kube, inventory, runs or workdir / "runs")
    finally:
        down(workdir)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def load_outcomes(path: Path) -> dict[str, Outcome]:
    """Outcomes saved by :func:`main` (``--json``); an absent file is none."""
    if not path.exists():
        return {}
    return {o["breakage"]: Outcome(o["breakage"], {k: (v[0], v[1]) for k, v in o["verdicts"].items()})
            for o in json.loads(path.read_text(encoding="utf-8"))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.lab.matrix", description=__doc__.split("\n")[0])
    parser.add_argument("--write", type=Path, help="write the Markdown matrix here (e.g. docs/verdicts.md)")
    parser.add_argument("--only", action="append", default=[],
                        help=f"run only this breakage (repeatable; '{HEALTHY}' or '{HEALTHY}@<setting>' for the "
                             "unmodified build)")
    parser.add_argument("--json", type=Path, default=Path(".tmplog/verdicts.json"),
                        help="outcomes file, written after every row; rows already in it are not run again "
                             "unless named with --only (default: .tmplog/verdicts.json)")
    parser.add_argument("--keep-runs", type=Path, default=None,
                        help="keep every row's run directory (evidence, verdicts) under this directory "
                             "(default: removed with the labs)")
    args = parser.parse_args(argv)
    known = {r.breakage for r in [*healthy_rows(ROWS), *ROWS]}
    unknown = sorted(set(args.only) - known)
    if unknown:
        parser.error(f"unknown breakage(s): {', '.join(unknown)}")
    outcomes = load_outcomes(args.json)
    todo = [*healthy_rows(ROWS), *ROWS]
    wanted = set(args.only) if args.only else {r.breakage for r in todo} - set(outcomes)
    todo = [r for r in todo if r.breakage in wanted]
    if todo:
        signal.signal(signal.SIGTERM, _interrupt)  # stop the detached labs on SIGTERM too (started_lab's finally)
        with (tempfile.TemporaryDirectory(prefix="xpushare-matrix-") as tmp,
              started_lab(Path(tmp), args.keep_runs) as lab):
            for row in todo:
                outcomes[row.breakage] = lab.run(row)
                print(row.breakage, {k: v[0] for k, v in outcomes[row.breakage].verdicts.items()}, flush=True)
                args.json.parent.mkdir(parents=True, exist_ok=True)
                args.json.write_text(json.dumps([o.to_json() for o in outcomes.values()], indent=1) + "\n")
    if args.write:
        args.write.write_text(render(ROWS, outcomes), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
