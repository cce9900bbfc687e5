"""Every breakage is caught: each row of tests/lab/matrix.py (a mutant build of the real SUT or a cluster fault)
turns the cases it is about FAIL (or the ERROR the row lists), through ``invoke matrix --cluster lab``. CI runs a
row's ``Row.ci_cases``: not the cases lab tests already run under the same breakage and assert with more detail
(``Row.covered_by`` for a whole row, ``Row.cases_covered_by`` per case), nor the cases the unmodified build FAILs
already (their FAIL shows nothing about the breakage); :func:`test_covering_tests_run_the_breakage_and_assert_the_case`
keeps those names true. docs/verdicts.md is the whole matrix, every case of every row, written by
``python -m tests.lab.matrix --write``; this module also checks that the document covers every row and accounts for
every mutant.

The rows run on three labs of this module's own at once (a row is a few cases of a lab whose simulated kernels
sleep, so the machine is mostly idle while it runs). One of them has the simulated GPUs of ``PROBE_LAB_OPTIONS``
(25 GB/s): the rows of ``PROBE_ROWS``, whose cases run W5 or memory probes for a set time and judge log lines,
metrics or memory, never a fixed amount of work, go there first (a probe launches a quarter of the kernels through
the real client library over the same seconds: tests/bench/ci_time.md); the other labs take them once their own
rows are done.
"""

from __future__ import annotations

import ast
import contextlib
import queue
import threading
from pathlib import Path

import pytest

from tests.lab.cluster import LabCluster
from tests.lab.env import LAB_OPTIONS, PROBE_LAB_OPTIONS
from tests.lab.labpool import outcome_of, pool_fixture
from tests.lab.matrix import HOST_MODE, METRICS_CHECK, ROWS, UNCAUGHT, MatrixLab, Outcome, Row, healthy_rows
from tests.lab.mutants import MUTANTS
from tests.paths import REPO_ROOT
from xpushare.cases import REGISTRY
from xpushare.engine.plan import parameter_defaults

pytestmark = [pytest.mark.lab, pytest.mark.slow]
DOC = REPO_ROOT / "docs" / "verdicts.md"
#: The unmodified build under each scheduler setting a row needs (the default-settings baseline is what the
#: suites' own lab tests judge).
SETTING_BASELINES = [r for r in healthy_rows(ROWS) if r.setting is not None]
#: The rows run here, each with its ``ci_cases`` only: the other cases are asserted by the lab tests that cover them
#: (running them again here would only double CI's time) or FAIL on the unmodified build already.
RUN_HERE = [r.narrowed(r.ci_cases) for r in ROWS if r.ci_cases]
#: Rows whose cases (as run here) take the same verdict on 25 GB/s GPUs: W5 probes that run for a set time and are
#: judged on scheduler/pod log lines and metrics (FUNC-012, MET-005/006/008, STAB-003/004: the last five PASS on the
#: healthy lab at 25 GB/s in tests/e2e/test_k8s_metrics.py and test_k8s_stability.py) or memory probes judged on
#: what they could allocate (FUNC-011, COMBO-005). Rows with W2/W6 runtimes, ratios or rates stay at 100 GB/s.
PROBE_ROWS = frozenset({"annotations-reread-60s", "annotations-never-reread", "memory-limit-raise-ignored",
                        "memory-limit-frozen", "utilization-smoothing-halved", "gpu-memory-sampled-once"})
#: Per lab, whether it is the probe lab (``PROBE_LAB_OPTIONS``); the others have the standard ``LAB_OPTIONS``.
PROBE_LABS = (False, False, True)
standard_labs = pool_fixture("matrix-kube", PROBE_LABS.count(False), **LAB_OPTIONS)
probe_labs = pool_fixture("matrix-probe-kube", PROBE_LABS.count(True), **PROBE_LAB_OPTIONS)


