"""YAML read the strict way for files a user writes (inventories, playbooks): a key given twice in one mapping is an
error (PyYAML keeps the last one silently: a second host entry would change an address without a word), and a file
larger than a bound is refused before it is read whole."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from xpushare.model import bounded_read

#: The biggest YAML file read (bytes): far beyond any inventory or playbook, small enough never to exhaust memory.
MAX_BYTES = 4 * 1024 * 1024


class DuplicateKey(yaml.constructor.ConstructorError):
    """A mapping names one key twice (``problem`` names it; ``problem_mark`` is where)."""


class _StrictLoader(yaml.SafeLoader):
    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:  # an unhashable key: the base constructor says so
                break
            if duplicate:
                raise DuplicateKey(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load(text: str) -> Any:
    """``yaml.safe_load`` of ``text``, raising :class:`DuplicateKey` (a ``yaml.YAMLError``) for a key given twice."""
    return yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass


def read_text(path: Path, *, limit: int = MAX_BYTES) -> str:
    """The UTF-8 text of ``path``, read at most ``limit`` bytes (``/dev/zero`` included):
    :func:`xpushare.model.bounded_read.read_text`."""
    return bounded_read.read_text(path, limit=limit)


def describe_error(exc: yaml.YAMLError) -> str:
    """One line for a YAML parse error: PyYAML's problem and, when it knows it, where (1-based), e.g.
    ``found character '\\t' that cannot start any token (line 3, column 1)``; the first line of the error
    otherwise. Never raises."""
    mark = getattr(exc, "problem_mark", None)  # only MarkedYAMLError has one; PyYAML documents no other way
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    problem = getattr(exc, "problem", None) or (str(exc).splitlines() or ["invalid YAML"])[0]
    return f"{problem}{where}"
