"""kubectl's failures as typed exceptions: :class:`KubeError` and the subclasses :func:`classify` picks
from kubectl's stderr.

:class:`KubeError` holds the argv (``command``), kubectl's ``stderr`` and its ``exit_code``; its message names
the kubectl verb and the last stderr line. Subclasses: :class:`KubeNotFound` (``Error from server
(NotFound)``), :class:`KubeAlreadyExists`, :class:`KubeConflict` (a ``resourceVersion`` that changed
meanwhile), :class:`KubeUnavailable` (API server unreachable) and its :class:`KubeRequestTimeout` (no answer
within ``--request-timeout``), :class:`KubeTimeout` (``timed out waiting``, or a wait of
:class:`~xpushare.transport.kubectl.Kubectl` that ran out) and :class:`KubePodStuck` (a waited-for pod that
can never start); the last two carry the pods seen last.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from xpushare.model.errors import XpushareError
from xpushare.transport.kube_objects import Pod

_GLOBAL_WITH_VALUE = frozenset({"--kubeconfig", "--context", "--request-timeout", "-n", "--namespace"})


def _verb(argv: Sequence[str]) -> str:
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
    """kubectl exited non-zero (or a wait failed): the argv, kubectl's stderr and its exit code."""

    def __init__(self, command: Sequence[str], stderr: str, exit_code: int, message: str | None = None) -> None:
        self.command = list(command)
        self.stderr = stderr
        self.exit_code = exit_code
        tail = stderr.strip().splitlines()[-1] if stderr.strip() else ""
        super().__init__(message or f"kubectl {_verb(self.command)} failed (exit {exit_code}): {tail}")


class KubeNotFound(KubeError):
    """The object does not exist (``Error from server (NotFound)``)."""


class KubeAlreadyExists(KubeError):
    """``create`` of an object that exists (``Error from server (AlreadyExists)``)."""


class KubeConflict(KubeError):
    """An update of an object that changed since it was read (``Error from server (Conflict)``)."""


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


def classify(command: Sequence[str], stderr: str, exit_code: int) -> KubeError:
    """The typed exception for a failed kubectl call, from its stderr."""
    if "(NotFound)" in stderr:
        return KubeNotFound(command, stderr, exit_code)
    if "(AlreadyExists)" in stderr:
        return KubeAlreadyExists(command, stderr, exit_code)
    if "(Conflict)" in stderr:
        return KubeConflict(command, stderr, exit_code)
    if _UNAVAILABLE_RE.search(stderr) and _REQUEST_TIMEOUT_RE.search(stderr):
        limit = command[command.index("--request-timeout") + 1] if "--request-timeout" in command[:-1] else "?"
        tail = stderr.strip().splitlines()[-1]
        return KubeRequestTimeout(command, stderr, exit_code, f"kubectl {_verb(command)} timed out after {limit} "
                                  f"(--request-timeout; the API server did not answer): {tail}")
    if _UNAVAILABLE_RE.search(stderr):
        return KubeUnavailable(command, stderr, exit_code)
    if _TIMEOUT_RE.search(stderr):
        return KubeTimeout(command, stderr, exit_code)
    return KubeError(command, stderr, exit_code)
