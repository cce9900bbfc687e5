"""NVIDIA Xid reports in a node's kernel log, and the Xid catalogue that says what each one means.

The driver writes one kernel log line per Xid::

    2026-11-27T05:53:09,123456+00:00 NVRM: Xid (PCI:0000:01:00): 79, pid=1234, name=python3, GPU has fallen off the bus.

as printed by ``dmesg --time-format=iso`` (comma before the microseconds) or ``journalctl -k -o short-iso``
(``2026-11-27T05:53:09+0000 <host> kernel: NVRM: Xid ...``). Older drivers omit ``pid=``/``name=``, or print
``pid='<unknown>'``. The bus id is the GPU's PCI address (domain, bus, device; nvidia-smi's ``pci.bus_id``
``00000000:01:00.0`` names the same GPU): :func:`bus_key` makes both comparable.

The catalogue is ``xpushare/data/xid.yaml`` (source: NVIDIA's "XID Errors" document, r555+ catalogue; see
docs/faults.md "The Xid table"): per Xid its name, meaning, severity class (``application``, ``warning``,
``critical``) and whether NVIDIA's k8s-device-plugin skips it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import lru_cache
from importlib import resources

import yaml

__all__ = ["SEVERITIES", "XidEntry", "XidEvent", "bus_key", "catalogue", "catalogue_source", "describe", "entry",
           "parse_line", "parse_log", "severity"]

#: Severity classes of the catalogue, mildest first; an Xid missing from the catalogue counts as ``critical``.
SEVERITIES = ("application", "warning", "critical")

_XID_RE = re.compile(r"NVRM: Xid \(PCI:(?P<bus>[0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)\): "
                     r"(?P<xid>\d+)(?:, (?P<rest>.*))?$")
_PID_RE = re.compile(r"^pid=(?P<pid>'?[^,']*'?), name=(?P<name>[^,]*), ?")
_BUS_RE = re.compile(r"^(?:(?P<domain>[0-9A-Fa-f]{1,8}):)?(?P<bus>[0-9A-Fa-f]{2}):(?P<dev>[0-9A-Fa-f]{2})(?:\.[0-7])?$")
_STAMP_RE = re.compile(r"^(?P<date>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:[,.](?P<frac>\d{1,9}))?"
                       r"(?P<tz>Z|[+-]\d{2}:?\d{2})?")


@dataclass(frozen=True)
class XidEntry:
    """One Xid of the catalogue: number, NVIDIA's name, what it means, severity class, action, and whether the
    k8s-device-plugin skips it (does not mark the GPU unhealthy)."""

    xid: int
    name: str
    meaning: str
    severity: str
    device_plugin_skips: bool
    action: str


@dataclass(frozen=True)
class XidEvent:
    """One Xid report of the kernel log.

    ``time``: the line's timestamp, timezone-aware (None: the line had none the parser knows);
    ``bus``: the GPU's :func:`bus_key` (``0000:01:00``); ``pid``/``process``: the process the driver names
    (None: not given or ``<unknown>``); ``text``: the rest of the line (the driver's description);
    ``line``: the whole line as read (stripped).
    """

    time: datetime | None
    bus: str
    xid: int
    pid: int | None
    process: str | None
    text: str
    line: str


def bus_key(bus_id: str) -> str | None:
    """A PCI bus id in one comparable form, ``dddd:bb:dd`` lower-case (domain to 4 digits, no function):
    ``00000000:01:00.0`` (nvidia-smi), ``0000:01:00`` (Xid line) and ``01:00.0`` all give ``0000:01:00``.
    None for anything else."""
    m = _BUS_RE.match(bus_id.strip())
    if m is None:
        return None
    domain = int(m.group("domain") or "0", 16)
    return f"{domain:04x}:{m.group('bus').lower()}:{m.group('dev').lower()}"


def _stamp(line: str) -> datetime | None:
    m = _STAMP_RE.match(line)
    if m is None:
        return None
    frac = (m.group("frac") or "0")[:6].ljust(6, "0")
    tz = m.group("tz") or "+00:00"
    if tz == "Z":
        tz = "+00:00"
    elif ":" not in tz:
        tz = f"{tz[:3]}:{tz[3:]}"
    try:
        when = datetime.fromisoformat(f"{m.group('date')}.{frac}{tz}")
    except ValueError:
        return None
    return when.astimezone(timezone.utc)


def parse_line(line: str) -> XidEvent | None:
    """The :class:`XidEvent` of one kernel log line, or None when the line is no Xid report. Never raises."""
    text = line.strip()
    m = _XID_RE.search(text)
    if m is None:
        return None
    bus = bus_key(m.group("bus"))
    if bus is None:
        return None
    rest = (m.group("rest") or "").strip()
    pid: int | None = None
    process: str | None = None
    who = _PID_RE.match(rest)
    if who is not None:
        raw_pid = who.group("pid").strip("'")
        pid = int(raw_pid) if raw_pid.isdigit() else None
        name = who.group("name").strip()
        process = None if name in ("", "<unknown>") else name
        rest = rest[who.end():].strip()
    return XidEvent(_stamp(text), bus, int(m.group("xid")), pid, process, rest, text)


def parse_log(text: str) -> list[XidEvent]:
    """Every Xid report of a kernel log (``dmesg --time-format=iso`` or ``journalctl -k -o short-iso``
    output, or just its ``NVRM: Xid`` lines), in log order. Other lines are skipped. Never raises."""
    return [e for e in map(parse_line, text.splitlines()) if e is not None]


@lru_cache(maxsize=1)
def _load() -> tuple[str, dict[int, XidEntry]]:
    doc = yaml.safe_load(resources.files("xpushare.data").joinpath("xid.yaml").read_text(encoding="utf-8"))
    table = {}
    for item in doc["xids"]:
        e = XidEntry(int(item["xid"]), str(item["name"]), str(item["meaning"]), str(item["severity"]),
                     bool(item["device_plugin_skips"]), str(item["action"]))
        if e.severity not in SEVERITIES:
            raise ValueError(f"xid.yaml: Xid {e.xid}: unknown severity {e.severity!r}")
        table[e.xid] = e
    return str(doc["source"]), table


def catalogue() -> dict[int, XidEntry]:
    """The Xid catalogue (``xpushare/data/xid.yaml``), by Xid number; a copy."""
    return dict(_load()[1])


def catalogue_source() -> str:
    """Where the catalogue's meanings come from (NVIDIA's document, its release)."""
    return _load()[0]


def entry(xid: int) -> XidEntry | None:
    """The catalogue's entry of ``xid`` (None: not in the catalogue)."""
    return _load()[1].get(xid)


def severity(xid: int) -> str:
    """The severity class of ``xid``: the catalogue's, ``critical`` for an Xid it does not know (an unknown
    report from the driver is not taken as harmless)."""
    e = entry(xid)
    return e.severity if e is not None else "critical"


def describe(xid: int) -> str:
    """``Xid 79: GPU has fallen off the bus``; ``Xid 999: not in the catalogue`` for an unknown one."""
    e = entry(xid)
    return f"Xid {xid}: {e.name if e is not None else 'not in the catalogue'}"
