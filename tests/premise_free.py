"""The tool with the premises that this machine cannot meet waived, for tests of the engine's own mechanics.

Tests of resume, signals, several clusters, ``--maxfail``, progress and reports need cases that act and are judged
on the machine the tests run on, which has neither a GPU nor the SUT; there every case SKIPs naming its premise
(``sut``, ``gpu``, ...; docs/verdicts.md "Premises"), so those tests run the tool through :func:`waive`: each case
keeps the premises that are backend capabilities (``kubernetes``, ``client-library``, ``annotations``,
``scheduler-process``: the mechanics of a SKIP stay in view) and loses the others. Premises found unmet in the
evidence still count (FUNC-002 and FUNC-003 without a GPU are ERROR). What such a run says is about the tool, never
about the SUT; the premises themselves are tested in tests/unit/engine/test_premises.py.

``python -m tests.premise_free <task> [args]`` is ``python -m invoke <task> [args]`` with the premises waived.
"""

from __future__ import annotations

import dataclasses

from xpushare.backends.base import CAP_ANNOTATIONS, CAP_CLIENT_LIBRARY, CAP_KUBERNETES, CAP_SCHEDULER_PROCESS
from xpushare.cases import REGISTRY

#: The premises a waived case keeps: what the backend's capabilities decide.
KEPT = frozenset({CAP_KUBERNETES, CAP_CLIENT_LIBRARY, CAP_ANNOTATIONS, CAP_SCHEDULER_PROCESS})


def waive() -> None:
    """Replace every registered case by one whose premises are only those of :data:`KEPT` (in this process)."""
    for case_id, case in list(REGISTRY.items()):
        REGISTRY[case_id] = dataclasses.replace(case, requires=case.requires & KEPT)


def main(argv: list[str] | None = None) -> None:
    """``python -m invoke ARGV`` (default ``sys.argv``) with the premises waived in this process."""
    waive()
    from invoke.main import program

    program.run(argv)


if __name__ == "__main__":
    main()
