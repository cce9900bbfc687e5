"""Where the MET cases look: the scheduler serving one node, scraped from that node, and node-side captures.

The scheduler runs one instance per GPU node (docs/sut/log.md §annotation-debug), so every MET capture comes from
the scheduler of the node the probe pod runs on (or, for cases without a probe, of one chosen node):

* :func:`k8s_target`: the scheduler pod on a Kubernetes node (``kubectl get pods -l name=<gen>-scheduler
  -n <gen>-system`` once), fetched with ``curl <podIP>:<metrics_port><path>`` **on that node's GPU host**
  through the transport (a pod IP is reachable from the nodes), as ``invoke metrics-check --cluster`` does;
* :func:`host_target`: host mode, the inventory's ``scheduler.metrics_url``, fetched on the cluster's
  first host (this machine for ``local``: the standard library, no curl), as the host backend's harvest does;
* :class:`ScrapeTarget`: one GET (:meth:`~ScrapeTarget.get`), a capture file in the curl format the
  judgments read (:meth:`~ScrapeTarget.capture`), a fixed-rate series into ``metrics_series.jsonl``
  (:func:`scrape_loop`);
* :class:`NodeCapture`: a background command on a node's host (``nvidia-smi dmon``, the node sampler)
  whose output files are pulled into the case directory when it stops.

The URLs, the capture and series formats and curl on a node are the scraper's
(:mod:`xpushare.evidence.scrape_capture`); the GET from this machine is :mod:`xpushare.evidence.http_fetch`'s.

Only the backend interface is used (:class:`~xpushare.backends.base.Backend`: ``run_id``, ``names``,
``parts.scheduler_host``; :class:`~xpushare.backends.base.KubeAccess` from ``parts.kubernetes``: ``kubectl``,
``node_hosts()``, ``metrics_port``); errors are :class:`~xpushare.model.errors.XpushareError` with one line.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xpushare.backends.base import Backend, KubeAccess, run_spawn_prefix
from xpushare.data import workloads_dir
from xpushare.evidence.http_fetch import timed, urllib_fetcher
from xpushare.evidence.scrape_capture import (
    FetchError,
    ScrapeRecord,
    TimedFetch,
    base_url_of,
    capture_text,
    endpoint_url,
    timed_curl_fetcher,
)
from xpushare.inventory.schema import ClusterSpec
from xpushare.inventory.sut import sut_names
from xpushare.model.atomic_file import atomic_write_text, open_append
from xpushare.model.errors import TransportError, XpushareError
from xpushare.transport.base import Host, env_argv
from xpushare.transport.hosts import connect
from xpushare.transport.kube_errors import KubeError
from xpushare.transport.kube_objects import Pod
from xpushare.transport.local import LocalHost

__all__ = [
    "NodeCapture",
    "ScrapeTarget",
    "default_node",
    "has_command",
    "host_target",
    "k8s_target",
    "metric_prefix",
    "node_host",
    "sampler_capture",
    "scrape_loop",
    "spawn_name",
    "stamped_log_capture",
]

WORKLOADS = workloads_dir()



@dataclass
class ScrapeTarget:
    """One scheduler's exporter: ``base_url`` (``http://HOST:PORT``) fetched with ``fetch``.

    ``node``: the Kubernetes node it serves (None in host mode); ``scheduler_pod``: its pod name;
    ``fetched_from``: the host the requests run on (``this machine`` for urllib). ``clock``: Unix
    seconds. ``owned``: host connections this target opened (closed by :meth:`close`). ``latency``:
    how a record's ``latency_s`` is measured (curl's ``time_total`` on the node, or this machine's clock).
    """

    base_url: str
    fetch: TimedFetch
    node: str | None = None
    scheduler_pod: str | None = None
    fetched_from: str = "this machine"
    clock: Callable[[], float] = time.time
    owned: list[Host] = field(default_factory=list)
    latency: str = "wall clock of the request on this machine"

    def get(self, path: str = "/metrics", *, keep_body: bool = True) -> tuple[ScrapeRecord, str | None]:
        """GET ``base_url + path``: the record (Unix start, latency s, status, error, body) and the
        Content-Type (None without one). Never raises for network failures (``status`` None, ``error``)."""
        start = self.clock()
        try:
            status, ctype, body, seconds = self.fetch(self.base_url + path)
        except FetchError as exc:
            return ScrapeRecord(start, self.clock() - start, None, str(exc), None), None
        latency = seconds if seconds is not None else self.clock() - start
        return ScrapeRecord(start, latency, int(status), None, body if keep_body else None), ctype

    def capture(self, case_dir: Path, path: str, name: str) -> ScrapeRecord:
        """GET ``path`` and write it to ``case_dir/name`` in the capture format (:func:`capture_text`)."""
        record, ctype = self.get(path)
        atomic_write_text(case_dir / name, capture_text(record, ctype))
        return record

    def describe(self) -> dict[str, Any]:
        """What the plan records about the target."""
        return {"url": self.base_url, "node": self.node, "scheduler_pod": self.scheduler_pod,
                "fetched_from": self.fetched_from, "latency": self.latency}

    def close(self) -> None:
        for host in self.owned:
            host.close()
        self.owned.clear()


def scrape_loop(target: ScrapeTarget, out: Path, *, interval_s: float, duration_s: float, keep_body: bool = True,
                on_record: Callable[[int, ScrapeRecord], bool] | None = None,
                sleep: Callable[[float], None] = time.sleep) -> list[ScrapeRecord]:
    """Scrape ``/metrics`` every ``interval_s`` s (fixed rate from the first start) for ``duration_s`` s.

    Each record is appended to ``out`` (``metrics_series.jsonl``) as soon as it is taken, so an
    interrupted series keeps what it had. ``on_record(k, record)`` runs after scrape ``k`` (0-based)
    and returns False to stop early. A scrape that overruns its slot delays the next one (never
    skipped), like :func:`xpushare.metrics_check.endpoint.scrape_series`. ``sleep`` may raise
    ``KeyboardInterrupt`` (the case's interruptible sleep).
    """
    records: list[ScrapeRecord] = []
    t0 = target.clock()
    k = 0
    with open_append(out) as fh:
        while True:
            due = t0 + k * interval_s
            if due - t0 > duration_s + 1e-9:
                break
            now = target.clock()
            if due > now:
                sleep(due - now)
            record, _ = target.get("/metrics", keep_body=keep_body)
            records.append(record)
            fh.write(record.to_json_line())
            fh.flush()
            if on_record is not None and not on_record(k, record):
                break
            k += 1
    return records


# ------------------------------------------------------------------------------ resolving targets


def spawn_name(backend: Backend, case_id: str, what: str) -> str:
    """A spawn name unique to the run, the case and its attempt, e.g. ``xp15-20260301-120000-met-006-a1b2c3-dmon``
    (``[A-Za-z0-9_.-]``; the exact run prefix :func:`~xpushare.backends.base.run_spawn_prefix`, the attempt's
    token of :attr:`~xpushare.backends.base.CaseContext.attempt`: a dead attempt's files are never read)."""
    run_id = backend.run_id or "run"
    attempt = f"{backend.case.attempt}-" if backend.case is not None else ""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{run_spawn_prefix(run_id)}{case_id.lower()}-{attempt}{what}")


def node_host(backend: Backend, cluster: ClusterSpec, node: str) -> Host:
    """A new connection to the inventory GPU host of Kubernetes node ``node`` (close it when done).

    The node -> host map is the one the k8s backend built in ``prepare_run`` (same name, else same
    address as the node's InternalIP). Raises :class:`XpushareError` when no GPU host maps to ``node``.
    """
    kube = backend.parts.kubernetes
    mapping = kube.node_hosts() if kube is not None else {}
    name = mapping.get(node) or next((h.name for h in cluster.by_role("gpu") if h.name == node), None)
    if name is None:
        raise XpushareError(f"node {node}: no GPU host of the inventory maps to it (name or InternalIP)")
    return connect(cluster.host(name))


def _kube(backend: Backend) -> KubeAccess:
    kube = backend.parts.kubernetes
    if kube is None:
        raise XpushareError(f"{backend.mode} backend has no kubectl: a scheduler pod needs Kubernetes mode")
    return kube


def _scheduler_pods(backend: Backend) -> list[Pod]:
    """Every scheduler pod (all of a rollout's, unlike :meth:`KubeAccess.scheduler_pods`)."""
    names = backend.names
    try:
        return _kube(backend).sut_pods(names.scheduler_label)
    except KubeError as exc:
        raise XpushareError(f"listing scheduler pods: {exc}") from None


def _default_node(backend: Backend, cluster: ClusterSpec, sched_pods: list[Pod]) -> str:
    sched_nodes = {p.node for p in sched_pods if p.node}
    mapping = _kube(backend).node_hosts()
    for spec in cluster.by_role("gpu"):
        nodes = sorted(n for n, h in mapping.items() if h == spec.name) or [spec.name]
        for node in nodes:
            if node in sched_nodes:
                return node
    raise XpushareError(f"no scheduler pod ({backend.names.scheduler_label}) on a node of the inventory's GPU hosts")


def default_node(backend: Backend, cluster: ClusterSpec) -> str:
    """The node whose scheduler a case without a probe pod checks: the first GPU host of the inventory
    (in inventory order) whose node runs a scheduler pod. Raises :class:`XpushareError` when none does."""
    return _default_node(backend, cluster, _scheduler_pods(backend))


def k8s_target(backend: Backend, cluster: ClusterSpec, node: str | None, *, timeout_s: float = 10.0) -> ScrapeTarget:
    """The scheduler pod on ``node`` (None: :func:`default_node`), curled from the node's GPU host.

    Port ``metrics_port`` of the backend's parameters (default 9402); one ``kubectl get pods`` call.
    Prefers a Running pod when several exist (a rollout). Latency: curl's ``time_total`` on the node
    (:func:`~xpushare.evidence.scrape_capture.timed_curl_fetcher`; urllib when the node's host is this machine). Raises
    :class:`XpushareError` when the node has no scheduler pod, the pod has no IP yet, or no GPU host
    maps to the node.
    """
    sched = _scheduler_pods(backend)
    node = node or _default_node(backend, cluster, sched)
    pods = [p for p in sched if p.node == node]
    if not pods:
        raise XpushareError(f"node {node}: no scheduler pod runs there")
    pods.sort(key=lambda p: (p.phase != "Running", p.name))
    pod = pods[0]
    if not pod.pod_ip:
        raise XpushareError(f"node {node}: scheduler pod {pod.name} has no pod IP ({pod.phase})")
    port = _kube(backend).metrics_port
    host = node_host(backend, cluster, node)
    if isinstance(host, LocalHost):
        fetch, latency = timed(urllib_fetcher(timeout_s)), "wall clock of the request on this machine"
    else:
        fetch, latency = timed_curl_fetcher(host, timeout_s=timeout_s), f"curl time_total on {host.name}"
    return ScrapeTarget(endpoint_url(pod.pod_ip, port), fetch, node=node, scheduler_pod=pod.name,
                        fetched_from=host.name, owned=[host], latency=latency)


def host_target(backend: Backend, cluster: ClusterSpec, *, timeout_s: float = 10.0) -> ScrapeTarget | None:
    """Host mode: the inventory's ``scheduler.metrics_url`` (None when it names none), fetched on the
    backend's scheduler host (:attr:`~xpushare.backends.base.BackendParts.scheduler_host`; urllib on this machine
    or without one, curl over SSH elsewhere)."""
    url = cluster.scheduler.metrics_url
    if not url:
        return None
    base = base_url_of(url)
    host = backend.parts.scheduler_host
    if host is None or isinstance(host, LocalHost):
        return ScrapeTarget(base, timed(urllib_fetcher(timeout_s)))
    return ScrapeTarget(base, timed_curl_fetcher(host, timeout_s=timeout_s), fetched_from=host.name,
                        latency=f"curl time_total on {host.name}")


def metric_prefix(cluster: ClusterSpec) -> str:
    """The metric prefix of the cluster's generation without the underscore (``xpushare``/``nvshare``)."""
    return sut_names(cluster.generation).metric_prefix.rstrip("_")


# ---------------------------------------------------------------------------- node-side captures


def has_command(host: Host, command: str) -> bool:
    """``command -v <command>`` on ``host``; False when the host cannot be asked."""
    try:
        return host.run(["sh", "-c", 'command -v "$1" >/dev/null', "sh", command], timeout=30).ok
    except TransportError:
        return False


@dataclass
class NodeCapture:
    """A background command on a node's host (own session, :meth:`Host.spawn`), pulled back when stopped.

    ``outputs``: ``remote relative path -> case-dir relative path`` of files the command writes (relative
    to the host's spawn directory); its stdout/stderr log goes to ``log_to`` (None: not kept).
    ``remove``: paths on the host (relative to the spawn directory, or absolute) deleted after the
    copy, with the log (nothing of the capture is left behind). ``started_at``: Unix time just before
    the spawn request.
    """

    host: Host
    name: str
    argv: Sequence[str]
    log_to: str | None = None
    outputs: dict[str, str] = field(default_factory=dict)
    remove: list[str] = field(default_factory=list)
    started_at: float | None = None

    def start(self) -> None:
        """Spawn the command. Raises :class:`~xpushare.model.errors.TransportError` when it cannot start."""
        self.started_at = time.time()
        self.host.spawn(self.name, list(self.argv))

    def stop(self, case_dir: Path) -> list[str]:
        """Stop it (TERM, then KILL), copy its log and outputs into ``case_dir``; the files copied.

        Failures are noted in ``harvest-errors.txt`` (the judgment then finds the evidence missing).
        """
        files: list[str] = []
        try:
            log = self.host.stop(self.name)
        except TransportError as exc:
            _note(case_dir, f"{self.name}: {exc}")
            return files
        pairs = ([(log, self.log_to)] if self.log_to else []) + [
            (f"{self.host.spawn_dir}/{remote}", local) for remote, local in self.outputs.items()]
        for remote, local in pairs:
            try:
                self.host.get(remote, case_dir / local)
                files.append(local)
            except TransportError:
                continue  # not written (e.g. the sampler writes no_gpu.txt or the CSVs, not both)
        leftovers = [log] + [p if p.startswith("/") else f"{self.host.spawn_dir}/{p}" for p in self.remove]
        try:
            self.host.run(["rm", "-rf", "--", *leftovers], timeout=30)
        except TransportError as exc:
            _note(case_dir, f"{self.name}: cleanup: {exc}")
        return files


def sampler_capture(host: Host, name: str, python: str, node: str, *, interval_s: float = 1.0,
                    env: Mapping[str, str] | None = None) -> NodeCapture:
    """The node sampler (``workloads/node_sampler.py``, NVML per GPU and per process) as a :class:`NodeCapture`.

    Copies the script with the modules it imports (``_common.py``, ``_sampler_sources.py``) into a folder of
    its own in the host's spawn directory first (removed after); outputs land in the case dir as
    ``sampler/<node>_gpu.csv``, ``_procs.csv``, ``_pids.csv``, ``_no_gpu.txt``, ``_sampler_source.txt`` (the
    names MET-003's judgment and :mod:`xpushare.evidence.nvml_placement` read). ``env``: extra variables of the
    sampler (``{node}`` in a value is replaced by ``node``), e.g. where a node's driver library lives. Raises
    :class:`~xpushare.model.errors.TransportError` when the copy fails.
    """
    spawn_dir = host.spawn_dir
    if not spawn_dir.startswith("/"):
        home = host.run(["sh", "-c", "pwd"], timeout=30, check=True).stdout.strip()
        spawn_dir = f"{home}/{spawn_dir}"
    script_dir = f"{spawn_dir}/{name}-script"
    for file in ("node_sampler.py", "_common.py", "_sampler_sources.py"):
        host.put(WORKLOADS / file, f"{script_dir}/{file}")
    out_dir = f"{name}-out"
    outputs = {f"{out_dir}/{f}": f"sampler/{node}_{f}"
               for f in ("gpu.csv", "procs.csv", "pids.csv", "no_gpu.txt", "sampler_source.txt")}
    argv = env_argv([python, f"{script_dir}/node_sampler.py", "--out-dir", out_dir, "--interval-s", f"{interval_s:g}"],
                    {k: str(v).replace("{node}", node) for k, v in (env or {}).items()})
    return NodeCapture(host, name, argv, outputs=outputs, remove=[script_dir, out_dir])


#: Follows a file from its end and prints each new line behind the UTC time it was read, in kubectl's
#: ``logs --timestamps`` form (what the scheduler-log parsers place events in time by); polls every 50 ms.
_STAMP_SCRIPT = """
import datetime, sys, time
f = open(sys.argv[1], "rb")
f.seek(0, 2)
part = b""
while True:
    chunk = f.readline()
    if not chunk:
        time.sleep(0.05)
        continue
    part += chunk
    if part.endswith(b"\\n"):
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        sys.stdout.write(now + " " + part.decode("utf-8", "replace"))
        sys.stdout.flush()
        part = b""
"""


def stamped_log_capture(host: Host, name: str, python: str, path: str, log_to: str) -> NodeCapture:
    """A :class:`NodeCapture` of the lines appended to ``path`` on ``host`` while it runs, each behind the time it
    was read (``2026-03-01T12:00:00.123456Z <line>``, kubectl's ``--timestamps`` form), into ``log_to``: a host-mode
    scheduler writes its log without times, which MET-003's series needs (within 50 ms plus the write's own delay).
    ``python``: the host's interpreter."""
    return NodeCapture(host, name, [python, "-c", _STAMP_SCRIPT, path], log_to=log_to)


def _note(case_dir: Path, message: str) -> None:
    with open_append(case_dir / "harvest-errors.txt") as fh:
        fh.write(message + "\n")
