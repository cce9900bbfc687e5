"""The case lifecycle: one case from a fresh case directory to its stored verdict.

Lifecycle of a case (docs/architecture.md "Evidence first, verdict second"):
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

from xpushare.backends.base import CAP_CLIENT_LIBRARY, Backend
from xpushare.cases import CaseDef
from xpushare.cases.base import CaseRun, load_plan, title_for
from xpushare.engine.plan import expected_case_duration
from xpushare.evidence import events, gpu_apps
from xpushare.evidence.store import Evidence, write_gpu_mapping
from xpushare.inventory.schema import ClusterSpec, is_kubernetes_mode
from xpushare.inventory.sut_profiles import PROFILES
from xpushare.judge.gpu_faults import with_gpu_fault_check
from xpushare.judge.sut_path import with_sut_checks
from xpushare.judge.thresholds import ReadParams
from xpushare.model.atomic_file import atomic_write_text, open_append
from xpushare.model.case_record import CaseRecord
from xpushare.model.errors import HarvestIncomplete, XpushareError
from xpushare.model.premises import PREMISES, ClusterFacts, unmet, unmet_before
from xpushare.model.verdict import Status, Verdict
from xpushare.report import run_store
from xpushare.report.output import plain
from xpushare.transport import activity, interrupt

#: Suites whose verdicts are about the SUT's sharing, quotas, placement or metrics: each of their cases first
#: establishes that the SUT was in every workload's path and that its GPU identity of each is NVML's.
SUT_JUDGING_SUITES = frozenset({"functional", "combination", "performance", "metrics"})


def utc_now() -> datetime:
    """Now, timezone-aware UTC (the times in run.json and result.json)."""
    return datetime.now(timezone.utc)


def cluster_facts(cluster: ClusterSpec, capabilities: frozenset[str], gpu_count: int | None = None) -> ClusterFacts:
    """What ``cluster`` tells of the premises before a case acts: its mode, the inventory's ``sut_lib`` and
    ``scheduler`` settings, the backend's ``capabilities`` and ``gpu_count`` (None: unknown; a dry run knows it
    only where every GPU host lists its ``gpus``, see :func:`inventory_gpu_count`)."""
    in_path = bool(cluster.sut_lib) or not cluster.profile.needs_preload  # MPS needs no preload
    return ClusterFacts(capabilities=capabilities, kubernetes=cluster.is_kubernetes, sut_lib=in_path,
                        gpu_count=gpu_count, scheduler_log=bool(cluster.scheduler.log_file),
                        scheduler_metrics=bool(cluster.scheduler.metrics_url),
                        core_quota_unset=cluster.profile.host_core_quota,
                        oversub_unset=cluster.profile.no_oversubscription,
                        quota_change_unset=None if cluster.is_kubernetes else cluster.profile.host_quota_change)


def inventory_gpu_count(cluster: ClusterSpec) -> int | None:
    """GPUs of a host-mode cluster as its inventory lists them (every GPU host's ``gpus``); None when some host
    does not list them (``nvidia-smi -L`` tells at run time) or in Kubernetes mode (the nodes tell)."""
    if cluster.is_kubernetes:
        return None
    hosts = cluster.by_role("gpu") or list(cluster.hosts)
    if not hosts or any(h.gpus is None for h in hosts):
        return None
    return sum(len(h.gpus or ()) for h in hosts)


def skip_reason(case: CaseDef, capabilities: frozenset[str], mode: str,
                facts: ClusterFacts | None = None) -> str | None:
    """Why ``case`` SKIPs before it acts, or None when it runs: a premise it declares does not hold on the cluster
    (``premise unmet: <name>: <why>``, :func:`xpushare.model.premises.unmet_before` on ``facts``; without
    ``facts``, those of a backend with ``capabilities`` in cluster ``mode``), or it is not implemented."""
    if facts is None:
        facts = ClusterFacts(capabilities=capabilities, kubernetes=is_kubernetes_mode(mode),
                             sut_lib=CAP_CLIENT_LIBRARY in capabilities)
    found = unmet_before(case.requires, facts)
    if found is not None:
        name, why = found
        note = case.premise_notes.get(name)
        return unmet(name, f"{why}: {note}" if note else why)
    if case.act is None or case.judge is None:
        return f"not implemented in this version (comes with {case.implemented_by})"
    return None


_GPU_PREMISES = frozenset({"gpu", "two-gpus", "nvml"})


def _backend_facts(case: CaseDef, cluster: ClusterSpec, backend: Backend) -> ClusterFacts:
    """The facts of ``cluster`` before ``case`` acts; the GPU count is asked of the backend only for a case with a
    GPU premise (in Kubernetes it is a node listing)."""
    gpus = None
    if case.requires & _GPU_PREMISES:
        try:
            gpus = backend.parts.placement.gpu_count()
        except XpushareError:  # the nodes could not be listed: unknown, left to the evidence
            gpus = None
    return cluster_facts(cluster, backend.parts.capabilities, gpus)


def _kubectl_counts(backend: Backend) -> tuple[int | None, int | None]:
    """kubectl calls and retries so far; None where the backend has no Kubernetes part."""
    kube = backend.parts.kubernetes
    return (None, None) if kube is None else (kube.kubectl_calls(), kube.kubectl_retries())


def run_case(
    case: CaseDef,
    *,
    run_id: str,
    run_dir: Path,
    cluster: ClusterSpec,
    backend: Backend,
    params: dict[str, Any],
    required: bool,
    root: Path | None = None,
) -> tuple[CaseRecord, bool]:
    """Run one case through its lifecycle; return its stored record and whether Ctrl-C stopped it.

    ``run_dir`` is run ``run_id``'s directory under the run root ``root`` (:func:`xpushare.report.run_store.run_dir`),
    whose earlier runs give the case's expected duration (None: no expectation).

    Reports ``case_started``, ``harvest_*``, ``error`` and ``case_ended`` to the run's event stream
    (:mod:`xpushare.evidence.events`); the caller opens the case's scope there (``events.case``), which tags them
    with the case id."""
    case_dir = run_store.case_dir(run_dir, cluster.name, case.suite, case.case_id)
    attempt = (run_store.archive_previous_attempt(case_dir) or 0) + 1
    case_dir.mkdir(parents=True, exist_ok=True)
    started, t0 = utc_now(), time.monotonic()
    events.emit("case_started", suite=case.suite, attempt=attempt)
    calls0, retries0 = _kubectl_counts(backend)
    interrupted = False
    error: str | None = None
    reason: str | None = None
    try:
        reason = skip_reason(case, backend.parts.capabilities, cluster.mode, _backend_facts(case, cluster, backend))
    except KeyboardInterrupt:  # a signal while the nodes were asked (a retry's wait): nothing started yet
        interrupted = True
    harvested: list[str] = []
    harvest_fault: str | None = None
    phases: dict[str, float] = {}  # phase name -> monotonic end time, in lifecycle order
    if reason is None and not interrupted:
        assert case.act is not None
        seconds, basis = expected_case_duration(case, cluster, params, root, exclude_run=run_id)
        run = CaseRun(case.case_id, case_dir, backend, cluster, params, plan={
            "expected_duration_s": seconds, "expected_duration_basis": basis, "sut": cluster.profile.name})
        try:
            activity.note(phase="begin")
            backend.begin_case(case_dir, case.case_id)
            if case.measures_gpu:
                gpu_apps.capture(backend.parts.placement.gpu_node_hosts(), case_dir, "before")
            phases["begin"] = time.monotonic()
            activity.note(phase="act")
            case.act(run)
            interrupt.check()  # a Ctrl-C swallowed by a command runner still counts
        except KeyboardInterrupt:
            interrupted = True
        except XpushareError as exc:
            error = str(exc)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            atomic_write_text(case_dir / "harness-traceback.txt", traceback.format_exc())
        finally:
            if error is not None:
                events.emit("error", step="act", message=error)
            phases["act"] = time.monotonic()
            events.emit("harvest_started", step="harvest")
            activity.note(phase="harvest")
            harvested, harvest_fault = _harvest(case_dir, backend)
            events.emit("harvest_ended", step="harvest", files=len(harvested))
            phases["harvest"] = time.monotonic()
            events.emit("harvest_started", step="cleanup")
            activity.note(phase="cleanup")
            _guarded_step(case_dir, "cleanup", lambda: backend.cleanup())
            events.emit("harvest_ended", step="cleanup")
            if case.measures_gpu:  # every pod of the case is gone: what is left on the GPU is not ours
                _guarded_step(case_dir, "gpu processes",
                              lambda: gpu_apps.capture(backend.parts.placement.gpu_node_hosts(), case_dir, "after"))
            phases["cleanup"] = time.monotonic()
        interrupted = interrupted or interrupt.requested()  # a Ctrl-C that landed in the harvest or cleanup
    if reason is not None:
        verdict = Verdict(Status.SKIP, reason)
    elif interrupted:
        verdict = Verdict(Status.INTERRUPTED, f"interrupted ({interrupt.describe()}); resume with --resume")
    elif error is not None:
        verdict = Verdict(Status.ERROR, f"harness/infrastructure error: {error}")
    else:
        activity.note(phase="judge")
        verdict = judge_case(case, case_dir, params, cluster.mode)
        phases["judge"] = time.monotonic()
        if harvest_fault is not None:
            # judged on part of the evidence: neither a PASS nor a FAIL can be trusted; the fault is the reason
            verdict.summary = (f"evidence incomplete ({harvest_fault}); judged on what was stored: "
                               f"{verdict.status.value}: {verdict.summary}")
            verdict.status = Status.ERROR
            error = f"evidence incomplete: {harvest_fault}"
    ended = utc_now()
    calls1, retries1 = _kubectl_counts(backend)
    retried = None if retries0 is None or retries1 is None else retries1 - retries0
    if retried:  # the verdict stands, but says that the API server failed on the way (each retry: debug.log)
        verdict.summary += f" ({retried} kubectl read(s) retried after a transient API failure)"
    record = CaseRecord(
        run_id=run_id, cluster=cluster.name, suite=case.suite, case_id=case.case_id, title=title_for(case, params),
        mode=cluster.mode, attempt=attempt, status=verdict.status.value, summary=verdict.summary,
        started=started.isoformat(), ended=ended.isoformat(), duration_s=round(time.monotonic() - t0, 3),
        phases_s=_phase_durations(t0, phases), thresholds=plain(verdict.thresholds),
        params=plain(params), metrics=plain(verdict.metrics), checks=plain(verdict.to_dict()["checks"]),
        evidence=sorted(set(verdict.evidence) | set(harvested)), required=required, operation=_operation(case),
        sampling=case.sampling, premises=premise_names(case),
        kubectl_calls=None if calls0 is None or calls1 is None else calls1 - calls0,
        kubectl_retries=retried, error=error)
    store(case_dir, record)
    events.emit("case_ended", suite=case.suite, status=record.status, summary=record.summary,
                duration_s=record.duration_s, kubectl_retries=retried)
    return record, interrupted


def store(case_dir: Path, record: CaseRecord) -> None:
    """Write ``record`` as the case's ``result.json`` and its ``analysis.txt`` (:mod:`xpushare.report.run_store`)."""
    doc = record.to_json()
    run_store.write_result(case_dir, doc)
    run_store.write_analysis(case_dir, record)


def premise_names(case: CaseDef) -> list[str]:
    """The case's declared premises in the order of :data:`~xpushare.model.premises.PREMISES` (its record's
    ``premises``)."""
    return [name for name in PREMISES if name in case.requires]


def _operation(case: CaseDef) -> str:
    return f"{case.workload}: {case.operation}".strip(": ")


def record_not_run(
    case: CaseDef,
    *,
    run_id: str,
    run_dir: Path,
    cluster: ClusterSpec,
    params: dict[str, Any],
    required: bool,
    reason: str,
    status: Status = Status.INTERRUPTED,
) -> CaseRecord:
    """Store the record of a case the run did not reach (``reason``, e.g. ``--maxfail`` reached) and return it.

    Its status is INTERRUPTED (``status``: ERROR for a case whose cluster could not be reached), so it counts as
    not run in every report (never PASS) and ``--resume`` runs it; an earlier attempt's directory is archived as
    for a case that runs.
    """
    case_dir = run_store.case_dir(run_dir, cluster.name, case.suite, case.case_id)
    attempt = (run_store.archive_previous_attempt(case_dir) or 0) + 1
    case_dir.mkdir(parents=True, exist_ok=True)
    now = utc_now().isoformat()
    record = CaseRecord(
        run_id=run_id, cluster=cluster.name, suite=case.suite, case_id=case.case_id, title=title_for(case, params),
        mode=cluster.mode, attempt=attempt, status=status.value, summary=reason, started=now, ended=now,
        duration_s=0.0, params=plain(params), required=required, operation=_operation(case),
        sampling=case.sampling, premises=premise_names(case), not_run=True,
        error=reason if status is Status.ERROR else None)
    store(case_dir, record)
    return record


def _phase_durations(t0: float, ends: Mapping[str, float]) -> dict[str, float]:
    """Seconds spent in each lifecycle phase (begin, act, harvest, cleanup, judge) from their end times."""
    out: dict[str, float] = {}
    last = t0
    for name, end in ends.items():
        out[name] = round(end - last, 3)
        last = end
    return out


def _harvest(case_dir: Path, backend: Backend) -> tuple[list[str], str | None]:
    """The files the backend's harvest stored and, when faults lost some evidence, what they were."""
    try:
        return backend.harvest(), None
    except HarvestIncomplete as exc:
        return exc.files, str(exc)
    except KeyboardInterrupt:
        return [], "the harvest was interrupted"
    except Exception as exc:
        _note_error(case_dir, f"harvest: {type(exc).__name__}: {exc}")
        return [], f"harvest: {type(exc).__name__}: {exc}"


def _note_error(case_dir: Path, line: str) -> None:
    """Append to the case's ``harvest-errors.txt``; a run directory that cannot take it (full) loses only the
    note, never the cleanup that follows."""
    try:
        with open_append(case_dir / "harvest-errors.txt") as fh:
            fh.write(line + "\n")
    except OSError:
        pass


def _guarded_step(case_dir: Path, name: str, step: Any) -> Any:
    try:
        return step()
    except KeyboardInterrupt:
        return None
    except Exception as exc:
        events.emit("error", step=name, message=f"{type(exc).__name__}: {exc}")
        _note_error(case_dir, f"{name}: {type(exc).__name__}: {exc}")
        return None


def judge_case(case: CaseDef, case_dir: Path, params: Mapping[str, Any], mode: str | None = None) -> Verdict:
    """Apply the case's judgment to its stored evidence; a judgment that crashes is ERROR.

    The pod -> GPU mapping is derived from the stored evidence here (:meth:`Evidence.load`, ``mode`` the
    cluster's) and written to ``gpu_mapping.txt``, which then joins the verdict's evidence. Cases of
    :data:`SUT_JUDGING_SUITES` get the SUT-in-the-path and GPU-identity checks (:func:`with_sut_checks`).
    The judgment reads ``params`` through :class:`~xpushare.judge.thresholds.ReadParams`: the verdict's
    ``thresholds`` are the parameters it read (with any default it applied), and only those.
    """
    assert case.judge is not None
    try:
        ev = Evidence.load(case_dir, mode)
        mapping = write_gpu_mapping(ev)
        read = ReadParams(params)
        plan = load_plan(case_dir)
        verdict = case.judge(ev, read, plan)
        if case.suite in SUT_JUDGING_SUITES:
            verdict = with_sut_checks(verdict, ev, params, plan)
        if case.measures_gpu and verdict.status is not Status.SKIP:
            sut = PROFILES.get(str(plan.get("sut")))
            verdict = with_idle_check(verdict, ev, own=sut.gpu_processes if sut else ())
        verdict = with_gpu_fault_check(verdict, ev, expects_gpu_faults=case.expects_gpu_faults)
    except Exception as exc:
        return Verdict(Status.ERROR, f"judgment failed on the stored evidence: {type(exc).__name__}: {exc}")
    verdict.evidence = sorted(set(verdict.evidence) | set(mapping))
    verdict.thresholds = {**read.read(), **verdict.thresholds}
    return verdict


def with_idle_check(verdict: Verdict, ev: Evidence, own: tuple[str, ...] = ()) -> Verdict:
    """The verdict with :func:`gpu_apps.idle_check` added: a GPU another process used turns it ERROR ("GPU
    busy: ..."), whatever the measurement said, since neither a PASS nor a FAIL taken then is about the SUT;
    ``own`` names the system's own GPU processes (MPS's server), which are not another process's load."""
    check = gpu_apps.idle_check({name: ev.text(name) for name in map(gpu_apps.file_name, gpu_apps.TAGS)}, own)
    verdict.checks.append(check)
    verdict.evidence = sorted(set(verdict.evidence) | {gpu_apps.file_name(t) for t in gpu_apps.TAGS
                                                       if ev.text(gpu_apps.file_name(t)) is not None})
    if check.ok is None:
        verdict.status, verdict.summary = Status.ERROR, f"{check.detail} (was {verdict.status}: {verdict.summary})"
    return verdict





