"""The fault accounting of a harvest, both modes: each piece of evidence is read on its own, and a piece that
could not be read is noted in the case's ``harvest-errors.txt`` (:func:`note`). A piece lost to a fault (a
lost connection, a timeout, an unreachable host, an API server error) is also added to the harvest's
``faults`` (:func:`fault`); a piece that is simply absent (a Kubernetes object NotFound, a file or spawned
command that does not exist on the host) is not a fault. At its end the harvest calls :func:`complete`, which
raises :class:`~xpushare.model.errors.HarvestIncomplete` when a fault lost something, so the case is ERROR
(:mod:`xpushare.engine.lifecycle`).
"""

from __future__ import annotations

from pathlib import Path

from xpushare.model.atomic_file import open_append
from xpushare.model.errors import HarvestIncomplete, RemoteNotFound, XpushareError
from xpushare.transport.kube_errors import KubeNotFound

__all__ = ["HARVEST_ERRORS", "complete", "fault", "is_absent", "note"]

HARVEST_ERRORS = "harvest-errors.txt"


def note(case_dir: Path, message: str) -> None:
    """Append one line to the case's ``harvest-errors.txt``."""
    with open_append(case_dir / HARVEST_ERRORS) as fh:
        fh.write(message + "\n")


def is_absent(exc: XpushareError) -> bool:
    """Whether ``exc`` says the thing read does not exist (rather than that reading it failed)."""
    return isinstance(exc, (KubeNotFound, RemoteNotFound))


def fault(case_dir: Path, what: str, exc: XpushareError, faults: list[str]) -> None:
    """Note a piece of evidence that could not be read; unless it was simply absent (:func:`is_absent`), also
    append ``"<what>: <error>"`` to ``faults``."""
    note(case_dir, f"{what}: {exc}")
    if not is_absent(exc):
        faults.append(f"{what}: {exc}")


def complete(files: list[str], faults: list[str]) -> list[str]:
    """``files`` when no fault lost a piece; else raise :class:`HarvestIncomplete` with them and the faults."""
    if faults:
        raise HarvestIncomplete(files, faults)
    return files
