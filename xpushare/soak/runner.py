"""``invoke soak``: one long STAB case (default STAB-002, the seed's 24 h mixed load) with resume.

The case runs through the engine's case lifecycle (:func:`xpushare.engine.lifecycle.run_case`: act, harvest, clean up,
judge, ``result.json``), in the usual run directory::

    .tmplog/<run-id>/xpushare/<cluster>/stability/<STAB-00x>/
        soak/          the time series, checkpoint, interim reports, plots, soak-report.md
        attempts/<n>/  the harvested evidence of earlier segments (an interrupted soak's first part)
        result.json    the verdict over the whole soak

``--resume`` continues an interrupted soak in the same run dir and time series: the engine archives the
previous segment's top-level evidence to ``attempts/<n>/`` as for any case, and this runner carries
``soak/`` forward (its scheduler log goes to ``soak/segments/<n>/``), so the judgment sees one soak. The
parameters of the first segment (``soak/params.json``) stay in force unless given again.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from xpushare import __version__
from xpushare.cases import REGISTRY, CaseDef
from xpushare.engine import driver, dry_run, lease, lifecycle, plan
from xpushare.engine.cluster_params import check_cluster_params
from xpushare.engine.progress import Progress
from xpushare.evidence.soak_series import gzip_file
from xpushare.inventory import schema
from xpushare.inventory.schema import ClusterSpec
from xpushare.model.errors import UsageError
from xpushare.model.exit_status import ExitStatus
from xpushare.model.overrides import parse_overrides
from xpushare.report import artifacts, build, summaries
from xpushare.soak.checkpoint import Checkpoint

__all__ = ["SoakRequest", "soak"]

SOAK_CASES = ("STAB-001", "STAB-002", "STAB-003", "STAB-004")
PARAMS_FILE = "params.json"


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
    """The dry run's format: table | json | yaml."""
    wait: bool = False
    """Wait for another run's lease on the cluster instead of stopping (:mod:`xpushare.engine.lease`)."""


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


def _carry_soak_forward(case_dir: Path) -> None:
    """After the engine archived the previous segment: bring ``soak/`` back and keep that segment's
    scheduler log (compressed) under ``soak/segments/<attempt>/``."""
    if (case_dir / "soak" / "checkpoint.json").exists():
        return
    attempts = case_dir / artifacts.ATTEMPTS_DIR
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


def soak(request: SoakRequest, out: TextIO = sys.stdout) -> ExitStatus:
    """Run (or resume) a soak and write the run's reports. Returns the exit status (130 when interrupted).

    The soak holds the cluster's lease (:func:`xpushare.engine.lease.held`) from before its run directory is
    written until its reports are; ``request.wait`` waits for another live run's lease instead of stopping.

    Raises:
        UsageError: unknown case, a non-STAB case, ``--resume`` without a run or checkpoint, or a new soak
            into a run that already holds that case.
        LeaseHeld: another live run holds the cluster's lease and not ``request.wait`` (exit 2; nothing written).
    """
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
        planned = dry_run.plan_run([case], cluster, selection, overrides, driver.capabilities_of(cluster),
                                   request.root)
        print(dry_run.render_all([planned], request.output), file=out)
        return ExitStatus.OK
    run_id = driver.resolve_run_id(request.run_id, resume=request.resume, what="soak", root=request.root)
    run_dir = artifacts.run_dir(request.root, run_id)
    driver.refuse_reuse(run_dir, run_id, resume=request.resume)
    case_dir = artifacts.case_dir(run_dir, cluster.name, case.suite, case.case_id)
    params = plan.case_params(case, cluster, selection, overrides)
    act = case.act
    if request.resume:
        stored = case_dir / "soak" / PARAMS_FILE
        ck = Checkpoint.load(case_dir / "soak")
        if ck is None or not stored.exists():
            raise UsageError(f"--resume: no soak checkpoint in {case_dir / 'soak'}")
        params = {**json.loads(stored.read_text(encoding="utf-8")), **overrides}
        if ck.final_done:
            print(f"[xpushare] soak {case_id} of run {run_id} already complete; re-judging", file=out)
            driver.rejudge(run_id, request.overrides, root=request.root, out=out)
            return driver.exit_status_for(artifacts.load_results(run_dir), False)
        act = _resumable_act(case.act)
    elif (case_dir / "soak").exists() or (case_dir / "result.json").exists():
        raise UsageError(f"run {run_id} already holds {case_id} on {cluster.name}: continue it with --resume, or "
                         "give another --run-id")
    with lease.held(cluster, run_id, wait=request.wait, out=out):
        return _soak_held(request, cluster, case, act, params, run_id, run_dir, case_dir, out)


def _soak_held(request: SoakRequest, cluster: ClusterSpec, case: CaseDef, act: Any, params: dict[str, Any],
               run_id: str, run_dir: Path, case_dir: Path, out: TextIO) -> ExitStatus:
    """The part of :func:`soak` done while it holds the cluster's lease: from the run directory on."""
    case_id = case.case_id
    run_dir.mkdir(parents=True, exist_ok=True)
    previous = artifacts.read_run_meta(run_dir) if request.resume else None
    meta: dict[str, Any] = {
        "run_id": run_id, "tool_version": __version__, "clusters": [cluster.name], "selection": f"soak={case_id}",
        "required": [case_id], "started": (previous or {}).get("started", _now()), "argv": sys.argv[1:],
        "resume": request.resume,
    }
    artifacts.write_run_meta(run_dir, meta)
    progress = Progress(out)
    dur = float(params["stab_duration_s"])
    progress.done(f"soak {case_id} on {cluster.name} for {dur / 3600:.2f} h{' (resumed)' if request.resume else ''} "
                  f"-> {case_dir}")
    params_text = json.dumps(params, indent=1, default=str) + "\n"
    wrapped = replace(case, act=act if request.resume else _with_params_file(act, params_text))
    backend = driver.make_backend(cluster)
    record, interrupted = lifecycle.run_alone(wrapped, run_id=run_id, run_dir=run_dir, cluster=cluster,
                                              backend=backend, params=params)
    results = artifacts.load_results(run_dir)
    status = driver.exit_status_for(results, interrupted)
    meta.update(ended=_now(), interrupted=interrupted, exit_status=int(status), counts=summaries.counts(results))
    artifacts.write_run_meta(run_dir, meta)
    paths = build.build(run_dir, required={case_id})
    if record:
        progress.done(f"{case_id} {record['status']} {record['duration_s']:.1f}s  {record['summary']}")
    progress.done(f"report: {paths.markdown}; soak report: {case_dir / 'soak' / 'soak-report.md'}")
    if interrupted:
        progress.done(f"interrupted: continue with invoke soak --cluster {cluster.name} --case {case_id} "
                      f"--run-id {run_id} --resume")
    return status


def _with_params_file(act: Any, params_text: str) -> Any:
    def wrapped(run: Any) -> None:
        artifacts.atomic_write_text(run.case_dir / "soak" / PARAMS_FILE, params_text)
        act(run)

    return wrapped
