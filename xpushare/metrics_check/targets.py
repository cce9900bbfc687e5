"""Which schedulers ``invoke metrics-check`` checks, where each is fetched from, and its probe load.

The scheduler runs one instance per GPU node (docs/sut/log.md §annotation-debug), so ``--cluster`` checks every one:

* :func:`url_target`: ``--url``, the one exporter named, fetched from this machine;
* :func:`k8s_targets`: every scheduler pod (``-l name=<gen>-scheduler -n <gen>-system``), GPU hosts of the inventory
  first in inventory order, then the other nodes by name. A Running pod with an IP is curled at
  ``<podIP>:9402`` on its node's GPU host (another GPU host, then this machine, when that one is unreachable); a pod
  that is not Running is a target without a fetch (:attr:`SchedulerTarget.problem`: one FAIL line);
* :func:`host_targets`: host mode, the inventory's ``scheduler.metrics_url`` (see :func:`host_schedulers` for which
  GPU hosts it names).

Each target owns the connections it opened and the backend of its probes: :meth:`SchedulerTarget.close`.
"""

from __future__ import annotations

import ipaddress
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO
from urllib.parse import urlsplit

from xpushare.backends.base import Backend
from xpushare.backends.host_scheduler import HostScheduler
from xpushare.evidence.http_fetch import Fetch, urllib_fetcher
from xpushare.evidence.scrape_capture import base_url_of, curl_fetcher, endpoint_url
from xpushare.inventory.schema import ClusterSpec, HostSpec, SchedulerSpec
from xpushare.inventory.sut import SutNames
from xpushare.metrics_check.probes import DEFAULT_PROBE_IMAGE, BackendProbeLoad, KubeProbeLoad, ProbeLoad
from xpushare.model.errors import TransportError, UsageError, XpushareError
from xpushare.transport.base import Host
from xpushare.transport.cluster_kubectl import kubectl_for, master_spec
from xpushare.transport.hosts import connect
from xpushare.transport.kubectl import Kubectl

__all__ = ["METRICS_PORT", "SchedulerTarget", "close_all", "host_schedulers", "host_targets", "k8s_targets",
           "url_target"]

#: The port of a scheduler pod's exporter (docs/sut/metrics.md §http).
METRICS_PORT = 9402


@dataclass
class SchedulerTarget:
    """One scheduler to check.

    ``name``: what the table calls it (the node in k8s, the GPU host in host mode, ``host:port`` for ``--url``);
    ``base_url``: ``http://HOST:PORT``; ``fetch``: how its GETs are made (None: it cannot be checked, ``problem``
    says why, e.g. its pod is Pending); ``fetched_from``: the host the GETs run on (``this machine`` for urllib);
    ``node``/``pod``: the Kubernetes node and scheduler pod (None in host mode); ``probe``: the load part's probes
    (None: idle part only); ``unreachable``: the problem is that nothing can reach it (exit status 3, not 1).
    """

    name: str
    base_url: str
    fetch: Fetch | None
    fetched_from: str = "this machine"
    node: str | None = None
    pod: str | None = None
    probe: ProbeLoad | None = None
    problem: str | None = None
    unreachable: bool = False
    owned: list[Host] = field(default_factory=list)
    backend: Backend | None = None
    read_log: Callable[[], str] | None = None
    """Reads the scheduler's log so far (k8s: ``kubectl logs`` of its pod); None where metrics-check cannot."""

    def close(self) -> None:
        """Close the connections this target opened and its probes' backend (idempotent)."""
        if self.backend is not None:
            self.backend.close()
            self.backend = None
        for host in self.owned:
            host.close()
        self.owned.clear()


def url_target(url: str, timeout_s: float) -> SchedulerTarget:
    """``--url``: the exporter at ``url`` (a trailing ``/metrics`` is fine), fetched from this machine."""
    base = base_url_of(url)
    parts = urlsplit(base)
    return SchedulerTarget(parts.netloc or base, base, urllib_fetcher(timeout_s))


def _reachable(spec: HostSpec) -> Host:
    """A connection to ``spec`` that answered ``true``. Raises :class:`TransportError` when it did not."""
    host = connect(spec)
    try:
        host.run(["true"], timeout=30)
    except TransportError:
        host.close()
        raise
    return host