@pytest.fixture(scope="module")
def outcomes(standard_labs: list[tuple[LabCluster, Path]], probe_labs: list[tuple[LabCluster, Path]],
             tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome | BaseException]:
    """Every row's outcome (or the exception its run raised), rows taken from two queues by the labs of
    ``PROBE_LABS``: the probe lab takes only ``PROBE_ROWS``, the others their own rows first."""
    pools = {False: iter(standard_labs), True: iter(probe_labs)}
    labs = [MatrixLab(*next(pools[probe]), tmp_path_factory.mktemp("matrix-runs")) for probe in PROBE_LABS]
    standard: queue.Queue[Row] = queue.Queue()
    probes: queue.Queue[Row] = queue.Queue()
    for row in sorted([*RUN_HERE, *SETTING_BASELINES], key=lambda r: -len(r.cases)):  # the longest rows first
        (probes if row.breakage in PROBE_ROWS else standard).put(row)
    results: dict[str, Outcome | BaseException] = {}

    def take(queues: tuple[queue.Queue[Row], ...]) -> Row | None:
        for q in queues:
            with contextlib.suppress(queue.Empty):
                return q.get_nowait()
        return None

    def worker(lab: MatrixLab, queues: tuple[queue.Queue[Row], ...]) -> None:
        while (row := take(queues)) is not None:
            try:
                results[row.breakage] = lab.run(row)
            except Exception as exc:  # reported by the row's test
                results[row.breakage] = exc

    threads = [threading.Thread(target=worker, args=(lab, (probes,) if probe else (standard, probes)), daemon=True)
               for lab, probe in zip(labs, PROBE_LABS, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


@pytest.mark.parametrize("row", RUN_HERE, ids=[r.breakage for r in RUN_HERE])
def test_breakage_is_caught(outcomes: dict[str, Outcome | BaseException], row: Row) -> None:
    outcome = outcome_of(outcomes, row.breakage)
    wrong = {case: outcome.verdicts[case] for case in row.cases if outcome.verdicts[case][0] not in row.expected(case)}
    assert not wrong, wrong


@pytest.mark.parametrize("row", SETTING_BASELINES, ids=[r.breakage for r in SETTING_BASELINES])
def test_unmodified_build_passes_under_the_rows_settings(outcomes: dict[str, Outcome | BaseException],
                                                         row: Row) -> None:
    outcome = outcome_of(outcomes, row.breakage)
    wrong = {case: outcome.verdicts[case] for case in row.cases if outcome.verdicts[case][0] != "PASS"}
    assert not wrong, wrong


def test_probe_rows_are_rows_run_here() -> None:
    assert {r.breakage for r in RUN_HERE} >= PROBE_ROWS and any(PROBE_LABS) and not all(PROBE_LABS)


def test_every_mutant_is_accounted_for_and_the_document_covers_the_matrix() -> None:
    assert set(MUTANTS) == {r.breakage for r in ROWS if r.kind == "mutant"} | set(UNCAUGHT) | set(HOST_MODE)
    text = DOC.read_text(encoding="utf-8")
    for name in [r.breakage for r in ROWS] + list(UNCAUGHT) + list(HOST_MODE):
        assert f"`{name}`" in text, name
    assert "## Mutation score" in text


def _test_source(nodeid: str) -> str:
    """The source of the test function ``nodeid`` (``tests/e2e/<module>.py::<function>``), decorators included."""
    path, _, function = nodeid.partition("::")
    assert path.startswith("tests/e2e/"), nodeid
    source = (REPO_ROOT / path).read_text(encoding="utf-8")
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and node.name == function:
            lines = source.splitlines()
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            return "\n".join(lines[first - 1:node.end_lineno])
    raise AssertionError(f"{nodeid}: no such test function")


def _runs_the_breakage(source: str, row: Row) -> bool:
    return f'"{row.breakage}"' in source or f"{row.breakage}=True" in source


def test_covering_tests_run_the_breakage_and_assert_the_case() -> None:
    """Each ``covered_by`` entry is a test function of a lab module that runs the row's breakage, and each
    ``cases_covered_by`` entry a test function that runs it itself and also names the case (``"FUNC-008"``, or
    ``met003`` in its name), so a renamed or deleted covering test, or one about another breakage or case, cannot
    silently leave a case unasserted."""
    covered = [r for r in ROWS if r.covered_by or r.cases_covered_by]
    assert covered and len([r for r in ROWS if r.ci_cases]) == len(RUN_HERE)
    for row in covered:
        for nodeid in row.covered_by:  # the breakage may be a parameter defined beside the function
            _test_source(nodeid)
            module = (REPO_ROOT / nodeid.partition("::")[0]).read_text(encoding="utf-8")
            assert _runs_the_breakage(module, row), (row.breakage, nodeid)
        assert set(row.cases_covered_by) <= set(row.cases), row.breakage
        for case, nodeids in row.cases_covered_by.items():
            for nodeid in nodeids:
                source = _test_source(nodeid)
                named = f'"{case}"' in source or case.lower().replace("-", "") in nodeid.rpartition("::")[2]
                assert _runs_the_breakage(source, row) and named, (row.breakage, case, nodeid)


def test_every_row_run_here_sets_only_what_its_cases_take() -> None:
    """``invoke`` refuses a ``--set`` no selected case has a parameter for: a row narrowed to some of its cases
    (FAIL-005/007 of ``ghost-clients``) must not carry the overrides of the cases it left out (its LEAK ones)."""
    for row in RUN_HERE:
        known = parameter_defaults([REGISTRY[c] for c in row.cases if c != METRICS_CHECK])
        assert all(item.partition("=")[0] in known for item in row.sets), (row.breakage, row.sets)
    ghosts = next(r for r in ROWS if r.breakage == "ghost-clients")
    assert ghosts.narrowed(("FAIL-005",)).sets == () and ghosts.narrowed(ghosts.cases).sets == ghosts.sets
