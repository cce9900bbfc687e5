"""``put`` and ``get``: copy one file to or from the selected hosts of a cluster in parallel."""

from __future__ import annotations

import sys

from invoke import Context

from xpushare.cli import defaults, flags
from xpushare.cli.flags import CLUSTER_HELP, INVENTORY_HELP, LIMIT_HELP
from xpushare.cli.guard import guarded
from xpushare.cli.taskdef import task
from xpushare.inventory import schema
from xpushare.inventory.selection import select_hosts
from xpushare.model.exit_status import ExitStatus
from xpushare.report.output import OUTPUT_HELP, output_format
from xpushare.transport.fanout import DEFAULT_FORKS

__all__ = ["get", "put"]

_HELP = {
    "cluster": CLUSTER_HELP,
    "role": "master | gpu | all (default: all)",
    "limit": LIMIT_HELP,
    "forks": f"hosts at once (default {DEFAULT_FORKS})",
    "inventory": INVENTORY_HELP,
    "output": OUTPUT_HELP + " (per host: host, status, path, error)",
}


@task(help={**_HELP, "src": "local file to copy", "dest": "remote path; ending in '/': a directory (created)"})
def put(c: Context, src: str, dest: str, cluster: str | None = None, role: str = "all", limit: str | None = None,
        forks: str | None = None, inventory_: str | None = None, output: str | None = None) -> None:
    """Copy a local file to the selected hosts in parallel: invoke put --cluster c1 --role gpu ./w.py /tmp/"""

    _copy("put", src, dest, cluster, role, limit, forks, inventory_, output)


@task(help={**_HELP, "src": "remote file to fetch",
            "dest": "local directory: stored as DEST/<host>/<file name>; or a path with {host}, e.g. out/{host}.log"})
def get(c: Context, src: str, dest: str, cluster: str | None = None, role: str = "all",
        limit: str | None = None, forks: str | None = None, inventory_: str | None = None,
        output: str | None = None) -> None:
    """Copy a file from the selected hosts in parallel, a copy per host: invoke get --cluster c1 /tmp/x.log out/"""

    _copy("get", src, dest, cluster, role, limit, forks, inventory_, output)


def _copy(direction: str, src: str, dest: str, cluster: str | None, role: str, limit: str | None,
          forks: str | None, inventory_: str | None, output: str | None) -> None:
    """The body of ``put`` and ``get`` (``direction``): :func:`adhoc.put_files` or :func:`adhoc.get_files` between
    here and the selected hosts, under :func:`guarded`."""

    def body() -> ExitStatus | int | None:
        from xpushare import adhoc  # SSH: imported only when a copy runs (start-up of --help and usage errors)

        copy = adhoc.put_files if direction == "put" else adhoc.get_files
        fmt = output_format(output)
        n_forks = flags.count("--forks", forks, DEFAULT_FORKS)
        spec = schema.load(inventory_).cluster(defaults.need_cluster(cluster))
        selected = select_hosts(spec, role=role, limit=limit)
        return copy(selected, src, dest, forks=n_forks, out=sys.stdout, fmt=fmt)

    guarded(body)
