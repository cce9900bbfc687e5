"""Tasks on the hosts of an inventory, outside the case matrix: ``hosts``, ``run``, ``ping``,
``metrics-check`` and ``envcheck``. Each parses its flags and calls the library; exit statuses are the README's.
The library is imported in the task's body: SSH and the case registry are most of the command line's start-up,
which ``--help`` and a usage error skip."""

from __future__ import annotations

import sys
from pathlib import Path

from invoke import Context

from xpushare.cli import defaults, flags
from xpushare.cli.flags import CLUSTER_HELP, INVENTORY_HELP, LIMIT_HELP, ROOT_HELP, VERBOSE_HELP
from xpushare.cli.guard import guarded, remainder_argv
from xpushare.cli.taskdef import task
from xpushare.engine.cluster_params import check_cluster_params
from xpushare.inventory import schema
from xpushare.inventory.selection import select_hosts
from xpushare.model.errors import UsageError
from xpushare.model.exit_status import ExitStatus
from xpushare.report.output import OUTPUT_HELP, output_format
from xpushare.transport import command_log
from xpushare.transport.fanout import DEFAULT_FORKS

__all__ = ["envcheck", "hosts", "metrics_check", "ping", "run_"]


@task(help={"cluster": "show one cluster only (default: all)", "inventory": INVENTORY_HELP, "output": OUTPUT_HELP},
      cluster_default=False)
def hosts(c: Context, cluster: str | None = None, inventory_: str | None = None, output: str | None = None) -> None:
    """Print the resolved inventory: clusters, hosts, roles, addresses and SSH settings."""

    def body() -> None:
        from xpushare import adhoc

        fmt = output_format(output)
        inv = schema.load(inventory_)
        clusters = [inv.cluster(cluster)] if cluster else list(inv.clusters.values())
        for spec in clusters:  # what a run would refuse is refused here too, before it is shown as resolved
            check_cluster_params(spec)
        print(adhoc.hosts_table(clusters, fmt))
        if fmt == "table":
            print("\n" + adhoc.hosts_folded(clusters))

    guarded(body)


@task(
    name="run",
    help={
        "cluster": CLUSTER_HELP,
        "role": "master | gpu | all (default: all)",
        "limit": LIMIT_HELP,
        "forks": f"hosts at once (default {DEFAULT_FORKS})",
        "timeout": "seconds per command (default 60), a deadline: the command is ended (here its process group, "
                   "over SSH its channel) and run returns within S + 3 s; the host's row says TIMEOUT with the "
                   "output until then, exit 1",
        "inventory": INVENTORY_HELP,
        "output": OUTPUT_HELP + " (per host: status, exit, duration_s, stdout, stderr, error)",
        "verbose": VERBOSE_HELP,
        "stream": "print each host's lines as they come, prefixed 'host: ' (like pdsh), not folded at the end "
                  "(with --output json|yaml on stderr: stdout holds the records alone)",
    },
    incrementable=["verbose"],
)
def run_(c: Context, cluster: str | None = None, role: str = "all", limit: str | None = None, forks: str | None = None,
         timeout: str | None = None, inventory_: str | None = None, output: str | None = None,
         verbose: int = 0, stream: bool = False) -> None:
    """Run a command on the selected hosts in parallel: invoke run --cluster c1 --role gpu -- nvidia-smi -L"""

    def body() -> ExitStatus | int | None:
        from xpushare import adhoc

        fmt = output_format(output)
        command_log.set_verbosity(verbose)
        n_forks = flags.count("--forks", defaults.forks(c, forks), DEFAULT_FORKS)
        limit_s = flags.seconds("--timeout", defaults.timeout(c, timeout), 60.0)
        argv = remainder_argv()
        if not argv:
            raise UsageError("no command given: put it after '--', e.g. invoke run --cluster c1 -- uptime")
        spec = schema.load(inventory_).cluster(defaults.need_cluster(cluster))
        selected = select_hosts(spec, role=role, limit=limit)
        return adhoc.run_adhoc(selected, argv, forks=n_forks, timeout=limit_s, out=sys.stdout, fmt=fmt,
                               stream=stream)

    guarded(body)


