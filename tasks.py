"""Invoke tasks of xpushare. Run ``invoke --list``; ``invoke --help <task>`` documents every flag.

Tasks stay thin: they parse flags and call the library (xpushare/); exit statuses are in the README.
"""

from __future__ import annotations

import sys

from invoke import Collection, task

from xpushare import adhoc, inventory
from xpushare.cli import guarded, remainder_argv
from xpushare.errors import UsageError
from xpushare.fanout import DEFAULT_FORKS
from xpushare.selection import select_hosts

INVENTORY_HELP = "inventory YAML (default: $XPUSHARE_INVENTORY, else inventory/inventory.yaml)"


@task(help={"cluster": "show one cluster only (default: all)", "inventory": INVENTORY_HELP})
def hosts(c, cluster=None, inventory_=None):
    """Print the resolved inventory: clusters, hosts, roles, addresses and SSH settings."""

    def body():
        inv = inventory.load(inventory_)
        clusters = [inv.cluster(cluster)] if cluster else list(inv.clusters.values())
        print(adhoc.hosts_table(clusters))

    guarded(body)


@task(
    name="run",
    help={
        "cluster": "cluster name from the inventory (required)",
        "role": "master | gpu | all (default: all)",
        "limit": "comma-separated host globs; '!' excludes, e.g. 'c1-gpu*,!c1-gpu3'",
        "forks": f"hosts at once (default {DEFAULT_FORKS})",
        "timeout": "seconds per command (default 60)",
        "inventory": INVENTORY_HELP,
    },
)
def run_(c, cluster, role="all", limit=None, forks=DEFAULT_FORKS, timeout=60, inventory_=None):
    """Run a command on the selected hosts in parallel: invoke run --cluster c1 --role gpu -- nvidia-smi -L"""

    def body():
        argv = remainder_argv()
        if not argv:
            raise UsageError("no command given: put it after '--', e.g. invoke run --cluster c1 -- uptime")
        spec = inventory.load(inventory_).cluster(cluster)
        selected = select_hosts(spec, role=role, limit=limit)
        return adhoc.run_adhoc(selected, argv, forks=int(forks), timeout=float(timeout), out=sys.stdout)

    guarded(body)


@task(
    help={
        "cluster": "cluster name from the inventory (required)",
        "role": "master | gpu | all (default: all)",
        "limit": "comma-separated host globs; '!' excludes",
        "forks": f"hosts at once (default {DEFAULT_FORKS})",
        "inventory": INVENTORY_HELP,
    }
)
def ping(c, cluster, role="all", limit=None, forks=DEFAULT_FORKS, inventory_=None):
    """Check reachability and latency; report hostname, kernel, GPUs, driver and kubectl versions."""

    def body():
        spec = inventory.load(inventory_).cluster(cluster)
        selected = select_hosts(spec, role=role, limit=limit)
        return adhoc.ping(spec, selected, forks=int(forks), out=sys.stdout)

    guarded(body)


ns = Collection(hosts, run_, ping)
