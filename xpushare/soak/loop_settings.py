"""How a soak runs (:class:`SoakSettings`).

Callers import :class:`SoakSettings` from :mod:`xpushare.soak.loop` (re-exported there with the loop).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SoakSettings"]


@dataclass
class SoakSettings:
    """How a soak runs. Times in seconds, sizes in bytes.

    ``duration_s``: active seconds to soak (None: only ``max_rounds``); ``max_rounds``: round limit (None:
    only the duration); ``quota_key``/``quota_cycle``: annotate the running pods with the next value of the
    cycle every ``quota_interval_s`` (``core``/``memory``; None: no changes); ``stop_grace_s``: how long a
    round may still run after the duration is reached before it is cut; ``settle_s``: how long the final
    phase waits for GPU memory and client series to return; ``gpu_tolerance_bytes``: per-GPU margin of
    that return; ``rss_alarm_bytes``: growth that raises a live anomaly; ``rotate_bytes``: rotation size of
    the series files; ``max_failed_logs``: failed-pod logs kept over the whole soak; ``keep_logs_suffix``:
    pods whose name ends with it (STAB-004's memory probe, one per round) have their log kept in
    ``probe-pods/<pod>.log`` whatever their phase, each line with the kubelet's timestamp in Kubernetes mode (None:
    only failed pods' logs are kept).
    """

    duration_s: float | None = None
    max_rounds: int | None = None
    sample_interval_s: float = 30.0
    poll_s: float = 5.0
    round_timeout_s: float = 3600.0
    stop_grace_s: float = 600.0
    delete_timeout_s: float = 120.0
    progress_s: float = 60.0
    interim_s: float = 3600.0
    checkpoint_s: float = 60.0
    log_rotate_s: float = 3600.0
    quota_interval_s: float | None = None
    quota_key: str | None = None
    quota_cycle: tuple[str, ...] = ()
    settle_s: float = 120.0
    gpu_tolerance_bytes: float = float(1 << 30)
    rss_alarm_bytes: float = float(128 << 20)
    backoff_initial_s: float = 2.0
    backoff_max_s: float = 60.0
    max_consecutive_errors: int = 10
    max_failed_logs: int = 50
    keep_logs_suffix: str | None = None
    rotate_bytes: int = 64 << 20

    def __post_init__(self) -> None:
        if self.duration_s is None and self.max_rounds is None:
            raise ValueError("a soak needs a duration, a round limit, or both")
        if self.sample_interval_s <= 0 or self.poll_s <= 0:
            raise ValueError("sample_interval_s and poll_s must be positive")

