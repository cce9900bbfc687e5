"""The task body of ``invoke metrics-check`` (:func:`metrics_check_task`: ``--url`` or ``--cluster``) and
:func:`run_metrics_check`, which checks one exporter and prints the table. Line by line: ``docs/metrics-check.md``.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import TextIO

from xpushare.evidence.http_fetch import Fetch, curl_fetcher, urllib_fetcher
from xpushare.inventory.schema import ClusterSpec, HostSpec
from xpushare.inventory.sut import SutNames, sut_names
from xpushare.metrics_check.checklist import exit_status, idle_checks, render_table
from xpushare.metrics_check.endpoint import fetch_endpoint, metrics_scraper
from xpushare.metrics_check.probes import (
    DEFAULT_PROBE_IMAGE,
    BackendProbeLoad,
    KubeProbeLoad,
    ProbeLoad,
    run_load_checks,
)
from xpushare.model.errors import HostUnreachable, UsageError, XpushareError
from xpushare.model.exit_status import ExitStatus
from xpushare.report.output import render
from xpushare.transport.cluster_kubectl import kubectl_for, master_spec
from xpushare.transport.hosts import connect
from xpushare.transport.kube_objects import Pod
from xpushare.transport.kubectl import Kubectl

__all__ = ["metrics_check_task", "run_metrics_check"]


def run_metrics_check(url: str, *, fetch: Fetch | None = None, prefix: str | None = None, min_families: int = 25,
                      load: ProbeLoad | None = None, expect_idle: bool = True, settle_s: float = 60.0,
                      out: TextIO | None = None, fmt: str = "table") -> ExitStatus:
    """Check the exporter at ``url``, print the table (and a summary line) to ``out``; return the status.

    ``fmt`` json or yaml prints instead one record: ``{"url", "status": PASS | FAIL | UNREACHABLE, "passed",
    "failed", "error" (why it was unreachable, else null), "checks": [{"check", "expected", "observed",
    "result"}]}``.

    ``load``: when given, the under-load part runs after the idle part (:func:`run_load_checks`).
    Exit statuses: 0 every line PASS; 1 some line FAIL; 3 the endpoint gave no response at all (the
    load part is not attempted then).
    """
    out = out or sys.stdout
    fetch = fetch or urllib_fetcher()
    evidence = fetch_endpoint(url, fetch)
    lines = idle_checks(evidence, prefix=prefix, min_families=min_families, expect_idle=expect_idle)
    if load is not None and not evidence.unreachable:
        lines += run_load_checks(metrics_scraper(evidence.base_url, fetch), load, prefix=prefix, settle_s=settle_s)
    status = exit_status(lines, unreachable=evidence.unreachable)
    failed = sum(1 for ln in lines if not ln.ok)
    if fmt != "table":
        verdict = {ExitStatus.OK: "PASS", ExitStatus.UNREACHABLE: "UNREACHABLE"}.get(status, "FAIL")
        record = {"url": evidence.base_url, "status": verdict, "passed": len(lines) - failed, "failed": failed,
                  "error": evidence.metrics.error if status is ExitStatus.UNREACHABLE else None,
                  "checks": [{"check": ln.item, "expected": ln.expected, "observed": ln.observed,
                              "result": ln.status.value} for ln in lines]}
        print(render(record, fmt), file=out)
        return status
    print(f"metrics-check {evidence.base_url}", file=out)
    print(render_table(lines), file=out)
    if status is ExitStatus.UNREACHABLE:
        print(f"UNREACHABLE: no response from {evidence.base_url} ({evidence.metrics.error})", file=out)
    else:
        print(f"{len(lines) - failed}/{len(lines)} PASS" + (f", {failed} FAIL" if failed else ""), file=out)
    return status


def _host_named(cluster: ClusterSpec, node: str | None, node_ip: str | None) -> HostSpec | None:
    for h in cluster.by_role("gpu"):
        if node is not None and (h.name == node or h.address == node):
            return h
        if node_ip is not None and h.address == node_ip:
            return h
    return None


def _gpu_fetcher(cluster: ClusterSpec, preferred: HostSpec | None, timeout_s: float,
                 out: TextIO) -> tuple[Fetch, str]:
    """curl on a reachable GPU host (``preferred`` first), else urllib from this machine (noted on ``out``)."""
    candidates = ([preferred] if preferred else []) + [h for h in cluster.by_role("gpu") if h != preferred]
    for spec in candidates:
        if spec.local:
            return urllib_fetcher(timeout_s), "this machine"
        try:
            host = connect(spec)
            host.run(["true"], timeout=30)
        except HostUnreachable as exc:
            print(f"note: {spec.name} unreachable ({exc}); trying the next GPU host", file=out)
            continue
        return curl_fetcher(host, timeout_s=timeout_s), spec.name
    print("note: no GPU host reachable; fetching from this machine", file=out)
    return urllib_fetcher(timeout_s), "this machine"


def _k8s_target(cluster: ClusterSpec, names: SutNames, out: TextIO) -> tuple[Kubectl, Pod]:
    kubectl = kubectl_for(cluster, connect(master_spec(cluster, "run kubectl on (mode k8s)")))
    pods = [p for p in kubectl.list_pods(names.scheduler_label, namespace=names.namespace)
            if p.phase == "Running" and p.pod_ip]
    if not pods:
        raise XpushareError(f"no Running scheduler pod (-l {names.scheduler_label} -n {names.namespace})")
    chosen = pods[0]  # no GPU host of the inventory matches a node: the first Running scheduler pod
    for h in cluster.by_role("gpu"):  # inventory order: the first GPU host that runs a scheduler pod
        match = [p for p in pods if p.node in (h.name, h.address) or (h.address and p.host_ip == h.address)]
        if match:
            chosen = match[0]
            break
    print(f"scheduler pod {chosen.name} on node {chosen.node} ({chosen.pod_ip})", file=out)
    return kubectl, chosen


def metrics_check_task(url: str | None, cluster_spec: ClusterSpec | None, *, load: bool | None = None,
                       min_families: int = 25, out: TextIO | None = None, timeout_s: float = 10.0,
                       settle_s: float | None = None, fmt: str = "table") -> ExitStatus:
    """Body of ``invoke metrics-check``: ``--url http://HOST:PORT`` or ``--cluster C``.

    ``load``: run the under-load part; ``None`` is the default of the target: off for ``--url``, on
    for ``--cluster``. ``settle_s``: how long each load step polls for its lines to pass (None: the
    cluster parameter ``metrics_check_settle_s``, default 60 s; a line that never passes costs that long).

    * ``--url``: fetched from this machine; ``load=True`` is refused (probes need a cluster);
    * ``mode: k8s``: kubectl on the master lists the scheduler pods (``-l name=<gen>-scheduler -n
      <gen>-system``), takes a Running one on a GPU host of the inventory (else the first Running
      one), and curls ``<podIP>:9402`` from that node through the transport (another GPU host, then
      this machine, when it is unreachable). ``load``: probe pods on that scheduler's node
      (:class:`KubeProbeLoad`, image from the cluster parameter ``probe_image``);
    * ``mode: host``: the inventory's ``scheduler.metrics_url``, curled on the first GPU host (this
      machine for a local host). ``load`` runs the probes through the host backend, only when the
      cluster names ``sut_lib`` (without the preloaded library no process registers), all on that first
      GPU host, whose scheduler ``metrics_url`` names (a probe on another host would register with that
      host's scheduler and never show on the page); the probes' clients are matched by ``host_pid``
      (and ``client_id``), not by pod name (``none`` there).

    ``fmt``: table (the table and notes on ``out``) | json | yaml (only the result on ``out``, notes on stderr:
    :func:`run_metrics_check`). The metric prefix is the cluster's generation (``sut``). Raises
    :class:`UsageError` for bad flag combinations; returns the :class:`ExitStatus` of :func:`run_metrics_check`.
    """
    out = out or sys.stdout
    notes = out if fmt == "table" else sys.stderr  # json/yaml: only the result on out
    if (url is None) == (cluster_spec is None):
        raise UsageError("give exactly one of --url or --cluster")
    if url is not None:
        if load is True:
            raise UsageError("--load needs --cluster: probe pods are started through the cluster")
        return run_metrics_check(url, fetch=urllib_fetcher(timeout_s), min_families=min_families, out=out, fmt=fmt)
    assert cluster_spec is not None
    cluster = cluster_spec
    load = True if load is None else load
    if settle_s is None:
        settle_s = float(cluster.params.get("metrics_check_settle_s", 60.0))
    names = sut_names(cluster.sut)
    prefix = names.metric_prefix.rstrip("_")
    probe: ProbeLoad | None = None
    if cluster.mode == "k8s":
        kubectl, sched = _k8s_target(cluster, names, notes)
        fetch, where = _gpu_fetcher(cluster, _host_named(cluster, sched.node, sched.host_ip), timeout_s, notes)
        base = f"http://{sched.pod_ip}:9402"
        if load:
            probe = KubeProbeLoad(kubectl, names, node=sched.node, namespace=cluster.namespace,
                                  image=str(cluster.params.get("probe_image", DEFAULT_PROBE_IMAGE)))
    else:
        if not cluster.scheduler.metrics_url:
            raise UsageError(f"cluster {cluster.name}: host mode needs scheduler.metrics_url in the inventory")
        base = cluster.scheduler.metrics_url
        gpu = cluster.by_role("gpu")
        fetch, where = _gpu_fetcher(cluster, gpu[0] if gpu else None, timeout_s, notes)
        if load and not cluster.sut_lib:
            print("note: load part skipped: host mode without sut_lib (workloads would not register)", file=notes)
        elif load:
            from xpushare.backends.host import HostBackend

            probe = BackendProbeLoad(HostBackend(cluster), Path(tempfile.mkdtemp(prefix="xpushare-metrics-check-")),
                                     node=gpu[0].name if gpu else None)
            print("note: host mode: probe clients are matched by host_pid / client_id (pod and namespace are "
                  "'none' outside Kubernetes)", file=notes)
    print(f"fetching from {where}", file=notes)
    return run_metrics_check(base, fetch=fetch, prefix=prefix, min_families=min_families, load=probe,
                             settle_s=settle_s, out=out, fmt=fmt)
