"""``--output table|json|yaml``: one way every task prints records for people (a table) or programs.

A task builds its records (a list of mappings with JSON values, or one mapping) and calls :func:`render`;
``json`` and ``yaml`` print exactly the records and nothing else, so ``invoke cases --output json | python -m
json.tool`` works. :func:`output_format` checks the flag's value (a bad one is a one-line usage error, exit 2).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import yaml
from tabulate import tabulate

from xpushare.model.errors import UsageError

__all__ = ["FORMATS", "OUTPUT_HELP", "output_format", "render", "table"]

FORMATS = ("table", "json", "yaml")
OUTPUT_HELP = "table (default) | json | yaml: json and yaml print only the records, for programs"


def output_format(value: str | None, flag: str = "--output") -> str:
    """The format named by ``value`` (None: ``table``), lower-cased.

    Raises:
        UsageError: ``value`` is not one of :data:`FORMATS`.
    """
    chosen = (value or "table").strip().lower()
    if chosen not in FORMATS:
        raise UsageError(f"{flag} takes one of {', '.join(FORMATS)}, not {value!r}")
    return chosen


def table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> str:
    """``rows`` (a task's output records: plain mappings, not case records) as a plain-text table, one line each;
    ``columns`` picks and orders the keys (default: the first row's). A list value is shown comma-joined, None as
    empty."""
    keys = list(columns) if columns is not None else list(rows[0]) if rows else []
    cells = [[_cell(r.get(k)) for k in keys] for r in rows]
    return tabulate(cells, headers=keys)


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return value


def render(data: Sequence[Mapping[str, Any]] | Mapping[str, Any], fmt: str, *, text: str | None = None,
           columns: Sequence[str] | None = None) -> str:
    """``data`` in format ``fmt`` (one of :data:`FORMATS`): JSON (2-space indent) or YAML (block style, keys in
    their order); for ``table``, ``text`` when given (a task's own human layout), else :func:`table` of ``data``
    (a list of records). Raises ``ValueError`` for an unknown ``fmt``."""
    if fmt == "json":
        return json.dumps(data, indent=2, default=str)
    if fmt == "yaml":
        return yaml.safe_dump(plain(data), sort_keys=False, default_flow_style=False, allow_unicode=True).rstrip()
    if fmt == "table":
        if text is not None:
            return text
        if isinstance(data, Mapping):
            raise ValueError("a table needs a list of records or the task's own text")
        return table(data, columns)
    raise ValueError(f"unknown output format {fmt!r}")


def plain(value: Any) -> Any:
    """``value`` with only JSON- and YAML-safe types: mapping keys as strings, tuples as lists, anything else
    not plain as its ``str``."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)
