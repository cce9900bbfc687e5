"""The installed ``xpushare`` command: Invoke's :class:`~invoke.program.Program` over the task collection.

``xpushare func --cluster local`` is ``invoke func --cluster local`` without a ``tasks.py``: it works from any
directory, with the tasks, flags, help and exit statuses of :mod:`xpushare.cli.collection`.

Both commands report a command line Invoke cannot parse (an unknown flag, a missing required flag, a flag
without its value) as one ``error:`` line and exit status 2 (USAGE), like every other usage error:
:class:`XpushareProgram` has that policy, and :func:`adopt` gives it to ``invoke``'s own program (``tasks.py``);
Invoke would print its parser's message and exit 1. A listing whose reader went away (``--list | head``) ends
quietly with status 141, as a task's output does (:func:`xpushare.cli.guard.pipe_closed`).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from invoke import Config, Program
from invoke.exceptions import Exit, ParseError

from xpushare import __version__
from xpushare.cli import config_files
from xpushare.cli.collection import namespace
from xpushare.cli.guard import pipe_closed
from xpushare.cli.help import CLASHING_SHORT, adopt_help, list_tasks, print_help
from xpushare.cli.taskdef import help_first
from xpushare.model.exit_status import ExitStatus

__all__ = ["XpushareConfig", "XpushareProgram", "adopt", "main", "parse_error_line", "program", "usage_exit"]

_UNKNOWN = re.compile(r"No idea what '(?P<token>.*)' is!")
_NO_VALUE = re.compile(r"Flag '<Argument: (?P<name>[^ (>]+).*' needed value and was not given one!")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-").strip("-")


def parse_error_line(exc: ParseError, binary: str = "invoke") -> str:
    """The one ``error:`` line for an Invoke parse error: unknown flag or task, missing required flag, flag
    without a value; any other parse error keeps Invoke's own words."""
    context = exc.context
    task = f"{context.name}: " if context is not None and context.name else ""
    helped = f" (see: {binary} --help {context.name})" if context is not None and context.name else ""
    if context is not None and context.missing_positional_args:
        names = ", ".join(_flag(arg.name or "?") for arg in context.missing_positional_args)
        return f"error: {task}{names} is required{helped}"
    text = str(exc)
    unknown = _UNKNOWN.fullmatch(text)
    if unknown:
        token = unknown["token"]
        what = "flag" if token.startswith("-") else "task or argument"
        return f"error: {task}unknown {what} {token!r}{helped or f' (see: {binary} --list)'}"
    no_value = _NO_VALUE.fullmatch(text)
    if no_value:
        return f"error: {task}{_flag(no_value['name'])} needs a value{helped}"
    return f"error: {task}{text}"


def _binary(prog: Program) -> str:
    return (prog.name or "invoke").lower()  # "Invoke" or "xpushare": the command a user types


def usage_exit(exc: ParseError, prog: Program) -> Exit:
    """The :class:`~invoke.exceptions.Exit` for a parse error: its :func:`parse_error_line`, status 2 (USAGE).
    Invoke's :meth:`~invoke.program.Program.run` prints an ``Exit``'s message and exits with its code."""
    return Exit(message=parse_error_line(exc, _binary(prog)), code=int(ExitStatus.USAGE))


class XpushareConfig(Config):
    """Invoke's configuration under the ``xpushare`` command's own file names: ``/etc/xpushare.yaml``,
    ``~/.xpushare.yaml`` and a project's ``xpushare.yaml`` (Invoke's documented ``prefix``), so that its
    ``xpushare:`` section (:mod:`xpushare.cli.defaults`) lives apart from other Invoke projects' ``invoke.yaml``.
    Environment variables keep Invoke's ``INVOKE_`` prefix: ``XPUSHARE_*`` are the tool's own."""

    prefix = "xpushare"
    env_prefix = "INVOKE"  # type: ignore[assignment]  # Invoke declares it None (= the prefix)


