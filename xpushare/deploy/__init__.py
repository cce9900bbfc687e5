"""Operating the SUT itself: install it on host-mode GPU hosts and start, stop, restart or inspect its scheduler
(:mod:`xpushare.deploy.host`). The task layer calls
:func:`run_on_cluster`, which reports per host and never stops at the first failed one."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from tabulate import tabulate

from xpushare.deploy import host as host_sut
from xpushare.deploy import host_systems
from xpushare.inventory.schema import ClusterSpec
from xpushare.model.errors import UsageError
from xpushare.model.exit_status import decide_exit_status
from xpushare.report.output import render
from xpushare.transport.base import Host
from xpushare.transport.fanout import fan_out
from xpushare.transport.hosts import connect

ACTIONS = ("deploy", "undeploy", "status", "start", "stop", "restart")


def _operation(action: str, layout: host_sut.HostSutLayout, src: Path | None,
               tmp: Path, python: str = "python3") -> Callable[[Host], tuple[str, bool]]:
    """One host's ``action``: ``(detail, ok)``; ok is False only where the scheduler it shows is not healthy."""
    tarball = host_sut.source_tarball(src, tmp) if action == "deploy" and src is not None else None

    def describe(st: host_sut.SchedulerStatus) -> tuple[str, bool]:
        health = f"/healthz {st.healthz}" if st.healthz else "/healthz no answer"
        return f"{'running' if st.pid else 'not running'} (pid {st.pid or '-'}, {st.manager}, {health})", st.healthy

    def op(host: Host) -> tuple[str, bool]:
        if action == "deploy":
            assert tarball is not None
            host_sut.stop(host, layout)  # a scheduler of an earlier deploy holds the socket
            host_sut.build_and_install(host, layout, tarball)
            started = f"built and installed; started ({host_sut.start(host, layout)})"
            try:  # FAIL-005..007's injector on a real GPU; without it they SKIP naming it (docs/faults.md)
                return f"{started}; fault shim at {host_sut.install_fault_shim(host, layout, python)}", True
            except host_sut.DeployError as exc:
                return f"{started}; {exc.message}", True
        if action == "undeploy":
            return "removed " + ", ".join(host_sut.undeploy(host, layout)), True
        manager = None
        if action in ("stop", "restart"):
            manager = host_sut.stop(host, layout)
            if action == "stop":
                return "stopped", True
        if action in ("start", "restart"):
            manager = host_sut.start(host, layout)
        return describe(host_sut.status(host, layout, manager))

    return op


def run_on_cluster(cluster: ClusterSpec, action: str, *, src: Path | None = None, out: TextIO,
                   fmt: str = "table") -> int:
    """``action`` of :data:`ACTIONS` on every GPU host of a host-mode cluster, in parallel; one table row per
    host (``fmt`` json/yaml: one record per host, ``{"host", "result": ok | failed | unreachable, "detail"}``).
    Returns the exit status: 0 when every host succeeded (``status``: every scheduler healthy), else
    :attr:`ExitStatus.FAILED` (a host failed; the others still ran), or :attr:`ExitStatus.UNREACHABLE` when
    every failure was an unreachable host.

    A cluster whose ``sut`` is ``hami-core`` or ``mps`` is deployed by :mod:`xpushare.deploy.host_systems`
    (``src``: a HAMi-core tree; without it each host clones the upstream repository).

    Raises:
        UsageError: not a host-mode cluster, a setting missing from the inventory, ``deploy`` of the project's
            SUT without a source tree, or with one that is not the system's.
    """
    system = cluster.sut in host_systems.SYSTEMS
    if system:  # HAMi-core (built from upstream: --sut-src a tree, else a clone on the host) or MPS's daemon
        sys_layout = host_systems.SystemLayout.of(cluster)
    else:
        layout = host_sut.HostSutLayout.of(cluster)
        if action == "deploy" and src is None:
            raise UsageError("deploy needs the SUT's source tree: --sut-src DIR (or $XPUSHARE_SUT_SRC)")
    specs = [cluster.host(name) for name in host_sut.gpu_hosts(cluster)]
    hosts = [connect(spec) for spec in specs]
    try:
        with tempfile.TemporaryDirectory(prefix="xpushare-deploy-") as tmp:
            if system:
                tarball = host_systems.hami_source_tarball(src, Path(tmp)) if (
                    action == "deploy" and src is not None and sys_layout.system == "hami-core") else None
                op = host_systems.operation(sys_layout, action, tarball)
            else:
                op = _operation(action, layout, src, Path(tmp), cluster.python)
            outcomes = fan_out(hosts, op)
    finally:
        for h in hosts:
            h.close()
    rows = [(o.host, "ok" if o.error is None else ("unreachable" if o.unreachable else "failed"),
             o.value[0] if o.value is not None else str(o.error)) for o in outcomes]
    unhealthy = action == "status" and any(o.value is not None and not o.value[1] for o in outcomes)
    if fmt == "table":
        print(tabulate(rows, headers=["host", action, "detail"]), file=out)
    else:
        print(render([{"host": h, "result": r, "detail": d} for h, r, d in rows], fmt), file=out)
    failed = any(o.error is not None for o in outcomes)
    return int(decide_exit_status(failed=failed or unhealthy, unreachable=any(o.unreachable for o in outcomes)))
