"""Parallel fan-out of one operation over many hosts with a bounded thread pool.

Each host ends in exactly one :class:`HostOutcome`: a :class:`~xpushare.transport.base.CommandResult`, or the
:class:`~xpushare.model.errors.TransportError` that stopped it, so one bad host never hides the others.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Generic, TypeVar

from xpushare.model.errors import HostUnreachable, TransportError
from xpushare.transport.base import Host

T = TypeVar("T")

DEFAULT_FORKS = 32


@dataclass(frozen=True)
class HostOutcome(Generic[T]):
    """What one host returned (``value``) or the error that stopped it (``error``)."""

    host: str
    value: T | None = None
    error: TransportError | None = None

    @property
    def unreachable(self) -> bool:
        return isinstance(self.error, HostUnreachable)


def fan_out(
    hosts: Sequence[Host], operation: Callable[[Host], T], *, forks: int = DEFAULT_FORKS, close_each: bool = False
) -> list[HostOutcome[T]]:
    """Run ``operation(host)`` on every host, at most ``forks`` at once; outcomes in the hosts' order.

    ``close_each``: close each host's connection as soon as its operation ended (a one-shot fan-out such as
    ``invoke run``), so that at most ``forks`` connections are open at once and memory stays flat with the host
    count. Transport errors are captured per host; any other exception (a bug) propagates. ``KeyboardInterrupt``
    (Ctrl-C, SIGTERM, SIGHUP in the calling thread) closes every host, so that commands in flight end, and
    propagates.
    """
    if forks < 1:
        raise ValueError("forks must be >= 1")

    def one(host: Host) -> HostOutcome[T]:
        try:
            return HostOutcome(host.name, value=operation(host))
        except TransportError as exc:
            return HostOutcome(host.name, error=exc)
        finally:
            if close_each:
                host.close()

    if len(hosts) <= 1:
        return [one(h) for h in hosts]
    pool = ThreadPoolExecutor(max_workers=min(forks, len(hosts)), thread_name_prefix="xpushare-fanout")
    try:
        return list(pool.map(one, hosts))
    except KeyboardInterrupt:  # Ctrl-C/SIGTERM reach this thread only: end the commands the workers wait on
        for host in hosts:
            host.close()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
