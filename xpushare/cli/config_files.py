"""Invoke's configuration files, checked before Invoke reads them: a file that cannot be read, is not valid YAML,
JSON or Python, or does not hold a mapping is one ``error:`` line and exit status 2 (USAGE), never Invoke's
traceback (a parser error, or ``AttributeError: 'list' object has no attribute 'items'`` from its merge).

Which files Invoke reads, and in what order, is Invoke's (https://docs.pyinvoke.org/en/stable/concepts/configuration.html):
per level (system ``/etc/``, user ``~/.``, project: the directory of ``tasks.py``) the first of
``<prefix>.yaml``, ``.yml``, ``.json``, ``.py`` that exists; at runtime the file of ``-f`` or
``$INVOKE_RUNTIME_CONFIG``. :func:`check_level` and :func:`check_runtime` check the one file Invoke would read.
A ``.py`` file is compiled, not run; Invoke runs it, and :func:`loading` turns an error it raises then (or any other
error Invoke meets loading a file) into the same one line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import yaml
from invoke.exceptions import Exit

from xpushare.model import strict_yaml
from xpushare.model.exit_status import ExitStatus

#: Invoke's suffixes, in the order it tries them (``Config._file_suffixes``).
SUFFIXES = ("yaml", "yml", "json", "py")

#: The most of a config file that is read (a config file is a few lines; ``/dev/zero`` must not fill memory).
MAX_BYTES = 1 << 20


class ConfigFileError(Exit):
    """A config file Invoke would read is not usable: Invoke's :class:`~invoke.exceptions.Exit`, whose message
    Invoke's ``Program.run`` prints as the one ``error:`` line, its code 2 (USAGE)."""

    def __init__(self, path: str | os.PathLike[str], why: str) -> None:
        super().__init__(message=f"error: config file {path}: {why}", code=int(ExitStatus.USAGE))

    def __str__(self) -> str:
        return str(self.message)


def first_existing(stem: str) -> Path | None:
    """The file Invoke reads for the level whose files are ``<stem>.<suffix>`` (``~`` expanded): the first of
    :data:`SUFFIXES` that exists (a broken link or a folder counts: Invoke would try to open it), else None."""
    for suffix in SUFFIXES:
        path = Path(os.path.expanduser(f"{stem}.{suffix}"))
        if os.path.lexists(path):
            return path
    return None


def check_level(stem: str) -> None:
    """Check the file Invoke reads for one level (:func:`first_existing`), if any. Raises :class:`ConfigFileError`."""
    path = first_existing(stem)
    if path is not None:
        check_file(path)


def check_runtime(path: str | None) -> None:
    """Check the runtime config file (``-f FILE`` or ``$INVOKE_RUNTIME_CONFIG``; None: none given). A file that
    does not exist is an error here (Invoke would skip it without a word). Raises :class:`ConfigFileError`."""
    if path is None or path == "":
        return
    if not os.path.lexists(os.path.expanduser(path)):
        raise ConfigFileError(path, "no such file")
    check_file(Path(os.path.expanduser(path)))


def check_file(path: Path) -> None:
    """Raise :class:`ConfigFileError` unless ``path`` is a readable UTF-8 file of at most :data:`MAX_BYTES` holding,
    by its suffix, YAML or JSON whose top level is a mapping (or empty YAML), or Python that compiles."""
    suffix = path.suffix.lstrip(".")
    if suffix not in SUFFIXES:
        raise ConfigFileError(path, f"unsupported type {suffix!r} (use one of: {', '.join(SUFFIXES)})")
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ConfigFileError(path, f"cannot read it: {exc.strerror or exc}") from None
    if len(raw) > MAX_BYTES:
        raise ConfigFileError(path, f"larger than {MAX_BYTES // 1024} KiB: not a config file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigFileError(path, f"not UTF-8 text (byte {exc.start})") from None
    if suffix == "py":
        try:
            compile(text, str(path), "exec")
        except (SyntaxError, ValueError) as exc:
            line = f" (line {exc.lineno})" if isinstance(exc, SyntaxError) and exc.lineno else ""
            raise ConfigFileError(path, f"not valid Python: {getattr(exc, 'msg', exc)}{line}") from None
        return
    data = _parsed(path, text, suffix)
    if data is not None and not isinstance(data, dict):
        raise ConfigFileError(path, f"holds a {_kind(data)}, not a mapping of sections (e.g. 'xpushare: {{...}}')")


def _parsed(path: Path, text: str, suffix: str) -> object:
    if suffix == "json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigFileError(path, f"not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigFileError(path, f"not valid YAML: {strict_yaml.describe_error(exc)}") from None


def _kind(data: object) -> str:
    return {list: "list", str: "string", int: "number", float: "number", bool: "boolean"}.get(type(data), "value")


def loading(load: Callable[[], object], path: str | os.PathLike[str] | None) -> None:
    """Run one of Invoke's loading steps (``Config.load_system``, ``load_user``, ``load_runtime``, ...) for the file
    ``path`` it reads (None: none exists, nothing can fail on a file). An error Invoke meets in the file (a ``.py``
    config that raises when run, a module among its values) raises :class:`ConfigFileError` naming the file."""
    try:
        load()
    except Exception as exc:
        if path is None:
            raise
        raise ConfigFileError(path, f"Invoke could not load it: {type(exc).__name__}: {exc}") from None
