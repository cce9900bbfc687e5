"""Checks every case that judges the SUT adds to its verdict: the SUT was in each workload's path, and the SUT's
GPU identity of each workload is the GPU NVML saw it on.

A verdict about quotas, sharing or placement says something about the SUT only if the client library was loaded
into each workload and the scheduler registered it; otherwise it judges a system that never ran
(:func:`sut_path_check`). And the GPU the scheduler thinks a client is on (its registration's key) must be the
GPU the process really used (:func:`gpu_identity_check`, against NVML through the node sampler,
:mod:`xpushare.evidence.nvml_placement`): a wrong key bills every client of a node to one GPU.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from xpushare.evidence import workload_env
from xpushare.evidence.store import SOURCE_REGISTRATION, Evidence
from xpushare.judge.sut_proof import check_system_in_path
from xpushare.model.premises import SUT, is_unmet, unmet
from xpushare.model.verdict import Check, Status, Verdict
from xpushare.parsers.scheduler_log import parse_text

__all__ = ["PREREQUISITE_MARKERS", "REGISTRATION_TIMEOUT_S", "before_gpu", "gpu_identity_check",
           "registration_delays", "sut_expected", "sut_path_check", "with_sut_checks"]

REGISTRATION_TIMEOUT_S = 60.0
"""Default of the parameter ``registration_timeout_s``: how long after a workload started (its container's ``startedAt``
in Kubernetes, the process start in host mode) the scheduler may log its first ``Registered client`` line. The client
library registers on the process's first CUDA driver call (hook.c: ``cuInit`` / ``cuGetProcAddress`` run
``initialize_client``, which sends REGISTER, docs/sut/log.md §registration), so the delay is the interpreter's start,
``import torch`` and the CUDA set-up: about 1 s on the lab, seconds to about 20 s on a cold GPU node; 60 s is three
times the slowest of those, and a registration that late means the SUT was slow to admit the client (the scheduler's
accept loop or its Kubernetes look-ups stalled), not a slow workload. Kubernetes' ``startedAt`` has whole seconds, so
a delay is overstated by less than 1 s."""

#: Lines of a workload's output that say it failed before it reached the GPU: a missing module or a library the
#: dynamic loader could not load (a node prerequisite, never a verdict on the SUT).
PREREQUISITE_MARKERS = re.compile(
    r"^.*(ModuleNotFoundError|ImportError: |error while loading shared libraries|"
    r"No module named |can't open file .*\.py).*$", re.MULTILINE)
_PRELOAD_REFUSED = re.compile(r"^.*ld\.so: object .* from LD_PRELOAD cannot be preloaded.*$", re.MULTILINE)
# Anywhere on a line: Kubernetes pod logs carry a timestamp first (``kubectl logs --timestamps``).
_LIBRARY_LINE = re.compile(r"\[(XPUSHARE|NVSHARE)\]\[(INFO|WARN|DEBUG|FATAL)\]: .*$", re.MULTILINE)
_STARTED = ("Running", "Succeeded", "Failed")


def before_gpu(log: str) -> str | None:
    """The first line of a workload's output that says it failed before it reached the GPU (None: no such line)."""
    m = PREREQUISITE_MARKERS.search(log)
    return m.group(0).strip() if m else None


def sut_expected(ev: Evidence) -> bool:
    """Whether the SUT should be in the workloads' path: always in Kubernetes (the device plugin preloads the
    client library), in host mode when a stored workload environment (``pods/<pod>.environ.txt``) has
    ``LD_PRELOAD`` (the inventory's ``sut_lib``)."""
    if ev.on_kubernetes:
        return bool(ev.pods)
    return any("LD_PRELOAD" in workload_env.parse(ev.text(workload_env.environ_file(p.name)) or "") for p in ev.pods)


def registration_delays(ev: Evidence) -> tuple[dict[str, float], dict[str, str]]:
    """Per registered pod, seconds from its start (``pods.json`` ``started``, Unix s) to its first matched
    ``Registered client`` line of ``scheduler.log`` (its timestamp: ``kubectl logs --timestamps`` in Kubernetes);
    and per registered pod whose delay cannot be measured, why (no start time, a log without timestamps)."""
    text = ev.text("scheduler.log")
    registrations = parse_text(text).registrations if text is not None else ()
    delays: dict[str, float] = {}
    unmeasured: dict[str, str] = {}
    for pod in ev.pods:
        a = ev.assignment(ev.key(pod))
        if a is None or a.source != SOURCE_REGISTRATION or not a.client_ids:
            continue
        first = next((r for r in registrations if r.cid in a.client_ids), None)
        if pod.started is None:
            unmeasured[ev.key(pod)] = "no start time in pods.json"
        elif first is None or first.ts is None:
            unmeasured[ev.key(pod)] = "scheduler.log has no timestamps (host mode logs none)"
        else:
            delays[ev.key(pod)] = round(first.ts.timestamp() - pod.started, 3)
    return delays, unmeasured


