"""``invoke soak``: one long STAB case (default STAB-002, the seed's 24 h mixed load) with resume.

A soak is a :class:`~xpushare.engine.run.Run` (lease, run.json, signals, reports) of a selection of one case, whose
act keeps ``soak/params.json`` or, on ``--resume``, first carries ``soak/`` forward (:func:`_carry_soak_forward`),
with the soak's hooks (:class:`SoakHooks`: its opening and closing lines). The case runs through the engine's case
lifecycle (:func:`xpushare.engine.lifecycle.run_case`: act, harvest, clean up, judge, ``result.json``), in the usual
run directory::

    .tmplog/<run-id>/xpushare/<cluster>/stability/<STAB-00x>/
        soak/          the time series, checkpoint, interim reports, plots, soak-report.md
        attempts/<n>/  the harvested evidence of earlier segments (an interrupted soak's first part)
        result.json    the verdict over the whole soak

``--resume`` continues an interrupted soak in the same run dir and time series: the engine archives the
previous segment's top-level evidence to ``attempts/<n>/`` as for any case, and the soak's act carries
``soak/`` forward (its scheduler log goes to ``soak/segments/<n>/``), so the judgment sees one soak. The
parameters of the first segment (``soak/params.json``) stay in force unless given again.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

from xpushare.backends.base import Backend
from xpushare.cases import REGISTRY
from xpushare.engine import backend_factory, dry_run, output_record, plan, stored_run
from xpushare.engine.cluster_params import check_cluster_params
from xpushare.engine.progress import duration
from xpushare.engine.run import Reuse, Run, RunHooks, RunOutcome, RunSelection, exit_status_for
from xpushare.evidence.soak_series import gzip_file
from xpushare.inventory import schema
from xpushare.inventory.schema import ClusterSpec
from xpushare.model.errors import UsageError
from xpushare.model.exit_status import ExitStatus
from xpushare.model.overrides import parse_overrides
from xpushare.report import run_store, summaries
from xpushare.report.output import render
from xpushare.soak.checkpoint import Checkpoint

__all__ = ["SoakHooks", "SoakRequest", "soak"]

SOAK_CASES = ("STAB-001", "STAB-002", "STAB-003", "STAB-004")
PARAMS_FILE = "params.json"
SOAK_REPORT = "soak-report.md"
"""The soak's own report in ``soak/``, written once its rounds started (:func:`xpushare.soak.report.write_report`)."""


@dataclass
class SoakRequest:
    """What ``invoke soak`` asks: cluster, case, duration (None: the case's or the stored one), run id."""

    cluster: str
    case: str = "STAB-002"
    duration_s: float | None = None
    run_id: str | None = None
    resume: bool = False
    overrides: tuple[str, ...] = ()
    inventory_path: str | None = None
    root: Path = Path(".")
    dry_run: bool = False
    """Print the plan (the case, each parameter's value and source, whether it would SKIP) and run nothing."""
    output: str = "table"
    """table | json | yaml: the dry run's format, and after a soak the format of its result (json/yaml: the
    progress lines go to stderr and one record alone to ``out``, :meth:`SoakHooks.finished`)."""
    wait: bool = False
    """Wait for another run's lease on the cluster instead of stopping (:mod:`xpushare.engine.lease`)."""


def _carry_soak_forward(case_dir: Path) -> None:
    """After the engine archived the previous segment: bring ``soak/`` back and keep that segment's
    scheduler log (compressed) under ``soak/segments/<attempt>/``."""
    if (case_dir / "soak" / "checkpoint.json").exists():
        return
    attempts = case_dir / run_store.ATTEMPTS_DIR
    found = sorted((p for p in attempts.iterdir() if p.name.isdigit() and (p / "soak" / "checkpoint.json").exists()),
                   key=lambda p: int(p.name)) if attempts.is_dir() else []
    if not found:
        raise UsageError(f"--resume: no soak checkpoint under {case_dir}")
    last = found[-1]
    os.replace(last / "soak", case_dir / "soak")
    seg = case_dir / "soak" / "segments" / last.name
    seg.mkdir(parents=True, exist_ok=True)
    for name in ("scheduler.log", "device-plugin.log"):
        if (last / name).exists():
            gzip_file(last / name, seg / f"{name}.gz", remove=False)


def _resumable_act(case_act: Any) -> Any:
    def act(run: Any) -> None:
        _carry_soak_forward(run.case_dir)
        case_act(run, resume=True)

    return act


