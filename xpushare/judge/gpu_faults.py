"""A GPU fault during a case is never blamed on the SUT: the ``gpu_health`` check (docs/faults.md).

From the health captures before and after the case (:mod:`xpushare.evidence.gpu_health`, parsed by
:mod:`xpushare.parsers.gpu_health`), per node a pod of the case ran on and per GPU it used, a **fault** is:

* a new ``NVRM: Xid`` line for the GPU's PCI bus id (in the ``after`` kernel log, not in the ``before`` one)
  whose catalogue class (``xpushare/data/xid.yaml``) is ``warning`` or ``critical`` (an Xid the catalogue does
  not know counts as critical). Application Xids (13, 31, 43, 45, 68, 109: an illegal address, a killed
  context) are recorded but are no fault of the GPU: the application may well be the SUT's client library;
* an uncorrected ECC count (volatile or aggregate) that rose, a double-bit retired page count that rose, or a
  row remapping failure that appeared;
* the GPU lost: visible to nvidia-smi before, gone (or reported "GPU is lost") after.

HW slowdown, thermal slowdown or power brake throttling after the case is recorded (``throttled_after``), not a
fault: the GPU worked, slower. Without NVML's rows before the case, every new warning/critical Xid of the node is a
fault named by its PCI bus id (the GPU it hit cannot be told from the case's).

A GPU the case used: the GPU of each pod's :class:`~xpushare.evidence.store.GpuAssignment` (registration key,
NVML's placement, the recorded GPU) matched to the capture by UUID or index; every GPU of the node when a
pod's GPU is unknown.

:func:`with_gpu_fault_check` turns a PASS or FAIL into ERROR "GPU fault on <node> GPU <uuid> during the case
(Xid N: meaning): not a verdict on the SUT" — unless the case is about faults (``CaseDef.expects_gpu_faults``),
whose verdict stands with the check recorded. A node whose kernel log or NVML could not be read is named in
the check as not observable (its ``ok`` None); that alone never changes the verdict, and is never "healthy".
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from xpushare.evidence import gpu_health as health_files
from xpushare.evidence.store import Evidence
from xpushare.model.verdict import Check, Status, Verdict
from xpushare.parsers.gpu_health import GpuHealth, HealthCapture, parse_capture
from xpushare.parsers.xid import XidEvent, describe, severity

__all__ = ["GpuFault", "gpu_fault_check", "node_faults", "with_gpu_fault_check"]

EXPRESSION = ("no new Xid (warning/critical), no rise of uncorrected ECC or retired pages, no remap failure and "
              "no GPU lost, on each GPU the case used, between the captures before and after the case")


@dataclass(frozen=True)
class GpuFault:
    """One fault seen on ``gpu`` (UUID, else index) of ``node``: ``what`` for the summary (``Xid 79: GPU has
    fallen off the bus``, ``uncorrected ECC errors 0 -> 3``, ``GPU lost``), ``line`` the evidence line."""

    node: str
    gpu: str
    what: str
    line: str = ""

    def summary(self) -> str:
        return f"GPU fault on {self.node} GPU {self.gpu} during the case ({self.what}): not a verdict on the SUT"


def _rose(before: int | None, after: int | None) -> bool:
    return before is not None and after is not None and after > before


def _new_xids(before: HealthCapture, after: HealthCapture) -> list[XidEvent]:
    seen = Counter(e.line for e in before.xids)
    out = []
    for e in after.xids:
        if seen[e.line] > 0:
            seen[e.line] -= 1
        else:
            out.append(e)
    return out


def node_faults(node: str, before: HealthCapture, after: HealthCapture, used: set[str] | None
                ) -> tuple[list[GpuFault], list[str]]:
    """The faults on ``node`` between two captures on the GPUs named in ``used`` (UUIDs or indices; None: every
    GPU of the node), and the application Xids seen on them (recorded, not faults). Without NVML's rows before
    the case (no bus id to match), every new Xid of the node counts, named by its bus id."""
    gpus = [g for g in before.gpus if used is None or g.uuid in used or str(g.index) in used]
    if used is not None and not gpus:  # the key names no GPU of the capture: take the node's GPUs
        gpus = list(before.gpus)
    faults: list[GpuFault] = []
    application: list[str] = []
    new = _new_xids(before, after) if before.kernel_log and after.kernel_log else []
    if not before.gpus:
        for e in new:
            if severity(e.xid) == "application":
                application.append(f"{node} GPU at PCI {e.bus}: {describe(e.xid)} ({e.line[:160]})")
            else:
                faults.append(GpuFault(node, f"at PCI {e.bus}", describe(e.xid), e.line))
    for g in gpus:
        name = g.uuid or f"index {g.index}"
        for e in (e for e in new if e.bus == g.bus):
            if severity(e.xid) == "application":
                application.append(f"{node} GPU {name}: {describe(e.xid)} ({e.line[:160]})")
            else:
                faults.append(GpuFault(node, name, describe(e.xid), e.line))
        now = after.gpu(g.uuid) if g.uuid else None
        if after.nvml_observable and (now is None or g.bus in after.lost):
            faults.append(GpuFault(node, name, "GPU lost: no longer visible to nvidia-smi"))
            continue
        if now is not None:
            faults += _counter_faults(node, name, g, now)
    return faults, application


def _counter_faults(node: str, name: str, was: GpuHealth, now: GpuHealth) -> list[GpuFault]:
    out = []
    for label, a, b in (("volatile", was.ecc_volatile_uncorrected, now.ecc_volatile_uncorrected),
                        ("aggregate", was.ecc_aggregate_uncorrected, now.ecc_aggregate_uncorrected)):
        if _rose(a, b):
            out.append(GpuFault(node, name, f"uncorrected ECC errors ({label}) {a} -> {b}"))
            break
    if _rose(was.retired_pages_dbe, now.retired_pages_dbe):
        out.append(GpuFault(node, name, f"pages retired for double-bit errors {was.retired_pages_dbe} -> "
                                        f"{now.retired_pages_dbe}"))
    if now.remap_failure and not was.remap_failure:
        out.append(GpuFault(node, name, "row remapping failure"))
    return out


def _used_gpus(ev: Evidence) -> dict[str, set[str] | None]:
    """Node -> the GPUs (UUIDs, indices) its pods used; None where a pod's GPU is unknown (all of the node's)."""
    used: dict[str, set[str] | None] = {}
    for pod in ev.pods:
        if not pod.node:
            continue
        a = ev.assignment(ev.key(pod))
        names = {n for n in (pod.gpu, a.gpu if a else None, a.nvml_gpu if a else None,
                             a.key_gpu if a else None, a.recorded if a else None) if n}
        if a is not None and a.nvml is not None:
            names |= set(a.nvml.uuids)
        if pod.node in used and used[pod.node] is None:
            continue
        if not names:
            used[pod.node] = None
        else:
            used[pod.node] = (used.get(pod.node) or set()) | names
    return used


def gpu_fault_check(ev: Evidence) -> Check | None:
    """``gpu_health``: faults on the GPUs the case used (see the module). None when no pod ran on a node or no
    capture of those nodes exists (a backend that does not capture)."""
    used = _used_gpus(ev)
    texts = {node: (ev.text(health_files.file_name(node, "before")), ev.text(health_files.file_name(node, "after")))
             for node in sorted(used)}
    if not used or all(b is None and a is None for b, a in texts.values()):
        return None
    faults: list[GpuFault] = []
    application: list[str] = []
    throttled: dict[str, list[str]] = {}
    unobservable: dict[str, str] = {}
    healthy: list[str] = []
    for node, (before_text, after_text) in texts.items():
        if before_text is None or after_text is None:
            unobservable[node] = f"no health capture {'before' if before_text is None else 'after'} the case"
            continue
        before, after = parse_capture(before_text), parse_capture(after_text)
        found, app = node_faults(node, before, after, used[node])
        faults += found
        application += app
        throttled.update({f"{node} GPU {g.label}": g.flagged_throttle for g in after.gpus if g.flagged_throttle
                          and (used[node] is None or g.uuid in (used[node] or ()))})
        blind = [f"kernel log not observable ({c.kernel_log_error})" for c in (before, after) if not c.kernel_log]
        blind += [f"NVML not observable ({c.smi_error})" for c in (before, after) if not c.nvml_observable]
        if blind:
            unobservable[node] = "; ".join(dict.fromkeys(blind))
        elif not found:
            healthy.append(node)
    values = {"faults": [f"{f.node} GPU {f.gpu}: {f.what}" + (f" ({f.line[:160]})" if f.line else "")
                         for f in faults],
              "application_xids": application, "throttled_after": throttled, "not_observable": unobservable,
              "healthy": healthy}
    if faults:
        return Check("gpu_health", EXPRESSION, values, None, faults[0].summary())
    if unobservable:
        return Check("gpu_health", EXPRESSION, values, None,
                     "GPU health not observable: " + "; ".join(f"{n}: {w}" for n, w in sorted(unobservable.items())))
    return Check("gpu_health", EXPRESSION, values, True, "")


def with_gpu_fault_check(verdict: Verdict, ev: Evidence, *, expects_gpu_faults: bool = False) -> Verdict:
    """``verdict`` with :func:`gpu_fault_check` added. A fault turns PASS or FAIL into ERROR (the fault's summary,
    then ``(was <status>: <summary>)``), unless ``expects_gpu_faults`` (a case about faults: its verdict
    stands). Not observable, SKIP and ERROR verdicts are left as they are. The captures join the evidence.
    Returns the same object, updated."""
    check = gpu_fault_check(ev)
    if check is None:
        return verdict
    verdict.checks.append(check)
    verdict.evidence = sorted(set(verdict.evidence) | {
        health_files.file_name(p.node, tag) for p in ev.pods if p.node for tag in health_files.TAGS
        if ev.text(health_files.file_name(p.node, tag)) is not None})
    if check.values["faults"] and not expects_gpu_faults and verdict.status in (Status.PASS, Status.FAIL):
        verdict.status, verdict.summary = Status.ERROR, f"{check.detail} (was {verdict.status}: {verdict.summary})"
    return verdict
