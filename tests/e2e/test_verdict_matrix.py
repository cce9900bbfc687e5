"""Every breakage is caught: each row of tests/lab/matrix.py (a mutant build of the real SUT or a cluster fault)
turns the cases it is about FAIL (or the ERROR the row lists), through ``invoke matrix --cluster lab``. A row that
names the lab tests covering it (``Row.covered_by``: they run the same breakage and assert every case of the row
with more detail) is not run a second time here; :func:`test_a_covered_row_names_lab_tests_that_run_its_breakage`
keeps those names true.
docs/verdicts.md is the same matrix written by ``python -m tests.lab.matrix --write``; this module also checks
that the document covers every row and accounts for every mutant.

The rows run on ``LABS`` labs of this module's own at once (a row is a few cases of a lab whose simulated kernels
sleep, so the machine is mostly idle while it runs): about 8 minutes on 2 cores instead of 20 one after the other.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Iterator

import pytest

from tests.lab.env import LAB_OPTIONS, write_inventory
from tests.lab.kubelab import started_kube_lab
from tests.lab.matrix import HOST_MODE, ROWS, UNCAUGHT, MatrixLab, Outcome, Row, healthy_rows
from tests.lab.mutants import MUTANTS
from tests.lab.sshd import SshLab
from tests.paths import REPO_ROOT

pytestmark = [pytest.mark.lab, pytest.mark.slow]
DOC = REPO_ROOT / "docs" / "verdicts.md"
#: Labs the rows are spread over.
LABS = 3
#: The unmodified build under each scheduler setting a row needs (the default-settings baseline is what the
#: suites' own lab tests judge).
SETTING_BASELINES = [r for r in healthy_rows(ROWS) if r.setting is not None]
#: The rows run here: a row that names the lab tests covering it (``Row.covered_by``) is asserted by those, which run
#: the same breakage with more detail; running it again here would only double CI's time.
RUN_HERE = [r for r in ROWS if not r.covered_by]


@pytest.fixture(scope="module")
def outcomes(ssh_lab: SshLab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Outcome | BaseException]]:
    """Every row's outcome (or the exception its run raised), rows taken from one queue by ``LABS`` labs."""
    with contextlib.ExitStack() as stack:
        labs = []
        for i in range(LABS):
            kube = stack.enter_context(contextlib.contextmanager(started_kube_lab)(
                tmp_path_factory, f"matrix-kube{i}", **LAB_OPTIONS))
            inventory = write_inventory(tmp_path_factory.mktemp("matrix-inv") / "inventory.yaml", ssh_lab, kube)
            labs.append(MatrixLab(kube, inventory, tmp_path_factory.mktemp("matrix-runs")))
        todo: queue.Queue[Row] = queue.Queue()
        for row in sorted([*RUN_HERE, *SETTING_BASELINES], key=lambda r: -len(r.cases)):  # the longest rows first
            todo.put(row)
        results: dict[str, Outcome | BaseException] = {}

        def worker(lab: MatrixLab) -> None:
            while True:
                try:
                    row = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    results[row.breakage] = lab.run(row)
                except Exception as exc:  # reported by the row's test
                    results[row.breakage] = exc

        threads = [threading.Thread(target=worker, args=(lab,), daemon=True) for lab in labs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        yield results


@pytest.mark.parametrize("row", RUN_HERE, ids=[r.breakage for r in RUN_HERE])
def test_breakage_is_caught(outcomes: dict[str, Outcome | BaseException], row: Row) -> None:
    outcome = outcomes[row.breakage]
    if isinstance(outcome, BaseException):
        raise outcome
    wrong = {case: outcome.verdicts[case] for case in row.cases if outcome.verdicts[case][0] not in row.expected(case)}
    assert not wrong, wrong


@pytest.mark.parametrize("row", SETTING_BASELINES, ids=[r.breakage for r in SETTING_BASELINES])
def test_unmodified_build_passes_under_the_rows_settings(outcomes: dict[str, Outcome | BaseException],
                                                         row: Row) -> None:
    outcome = outcomes[row.breakage]
    if isinstance(outcome, BaseException):
        raise outcome
    wrong = {case: outcome.verdicts[case] for case in row.cases if outcome.verdicts[case][0] != "PASS"}
    assert not wrong, wrong


def test_every_mutant_is_accounted_for_and_the_document_covers_the_matrix() -> None:
    assert set(MUTANTS) == {r.breakage for r in ROWS if r.kind == "mutant"} | set(UNCAUGHT) | set(HOST_MODE)
    text = DOC.read_text(encoding="utf-8")
    for name in [r.breakage for r in ROWS] + list(UNCAUGHT) + list(HOST_MODE):
        assert f"`{name}`" in text, name
    assert "## Mutation score" in text


def test_a_covered_row_names_lab_tests_that_run_its_breakage() -> None:
    """Each ``covered_by`` entry is a test function of a lab module that names the row's breakage, so a renamed or
    deleted covering test, or one about another mutant, cannot silently leave a row unasserted."""
    covered = [r for r in ROWS if r.covered_by]
    assert covered and len(RUN_HERE) + len(covered) == len(ROWS)
    for row in covered:
        for nodeid in row.covered_by:
            path, _, function = nodeid.partition("::")
            source = (REPO_ROOT / path).read_text(encoding="utf-8")
            assert path.startswith("tests/e2e/") and f"def {function}(" in source, nodeid
            assert f'"{row.breakage}"' in source, (row.breakage, nodeid)
