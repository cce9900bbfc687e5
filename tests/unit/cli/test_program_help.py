"""The program's help (``xpushare --help``, ``--list``, and ``invoke --list`` in a checkout): the global flags that
mean something here in the project's words, the users' tasks, the contributors' tasks apart; no task's help cites a
document the user does not have."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.inprocess import run_xpushare
from tests.paths import REPO_ROOT
from tests.unit.cli.test_common_flags import TASKS

#: Invoke's core options about its ``c.run`` shell commands, which no task uses, and short letters that are task
#: flags here (-l --limit, -f --forks, -w --wait).
NOT_SHOWN = ("--prompt-for-sudo-password", "--dry", "--warn-only", "--pty", "--echo", "--hide", "--write-pyc",
             "--command-timeout", "-l,", "-f,", "-w,", "-R,", "Core options", "Subcommands")


def _xpushare(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    ran = run_xpushare(argv)
    return ran.code, ran.out


def _split(listing: str) -> tuple[str, str]:
    users, _, contributors = listing.partition("Contributors' tasks")
    return users, contributors


def test_xpushare_help_shows_the_flags_that_mean_something_and_the_tasks_apart(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _xpushare(["--help"], capsys)
    assert code == 0
    assert [word for word in NOT_SHOWN if word in out] == []
    assert "Global flags:" in out and "--config FILE" in out and "docs/config.md" in out
    users, contributors = _split(out)
    assert re.search(r"^\s+lab\.up\s", contributors, re.M) and re.search(r"^\s+lab\.down\s", contributors, re.M)
    assert "lab." not in users.split("Tasks (", 1)[1]
    for name in TASKS:
        if not name.startswith("lab."):
            assert re.search(rf"^\s+{re.escape(name)}\s", users, re.M), name


def test_xpushare_takes_no_short_letter_a_task_flag_uses(capsys: pytest.CaptureFixture[str]) -> None:
    assert _xpushare(["-l"], capsys)[0] == 2
    assert _xpushare(["--list"], capsys)[0] == 0


def test_invoke_list_in_the_checkout_shows_the_contributors_tasks_apart() -> None:
    proc = subprocess.run([sys.executable, "-m", "invoke", "--list"], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    users, contributors = _split(proc.stdout)
    assert "Available tasks" not in proc.stdout and "func" in users and "lab.up" in contributors
    assert "lab." not in users.split("Tasks (", 1)[1]


def test_no_task_help_cites_a_document_the_user_lacks() -> None:
    cited = re.compile(r"\bseed \d{3}\b|§")
    for name, task in TASKS.items():
        texts = [task.__doc__ or "", *(str(v) for v in task.help.values())]
        assert [t for t in texts if cited.search(t)] == [], name
