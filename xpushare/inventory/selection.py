"""Host selection for ad-hoc tasks: ``--role`` and ``--limit`` over a cluster's hosts, in ClusterShell's syntax.

A ``--limit`` is a ClusterShell node set (https://clustershell.readthedocs.io, "Node sets"): ranges
(``n[1-3,5]``, ``rack[1-2]-gpu[1-2]``), ``,`` union, ``&`` intersection, ``!`` difference, ``^`` symmetric
difference, evaluated left to right, and ``@FILE``: the host names or patterns in a file, one a line (``#``
comments). Two extensions keep the older form working: an operand with ``*`` or ``?`` is a glob over the
cluster's host names (``c1-gpu*``), and a limit starting with ``!`` starts from every host
(``!c1-gpu3``; ``c1-gpu*,!c1-gpu3`` is the same as ``c1-gpu*!c1-gpu3``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from fnmatch import fnmatchcase
from pathlib import Path

from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet

from xpushare.inventory import nodesets
from xpushare.inventory.schema import ROLES, ClusterSpec, HostSpec
from xpushare.model import bounded_read
from xpushare.model.errors import UsageError

#: The biggest ``@FILE`` host file read (bytes).
MAX_HOST_FILE_BYTES = 1024 * 1024

# The operators of a node set outside brackets; inside them a ',' separates ranges.
_TOKEN = re.compile(r"[,&!^]|[^,&!^\[]+(?:\[[^\]]*\][^,&!^\[]*)*(?:\[[^\]]*$)?")


def fold(names: Iterable[str]) -> str:
    """Host names folded into one node set (``c1-gpu1, c1-gpu2, c1-master`` -> ``c1-gpu[1-2],c1-master``),
    the syntax ``--limit`` reads back. Sorted as ClusterShell sorts; empty for no names."""
    return str(NodeSet.fromlist(list(names), resolver=RESOLVER_NOGROUP))


def expand(pattern: str, names: Sequence[str]) -> set[str]:
    """The names of ``names`` (all hosts) that ``pattern`` selects, plus any names it gives that are not there.

    Raises :class:`UsageError` (one line, naming the pattern) for a pattern ClusterShell cannot parse, an
    unreadable ``@FILE``, or an operator without an operand.
    """
    return _evaluate(pattern, names, depth=0)


def _evaluate(pattern: str, names: Sequence[str], *, depth: int) -> set[str]:
    text = pattern.strip()
    if not text:
        raise UsageError("--limit: empty host pattern")
    raw = _TOKEN.findall(text)
    if "".join(raw) != text:
        raise UsageError(f"--limit {pattern!r}: bad host pattern")
    tokens = [t.strip() for t in raw if t.strip()]
    if tokens[0] == "!":
        tokens.insert(0, "\0all")  # '!x' alone: every host but x
    chosen: set[str] = set()
    op = ","
    expect_operand = True
    for i, token in enumerate(tokens):
        if token in ",&!^":
            if expect_operand and not (token == "!" and i > 0 and tokens[i - 1] == ","):
                raise UsageError(f"--limit {pattern!r}: operator {token!r} without a host before it")
            op = token
            expect_operand = True
            continue
        operand = set(names) if token == "\0all" else _operand(token, pattern, names, depth)
        if op == ",":
            chosen |= operand
        elif op == "&":
            chosen &= operand
        elif op == "!":
            chosen -= operand
        else:
            chosen ^= operand
        expect_operand = False
    if expect_operand:
        raise UsageError(f"--limit {pattern!r}: ends with an operator")
    return chosen


def _operand(token: str, pattern: str, names: Sequence[str], depth: int) -> set[str]:
    if token.startswith("@"):
        return _from_file(token[1:], names, depth)
    if "*" in token or "?" in token:
        return {n for n in names if fnmatchcase(n, token)}
    try:
        return set(nodesets.expand(token))
    except ValueError as exc:
        raise UsageError(f"--limit {pattern!r}: bad host pattern {token!r} ({exc})") from None


def _from_file(path: str, names: Sequence[str], depth: int) -> set[str]:
    if depth > 0:
        raise UsageError(f"--limit @{path}: a host file cannot name another host file")
    try:
        lines = bounded_read.read_text(Path(path).expanduser(), limit=MAX_HOST_FILE_BYTES).splitlines()
    except OSError as exc:
        raise UsageError(f"--limit @{path}: cannot read the host file ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise UsageError(f"--limit @{path}: the host file is not UTF-8 text") from None
    except ValueError as exc:
        raise UsageError(f"--limit @{path}: the host file is {exc}") from None
    chosen: set[str] = set()
    for number, line in enumerate(lines, start=1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            chosen |= _evaluate(line, names, depth=depth + 1)
        except UsageError:  # the line itself is not repeated: a host file may be something else by mistake
            raise UsageError(f"--limit @{path}: line {number} is not a host pattern") from None
    return chosen


def select_hosts(cluster: ClusterSpec, *, role: str = "all", limit: str | None = None) -> list[HostSpec]:
    """Hosts of ``cluster`` with ``role`` (master, gpu, all) that ``limit`` (a node set, see the module) selects,
    in the inventory's order.

    Raises :class:`UsageError` for a bad role, a bad pattern, a name in ``limit`` that is no host of the
    cluster (a typo never shrinks the selection silently), or when nothing is selected.
    """
    if role not in (*ROLES, "all"):
        raise UsageError(f"bad --role {role!r} (choose from: {', '.join((*ROLES, 'all'))})")
    hosts = cluster.by_role(role)
    if limit:
        every = [h.name for h in cluster.hosts]
        chosen = expand(limit, every)
        unknown = chosen - set(every)
        if unknown and "@" in limit:  # names read from a file are not repeated (it may hold anything)
            raise UsageError(f"--limit {limit!r}: {len(unknown)} name(s) of the host file are no host of cluster "
                             f"{cluster.name!r} (hosts: {fold(every)})")
        if unknown:
            raise UsageError(f"--limit {limit!r}: no such host in cluster {cluster.name!r}: {fold(unknown)} "
                             f"(hosts: {fold(every)})")
        hosts = [h for h in hosts if h.name in chosen]
    if not hosts:
        raise UsageError(f"no host of cluster {cluster.name!r} matches --role {role} --limit {limit or '*'}")
    return hosts
