"""A node's GPU health capture: the ``nvidia-smi`` health query and the kernel log's Xid lines, read together.

The capture file (written by :mod:`xpushare.evidence.gpu_health`, ``gpu_health/<node>-<tag>.txt``) is::

    # xpushare gpu health
    ## nvidia-smi exit=0
    0, GPU-..., 00000000:01:00.0, 0, 0, 0, 0, 0, No, No, No, 0x0000000000000001
    ## kernel-log source=dmesg lines=812
    2026-11-27T05:53:09,123456+00:00 NVRM: Xid (PCI:0000:01:00): 79, pid=1234, name=python3, GPU has fallen ...

The first section is ``nvidia-smi --query-gpu=<HEALTH_FIELDS> --format=csv,noheader,nounits`` (its exit
status in the header; ``Unable to determine the device handle for GPU<bus id>: GPU is lost`` lines name lost
GPUs, exit 15). The second is the kernel log's ``NVRM: Xid`` lines (:mod:`xpushare.parsers.xid` parses them)
with the source that was readable (``dmesg --time-format=iso``, else ``journalctl -k -b -o short-iso``) and its
line count; ``source=none`` when neither could be read (then the lines are the readers' error messages): the
kernel log is **not observable**, which never counts as healthy.

Values: ECC counts are error counts since the driver loaded (volatile) or over the GPU's life (aggregate);
``throttle_reasons`` is NVML's clocks event reason bit mask (``clocks_throttle_reasons.active``). ``[N/A]``
(a field the GPU does not support) is None. Sources: NVIDIA's ``nvidia-smi --help-query-gpu``, NVML
``nvmlClocksEventReason*`` constants; docs/faults.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from xpushare.parsers.nvidia_smi import GpuQuery, parse_query_gpu
from xpushare.parsers.xid import XidEvent, bus_key, parse_log

__all__ = ["FINE_THROTTLE", "FLAGGED_THROTTLE", "HEALTH_FIELDS", "GpuHealth", "HealthCapture", "parse_capture",
           "throttle_names"]

#: The ``--query-gpu`` fields of the health query, in order.
HEALTH_FIELDS: tuple[str, ...] = (
    "index",
    "uuid",
    "pci.bus_id",
    "ecc.errors.corrected.volatile.total",
    "ecc.errors.uncorrected.volatile.total",
    "ecc.errors.corrected.aggregate.total",
    "ecc.errors.uncorrected.aggregate.total",
    "retired_pages.double_bit.count",
    "retired_pages.pending",
    "remapped_rows.pending",
    "remapped_rows.failure",
    "clocks_throttle_reasons.active",
)

#: Clock throttle (event) reasons that say the GPU is slowed by a fault or its environment (NVML bit -> name).
FLAGGED_THROTTLE: dict[int, str] = {
    0x8: "hw_slowdown",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
}
#: Reasons that are part of normal operation (idle, clocks set by the application or the display, the software
#: power cap under load, sync boost).
FINE_THROTTLE: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x10: "sync_boost",
    0x100: "display_clock_setting",
}

_SECTION_RE = re.compile(r"^## (?P<name>nvidia-smi|kernel-log)(?P<attrs>(?: \S+=\S*)*)\s*$")
_LOST_RE = re.compile(r"Unable to determine the device handle for GPU ?(?P<bus>[0-9A-Fa-f:.]+): .*GPU is lost")


def throttle_names(mask: int) -> list[str]:
    """Names of the reasons set in an NVML clocks event reason mask (unknown bits as ``0x...``)."""
    names = []
    table = {**FLAGGED_THROTTLE, **FINE_THROTTLE}
    for bit in range(64):
        if mask & (1 << bit):
            names.append(table.get(1 << bit, f"0x{1 << bit:x}"))
    return names


def _yes(value: str | None) -> bool | None:
    if value is None:
        return None
    v = value.strip().lower()
    if v in ("yes", "1", "true", "enabled"):
        return True
    if v in ("no", "0", "false", "disabled"):
        return False
    return None


@dataclass(frozen=True)
class GpuHealth:
    """One GPU's row of the health query (counts are error or page counts; None: ``[N/A]`` or absent)."""

    index: int | None
    uuid: str | None
    bus: str | None
    """:func:`xpushare.parsers.xid.bus_key` of ``pci.bus_id`` (``0000:01:00``)."""
    ecc_volatile_corrected: int | None
    ecc_volatile_uncorrected: int | None
    ecc_aggregate_corrected: int | None
    ecc_aggregate_uncorrected: int | None
    retired_pages_dbe: int | None
    retired_pages_pending: bool | None
    remap_pending: bool | None
    remap_failure: bool | None
    throttle_reasons: int | None

    @classmethod
    def from_row(cls, row: GpuQuery) -> GpuHealth:
        bus_id = row.text("pci.bus_id")
        mask = row.text("clocks_throttle_reasons.active", "clocks_event_reasons.active")
        try:
            reasons = int(mask, 16) if mask is not None else None
        except ValueError:
            reasons = None
        return cls(row.index, row.uuid, bus_key(bus_id) if bus_id else None,
                   row.integer("ecc.errors.corrected.volatile.total"),
                   row.integer("ecc.errors.uncorrected.volatile.total"),
                   row.integer("ecc.errors.corrected.aggregate.total"),
                   row.integer("ecc.errors.uncorrected.aggregate.total"),
                   row.integer("retired_pages.double_bit.count", "retired_pages.dbe"),
                   _yes(row.text("retired_pages.pending")), _yes(row.text("remapped_rows.pending")),
                   _yes(row.text("remapped_rows.failure")), reasons)

    @property
    def flagged_throttle(self) -> list[str]:
        """The set throttle reasons of :data:`FLAGGED_THROTTLE` (HW slowdown, thermal, power brake)."""
        mask = self.throttle_reasons or 0
        return [name for bit, name in FLAGGED_THROTTLE.items() if mask & bit]

    @property
    def label(self) -> str:
        """``GPU-... (0000:01:00)``: the UUID, else the index, with the bus id when known."""
        name = self.uuid or (f"index {self.index}" if self.index is not None else "?")
        return f"{name} ({self.bus})" if self.bus else name


