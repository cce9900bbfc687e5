"""Every breakage is caught: each row of tests/lab/matrix.py (a mutant build of the real SUT or a cluster fault)
turns the cases it is about FAIL (or the ERROR the row lists), through ``invoke matrix --cluster lab`` on a lab
of this module's own. docs/verdicts.md is the same matrix written by ``python -m tests.lab.matrix --write``;
this module also checks that the document covers every row and every mutant.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.lab.env import LAB_OPTIONS, write_inventory
from tests.lab.kubelab import started_kube_lab
from tests.lab.matrix import ROWS, MatrixLab, Row
from tests.lab.mutants import MUTANTS
from tests.lab.sshd import SshLab

pytestmark = [pytest.mark.lab, pytest.mark.slow]
DOC = Path(__file__).resolve().parent.parent / "docs" / "verdicts.md"


@pytest.fixture(scope="module")
def matrix_lab(ssh_lab: SshLab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MatrixLab]:
    for kube in started_kube_lab(tmp_path_factory, "matrix-kube", **LAB_OPTIONS):
        inventory = write_inventory(tmp_path_factory.mktemp("matrix-inv") / "inventory.yaml", ssh_lab, kube)
        yield MatrixLab(kube, inventory, tmp_path_factory.mktemp("matrix-runs"))


@pytest.mark.parametrize("row", ROWS, ids=[r.breakage for r in ROWS])
def test_breakage_is_caught(matrix_lab: MatrixLab, row: Row) -> None:
    outcome = matrix_lab.run(row)
    wrong = {case: outcome.verdicts[case] for case in row.cases if outcome.verdicts[case][0] not in row.expected(case)}
    assert not wrong, wrong


def test_every_mutant_has_a_row_and_the_document_covers_the_matrix() -> None:
    assert set(MUTANTS) <= {r.breakage for r in ROWS if r.kind == "mutant"}
    text = DOC.read_text(encoding="utf-8")
    for row in ROWS:
        assert f"`{row.breakage}`" in text, row.breakage
    assert "## Mutation score" in text
