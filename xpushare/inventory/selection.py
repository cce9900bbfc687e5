"""Host selection for ad-hoc tasks: ``--role`` and ``--limit`` over a cluster's hosts."""

from __future__ import annotations

from fnmatch import fnmatchcase

from xpushare.inventory.schema import ROLES, ClusterSpec, HostSpec
from xpushare.model.errors import UsageError


def select_hosts(cluster: ClusterSpec, *, role: str = "all", limit: str | None = None) -> list[HostSpec]:
    """Hosts of ``cluster`` with ``role`` (master, gpu, all) that match ``limit``.

    ``limit`` is a comma-separated list of glob patterns on host names (``c1-gpu*``); a pattern starting
    with ``!`` excludes (``c1-gpu*,!c1-gpu3``). Raises :class:`UsageError` for a bad role or when nothing
    is selected.
    """
    if role not in (*ROLES, "all"):
        raise UsageError(f"bad --role {role!r} (choose from: {', '.join((*ROLES, 'all'))})")
    hosts = cluster.by_role(role)
    if limit:
        patterns = [p.strip() for p in limit.split(",") if p.strip()]
        include = [p for p in patterns if not p.startswith("!")]
        exclude = [p[1:] for p in patterns if p.startswith("!")]
        hosts = [
            h
            for h in hosts
            if (not include or any(fnmatchcase(h.name, p) for p in include))
            and not any(fnmatchcase(h.name, p) for p in exclude)
        ]
    if not hosts:
        raise UsageError(f"no host of cluster {cluster.name!r} matches --role {role} --limit {limit or '*'}")
    return hosts