def _fetcher(cluster: ClusterSpec, preferred: HostSpec | None, timeout_s: float,
             notes: TextIO) -> tuple[Fetch, str, Host | None]:
    """curl on a reachable GPU host (``preferred`` first), else urllib from this machine (noted on ``notes``);
    the connection it opened (None for urllib)."""
    candidates = ([preferred] if preferred else []) + [h for h in cluster.by_role("gpu") if h != preferred]
    for spec in candidates:
        if spec.local:
            return urllib_fetcher(timeout_s), "this machine", None
        try:
            host = _reachable(spec)
        except TransportError as exc:
            print(f"note: {spec.name} unreachable ({exc}); trying the next GPU host", file=notes)
            continue
        return curl_fetcher(host, timeout_s=timeout_s), spec.name, host
    print("note: no GPU host reachable; fetching from this machine", file=notes)
    return urllib_fetcher(timeout_s), "this machine", None


def _gpu_host_of(cluster: ClusterSpec, node: str | None, host_ip: str | None) -> HostSpec | None:
    for h in cluster.by_role("gpu"):
        if node is not None and node in (h.name, h.address):
            return h
        if host_ip is not None and h.address == host_ip:
            return h
    return None


def _log_reader(kubectl: Kubectl, pod: str, namespace: str) -> Callable[[], str]:
    """``kubectl logs <pod>`` of a scheduler pod (every line, no timestamps), as a callable."""
    return lambda: kubectl.logs(pod, timestamps=False, namespace=namespace)


def k8s_targets(cluster: ClusterSpec, names: SutNames, *, load: bool, timeout_s: float,
                notes: TextIO) -> list[SchedulerTarget]:
    """Every scheduler pod of a ``mode: k8s`` cluster as a target (see the module docstring); ``load``: probe pods
    pinned to each one's node (:class:`KubeProbeLoad`, image from the cluster parameter ``probe_image``).

    Raises:
        XpushareError: no scheduler pod at all. TransportError / KubeError: the master or kubectl failed.
    """
    master = connect(master_spec(cluster, "run kubectl on (mode k8s)"))
    try:
        kubectl = kubectl_for(cluster, master)
        pods = kubectl.list_pods(names.scheduler_label, namespace=names.namespace)
    except BaseException:
        master.close()
        raise
    if not pods:
        master.close()
        raise XpushareError(f"no scheduler pod (-l {names.scheduler_label} -n {names.namespace})")
    gpu_order = {h.name: i for i, h in enumerate(cluster.by_role("gpu"))}

    def rank(pod_host: HostSpec | None, node: str) -> tuple[int, str]:
        return (gpu_order[pod_host.name] if pod_host else len(gpu_order), node)

    placed = sorted(((_gpu_host_of(cluster, p.node, p.host_ip), p) for p in pods),
                    key=lambda hp: rank(hp[0], hp[1].node or hp[1].name))
    image = str(cluster.params.get("probe_image", DEFAULT_PROBE_IMAGE))
    targets: list[SchedulerTarget] = []
    for spec, pod in placed:
        name = pod.node or pod.name
        if pod.phase != "Running" or not pod.pod_ip:
            print(f"scheduler pod {pod.name} on node {pod.node or '?'}: {pod.phase}, not checked", file=notes)
            targets.append(SchedulerTarget(name, endpoint_url(pod.pod_ip or "?", METRICS_PORT), None, node=pod.node,
                                           pod=pod.name, problem=f"pod {pod.name} is {pod.phase}, not Running"))
            continue
        print(f"scheduler pod {pod.name} on node {pod.node} ({pod.pod_ip})", file=notes)
        fetch, where, host = _fetcher(cluster, spec, timeout_s, notes)
        probe = (KubeProbeLoad(kubectl, names, node=pod.node, namespace=cluster.home_namespace, image=image)
                 if load else None)
        targets.append(SchedulerTarget(name, endpoint_url(pod.pod_ip, METRICS_PORT), fetch, where, node=pod.node,
                                       pod=pod.name, probe=probe, owned=[host] if host else [],
                                       read_log=_log_reader(kubectl, pod.name, names.namespace)))
    if targets:
        targets[0].owned.append(master)  # closed with the first target, after every probe is gone
    return targets


def _file_reader(spec: HostSpec | None, host: Host | None, settings: SchedulerSpec) -> Callable[[], str] | None:
    """Host mode: the inventory's ``scheduler.log_file`` of the host whose scheduler is checked, read on that host
    through its connection (:meth:`HostScheduler.read_log`; this machine's file for a ``local`` host). None without
    a log file."""
    path = settings.log_file
    if not path or spec is None:
        return None
    if host is None:
        return lambda: Path(path).read_text(encoding="utf-8", errors="replace")
    return HostScheduler(spec.name, host, settings).read_log


