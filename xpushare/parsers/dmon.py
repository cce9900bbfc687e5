"""``nvidia-smi dmon`` output of any column layout.

Columns are located from the ``# gpu ...`` header line, never by a fixed index: under ``-s u`` the
``sm`` column is column 1, in the default layout (``gpu pwr gtemp mtemp sm ...``) it is column 4; the
legacy ``analyze_dmon.py`` hard-coded index 4 and so measured the decoder under ``-s u``
(docs/sut/workloads.md §dmon, docs/sut/README.md §pitfalls item 12). Rows are keyed by GPU index, ``-`` (and ``N/A``)
is ``None``,
and dmon's periodic header repeats are handled (a repeated header may also change the layout, e.g. a
concatenation of two captures). ``-o D``/``-o T`` date/time columns are handled like any other column.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DmonData", "DmonRow", "command", "parse", "sm_series"]

MAX_MALFORMED = 100
"""Cap of the malformed lines kept in :attr:`DmonData.malformed` (the count is exact)."""

_MISSING = {"-", "N/A", "[N/A]", "n/a"}


def _number(text: str) -> float | None:
    if text in _MISSING:
        return None
    try:
        v = float(text)
    except ValueError:
        return None
    return v if v == v else None  # NaN -> None


@dataclass(frozen=True)
class DmonRow:
    """One data row: ``gpu`` is the GPU index as printed (``"0"``), ``columns`` the header that was in
    force for this row (lower-cased names, e.g. ``("gpu", "sm", "mem", ...)``), ``raw`` the fields,
    ``lineno`` the 1-based line number. Units follow the unit header (``%``, ``W``, ``C``, ``MHz``).
    """

    gpu: str
    columns: tuple[str, ...]
    raw: tuple[str, ...]
    lineno: int

    def text(self, column: str) -> str | None:
        """Raw field of ``column`` (case-insensitive), or ``None`` if this layout has no such column."""
        try:
            return self.raw[self.columns.index(column.lower())]
        except ValueError:
            return None

    def value(self, column: str) -> float | None:
        """Numeric value of ``column``; ``None`` for ``-``/``N/A``, non-numbers, or a missing column."""
        t = self.text(column)
        return None if t is None else _number(t)


@dataclass(frozen=True)
class DmonData:
    """Parsed dmon output.

    ``rows``: data rows in order; ``columns``/``units``: the last header and unit lines seen
    (lower-cased names / units as printed); ``headers``: number of header lines (dmon reprints
    them); ``malformed_count`` and ``malformed`` (first :data:`MAX_MALFORMED`): non-comment lines
    that could not be mapped (no header yet, wrong field count, e.g. a line cut off when dmon was
    killed). Source: docs/sut/workloads.md §dmon.
    """

    rows: tuple[DmonRow, ...]
    columns: tuple[str, ...]
    units: tuple[str, ...]
    headers: int
    malformed_count: int
    malformed: tuple[str, ...]

    def gpus(self) -> list[str]:
        """GPU indices in first-seen order (as strings)."""
        return list(dict.fromkeys(r.gpu for r in self.rows))

    def rows_for(self, gpu: int | str = 0) -> list[DmonRow]:
        """Rows of GPU ``gpu`` (index as int or str), in order."""
        key = str(gpu)
        return [r for r in self.rows if r.gpu == key]

    def series(self, column: str, gpu: int | str = 0) -> list[float | None]:
        """Values of ``column`` for GPU ``gpu``, one per sample (``None`` where missing).

        Empty if the GPU has no rows. With ``-d 1`` there is one sample per second.
        """
        return [r.value(column) for r in self.rows_for(gpu)]

    def has_column(self, column: str) -> bool:
        """True if any header seen had ``column`` (case-insensitive)."""
        c = column.lower()
        return any(c in r.columns for r in self.rows) or c in self.columns


def _header_tokens(line: str) -> list[str]:
    return line.lstrip("#").split()


def parse(text: str) -> DmonData:
    """Parse ``nvidia-smi dmon`` output of any layout into :class:`DmonData`. Never raises.

    A ``#`` line containing the token ``gpu`` (case-insensitive) is a header and defines the
    columns of the rows after it; the ``#`` line after it (``# Idx % % ...``) gives units; other
    ``#`` lines are ignored. A data row must have exactly as many fields as its header.
    Source: docs/sut/workloads.md §dmon (producer ``nvidia-smi dmon -s u -d 1 -c 300``), docs/sut/README.md §pitfalls
    item 12.
    """
    columns: tuple[str, ...] = ()
    units: tuple[str, ...] = ()
    gpu_col = -1
    headers = 0
    rows: list[DmonRow] = []
    malformed: list[str] = []
    malformed_count = 0
    expect_units = False
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            toks = _header_tokens(line)
            lowered = [t.lower() for t in toks]
            if "gpu" in lowered:
                seen: dict[str, int] = {}
                names = []
                for t in lowered:  # disambiguate duplicate names: "x", "x#2", ...
                    seen[t] = seen.get(t, 0) + 1
                    names.append(t if seen[t] == 1 else f"{t}#{seen[t]}")
                columns = tuple(names)
                gpu_col = columns.index("gpu")
                headers += 1
                expect_units = True
            elif expect_units:
                units = tuple(toks)
                expect_units = False
            continue
        expect_units = False
        fields = tuple(line.split())
        if gpu_col < 0 or len(fields) != len(columns):
            malformed_count += 1
            if len(malformed) < MAX_MALFORMED:
                malformed.append(raw)
            continue
        rows.append(DmonRow(gpu=fields[gpu_col], columns=columns, raw=fields, lineno=lineno))
    return DmonData(
        rows=tuple(rows),
        columns=columns,
        units=units,
        headers=headers,
        malformed_count=malformed_count,
        malformed=tuple(malformed),
    )


def sm_series(parsed: DmonData, gpu: int | str = 0) -> list[float | None]:
    """SM utilisation in percent (0-100) of GPU ``gpu``, one value per sample, ``None`` for ``-``.

    Uses the ``sm`` column wherever the header puts it. Empty if the GPU has no rows or the layout
    has no ``sm`` column (e.g. ``-s p``). Source: docs/sut/workloads.md §dmon, docs/sut/README.md §pitfalls item 12.
    """
    return parsed.series("sm", gpu)


def command(
    count: int = 300,
    interval_s: int = 1,
    *,
    groups: str | None = "u",
    gpus: list[int] | None = None,
    options: str | None = None,
) -> list[str]:
    """argv of ``nvidia-smi dmon`` (docs/sut/workloads.md §dmon: ``nvidia-smi dmon -s u -d 1 -c 300``).

    ``count``: samples per GPU (``-c``); ``interval_s``: seconds between samples (``-d``, >= 1);
    ``groups``: metric groups (``-s``; ``u`` = utilisation; ``None`` = dmon's default layout);
    ``gpus``: indices for ``-i``; ``options``: ``-o`` flags (``D`` date, ``T`` time). Raises
    ``ValueError`` for a count or interval below 1.
    """
    if count < 1 or interval_s < 1:
        raise ValueError("count and interval_s must be >= 1")
    argv = ["nvidia-smi", "dmon"]
    if groups:
        argv += ["-s", groups]
    argv += ["-d", str(interval_s), "-c", str(count)]
    if gpus:
        argv += ["-i", ",".join(str(g) for g in gpus)]
    if options:
        argv += ["-o", options]
    return argv
