"""Defaults of the common flags from the user's configuration: Invoke's config files and ``$XPUSHARE_CLUSTER``.

The ``xpushare`` section of Invoke's configuration (Invoke merges, lowest first: ``/etc/invoke.yaml``,
``~/.invoke.yaml``, the project's ``invoke.yaml`` next to ``tasks.py``, ``$INVOKE_RUNTIME_CONFIG`` or ``-f FILE``;
the installed ``xpushare`` command reads ``xpushare.yaml`` files at the same places, see
:mod:`xpushare.cli.program`)::

    xpushare:
      cluster: c1                   # --cluster
      inventory: ~/inv/prod.yaml    # --inventory
      forks: 16                     # --forks of run, ping, envcheck
      timeout: 120                  # --timeout of run (seconds per command)

Precedence, highest first: the flag, the environment (``$XPUSHARE_CLUSTER``, ``$XPUSHARE_INVENTORY``), the
config, the built-in default. :func:`resolve_common` is the one resolution of the flags every task shares
(``--cluster``, ``--inventory``, ``--root``, ``--run-id``): :class:`~xpushare.cli.taskdef.XTask` applies it to
every task call before the task body runs, so a body reads the resolved values and only checks that a cluster
it needs is there (:func:`need_cluster`). A section that is not a mapping, an unknown key or a value of the
wrong type is a :class:`~xpushare.model.errors.UsageError` (one line, exit status 2) naming the key.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

from invoke import Context

from xpushare.inventory.schema import INVENTORY_ENV
from xpushare.model.errors import UsageError

__all__ = ["CLUSTER_ENV", "CLUSTER_REQUIRED", "COMMON_FLAGS", "DEFAULT_ROOT", "SECTION", "cluster",
           "configured_cluster", "forks", "inventory", "need_cluster", "resolve_common", "settings", "timeout"]

SECTION = "xpushare"
CLUSTER_ENV = "XPUSHARE_CLUSTER"
CLUSTER_REQUIRED = f"--cluster is required (or set ${CLUSTER_ENV}, or '{SECTION}.cluster' in the config)"
#: The directory that holds ``.tmplog/`` when ``--root`` is not given.
DEFAULT_ROOT = "."
#: The common flags, by the name of the task parameter that takes each (``--inventory`` is ``inventory_``).
COMMON_FLAGS = ("cluster", "inventory_", "root", "run_id")
#: Each key of the section and what its value must be.
KEYS: dict[str, str] = {
    "cluster": "a cluster name (c1)",
    "inventory": "a path",
    "forks": "a whole number >= 1",
    "timeout": "a number of seconds > 0",
}


def _valid(key: str, value: Any) -> bool:
    if key in ("cluster", "inventory"):
        return isinstance(value, str) and bool(value.strip())
    if key == "forks":
        return isinstance(value, int) and not isinstance(value, bool) and value >= 1
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def settings(c: Context | None) -> dict[str, Any]:
    """The validated ``xpushare`` section of the task's Invoke config (``{}`` when there is none).

    Raises:
        UsageError: the section is not a mapping, a key is unknown or a value has the wrong type.
    """
    if not isinstance(c, Context):  # a task body called from Python without one
        return {}
    section = c.config.get(SECTION, None)
    if section is None:
        return {}
    if not isinstance(section, Mapping):
        raise UsageError(f"config: '{SECTION}' must be a mapping of {', '.join(KEYS)}, not {section!r}")
    out = dict(section)
    for key, value in out.items():
        if key not in KEYS:
            raise UsageError(f"config: {SECTION}.{key}: unknown key (known: {', '.join(KEYS)})")
        if not _valid(key, value):
            raise UsageError(f"config: {SECTION}.{key} must be {KEYS[key]}, not {value!r}")
    return out


def configured_cluster(c: Context | None) -> str | None:
    """``$XPUSHARE_CLUSTER``, else the config's ``cluster``; None when neither gives one.

    Raises:
        UsageError: the config is bad.
    """
    chosen = os.environ.get(CLUSTER_ENV) or settings(c).get("cluster")
    return str(chosen) if chosen and str(chosen).strip() else None


def cluster(c: Context | None, flag: str | None) -> str:
    """``--cluster``, else ``$XPUSHARE_CLUSTER``, else the config's ``cluster``.

    Raises:
        UsageError: none of them gives a cluster, or the config is bad.
    """
    return need_cluster(flag or configured_cluster(c))


def need_cluster(resolved: str | None) -> str:
    """The cluster a task body needs, as :func:`resolve_common` left it in the task's ``cluster`` parameter.

    Raises:
        UsageError: no cluster was given by the flag, the environment or the config (:data:`CLUSTER_REQUIRED`).
    """
    if not resolved or not str(resolved).strip():
        raise UsageError(CLUSTER_REQUIRED)
    return str(resolved)


def resolve_common(c: Context | None, given: dict[str, Any], *, cluster_default: bool = True) -> None:
    """Resolve the common flags of one task call in place: ``given`` is the call's keyword arguments.

    - ``cluster``: when not given (and no ``url`` is given: ``metrics-check --url`` takes no cluster), the
      configured one (:func:`configured_cluster`: ``$XPUSHARE_CLUSTER``, else the config); left None when neither
      names one (the body raises :data:`CLUSTER_REQUIRED` through :func:`need_cluster` if it needs one).
      ``cluster_default=False`` keeps it None: a task whose ``--cluster`` is a filter (``hosts``,
      ``baseline-compare``: every cluster without it).
    - ``inventory_``: :func:`inventory` (``$XPUSHARE_INVENTORY`` is read by the inventory loader itself).
    - ``root``: :data:`DEFAULT_ROOT` when not given or blank.
    - ``run_id``: as given (each task checks it, ``last`` included where the task takes it); not given, the
      task's own default (a new id, or every run). A blank ``--run-id`` stays blank, so it is refused as an
      invalid run id and never read as "not given".

    A parameter the task does not take is left out. Raises :class:`UsageError` on a bad config.
    """
    if cluster_default and "cluster" in given and not given["cluster"] and not given.get("url"):
        given["cluster"] = configured_cluster(c)
    if "inventory_" in given and not given["inventory_"]:
        given["inventory_"] = inventory(c, None)
    if "root" in given and (given["root"] is None or not str(given["root"]).strip()):
        given["root"] = DEFAULT_ROOT


def inventory(c: Context | None, flag: str | None) -> str | None:
    """``--inventory``; else None when ``$XPUSHARE_INVENTORY`` is set (the inventory loader reads it); else the
    config's ``inventory`` (``~`` expanded); else None (the built-in ``inventory/inventory.yaml``)."""
    if flag:
        return flag
    from_config = settings(c).get("inventory")
    if os.environ.get(INVENTORY_ENV) or not from_config:
        return None
    return os.path.expanduser(str(from_config))


def forks(c: Context | None, flag: str | None) -> str | None:
    """``--forks`` as given, else the config's ``forks`` (as text, for :func:`xpushare.cli.flags.count`)."""
    value = settings(c).get("forks")
    return flag if flag is not None else (None if value is None else str(value))


def timeout(c: Context | None, flag: str | None) -> str | None:
    """``--timeout`` as given, else the config's ``timeout`` (as text, for :func:`xpushare.cli.flags.seconds`)."""
    value = settings(c).get("timeout")
    return flag if flag is not None else (None if value is None else str(value))
