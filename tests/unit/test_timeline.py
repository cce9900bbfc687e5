"""tests/bench/timeline.py: the plugin's lines and their summary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bench import timeline

pytest_plugins = ["pytester"]


def test_summary_spans_modules_and_ends_workers() -> None:
    records = [
        {"w": "gw0", "id": "tests/e2e/test_a.py::t1", "when": "call", "start": 100.0, "stop": 130.0},
        {"w": "gw0", "id": "tests/e2e/test_a.py::t2", "when": "call", "start": 130.0, "stop": 160.0},
        {"w": "gw1", "id": "tests/unit/test_b.py::t", "when": "call", "start": 101.0, "stop": 102.0},
    ]
    lines = timeline.summary(records)
    assert lines[1].split() == ["gw0", "0", "60", "60", "tests/e2e/test_a.py"]
    assert not any("test_b.py" in line for line in lines)  # under 20 s
    assert lines[-2:] == ["gw0: last test ended at 60 s", "gw1: last test ended at 2 s"]


def test_the_plugin_appends_one_line_per_phase(pytester: pytest.Pytester, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "timeline.jsonl"
    monkeypatch.setenv("XPUSHARE_TIMELINE", str(path))
    pytester.makepyfile("def test_one():\n    pass\n")
    pytester.runpytest_inprocess("-p", "tests.bench.timeline").assert_outcomes(passed=1)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["when"] for r in lines] == ["setup", "call", "teardown"]
    assert all(r["id"].endswith("::test_one") and r["stop"] >= r["start"] for r in lines)
