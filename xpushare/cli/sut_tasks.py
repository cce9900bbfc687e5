"""Invoke tasks that operate the SUT itself: ``undeploy`` and the ``sut`` namespace (``sut.status``,
``sut.start``, ``sut.stop``, ``sut.restart``), for host-mode clusters (the scheduler on each GPU host,
:mod:`xpushare.deploy.host`) and Kubernetes clusters (the DaemonSets, :mod:`xpushare.deploy.k8s`).
``invoke deploy`` of a host-mode cluster comes here through :func:`deploy_host_mode`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from invoke import Collection, Context
from tabulate import tabulate

from xpushare.cli import defaults
from xpushare.cli.flags import CLUSTER_HELP, INVENTORY_HELP
from xpushare.cli.guard import guarded
from xpushare.cli.taskdef import task
from xpushare.inventory import schema
from xpushare.inventory.schema import ClusterSpec
from xpushare.model.errors import UsageError
from xpushare.model.exit_status import decide_exit_status
from xpushare.report.output import OUTPUT_HELP, output_format, render

__all__ = ["deploy_host_mode", "sut", "undeploy"]

SUT_SRC_ENV = "XPUSHARE_SUT_SRC"
HELP = {"cluster": CLUSTER_HELP, "inventory": INVENTORY_HELP,
        "output": OUTPUT_HELP}


def _cluster(name: str | None, inventory_path: str | None) -> ClusterSpec:
    return schema.load(inventory_path).cluster(defaults.need_cluster(name))


def sut_source(explicit: str | None) -> Path | None:
    """``--sut-src``, else ``$XPUSHARE_SUT_SRC``, as an absolute path; None when neither is given."""
    value = explicit or os.environ.get(SUT_SRC_ENV)
    return Path(value).expanduser().resolve() if value else None


def deploy_host_mode(cluster: ClusterSpec, sut_src: str | None) -> int:
    """``invoke deploy`` of a host-mode cluster: build, install and start the SUT on every GPU host."""
    from xpushare import deploy as sut_ops  # SSH and kubectl: imported when a task acts, not at start-up

    return sut_ops.run_on_cluster(cluster, "deploy", src=sut_source(sut_src), out=sys.stdout)


def _act(cluster_name: str | None, inventory_path: str | None, action: str, output: str | None = None) -> int:
    from xpushare import deploy as sut_ops
    from xpushare.deploy import k8s as k8s_sut

    fmt = output_format(output)
    cluster = _cluster(cluster_name, inventory_path)
    if cluster.is_host:
        return sut_ops.run_on_cluster(cluster, action, out=sys.stdout, fmt=fmt)
    if action == "undeploy":
        raise UsageError(f"cluster {cluster.name}: undeploy is for host-mode clusters (a Kubernetes cluster's SUT "
                         "is its DaemonSets: delete their manifests with kubectl)")
    rows = k8s_sut.run_action(cluster, action)
    print(render([{"daemonset": d, "result": r, "ok": ok} for d, r, ok in rows], fmt) if fmt != "table"
          else tabulate(rows, headers=["daemonset", action, "ok"]))
    return int(decide_exit_status(failed=not all(ok for _, _, ok in rows)))


@task(help=HELP)
def undeploy(c: Context, cluster: str | None = None, inventory_: str | None = None, output: str | None = None) -> None:
    """Host mode: stop the scheduler and remove what ``invoke deploy`` installed on each GPU host (its log stays)."""
    guarded(lambda: _act(cluster, inventory_, "undeploy", output))


@task(help=HELP)
def status(c: Context, cluster: str | None = None, inventory_: str | None = None, output: str | None = None) -> None:
    """The SUT's state: per GPU host the scheduler's pid and /healthz (host mode), or the DaemonSets' rollout
    (k8s). Exit 1 when a scheduler is not healthy."""
    guarded(lambda: _act(cluster, inventory_, "status", output))


@task(help=HELP)
def start(c: Context, cluster: str | None = None, inventory_: str | None = None, output: str | None = None) -> None:
    """Start the SUT's scheduler (host mode: on each GPU host; k8s: un-park the DaemonSets) and wait until it
    is healthy / rolled out."""
    guarded(lambda: _act(cluster, inventory_, "start", output))


@task(help=HELP)
def stop(c: Context, cluster: str | None = None, inventory_: str | None = None, output: str | None = None) -> None:
    """Stop the SUT's scheduler (host mode: on each GPU host; k8s: park the DaemonSets on a node selector no node
    has, so their pods go away and the objects stay)."""
    guarded(lambda: _act(cluster, inventory_, "stop", output))


@task(help=HELP)
def restart(c: Context, cluster: str | None = None, inventory_: str | None = None, output: str | None = None) -> None:
    """Restart the SUT's scheduler (host mode: on each GPU host; k8s: ``kubectl rollout restart`` of the
    DaemonSets) and wait until it is healthy / rolled out."""
    guarded(lambda: _act(cluster, inventory_, "restart", output))


sut = Collection("sut", status, start, stop, restart)
