"""Tasks over the stored runs: ``runs`` (list them with their status) and ``diff`` (verdict changes and metric
deltas between two runs). Both read ``<root>/.tmplog`` only; ``--output json`` prints one JSON document."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from invoke import Context

from xpushare.cli.flags import ROOT_HELP
from xpushare.cli.guard import guarded
from xpushare.cli.taskdef import task
from xpushare.model.errors import StoredRunDamaged, UsageError

if TYPE_CHECKING:
    from xpushare.report.runs import RunInfo

__all__ = ["diff", "runs"]

OUTPUT_HELP = "table (default) or json"
_OUTPUTS = ("table", "json")


def _output(value: str) -> str:
    """The ``--output`` choice; :class:`UsageError` for anything but table/json."""
    if value not in _OUTPUTS:
        raise UsageError(f"--output takes one of {', '.join(_OUTPUTS)}, not {value!r}")
    return value


def _number(value: float | None, *, percent: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value * 100:+.1f}%" if percent else f"{value:.6g}"


@task(help={"output": OUTPUT_HELP, "root": ROOT_HELP,
            "all": "also the runs without any case result (refused or stopped before their first case)"})
def runs(c: Context, output: str = "table", root: str = ".", all_: bool = False) -> None:
    """List the stored runs, oldest first: run id, clusters, selection, start time, counts per status, exit status,
    overall: the release decision (YES, NO, n/a), or INTERRUPTED / INCOMPLETE / RUNNING for a run that did not
    finish every case it selected (never PASS).

    Runs without any case result (a command refused before its first case) are left out unless ``--all``."""

    def body() -> None:
        from xpushare.report.runs import list_runs

        fmt = _output(output)
        every = list_runs(Path(root))
        stored = every if all_ else [r for r in every if r.started_cases]
        hidden = len(every) - len(stored)
        if fmt == "json":
            print(json.dumps([r.to_dict() for r in stored], indent=2))
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
            "output": OUTPUT_HELP, "root": ROOT_HELP})
def diff(c: Context, run_a: str, run_b: str, output: str = "table", root: str = ".") -> None:
    """Compare two stored runs: the cases whose verdict changed and the metrics whose numbers changed."""

    def body() -> None:
        from tabulate import tabulate

        from xpushare.report.runs import diff_runs

        fmt = _output(output)
        try:
            result = diff_runs(Path(root), run_a, run_b)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        if fmt == "json":
            print(json.dumps(result.to_dict(), indent=2))
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
