"""Exception hierarchy of xpushare.

Every error a user can cause maps to one line and an :class:`~xpushare.model.exit_status.ExitStatus`; tasks catch
:class:`XpushareError` at the top and never show a traceback for it.
"""

from __future__ import annotations

from xpushare.model.exit_status import ExitStatus


class XpushareError(Exception):
    """Base class: a one-line message and the exit status it maps to."""

    exit_status: ExitStatus = ExitStatus.FAILED


class UsageError(XpushareError):
    """Bad command-line input (unknown case id, bad flag value)."""

    exit_status = ExitStatus.USAGE


class InventoryError(XpushareError):
    """The inventory file is missing, not YAML, or does not match the schema."""

    exit_status = ExitStatus.USAGE


class TransportError(XpushareError):
    """A remote operation failed for a reason other than the command's own exit status."""

    def __init__(self, host: str, message: str) -> None:
        super().__init__(f"{host}: {message}")
        self.host = host
        self.message = message


#: Why a host did not answer, as :attr:`HostUnreachable.why` says it (the run report, run.json, envcheck).
UNREACHABLE_WHY = ("dns", "refused", "timeout", "no route", "auth", "host key", "ssh", "unreachable")


class HostUnreachable(TransportError):
    """Could not connect or authenticate to the host (kept distinct from a command that failed).

    ``why``: one of :data:`UNREACHABLE_WHY`: ``dns`` (the name does not resolve), ``refused`` (nothing listens
    on the port), ``timeout`` (no answer within ``connect_timeout``), ``no route``, ``auth`` (the key was
    refused), ``host key`` (changed, or unknown under ``strict``), ``ssh`` (the handshake failed: no SSH server
    there), ``unreachable`` (anything else)."""

    exit_status = ExitStatus.UNREACHABLE

    def __init__(self, host: str, message: str, why: str = "unreachable") -> None:
        super().__init__(host, message)
        self.why = why if why in UNREACHABLE_WHY else "unreachable"

    def describe(self) -> str:
        """``UNREACHABLE (<why>): <message>`` (the host's name left out: the caller names it)."""
        return f"UNREACHABLE ({self.why}): {self.message}"


class HostKeyMismatch(HostUnreachable):
    """The host presented a key that differs from known_hosts, or an unknown key under ``strict``."""

    def __init__(self, host: str, message: str, why: str = "host key") -> None:
        super().__init__(host, message, "host key")


class CommandTimeout(TransportError):
    """A command ran past its timeout (also raised when the network stalls mid-command).

    ``stdout``/``stderr``: what the command wrote before its deadline (decoded text, possibly empty);
    ``duration_s``: seconds from its start to the end of the wait; ``exit_code``: the command's own exit status
    when it had ended before the deadline and only a process it left in the background held its output open
    (None: the command itself was still running)."""

    def __init__(self, host: str, message: str, *, stdout: str = "", stderr: str = "",
                 duration_s: float | None = None, exit_code: int | None = None) -> None:
        super().__init__(host, message)
        self.stdout = stdout
        self.stderr = stderr
        self.duration_s = duration_s
        self.exit_code = exit_code


class ConnectionLost(TransportError):
    """The connection broke while a command ran; the next command reconnects."""


class RemoteNotFound(TransportError):
    """The file, or the spawned command, named on the host does not exist there (an absence, not a fault of
    the transport)."""


class CommandFailed(TransportError):
    """A command exited non-zero and the caller asked for ``check=True``."""

    def __init__(self, host: str, argv: list[str], exit_code: int, stderr: str) -> None:
        tail = stderr.strip().splitlines()[-1] if stderr.strip() else ""
        super().__init__(host, f"command {argv[0] if argv else '?'!r} exited {exit_code}: {tail}")
        self.argv = argv
        self.exit_code = exit_code
        self.stderr = stderr


class LeaseHeld(XpushareError):
    """Another live run holds the cluster's lease (the message names it); ``--wait`` waits for it instead."""

    exit_status = ExitStatus.USAGE


class HarvestIncomplete(XpushareError):
    """The evidence harvest of a case hit faults (a lost connection, a timeout, an API server failing): it
    stored what it could (``files``, relative to the case directory) and names the faults. The case cannot
    PASS or FAIL on such evidence: it is ERROR."""

    def __init__(self, files: list[str], faults: list[str]) -> None:
        super().__init__("; ".join(faults))
        self.files = files
        self.faults = faults


class RunDirectoryFull(XpushareError):
    """The run directory's file system is full (``ENOSPC``/``EDQUOT``): the run stops, keeping what it wrote."""


class StoredRunDamaged(UsageError, ValueError):
    """A stored run's file (``run.json``, ``result.json``) cannot be read as what it must be: truncated, not a JSON
    object, a field of the wrong type, too large. Exit 2 with one line naming the file; also a ``ValueError`` for
    callers that treat a bad stored run as bad input."""
