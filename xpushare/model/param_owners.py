"""Parameters owned by a feature outside the case matrix, declared by their owner: ``envcheck_*`` (``invoke
envcheck``, :mod:`xpushare.envcheck.params`), ``deploy_*`` (``invoke deploy`` and the legacy tasks' setup,
:mod:`xpushare.deploy.k8s_pipeline`), ``legacy_*`` (the legacy scenarios, :mod:`xpushare.legacy.scenarios`).

The owners live in layers above the parameter schema (:mod:`xpushare.cases.param_schema`), which checks their
parameters at the edge (``--set``, the inventory's ``params``, a playbook's ``params``) with the same rules as every
other parameter; so each owner declares its table here, where both can see it, when its module is imported (the
command line imports every owner before it reads any input). A prefix whose owner was not imported has no table:
its names are left to the owner, as before (a library caller that never imports ``xpushare.envcheck``).

Source: docs/config.md "Parameters: the rules every value keeps".
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["OWNED_PREFIXES", "OwnedParams", "declare", "owner_of"]

#: The name prefixes of the owned parameters.
OWNED_PREFIXES = ("envcheck_", "deploy_", "legacy_")

#: An owner's own rule beyond the schema's: ``(name, value) -> why it is refused`` or None.
Check = Callable[[str, Any], "str | None"]


@dataclass(frozen=True)
class OwnedParams:
    """The table of one owner: ``prefix`` (one of :data:`OWNED_PREFIXES`), each parameter's ``defaults`` (name ->
    every value whose kind it may take; ``None`` among them: ``null`` keeps the owner's "choose for me"), and
    ``check``, the owner's own rules (ranges the schema cannot know from a name)."""

    prefix: str
    defaults: Mapping[str, tuple[Any, ...]]
    check: Check | None = None


_lock = threading.Lock()
_owners: dict[str, OwnedParams] = {}


def declare(prefix: str, defaults: Mapping[str, Sequence[Any]], check: Check | None = None) -> None:
    """Declare the parameters of the owner of ``prefix`` (names in ``defaults`` all start with it); a second
    declaration of a prefix replaces the first. Raises ``ValueError`` for a prefix that is not owned or a name
    outside it (a bug of the owner)."""
    if prefix not in OWNED_PREFIXES:
        raise ValueError(f"{prefix!r} is not an owned parameter prefix ({', '.join(OWNED_PREFIXES)})")
    stray = sorted(name for name in defaults if not name.startswith(prefix))
    if stray:
        raise ValueError(f"parameters outside {prefix}*: {', '.join(stray)}")
    table = OwnedParams(prefix, {name: tuple(values) for name, values in defaults.items()}, check)
    with _lock:
        _owners[prefix] = table


def owner_of(name: str) -> OwnedParams | None:
    """The declared table of the owner of ``name``'s prefix; None when ``name`` has no owned prefix or its owner
    was not imported."""
    prefix = next((p for p in OWNED_PREFIXES if name.startswith(p)), None)
    if prefix is None:
        return None
    with _lock:
        return _owners.get(prefix)
