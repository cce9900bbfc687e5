"""A run's lease as a Kubernetes ``Lease`` (coordination.k8s.io/v1) in the test namespace, through kubectl.

The object (name :data:`LEASE_NAME`)::

    metadata.annotations["xpushare/holder"]: the holder as JSON (run id, user, machine, pid, start, token)
    spec.holderIdentity: "<user>@<machine> <run id>"   spec.leaseDurationSeconds: the stale time
    spec.acquireTime / spec.renewTime: MicroTime (UTC)  spec.leaseTransitions: takeovers so far

Created with ``kubectl create`` (409 AlreadyExists: held), renewed and taken over with ``kubectl replace``
carrying the ``resourceVersion`` read (409 Conflict: someone else wrote it meanwhile), released with
``kubectl delete``. The age of a lease is this machine's clock minus ``spec.renewTime`` (the holder's
clock): machines running the tool should keep their clocks in sync (NTP) to within a fraction of the stale time.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from xpushare.model.lease import Holder, LeaseSettings, Observed, live_holder
from xpushare.transport.kube_errors import KubeAlreadyExists, KubeConflict, KubeNotFound
from xpushare.transport.kube_objects import parse_time
from xpushare.transport.kubectl import Kubectl

LEASE_NAME = "xpushare-run"
KIND = "leases.coordination.k8s.io"
HOLDER_ANNOTATION = "xpushare/holder"


def micro_time(when: datetime) -> str:
    """Kubernetes ``MicroTime``: RFC3339 UTC with microseconds (``2026-01-01T12:00:00.000000Z``)."""
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class KubeLeaseStore:
    """The :class:`~xpushare.model.lease.LeaseStore` of a k8s-mode cluster: one ``Lease`` in ``kubectl``'s
    namespace. ``now`` is the clock ages are measured with (aware UTC datetimes)."""

    def __init__(self, kubectl: Kubectl, name: str = LEASE_NAME,
                 now: Callable[[], datetime] = lambda: datetime.now(timezone.utc)) -> None:
        self.kubectl = kubectl
        self.name = name
        self.now = now
        self.where = f"Lease {name} in namespace {kubectl.namespace}"

    def _get(self) -> dict[str, Any] | None:
        try:
            return self.kubectl.get_json(["get", KIND, self.name])
        except KubeNotFound:
            return None

    def _observe(self, doc: dict[str, Any]) -> Observed:
        meta, spec = doc.get("metadata") or {}, doc.get("spec") or {}
        try:
            holder: Holder | None = Holder.from_json((meta.get("annotations") or {}).get(HOLDER_ANNOTATION, ""))
        except ValueError:
            holder = None
        try:
            renewed = parse_time(spec.get("renewTime") or spec.get("acquireTime") or meta.get("creationTimestamp"))
        except ValueError:
            renewed = None
        age = (self.now() - renewed).total_seconds() if renewed else 0.0
        return Observed(holder, max(0.0, age), str(meta.get("resourceVersion", "")))

    def _object(self, holder: Holder, settings: LeaseSettings, *, version: str | None = None,
                acquired: str | None = None, transitions: int = 0) -> str:
        now = micro_time(self.now())
        meta: dict[str, Any] = {"name": self.name, "namespace": self.kubectl.namespace,
                                "annotations": {HOLDER_ANNOTATION: holder.to_json()}}
        if version:
            meta["resourceVersion"] = version
        spec = {"holderIdentity": f"{holder.user}@{holder.machine} {holder.run_id}",
                "leaseDurationSeconds": max(1, round(settings.stale_s)), "acquireTime": acquired or now,
                "renewTime": now, "leaseTransitions": transitions}
        return json.dumps({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta, "spec": spec})

    def _update(self, body: str) -> bool:
        try:
            self.kubectl.run(["replace", "-f", "-", "-o", "json"], stdin=body)
        except (KubeConflict, KubeNotFound):
            return False
        return True

    def read(self) -> Observed | None:
        doc = self._get()
        return None if doc is None else self._observe(doc)

    def create(self, holder: Holder, settings: LeaseSettings) -> bool:
        try:
            self.kubectl.run(["create", "-f", "-", "-o", "json"], stdin=self._object(holder, settings))
        except KubeAlreadyExists:
            return False
        return True

    def take(self, holder: Holder, settings: LeaseSettings, stale: Observed) -> bool:
        doc = self._get()
        if doc is None or self._observe(doc).version != stale.version:
            return False
        transitions = int((doc.get("spec") or {}).get("leaseTransitions") or 0) + 1
        return self._update(self._object(holder, settings, version=stale.version, transitions=transitions))

    def renew(self, holder: Holder, settings: LeaseSettings) -> bool:
        doc = self._get()
        seen = None if doc is None else self._observe(doc)
        if doc is None or seen is None or seen.holder is None or seen.holder.token != holder.token:
            return False
        spec = doc.get("spec") or {}
        return self._update(self._object(holder, settings, version=seen.version, acquired=spec.get("acquireTime"),
                                          transitions=int(spec.get("leaseTransitions") or 0)))

    def release(self, holder: Holder) -> None:
        seen = self.read()
        if seen is not None and seen.holder is not None and seen.holder.token == holder.token:
            self.kubectl.delete(name=self.name, kind=KIND, wait=False)


def live_run(kubectl: Kubectl, settings: LeaseSettings) -> str | None:
    """The run id of the live holder of the lease in ``kubectl``'s namespace (None: free, stale or unreadable):
    the run whose pods run-start cleanup must leave alone."""
    holder = live_holder(KubeLeaseStore(kubectl).read(), settings)
    return holder.run_id if holder else None
