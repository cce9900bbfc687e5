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

from xpushare.evidence import workload_env
from xpushare.evidence.store import SOURCE_REGISTRATION, Evidence
from xpushare.model.verdict import Check, Status, Verdict

__all__ = ["PREREQUISITE_MARKERS", "before_gpu", "gpu_identity_check", "sut_expected", "sut_path_check",
           "with_sut_checks"]

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


def sut_path_check(ev: Evidence) -> Check | None:
    """``sut_in_path``: every workload that started was registered by the scheduler, with the library loaded.

    Per started pod (phase Running/Succeeded/Failed), from its output and ``scheduler.log``:

    * registered (client id, GPU key; matched by pod in Kubernetes, by host pid / client id in host mode): in
      the path;
    * the dynamic loader refused the preload (``ld.so: object ... cannot be preloaded``), the workload failed
      before it reached the GPU (:func:`before_gpu`), or neither a registration nor any line of the client
      library (``[XPUSHARE][...]``) is there: not in the path, ``ok`` None (ERROR "SUT not in the path"), since
      a verdict then judges a system that never ran;
    * the library ran (its lines are in the output) but the scheduler never registered the client: the SUT
      failed, ``ok`` False (FAIL), a verdict on the SUT.

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
        log = ev.logs.get(pod.name, "")
        a = ev.assignment(pod.name)
        registered = a is not None and a.source == SOURCE_REGISTRATION
        refused = _PRELOAD_REFUSED.search(log)
        early = before_gpu(log)
        if refused:
            missing[pod.name] = f"preload refused ({refused.group(0).strip()[:200]})"
        elif registered and a is not None:
            seen[pod.name] = f"client {', '.join(a.client_ids)} on GPU {a.registered_key} ({a.matched_by})"
        elif early:
            missing[pod.name] = f"the workload failed before it reached the GPU ({early[:200]})"
        elif (line := _LIBRARY_LINE.search(log)) is not None:
            unregistered[pod.name] = f"the client library ran ({line.group(0).strip()[:120]}) but never registered"
        else:
            missing[pod.name] = "no registration in scheduler.log and no line of the client library in its output"
    values = {"registered": seen, "not_in_path": missing, "not_registered": unregistered}
    if missing:
        detail = "SUT not in the path: " + "; ".join(f"{p}: {why}" for p, why in sorted(missing.items()))
        ok: bool | None = None
    elif unregistered:
        detail = "the scheduler did not register: " + "; ".join(f"{p}: {w}" for p, w in sorted(unregistered.items()))
        ok = False
    else:
        detail, ok = "", True
    return Check("sut_in_path", "every started workload registered with the scheduler, library loaded",
                 values, ok, detail)


def gpu_identity_check(ev: Evidence) -> Check | None:
    """``gpu_identity``: for every pod with both a registration and NVML's placement, the SUT's GPU key names the
    GPU NVML saw the process on. FAIL naming each disagreement; None when no pod has both sources."""
    compared: dict[str, str] = {}
    wrong: dict[str, str] = {}
    unverified: dict[str, str] = {}
    for pod in ev.pods:
        a = ev.assignment(pod.name)
        if a is None or a.nvml is None:
            continue
        agrees = a.identity_agrees
        if agrees is None:
            if a.registered_key is not None:
                unverified[pod.name] = a.nvml.note or "NVML saw no single GPU"
            continue
        view = (f"SUT key {a.registered_key} -> {a.key_gpu or 'no GPU of the node'}; "
                f"NVML {', '.join(a.nvml.uuids)}")
        (compared if agrees else wrong)[pod.name] = view
    if not compared and not wrong:
        return None
    detail = ("the SUT's GPU identity is wrong: " + "; ".join(f"{p}: {v}" for p, v in sorted(wrong.items()))
              if wrong else "")
    return Check("gpu_identity", "SUT registration GPU == NVML GPU of the process, per pod",
                 {"agree": compared, "disagree": wrong, "unverified": unverified}, not wrong, detail)


def with_sut_checks(verdict: Verdict, ev: Evidence) -> Verdict:
    """``verdict`` with :func:`sut_path_check` and :func:`gpu_identity_check` added (those that apply).

    A PASS or FAIL whose workloads the SUT never saw becomes ERROR "SUT not in the path: <pod>: <why> (was ...)":
    it is not a verdict on the SUT; a PASS where the library ran but the scheduler did not register a client
    becomes FAIL. A wrong GPU identity turns PASS, SKIP or FAIL into FAIL naming the
    disagreement (an ERROR stays ERROR: its evidence is not trusted). Returns the same object, updated.
    """
    path, identity = sut_path_check(ev), gpu_identity_check(ev)
    verdict.checks += [c for c in (path, identity) if c is not None]
    if path is not None and path.ok is None and verdict.status in (Status.PASS, Status.FAIL):
        verdict.status, verdict.summary = Status.ERROR, f"{path.detail} (was {verdict.status}: {verdict.summary})"
    elif path is not None and path.ok is False and verdict.status is Status.PASS:
        verdict.status, verdict.summary = Status.FAIL, f"sut_in_path: {path.detail} (was PASS: {verdict.summary})"
    elif identity is not None and identity.ok is False and verdict.status is not Status.ERROR:
        was = "" if verdict.status is Status.FAIL else f" (was {verdict.status}: {verdict.summary})"
        lead = f"gpu_identity: {identity.detail}"
        verdict.summary = f"{lead}; {verdict.summary}" if verdict.status is Status.FAIL else f"{lead}{was}"
        verdict.status = Status.FAIL
    return verdict
