"""Read-only view of a case directory: the only input judgments get (never live cluster state).

Pod records come from ``pods.json``; pod outputs from ``pods/<name>.log``; everything else by file name.
An :class:`Evidence` can also be built in memory (``Evidence.from_parts``) for judgment tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from xpushare.backends.base import PodRecord, read_pod_records


@dataclass
class Evidence:
    """Evidence of one case: pod records, pod logs by pod name, other files by relative path."""

    pods: list[PodRecord]
    logs: dict[str, str]
    files: dict[str, str] = field(default_factory=dict)
    case_dir: Path | None = None

    @classmethod
    def load(cls, case_dir: Path) -> Evidence:
        """Read ``pods.json`` and ``pods/*.log`` of a case dir; other files are read on demand."""
        pods = read_pod_records(case_dir)
        logs = {}
        for rec in pods:
            path = case_dir / "pods" / f"{rec.name}.log"
            if path.exists():
                logs[rec.name] = path.read_text(encoding="utf-8", errors="replace")
        return cls(pods=pods, logs=logs, case_dir=case_dir)

    @classmethod
    def from_parts(
        cls, pods: list[PodRecord], logs: Mapping[str, str], files: Mapping[str, str] | None = None
    ) -> Evidence:
        return cls(pods=list(pods), logs=dict(logs), files=dict(files or {}))

    def text(self, name: str) -> str | None:
        """Content of a case file (relative path), or None when it was not collected."""
        if name in self.files:
            return self.files[name]
        if self.case_dir is not None and (self.case_dir / name).exists():
            return (self.case_dir / name).read_text(encoding="utf-8", errors="replace")
        return None

    def pod(self, name: str) -> PodRecord | None:
        return next((p for p in self.pods if p.name == name), None)

    def pod_files(self) -> list[str]:
        """Relative paths of the pod logs that exist (for the verdict's evidence list)."""
        return [f"pods/{n}.log" for n in sorted(self.logs)]
