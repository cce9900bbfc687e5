"""One output convention: every task that prints records takes ``-o/--output table|json|yaml``, and with json or
yaml its standard output holds only the records (progress on stderr). The tasks are read from the collection, so a
new task cannot slip through; docs/observability.md lists each task's records."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.unit.cli.test_common_flags import NEEDS, TASKS, _takes
from tests.unit.envcheck.test_scripts import FAST_PROBE
from tests.unit.report.test_artifacts import put
from xpushare.cli.program import program
from xpushare.report import run_store
from xpushare.report.output import FORMATS

#: Tasks that print no records of their own: the lab (test infrastructure), and the legacy scripts' mirrors with
#: ``invoke deploy`` (their output is the scripts' own tables and step lines; their records are the run directory's
#: result.json and summaries, which ``invoke report -o json`` prints).
NO_RECORDS = {"lab.up", "lab.down", "deploy"} | {name for name in TASKS if name.startswith("legacy.")}

OUTPUT_TASKS = sorted(name for name, task in TASKS.items() if _takes(task, "output"))


def _run(argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["xpushare", *argv])  # `run` reads the words after '--' from sys.argv
    try:
        program.run(["xpushare", *argv])
        code = 0
    except SystemExit as ended:
        code = int(ended.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XPUSHARE_CLUSTER", raising=False)
    monkeypatch.delenv("XPUSHARE_INVENTORY", raising=False)
    monkeypatch.chdir(tmp_path)
    yield tmp_path


def test_every_task_that_prints_records_takes_output() -> None:
    assert sorted(set(TASKS) - NO_RECORDS - set(OUTPUT_TASKS)) == []
    assert {"runs", "diff", "envcheck", "soak", "sut.status", "hosts", "cases", "baseline-compare"} <= set(
        OUTPUT_TASKS)
    for name in OUTPUT_TASKS:
        (arg,) = [a for a in TASKS[name].get_arguments() if a.names[0] == "output"]
        assert "o" in arg.names, name
        text = TASKS[name].help.get("output") or ""
        assert all(fmt in text for fmt in FORMATS), (name, text)


@pytest.mark.parametrize("name", OUTPUT_TASKS)
def test_output_takes_table_json_yaml_in_every_task(name: str, home: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    argv = [name, "-o", "xml"]
    if _takes(TASKS[name], "cluster"):
        argv += ["--cluster", "local"]
    argv += {"judge": ["--run-id", "x"], "report": ["--run-id", "x"], "diff": ["a", "b"],
             "baseline-compare": ["--run-id", "x"]}.get(name, [])
    argv += NEEDS.get(name, [])
    code, out, err = _run(argv, monkeypatch, capsys)
    assert (code, out) == (2, ""), err
    assert err.strip() == "error: --output takes one of table, json, yaml, not 'xml'"


def test_runs_and_diff_print_yaml(home: Path, monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    put(run_store.run_dir(home, "a"), case_id="FUNC-001", status="PASS", summary="ok")
    put(run_store.run_dir(home, "b"), case_id="FUNC-001", status="FAIL", summary="slow")
    code, out, err = _run(["runs", "-o", "yaml", "--root", str(home)], monkeypatch, capsys)
    assert code == 0, err
    assert [r["run_id"] for r in yaml.safe_load(out)] == ["a", "b"]
    code, out, err = _run(["diff", "a", "b", "-o", "yaml", "--root", str(home)], monkeypatch, capsys)
    assert code == 0, err
    record = yaml.safe_load(out)
    assert (record["a"], record["b"]) == ("a", "b")
    assert [(v["case"], v["before"], v["after"]) for v in record["verdict_changes"]] == [
        ("functional/FUNC-001", "PASS", "FAIL")]


def test_envcheck_prints_its_fleet_record_alone(home: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(["envcheck", "--cluster", "local", "-o", "json", "--run-id", "ej", "--root", str(home),
                           "--skip-gpu", *FAST_PROBE], monkeypatch, capsys)
    record = json.loads(out)
    assert record["run_id"] == "ej" and record["cluster"] == "local" and record["exit_status"] == code
    assert record == json.loads((home / ".tmplog" / "ej" / "envcheck" / "fleet.json").read_text())
    assert "fleet-report.md" in err  # the progress and the summary went to stderr


def test_a_real_soak_prints_one_record(home: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(["soak", "--cluster", "local", "--minutes", "0.05", "-o", "json", "--run-id", "sj",
                           "--root", str(home)], monkeypatch, capsys)
    record = json.loads(out)
    assert record["run_id"] == "sj" and record["exit_status"] == code == 0, err
    assert record["duration_s"] == 3.0 and [c["case_id"] for c in record["cases"]] == ["STAB-002"]
    # the soak says its real duration, titles the case with it, and names only a soak report that exists
    assert "soak STAB-002 on local for 3s" in err and " h " not in err.split("->")[0]
    report = (run_store.run_dir(home, "sj") / "run-report.md").read_text()
    assert "16-32 mixed pods (3 s)" in report and "(24 h)" not in report
    soak_report = record["soak_report"]
    assert soak_report is None or Path(soak_report).is_file()
    if soak_report is None:
        assert "soak-report.md" not in err and "soak report: none" in err
