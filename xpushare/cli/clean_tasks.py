"""``invoke clean``: remove what dead runs left on a cluster (:mod:`xpushare.backends.leftovers`)."""

from __future__ import annotations

from invoke import Context

from xpushare.cli import defaults
from xpushare.cli.flags import CLUSTER_HELP, INVENTORY_HELP
from xpushare.cli.guard import guarded
from xpushare.cli.taskdef import task
from xpushare.model.errors import UsageError
from xpushare.model.exit_status import ExitStatus, decide_exit_status
from xpushare.report.output import OUTPUT_HELP, output_format, render

__all__ = ["clean"]


@task(
    help={
        "cluster": CLUSTER_HELP,
        "run_id": "only this run's leftovers, the run id matched exactly (default: every run's that is not alive)",
        "force": "clean --run-id even while that run is live (holds the cluster's lease): its workloads are "
                 "stopped and its cases end ERROR",
        "inventory": INVENTORY_HELP,
        "output": OUTPUT_HELP + " (per place: where, deleted, stopped, spared, removed, error)",
    },
)
def clean(c: Context, cluster: str | None = None, run_id: str | None = None, inventory_: str | None = None,
          output: str | None = None, force: bool = False) -> None:
    """Remove what dead runs left: pods and ConfigMaps (by label), processes (by pid file), files on the hosts.

    A live run (one holding the cluster's lease) is left alone: without ``--run-id`` its leftovers are spared;
    ``--run-id`` of a live run is refused (exit 2, naming the holder) unless ``--force``."""

    def body() -> ExitStatus:
        from xpushare.backends import leftovers
        from xpushare.engine import lease
        from xpushare.inventory import schema
        from xpushare.report.run_store import validate_run_id

        fmt = output_format(output)
        name = defaults.need_cluster(cluster)
        if run_id is not None:
            try:
                validate_run_id(run_id)
            except ValueError as exc:
                raise UsageError(f"--run-id: {exc}") from None
        spec = schema.load(inventory_).cluster(name)
        if run_id is not None and not force:
            lease.refuse_live(spec, run_id, what="its workloads and files are not cleaned")
        removed = leftovers.clean(spec, run_id, lease.live_run_ids(spec))
        if fmt != "table":
            print(render([{"where": p.where, "deleted": p.objects, "stopped": p.stopped, "spared": p.spared,
                           "removed": p.entries, "error": p.error} for p in removed], fmt))
        for place in removed if fmt == "table" else ():
            for line in place.lines():
                print(line)
        # Nothing found is a success; a place that could not be cleaned is not.
        return decide_exit_status(failed=any(p.error for p in removed))

    guarded(body)
