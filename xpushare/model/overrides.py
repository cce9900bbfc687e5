"""``--set name=value`` overrides of parameters (case parameters for the suites, ``envcheck_*`` for envcheck): one
parser for every task that takes them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml

from xpushare.model.errors import UsageError

__all__ = ["parse_overrides"]


def parse_overrides(items: Sequence[str]) -> dict[str, Any]:
    """``--set name=value`` items as a dict (name stripped); values are YAML (``0.08``, ``true``, ``[kernel]``,
    ``{a: b}``).

    Raises:
        UsageError: an item without ``=`` or an empty name, or a value that is not YAML.
    """
    out: dict[str, Any] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"bad --set {item!r}: expected name=value")
        try:
            out[name.strip()] = yaml.safe_load(raw)
        except yaml.YAMLError:
            raise UsageError(f"bad --set value for {name.strip()!r}: {raw!r}") from None
    return out
