"""What dead runs left on a cluster, found and removed (``invoke clean``): after a SIGKILL, a crash of the tool
or a lost connection, nothing of the run's own cleanup ran.

Where a run leaves things, and how they are found again:

* Kubernetes mode: the run's own namespaces (``xpushare-<run id>`` and its tenants', cluster-wide) and pods and
  ConfigMaps in the cluster's home namespace (the inventory's fixed ``namespace``), each labelled
  ``app.kubernetes.io/managed-by=xpushare``, ``xpushare/run-id=<run id>`` and ``xpushare/run-key=<key>``
  (:mod:`xpushare.backends.k8s` labels every object it creates so; :func:`~xpushare.backends.k8s_names.run_labels`);
  one run's are selected by the run key, which names the run exactly; deleting a namespace deletes whatever is in it.
* Both modes: every process the backends start on a host (host-mode workloads, node samplers, ``nvidia-smi
  dmon``, k8s-mode log streams) is spawned with a pid file ``<spawn dir>/xp<n>-<run id>-...-<attempt>-<name>.pid``
  (``n``: the run id's length, so the prefix names the run exactly, :func:`spawn_prefixes`; ``attempt``: the
  case attempt's token) next to its log (:meth:`xpushare.transport.base.Host.spawn`), its process-group id
  inside; the samplers' output directories and the metrics capture scripts are ``<spawn dir>/xp<n>-<run id>-...``
  directories. These pid files
  and entries are the per-run record on each host: a pid file's process group is stopped (TERM, then KILL
  after about 2 s), then every entry of the run is removed. A pid that now names a process started after its
  pid file was written (the pid was reused since the crash) is left running and reported (``spared``).

Runs still alive are left alone: the caller names them (``invoke clean`` asks the cluster's lease,
:func:`xpushare.engine.lease.live_run_ids`, and refuses ``--run-id`` of a live run unless ``--force``).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

from xpushare.backends.base import run_spawn_prefix
from xpushare.backends.k8s_names import MANAGED_BY, RUN_KEY_LABEL, dns1123, label_value, run_key
from xpushare.inventory.schema import ClusterSpec
from xpushare.model.errors import TransportError, UsageError
from xpushare.transport.base import Host
from xpushare.transport.cluster_kubectl import kubectl_for, master_spec
from xpushare.transport.hosts import connect
from xpushare.transport.kube_errors import KubeError

__all__ = ["Removed", "clean", "clean_host", "clean_kubernetes", "older_prefixes", "spawn_prefixes"]

# ``ours P F``: whether pid P still names the process group the pid file F recorded. A live process P counts
# only if it started no later than F was written (+2 s): after a crash, cleaning may come days later, and P may
# by then be an unrelated process. With no process P, a live group P is still ours: Linux does not give a
# process group's id to a new process while that group exists.
_OURS = (
    'ours() { if e=$(ps -o etimes= -p "$1" 2>/dev/null); then e=$(echo $e); '
    '[ $(( $(date +%s) - e )) -le $(( $(stat -c %Y "$2" 2>/dev/null || echo 0) + 2 )) ]; '
    'else kill -0 -"$1" 2>/dev/null; fi; }; '
)
# Lists the spawn dir's ``xp-`` and ``xp<length>-`` entries; for a pid file also its pid and its state: 1 ours
# and running, 2 the pid now names another process (left alone), 0 gone.
_LIST = _OURS + (
    'cd "$1" 2>/dev/null || exit 0; for f in xp[-0-9]*; do [ -e "$f" ] || continue; case "$f" in *.pid) '
    'p=$(cat "$f" 2>/dev/null); a=0; if [ -n "$p" ]; then if ours "$p" "$f"; then a=1; '
    'elif kill -0 "$p" 2>/dev/null; then a=2; fi; fi; '
    'printf "PID|%s|%s|%s\\n" "$f" "$p" "$a";; *) printf "ENT|%s\\n" "$f";; esac; done'
)
# Stops the process groups of the named pid files that are still ours (TERM, ~2 s, KILL), then removes the
# named entries.
_REMOVE = _OURS + (
    'cd "$1" || exit 97; shift; pids=""; for f in "$@"; do case "$f" in *.pid) p=$(cat "$f" 2>/dev/null); '
    '[ -n "$p" ] && ours "$p" "$f" && pids="$pids $p";; esac; done; '
    'for p in $pids; do kill -TERM -"$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null; done; i=0; '
    'alive() { for p in $pids; do s=$(ps -o stat= -p "$p" 2>/dev/null) && '
    'case "$s" in Z*) ;; *) return 0;; esac; done; return 1; }; '
    'while alive && [ $i -lt 40 ]; do sleep 0.05; i=$((i+1)); done; '
    'for p in $pids; do kill -KILL -"$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null; done; rm -rf -- "$@"'
)


@dataclass
class Removed:
    """What was removed in one place (``where``: a host name, or ``<cluster> (kubernetes)``).

    ``stopped``: ``name (pid N)`` of each process group that was still running; ``spared``: ``name (pid N)`` of
    each pid file whose pid now names a process started after the file was written (pid reuse: not the run's,
    left running); ``objects``: Kubernetes objects as ``kind/name``; ``entries``: files and directories removed
    from the spawn dir; ``error``: why this place could not be cleaned (then the rest may be incomplete).
    """

    where: str
    stopped: list[str] = field(default_factory=list)
    spared: list[str] = field(default_factory=list)
    objects: list[str] = field(default_factory=list)
    entries: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def empty(self) -> bool:
        return not (self.stopped or self.objects or self.entries)

    def lines(self) -> list[str]:
        """What was removed, one line per kind, each starting with ``where``; ``nothing left`` when empty."""
        out = [f"{self.where}: {what}: {', '.join(items)}" for what, items in (
            ("deleted", self.objects), ("stopped", self.stopped),
            ("left running (pid reused by another process)", self.spared), ("removed", self.entries)) if items]
        if self.error:
            out.append(f"{self.where}: error: {self.error}")
        return out or [f"{self.where}: nothing left"]


def spawn_prefixes(run_id: str) -> tuple[str, ...]:
    """Name prefixes of a run's entries in a host's spawn dir, exact: ``xp<length>-<run id>-``
    (:func:`~xpushare.backends.base.run_spawn_prefix`, both backends), which no entry of another run begins with
    (run ``20261128`` never takes the entries of run ``20261128-101824``)."""
    return (run_spawn_prefix(run_id),)


def older_prefixes(run_id: str) -> tuple[str, ...]:
    """The prefixes earlier versions of the tool gave a run's entries (``xp-<run id>-``, and its lower-case
    DNS-1123 form): inexact (``xp-20261128-`` begins the names of run ``20261128-101824`` too), so used only to
    spare a live run's entries, never to select a run's."""
    host_style = re.sub(r"[^A-Za-z0-9_.-]", "-", f"xp-{run_id}-")
    return tuple(dict.fromkeys((host_style, dns1123(f"xp-{run_id}", 200) + "-")))


def _belongs(name: str, run_id: str | None, live: Collection[str]) -> bool:
    if any(name.startswith(p) for r in live for p in (*spawn_prefixes(r), *older_prefixes(r))):
        return False
    return run_id is None or any(name.startswith(p) for p in spawn_prefixes(run_id))


#: How many times :func:`clean_host` lists and removes: a stopped process's wrapper may still write its last
#: files (``<name>.end``, ``<name>.rc``) while it dies, after the listing they would have been in.
CLEAN_ROUNDS = 3


def clean_host(host: Host, run_id: str | None, live: Collection[str] = ()) -> Removed:
    """Stop and remove what runs left in ``host``'s spawn dir: the run ``run_id``'s, or (None) every run's but
    the ``live`` ones'; listed and removed again (up to :data:`CLEAN_ROUNDS` times) while stopping left new
    entries, so that one ``invoke clean`` leaves nothing. Transport errors are caught into :attr:`Removed.error`."""
    out = Removed(host.name)
    try:
        for _ in range(CLEAN_ROUNDS):
            listing = host.run(["sh", "-c", _LIST, "sh", host.spawn_dir], timeout=60, check=True)
            names: list[str] = []
            for line in listing.stdout.splitlines():
                kind, _, rest = line.partition("|")
                fields = rest.split("|")
                if not fields[0] or not _belongs(fields[0], run_id, live):
                    continue
                names.append(fields[0])
                if kind == "PID" and len(fields) == 3 and fields[2] in ("1", "2"):
                    (out.stopped if fields[2] == "1" else out.spared).append(f"{fields[0][:-4]} (pid {fields[1]})")
            if not names:
                break
            host.run(["sh", "-c", _REMOVE, "sh", host.spawn_dir, *names], timeout=60, check=True)
            out.entries += [n for n in names if n not in out.entries]
            if not out.stopped:
                break  # nothing was running: nothing can write after the removal
    except TransportError as exc:
        out.error = str(exc)
    return out


def kube_selector(run_id: str | None, live: Iterable[str] = ()) -> str:
    """Label selector of the objects to delete: one run's, or every xpushare run's but the ``live`` ones'."""
    if run_id is not None:  # exact: two run ids may share a run-id label value, never a run key
        return f"{MANAGED_BY},{RUN_KEY_LABEL}={run_key(run_id)}"
    keep = sorted({label_value(r) for r in live})
    return f"{MANAGED_BY},xpushare/run-id notin ({','.join(keep)})" if keep else MANAGED_BY


