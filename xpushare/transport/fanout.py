"""Parallel fan-out of one operation over many hosts with a bounded thread pool.

Each host ends in exactly one :class:`HostOutcome`: a :class:`~xpushare.transport.base.CommandResult`, or the
:class:`~xpushare.model.errors.TransportError` that stopped it, so one bad host never hides the others.
"""

from __future__ import annotations

import re
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
    hosts: Sequence[Host], operation: Callable[[Host], T], *, forks: int = DEFAULT_FORKS
) -> list[HostOutcome[T]]:
    """Run ``operation(host)`` on every host, at most ``forks`` at once; outcomes in the hosts' order.

    Transport errors are captured per host; any other exception (a bug) propagates.
    """
    if forks < 1:
        raise ValueError("forks must be >= 1")

    def one(host: Host) -> HostOutcome[T]:
        try:
            return HostOutcome(host.name, value=operation(host))
        except TransportError as exc:
            return HostOutcome(host.name, error=exc)

    if len(hosts) <= 1:
        return [one(h) for h in hosts]
    with ThreadPoolExecutor(max_workers=min(forks, len(hosts)), thread_name_prefix="xpushare-fanout") as pool:
        return list(pool.map(one, hosts))


_TRAILING_NUMBER = re.compile(r"^(.*?)(\d+)$")


def fold_names(names: Sequence[str]) -> str:
    """Fold host names clush-style: ``c1-gpu1, c1-gpu2, c1-gpu3, c1-master`` -> ``c1-gpu[1-3],c1-master``.

    Consecutive numbers with the same prefix and width fold into ranges; other names are kept as they are.
    """
    groups: dict[tuple[str, int], list[int]] = {}
    plain: list[str] = []
    order: list[tuple[str, int] | str] = []
    for name in names:
        m = _TRAILING_NUMBER.match(name)
        if not m:
            plain.append(name)
            order.append(name)
            continue
        digits = m.group(2)
        width = len(digits) if digits.startswith("0") and len(digits) > 1 else 0
        key = (m.group(1), width)
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(int(digits))
    parts: list[str] = []
    for item in order:
        if isinstance(item, str):
            parts.append(item)
            continue
        prefix, width = item
        nums = sorted(set(groups[item]))
        if len(nums) == 1:
            parts.append(f"{prefix}{str(nums[0]).zfill(width)}")
            continue
        ranges: list[str] = []
        start = prev = nums[0]
        for n in [*nums[1:], None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            lo, hi = str(start).zfill(width), str(prev).zfill(width)
            ranges.append(lo if start == prev else f"{lo}-{hi}")
            if n is not None:
                start = prev = n
        parts.append(f"{prefix}[{','.join(ranges)}]")
    return ",".join(parts)
