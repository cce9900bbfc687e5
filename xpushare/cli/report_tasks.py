"""Tasks over the stored runs: ``runs`` (list them with their status), ``diff`` (verdict changes and metric
deltas between two runs) and ``compare`` (the isolation and functional cases, system x case, over several runs).
They read ``<root>/.tmplog`` only (``compare --out`` also writes a new directory); ``--output json|yaml`` prints
only the records (:mod:`xpushare.report.output`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from invoke import Context

from xpushare.cli.flags import ROOT_HELP
from xpushare.cli.guard import guarded
from xpushare.cli.taskdef import task
from xpushare.model.errors import StoredRunDamaged, UsageError
from xpushare.report.output import OUTPUT_HELP, output_format, render

if TYPE_CHECKING:
    from xpushare.report.runs import RunInfo

__all__ = ["compare", "diff", "runs"]


def _number(value: float | None, *, percent: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value * 100:+.1f}%" if percent else f"{value:.6g}"


@task(help={"output": OUTPUT_HELP, "root": ROOT_HELP,
            "all": "also the runs without any case result (refused or stopped before their first case)"})
def runs(c: Context, output: str | None = None, root: str = ".", all_: bool = False) -> None:
    """List the stored runs, oldest first: run id, clusters, selection, start time, counts per status, exit status,
    overall: the release decision (YES, NO, n/a), or INTERRUPTED / INCOMPLETE / RUNNING for a run that did not
    finish every case it selected (never PASS).

    Runs without any case result (a command refused before its first case) are left out unless ``--all``."""

    def body() -> None:
        from xpushare.report.runs import list_runs

        fmt = output_format(output)
        every = list_runs(Path(root))
        stored = every if all_ else [r for r in every if r.started_cases]
        hidden = len(every) - len(stored)
        if fmt != "table":
            print(render([r.to_dict() for r in stored], fmt))
        elif not stored:
            print(f"no runs stored under {root}")
        else:
            _print_runs(stored, hidden)
        _refuse_damaged(every)

    guarded(body)


def _print_runs(stored: list[RunInfo], hidden: int) -> None:
    from tabulate import tabulate

    rows = [[r.run_id, ",".join(r.clusters) or "-", r.selection or ",".join(r.suites) or "-", r.started or "-",
             " ".join(f"{k} {v}" for k, v in r.counts.items() if v) or "-",
             "-" if r.exit_status is None else r.exit_status, r.overall] for r in stored]
    print(tabulate(rows, headers=["run id", "clusters", "selection", "started", "cases", "exit", "overall"]))
    if hidden:
        print(f"({hidden} run(s) without any case result not shown; --all shows them)")


def _refuse_damaged(listed: list[RunInfo]) -> None:
    """After the listing: one ``error:`` line (exit 2) naming the runs whose run.json is damaged or foreign (they
    are listed from their results alone), the first one's reason in full."""
    damaged = [r for r in listed if r.damaged]
    if damaged:
        more = f" (and {len(damaged) - 1} more run(s): {', '.join(r.run_id for r in damaged[1:6])})" \
            if len(damaged) > 1 else ""
        raise StoredRunDamaged(f"{damaged[0].damaged}{more}; listed from its results alone")


@task(help={"run_a": "the earlier run (a run id or last)", "run_b": "the later run (a run id or last)",
            "output": OUTPUT_HELP, "root": ROOT_HELP,
            "force": "compare even a live run (its cases so far: changes and cases missing are not final)"})
def diff(c: Context, run_a: str, run_b: str, output: str | None = None, root: str = ".", force: bool = False) -> None:
    """Compare two stored runs: the cases whose verdict changed and the metrics whose numbers changed.

    A live run (still running on this machine) is refused with exit 2 naming it, unless ``--force``."""

    def body() -> None:
        from tabulate import tabulate

        from xpushare.report import run_lock, run_store
        from xpushare.report.runs import diff_runs

        fmt = output_format(output)
        try:
            if not force:
                for run in (run_a, run_b):
                    run_lock.refuse_live(run_store.stored_run_dir(Path(root), run),
                                         what="its verdicts are not final", force_hint=True)
            result = diff_runs(Path(root), run_a, run_b)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        if fmt != "table":
            print(render(result.to_dict(), fmt))
            return
        print(f"{result.a} -> {result.b}: {len(result.verdict_changes)} verdict change(s), "
              f"{result.unchanged} case(s) unchanged, {len(result.metric_deltas)} metric change(s) among the cases "
              f"both ran")
        if result.verdict_changes:
            rows = [[v.case, v.before, v.after, v.note] for v in result.verdict_changes]
            print("\n" + tabulate(rows, headers=["case", result.a, result.b, "note"]))
        for run, others, cases in ((result.b, result.a, result.only_in_a), (result.a, result.b, result.only_in_b)):
            if cases:
                print(f"\nnot selected by {run} ({len(cases)} case(s) only in {others}): {', '.join(cases)}")
        if result.metric_deltas:
            rows = [[m.case, m.metric, _number(m.before), _number(m.after), _number(m.delta),
                     _number(m.relative, percent=True)] for m in result.metric_deltas]
            print("\n" + tabulate(rows, headers=["case", "metric", result.a, result.b, "delta", "relative"],
                                  disable_numparse=True))

    guarded(body)


@task(help={"run_id": "a stored run (a run id or last); give it once per run, e.g. one run per system",
            "output": OUTPUT_HELP, "root": ROOT_HELP,
            "out": "also write compare.md, compare.json and (with matplotlib) compare.png into this new directory"},
      iterable=["run_id"])
def compare(c: Context, run_id: list[str] | None = None, output: str | None = None, root: str = ".",
            out: str | None = None) -> None:
    """Compare GPU-sharing systems side by side: the isolation and functional cases of the given runs, one column
    per system (the cluster's sut), with what each held, whether it was usable, how far off the quota, and a
    workload's runtime (docs/isolation.md "Cross-SUT comparison")."""

    def body() -> None:
        from xpushare.model.atomic_file import atomic_write_text
        from xpushare.report.compare import compare_runs, plot

        fmt = output_format(output)
        if not run_id:
            raise UsageError("compare needs --run-id at least once (one per run to compare)")
        target = Path(out) if out else None
        if target is not None and target.exists():
            raise UsageError(f"--out {target} exists; name a new directory (nothing is overwritten)")
        try:
            result = compare_runs(Path(root), run_id)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        if not result.cases:
            raise UsageError(f"no isolation results in run(s) {', '.join(run_id)}")
        doc = render(result.to_dict(), "json")
        if fmt == "table":
            print(result.markdown(), end="")
        else:
            print(render(result.to_dict(), fmt))
        if target is not None:
            target.mkdir(parents=True)
            atomic_write_text(target / "compare.md", result.markdown())
            atomic_write_text(target / "compare.json", doc + "\n")
            drawn = plot(result, target / "compare.png")
            if fmt == "table":
                print(f"\nwritten: {target}/compare.md, compare.json"
                      + (", compare.png" if drawn.path else f" (no plot: {drawn.note})"))

    guarded(body)