@dataclass
class HealthCapture:
    """One node's health capture (:func:`parse_capture`).

    ``smi_exit``: nvidia-smi's exit status (None: no such section); ``gpus``: the rows it gave;
    ``lost``: bus keys of the GPUs it called lost; ``smi_output``: its non-row lines (errors);
    ``kernel_log``: the kernel log's source (``dmesg``, ``journalctl``; None: not observable);
    ``kernel_log_lines``: how many lines it had; ``xids``: its Xid reports; ``kernel_log_error``: why it was
    not observable (the readers' messages).
    """

    smi_exit: int | None = None
    gpus: list[GpuHealth] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    smi_output: list[str] = field(default_factory=list)
    kernel_log: str | None = None
    kernel_log_lines: int = 0
    xids: list[XidEvent] = field(default_factory=list)
    kernel_log_error: str = ""

    @property
    def nvml_observable(self) -> bool:
        """nvidia-smi answered the health query (exit 0, or 15 with the lost GPUs named) with rows or losses."""
        return self.smi_exit in (0, 15) and bool(self.gpus or self.lost)

    @property
    def smi_error(self) -> str:
        """Why the health query gave nothing (its exit status and first lines); empty when it answered."""
        if self.nvml_observable:
            return ""
        head = "; ".join(self.smi_output[:2]) or "no output"
        return f"nvidia-smi exit {self.smi_exit}: {head}" if self.smi_exit is not None else "no nvidia-smi section"

    def gpu(self, ident: str) -> GpuHealth | None:
        """The row whose UUID, index or bus key is ``ident`` (None: no such GPU in this capture)."""
        key = bus_key(ident)
        for g in self.gpus:
            if ident in (g.uuid, str(g.index)) or (key is not None and key == g.bus):
                return g
        return None


def _attrs(text: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in text.split())


def parse_capture(text: str) -> HealthCapture:
    """Parse a health capture file (format above). Never raises: missing sections leave their defaults."""
    out = HealthCapture()
    section = ""
    smi_lines: list[str] = []
    log_lines: list[str] = []
    for line in text.splitlines():
        m = _SECTION_RE.match(line)
        if m is not None:
            section = m.group("name")
            attrs = _attrs(m.group("attrs"))
            if section == "nvidia-smi":
                exit_text = attrs.get("exit", "")
                out.smi_exit = int(exit_text) if exit_text.lstrip("-").isdigit() else None
            else:
                source = attrs.get("source", "none")
                out.kernel_log = None if source in ("", "none") else source
                count = attrs.get("lines", "0")
                out.kernel_log_lines = int(count) if count.isdigit() else 0
            continue
        if section == "nvidia-smi":
            smi_lines.append(line)
        elif section == "kernel-log":
            log_lines.append(line)
    for line in smi_lines:
        lost = _LOST_RE.search(line)
        if lost is not None:
            key = bus_key(lost.group("bus"))
            if key is not None:
                out.lost.append(key)
    rows = parse_query_gpu("\n".join(ln for ln in smi_lines if not _LOST_RE.search(ln)), HEALTH_FIELDS)
    out.gpus = [GpuHealth.from_row(r) for r in rows if r.uuid or r.index is not None]
    row_lines = {ln.strip() for ln in smi_lines if ln.count(",") == len(HEALTH_FIELDS) - 1}
    out.smi_output = [ln.strip() for ln in smi_lines if ln.strip() and ln.strip() not in row_lines]
    if out.kernel_log is None:
        out.kernel_log_error = "; ".join(ln.strip() for ln in log_lines if ln.strip())[:300] or "no kernel log read"
    else:
        out.xids = parse_log("\n".join(log_lines))
    return out
