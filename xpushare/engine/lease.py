"""Run isolation: a run holds its cluster's lease from before its first change to the cluster until its reports.

:func:`held` acquires the lease (:func:`acquire`), renews it in a background thread (:class:`Renewal`) and
releases it at the end. A cluster held by another live run stops the new run with :class:`LeaseHeld`
(exit 2, one line naming the holder), or, with ``--wait``, the new run waits until the lease is free. A
lease not renewed for the stale time may be taken (the taker says so); so may one whose holder ran on this
machine and whose process is gone (a run killed with SIGKILL, resumed at once). A run of several clusters
(``--cluster c1,c2``) holds every cluster's lease (:func:`held_all`); two of its clusters that keep their lease in
one place (two clusters on one machine) share it.

Where the lease lives (:func:`store_for`): k8s mode, a ``Lease`` in the test namespace
(:mod:`xpushare.transport.kube_lease`); host mode, a lock file on the first GPU host that answers
(:mod:`xpushare.transport.lock_file`), by default ``/tmp/xpushare-run.lease`` there. The built-in ``local``
cluster (and any host marked ``connection: local``) keeps it in this machine's temporary directory, or in
``$XPUSHARE_LEASE_DIR`` when set. Settings: the cluster parameters ``lease_renew_s``/``lease_stale_s``
(:class:`~xpushare.model.lease.LeaseSettings`), ``lease_path`` (host mode). docs/leases.md.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import secrets
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timezone
from typing import TextIO

from xpushare.inventory.schema import ClusterSpec, HostSpec
from xpushare.model.errors import HostUnreachable, LeaseHeld, UsageError, XpushareError
from xpushare.model.lease import Holder, LeaseSettings, LeaseStore, Observed
from xpushare.transport.base import Host
from xpushare.transport.hosts import connect

LEASE_FILE = "xpushare-run.lease"
REMOTE_LEASE_DIR = "/tmp"
LEASE_DIR_ENV = "XPUSHARE_LEASE_DIR"
_MAX_RACES = 20  # create/read/take rounds lost to other runs in a row before giving up


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (some containers)
        return str(os.getuid())


def new_holder(run_id: str) -> Holder:
    """The holder of a lease taken now by this process for ``run_id``."""
    return Holder(run_id=run_id, user=_user(), machine=socket.gethostname(), pid=os.getpid(),
                  started=datetime.now(timezone.utc).isoformat(timespec="seconds"), token=secrets.token_hex(8))


def _process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # it exists (another user's)
        return False
    return False


def stale_reason(seen: Observed, settings: LeaseSettings, me: Holder) -> str | None:
    """Why the lease ``seen`` may be taken by ``me``, or None while its holder is live."""
    if seen.age_s > settings.stale_s:
        return f"not renewed for {seen.age_s:.0f} s, stale after {settings.stale_s:g} s"
    other = seen.holder
    if other is not None and other.machine == me.machine and other.pid != me.pid and _process_gone(other.pid):
        return f"its process {other.pid} on this machine is gone"
    return None


def acquire(store: LeaseStore, me: Holder, settings: LeaseSettings, *, cluster: str, wait: bool,
            say: Callable[[str], None], sleep: Callable[[float], None] = time.sleep) -> bool:
    """Take the lease of ``cluster`` in ``store`` for ``me``; True once taken, False when ``me`` (the same
    token) holds it already: another cluster of the same run keeps its lease in the same place.

    Free: create it. Stale (see :func:`stale_reason`): take it and ``say`` whose it was. Held by a live run:
    raise :class:`LeaseHeld`, or with ``wait`` ``say`` so once and poll every ``settings.renew_s`` seconds
    until it is free or stale (Ctrl-C ends the wait).

    Raises:
        LeaseHeld: held and not ``wait``. XpushareError: the store failed, or lost :data:`_MAX_RACES` races in a row.
    """
    announced = False
    races = 0
    while True:
        if store.create(me, settings):
            return True
        seen = store.read()
        if seen is None:  # released between our create and read
            races += 1
        elif seen.holder is not None and seen.holder.token == me.token:
            return False
        else:
            reason = stale_reason(seen, settings, me)
            if reason is not None:
                if store.take(me, settings, seen):
                    say(f"took the lease of cluster {cluster} from {seen.describe()}: {reason}")
                    return True
                races += 1
            elif not wait:
                raise LeaseHeld(f"cluster {cluster} is in use by {seen.describe()} ({store.where}); "
                                "try again later or add --wait")
            else:
                races = 0
                if not announced:
                    say(f"cluster {cluster} is in use by {seen.describe()}; waiting for it (--wait)")
                    announced = True
                sleep(settings.renew_s)
        if races >= _MAX_RACES:
            raise XpushareError(f"cluster {cluster}: could not take the lease ({store.where}): "
                                "other runs kept changing it")


class Renewal:
    """The background thread that renews ``holder``'s lease every ``settings.renew_s`` seconds.

    A renewal that fails (store unreachable) is retried at the next period with a warning; one that finds the
    lease taken by another run sets :attr:`lost`, warns once and ends the thread.
    """

    def __init__(self, store: LeaseStore, holder: Holder, settings: LeaseSettings, *, cluster: str,
                 say: Callable[[str], None]) -> None:
        self.store = store
        self.holder = holder
        self.settings = settings
        self.cluster = cluster
        self.say = say
        self.lost = False
        self.renewals = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"lease-{cluster}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop renewing and wait for the thread (at most one store call in flight)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def renew_once(self) -> bool:
        """One renewal; False once the lease is lost (also what the thread does each period)."""
        try:
            ok = self.store.renew(self.holder, self.settings)
        except XpushareError as exc:
            self.say(f"warning: lease of cluster {self.cluster} not renewed: {exc}")
            return True
        if not ok:
            self.lost = True
            self.say(f"warning: the lease of cluster {self.cluster} was taken by another run ({self.store.where}); "
                     "this run's pods may be removed by it")
            return False
        self.renewals += 1
        return True

    def _loop(self) -> None:
        while not self._stop.wait(self.settings.renew_s):
            if not self.renew_once():
                return


def lock_path(cluster: ClusterSpec, host_is_local: bool) -> str:
    """Host mode: the lock file's path on the first GPU host (parameter ``lease_path``, else the defaults
    of the module docstring)."""
    given = cluster.params.get("lease_path")
    if given:
        return str(given)
    if host_is_local:
        return os.path.join(os.environ.get(LEASE_DIR_ENV) or tempfile.gettempdir(), LEASE_FILE)
    return f"{REMOTE_LEASE_DIR}/{LEASE_FILE}"


def store_hosts(cluster: ClusterSpec) -> list[HostSpec]:
    """Where ``cluster``'s lease may live, in order: Kubernetes, the master; host mode, the GPU hosts (the first
    that answers holds it, :func:`held`). Raises :class:`UsageError` for a mode without leases."""
    if cluster.is_kubernetes:
        from xpushare.transport.cluster_kubectl import master_spec

        return [master_spec(cluster, "hold the run's Lease from")]
    if cluster.is_host:
        return list(cluster.by_role("gpu") or cluster.hosts)
    raise UsageError(f"cluster {cluster.name!r}: mode {cluster.mode!r} has no lease")


def store_for(cluster: ClusterSpec, spec: HostSpec | None = None) -> tuple[LeaseStore, Host]:
    """The lease store of ``cluster`` on ``spec`` (default: the first of :func:`store_hosts`) and the connection it
    uses (its own: close it after use).

    Raises:
        UsageError: a mode without leases. TransportError: the host cannot be reached.
    """
    spec = spec or store_hosts(cluster)[0]
    if cluster.is_kubernetes:
        from xpushare.transport.cluster_kubectl import kubectl_for
        from xpushare.transport.kube_lease import KubeLeaseStore

        master = connect(spec)
        return KubeLeaseStore(kubectl_for(cluster, master)), master
    from xpushare.transport.lock_file import LockFileStore

    host = connect(spec)
    return LockFileStore(host, lock_path(cluster, spec.local)), host


@contextlib.contextmanager
def held(cluster: ClusterSpec, run_id: str, *, wait: bool = False, out: TextIO = sys.stderr,
         holder: Holder | None = None, unreached: list[HostUnreachable] | None = None) -> Iterator[Renewal | None]:
    """Hold ``cluster``'s lease for ``run_id`` during the block (see the module docstring); lines to ``out``.
    ``holder``: the run's holder when it holds other clusters' leases too (default: a new one); a lease it
    holds already in the same place is left to the block that took it (neither renewed nor released here).

    ``unreached``: a run that goes on with the hosts that answer (docs/reliability.md §partial clusters) gives a
    list: a lease host that does not answer is added to it and the next one of :func:`store_hosts` is tried (host
    mode: the lease lives on the first GPU host that answers); when none answers the block runs without the lease
    and yields None (nothing of the cluster can be changed). Without it such a host raises.

    Raises:
        LeaseHeld: another live run holds it and not ``wait``. UsageError: bad lease parameters.
        TransportError / KubeError: the store cannot be reached.
    """
    settings = LeaseSettings.from_params(cluster.params)

    def say(line: str) -> None:
        print(f"[xpushare] {line}", file=out, flush=True)

    me = holder or new_holder(run_id)
    candidates = store_hosts(cluster)
    for number, spec in enumerate(candidates, 1):
        store, conn = store_for(cluster, spec)
        try:
            try:
                taken = acquire(store, me, settings, cluster=cluster.name, wait=wait, say=say)
            except HostUnreachable as exc:
                if unreached is None:
                    raise
                unreached.append(exc)
                if number < len(candidates):
                    say(f"warning: the lease of cluster {cluster.name} cannot live on {spec.name} "
                        f"({exc.describe()}); trying {candidates[number].name}")
                continue
            renewal = Renewal(store, me, settings, cluster=cluster.name, say=say)
            if not taken:
                yield renewal  # not started: the block that took the lease renews and releases it
                return
            renewal.start()
            try:
                yield renewal
            finally:
                renewal.stop()
                try:
                    store.release(me)
                except XpushareError as exc:
                    say(f"warning: lease of cluster {cluster.name} not released ({exc}); it goes stale by itself")
            return
        finally:
            conn.close()
    yield None  # no host of the lease answers: the cluster is unreachable (only reached with ``unreached``)


@contextlib.contextmanager
def held_all(clusters: Sequence[ClusterSpec], run_id: str, *, wait: bool = False, out: TextIO = sys.stderr,
             unreached: dict[str, list[HostUnreachable]] | None = None) -> Iterator[list[Renewal | None]]:
    """Hold the lease of every cluster in ``clusters`` for ``run_id`` during the block (:func:`held` each, one
    holder for the run), taken in name order so that two runs of overlapping clusters never wait on each other
    in a circle. One held by another live run releases those taken and raises before the block runs (with
    ``wait``: waits for it). ``unreached``: cluster name -> the lease hosts that did not answer (filled in; see
    :func:`held`). Yields the renewals in name order (None: a cluster none of whose lease hosts answers); raises
    what :func:`held` raises."""
    me = new_holder(run_id)
    with contextlib.ExitStack() as stack:
        renewals: list[Renewal | None] = []
        for c in sorted(clusters, key=lambda c: c.name):
            found = None if unreached is None else unreached.setdefault(c.name, [])
            renewals.append(stack.enter_context(held(c, run_id, wait=wait, out=out, holder=me, unreached=found)))
        yield renewals


def live_holder(cluster: ClusterSpec) -> tuple[Observed, str] | None:
    """The lease of ``cluster`` as read now and where it lives, when a live run holds it; None when there is no
    lease or it could be taken (:func:`stale_reason`: not renewed for the stale time, or its holder ran on this
    machine and its process is gone, a run killed with SIGKILL). Raises what :func:`store_for` and the store's
    ``read`` raise."""
    settings = LeaseSettings.from_params(cluster.params)
    store, conn = store_for(cluster)
    try:
        seen = store.read()
    finally:
        conn.close()
    if seen is None or seen.holder is None or stale_reason(seen, settings, new_holder("")) is not None:
        return None
    return seen, store.where


def live_run_ids(cluster: ClusterSpec) -> frozenset[str]:
    """The run that holds ``cluster``'s lease and is alive (:func:`live_holder`), which ``invoke clean`` must
    leave alone; empty when none."""
    found = live_holder(cluster)
    return frozenset() if found is None or found[0].holder is None else frozenset({found[0].holder.run_id})


def refuse_live(cluster: ClusterSpec, run_id: str, *, what: str) -> None:
    """Raise :class:`LeaseHeld` (exit 2, naming the holder) when run ``run_id`` holds ``cluster``'s lease and is
    alive (:func:`live_holder`): ``what`` names what was refused (``its leftovers are not cleaned``)."""
    found = live_holder(cluster)
    if found is None or found[0].holder is None or found[0].holder.run_id != run_id:
        return
    seen, where = found
    raise LeaseHeld(f"run {run_id} is live: it holds the lease of cluster {cluster.name} ({seen.describe()}; "
                    f"{where}); {what} (--force to do it anyway)")