def sut_path_check(ev: Evidence, registration_timeout_s: float = REGISTRATION_TIMEOUT_S) -> Check | None:
    """``sut_in_path``: every workload that started was registered by the scheduler, with the library loaded,
    within ``registration_timeout_s`` of its start.

    Per started pod (phase Running/Succeeded/Failed), from its output and ``scheduler.log``:

    * registered (client id, GPU key; matched by pod in Kubernetes, by host pid / client id in host mode): in
      the path;
    * the dynamic loader refused the preload (``ld.so: object ... cannot be preloaded``), the workload failed
      before it reached the GPU (:func:`before_gpu`), or neither a registration nor any line of the client
      library (``[XPUSHARE][...]``) is there: not in the path, ``ok`` None (ERROR "SUT not in the path"), since
      a verdict then judges a system that never ran;
    * the library ran (its lines are in the output) but the scheduler never registered the client: the SUT
      failed, ``ok`` False (FAIL), a verdict on the SUT;
    * registered more than ``registration_timeout_s`` (s) after the workload started
      (:func:`registration_delays`: ``pods.json`` against the log's timestamp): the SUT was slow to admit it,
      ``ok`` False (FAIL). Where the delay cannot be measured (host mode: the scheduler's own log has no
      timestamps) the pod counts as registered and ``values["delay_unmeasured"]`` says why; the threshold and
      every measured delay are in ``values`` (``registration_timeout_s``, ``registration_delay_s``).

    Without ``scheduler.log`` no registration can be checked: ``ok`` None. Returns None when the SUT is not
    expected in the path (:func:`sut_expected`).
    """
    if not sut_expected(ev):
        return None
    values: dict[str, object] = {}
    if ev.text("scheduler.log") is None:
        return Check("sut_in_path", "every started workload registered with the scheduler, library loaded",
                     values, None, "SUT not in the path: cannot be established without scheduler.log "
                     "(host mode: the inventory's scheduler.log_file)")
    missing: dict[str, str] = {}
    unregistered: dict[str, str] = {}
    seen: dict[str, str] = {}
    for pod in ev.pods:
        if pod.phase not in _STARTED:
            continue
        log = ev.logs.get(ev.key(pod), "")
        a = ev.assignment(ev.key(pod))
        registered = a is not None and a.source == SOURCE_REGISTRATION
        refused = _PRELOAD_REFUSED.search(log)
        early = before_gpu(log)
        if refused:
            missing[ev.key(pod)] = f"preload refused ({refused.group(0).strip()[:200]})"
        elif registered and a is not None:
            seen[ev.key(pod)] = f"client {', '.join(a.client_ids)} on GPU {a.registered_key} ({a.matched_by})"
        elif early:
            missing[ev.key(pod)] = f"the workload failed before it reached the GPU ({early[:200]})"
        elif (line := _LIBRARY_LINE.search(log)) is not None:
            unregistered[ev.key(pod)] = f"the client library ran ({line.group(0).strip()[:120]}) but never registered"
        else:
            missing[ev.key(pod)] = "no registration in scheduler.log and no line of the client library in its output"
    delays, unmeasured = registration_delays(ev)
    late = {p: d for p, d in delays.items() if p in seen and d > registration_timeout_s}
    values = {"registered": seen, "not_in_path": missing, "not_registered": unregistered,
              "registration_timeout_s": registration_timeout_s, "registration_delay_s": delays,
              "delay_unmeasured": unmeasured, "sources": ["pods.json (start)", "scheduler.log (registration)"]}
    if missing:
        detail = "SUT not in the path: " + "; ".join(f"{p}: {why}" for p, why in sorted(missing.items()))
        ok: bool | None = None
    elif unregistered:
        detail = "the scheduler did not register: " + "; ".join(f"{p}: {w}" for p, w in sorted(unregistered.items()))
        ok = False
    elif late:
        detail = ("the scheduler was slow to register: " + "; ".join(
            f"{p}: registered {d:.1f} s after it started (pods.json) per scheduler.log" for p, d in sorted(
                late.items())) + f" (registration_timeout_s {registration_timeout_s:g})")
        ok = False
    else:
        detail, ok = "", True
    return Check("sut_in_path", "every started workload registered with the scheduler, library loaded, "
                 f"within registration_timeout_s {registration_timeout_s:g} s of its start", values, ok, detail)


