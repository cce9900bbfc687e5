"""Tasks about runs beyond the suite tasks: ``soak`` (one long STAB case, resumable), ``judge`` and ``report``
(a stored run, offline) and ``cases`` (the case matrix)."""

from __future__ import annotations

import math
from pathlib import Path

from invoke import Context

from xpushare.cli import defaults
from xpushare.cli.flags import CLUSTER_HELP, INVENTORY_HELP, ROOT_HELP
from xpushare.cli.guard import guarded
from xpushare.cli.taskdef import task
from xpushare.model.errors import UsageError
from xpushare.model.exit_status import ExitStatus
from xpushare.report.output import OUTPUT_HELP, output_format, render

__all__ = ["cases_", "judge", "report", "soak"]


#: The longest soak ``--hours``/``--minutes`` may ask for (seconds): a year.
MAX_SOAK_S = 365 * 86400.0


@task(
    help={
        "cluster": CLUSTER_HELP,
        "case": "STAB-001..004 (default STAB-002: 16-32 mixed W2/W3 pods)",
        "hours": "soak duration in hours (default: the case's, 24 h for STAB-002)",
        "minutes": "soak duration in minutes (short runs; added to --hours)",
        "run_id": "run id (default: now); with --resume, the soak to continue",
        "resume": "continue an interrupted soak in the same run dir and time series",
        "set": "override a parameter: --set sample_interval_s=10 (repeatable)",
        "root": ROOT_HELP,
        "inventory": INVENTORY_HELP,
        "dry_run": "print the case, each parameter's value and its source, and whether it would SKIP; contact no "
                   "host",
        "output": "format of --dry-run: " + OUTPUT_HELP,
        "wait": "when another run holds the cluster's lease, wait until it is free instead of stopping (exit 2)",
    },
    iterable=["set_"],
)
def soak(c: Context, cluster: str | None = None, case: str = "STAB-002", hours: str | None = None,
         minutes: str | None = None, run_id: str | None = None, resume: bool = False, set_: list[str] | None = None,
         root: str = ".", inventory_: str | None = None, dry_run: bool = False, output: str | None = None,
         wait: bool = False) -> None:
    """Soak a cluster for hours: rounds of a STAB mix, sampling, checkpoints, interim reports (docs/soak.md)."""
    from xpushare.soak.task import SoakRequest
    from xpushare.soak.task import soak as run_soak

    def body() -> ExitStatus | int | None:
        duration = None
        if hours is not None or minutes is not None:
            try:
                duration = float(hours or 0) * 3600 + float(minutes or 0) * 60
            except ValueError:
                raise UsageError("--hours/--minutes take a number") from None
            if not math.isfinite(duration) or not 0 < duration <= MAX_SOAK_S:
                raise UsageError(f"--hours/--minutes must give a duration > 0 and at most {MAX_SOAK_S / 86400:g} days")
        request = SoakRequest(cluster=defaults.need_cluster(cluster), case=case, duration_s=duration, run_id=run_id,
                              resume=resume, overrides=tuple(set_ or ()), inventory_path=inventory_, root=Path(root),
                              dry_run=dry_run, output=output_format(output), wait=wait)
        return run_soak(request)

    guarded(body)


@task(
    help={
        "run_id": "the stored run to re-judge (required; last: the latest)",
        "set": "threshold override name=value (repeatable), e.g. --set func002_min_overlap_ratio=0.8",
        "root": ROOT_HELP,
        "apply": "store the re-judgment as the run's verdicts (beside the originals, result.original.json) and "
                 "rebuild its reports; without it nothing is stored",
        "output": OUTPUT_HELP + " (one record: run_id, applied, exit_status, counts, release_ready, cases, changes)",
    },
    iterable=["set_"],
)
def judge(c: Context, run_id: str, set_: list[str] | None = None, root: str = ".", apply: bool = False,
          output: str | None = None) -> None:
    """Re-judge a stored run's evidence with other thresholds, offline: what the verdicts would be and what changed.

    Without ``--apply`` it is a what-if: the run, its verdicts, its reports and how ``invoke runs`` lists it stay as
    they are. ``--apply`` stores the re-judgment as the run's verdicts, keeping the run's own beside them, and
    rebuilds its reports (docs/verdicts.md "Re-judging a stored run"); ``--apply`` on a live run (still running on
    this machine) is refused with exit 2 naming it: its records are still written."""
    from xpushare.engine import stored_run, whatif

    if apply:
        guarded(lambda: stored_run.rejudge(run_id, set_ or (), root=Path(root), fmt=output_format(output)))
    else:
        guarded(lambda: whatif.whatif(run_id, set_ or (), root=Path(root), fmt=output_format(output)))


@task(help={"run_id": "the stored run (required; last: the latest)", "root": ROOT_HELP,
            "output": OUTPUT_HELP + " (one record: run_id, exit_status, counts, release_ready, cases, report, html)",
            "force": "rebuild even while the run is live (its own end rewrites them)"})
def report(c: Context, run_id: str, root: str = ".", output: str | None = None, force: bool = False) -> None:
    """Rebuild case-summary.tsv, run-summary.tsv, junit.xml, run-report.md and report.html of a stored run.

    With matplotlib installed it also draws the plots the run lacks (a run made without it). A live run (still
    running on this machine) is refused with exit 2 naming it, unless ``--force``."""

    def body() -> None:
        from xpushare.engine import output_record, stored_run

        fmt = output_format(output)
        paths = stored_run.rebuild_reports(run_id, root=Path(root), force=force)
        text = f"{paths.markdown}\n{paths.html}"
        print(text if fmt == "table" else render(output_record.stored_result_record(paths.markdown.parent, paths), fmt))

    guarded(body)


@task(name="cases", help={"suite": "only this suite", "output": OUTPUT_HELP})
def cases_(c: Context, suite: str | None = None, output: str | None = None) -> None:
    """List every case id of the matrix with its suite, title, the premises its verdict rests on and whether it is
    implemented (``-o json|yaml``: ``premises`` per case; the premises' meanings: docs/verdicts.md)."""

    def body() -> None:
        from tabulate import tabulate

        from xpushare.cases import REGISTRY
        from xpushare.cases.premise_table import case_premises
        from xpushare.engine import plan

        fmt = output_format(output)
        wanted = plan.normalise_suite(suite) if suite else None
        chosen = [cd for cd in REGISTRY.values() if wanted in (None, cd.suite)]
        records = [{"case": cd.case_id, "suite": cd.suite, "title": cd.title, "premises": case_premises(cd),
                    "implemented": cd.act is not None, "implemented_by": None if cd.act else cd.implemented_by}
                   for cd in chosen]
        rows = [[cd.case_id, cd.suite, cd.title, ",".join(case_premises(cd)) or "-",
                 "yes" if cd.act else f"no ({cd.implemented_by})"] for cd in chosen]
        text = tabulate(rows, headers=["case", "suite", "title", "premises", "implemented"])
        print(render(records, fmt, text=text))

    guarded(body)
