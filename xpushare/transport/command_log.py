"""The log of every command the transport runs and of the logical actions: ``-v``/``-vv``/``-vvv`` on the terminal,
``debug.log`` in a run directory.

Every :meth:`~xpushare.transport.base.Host.run` (SSH or this machine, kubectl included: it runs through a host)
reports to the logger ``xpushare.commands``: the quoted command line when it starts (INFO), its exit status and
seconds when it ends (DEBUG), or the error that ended it (DEBUG); a kubectl read retried after a transient failure
(:mod:`~xpushare.transport.kube_retry`) adds a line per retry and one for how it ended (INFO).
:func:`set_verbosity` shows on stderr the actions (``-v``), the lines (``-vv``), the ends too (``-vvv``);
:func:`debug_log` writes them, with every library logger (paramiko, invoke, fabric), to a file while a run lasts.
Library loggers never reach the terminal.

Secrets are never written: a word ``NAME=value`` whose name mentions a password, token, secret or key keeps
its name and loses its value (``env API_TOKEN=***``), and a URL's password is masked (``http://user:***@host``).
"""

from __future__ import annotations

import io
import logging
import re
import shlex
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from xpushare.model.atomic_file import open_append

__all__ = ["ACTIONS", "LOGGER", "SHORT_LINE", "debug_log", "ended", "failed", "mask_url_passwords", "redact",
           "retried", "retrying", "set_verbosity", "started"]

LOGGER = logging.getLogger("xpushare.commands")
"""The logger of command lines (INFO: started; DEBUG: ended or failed)."""
ACTIONS = logging.getLogger("xpushare.actions")
"""The logger of logical actions (INFO): what a case does and waits for (:mod:`xpushare.transport.activity`)."""

_SECRET_WORD = re.compile(r"(?i)^([A-Za-z_][A-Za-z0-9_.-]*(?:pass(?:word|wd)?|token|secret|key)[A-Za-z0-9_]*)=(.+)$")
_SECRET_FLAG = re.compile(r"(?i)^(--(?:password|token|client-key-data|secret)[A-Za-z0-9-]*)=(.+)$")
_URL_PASSWORD = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^/@\s:]*):[^/@\s]*@")
_TERMINAL_MARK = "_xpushare_terminal"
_FORMAT = "%(asctime)s %(levelname)-5s %(name)s %(threadName)s: %(message)s"

# Library loggers go to debug.log only: without a handler of their own, Python's last-resort handler would
# print their warnings on the terminal.
for _name in ("paramiko", "invoke", "fabric"):
    logging.getLogger(_name).addHandler(logging.NullHandler())
LOGGER.setLevel(logging.DEBUG)  # its records are cheap; handlers choose what they show
ACTIONS.setLevel(logging.DEBUG)


def redact(argv: Sequence[str]) -> str:
    """``argv`` as one shell-quoted line (what the transport sends), the value of each secret-looking
    ``NAME=value`` or ``--token=value`` word replaced by ``***``."""
    out = []
    for word in argv:
        match = _SECRET_WORD.match(word) or _SECRET_FLAG.match(word)
        out.append(f"{match.group(1)}=***" if match else mask_url_passwords(word))
    return shlex.join(out)


def mask_url_passwords(text: str) -> str:
    """``text`` with the password of every URL in it replaced by ``***`` (``http://u:***@h:9402/metrics``)."""
    return _URL_PASSWORD.sub(r"\1:***@", text)


def started(host: str, argv: Sequence[str]) -> None:
    """Log that ``argv`` (the words sent, ``env K=V`` prefix included) starts on ``host``."""
    LOGGER.info("%s$ %s", host, redact(argv))


def ended(host: str, argv: Sequence[str], exit_code: int, seconds: float) -> None:
    """Log that ``argv`` on ``host`` ended with ``exit_code`` after ``seconds``."""
    LOGGER.debug("%s$ %s -> exit %d in %.3f s", host, redact(argv), exit_code, seconds)


def failed(host: str, argv: Sequence[str], error: BaseException, seconds: float) -> None:
    """Log that ``argv`` on ``host`` ended without an exit status (timeout, connection lost) after ``seconds``."""
    LOGGER.debug("%s$ %s -> %s after %.3f s", host, redact(argv), type(error).__name__, seconds)


