"""envcheck's node health step: recent Xids, ECC, row remapping, clock throttling, lost GPUs (docs/envcheck.md).

Input: one GPU health capture of the node (:mod:`xpushare.evidence.gpu_health`'s command, parsed by
:func:`xpushare.parsers.gpu_health.parse_capture`). Checks, each naming what it found:

* ``kernel_log``: the kernel log could be read (``dmesg``, else ``journalctl -k``); not observable is ERROR
  (a node whose Xids cannot be seen is not known to be healthy);
* ``xid``: no ``warning`` or ``critical`` Xid (catalogue ``xpushare/data/xid.yaml``) within the last
  ``xid_window_h`` hours (default 2); application Xids (13, 31, 43, 45, 68, 109) are listed, not flagged;
* ``ecc``: volatile uncorrected ECC errors <= ``ecc_uncorrected_max`` (default 0) on every GPU;
* ``remap``: no row remapping failure, no remapping or page retirement pending (a reset is due);
* ``throttle``: no HW slowdown, thermal slowdown or power brake among the clock throttle reasons (idle,
  application clocks and the software power cap are normal);
* ``gpus_visible``: nvidia-smi lost no GPU ("GPU is lost").

A node without ``nvidia-smi`` misses a prerequisite: ERROR "missing prerequisite: nvidia-smi not found on the node"
(the CPU smoke test, which asks for no GPU, leaves the NVML checks out instead); an ``nvidia-smi`` that fails is
ERROR. Thresholds are recorded in the verdict.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta

from xpushare.model.verdict import Check, Verdict, combine
from xpushare.parsers.gpu_health import HealthCapture, parse_capture, throttle_names
from xpushare.parsers.xid import describe, severity

__all__ = ["judge_health"]


def _xid_check(cap: HealthCapture, now: datetime, window_h: float) -> Check:
    since = now - timedelta(hours=window_h)
    recent = [e for e in cap.xids if e.time is None or e.time >= since]
    flagged = [e for e in recent if severity(e.xid) != "application"]
    values = {"window_h": window_h, "since": since.isoformat(),
              "flagged": [f"{describe(e.xid)} on {e.bus} at {e.time.isoformat() if e.time else '?'}"
                          for e in flagged],
              "application": [f"{describe(e.xid)} on {e.bus}" for e in recent if e not in flagged],
              "older": len(cap.xids) - len(recent)}
    detail = ""
    if flagged:
        e = flagged[-1]
        detail = (f"{len(flagged)} Xid(s) in the last {window_h:g} h, latest {describe(e.xid)} ({severity(e.xid)}) "
                  f"on GPU {e.bus} at {e.time.isoformat() if e.time else 'an unknown time'}")
    return Check("xid", f"no warning/critical Xid within {window_h:g} h", values, not flagged, detail)


def _nvml_checks(cap: HealthCapture, ecc_max: int, require_nvidia_smi: bool) -> list[Check]:
    if cap.smi_exit == 127:  # no nvidia-smi on the node
        return [Check("nvidia_smi", "nvidia-smi is on the node (a GPU node's prerequisite)", {}, None,
                      "missing prerequisite: nvidia-smi not found on the node")] if require_nvidia_smi else []
    if not cap.nvml_observable:
        return [Check("nvml_health", "nvidia-smi answered the health query", {"output": cap.smi_output[:5]}, None,
                      f"GPU health not observable: {cap.smi_error}")]
    ecc = {g.label: g.ecc_volatile_uncorrected for g in cap.gpus}
    ecc_bad = {k: v for k, v in ecc.items() if v is not None and v > ecc_max}
    remap = {g.label: [what for what, on in (("remap failure", g.remap_failure), ("remap pending", g.remap_pending),
                                             ("page retirement pending", g.retired_pages_pending)) if on]
             for g in cap.gpus}
    remap_bad = {k: v for k, v in remap.items() if v}
    throttle = {g.label: throttle_names(g.throttle_reasons or 0) for g in cap.gpus}
    throttle_bad = {g.label: g.flagged_throttle for g in cap.gpus if g.flagged_throttle}

    def named(bad: Mapping[str, object]) -> str:
        return "; ".join(f"GPU {k}: {v}" for k, v in sorted(bad.items()))

    return [
        Check("ecc", f"volatile uncorrected ECC errors <= {ecc_max} per GPU", {"uncorrected_volatile": ecc,
              "ecc_uncorrected_max": ecc_max}, not ecc_bad, f"uncorrected ECC errors: {named(ecc_bad)}" if ecc_bad
              else ""),
        Check("remap", "no row remapping failure, no remapping or retirement pending", {"gpus": remap},
              not remap_bad, f"row remapping: {named(remap_bad)}" if remap_bad else ""),
        Check("throttle", "no HW slowdown, thermal slowdown or power brake", {"reasons": throttle},
              not throttle_bad, f"clocks throttled: {named(throttle_bad)}" if throttle_bad else ""),
        Check("gpus_visible", "nvidia-smi lost no GPU", {"lost": cap.lost, "visible": [g.label for g in cap.gpus]},
              not cap.lost, f"GPU lost (fallen off the bus): {', '.join(cap.lost)}" if cap.lost else ""),
    ]


def judge_health(text: str | None, *, now: datetime, window_h: float = 2.0, ecc_uncorrected_max: int = 0,
                 error: str | None = None, require_nvidia_smi: bool = True) -> Verdict:
    """The ``health`` step's verdict from the node's capture ``text`` (None: not captured, ``error`` says why).
    ``now``: timezone-aware (the Xid window ends there); ``window_h`` in hours; ``require_nvidia_smi``: a node
    without ``nvidia-smi`` is ERROR (False: the CPU smoke test, its NVML checks left out)."""
    thresholds = {"xid_window_h": window_h, "ecc_uncorrected_max": ecc_uncorrected_max}
    if text is None:
        return Verdict(*combine([Check("health", "GPU health captured", {}, None, error or "not captured")],
                                pass_summary=""), thresholds=thresholds)
    cap = parse_capture(text)
    checks: list[Check] = []
    if cap.kernel_log is None:
        checks.append(Check("kernel_log", "the kernel log is readable (dmesg or journalctl -k)", {}, None,
                            f"kernel log not observable: {cap.kernel_log_error}"))
    else:
        checks.append(Check("kernel_log", "the kernel log is readable (dmesg or journalctl -k)",
                            {"source": cap.kernel_log, "lines": cap.kernel_log_lines}, True))
        checks.append(_xid_check(cap, now, window_h))
    checks += _nvml_checks(cap, ecc_uncorrected_max, require_nvidia_smi)
    status, summary = combine(checks, pass_summary=f"no Xid within {window_h:g} h, ECC, remapping and clocks fine"
                              if len(checks) > 2 else f"no Xid within {window_h:g} h (no nvidia-smi on the node)")
    return Verdict(status, summary, checks, thresholds=thresholds)
