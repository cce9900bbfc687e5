"""Every task's help and short flags: one meaning per short flag, ``--help`` after any task, whole sentences in
``--list`` (``$XPUSHARE_CLUSTER`` for every task that takes ``--cluster``: tests/unit/cli/test_common_flags.py)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
from invoke import Collection, Task
from invoke.util import helpline

from tests.paths import REPO_ROOT
from xpushare.cli.collection import namespace
from xpushare.cli.program import program
from xpushare.cli.taskdef import SHORT_FLAGS, XTask, first_sentence_first

ROOT = REPO_ROOT


def _tasks(col: Collection, prefix: str = "") -> Iterator[tuple[str, Task]]:
    for name, task in sorted(col.tasks.items()):
        yield prefix + name, task
    for sub_name, sub in sorted(col.collections.items()):
        yield from _tasks(sub, f"{prefix}{sub_name}.")


TASKS = dict(_tasks(namespace))


def test_every_task_is_an_xtask() -> None:
    assert [name for name, task in TASKS.items() if not isinstance(task, XTask)] == []


def test_a_short_flag_means_one_long_flag_in_every_task() -> None:
    meaning: dict[str, set[str]] = {}
    for name, task in TASKS.items():
        for arg in task.get_arguments():
            long, *shorts = arg.names
            for short in shorts:
                meaning.setdefault(short, set()).add(long)
                assert SHORT_FLAGS.get(long) == short, (name, long, short)
    assert all(len(longs) == 1 for longs in meaning.values()), meaning
    assert meaning["o"] == {"output"} and meaning["v"] == {"verbose"} and meaning["c"] == {"cluster"}


def test_every_task_takes_a_counting_v() -> None:
    for name, task in TASKS.items():
        [verbose] = [a for a in task.get_arguments() if a.names[0] == "verbose"]
        assert verbose.incrementable and tuple(verbose.names) == ("verbose", "v"), name


@pytest.mark.parametrize("name", sorted(TASKS))
def test_help_after_every_task_prints_its_help(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ended:
        program.run(["xpushare", name, "--help"])
    out = capsys.readouterr().out
    assert ended.value.code in (0, None) and f"xpushare [--core-opts] {name}" in out, out
    assert "-v INT" not in out  # -v counts: it takes no value


@pytest.mark.parametrize("name", sorted(TASKS))
def test_list_shows_a_whole_first_sentence(name: str) -> None:
    lines = (TASKS[name].__doc__ or "").split("\n")
    assert helpline(TASKS[name]) == lines[0]
    assert lines[0].rstrip().endswith((".", ")")) or lines[1:2] in ([], [""]), lines[:2]


def test_first_sentence_is_joined_onto_the_first_line() -> None:
    doc = "Deploy the SUT: Kubernetes,\n    or host mode. More text\n    here."
    assert first_sentence_first(doc) == "Deploy the SUT: Kubernetes, or host mode.\nMore text\nhere."
    assert first_sentence_first("Use e.g. this one. Rest").startswith("Use e.g. this one.\n")
    wrapped = "Copy: invoke get x.log\n    out/\n\n    More."
    assert first_sentence_first(wrapped) == "Copy: invoke get x.log out/\n\nMore."


@pytest.mark.parametrize("args", [["judge", "--help"], ["legacy.small", "-h"], ["soak", "--help"],
                                  ["envcheck", "--help"]])
def test_help_of_tasks_with_positionals_under_invoke(args: list[str]) -> None:
    proc = subprocess.run([sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and "Usage:" in proc.stdout, proc.stderr