def retrying(host: str, what: str, attempt: int, attempts: int, reason: str, delay_s: float) -> None:
    """Log that attempt ``attempt`` of ``attempts`` of ``what`` (``kubectl get``) on ``host`` failed transiently with
    ``reason`` and is retried after ``delay_s`` (INFO: shown with ``-v``)."""
    LOGGER.info("%s$ %s: attempt %d of %d failed (%s); retrying in %gs", host, what, attempt, attempts, reason,
                delay_s)


def retried(host: str, argv: Sequence[str], outcome: str, attempt: int, attempts: int) -> None:
    """Log how a retried command ended (``outcome``: ``succeeded``, ``failed (exit 1)``) on attempt ``attempt``."""
    LOGGER.info("%s$ %s -> %s on attempt %d of %d", host, redact(argv), outcome, attempt, attempts)


SHORT_LINE = 200
"""At ``-vv`` a command line longer than this many characters is shown cut in the middle (``-vvv``: whole)."""


class _Readable(logging.Filter):
    """``-vv``'s view of command lines: each cut to :data:`SHORT_LINE` characters, and a line that repeats the one
    before it (a poll) shown once, with the count of its repeats noted when another line comes."""

    def __init__(self) -> None:
        super().__init__()
        self._last: str | None = None
        self._repeats = 0

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if text == self._last:
            self._repeats += 1
            return False
        note = f"(the command before ran {self._repeats} more time(s))\n+ " if self._repeats else ""
        self._last, self._repeats = text, 0
        if len(text) > SHORT_LINE:
            half = SHORT_LINE // 2
            text = f"{text[:half]} ...({len(text) - SHORT_LINE} chars)... {text[-half:]}"
        record.msg, record.args = note + text, None
        return True


def _terminal(logger: logging.Logger, level: int, fmt: str, *filters: logging.Filter) -> None:
    handler = logging.StreamHandler(sys.stderr)
    setattr(handler, _TERMINAL_MARK, True)
    handler.setFormatter(logging.Formatter(fmt))
    handler.setLevel(level)
    for one in filters:
        handler.addFilter(one)
    logger.addHandler(handler)


def set_verbosity(level: int) -> None:
    """What ``-v`` shows on stderr: 0 nothing; 1 (``-v``) the logical actions (:data:`ACTIONS`: pods started,
    phases, what a wait waits for); 2 (``-vv``) also each command line as it starts, cut to :data:`SHORT_LINE`
    characters, a poll repeating the line before it shown once; 3+ (``-vvv``) every command line whole, with its
    exit status and seconds. Replaces an earlier setting (one terminal handler per logger at most)."""
    for logger in (LOGGER, ACTIONS):
        for handler in list(logger.handlers):
            if getattr(handler, _TERMINAL_MARK, False):
                logger.removeHandler(handler)
    if level <= 0:
        return
    _terminal(ACTIONS, logging.INFO, "~ %(message)s")
    if level == 2:
        _terminal(LOGGER, logging.INFO, "+ %(message)s", _Readable())
    elif level >= 3:
        _terminal(LOGGER, logging.DEBUG, "+ %(message)s")


class _BestEffortFileHandler(logging.FileHandler):
    """A FileHandler whose write errors (a full run directory) are dropped: logging's default prints a traceback
    per record on stderr, and the run reports the full directory itself (engine/suite_run.py), in one line. Every
    record's URL passwords are masked (:func:`mask_url_passwords`), a library's records included."""

    def handleError(self, record: logging.LogRecord) -> None:
        return None

    def _open(self) -> io.TextIOWrapper:
        return open_append(self.baseFilename)  # the one write path: never through a link, mode from the umask

    def format(self, record: logging.LogRecord) -> str:
        return mask_url_passwords(super().format(record))


@contextmanager
def debug_log(path: Path) -> Iterator[Path]:
    """Append every command line and every library log record (DEBUG and up) to ``path`` while the block runs.

    Records reach the file through the root logger; the terminal sees only what :func:`set_verbosity` asked for.
    """
    handler = _BestEffortFileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter(_FORMAT))
    handler.setLevel(logging.DEBUG)
    root = logging.getLogger()
    previous = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield path
    finally:
        root.removeHandler(handler)
        root.setLevel(previous)
        handler.close()