def soak(request: SoakRequest, out: TextIO | None = None) -> ExitStatus:
    """Run (or resume) a soak and write the run's reports. Returns the exit status (130 when interrupted).

    A :class:`~xpushare.engine.run.Run` of the one case with :class:`SoakHooks`: it holds the cluster's lease
    (:mod:`xpushare.engine.lease`) from before its run directory is written until its reports are, so no other
    run (``invoke func`` ...) touches the cluster meanwhile; ``request.wait`` waits for another live run's lease
    instead of stopping.

    Raises:
        UsageError: unknown case, a non-STAB case, ``--resume`` without a run or checkpoint, or a new soak
            into a run that already holds that case.
        LeaseHeld: another live run holds the cluster's lease and not ``request.wait`` (exit 2; nothing written).
    """
    out = out if out is not None else sys.stdout
    case_id = request.case.upper()
    if case_id not in SOAK_CASES:
        raise UsageError(f"invoke soak runs one of {', '.join(SOAK_CASES)}, not {request.case!r}")
    cluster = schema.load(request.inventory_path).cluster(request.cluster)
    check_cluster_params(cluster)
    selection = plan.select(case_ids=[case_id])
    case = REGISTRY[case_id]
    overrides = parse_overrides(request.overrides)
    plan.check_overrides([case], overrides)
    if request.duration_s is not None:
        if request.duration_s <= 0:
            raise UsageError("--hours/--minutes must be positive")
        overrides["stab_duration_s"] = request.duration_s
    if request.dry_run:
        planned = dry_run.plan_run([case], cluster, selection, overrides, backend_factory.capabilities_of(cluster),
                                   request.root)
        print(dry_run.render_all([planned], request.output), file=out)
        return ExitStatus.OK
    lines = out if request.output == "table" else sys.stderr  # json|yaml: progress on stderr, the record on out
    the_run = Run(root=request.root, clusters=[cluster], run_id=request.run_id,
                  reuse=Reuse.RESUME if request.resume else Reuse.REFUSE, what="soak", wait=request.wait, out=lines)
    run_id, run_dir = the_run.id, the_run.dir
    case_dir = run_store.case_dir(run_dir, cluster.name, case.suite, case.case_id)
    params = plan.case_params(case, cluster, selection, overrides)
    if request.resume:
        stored = case_dir / "soak" / PARAMS_FILE
        ck = Checkpoint.load(case_dir / "soak")
        if ck is None or not stored.exists():
            raise UsageError(f"--resume: no soak checkpoint in {case_dir / 'soak'}")
        params = {**json.loads(stored.read_text(encoding="utf-8")), **overrides}
        if ck.final_done:
            print(f"[xpushare] soak {case_id} of run {run_id} already complete; re-judging", file=lines)
            stored_run.rejudge(run_id, request.overrides, root=request.root, out=out, fmt=request.output)
            return exit_status_for(run_store.load_results(run_dir), False)
        act = _resumable_act(case.act)
    else:
        if (case_dir / "soak").exists() or (case_dir / "result.json").exists():
            raise UsageError(f"run {run_id} already holds {case_id} on {cluster.name}: continue it with --resume, "
                             "or give another --run-id")
        act = _with_params_file(case.act, json.dumps(params, indent=1, default=str) + "\n")
    soaked = replace(case, act=act)
    chosen = RunSelection(label=f"soak={case_id}", cases=[soaked], required=frozenset({case_id}),
                          todo={cluster.name: [soaked]}, params=lambda _case, _cluster: dict(params))
    hooks = SoakHooks(case_dir, float(params["stab_duration_s"]), request.output, out)
    if request.output == "table":
        return the_run.execute(chosen, hooks)
    with contextlib.redirect_stdout(sys.stderr):  # the soak loop's own lines too: stdout holds the record alone
        return the_run.execute(chosen, hooks)


class SoakHooks(RunHooks):
    """A soak's run: its opening line (case, cluster, duration, case directory), the case's line after the
    reports, the soak report's path when the soak wrote one, how to continue an interrupted soak, and with
    ``fmt`` json or yaml one record alone on ``result_out``."""

    def __init__(self, case_dir: Path, duration_s: float, fmt: str = "table", result_out: TextIO | None = None) -> None:
        self.case_dir = case_dir
        self.duration_s = duration_s
        self.fmt = fmt
        self.result_out = result_out if result_out is not None else sys.stdout

    def backend(self, cluster: ClusterSpec) -> Backend:
        return backend_factory.make_backend(cluster)

    def started(self, run: Run) -> None:
        case_id, cluster = self.case_dir.name, run.clusters[0]
        run.progress.done(f"soak {case_id} on {cluster.name} for {duration(self.duration_s)}"
                          f"{' (resumed)' if run.resume else ''} -> {self.case_dir}")

    def finished(self, run: Run, outcome: RunOutcome) -> None:
        case_id, cluster = self.case_dir.name, run.clusters[0]
        for record in outcome.records:
            run.progress.done(f"{case_id} {record.status} {record.duration_s or 0.0:.1f}s  {record.summary}")
        soak_report = self.case_dir / "soak" / SOAK_REPORT
        written = soak_report.is_file()
        run.progress.done(f"report: {outcome.paths.markdown}; soak report: "
                          + (str(soak_report) if written else "none (the soak did not start its rounds)"))
        if outcome.interrupted:
            run.progress.done(f"interrupted: continue with invoke soak --cluster {cluster.name} --case {case_id} "
                              f"--run-id {run.id} --resume")
        if self.fmt != "table":
            decision = summaries.decision_of_run(outcome.results, run.meta, interrupted=outcome.interrupted)
            result = {**output_record.result_record(run.id, run.dir, outcome.status, outcome.results, decision,
                                             outcome.paths.markdown),
                      "duration_s": self.duration_s, "soak_report": str(soak_report) if written else None}
            print(render(result, self.fmt), file=self.result_out, flush=True)


def _with_params_file(act: Any, params_text: str) -> Any:
    def wrapped(run: Any) -> None:
        run_store.atomic_write_text(run.case_dir / "soak" / PARAMS_FILE, params_text)
        act(run)

    return wrapped
