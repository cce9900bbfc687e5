"""``nvidia-smi -L`` and ``nvidia-smi --query-gpu`` / ``--query-compute-apps`` CSV output.

CSV is read with or without the header line and with or without units (``--format=csv``,
``csv,noheader``, ``csv,noheader,nounits``). Memory values are returned in **bytes** (nvidia-smi
prints MiB: value x 2**20); percentages in percent; ``[N/A]``, ``[Not Supported]``,
``[Insufficient Permissions]`` and similar are ``None``.

Note that the CSV header names can differ from the requested field names (``used_memory`` is
printed as ``used_gpu_memory [MiB]``, ``gpu_name`` as ``name``); the typed accessors accept both.

Interfaces: docs/sut/workloads.md §dmon (``nvidia_smi_L.txt``: ``GPU <i>: <name> (UUID: GPU-...)``, used to
map UUID -> index), docs/sut/README.md §pitfalls item 4; seed 000 §10.2 (LEAK-003 GPU memory back to baseline).
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass

__all__ = [
    "DEFAULT_APP_FIELDS",
    "DEFAULT_GPU_FIELDS",
    "ComputeApp",
    "CsvRow",
    "GpuEntry",
    "GpuQuery",
    "MigEntry",
    "compute_apps_command",
    "list_command",
    "parse_compute_apps",
    "parse_csv",
    "parse_list",
    "parse_query_gpu",
    "query_gpu_command",
    "uuid_to_index",
]

MIB = 2**20
"""Bytes per MiB (nvidia-smi's memory unit)."""

DEFAULT_GPU_FIELDS: tuple[str, ...] = (
    "index",
    "uuid",
    "name",
    "memory.total",
    "memory.used",
    "utilization.gpu",
    "driver_version",
)
"""Fields of ``query_gpu_command()`` by default (as in the captured samples)."""

DEFAULT_APP_FIELDS: tuple[str, ...] = ("pid", "process_name", "used_memory", "gpu_uuid")
"""Fields of ``compute_apps_command()`` by default (as in the captured samples)."""

_UNIT_BYTES = {"B": 1, "KIB": 2**10, "MIB": MIB, "GIB": 2**30, "KB": 1000, "MB": 10**6, "GB": 10**9}


# --------------------------------------------------------------------------------------------------
# nvidia-smi -L

_GPU_LINE_RE = re.compile(r"^GPU (?P<index>\d+): (?P<name>.*?) \(UUID: (?P<uuid>[^)\s]+)\)\s*$")
_MIG_LINE_RE = re.compile(r"^\s+MIG (?P<profile>\S+)\s+Device\s+(?P<device>\d+): \(UUID: (?P<uuid>[^)\s]+)\)\s*$")


@dataclass(frozen=True)
class MigEntry:
    """A MIG device line under a GPU in ``nvidia-smi -L`` (``MIG 1g.10gb Device 0: (UUID: MIG-...)``)."""

    device: int
    profile: str
    uuid: str


@dataclass(frozen=True)
class GpuEntry:
    """One ``GPU <index>: <name> (UUID: <uuid>)`` line of ``nvidia-smi -L``, with its MIG devices."""

    index: int
    name: str
    uuid: str
    migs: tuple[MigEntry, ...] = ()


def list_command() -> list[str]:
    """argv ``["nvidia-smi", "-L"]`` (docs/sut/workloads.md §dmon ``nvidia_smi_L.txt``)."""
    return ["nvidia-smi", "-L"]


def parse_list(text: str) -> list[GpuEntry]:
    """Parse ``nvidia-smi -L``: GPUs in printed order, MIG lines attached to the GPU above them.

    Lines that match neither form are ignored. Never raises.
    """
    out: list[GpuEntry] = []
    for line in text.splitlines():
        m = _GPU_LINE_RE.match(line.rstrip("\r"))
        if m:
            out.append(GpuEntry(int(m.group("index")), m.group("name"), m.group("uuid")))
            continue
        mm = _MIG_LINE_RE.match(line.rstrip("\r"))
        if mm and out:
            g = out[-1]
            mig = MigEntry(int(mm.group("device")), mm.group("profile"), mm.group("uuid"))
            out[-1] = GpuEntry(g.index, g.name, g.uuid, (*g.migs, mig))
    return out


def uuid_to_index(entries: list[GpuEntry]) -> dict[str, int]:
    """``uuid -> index`` map (docs/sut/workloads.md §dmon ``analyze_complex.py``: UUID -> index)."""
    return {e.uuid: e.index for e in entries}


# --------------------------------------------------------------------------------------------------
# CSV queries

_NA_RE = re.compile(r"^\[.*\]$|^N/A$", re.IGNORECASE)
_HEADER_UNIT_RE = re.compile(r"^(?P<name>.*?)\s*\[(?P<unit>[^\]]*)\]$")


@dataclass(frozen=True)
class CsvRow:
    """One CSV data row: ``fields`` are ``(name, raw value)`` pairs (names lower-case, units cut off),
    ``units`` the unit from the header per field name (``MiB``, ``%`` ...; ``None`` without header
    or unit).
    """

    fields: tuple[tuple[str, str], ...]
    units: tuple[tuple[str, str | None], ...] = ()

    def raw(self, *names: str) -> str | None:
        """Raw value of the first of ``names`` present (e.g. ``raw("used_memory", "used_gpu_memory")``)."""
        d = dict(self.fields)
        for n in names:
            if n.lower() in d:
                return d[n.lower()]
        return None

    def text(self, *names: str) -> str | None:
        """Like :meth:`raw` but ``None`` for ``[N/A]``-style placeholders."""
        v = self.raw(*names)
        return None if v is None or _NA_RE.match(v) else v

    def number(self, *names: str) -> float | None:
        """Numeric value with any unit suffix removed (``"100 %"`` -> ``100.0``); ``None`` if absent or
        not numeric."""
        v = self.text(*names)
        if v is None:
            return None
        head = v.split()[0] if v.split() else ""
        try:
            n = float(head)
        except ValueError:
            return None
        return n if math.isfinite(n) else None

    def integer(self, *names: str) -> int | None:
        """:meth:`number` truncated to an ``int`` (an index, a pid); ``None`` if absent or not numeric."""
        n = self.number(*names)
        return int(n) if n is not None else None

    def memory_bytes(self, *names: str) -> int | None:
        """A memory field in bytes: the value's unit suffix, else the header unit, else MiB (what
        nvidia-smi prints, also under ``nounits``). ``None`` if absent or not numeric."""
        v = self.text(*names)
        if v is None:
            return None
        parts = v.split()
        try:
            num = float(parts[0])
        except (ValueError, IndexError):
            return None
        if not math.isfinite(num):
            return None
        unit = parts[1] if len(parts) > 1 else None
        if unit is None:
            units = dict(self.units)
            for n in names:
                unit = units.get(n.lower())
                if unit:
                    break
        factor = _UNIT_BYTES.get((unit or "MiB").upper())
        if factor is None:
            return None
        total = num * factor
        return round(total) if math.isfinite(total) else None


@dataclass(frozen=True)
class GpuQuery(CsvRow):
    """A ``--query-gpu`` row with typed accessors (bytes, percent)."""

    @property
    def index(self) -> int | None:
        """GPU index (``index``)."""
        return self.integer("index")

    @property
    def uuid(self) -> str | None:
        """GPU UUID (``uuid``/``gpu_uuid``), e.g. ``GPU-ae708708-...``."""
        return self.text("uuid", "gpu_uuid")

    @property
    def name(self) -> str | None:
        """Product name (``name``/``gpu_name``)."""
        return self.text("name", "gpu_name")

    @property
    def memory_total_bytes(self) -> int | None:
        """``memory.total`` in bytes."""
        return self.memory_bytes("memory.total")

    @property
    def memory_used_bytes(self) -> int | None:
        """``memory.used`` in bytes."""
        return self.memory_bytes("memory.used")

    @property
    def memory_free_bytes(self) -> int | None:
        """``memory.free`` in bytes."""
        return self.memory_bytes("memory.free")

    @property
    def utilization_gpu_percent(self) -> float | None:
        """``utilization.gpu`` in percent (0-100)."""
        return self.number("utilization.gpu")

    @property
    def utilization_memory_percent(self) -> float | None:
        """``utilization.memory`` in percent (0-100)."""
        return self.number("utilization.memory")

    @property
    def driver_version(self) -> str | None:
        """``driver_version`` as printed."""
        return self.text("driver_version")


@dataclass(frozen=True)
class ComputeApp(CsvRow):
    """A ``--query-compute-apps`` row with typed accessors."""

    @property
    def pid(self) -> int | None:
        """Host PID of the process."""
        return self.integer("pid")

    @property
    def process_name(self) -> str | None:
        """Process name (``process_name``/``name``)."""
        return self.text("process_name", "name")

    @property
    def used_memory_bytes(self) -> int | None:
        """GPU memory used in bytes (``used_memory``, printed as ``used_gpu_memory [MiB]``)."""
        return self.memory_bytes("used_memory", "used_gpu_memory")

    @property
    def gpu_uuid(self) -> str | None:
        """UUID of the GPU the process runs on."""
        return self.text("gpu_uuid", "uuid")


def _split_header(cell: str) -> tuple[str, str | None]:
    cell = cell.strip()
    m = _HEADER_UNIT_RE.match(cell)
    if m:
        return m.group("name").strip().lower(), m.group("unit").strip()
    return cell.lower(), None


# Header names nvidia-smi prints for some requested fields (compared after mapping both sides).
_ALIASES = {"used_gpu_memory": "used_memory", "gpu_name": "name", "gpu_uuid": "uuid", "gpu_bus_id": "pci.bus_id"}
_UNIT_CELL_RE = re.compile(r"^\S+ \[[^\]]+\]$")


def _canon(name: str) -> str:
    return _ALIASES.get(name, name)


def parse_csv(text: str, fields: list[str] | tuple[str, ...] | None = None) -> list[CsvRow]:
    """Parse nvidia-smi ``--format=csv[,noheader][,nounits]`` output into rows. Never raises.

    With ``fields=None`` the first non-empty line must be the header. With ``fields`` given, a first
    line that names the same fields (units and header aliases such as ``used_gpu_memory`` for
    ``used_memory`` ignored), or has a ``name [unit]`` cell, is taken as the header and skipped;
    otherwise every line is data.
    Rows whose field count differs from the header are skipped; lines that are not CSV rows at all
    (``No running processes found``) are skipped too.
    """
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return []
    rows = list(csv.reader(lines, skipinitialspace=True))
    names: list[str]
    units: list[str | None]
    if fields is None:
        header = [_split_header(c) for c in rows[0]]
        names = [n for n, _ in header]
        units = [u for _, u in header]
        data = rows[1:]
    else:
        names = [f.strip().lower() for f in fields]
        units = [None] * len(names)
        first = [_split_header(c) for c in rows[0]]
        is_header = [_canon(n) for n, _ in first] == [_canon(n) for n in names] or any(
            _UNIT_CELL_RE.match(c.strip()) for c in rows[0]
        )
        if is_header:
            names = [n for n, _ in first]
            units = [u for _, u in first]
            data = rows[1:]
        else:
            data = rows
    out: list[CsvRow] = []
    for r in data:
        if len(r) != len(names):
            continue
        vals = [v.strip() for v in r]
        out.append(
            CsvRow(
                tuple(zip(names, vals, strict=True)),
                tuple((n, u) for n, u in zip(names, units, strict=True) if u),
            )
        )
    return out


def parse_query_gpu(text: str, fields: list[str] | tuple[str, ...] | None = None) -> list[GpuQuery]:
    """Parse ``nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]``; one row per GPU.

    ``fields``: the requested field list, required for ``noheader`` output (see :func:`parse_csv`).
    Typed accessors on :class:`GpuQuery` give bytes and percent. Never raises.
    """
    return [GpuQuery(r.fields, r.units) for r in parse_csv(text, fields)]


def parse_compute_apps(text: str, fields: list[str] | tuple[str, ...] | None = None) -> list[ComputeApp]:
    """Parse ``nvidia-smi --query-compute-apps=... --format=csv[,...]``; one row per process.

    An idle GPU gives a header only (or nothing): ``[]``. Never raises.
    """
    return [ComputeApp(r.fields, r.units) for r in parse_csv(text, fields)]


def _format(header: bool, units: bool) -> str:
    fmt = "csv"
    if not header:
        fmt += ",noheader"
    if not units:
        fmt += ",nounits"
    return f"--format={fmt}"


def query_gpu_command(
    fields: list[str] | tuple[str, ...] = DEFAULT_GPU_FIELDS, *, header: bool = True, units: bool = True
) -> list[str]:
    """argv ``nvidia-smi --query-gpu=<fields> --format=csv[,noheader][,nounits]``.

    Raises ``ValueError`` for an empty field list.
    """
    if not fields:
        raise ValueError("fields must be non-empty")
    return ["nvidia-smi", f"--query-gpu={','.join(fields)}", _format(header, units)]


def compute_apps_command(
    fields: list[str] | tuple[str, ...] = DEFAULT_APP_FIELDS, *, header: bool = True, units: bool = True
) -> list[str]:
    """argv ``nvidia-smi --query-compute-apps=<fields> --format=csv[,noheader][,nounits]``.

    Raises ``ValueError`` for an empty field list.
    """
    if not fields:
        raise ValueError("fields must be non-empty")
    return ["nvidia-smi", f"--query-compute-apps={','.join(fields)}", _format(header, units)]
