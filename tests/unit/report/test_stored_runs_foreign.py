"""A stored run is validated when read: a foreign run.json (another tool's JSON document put in a run directory)
is refused like a damaged one, by ``report``, ``judge``, ``diff`` and ``last`` (exit 2, one ``error:`` line), and
``invoke runs`` lists every run but ends with one ``error:`` line and exit 2 when a run.json among them is damaged
or foreign (found by tests/unit/cli/test_fuzz_tasks.py: ``report`` and ``judge`` of a run whose run.json was a
Kubernetes Pod exited 0 and 1, and ``runs`` exited 0 over damaged runs)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.inprocess import run_xpushare
from xpushare.model.errors import StoredRunDamaged
from xpushare.report import run_store

FOREIGN = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}}


def _store(root: Path, run_id: str, meta: object | None) -> None:
    run_dir = run_store.run_dir(root, run_id)
    case = run_dir / "local" / "functional" / "FUNC-001"
    case.mkdir(parents=True)
    (case / "result.json").write_text(json.dumps({"case_id": "FUNC-001", "cluster": "local", "suite": "functional",
                                                  "status": "PASS", "summary": "ok", "mode": "host"}))
    if meta is not None:
        (run_dir / "run.json").write_text(json.dumps(meta))


def _invoke(root: Path, *words: str) -> tuple[int, str]:
    ran = run_xpushare([*words, "--root", str(root)], cwd=root)
    return ran.code, ran.err


def test_a_foreign_run_json_is_refused_when_read(tmp_path: Path) -> None:
    _store(tmp_path, "pod", FOREIGN)
    with pytest.raises(StoredRunDamaged, match=r"not a run\.json of xpushare"):
        run_store.read_run_meta(run_store.run_dir(tmp_path, "pod"))
    assert run_store.read_run_meta(_empty(tmp_path)) == {}  # an empty object is a run.json with nothing yet


def _empty(root: Path) -> Path:
    _store(root, "empty", {})
    return run_store.run_dir(root, "empty")


@pytest.mark.parametrize("words", [["report", "pod"], ["judge", "pod"], ["diff", "pod", "good"],
                                   ["diff", "good", "pod"], ["report", "last"], ["judge", "last"],
                                   ["diff", "good", "last"]])
def test_report_judge_diff_and_last_refuse_a_foreign_run_json(tmp_path: Path, words: list[str]) -> None:
    _store(tmp_path, "good", {"run_id": "good", "started": "2026-01-01T00:00:00+00:00"})
    _store(tmp_path, "pod", {**FOREIGN})
    os.utime(run_store.run_dir(tmp_path, "pod"), (2e9, 2e9))  # the newest: what `last` names
    before = (run_store.run_dir(tmp_path, "pod") / "run.json").read_bytes()
    code, err = _invoke(tmp_path, *words)
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: ") and "run.json" in err, (words, err)
    assert (run_store.run_dir(tmp_path, "pod") / "run.json").read_bytes() == before


@pytest.mark.parametrize("output", ["table", "json"])
def test_runs_lists_every_run_then_says_which_run_json_is_damaged(tmp_path: Path, output: str) -> None:
    _store(tmp_path, "good", {"run_id": "good", "started": "2026-01-01T00:00:00+00:00"})
    _store(tmp_path, "pod", FOREIGN)
    _store(tmp_path, "cut", None)
    (run_store.run_dir(tmp_path, "cut") / "run.json").write_text('{"run_id": "cut", "req')
    code, err = _invoke(tmp_path, "runs", "-o", output)
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: ") and "1 more run(s)" in err, err
    _store(tmp_path / "clean", "good", {"run_id": "good", "started": "2026-01-01T00:00:00+00:00"})
    assert _invoke(tmp_path / "clean", "runs", "-o", output) == (0, "")
