"""Which hosts of a run answer: one probe per host, and a stand-in for a host that did not.

A run goes on with the hosts that answer (docs/reliability.md §partial clusters): each host is probed once
(:func:`probe`: connect and run ``true``, every host at once); a host that does not answer is replaced by an
:class:`UnreachableHost`, whose every operation raises the :class:`~xpushare.model.errors.HostUnreachable` of
the probe at once (no further connection attempts, each a ``connect_timeout`` long), so that whatever needs that
host fails naming it and why, and nothing else waits on it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from xpushare.model.errors import HostUnreachable
from xpushare.transport.base import CommandResult, Copied, Host, TextSink
from xpushare.transport.fanout import fan_out

__all__ = ["UnreachableHost", "probe"]

PROBE_TIMEOUT_S = 30.0


def probe(hosts: Sequence[Host]) -> dict[str, HostUnreachable]:
    """Connect to every host of ``hosts`` at once and run ``true``; the hosts that did not answer, by name, with
    the error (the others' connections stay open for what follows). A host that answered but could not run
    ``true`` counts as answering: what fails there is the command's, reported where it runs."""
    outcomes = fan_out(list(hosts), lambda h: h.run(["true"], timeout=PROBE_TIMEOUT_S))
    return {o.host: o.error for o in outcomes if isinstance(o.error, HostUnreachable)}


class UnreachableHost(Host):
    """A host the run found unreachable: every operation raises ``error`` (its :class:`HostUnreachable`) at once."""

    def __init__(self, error: HostUnreachable, spawn_dir: str = ".xpushare/spawn") -> None:
        self.name = error.host
        self.error = error
        self._spawn_dir = spawn_dir

    def _raise(self) -> HostUnreachable:
        return HostUnreachable(self.name, self.error.describe(), self.error.why)

    def run(self, argv: Sequence[str], *, timeout: float | None = None, env: Mapping[str, str] | None = None,
            check: bool = False, stdin: str | None = None, out_stream: TextSink | None = None,
            err_stream: TextSink | None = None) -> CommandResult:
        raise self._raise()

    def put(self, local: str | os.PathLike[str], remote: str) -> Copied:
        raise self._raise()

    def get(self, remote: str, local: str | os.PathLike[str]) -> Copied:
        raise self._raise()

    @property
    def spawn_dir(self) -> str:
        return self._spawn_dir
