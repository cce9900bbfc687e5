"""kubectl's failures as typed exceptions: :class:`KubeError` and the subclasses :func:`classify` picks
from kubectl's stderr.

:class:`KubeError` holds the argv (``command``), kubectl's ``stderr`` and its ``exit_code``; its message names
the kubectl verb and the last stderr line. Subclasses: :class:`KubeNotFound` (``Error from server
(NotFound)``), :class:`KubeAlreadyExists`, :class:`KubeConflict` (a ``resourceVersion`` that changed
meanwhile), :class:`KubeServerError` (the API server answered a server-side error: 500 InternalError, 429
TooManyRequests, another 5xx), :class:`KubeUnavailable` (API server unreachable, or 503 ServiceUnavailable) and its
:class:`KubeRequestTimeout` (no answer within ``--request-timeout``), :class:`KubeTimeout` (``timed out
waiting``, or a wait of :class:`~xpushare.transport.kubectl.Kubectl` that ran out) and :class:`KubePodStuck` (a
waited-for pod that can never start); the last two carry the pods seen last.

:func:`transient` says which failures a read may simply repeat (:mod:`~xpushare.transport.kube_retry`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from xpushare.model.errors import ConnectionLost, XpushareError
from xpushare.transport.kube_objects import Pod

_GLOBAL_WITH_VALUE = frozenset({"--kubeconfig", "--context", "--request-timeout", "-n", "--namespace"})


def kube_verb(argv: Sequence[str]) -> str:
    """The kubectl verb of an argv (first word after the executable and the global flags)."""
    skip = False
    for arg in argv[1:]:
        if skip:
            skip = False
        elif arg in _GLOBAL_WITH_VALUE:
            skip = True
        elif not arg.startswith("-"):
            return arg
    return "?"


class KubeError(XpushareError):
    """kubectl exited non-zero (or a wait failed): the argv, kubectl's stderr and its exit code; ``attempts``: how
    many times the call was made (more than 1 after retries of a read; the message then says so)."""

    def __init__(self, command: Sequence[str], stderr: str, exit_code: int, message: str | None = None, *,
                 attempts: int = 1) -> None:
        self.command = list(command)
        self.stderr = stderr
        self.exit_code = exit_code
        self.attempts = attempts
        tail = stderr.strip().splitlines()[-1] if stderr.strip() else ""
        tries = f" after {attempts} attempts" if attempts > 1 else ""
        super().__init__(message or f"kubectl {kube_verb(self.command)} failed{tries} (exit {exit_code}): {tail}")


class KubeNotFound(KubeError):
    """The object does not exist (``Error from server (NotFound)``)."""


class KubeAlreadyExists(KubeError):
    """``create`` of an object that exists (``Error from server (AlreadyExists)``)."""


class KubeConflict(KubeError):
    """An update of an object that changed since it was read (``Error from server (Conflict)``)."""


class KubeServerError(KubeError):
    """The API server answered a server-side error (``(InternalError)``, ``(TooManyRequests)``, another 5xx)."""


class KubeUnavailable(KubeError):
    """kubectl could not reach the API server (refused, no route, TLS, or request timeout)."""


class KubeRequestTimeout(KubeUnavailable):
    """The API server did not answer within kubectl's ``--request-timeout`` (a hanging or overloaded server)."""


class KubeTimeout(KubeError):
    """A wait ran out: kubectl's ``timed out waiting for the condition``, or :meth:`Kubectl.wait_pods`.

    ``pods`` holds the last pods observed (empty when the timeout came from kubectl itself).
    """

    def __init__(self, command: Sequence[str], stderr: str, exit_code: int, message: str | None = None,
                 pods: Sequence[Pod] = ()) -> None:
        super().__init__(command, stderr, exit_code, message)
        self.pods: tuple[Pod, ...] = tuple(pods)


class KubePodStuck(KubeError):
    """A waited-for pod can never get there (image pull or container-creation error, admission failure).

    ``pods`` holds the pods of the last observation.
    """

    def __init__(self, command: Sequence[str], message: str, pods: Sequence[Pod]) -> None:
        super().__init__(command, message, -1, message)
        self.pods: tuple[Pod, ...] = tuple(pods)


#: kubectl's own request timeout fired (Go's http client deadline), as opposed to a refused connection.
_REQUEST_TIMEOUT_RE = re.compile(r"Client\.Timeout exceeded|context deadline exceeded")
_TIMEOUT_RE = re.compile(r"timed out waiting|context deadline exceeded|\(Timeout\)")
_UNAVAILABLE_RE = re.compile(
    r"Unable to connect to the server|The connection to the server .* was refused|no route to host|"
    r"Client\.Timeout exceeded|i/o timeout|\(ServiceUnavailable\)"
)
#: The API server answered, with a server-side error that a repeat of the same read may not get (5xx, 429).
_SERVER_ERROR_RE = re.compile(
    r"\((?:InternalError|ServiceUnavailable|TooManyRequests)\)|the server is currently unable to handle the request|"
    r"an error on the server|the server has received too many requests"
)


def classify(command: Sequence[str], stderr: str, exit_code: int, *, attempts: int = 1) -> KubeError:
    """The typed exception for a failed kubectl call, from its stderr (``attempts``: how often it was made)."""
    if "(NotFound)" in stderr:
        return KubeNotFound(command, stderr, exit_code, attempts=attempts)
    if "(AlreadyExists)" in stderr:
        return KubeAlreadyExists(command, stderr, exit_code, attempts=attempts)
    if "(Conflict)" in stderr:
        return KubeConflict(command, stderr, exit_code, attempts=attempts)
    if _SERVER_ERROR_RE.search(stderr) and not _UNAVAILABLE_RE.search(stderr):
        return KubeServerError(command, stderr, exit_code, attempts=attempts)
    if _UNAVAILABLE_RE.search(stderr) and _REQUEST_TIMEOUT_RE.search(stderr):
        limit = command[command.index("--request-timeout") + 1] if "--request-timeout" in command[:-1] else "?"
        tail = stderr.strip().splitlines()[-1]
        return KubeRequestTimeout(command, stderr, exit_code, f"kubectl {kube_verb(command)} timed out after {limit} "
                                  f"(--request-timeout; the API server did not answer): {tail}")
    if _UNAVAILABLE_RE.search(stderr):
        return KubeUnavailable(command, stderr, exit_code, attempts=attempts)
    if _TIMEOUT_RE.search(stderr):
        return KubeTimeout(command, stderr, exit_code)
    return KubeError(command, stderr, exit_code, attempts=attempts)


def transient(error: BaseException) -> bool:
    """Whether a read that failed with ``error`` may simply be repeated: the API server answered a server-side
    error (5xx, 429; :class:`KubeServerError`, a 503 :class:`KubeUnavailable`) or the connection to the master
    broke mid-command (:class:`~xpushare.model.errors.ConnectionLost`). Not: NotFound, Forbidden, usage errors,
    a refused connection, and kubectl's own ``--request-timeout`` (the server was already given its time)."""
    if isinstance(error, ConnectionLost):
        return True
    if isinstance(error, KubeServerError):
        return True
    return (isinstance(error, KubeUnavailable) and not isinstance(error, KubeRequestTimeout)
            and bool(_SERVER_ERROR_RE.search(error.stderr)))
