"""The common flags (``--cluster``, ``--inventory``, ``--root``, ``--run-id``) have one resolution for every task
(:func:`xpushare.cli.defaults.resolve_common`, applied by :class:`~xpushare.cli.taskdef.XTask`): every task of the
collection that takes ``--cluster`` takes it from ``$XPUSHARE_CLUSTER`` and from the config when the flag is not
given. The tasks are read from the collection, so a new task cannot slip through."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from invoke import Collection, Config, Context, Task

from xpushare.cli import defaults
from xpushare.cli.collection import namespace
from xpushare.cli.program import program
from xpushare.cli.taskdef import XTask


def _tasks(col: Collection, prefix: str = "") -> Iterator[tuple[str, Task]]:
    for name, task in sorted(col.tasks.items()):
        yield prefix + name, task
    for sub_name, sub in sorted(col.collections.items()):
        yield from _tasks(sub, f"{prefix}{sub_name}.")


TASKS = dict(_tasks(namespace))
#: Tasks whose ``--cluster`` is a filter: every cluster (of the inventory, of the run) without it.
FILTERS = {"hosts", "baseline-compare"}
#: What a task needs on its command line besides ``--cluster`` to get as far as loading the cluster.
NEEDS: dict[str, list[str]] = {
    "run": ["--", "true"],
    "put": ["--src", "x", "--dest", "/tmp/"],
    "get": ["--src", "/x", "--dest", "out/"],
    "legacy.cross-gpu": ["3"],
    "legacy.small": ["2"],
    "legacy.idle-small": ["2"],
    "legacy.complex2": ["a"],
}
#: The line a task prints when no flag, environment or config names a cluster (metrics-check also takes --url).
REQUIRED = {"metrics-check": "give --url http://HOST:PORT or --cluster NAME"}


def _takes(task: Task, flag: str) -> bool:
    return any(arg.names[0] == flag for arg in task.get_arguments())


CLUSTER_TASKS = sorted(name for name, task in TASKS.items() if _takes(task, "cluster") and name not in FILTERS)


def _run(name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
         args: list[str] | None = None) -> tuple[int, str]:
    argv = ["xpushare", name, *(NEEDS.get(name, []) if args is None else args)]
    monkeypatch.setattr(sys, "argv", argv)  # `run` reads the words after '--' from sys.argv
    try:
        program.run(argv)
        code = 0
    except SystemExit as ended:  # a task that fails exits; one that succeeds returns
        code = int(ended.code or 0)
    return code, capsys.readouterr().err


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No user config and no environment defaults, unless the test sets them."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XPUSHARE_CLUSTER", raising=False)
    monkeypatch.delenv("XPUSHARE_INVENTORY", raising=False)
    return tmp_path


def test_every_task_resolves_the_common_flags_through_xtask() -> None:
    assert [name for name, task in TASKS.items() if not isinstance(task, XTask)] == []
    filters = {name for name, task in TASKS.items() if isinstance(task, XTask) and not task.cluster_default
               and _takes(task, "cluster")}
    assert filters == FILTERS
    assert len(CLUSTER_TASKS) >= 20 and {"deploy", "metrics-check", "soak", "clean", "legacy.smoke"} <= set(
        CLUSTER_TASKS)


@pytest.mark.parametrize("name", CLUSTER_TASKS)
def test_every_cluster_task_takes_the_cluster_from_the_environment(
        name: str, home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("XPUSHARE_CLUSTER", "no-such-cluster")
    code, err = _run(name, monkeypatch, capsys)
    assert code == 2 and "unknown cluster 'no-such-cluster'" in err, err


@pytest.mark.parametrize("name", CLUSTER_TASKS)
def test_every_cluster_task_takes_the_cluster_from_the_config(
        name: str, home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    (home / ".xpushare.yaml").write_text("xpushare:\n  cluster: from-config\n", encoding="utf-8")
    code, err = _run(name, monkeypatch, capsys)
    assert code == 2 and "unknown cluster 'from-config'" in err, err


@pytest.mark.parametrize("name", CLUSTER_TASKS)
def test_without_a_cluster_every_cluster_task_says_so_in_one_line(
        name: str, home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _run(name, monkeypatch, capsys)
    assert code == 2 and err.strip().splitlines() == [f"error: {REQUIRED.get(name, defaults.CLUSTER_REQUIRED)}"]


def test_a_blank_run_id_is_refused_not_taken_for_every_run(home: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _run("clean", monkeypatch, capsys, ["--cluster", "local", "--run-id="])
    assert code == 2 and err.startswith("error: --run-id: invalid run id ''"), err


def test_a_filter_cluster_takes_no_default(home: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("XPUSHARE_CLUSTER", "no-such-cluster")
    code, err = _run("hosts", monkeypatch, capsys)
    assert code == 0 and err == ""


def test_resolve_common_fills_each_common_flag(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    c = Context(Config(overrides={"xpushare": {"cluster": "cfg", "inventory": "~/inv.yaml"}}))
    given: dict[str, object] = {"cluster": None, "inventory_": None, "root": "", "run_id": " "}
    defaults.resolve_common(c, given)
    assert given == {"cluster": "cfg", "inventory_": str(home / "inv.yaml"), "root": ".", "run_id": " "}
    monkeypatch.setenv("XPUSHARE_CLUSTER", "env")
    given = {"cluster": None, "root": "runs", "run_id": "r1"}
    defaults.resolve_common(c, given)
    assert given == {"cluster": "env", "root": "runs", "run_id": "r1"}
    given = {"cluster": "flag", "url": None}
    defaults.resolve_common(c, given)
    assert given["cluster"] == "flag"
    given = {"cluster": None, "url": "http://h:9402"}  # metrics-check --url: no cluster
    defaults.resolve_common(c, given)
    assert given["cluster"] is None
    given = {"cluster": None}
    defaults.resolve_common(c, given, cluster_default=False)  # a filter
    assert given["cluster"] is None
