"""A host a run found unreachable, as run.json's ``unreachable`` entries, the run report and the soak report list it
(docs/reliability.md §partial clusters)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from xpushare.model.errors import HostUnreachable

__all__ = ["Unreached"]


@dataclass(frozen=True)
class Unreached:
    """A host that did not answer: its name, its role in the cluster (``gpu``, ``master``), why (one of
    :data:`~xpushare.model.errors.UNREACHABLE_WHY`) and the connection error's message. As run.json's
    ``unreachable`` entries and the run report list them."""

    host: str
    role: str
    why: str
    detail: str

    @classmethod
    def of(cls, error: HostUnreachable, role: str) -> Unreached:
        detail = error.message.removeprefix(f"UNREACHABLE ({error.why}): ")  # a stand-in's error says it already
        return cls(error.host, role, error.why, detail)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Unreached:
        """The entry run.json stored (missing fields read as empty)."""
        return cls(str(doc.get("host", "")), str(doc.get("role", "")), str(doc.get("why", "")),
                   str(doc.get("detail", "")))

    def line(self) -> str:
        """``<host> (<role>): UNREACHABLE (<why>): <detail>``"""
        return f"{self.host} ({self.role}): UNREACHABLE ({self.why}): {self.detail}"

    def to_json(self) -> dict[str, str]:
        return {"host": self.host, "role": self.role, "why": self.why, "detail": self.detail}