def _is_this_host(hostname: str) -> bool:
    """``localhost`` or a loopback or unspecified address (``127.0.0.1``, ``::1``, ``0.0.0.0``)."""
    if hostname.lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        ip = ipaddress.ip_address(hostname)
    except ValueError:
        return False
    return ip.is_loopback or ip.is_unspecified


def host_schedulers(cluster: ClusterSpec) -> tuple[list[HostSpec], bool]:
    """The GPU hosts whose scheduler a host-mode cluster's ``scheduler.metrics_url`` names, and whether each is
    fetched on its own host only (True) or on the first reachable GPU host (False).

    * the URL's host is a GPU host's ``address`` or name: that host's scheduler only;
    * else a loopback or unspecified address (``http://127.0.0.1:9402``, what ``invoke deploy`` suggests):
      every GPU host runs its own scheduler there, each fetched on its own host;
    * else (a name or address of no GPU host): one scheduler, fetched on the first GPU host (then the next).

    Raises:
        UsageError: the cluster names no ``scheduler.metrics_url``.
    """
    url = cluster.scheduler.metrics_url
    if not url:
        raise UsageError(f"cluster {cluster.name}: host mode needs scheduler.metrics_url in the inventory")
    gpu = cluster.by_role("gpu")
    hostname = urlsplit(base_url_of(url)).hostname or ""
    named = [h for h in gpu if hostname in (h.address, h.name)]
    if named:
        return named[:1], True
    if _is_this_host(hostname) and gpu:
        return gpu, True
    return gpu[:1], False


def host_targets(cluster: ClusterSpec, *, load: bool, timeout_s: float, notes: TextIO,
                 probe_dir: Callable[[], Path] = lambda: Path(tempfile.mkdtemp(prefix="xpushare-metrics-check-")),
                 make_backend: Callable[[ClusterSpec], Backend] | None = None) -> list[SchedulerTarget]:
    """The schedulers of a ``mode: host`` cluster (:func:`host_schedulers`) as targets. ``load`` runs the probes
    through the host backend (``make_backend``, default :class:`~xpushare.backends.host.HostBackend`), only when the
    cluster names ``sut_lib`` (without the preloaded library no process registers), each on the host of the
    scheduler it checks (a probe on another host would register with that host's scheduler). A GPU host that
    cannot be reached is a target without a fetch (unreachable).

    Raises:
        UsageError: no ``scheduler.metrics_url``.
    """
    hosts, own = host_schedulers(cluster)
    base = base_url_of(str(cluster.scheduler.metrics_url))
    if load and not cluster.sut_lib:
        print("note: load part skipped: host mode without sut_lib (workloads would not register)", file=notes)
        load = False
    elif load:
        print("note: host mode: probe clients are matched by host_pid / client_id (pod and namespace are "
              "'none' outside Kubernetes)", file=notes)
    targets: list[SchedulerTarget] = []
    chosen: list[HostSpec | None] = list(hosts) or [None]  # no GPU host: fetched from this machine
    for spec in chosen:
        name = spec.name if spec else cluster.name
        host: Host | None = None
        if spec is None or not own:
            fetch, where, host = _fetcher(cluster, spec, timeout_s, notes)
        elif spec.local:
            fetch, where = urllib_fetcher(timeout_s), "this machine"
        else:
            try:
                host = _reachable(spec)
            except TransportError as exc:
                print(f"note: {spec.name} unreachable ({exc}): its scheduler is not checked", file=notes)
                targets.append(SchedulerTarget(name, base, None, spec.name, problem=f"unreachable: {exc}",
                                               unreachable=True))
                continue
            fetch, where = curl_fetcher(host, timeout_s=timeout_s), spec.name
        print(f"scheduler of {name}: {base}, fetching from {where}", file=notes)
        target = SchedulerTarget(name, base, fetch, where, owned=[host] if host else [],
                                 read_log=_file_reader(spec, host, cluster.scheduler) if own else None)
        if load:
            if make_backend is None:
                from xpushare.backends.host import HostBackend

                make_backend = HostBackend
            target.backend = make_backend(cluster)
            target.probe = BackendProbeLoad(target.backend, probe_dir(), node=spec.name if spec else None)
        targets.append(target)
    return targets


def close_all(targets: Sequence[SchedulerTarget]) -> None:
    """:meth:`SchedulerTarget.close` of each target."""
    for t in targets:
        t.close()
