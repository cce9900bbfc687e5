"""A run's lease on its cluster: who holds it, how fresh it is, and what a lease store must offer.

One run at a time holds a cluster. The holder renews its lease every ``renew_s`` seconds while it lives; a
lease not renewed for ``stale_s`` seconds is stale and another run may take it. The policy (acquire, wait,
renew, take a stale lease) is :mod:`xpushare.engine.lease`; the stores are
:mod:`xpushare.transport.kube_lease` (a Kubernetes ``Lease`` in the test namespace) and
:mod:`xpushare.transport.lock_file` (a lock file on the first GPU host). docs/leases.md describes both.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from xpushare.model.errors import UsageError

DEFAULT_RENEW_S = 10.0
"""Seconds between two renewals of a held lease (inventory parameter ``lease_renew_s``)."""
DEFAULT_STALE_S = 60.0
"""Seconds without renewal after which a lease is stale and may be taken (parameter ``lease_stale_s``)."""


@dataclass(frozen=True)
class Holder:
    """Who holds a lease: the run id, the user and machine (host name) that started it, the tool's pid there,
    the start time (ISO 8601, UTC) and a random token of this acquisition (tells two runs of one id apart)."""

    run_id: str
    user: str
    machine: str
    pid: int
    started: str
    token: str

    def describe(self) -> str:
        """One line naming the holder, e.g. ``run 20260101-120000 (ana@ws1, pid 4242, started 2026-...)``."""
        return f"run {self.run_id} ({self.user}@{self.machine}, pid {self.pid}, started {self.started})"

    def to_json(self, **extra: Any) -> str:
        """The holder as one JSON object (``extra`` keys added, e.g. the renewal time)."""
        return json.dumps({**asdict(self), **extra}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Holder:
        """Parse :meth:`to_json`'s output (unknown keys ignored).

        Raises:
            ValueError: not JSON, not an object, or a field missing or of the wrong type.
        """
        doc = json.loads(text)
        if not isinstance(doc, dict):
            raise ValueError("a lease holder is a JSON object")
        try:
            fields = {k: str(doc[k]) for k in ("run_id", "user", "machine", "started", "token")}
            return cls(pid=int(doc["pid"]), **fields)
        except (KeyError, TypeError) as exc:
            raise ValueError(f"lease holder without {exc}") from None


@dataclass(frozen=True)
class Observed:
    """A lease as read from its store: its ``holder`` (None when its content cannot be read: being written,
    or written by something else), ``age_s`` (seconds since its last renewal, by the store's clock where it has
    one) and ``version`` (opaque; what :meth:`LeaseStore.take` checks is unchanged)."""

    holder: Holder | None
    age_s: float
    version: str

    def describe(self) -> str:
        who = self.holder.describe() if self.holder else "an unknown holder"
        return f"{who}, last renewed {self.age_s:.0f} s ago"


@dataclass(frozen=True)
class LeaseSettings:
    """Renewal period and staleness, in seconds (``stale_s`` > ``renew_s`` > 0)."""

    renew_s: float = DEFAULT_RENEW_S
    stale_s: float = DEFAULT_STALE_S

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> LeaseSettings:
        """The settings of a cluster's parameters ``lease_renew_s`` / ``lease_stale_s`` (defaults 10 / 60).

        Raises:
            UsageError: not numbers, not positive, or a stale time not above the renewal period.
        """
        try:
            renew = float(params.get("lease_renew_s", DEFAULT_RENEW_S))
            stale = float(params.get("lease_stale_s", DEFAULT_STALE_S))
        except (TypeError, ValueError):
            raise UsageError("lease_renew_s and lease_stale_s must be numbers of seconds") from None
        if not 0 < renew < stale:
            raise UsageError(f"lease_stale_s ({stale:g}) must be above lease_renew_s ({renew:g}), both positive")
        return cls(renew, stale)


class LeaseStore(Protocol):
    """Where one cluster's lease lives. Every method is one atomic step on the store; none waits.

    Errors of the store itself (unreachable host, kubectl failing) raise
    :class:`~xpushare.model.errors.XpushareError` subclasses.
    """

    where: str
    """The lease's place, in words (``Lease xpushare-run in namespace gpu-test``, ``lock file /tmp/... on n1``)."""

    def read(self) -> Observed | None:
        """The lease as it is now; None when there is none."""
        ...

    def create(self, holder: Holder, settings: LeaseSettings) -> bool:
        """Create the lease for ``holder``; False when one exists already (nothing changed)."""
        ...

    def take(self, holder: Holder, settings: LeaseSettings, stale: Observed) -> bool:
        """Replace the lease ``stale`` (as read) by one of ``holder``; False when it changed meanwhile."""
        ...

    def renew(self, holder: Holder, settings: LeaseSettings) -> bool:
        """Mark the lease renewed now; False when it is no longer ``holder``'s (taken or gone)."""
        ...

    def release(self, holder: Holder) -> None:
        """Remove the lease if it is still ``holder``'s."""
        ...


def live_holder(observed: Observed | None, settings: LeaseSettings) -> Holder | None:
    """The holder of a lease that is not stale (None: no lease, stale, or unreadable)."""
    if observed is None or observed.age_s > settings.stale_s:
        return None
    return observed.holder
