"""The soak checkpoint: what a resumed soak needs to continue the same run and time series.

``<case_dir>/soak/checkpoint.json`` is rewritten atomically (temp file, fsync, rename) at every round
boundary, every ``checkpoint_s`` and on exit, so it always describes a consistent state: an interrupted
soak (Ctrl-C, a killed orchestrator, a rebooted laptop) resumes from its last checkpoint with
``invoke soak --run-id X --resume``. Samples written after the checkpoint are kept (the series files are
append-only); at most the round in progress is repeated.

Time: ``active_s`` counts the seconds the soak actually ran (across segments); the soak ends when it
reaches the target duration, so an interruption does not shorten it. The time series keeps real unix
times, and the downtime between segments is recorded as a gap.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from xpushare.report.run_store import atomic_write_text

__all__ = ["CHECKPOINT_VERSION", "Checkpoint"]

CHECKPOINT_VERSION = 1


@dataclass
class Checkpoint:
    """State of a soak between segments.

    ``case_id``/``run_id``/``cluster``: identity (a resume must match); ``target_s``: duration to soak
    (active seconds, None when bounded by rounds only); ``max_rounds``: round limit (None: by time);
    ``active_s``: seconds soaked so far; ``rounds``: rounds completed; ``samples``: sampling ticks so far;
    ``quota_index``: position in the quota cycle (STAB-003/004); ``segments``: one entry per run of the
    orchestrator (``started``/``ended`` unix times, ``reason``); ``baseline_done``: the idle baseline was
    taken; ``finished``: the rounds are over (final phase done when ``final_done``); ``interim_reports``:
    interim reports written; ``anomalies``/``gaps``: counts so far; ``last_sample_ts``: unix time of the
    last successful sample; ``failed_logs``: failed-pod logs kept so far (bounded).
    """

    case_id: str
    run_id: str
    cluster: str
    target_s: float | None
    max_rounds: int | None
    version: int = CHECKPOINT_VERSION
    active_s: float = 0.0
    rounds: int = 0
    samples: int = 0
    quota_index: int = 0
    segments: list[dict[str, Any]] = field(default_factory=list)
    baseline_done: bool = False
    finished: bool = False
    final_done: bool = False
    interim_reports: int = 0
    anomalies: int = 0
    gaps: int = 0
    last_sample_ts: float | None = None
    failed_logs: int = 0

    @classmethod
    def path(cls, soak_dir: Path) -> Path:
        return Path(soak_dir) / "checkpoint.json"

    @classmethod
    def load(cls, soak_dir: Path) -> Checkpoint | None:
        """The stored checkpoint, or None when there is none.

        Raises:
            ValueError: the file is not a checkpoint of a known version.
        """
        path = cls.path(soak_dir)
        if not path.exists():
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("version") != CHECKPOINT_VERSION:
            raise ValueError(f"{path}: not a version {CHECKPOINT_VERSION} soak checkpoint")
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def save(self, soak_dir: Path) -> Path:
        return atomic_write_text(self.path(soak_dir), json.dumps(asdict(self), indent=1) + "\n")

    def remaining_s(self) -> float | None:
        """Active seconds left (None when the soak is bounded by rounds only)."""
        return None if self.target_s is None else max(0.0, self.target_s - self.active_s)
