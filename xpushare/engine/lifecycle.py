"""The case lifecycle: one case from a fresh case directory to its stored verdict.

Lifecycle of a case (DESIGN.md "Evidence first, verdict second"):
prepare (fresh case dir, earlier attempt archived) -> act -> harvest evidence -> clean up (``finally``)
-> judge (from the case dir only) -> ``result.json`` + ``analysis.txt``.
A harness or infrastructure exception during ``act`` is ERROR; Ctrl-C is INTERRUPTED (evidence is
still harvested and the pods cleaned up) and ends the run with status 130, resumable with ``--resume``.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from xpushare.backends.base import CAP_KUBERNETES, Backend
from xpushare.cases import CaseDef
from xpushare.cases.base import CaseRun, load_plan
from xpushare.evidence.store import Evidence, write_gpu_mapping
from xpushare.inventory.schema import ClusterSpec
from xpushare.model.errors import XpushareError
from xpushare.model.verdict import Status, Verdict
from xpushare.report import artifacts
from xpushare.transport import interrupt


def utc_now() -> datetime:
    """Now, timezone-aware UTC (the times in run.json and result.json)."""
    return datetime.now(timezone.utc)


def _skip_reason(case: CaseDef, backend: Backend, cluster: ClusterSpec) -> str | None:
    missing = case.requires - backend.capabilities - ({CAP_KUBERNETES} if cluster.mode == "k8s" else set())
    if CAP_KUBERNETES in missing:
        return "needs Kubernetes (this cluster runs in host mode)"
    if "client-library" in missing:
        return "needs the nvshare client library (set sut_lib in the inventory)"
    if missing:
        return f"needs {', '.join(sorted(missing))}"
    if case.act is None or case.judge is None:
        return f"not implemented in this version (comes with {case.implemented_by})"
    return None


def run_case(
    case: CaseDef,
    *,
    run_id: str,
    run_dir: Path,
    cluster: ClusterSpec,
    backend: Backend,
    params: dict[str, Any],
    required: bool,
) -> tuple[dict[str, Any], bool]:
    """Run one case through its lifecycle; return its stored record and whether Ctrl-C stopped it."""
    case_dir = artifacts.case_dir(run_dir, cluster.name, case.suite, case.case_id)
    attempt = (artifacts.archive_previous_attempt(case_dir) or 0) + 1
    case_dir.mkdir(parents=True, exist_ok=True)
    started, t0 = utc_now(), time.monotonic()
    calls0 = backend.kubectl_calls()
    interrupted = False
    error: str | None = None
    reason = _skip_reason(case, backend, cluster)
    harvested: list[str] = []
    phases: dict[str, float] = {}  # phase name -> monotonic end time, in lifecycle order
    if reason is None:
        assert case.act is not None
        run = CaseRun(case.case_id, case_dir, backend, cluster, params)
        try:
            backend.begin_case(case_dir, case.case_id)
            phases["begin"] = time.monotonic()
            case.act(run)
            interrupt.check()  # a Ctrl-C swallowed by a command runner still counts
        except KeyboardInterrupt:
            interrupted = True
        except XpushareError as exc:
            error = str(exc)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            (case_dir / "harness-traceback.txt").write_text(traceback.format_exc(), encoding="utf-8")
        finally:
            phases["act"] = time.monotonic()
            harvested = _guarded_step(case_dir, "harvest", lambda: backend.harvest(case_dir)) or []
            phases["harvest"] = time.monotonic()
            _guarded_step(case_dir, "cleanup", lambda: backend.cleanup(case_dir))
            phases["cleanup"] = time.monotonic()
    if reason is not None:
        verdict = Verdict(Status.SKIP, reason)
    elif interrupted:
        verdict = Verdict(Status.INTERRUPTED, f"interrupted ({interrupt.describe()}); resume with --resume")
    elif error is not None:
        verdict = Verdict(Status.ERROR, f"harness/infrastructure error: {error}")
    else:
        verdict = judge_case(case, case_dir, params, cluster.mode)
        phases["judge"] = time.monotonic()
    ended = utc_now()
    calls1 = backend.kubectl_calls()
    record = {
        "run_id": run_id,
        "cluster": cluster.name,
        "suite": case.suite,
        "case_id": case.case_id,
        "title": case.title,
        "mode": cluster.mode,
        "attempt": attempt,
        "status": verdict.status.value,
        "summary": verdict.summary,
        "started": started.isoformat(),
        "ended": ended.isoformat(),
        "duration_s": round(time.monotonic() - t0, 3),
        "phases_s": _phase_durations(t0, phases),
        "thresholds": jsonable(params),
        "metrics": jsonable(verdict.metrics),
        "checks": jsonable(verdict.to_dict()["checks"]),
        "evidence": sorted(set(verdict.evidence) | set(harvested)),
        "required": required,
        "operation": f"{case.workload}: {case.operation}".strip(": "),
        "sampling": case.sampling,
        "kubectl_calls": None if calls0 is None or calls1 is None else calls1 - calls0,
        "error": error,
    }
    artifacts.write_result(case_dir, record)
    artifacts.write_analysis(case_dir, record)
    return record, interrupted


def record_not_run(
    case: CaseDef,
    *,
    run_id: str,
    run_dir: Path,
    cluster: ClusterSpec,
    params: dict[str, Any],
    required: bool,
    reason: str,
) -> dict[str, Any]:
    """Store the record of a case the run did not reach (``reason``, e.g. ``--maxfail`` reached) and return it.

    Its status is INTERRUPTED, so it counts as not run in every report (never PASS) and ``--resume`` runs it;
    an earlier attempt's directory is archived as for a case that runs.
    """
    case_dir = artifacts.case_dir(run_dir, cluster.name, case.suite, case.case_id)
    attempt = (artifacts.archive_previous_attempt(case_dir) or 0) + 1
    case_dir.mkdir(parents=True, exist_ok=True)
    now = utc_now().isoformat()
    record = {
        "run_id": run_id, "cluster": cluster.name, "suite": case.suite, "case_id": case.case_id,
        "title": case.title, "mode": cluster.mode, "attempt": attempt, "status": Status.INTERRUPTED.value,
        "summary": reason, "started": now, "ended": now, "duration_s": 0.0, "phases_s": {},
        "thresholds": jsonable(params), "metrics": {}, "checks": [], "evidence": [], "required": required,
        "operation": f"{case.workload}: {case.operation}".strip(": "), "sampling": case.sampling,
        "kubectl_calls": None, "error": None, "not_run": True,
    }
    artifacts.write_result(case_dir, record)
    artifacts.write_analysis(case_dir, record)
    return record


def _phase_durations(t0: float, ends: Mapping[str, float]) -> dict[str, float]:
    """Seconds spent in each lifecycle phase (begin, act, harvest, cleanup, judge) from their end times."""
    out: dict[str, float] = {}
    last = t0
    for name, end in ends.items():
        out[name] = round(end - last, 3)
        last = end
    return out


def _guarded_step(case_dir: Path, name: str, step: Any) -> Any:
    try:
        return step()
    except KeyboardInterrupt:
        return None
    except Exception as exc:
        with (case_dir / "harvest-errors.txt").open("a", encoding="utf-8") as fh:
            fh.write(f"{name}: {type(exc).__name__}: {exc}\n")
        return None


def judge_case(case: CaseDef, case_dir: Path, params: Mapping[str, Any], mode: str | None = None) -> Verdict:
    """Apply the case's judgment to its stored evidence; a judgment that crashes is ERROR.

    The pod -> GPU mapping is derived from the stored evidence here (:meth:`Evidence.load`, ``mode`` the
    cluster's) and written to ``gpu_mapping.txt``, which then joins the verdict's evidence.
    """
    assert case.judge is not None
    try:
        ev = Evidence.load(case_dir, mode)
        mapping = write_gpu_mapping(ev)
        verdict = case.judge(ev, params, load_plan(case_dir))
    except Exception as exc:
        return Verdict(Status.ERROR, f"judgment failed on the stored evidence: {type(exc).__name__}: {exc}")
    verdict.evidence = sorted(set(verdict.evidence) | set(mapping))
    return verdict


def jsonable(value: Any) -> Any:
    """``value`` with dict keys as strings, tuples as lists and anything not JSON as its ``str``."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)