def gpu_identity_check(ev: Evidence) -> Check | None:
    """``gpu_identity``: for every pod with both a registration and NVML's placement, the SUT's GPU key names the
    GPU NVML saw the process on. FAIL naming each disagreement; None when no pod has both sources."""
    compared: dict[str, str] = {}
    wrong: dict[str, str] = {}
    unverified: dict[str, str] = {}
    for pod in ev.pods:
        a = ev.assignment(ev.key(pod))
        if a is None or a.nvml is None:
            continue
        agrees = a.identity_agrees
        if agrees is None:
            if a.registered_key is not None:
                unverified[ev.key(pod)] = a.nvml.note or "NVML saw no single GPU"
            continue
        view = (f"SUT key {a.registered_key} -> {a.key_gpu or 'no GPU of the node'}; "
                f"NVML {', '.join(a.nvml.uuids)}")
        (compared if agrees else wrong)[ev.key(pod)] = view
    if not compared and not wrong:
        return None
    detail = ("the SUT's GPU identity is wrong: " + "; ".join(f"{p}: {v}" for p, v in sorted(wrong.items()))
              if wrong else "")
    return Check("gpu_identity", "SUT registration GPU == NVML GPU of the process, per pod",
                 {"agree": compared, "disagree": wrong, "unverified": unverified}, not wrong, detail)


def with_sut_checks(verdict: Verdict, ev: Evidence, params: Mapping[str, Any] | None = None,
                    plan: Mapping[str, Any] | None = None) -> Verdict:
    """``verdict`` with :func:`sut_path_check` and :func:`gpu_identity_check` added (those that apply).

    ``params``: the case's parameters; ``registration_timeout_s`` (default :data:`REGISTRATION_TIMEOUT_S`) is
    recorded in the verdict's thresholds. ``plan``: the case's ``plan.json``; where its ``sut`` is another system
    (``hami-core``, ``mps``), that system's own evidence of every started workload is the ``sut_in_path`` check
    (:func:`xpushare.judge.sut_proof.check_system_in_path`) instead of the project's scheduler registrations.

    A PASS or FAIL whose workloads the SUT never saw becomes ERROR "premise unmet: sut: SUT not in the path:
    <pod>: <why> (was ...)": it is not a verdict on the SUT (the ``sut`` premise, :mod:`xpushare.model.premises`);
    a PASS where the library ran but the scheduler did not register a client becomes FAIL, and so does an ERROR
    of another unmet premise (the scheduler's missing registrations are what left the placement unknown).
    A wrong GPU identity turns PASS, SKIP or FAIL into FAIL naming the
    disagreement (an ERROR stays ERROR: its evidence is not trusted). Returns the same object, updated.
    """
    timeout = float((params or {}).get("registration_timeout_s", REGISTRATION_TIMEOUT_S))
    started = [ev.key(p) for p in ev.pods if p.phase in _STARTED]
    path = check_system_in_path(ev, plan or {}, started) if started else None
    if path is None:  # the project's SUT (or nothing started)
        path = sut_path_check(ev, timeout)
        if path is not None:
            verdict.thresholds["registration_timeout_s"] = timeout
    identity = gpu_identity_check(ev)
    verdict.checks += [c for c in (path, identity) if c is not None]
    premise_error = verdict.status is Status.ERROR and is_unmet(verdict.summary)
    if path is not None and path.ok is None and (verdict.status in (Status.PASS, Status.FAIL) or premise_error):
        why = path.detail if is_unmet(path.detail) else unmet(SUT, path.detail)
        verdict.status, verdict.summary = Status.ERROR, f"{why} (was {verdict.status}: {verdict.summary})"
    elif path is not None and path.ok is False and (verdict.status is Status.PASS or premise_error):
        verdict.status, verdict.summary = Status.FAIL, f"sut_in_path: {path.detail} (was PASS: {verdict.summary})"
    elif identity is not None and identity.ok is False and verdict.status is not Status.ERROR:
        was = "" if verdict.status is Status.FAIL else f" (was {verdict.status}: {verdict.summary})"
        lead = f"gpu_identity: {identity.detail}"
        verdict.summary = f"{lead}; {verdict.summary}" if verdict.status is Status.FAIL else f"{lead}{was}"
        verdict.status = Status.FAIL
    return verdict
