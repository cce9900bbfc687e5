"""ClusterShell node sets with a bound: a range such as ``x[1-1000000000]`` is refused before it is expanded
(ClusterShell would assert, or take minutes and all memory, on it)."""

from __future__ import annotations

import re

from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet, NodeSetException

#: The most host names one node set may expand to (an inventory entry, a ``--limit`` operand).
MAX_NODES = 10_000

_GROUP = re.compile(r"\[([^\]]*)\]")
_RANGE = re.compile(r"\s*(\d+)\s*[-:]\s*(\d+)\s*(?:/\s*(\d+)\s*)?")


def _top_level_parts(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def size_bound(text: str) -> int:
    """An upper bound of how many names the node set ``text`` expands to, computed without expanding it."""
    total = 0
    for part in _top_level_parts(text):
        size = 1
        for group in _GROUP.findall(part):
            count = 0
            for item in group.split(","):
                m = _RANGE.fullmatch(item)
                count += int(m.group(2)) - int(m.group(1)) + 1 if m else 1
            size *= max(1, count)
            if size > MAX_NODES:
                return size
        total += size
    return total


def expand(text: str) -> list[str]:
    """The names of the node set ``text`` (``n[1-3,5]``, ``rack[1-2]-gpu[1-2]``), in ClusterShell's order.

    Raises:
        ValueError: a pattern ClusterShell cannot parse, or one of more than :data:`MAX_NODES` names.
    """
    bound = size_bound(text)
    if bound > MAX_NODES:
        raise ValueError(f"more than {MAX_NODES} hosts in one range")
    try:
        return list(NodeSet(text, resolver=RESOLVER_NOGROUP))
    except (NodeSetException, AssertionError, ValueError, RecursionError) as exc:
        raise ValueError(str(exc) or type(exc).__name__) from None
