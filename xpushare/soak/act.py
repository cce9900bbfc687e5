"""Glue between a case (:class:`~xpushare.cases.base.CaseRun`) and the soak loop.

:func:`settings_from_params` turns a case's parameters into :class:`SoakSettings`; :func:`run_soak` runs
(or resumes) the loop in ``<case_dir>/soak`` over the case's backend (:func:`~xpushare.soak.ops.soak_ops`)
and writes the soak report.
Used by STAB-001..004 and LEAK-001..005 through the engine, and by ``invoke soak`` (which resumes).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TextIO

from xpushare.model.atomic_file import open_append
from xpushare.model.errors import XpushareError
from xpushare.model.workload import WorkloadSpec
from xpushare.soak.checkpoint import Checkpoint
from xpushare.soak.loop import SoakLoop, SoakSettings
from xpushare.soak.ops import SoakOps, soak_ops
from xpushare.soak.report import write_report

if TYPE_CHECKING:  # cases import this module: no import of xpushare.cases at run time
    from xpushare.cases.base import CaseRun

__all__ = ["run_soak", "settings_from_params"]


def settings_from_params(
    params: Mapping[str, Any],
    *,
    duration_s: float | None,
    max_rounds: int | None,
    quota_key: str | None = None,
    quota_cycle: Sequence[str] = (),
    quota_interval_s: float | None = None,
    keep_logs_suffix: str | None = None,
) -> SoakSettings:
    """:class:`SoakSettings` from a case's parameters (names as in ``invoke cases`` / result.json thresholds)."""
    return SoakSettings(
        duration_s=duration_s,
        max_rounds=max_rounds,
        sample_interval_s=float(params["sample_interval_s"]),
        poll_s=float(params["soak_poll_s"]),
        round_timeout_s=float(params["round_timeout_s"]),
        stop_grace_s=float(params["stop_grace_s"]),
        progress_s=float(params["progress_s"]),
        interim_s=float(params["interim_report_s"]),
        checkpoint_s=float(params["checkpoint_s"]),
        log_rotate_s=float(params["log_rotate_s"]),
        quota_interval_s=quota_interval_s,
        quota_key=quota_key,
        quota_cycle=tuple(str(v) for v in quota_cycle),
        settle_s=float(params["settle_s"]),
        gpu_tolerance_bytes=float(params["leak_gpu_tolerance_bytes"]),
        rss_alarm_bytes=float(params["leak_rss_max_growth_bytes"]),
        backoff_max_s=float(params["backoff_max_s"]),
        max_failed_logs=int(params["max_failed_logs"]),
        keep_logs_suffix=keep_logs_suffix,
    )


def run_soak(
    run: CaseRun,
    settings: SoakSettings,
    mix: Callable[[int], Sequence[WorkloadSpec]],
    *,
    run_id: str,
    resume: bool = False,
    ops: SoakOps | None = None,
    out: TextIO | None = None,
    title: str | None = None,
) -> Checkpoint:
    """Run (or, with ``resume``, continue) the soak of ``run`` into ``<case_dir>/soak``; write its report.

    Raises:
        XpushareError: ``resume`` without a checkpoint, or a checkpoint of another case/run/cluster.
        KeyboardInterrupt: Ctrl-C (after the checkpoint is written).
    """
    soak_dir = run.case_dir / "soak"
    existing = Checkpoint.load(soak_dir)
    if resume:
        if existing is None:
            raise XpushareError(f"nothing to resume: no checkpoint in {soak_dir}")
        if (existing.case_id, existing.run_id, existing.cluster) != (run.case_id, run_id, run.cluster.name):
            raise XpushareError(f"{soak_dir}: the checkpoint belongs to {existing.case_id} of run {existing.run_id} "
                                f"on {existing.cluster}")
        ck = existing
        ck.target_s = settings.duration_s
        ck.max_rounds = settings.max_rounds
    else:
        ck = Checkpoint(run.case_id, run_id, run.cluster.name, settings.duration_s, settings.max_rounds)
    ops = ops or soak_ops(run.backend, run.case_dir)
    loop = SoakLoop(ops, soak_dir, settings, mix, ck, ours_prefix=f"{run.case_id.lower()}-",
                    out=out if out is not None else sys.stdout, label=run.case_id)
    try:
        loop.run()
    finally:
        try:
            write_report(run.case_dir, run.params, title=title or run.case_id,
                         plots=bool(run.params.get("soak_plots", True)))
        except Exception as exc:  # the report must never hide the soak's own outcome
            with open_append(run.case_dir / "harvest-errors.txt") as fh:
                fh.write(f"soak report: {type(exc).__name__}: {exc}\n")
    return ck
