"""The :class:`~xpushare.transport.base.Host` for an inventory host (local or over SSH)."""

from __future__ import annotations

from xpushare.inventory.schema import HostSpec
from xpushare.transport.base import Host
from xpushare.transport.local import LocalHost
from xpushare.transport.ssh import SshHost


def connect(spec: HostSpec, *, interruptible: bool = False) -> Host:
    """The :class:`Host` for an inventory host: :class:`LocalHost` for ``local`` ones, else :class:`SshHost`.

    ``interruptible``: Ctrl-C, SIGTERM or SIGHUP ends the command that runs, here or on the host (``invoke run``;
    see :class:`LocalHost` and :class:`SshHost`)."""
    if spec.local:
        return LocalHost(spec.name, interruptible=interruptible)
    return SshHost(spec.name, spec.target, spec.ssh, interruptible=interruptible)