def clean_kubernetes(cluster: ClusterSpec, run_id: str | None, live: Collection[str] = ()) -> Removed:
    """Delete the namespaces, then the pods and the ConfigMaps of the home namespace, that runs left (see
    :func:`kube_selector`); never a namespace without the tool's labels."""
    out = Removed(f"{cluster.name} (kubernetes)")
    try:
        master = connect(master_spec(cluster, "delete pods from"))
    except UsageError as exc:
        out.error = str(exc)
        return out
    kubectl = kubectl_for(cluster, master)
    selector = kube_selector(run_id, live)
    try:
        out.objects += kubectl.delete(selector, kind="namespaces", wait=False, namespace=None).deleted
        for kind in ("pods", "configmaps"):
            out.objects += kubectl.delete(selector, kind=kind, wait=True, timeout_s=60).deleted
    except (KubeError, TransportError) as exc:
        out.error = str(exc)
    finally:
        master.close()
    return out


def clean(cluster: ClusterSpec, run_id: str | None, live: Collection[str] = ()) -> list[Removed]:
    """Remove what dead runs left on ``cluster``: Kubernetes objects (k8s mode), then each host's spawn dir.

    ``run_id``: only that run's leftovers (even if it is in ``live``: the caller refused a live run unless
    forced); None: every run's but the ``live`` ones'. Returns one :class:`Removed` per place, in inventory order.
    """
    live = [r for r in live if r != run_id]
    done: list[Removed] = []
    if cluster.is_kubernetes:
        done.append(clean_kubernetes(cluster, run_id, live))
    for spec in cluster.hosts:
        host = connect(spec)
        try:
            done.append(clean_host(host, run_id, live))
        finally:
            host.close()
    return done