class XpushareProgram(Program):
    """The ``xpushare`` command: Invoke's program whose parse errors are one ``error:`` line and exit 2
    (Invoke documents subclassing :class:`~invoke.program.Program` to build a standalone command), as is a config
    file it would read that is not usable (:mod:`~xpushare.cli.config_files`)."""

    def create_config(self) -> None:
        """Invoke's step that reads the system and user files (``/etc/xpushare.*``, ``~/.xpushare.*``), each
        checked first, then loaded as Invoke loads them (``Config`` without ``lazy``: system, user, merge), each
        load guarded (:func:`~xpushare.cli.config_files.loading`: a ``.py`` file that raises is one line)."""
        prefix = self.config_class.prefix
        system, user = f"/etc/{prefix}", f"~/.{prefix}"
        config_files.check_level(system)
        config_files.check_level(user)
        config = self.config_class(lazy=True)
        config_files.loading(lambda: config.load_system(merge=False), config_files.first_existing(system))
        config_files.loading(lambda: config.load_user(merge=False), config_files.first_existing(user))
        config.merge()
        self.config = config

    def update_config(self, merge: bool = True) -> None:
        """Invoke's step that reads the runtime file (``-f FILE``, ``$INVOKE_RUNTIME_CONFIG``), checked first and
        its load guarded (:func:`~xpushare.cli.config_files.loading`)."""
        path = runtime_path(self)
        config_files.check_runtime(path)
        config_files.loading(lambda: super(XpushareProgram, self).update_config(merge), path)

    def core_args(self) -> list[Any]:
        """Invoke's global flags without the short letters that are task flags here (:data:`CLASHING_SHORT`)."""
        args = list(super().core_args())
        for arg in args:
            arg.names = tuple(name for name in arg.names if name not in CLASHING_SHORT)
        return args

    def print_help(self) -> None:
        print_help(self)

    def list_tasks(self) -> None:
        if self.list_format == "flat" and not self.list_root:
            list_tasks(self)
        else:
            super().list_tasks()

    def parse_tasks(self) -> None:
        try:
            help_first(self, super().parse_tasks)
        except ParseError as exc:
            raise usage_exit(exc, self) from None

    def parse_cleanup(self) -> None:
        """Invoke's step that prints ``--list`` and ``--help``; a reader that went away (``xpushare --list |
        head``) ends it quietly with status 141 (:func:`~xpushare.cli.guard.pipe_closed`)."""
        try:
            super().parse_cleanup()
        except BrokenPipeError:
            raise SystemExit(pipe_closed()) from None

    def run(self, argv: list[str] | None = None, exit: bool = True) -> None:
        """Invoke's run; a config file that is not YAML (Invoke reads them before any task) is one ``error:``
        line and exit status 2 instead of a traceback."""
        try:
            super().run(argv, exit)
        except Exception as exc:
            if not type(exc).__name__.endswith(("YAMLError", "ParserError", "ScannerError", "ComposerError")):
                raise
            where = str(getattr(exc, "problem_mark", "") or "").strip().replace("\n", " ")
            print(f"error: config file is not valid YAML: {getattr(exc, 'problem', None) or exc} {where}".rstrip(),
                  file=sys.stderr)
            raise SystemExit(int(ExitStatus.USAGE)) from None


def runtime_path(prog: Program) -> str | None:
    """The runtime config file Invoke's program reads: its ``-f`` value, else ``$INVOKE_RUNTIME_CONFIG`` (as
    ``Program.update_config`` picks it); None when neither is given."""
    given = prog.args.config.value
    return str(given) if given else os.environ.get("INVOKE_RUNTIME_CONFIG") or None


def adopt(prog: Program, project: Path | None = None) -> Program:
    """Give ``invoke``'s own program (built by Invoke before ``tasks.py`` is loaded, so it cannot be an
    :class:`XpushareProgram`) the same parse-error policy and the program's help and task list
    (:func:`xpushare.cli.help.adopt_help`); returns ``prog``.

    The one hook on a third-party object: it wraps that instance's ``parse_tasks`` step (the one that parses
    the task names and their flags, run after ``tasks.py`` is loaded), and its ``parse_cleanup`` step (``--list``
    and ``--help``) for a closed output pipe, as :class:`XpushareProgram` does. Adopting twice is harmless: the
    inner wrapper already turned the ``ParseError`` into an ``Exit``.

    It also checks the config files Invoke reads after ``tasks.py`` (:mod:`~xpushare.cli.config_files`): the project's
    ``invoke.*`` in ``project`` (the directory of ``tasks.py``), at once, and the runtime file, in the wrapped
    ``update_config`` step; one that is not usable raises the :class:`~xpushare.cli.config_files.ConfigFileError`
    (``Exit``: one ``error:`` line, exit 2). The system and user files (``/etc/invoke.*``, ``~/.invoke.*``) Invoke
    has read before ``tasks.py`` is loaded, beyond the reach of any task collection: Invoke's own error for them
    stands (the ``xpushare`` command reads its own files, and checks them; the transport reads neither).
    """
    if project is not None:
        config_files.check_level(str(project / prog.config_class.prefix))
    parse: Callable[[], None] = prog.parse_tasks

    def parse_tasks() -> None:
        try:
            help_first(prog, parse)
        except ParseError as exc:
            raise usage_exit(exc, prog) from None

    cleanup: Callable[[], None] = prog.parse_cleanup

    def parse_cleanup() -> None:
        try:
            cleanup()
        except BrokenPipeError:
            raise SystemExit(pipe_closed()) from None

    update: Callable[..., None] = prog.update_config

    def update_config(merge: bool = True) -> None:
        path = runtime_path(prog)
        config_files.check_runtime(path)
        config_files.loading(lambda: update(merge), path)

    prog.parse_tasks = parse_tasks  # type: ignore[method-assign]
    prog.update_config = update_config  # type: ignore[method-assign]
    prog.parse_cleanup = parse_cleanup  # type: ignore[method-assign]
    return adopt_help(prog)


program = XpushareProgram(namespace=namespace, version=__version__, name="xpushare", binary="xpushare",
                          config_class=XpushareConfig)


def main(argv: Sequence[str] | None = None) -> None:
    """Run the command line ``argv`` (default ``sys.argv``); exits the process with the task's status."""
    program.run(list(argv) if argv is not None else None)
