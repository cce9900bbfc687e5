"""The program's own help: ``xpushare --help`` and ``--list`` (and ``invoke``'s in a checkout, :func:`adopt_help`).

Invoke's help lists its core options, most of them about shell commands run through Invoke's ``c.run``, which no
xpushare task uses (``--dry``, ``--warn-only``, ``--pty``, ``--prompt-for-sudo-password`` ...), with short letters
that mean other things in the tasks (``-l`` is ``--limit``, ``-f`` ``--forks``, ``-w`` ``--wait``). This help shows
the global flags that mean something here, in the project's words (:data:`GLOBAL_FLAGS`), then the users' tasks,
then apart the contributors' tasks (:data:`CONTRIBUTOR_NAMESPACES`: the test lab of a checkout). The ``xpushare``
command also drops those three short letters from its global flags (:data:`CLASHING_SHORT`).
"""

from __future__ import annotations

from collections.abc import Callable

from invoke import Collection, Program
from invoke.util import helpline

__all__ = ["CLASHING_SHORT", "CONTRIBUTOR_NAMESPACES", "GLOBAL_FLAGS", "adopt_help", "list_tasks", "print_help",
           "task_pairs"]

CONTRIBUTOR_NAMESPACES = ("lab",)
"""Namespaces of tasks for the project's contributors, listed apart: ``lab.up``/``lab.down`` need a checkout."""

CLASHING_SHORT = frozenset({"l", "f", "w"})
"""Short letters of Invoke's core options that are task flags here (``--limit``, ``--forks``, ``--wait``)."""

GLOBAL_FLAGS: tuple[tuple[str, str], ...] = (
    ("-h, --help [TASK]", "this help; with a task, that task's flags (as: TASK --help)"),
    ("--list", "the tasks, one line each (--list-format json: for programs)"),
    ("-V, --version", "the version"),
    ("-d, --debug", "also the libraries' own log lines on stderr (paramiko's SSH handshake errors ...)"),
    ("--config FILE", "a config file holding the defaults of --cluster, --inventory, --forks and --timeout "
                      "(docs/config.md)"),
    ("--print-completion-script SHELL", "a completion script for bash, zsh or fish"),
)
"""The global flags a user of xpushare has a use for, with their help in the project's words."""


def task_pairs(collection: Collection) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(users' tasks, contributors' tasks) of ``collection``: ``(dotted name, first line of its help)``, sorted."""
    users: list[tuple[str, str]] = []
    contributors: list[tuple[str, str]] = []
    for name in sorted(collection.task_names):
        task = collection[name]
        pair = (name, helpline(task) or "")
        (contributors if name.split(".", 1)[0] in CONTRIBUTOR_NAMESPACES else users).append(pair)
    return users, contributors


def _binary(prog: Program) -> str:
    return (prog.binary or prog.name or "invoke").lower().split()[0]


def list_tasks(prog: Program) -> None:
    """Print the users' tasks, then the contributors' apart (``--list``)."""
    users, contributors = task_pairs(prog.collection)
    binary = _binary(prog)
    print(f"Tasks ({binary} TASK --help shows a task's flags; README.md and docs/ describe them):\n")
    prog.print_columns(users)
    if contributors:
        print("\nContributors' tasks (the test lab of a checkout of the repository, tests/lab/README.md):\n")
        prog.print_columns(contributors)


def print_help(prog: Program) -> None:
    """Print the usage, :data:`GLOBAL_FLAGS` and the task list (``--help`` without a task)."""
    binary = _binary(prog)
    print(f"Usage: {binary} [global flags] TASK [task flags] [TASK [task flags] ...]")
    print(f"       {binary} TASK --help\n")
    print("Global flags:\n")
    prog.print_columns(list(GLOBAL_FLAGS))
    print("")
    list_tasks(prog)


def adopt_help(prog: Program) -> Program:
    """Give ``invoke``'s own program (``tasks.py``) this help and task list; the nested and json list formats and
    a list of one namespace stay Invoke's. Returns ``prog``."""
    listing: Callable[[], None] = prog.list_tasks

    def list_tasks_() -> None:
        if prog.list_format == "flat" and not prog.list_root:
            list_tasks(prog)
        else:
            listing()

    prog.list_tasks = list_tasks_  # type: ignore[method-assign]
    prog.print_help = lambda: print_help(prog)  # type: ignore[method-assign]
    return prog
