"""The suite tasks (``func``, ``combo``, ``perf``, ``metrics``, ``stab``, ``leak``, ``fail``, ``iso``, ``matrix``),
built by one factory, :func:`suite_task`.

Every suite task takes the same flags (``--cluster``, ``--case``, ``--playbook``, ``--run-id``, ``--resume``,
``--set``, ``--root``, ``--inventory``, ``--dry-run``, ``--output``, ``-v``/``-vv``, ``--maxfail``,
``--repeat``; help in :data:`~xpushare.cli.flags.RUN_HELP`), runs its selection of the
case matrix through :func:`xpushare.engine.suite_run.run` and exits with the run's status (README "Exit statuses").
A suite says only what differs: its docstring, which cases it selects (a :data:`ScopeOf`), the examples
in its help and its own extra flags (``matrix --suite``, ``fail --allow-disruptive``). ``--wait`` waits for
another run's lease on the cluster instead of stopping (:mod:`xpushare.engine.lease`). ``--cluster c1,c2`` runs
several clusters concurrently into one run (:mod:`xpushare.engine.clusters`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from invoke import Task

from xpushare.cli import defaults
from xpushare.cli.flags import RUN_HELP, count
from xpushare.cli.guard import guarded
from xpushare.cli.taskdef import XTask
from xpushare.model.exit_status import ExitStatus
from xpushare.report import output
from xpushare.transport import command_log

__all__ = ["SUITE_TASKS", "Flag", "Scope", "SuiteFlags", "by_prefix", "by_suite", "suite_task"]


@dataclass(frozen=True)
class Flag:
    """A flag of one suite task beyond the shared ones: the Python parameter ``name`` (``allow_disruptive``
    is ``--allow-disruptive``), its ``default`` (its type is the flag's kind), its help, and whether it is
    repeatable (then its value is a list)."""

    name: str
    default: Any
    help: str
    repeatable: bool = False


@dataclass(frozen=True)
class SuiteFlags:
    """The parsed flags of one suite task run: ``cases``/``overrides`` are the repeated ``--case``/``--set``
    values in order, ``extra`` maps each :class:`Flag` name to its value."""

    cluster: str
    cases: tuple[str, ...] = ()
    playbook: str | None = None
    run_id: str | None = None
    resume: bool = False
    overrides: tuple[str, ...] = ()
    root: Path = Path(".")
    inventory: str | None = None
    wait: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict)
    dry_run: bool = False
    output: str = "table"
    maxfail: str | None = None
    repeat: str | None = None


class Scope(NamedTuple):
    """What a suite task hands the engine beyond the shared flags: suites, case ids, and overrides it adds
    after the user's ``--set`` ones."""

    suites: tuple[str, ...] = ()
    case_ids: tuple[str, ...] = ()
    overrides: tuple[str, ...] = ()


ScopeOf = Callable[[SuiteFlags], Scope]
"""A suite task's selection: its flags in, its :class:`Scope` out (may raise ``UsageError``)."""


def by_suite(suite: str) -> ScopeOf:
    """The whole ``suite`` (an engine suite name, e.g. ``functional``), or only the ``--case``/``--playbook``
    selection when one is given."""

    def scope(flags: SuiteFlags) -> Scope:
        return Scope(suites=() if (flags.cases or flags.playbook) else (suite,), case_ids=flags.cases)

    return scope


def by_prefix(prefix: str, extra: Callable[[SuiteFlags], tuple[str, ...]] = lambda _: ()) -> ScopeOf:
    """Every registered case whose id starts with ``<prefix>-`` (``STAB`` -> STAB-001..), or only the
    ``--case``/``--playbook`` selection when one is given; ``extra`` adds overrides from the task's own flags."""

    def scope(flags: SuiteFlags) -> Scope:
        if flags.cases or flags.playbook:
            return Scope(case_ids=flags.cases, overrides=extra(flags))
        from xpushare.cases import REGISTRY  # every case module: only when a suite runs

        ids = tuple(sorted(c for c in REGISTRY if c.startswith(prefix + "-")))
        return Scope(case_ids=ids, overrides=extra(flags))

    return scope


def _run(flags: SuiteFlags, scope: ScopeOf) -> ExitStatus:
    from xpushare.engine import suite_run  # the engine pulls in every case module: only when a suite runs

    maxfail = count("--maxfail", flags.maxfail, 0) or None
    repeat = count("--repeat", flags.repeat, 1)
    chosen = scope(flags)
    request = suite_run.RunRequest(
        cluster=flags.cluster, suites=chosen.suites, case_ids=chosen.case_ids, playbook=flags.playbook,
        run_id=flags.run_id, resume=flags.resume, overrides=(*flags.overrides, *chosen.overrides),
        inventory_path=flags.inventory, root=flags.root, wait=flags.wait, dry_run=flags.dry_run, output=flags.output,
        maxfail=maxfail, repeat=repeat,
    )
    return suite_run.run(request)


def _listed(values: Sequence[str] | None) -> tuple[str, ...]:
    return tuple(values or ())


def suite_task(name: str, doc: str, scope: ScopeOf, *, help: Mapping[str, str] | None = None,
               flags: Sequence[Flag] = ()) -> Task:
    """An Invoke task ``name`` that runs ``scope``'s cases on ``--cluster`` and exits with the run's status.

    ``doc`` is its docstring (the ``invoke --list`` line and ``--help`` text); ``help`` replaces entries of
    :data:`RUN_HELP` (keys are flag names without dashes: ``set``, ``run_id``); ``flags`` come right after
    ``--cluster`` in that order (the order gives Invoke's short flags, e.g. ``fail -a`` = ``--allow-disruptive``).
    """
    P = inspect.Parameter
    shared = [("case", None), ("playbook", None), ("run_id", None), ("resume", False), ("set_", None),
              ("root", "."), ("inventory_", None), ("wait", False), ("dry_run", False), ("output", None),
              ("verbose", 0), ("maxfail", None), ("repeat", None)]
    # --cluster has no default here: XTask resolves it (cli/defaults.py resolve_common)
    params = [P("c", P.POSITIONAL_OR_KEYWORD), P("cluster", P.POSITIONAL_OR_KEYWORD, default=None)]
    params += [P(f.name, P.POSITIONAL_OR_KEYWORD, default=f.default) for f in flags]
    params += [P(n, P.POSITIONAL_OR_KEYWORD, default=d) for n, d in shared]

    signature = inspect.Signature(params)

    def body(*args: Any, **kwargs: Any) -> None:
        given = signature.bind(*args, **kwargs)  # a call from Python, positional or not, as from the CLI
        given.apply_defaults()
        values = given.arguments

        def run() -> ExitStatus:
            parsed = SuiteFlags(
                cluster=defaults.need_cluster(values["cluster"]), cases=_listed(values["case"]),
                playbook=values["playbook"],
                run_id=values["run_id"], resume=bool(values["resume"]), overrides=_listed(values["set_"]),
                root=Path(values["root"]), inventory=values["inventory_"], wait=bool(values["wait"]),
                extra={f.name: values[f.name] for f in flags}, dry_run=bool(values["dry_run"]),
                output=output.output_format(values["output"]), maxfail=values["maxfail"],
                repeat=values["repeat"],
            )
            command_log.set_verbosity(int(values["verbose"] or 0))
            return _run(parsed, scope)

        guarded(run)

    # Invoke reads a task's flags from its signature: give the generic body the suite's own.
    body.__signature__ = signature  # type: ignore[attr-defined]
    body.__doc__ = doc
    body.__name__ = body.__qualname__ = name.replace("-", "_")
    helps = {**RUN_HELP, **(help or {}), **{f.name: f.help for f in flags}}
    repeatable = ["case", "set_", *(f.name for f in flags if f.repeatable)]
    return XTask(body, name=name, help=helps, iterable=repeatable, incrementable=["verbose"])


def _allow_disruptive(flags: SuiteFlags) -> tuple[str, ...]:
    return ("allow_disruptive=true",) if flags.extra["allow_disruptive"] else ()


def _matrix(flags: SuiteFlags) -> Scope:
    return Scope(suites=_listed(flags.extra["suite"]), case_ids=flags.cases)


_CLUSTER_HELP = "cluster name from the inventory, e.g. c1, lab, or a comma list c1,c2 (default: $XPUSHARE_CLUSTER)"
_STABILITY_HELP = {
    "cluster": _CLUSTER_HELP,
    "case": "run only this case id (repeatable)",
    "playbook": "preset from playbooks/ or a YAML path",
    "set": "override a parameter/threshold: --set name=value (repeatable), e.g. --set stab_duration_s=3600",
}

func = suite_task(
    "func", "Run the functional suite FUNC-001..013 and judge each case (docs/verdicts.md).", by_suite("functional"))
combo = suite_task("combo", "Run the combination suite COMBO-001..008 (docs/verdicts.md).", by_suite("combination"))
perf = suite_task(
    "perf",
    "Run the performance suite PERF-001..011 (baseline, quota precision, overhead, latency, scale) and judge it.",
    by_suite("performance"),
    help={
        "cluster": _CLUSTER_HELP,
        "case": "run only this case id (repeatable), e.g. --case PERF-011 --case PERF-004",
        "set": "override a parameter/threshold (repeatable), e.g. --set perf_quota_tolerance=0.1 "
        "--set perf_baseline_min_s=120 (see docs/performance.md)",
    },
)
metrics = suite_task(
    "metrics",
    "Run the metrics suite MET-001..008 on the scheduler serving each probe's node (docs/metrics-check.md).",
    by_suite("metrics"),
    help={
        "case": "run only this case id (repeatable), e.g. --case MET-001 --case MET-007",
        "set": "override a parameter/threshold: --set name=value (repeatable), e.g. --set met007_duration_s=30",
    },
)
stab = suite_task(
    "stab", "Run STAB-001..004: soaks of 6 h / 24 h by default (--set stab_duration_s=S; docs/soak.md).",
    by_prefix("STAB"), help=_STABILITY_HELP)
leak = suite_task(
    "leak", "Run LEAK-001..005: RSS/FD trends, GPU memory recovery, ghost clients, series growth (docs/soak.md).",
    by_prefix("LEAK"), help=_STABILITY_HELP)
fail = suite_task(
    "fail", "Run FAIL-001..007: fault injection, only with --allow-disruptive; every fault restored (docs/faults.md).",
    by_prefix("FAIL", _allow_disruptive), help=_STABILITY_HELP,
    flags=[Flag("allow_disruptive", False, "really inject the faults (restart DaemonSets, drain a node); "
                "without it every FAIL case is SKIP")],
)
iso = suite_task(
    "iso",
    "Run the isolation suite: ISO-001..010, the memory quota judged by what a probe can hold on each allocation "
    "path; ISO-011..016, the core quota judged by the GPU share a probe gets on each kernel launch path.",
    by_suite("isolation"),
    help={
        "case": "run only this case id (repeatable), e.g. --case ISO-001 --case ISO-007",
        "set": "override a parameter/threshold (repeatable), e.g. --set iso_memory_limit=2Gi --set iso_step_mib=32 "
        "(see docs/isolation.md)",
    },
)
matrix = suite_task(
    "matrix", "Run any selection of the case matrix: --suite, --case and --playbook combined.", _matrix,
    flags=[Flag("suite", None, "suite to run (repeatable): functional|func, combination|combo, performance|perf, "
                "metrics|met, stability|stab, isolation|iso", repeatable=True)],
)

SUITE_TASKS: tuple[Task, ...] = (func, combo, perf, metrics, stab, leak, fail, iso, matrix)
"""Every suite task, for the collection (:mod:`xpushare.cli.collection`)."""
