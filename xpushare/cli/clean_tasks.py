"""``invoke clean``: remove what dead runs left on a cluster (:mod:`xpushare.backends.leftovers`)."""

from __future__ import annotations

from invoke import Context

from xpushare.cli import defaults
from xpushare.cli.flags import CLUSTER_HELP, INVENTORY_HELP
from xpushare.cli.guard import guarded
from xpushare.cli.taskdef import task
from xpushare.model.errors import UsageError
from xpushare.model.exit_status import ExitStatus
from xpushare.report.output import OUTPUT_HELP, output_format, render

__all__ = ["clean"]


@task(
    help={
        "cluster": CLUSTER_HELP,
        "run_id": "only this run's leftovers (default: every run's that is not alive)",
        "inventory": INVENTORY_HELP,
        "output": OUTPUT_HELP + " (per place: where, deleted, stopped, spared, removed, error)",
    },
)
def clean(c: Context, cluster: str | None = None, run_id: str | None = None, inventory_: str | None = None,
          output: str | None = None) -> None:
    """Remove what dead runs left: pods and ConfigMaps (by label), processes (by pid file), files on the hosts."""

    def body() -> ExitStatus:
        from xpushare.backends import leftovers
        from xpushare.engine import lease
        from xpushare.inventory import schema
        from xpushare.report.artifacts import validate_run_id

        fmt = output_format(output)
        name = defaults.need_cluster(cluster)
        if run_id is not None:
            try:
                validate_run_id(run_id)
            except ValueError as exc:
                raise UsageError(f"--run-id: {exc}") from None
        spec = schema.load(inventory_).cluster(name)
        removed = leftovers.clean(spec, run_id, lease.live_run_ids(spec))
        if fmt != "table":
            print(render([{"where": p.where, "deleted": p.objects, "stopped": p.stopped, "spared": p.spared,
                           "removed": p.entries, "error": p.error} for p in removed], fmt))
        for place in removed if fmt == "table" else ():
            for line in place.lines():
                print(line)
        # Nothing found is a success; a place that could not be cleaned is not.
        return ExitStatus.FAILED if any(p.error for p in removed) else ExitStatus.OK

    guarded(body)