@task(
    help={
        "cluster": CLUSTER_HELP,
        "role": "master | gpu | all (default: all)",
        "limit": LIMIT_HELP,
        "forks": f"hosts at once (default {DEFAULT_FORKS})",
        "inventory": INVENTORY_HELP,
        "output": OUTPUT_HELP,
        "verbose": VERBOSE_HELP,
    },
    incrementable=["verbose"],
)
def ping(c: Context, cluster: str | None = None, role: str = "all", limit: str | None = None, forks: str | None = None,
         inventory_: str | None = None, output: str | None = None, verbose: int = 0) -> None:
    """Check reachability and latency; report hostname, kernel, GPUs, driver and kubectl versions."""

    def body() -> ExitStatus | int | None:
        from xpushare import adhoc

        fmt = output_format(output)
        command_log.set_verbosity(verbose)
        n_forks = flags.count("--forks", defaults.forks(c, forks), DEFAULT_FORKS)
        spec = schema.load(inventory_).cluster(defaults.need_cluster(cluster))
        selected = select_hosts(spec, role=role, limit=limit)
        return adhoc.ping(spec, selected, forks=n_forks, out=sys.stdout, fmt=fmt)

    guarded(body)


@task(
    name="metrics-check",
    help={
        "url": "exporter base URL, e.g. http://HOST:9402 (fetched from this machine; no probe pods)",
        "cluster": "cluster from the inventory: every scheduler of it (k8s: each scheduler pod, curl from its node; "
                   "host: each GPU host's scheduler.metrics_url) (default: $XPUSHARE_CLUSTER, else the config's)",
        "load": "run the under-load part (default: on for --cluster; refused with --url)",
        "no_load": "idle part only (--cluster)",
        "min_families": "minimum number of families with # HELP and # TYPE (default 25)",
        "inventory": INVENTORY_HELP,
        "output": OUTPUT_HELP,
        "run_id": "run id: saved under .tmplog/<run-id>/metrics-check/ (default: YYYYmmdd-HHMMSS now; never an "
                  "existing run's)",
        "root": ROOT_HELP,
    },
)
def metrics_check(c: Context, url: str | None = None, cluster: str | None = None, load: bool = False,
                  no_load: bool = False, min_families: str | None = None, inventory_: str | None = None,
                  output: str | None = None, run_id: str | None = None, root: str = ".") -> None:
    """The /metrics checklist of every scheduler's endpoint as PASS/FAIL lines, one table per scheduler.

    Exit status 1: a FAIL line, 3: a scheduler unreachable. What it fetched and the tables are saved under
    .tmplog/<run-id>/metrics-check/ (docs/metrics-check.md)."""

    def body() -> ExitStatus | int | None:
        from xpushare.metrics_check import task as checklist

        if not url and not cluster:
            raise UsageError("give --url http://HOST:PORT or --cluster NAME")
        fmt = output_format(output)
        families = flags.count("--min-families", min_families, 25, minimum=0)
        target = flags.http_url("--url", url) if url else None
        spec = schema.load(inventory_).cluster(cluster) if cluster else None
        want = True if load else (False if no_load else None)
        return checklist.metrics_check_task(target, spec, load=want, min_families=families, out=sys.stdout,
                                            fmt=fmt, root=Path(root), run_id=run_id)

    guarded(body)


@task(
    help={
        "cluster": CLUSTER_HELP,
        "limit": LIMIT_HELP,
        "forks": f"nodes at once over SSH (default {DEFAULT_FORKS})",
        "mode": "ssh (fan-out over SSH, default) | k8s (DaemonSet + pods through kubectl on the master)",
        "run_id": "run id (default: YYYYmmdd-HHMMSS now)",
        "skip_gpu": "stack check only: cuBLAS and the all-reduce are SKIP",
        "set": "envcheck parameter: --set envcheck_<name>=value (repeatable), see docs/envcheck.md",
        "root": ROOT_HELP,
        "inventory": INVENTORY_HELP,
        "output": OUTPUT_HELP + " (one record: the fleet report's fleet.json; progress lines then go to stderr)",
    },
    iterable=["set_"],
)
def envcheck(c: Context, cluster: str | None = None, limit: str | None = None, forks: str | None = None,
             mode: str = "ssh", run_id: str | None = None, skip_gpu: bool = False, set_: list[str] | None = None,
             root: str = ".", inventory_: str | None = None, output: str | None = None) -> None:
    """Node acceptance at scale: stack alignment, cuBLAS bf16, NCCL all-reduce, fleet report (docs/envcheck.md)."""

    def body() -> ExitStatus | int | None:
        from xpushare.envcheck import envcheck_task

        fmt = output_format(output)
        n_forks = flags.count("--forks", defaults.forks(c, forks), DEFAULT_FORKS)
        return envcheck_task(defaults.need_cluster(cluster), limit=limit, forks=n_forks, mode=mode,
                             inventory_path=inventory_, run_id=run_id, skip_gpu=skip_gpu, out=sys.stdout,
                             overrides=set_ or (), root=root, fmt=fmt)

    guarded(body)
