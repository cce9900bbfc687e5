"""Transport: one :class:`Host` interface over SSH (Fabric) and over this machine (invoke).

(Interface first; implementation follows in this module.)
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CommandResult:
    """Outcome of one command: text output (decoded UTF-8 with replacement), exit code, seconds taken."""

    host: str
    argv: tuple[str, ...]
    stdout: str
    stderr: str
    exit_code: int
    duration_s: float

    @property
    def ok(self) -> bool:
        return self.exit_code == 0
