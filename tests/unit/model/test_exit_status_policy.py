"""One exit-status policy for every task (xpushare.model.exit_status.decide_exit_status): the order of precedence,
and no task deciding a failure's status on its own (the five copies there were could disagree: ``invoke deploy``
said 1 where every other task said 3 for a run with one host unreachable and another failed)."""

from __future__ import annotations

import re

import pytest

from tests.paths import REPO_ROOT
from xpushare.model.exit_status import ExitStatus, decide_exit_status


@pytest.mark.parametrize(("failed", "unreachable", "interrupted", "want"), [
    (False, False, None, ExitStatus.OK),
    (True, False, None, ExitStatus.FAILED),
    (False, True, None, ExitStatus.UNREACHABLE),
    (True, True, None, ExitStatus.UNREACHABLE),  # what it reached may have failed: the run is incomplete first
    (True, True, ExitStatus.TERMINATED, ExitStatus.TERMINATED),
    (False, False, ExitStatus.INTERRUPTED, ExitStatus.INTERRUPTED),
])
def test_precedence(failed: bool, unreachable: bool, interrupted: ExitStatus | None, want: ExitStatus) -> None:
    assert decide_exit_status(failed=failed, unreachable=unreachable, interrupted=interrupted) is want


#: ``return ExitStatus.FAILED``, ``ExitStatus.UNREACHABLE if ... else ExitStatus.OK``: a failure's status chosen by
#: hand (an error's kind, FAILED or USAGE, is the error's: cli/guard.py).
BY_HAND = re.compile(r"return\s+(int\()?ExitStatus\.(FAILED|UNREACHABLE)"
                     r"|ExitStatus\.(FAILED|UNREACHABLE)\s+if\b.*\belse\s+(ExitStatus\.(OK|FAILED|UNREACHABLE)|0)\b")


def test_no_task_decides_a_failures_status_by_hand() -> None:
    package = REPO_ROOT / "xpushare"
    found = [f"{p.relative_to(REPO_ROOT)}:{n}" for p in sorted(package.rglob("*.py"))
             if p.name != "exit_status.py"
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if BY_HAND.search(line)]
    assert not found, found
