"""How every xpushare task is declared: one meaning per short flag, ``-v`` repeatable, ``--help`` after a task.

Invoke gives each flag a short form from its first free letter, so ``-o`` was ``--output`` in one task and
``--root`` or ``--source`` in others. :class:`XTask` (what :func:`task` and :func:`~xpushare.cli.suites.suite_task`
build) turns that off: a flag has the short form :data:`SHORT_FLAGS` gives it, in every task, or none.
``-v``/``--verbose`` counts (``-v``, ``-vv``, ``-vvv``) and its help shows no value.

:func:`help_first` makes ``invoke TASK --help`` the same as ``invoke --help TASK``, also for tasks with
positional arguments (Invoke would take ``--help`` as their value).
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable
from typing import Any

from invoke import Context, Program, Task
from invoke import task as invoke_task

from xpushare.cli import defaults
from xpushare.cli.flags import VERBOSE_HELP
from xpushare.cli.guard import guarded
from xpushare.transport import command_log

__all__ = ["HELP_WORDS", "SHORT_FLAGS", "Count", "XTask", "first_sentence_first", "help_first", "task"]

SHORT_FLAGS: dict[str, str] = {
    "cluster": "c",
    "output": "o",
    "verbose": "v",
    "inventory": "i",
    "limit": "l",
    "forks": "f",
    "timeout": "t",
    "run-id": "r",
    "skip-setup": "s",
    "wait": "w",
}
"""Long flag (as typed, without ``--``) -> its one short flag, the same in every task. ``-o`` is the output format
as in kubectl, ``-v`` the verbosity as in pytest, ``-s`` ``--skip-setup`` as the legacy scripts' ``-s``; any
other flag is long only."""

HELP_WORDS = ("--help", "-h")


class Count(int):
    """The kind of a counting flag (``-v``, ``-vv``): Invoke shows no value for it in ``--help`` (it would show
    ``-v INT``, a value the parser never takes)."""


class XTask(Task):
    """Invoke's task whose flags take their short forms from :data:`SHORT_FLAGS` only, and whose ``--cluster``
    and ``--inventory`` default, when not given, to ``$XPUSHARE_CLUSTER``/``$XPUSHARE_INVENTORY`` and the config:
    the common flags (``--cluster``, ``--inventory``, ``--root``, ``--run-id``) are resolved here once for every
    task by :func:`xpushare.cli.defaults.resolve_common`. ``cluster_default=False``: a task whose ``--cluster`` is a
    filter (``hosts``: all clusters without it). A task given ``--url`` (``metrics-check``) takes no default
    cluster."""

    def __init__(self, body: Callable[..., Any], *args: Any, cluster_default: bool = True, **kwargs: Any) -> None:
        kwargs["auto_shortflags"] = False
        if "verbose" not in inspect.signature(body).parameters:
            body = _with_verbose(body)
        kwargs["help"] = {"verbose": VERBOSE_HELP, **(kwargs.get("help") or {})}
        kwargs["incrementable"] = sorted({"verbose", *(kwargs.get("incrementable") or ())})
        super().__init__(body, *args, **kwargs)
        self.cluster_default = cluster_default
        self.__doc__ = first_sentence_first(self.__doc__ or "")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if args and isinstance(args[0], Context):
            guarded(lambda: defaults.resolve_common(args[0], kwargs, cluster_default=self.cluster_default))
        return super().__call__(*args, **kwargs)

    def get_arguments(self, ignore_unknown_help: bool | None = None) -> list[Any]:
        """Invoke's arguments of the task; its help texts stay for the next call (Invoke's ``arg_opts`` pops
        them, so a second parse in one process, a ``--help`` after a run included, showed no help)."""
        kept = dict(self.help)
        try:
            return list(super().get_arguments(ignore_unknown_help))
        finally:
            self.help = kept

    def arg_opts(self, name: str, default: str, taken_names: set[str]) -> dict[str, Any]:
        opts: dict[str, Any] = super().arg_opts(name, default, taken_names)
        names: list[str] = opts["names"]
        long = names[0].strip("-").rstrip("_").replace("_", "-")
        names[0] = long
        short = SHORT_FLAGS.get(long)
        if short is not None and short not in taken_names:
            names.append(short)
        if opts.get("incrementable"):
            opts["kind"] = Count
            opts["default"] = Count(int(default or 0))
        return opts


_SENTENCE_END = re.compile(r"(?<!e\.g)(?<!i\.e)(?<!etc)[.!?](?=\s|$)")


def first_sentence_first(doc: str) -> str:
    """``doc`` with its first sentence (or its first paragraph, when that has no sentence end) joined onto its
    first line (``invoke --list`` shows the first line only, and cut a sentence wrapped over two lines in the
    middle); the rest follows as written."""
    text = inspect.cleandoc(doc)
    paragraph = text.split("\n\n", 1)[0]
    end = _SENTENCE_END.search(paragraph)
    cut = end.end() if end is not None else len(paragraph)
    head, rest = text[:cut], text[cut:].lstrip(" ")
    rest = rest[1:] if rest.startswith("\n") else rest
    return " ".join(head.split()) + ("\n" + rest if rest.strip() else "")


def _with_verbose(body: Callable[..., Any]) -> Callable[..., Any]:
    """``body`` with a ``verbose`` flag (``-v``, ``-vv``, ``-vvv``) that sets what stderr shows
    (:func:`xpushare.transport.command_log.set_verbosity`) before the body runs: every task has the same ``-v``."""
    signature = inspect.signature(body)
    P = inspect.Parameter
    params = [*signature.parameters.values(), P("verbose", P.POSITIONAL_OR_KEYWORD, default=0)]

    @functools.wraps(body)
    def with_verbose(*args: Any, verbose: int = 0, **kwargs: Any) -> Any:
        command_log.set_verbosity(int(verbose or 0))
        return body(*args, **kwargs)

    with_verbose.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    return with_verbose


def task(*args: Any, **kwargs: Any) -> Any:
    """Invoke's ``@task`` decorator building an :class:`XTask`."""
    kwargs.setdefault("klass", XTask)
    return invoke_task(*args, **kwargs)


def help_first(prog: Program, parse: Callable[[], None]) -> None:
    """Run ``parse`` (the program's task parsing step); when the words after a task name hold ``--help`` or
    ``-h`` (before any ``--``), parse nothing of that task and ask for its help instead, as ``--help TASK``."""
    words: list[str] = list(prog.core.unparsed)
    cut = words.index("--") if "--" in words else len(words)
    if words and words[0] in prog.collection.task_names and any(w in HELP_WORDS for w in words[1:cut]):
        prog.core.unparsed = []
        parse()
        prog.args.help.value = words[0]
        return
    parse()
