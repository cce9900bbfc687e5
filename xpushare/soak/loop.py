"""The soak loop: workload rounds, periodic sampling, quota changes, gaps, checkpoints, progress.

One thread, one event loop (no sampler thread, so the SSH connections are never shared)::

    baseline (idle: scheduler pods, processes, /metrics)        -> baseline.json
    until the duration (active seconds) or the round limit is reached:
        every sample_interval_s: a tick                          -> samples.csv, metrics.csv, schedulers.csv
        every quota_interval_s (STAB-003/004): annotate the running pods        -> events.jsonl
        rounds: create the round's pods, poll until they end (or round_timeout_s), record -> rounds.jsonl,
                keep failed pods' logs (bounded), delete the pods, take an idle tick
        every progress_s: one progress line (elapsed, remaining, rounds, last sample, anomalies) + status.json
        every interim_s: an interim report                       -> interim/interim-<k>.md
        every log_rotate_s, and at once after a scheduler restart: fetch, compress and restart the case-long
            log streams -> logs/
        every checkpoint_s and at each round's end: checkpoint.json
    final: delete the pods, wait (settle_s) for GPU memory and client series to return -> final.json

Connection problems (SSH drops, kubectl timeouts or an unreachable API server) never end the soak:
the failing operation is retried with exponential backoff and jitter (up to ``backoff_max_s``), and the
period without successful operations is recorded as a gap in ``events.jsonl``. Other kubectl errors
are retried ``max_consecutive_errors`` times, then the soak stops (ERROR). Ctrl-C stops it at once with
a checkpoint; ``--resume`` continues the same files.

Memory: the loop keeps counters, the current round, the last scrape per node and one constant-size
regression per scheduler process; everything else goes to the append-only files.
"""

from __future__ import annotations

import functools
import gzip
import json
import random
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from xpushare.backends.base import PodRecord, PodSpec
from xpushare.evidence.soak_series import (
    METRICS_FIELDS,
    SAMPLE_FIELDS,
    SCHEDULER_FIELDS,
    CsvAppender,
    JsonlAppender,
    iter_csv,
)
from xpushare.judge.trend import OnlineRegression
from xpushare.model.errors import HostKeyMismatch, TransportError
from xpushare.report.artifacts import atomic_write_text
from xpushare.soak.checkpoint import Checkpoint
from xpushare.soak.ops import NodeSample, SchedPod, ScrapeFacts, SoakOps, scrape_facts
from xpushare.transport import interrupt
from xpushare.transport.kubectl import KubeError, KubeTimeout, KubeUnavailable

__all__ = ["SoakLoop", "SoakSettings", "interruptible_sleep"]

#: At most this many per-process regressions are kept live (restarts add new pids).
MAX_LIVE_SERIES = 256
#: Pids of this case's workload processes kept for the host-mode ghost check (a 24 h soak starts fewer).
MAX_OUR_PIDS = 200_000


def interruptible_sleep(seconds: float) -> None:
    """Sleep, raising ``KeyboardInterrupt`` promptly once Ctrl-C was pressed."""
    deadline = time.monotonic() + max(0.0, seconds)
    while True:
        interrupt.check()
        left = deadline - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(0.2, left))


@dataclass
class SoakSettings:
    """How a soak runs. Times in seconds, sizes in bytes.

    ``duration_s``: active seconds to soak (None: only ``max_rounds``); ``max_rounds``: round limit (None:
    only the duration); ``quota_key``/``quota_cycle``: annotate the running pods with the next value of the
    cycle every ``quota_interval_s`` (``core``/``memory``; None: no changes); ``stop_grace_s``: how long a
    round may still run after the duration is reached before it is cut; ``settle_s``: how long the final
    phase waits for GPU memory and client series to return; ``gpu_tolerance_bytes``: per-GPU margin of
    that return; ``rss_alarm_bytes``: growth that raises a live anomaly; ``rotate_bytes``: rotation size of
    the series files; ``max_failed_logs``: failed-pod logs kept over the whole soak.
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
    rotate_bytes: int = 64 << 20

    def __post_init__(self) -> None:
        if self.duration_s is None and self.max_rounds is None:
            raise ValueError("a soak needs a duration, a round limit, or both")
        if self.sample_interval_s <= 0 or self.poll_s <= 0:
            raise ValueError("sample_interval_s and poll_s must be positive")


@dataclass
class _Round:
    no: int
    started: float
    started_mono: float
    specs: list[PodSpec]
    names: list[str]
    values: dict[str, str] = field(default_factory=dict)
    first_running: dict[str, float] = field(default_factory=dict)
    last: dict[str, PodRecord] = field(default_factory=dict)


@dataclass
class _OpState:
    failures: int = 0
    backoff_until: float = 0.0
    gap_start: float | None = None
    first_error: str = ""
    last_error: str = ""


def _connection_error(exc: BaseException) -> bool:
    return isinstance(exc, (TransportError, KubeUnavailable, KubeTimeout))


def _fmt_hms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(max(0, seconds))
    return f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"


def _mib(value: float | None) -> str:
    return "-" if value is None else f"{value / 2**20:.1f}MiB"


class SoakLoop:
    """Runs one soak into ``soak_dir`` (see the module docstring).

    Args:
        ops: the cluster operations.
        soak_dir: ``<case_dir>/soak``.
        settings: the soak's settings.
        mix: round number (1-based) -> the pod specs of that round (names unique per round).
        checkpoint: a new one, or the loaded one of a resumed soak.
        ours_prefix: pod-name prefix of this case's pods (their ``client_info`` series are "ours").
        out: where progress lines go.
        clock / monotonic / sleep: injectable for tests.
    """

    def __init__(
        self,
        ops: SoakOps,
        soak_dir: Path,
        settings: SoakSettings,
        mix: Callable[[int], Sequence[PodSpec]],
        checkpoint: Checkpoint,
        *,
        ours_prefix: str,
        out: TextIO | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = interruptible_sleep,
        label: str = "soak",
    ) -> None:
        self.ops = ops
        self.dir = Path(soak_dir)
        self.s = settings
        self.mix = mix
        self.ck = checkpoint
        self.prefix = ours_prefix
        self.out = out
        self.clock = clock
        self.mono = monotonic
        self.sleep = sleep
        self.label = label
        self.dir.mkdir(parents=True, exist_ok=True)
        rb = settings.rotate_bytes
        self.samples = CsvAppender(self.dir / "samples.csv", SAMPLE_FIELDS, max_bytes=rb)
        self.metrics = CsvAppender(self.dir / "metrics.csv", METRICS_FIELDS, max_bytes=rb)
        self.scheds = CsvAppender(self.dir / "schedulers.csv", SCHEDULER_FIELDS, max_bytes=rb)
        self.rounds = JsonlAppender(self.dir / "rounds.jsonl", max_bytes=rb)
        self.events = JsonlAppender(self.dir / "events.jsonl", max_bytes=rb)
        self._appenders = (self.samples, self.metrics, self.scheds, self.rounds, self.events)
        self._ops: dict[str, _OpState] = {}
        self._regs: OrderedDict[tuple[str, int], OnlineRegression] = OrderedDict()
        self._fd_regs: OrderedDict[tuple[str, int], OnlineRegression] = OrderedDict()
        self._alarmed: set[tuple[str, int]] = set()
        self._last_scrape: dict[str, str] = {}
        self._last_facts: dict[str, ScrapeFacts] = {}
        self._last_procs: dict[str, tuple[Any, ...]] = {}
        self._last_scheds: list[SchedPod] = []
        self._restart_seen: set[tuple[str, str, int]] = set()
        self._rotate_now: str | None = None  # why the log streams must be restarted before their time
        self._rotate_since: float | None = None  # and from when (unix time)
        self._scrape_bad: set[str] = set()
        self._baseline: dict[str, Any] = {}
        self._active0 = checkpoint.active_s
        self._mono0 = monotonic()
        self._wall0 = clock()
        self._round: _Round | None = None
        self._need_delete = True
        self._time_up_at: float | None = None
        self._pods_ok = 0
        self._pods_bad = 0
        self._last_tick_wall: float | None = checkpoint.last_sample_ts
        # Host mode: every client is pod "none"; this case's clients are known by the pids of its processes.
        self._our_pids: set[int] = set()

    # ------------------------------------------------------------------------------------ time

    def active(self) -> float:
        """Active soak seconds so far (earlier segments included)."""
        return self._active0 + (self.mono() - self._mono0)

    def remaining(self) -> float | None:
        return None if self.s.duration_s is None else max(0.0, self.s.duration_s - self.active())

    def time_up(self) -> bool:
        """The soak's end: its duration (active seconds) or its round limit is reached. At least one round
        always runs to its end, so a soak shorter than its first round still has evidence."""
        if self.s.max_rounds is not None and self.ck.rounds >= self.s.max_rounds:
            return True
        return self.s.duration_s is not None and self.active() >= self.s.duration_s and self.ck.rounds > 0

    # ------------------------------------------------------------------------------------ output

    def say(self, text: str) -> None:
        if self.out is not None:
            print(f"[{self.label}] {text}", file=self.out, flush=True)

    def event(self, kind: str, **data: Any) -> None:
        self.events.write({"ts": round(self.clock(), 3), "elapsed_s": round(self.active(), 3), "kind": kind, **data})

    def anomaly(self, what: str, **data: Any) -> None:
        self.ck.anomalies += 1
        self.event("anomaly", what=what, **data)
        self.say(f"ANOMALY: {what}")

    # ------------------------------------------------------------------------------------ guarded ops

    def _try(self, op: str, fn: Callable[[], Any]) -> tuple[bool, Any]:
        """Run a remote operation; on a connection problem record a gap and back off (per operation)."""
        st = self._ops.setdefault(op, _OpState())
        if self.mono() < st.backoff_until:
            return False, None
        try:
            value = fn()
        except (TransportError, KubeError) as exc:
            self._failed(op, st, exc)
            return False, None
        self._succeeded(op, st)
        return True, value

    def _failed(self, op: str, st: _OpState, exc: BaseException) -> None:
        text = f"{type(exc).__name__}: {exc}"
        st.failures += 1
        st.last_error = text
        if st.gap_start is None:
            st.gap_start = self.clock()
            st.first_error = text
            self.event("error", op=op, error=text[:500])
        if isinstance(exc, HostKeyMismatch):
            raise exc  # never retried: a changed host key is a security problem, not a network blip
        if not _connection_error(exc) and st.failures >= self.s.max_consecutive_errors:
            raise exc
        delay = min(self.s.backoff_max_s, self.s.backoff_initial_s * 2 ** (st.failures - 1))
        delay *= 1.0 + random.uniform(0.0, 0.2)
        st.backoff_until = self.mono() + delay
        self.say(f"{op}: {text[:200]} (attempt {st.failures}; retry in {delay:.1f}s)")

    def _succeeded(self, op: str, st: _OpState) -> None:
        if st.gap_start is not None:
            self._close_gap(op, st, self.clock(), "recovered")
        st.failures = 0
        st.backoff_until = 0.0

    def _close_gap(self, op: str, st: _OpState, end: float, how: str) -> None:
        assert st.gap_start is not None
        self.ck.gaps += 1
        self.event("gap", op=op, start=round(st.gap_start, 3), end=round(end, 3),
                   duration_s=round(end - st.gap_start, 3), failures=st.failures, error=st.first_error[:500],
                   how=how)
        self.say(f"{op}: gap of {end - st.gap_start:.1f}s closed ({how}; {st.failures} failed attempt(s))")
        st.gap_start = None

    # ------------------------------------------------------------------------------------ sampling

    def tick(self, phase: str, *, full: bool = False) -> bool:
        """One sampling tick; returns True when every node was sampled (else a gap is open or continues).

        ``full``: validate the /metrics pages with the full exposition parser (baseline and final state).
        """
        st = self._ops.setdefault("sample", _OpState())
        if self.mono() < st.backoff_until:
            return False
        now = self.clock()
        el = round(self.active(), 3)
        try:
            pods = list(self.ops.scheduler_pods())
            self._last_scheds = pods
            for sp in pods:
                self.scheds.write({"ts": now, "elapsed_s": el, "node": sp.node, "pod": sp.pod, "uid": sp.uid,
                                   "restarts": sp.restarts, "ready": sp.ready})
                self._check_restart(sp)
            samples = list(self.ops.sample(pods))
        except (TransportError, KubeError) as exc:
            self._failed("sample", st, exc)
            return False
        for ns in samples:
            self._record_node(ns, now, el, phase, full=full)
        self.ck.samples += 1
        errors = [s for s in samples if s.error]
        if samples and len(errors) < len(samples):
            self.ck.last_sample_ts = now
            self._last_tick_wall = now
        if errors:
            self._failed("sample", st, TransportError(errors[0].node, errors[0].error or "sampling failed"))
            return False
        if not samples:
            self._failed("sample", st, TransportError("cluster", "no scheduler pod found"))
            return False
        self._succeeded("sample", st)
        return True

    def _check_restart(self, sp: SchedPod) -> None:
        base = (self._baseline.get("schedulers") or {}).get(sp.node)
        if not base:
            return
        if (sp.uid, sp.restarts) != (base.get("uid"), base.get("restarts")):
            key = (sp.node, sp.uid, sp.restarts)
            if key not in self._restart_seen and len(self._restart_seen) < 1000:
                self._restart_seen.add(key)
                self.anomaly(f"scheduler on {sp.node} restarted (pod {sp.pod}, restarts {sp.restarts})",
                             node=sp.node, pod=sp.pod, uid=sp.uid, restarts=sp.restarts)
                # `kubectl logs -f` stops following a container that ended: without a new stream the restarted
                # scheduler's log would be missing until the next rotation (log_rotate_s, an hour by default).
                # The new stream starts at the last tick that saw the old container, so that the new one's
                # start-up lines are kept (the other containers' lines of that interval then appear twice), but
                # not before this segment began (a resumed soak's last tick may be hours old).
                if self._rotate_now is None:
                    self._rotate_since = max(self._last_tick_wall or self._wall0, self._wall0)
                self._rotate_now = f"scheduler on {sp.node} restarted"

    def _record_node(self, ns: NodeSample, now: float, el: float, phase: str, *, full: bool = False) -> None:
        if ns.error:
            self.metrics.write({"ts": now, "elapsed_s": el, "node": ns.node, "ok": 0, "phase": phase})
            return
        self._last_procs[ns.node] = ns.procs
        for p in ns.procs:
            self.samples.write({"ts": now, "elapsed_s": el, "node": ns.node, "pid": p.pid, "rss_bytes": p.rss_bytes,
                                "fd_count": p.fd_count, "threads": p.threads, "phase": phase})
            key = (ns.node, p.pid)
            if p.rss_bytes is not None:
                self._live(self._regs, key).add(now, float(p.rss_bytes))
                growth = self._regs[key].growth
                if growth is not None and growth > self.s.rss_alarm_bytes and key not in self._alarmed:
                    self._alarmed.add(key)
                    self.anomaly(f"scheduler RSS on {ns.node} (pid {p.pid}) grew {_mib(growth)} so far",
                                 node=ns.node, pid=p.pid, growth_bytes=growth)
            if p.fd_count is not None:
                self._live(self._fd_regs, key).add(now, float(p.fd_count))
        facts = scrape_facts(ns.metrics_text, full=full)
        if ns.metrics_text is not None:
            self._last_scrape[ns.node] = ns.metrics_text
        self._last_facts[ns.node] = facts
        if not facts.ok and ns.node not in self._scrape_bad:
            self._scrape_bad.add(ns.node)
            self.anomaly(f"/metrics on {ns.node} failed (HTTP {facts.http_code})", node=ns.node)
        elif facts.ok:
            self._scrape_bad.discard(ns.node)
        self.metrics.write({
            "ts": now, "elapsed_s": el, "node": ns.node, "ok": 1 if facts.ok else 0,
            "series_total": facts.series_total, "client_series": facts.client_series,
            "client_info_total": len(facts.client_info) if facts.ok else None,
            "client_info_ours": len(facts.ours(self.prefix, self._our_pids)) if facts.ok else None,
            "gpu_used_bytes": facts.gpu_used_sum, "phase": phase,
        })

    @staticmethod
    def _live(table: OrderedDict[tuple[str, int], OnlineRegression], key: tuple[str, int]) -> OnlineRegression:
        reg = table.get(key)
        if reg is None:
            reg = table[key] = OnlineRegression()
            while len(table) > MAX_LIVE_SERIES:
                table.popitem(last=False)
        return reg

    def _rebuild_live(self) -> None:
        """On resume: the live regressions from ``samples.csv`` (streamed; one regression per process)."""
        for row in iter_csv(self.dir / "samples.csv"):
            try:
                key = (row["node"], int(row["pid"]))
                ts = float(row["ts"])
            except (KeyError, ValueError):
                continue
            if row.get("rss_bytes"):
                self._live(self._regs, key).add(ts, float(row["rss_bytes"]))
            if row.get("fd_count"):
                self._live(self._fd_regs, key).add(ts, float(row["fd_count"]))

    # ------------------------------------------------------------------------------------ phases

    def run(self) -> Checkpoint:
        """Run (or continue) the soak to its end. Raises ``KeyboardInterrupt`` after checkpointing."""
        now = self.clock()
        resumed = bool(self.ck.segments)
        if resumed:
            last = self.ck.segments[-1]
            start = last.get("ended") or self.ck.last_sample_ts or last.get("started") or now
            self.ck.gaps += 1
            self.event("gap", op="orchestrator", start=round(float(start), 3), end=round(now, 3),
                       duration_s=round(now - float(start), 3), failures=0,
                       error=f"orchestrator not running ({last.get('reason') or 'stopped'})", how="resumed")
            self._baseline = self._load_json("baseline.json")
            self._rebuild_live()
        segment: dict[str, Any] = {"started": round(now, 3), "ended": None, "reason": None}
        self.ck.segments.append(segment)
        self.event("segment", n=len(self.ck.segments), resumed=resumed, active_s=round(self.ck.active_s, 3),
                   rounds=self.ck.rounds)
        self.say(f"segment {len(self.ck.segments)} started ({'resumed' if resumed else 'new'}): "
                 f"target {_fmt_hms(self.s.duration_s)}, {self.ck.rounds} round(s) done")
        reason = "error"
        try:
            if not self.ck.baseline_done:
                self._baseline_phase()
            if not self.ck.finished:
                self._rounds_phase()
            if not self.ck.final_done:
                self._final_phase()
            reason = "completed"
        except KeyboardInterrupt:
            reason = "interrupted"
            raise
        finally:
            self._close_segment(segment, reason)
        return self.ck

    def _close_segment(self, segment: dict[str, Any], reason: str) -> None:
        if self._round is not None:
            self._finish_round(self._round, "interrupted" if reason == "interrupted" else "aborted", remote=False)
        end = self.clock()
        for op, st in self._ops.items():
            if st.gap_start is not None:
                self._close_gap(op, st, end, f"open at {reason}")
        self.ck.active_s = self.active()
        self._active0, self._mono0 = self.ck.active_s, self.mono()
        segment["ended"] = round(end, 3)
        segment["reason"] = reason
        self.event("segment_end", reason=reason, active_s=round(self.ck.active_s, 3), rounds=self.ck.rounds)
        self.save()
        self.write_status()
        for a in self._appenders:
            a.close()
        self.say(f"segment ended: {reason}; {self.ck.rounds} round(s), {self.ck.samples} tick(s), "
                 f"{self.ck.gaps} gap(s), {self.ck.anomalies} anomal{'y' if self.ck.anomalies == 1 else 'ies'}")

    def _load_json(self, name: str) -> dict[str, Any]:
        path = self.dir / name
        return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}

    def save(self) -> None:
        """Checkpoint (series flushed to disk first, so the checkpoint never runs ahead of the data)."""
        for a in self._appenders:
            a.fsync()
        self.ck.active_s = self.active()
        self._active0, self._mono0 = self.ck.active_s, self.mono()
        self.ck.save(self.dir)

    def _retry(self, op: str, fn: Callable[[], Any], *, until: float | None = None) -> tuple[bool, Any]:
        """Retry a remote operation (with the backoff of :meth:`_try`) until it works or ``until`` (monotonic)."""
        while True:
            interrupt.check()
            ok, value = self._try(op, fn)
            if ok:
                return True, value
            if until is not None and self.mono() >= until:
                return False, None
            wait = max(0.05, self._ops[op].backoff_until - self.mono())
            if until is not None:
                wait = min(wait, max(0.05, until - self.mono()))
            self.sleep(wait)

    def _baseline_phase(self) -> None:
        """Idle baseline: no pods of ours, then scheduler pods, processes and /metrics of every node."""
        limit = self.mono() + max(self.s.settle_s, self.s.backoff_max_s * 4)
        ok, _ = self._retry("rounds", lambda: self.ops.delete_pods(self.s.delete_timeout_s), until=limit)
        self._need_delete = not ok
        while not self.tick("idle", full=True):
            if self.mono() >= limit:
                break
            self.sleep(max(0.05, self._ops["sample"].backoff_until - self.mono()))
        base: dict[str, Any] = {
            "ts": round(self.clock(), 3),
            "complete": bool(self._last_scheds) and all(f.ok for f in self._last_facts.values()),
            **self._snapshot(),
            "procs": {n: [{"pid": p.pid, "rss_bytes": p.rss_bytes, "fd_count": p.fd_count} for p in procs]
                      for n, procs in self._last_procs.items()},
        }
        self._baseline = base
        atomic_write_text(self.dir / "baseline.json", json.dumps(base, indent=1) + "\n")
        self._save_scrapes("baseline")
        self.ck.baseline_done = True
        self.save()
        self.say(f"baseline: {len(base['schedulers'])} scheduler pod(s), GPU memory used "
                 f"{ {n: _mib(sum(v.values())) for n, v in base['gpu_used'].items()} }")

    def _snapshot(self) -> dict[str, Any]:
        """Scheduler pods and the last scrape of every node (baseline.json / final.json content)."""
        good = {n: f for n, f in self._last_facts.items() if f.ok}
        return {
            "schedulers": {sp.node: {"pod": sp.pod, "uid": sp.uid, "restarts": sp.restarts, "ready": sp.ready}
                           for sp in self._last_scheds},
            "scrape_ok": {n: f.ok for n, f in self._last_facts.items()},
            "gpu_used": {n: dict(f.gpu_used) for n, f in good.items()},
            "series_total": {n: f.series_total for n, f in good.items()},
            "client_series": {n: f.client_series for n, f in good.items()},
            "client_info_total": {n: len(f.client_info) for n, f in good.items()},
            "client_info_ours": {n: [list(c) for c in f.ours(self.prefix, self._our_pids)] for n, f in good.items()},
        }

    def _save_scrapes(self, label: str) -> None:
        d = self.dir / "metrics"
        d.mkdir(exist_ok=True)
        for node, text in self._last_scrape.items():
            (d / f"{label}_{node}.txt").write_text(text, encoding="utf-8")

    def _rounds_phase(self) -> None:
        s = self.s
        now = self.mono()
        next_sample = now
        next_progress = now + min(s.progress_s, 5.0)
        next_interim = now + s.interim_s
        next_checkpoint = now + s.checkpoint_s
        next_rotate = now + s.log_rotate_s
        next_quota = now + s.quota_interval_s if s.quota_interval_s else None
        while True:
            interrupt.check()
            now = self.mono()
            if now >= next_sample:
                self.tick("load" if self._round is not None else "idle")
                next_sample = max(now, next_sample) + s.sample_interval_s
            if next_quota is not None and now >= next_quota:
                if self._round is not None:
                    self._quota_change(self._round)
                next_quota = now + float(s.quota_interval_s or 0)
            if now >= next_progress:
                self.progress()
                next_progress = now + s.progress_s
            if now >= next_interim:
                self.interim()
                next_interim = now + s.interim_s
            if now >= next_rotate or self._rotate_now:
                self._rotate(self._rotate_now, self._rotate_since)
                self._rotate_now = self._rotate_since = None
                next_rotate = now + s.log_rotate_s
            if now >= next_checkpoint:
                self.save()
                next_checkpoint = now + s.checkpoint_s
            if self._round is None:
                if self.time_up():
                    break
                self._round = self._start_round()
            else:
                self._poll_round(self._round)
            if self._round is None and self.time_up():
                break
            wake = min(next_sample, now + s.poll_s, next_progress)
            if next_quota is not None:
                wake = min(wake, next_quota)
            self.sleep(max(0.01, wake - self.mono()))
        self.ck.finished = True
        self.save()
        self.say(f"rounds over: {self.ck.rounds} round(s) in {_fmt_hms(self.active())}")

    # ------------------------------------------------------------------------------------ rounds

    def _start_round(self) -> _Round | None:
        if self._need_delete:
            ok, _ = self._try("rounds", lambda: self.ops.delete_pods(self.s.delete_timeout_s))
            if not ok:
                return None
            self._need_delete = False
        no = self.ck.rounds + 1
        specs = list(self.mix(no))
        ok, _ = self._try("rounds", lambda: self.ops.start_pods(specs))
        if not ok:
            self._need_delete = True
            return None
        names = [p.name for p in specs]
        values: dict[str, str] = {}
        for p in specs:
            if self.s.quota_key == "core" and p.core_limit is not None:
                values[p.name] = str(p.core_limit)
            elif self.s.quota_key == "memory" and p.memory_limit is not None:
                values[p.name] = str(p.memory_limit)
        return _Round(no, self.clock(), self.mono(), specs, names, values)

    def _poll_round(self, rnd: _Round) -> None:
        ok, recs = self._try("rounds", self.ops.poll_pods)
        now = self.mono()
        if ok:
            wanted = set(rnd.names)
            for r in recs:
                if r.host_pid is not None and len(self._our_pids) < MAX_OUR_PIDS:
                    self._our_pids.add(r.host_pid)
                if r.name in wanted:
                    rnd.last[r.name] = r
                    if r.phase != "Pending" and r.name not in rnd.first_running:
                        rnd.first_running[r.name] = self.clock()
            if len(rnd.last) == len(wanted) and all(r.terminal for r in rnd.last.values()):
                self._finish_round(rnd, "completed")
                return
        if now - rnd.started_mono > self.s.round_timeout_s:
            self._finish_round(rnd, "timeout")
            return
        if self.time_up() and self.s.duration_s is not None:
            if self._time_up_at is None:
                self._time_up_at = now
            elif now - self._time_up_at > self.s.stop_grace_s:
                self._finish_round(rnd, "cut")

    def _finish_round(self, rnd: _Round, status: str, *, remote: bool = True) -> None:
        ended = self.clock()
        phases: dict[str, int] = {}
        runtimes: dict[str, float] = {}
        pods: dict[str, dict[str, Any]] = {}
        for name in rnd.names:
            r = rnd.last.get(name)
            phase = r.phase if r else "Missing"
            phases[phase] = phases.get(phase, 0) + 1
            info: dict[str, Any] = {"phase": phase}
            if r is not None:
                info.update(node=r.node, exit_code=r.exit_code, started=r.started, finished=r.finished)
                if r.started is not None and r.finished is not None:
                    runtimes[name] = round(r.finished - r.started, 3)
            if name in rnd.first_running:
                info["pending_s"] = round(rnd.first_running[name] - rnd.started, 3)
            pods[name] = info
        failed = [n for n in rnd.names if pods[n]["phase"] == "Failed"]
        stuck = [n for n in rnd.names if pods[n]["phase"] not in ("Succeeded", "Failed")]
        pending = [v["pending_s"] for v in pods.values() if "pending_s" in v]
        record = {
            "round": rnd.no, "status": status, "started": round(rnd.started, 3), "ended": round(ended, 3),
            "duration_s": round(ended - rnd.started, 3), "elapsed_s": round(self.active(), 3),
            "pods": len(rnd.names), "phases": phases, "failed": failed, "not_terminal": stuck,
            "pending_max_s": max(pending) if pending else None, "runtimes_s": runtimes, "detail": pods,
        }
        self.rounds.write(record)
        self._round = None
        if status in ("completed", "timeout"):
            self.ck.rounds += 1
            self._pods_ok += phases.get("Succeeded", 0)
            self._pods_bad += len(failed) + len(stuck)
            if failed or stuck:
                self.anomaly(f"round {rnd.no}: {len(failed)} failed, {len(stuck)} not terminal ({status})",
                             round=rnd.no, failed=failed[:20], not_terminal=stuck[:20])
        if not remote:
            return
        for name in failed:
            if self.ck.failed_logs >= self.s.max_failed_logs:
                break
            ok, text = self._try("rounds", functools.partial(self.ops.pod_log, name))
            if ok:
                self.ck.failed_logs += 1
                d = self.dir / "failed-pods"
                d.mkdir(exist_ok=True)
                with gzip.open(d / f"{name}.log.gz", "wt", encoding="utf-8") as fh:
                    fh.write(text)
        ok, _ = self._try("rounds", lambda: self.ops.delete_pods(self.s.delete_timeout_s))
        self._need_delete = not ok
        self.ops.end_round()
        if ok:
            self.tick("idle")
        self.save()

    def _quota_change(self, rnd: _Round) -> None:
        cycle = self.s.quota_cycle
        if not cycle or not self.s.quota_key:
            return
        value = cycle[self.ck.quota_index % len(cycle)]
        self.ck.quota_index += 1
        running = [n for n in rnd.names if (r := rnd.last.get(n)) is not None and r.phase == "Running"]
        done: list[str] = []
        changed: list[str] = []
        when = self.clock()
        for name in running:
            ok, t = self._try("quota", functools.partial(self.ops.annotate, name, {str(self.s.quota_key): value}))
            if ok:
                done.append(name)
                when = t
                if rnd.values.get(name) != value:
                    changed.append(name)
                rnd.values[name] = value
        self.event("annotate", key=self.s.quota_key, value=value, pods=done, changed=changed,
                   skipped=sorted(set(running) - set(done)), round=rnd.no, at=round(when, 3))

    # ------------------------------------------------------------------------------------ final

    def _final_phase(self) -> None:
        """Delete the pods, then wait up to ``settle_s`` for GPU memory and our client series to return."""
        limit = self.mono() + self.s.settle_s
        ok, _ = self._retry("rounds", lambda: self.ops.delete_pods(self.s.delete_timeout_s),
                            until=limit + self.s.backoff_max_s)
        settled = False
        t0 = self.mono()
        while True:
            if self.tick("idle", full=True) and self._recovered():
                settled = True
                break
            if self.mono() >= limit:
                break
            self.sleep(min(self.s.sample_interval_s, max(0.05, limit - self.mono())))
        final: dict[str, Any] = {
            "ts": round(self.clock(), 3),
            "deleted": ok,
            "settled": settled,
            "settle_s": round(self.mono() - t0, 3),
            **self._snapshot(),
        }
        atomic_write_text(self.dir / "final.json", json.dumps(final, indent=1) + "\n")
        self._save_scrapes("final")
        ok, _ = self._try("final", lambda: self.ops.harvest_previous(self.dir / "previous"))
        self.ck.final_done = True
        self.save()
        self.say(f"final: settled={settled} after {final['settle_s']:.1f}s")

    def _recovered(self) -> bool:
        base = self._baseline.get("gpu_used") or {}
        for node, facts in self._last_facts.items():
            if not facts.ok or facts.ours(self.prefix, self._our_pids):
                return False
            for gpu, used in facts.gpu_used:
                ref = (base.get(node) or {}).get(gpu)
                if ref is not None and used > ref + self.s.gpu_tolerance_bytes:
                    return False
        return bool(self._last_facts)

    def _rotate(self, reason: str | None = None, since: float | None = None) -> None:
        idx = int(self.clock())
        dest = self.dir / "logs"
        ok, files = self._try("logs", lambda: self.ops.rotate_logs(dest, idx, since=since))
        if ok:
            extra = {k: v for k, v in (("reason", reason), ("since", since)) if v is not None}
            self.event("logs_rotated", files=[str(Path(f).name) for f in files], **extra)

    # ------------------------------------------------------------------------------------ progress

    def status(self) -> dict[str, Any]:
        """The live status (also written to ``status.json``)."""
        rnd = self._round
        running = None
        if rnd is not None:
            running = {"round": rnd.no, "pods": len(rnd.names),
                       "terminal": sum(1 for r in rnd.last.values() if r.terminal)}
        last = self._last_tick_wall
        nodes = {}
        for node, procs in self._last_procs.items():
            nodes[node] = [{"pid": p.pid, "rss_bytes": p.rss_bytes, "fd_count": p.fd_count} for p in procs]
        return {
            "case": self.label, "elapsed_s": round(self.active(), 1), "remaining_s": self.remaining(),
            "target_s": self.s.duration_s, "rounds": self.ck.rounds, "max_rounds": self.s.max_rounds,
            "running": running, "pods_ok": self._pods_ok, "pods_bad": self._pods_bad,
            "samples": self.ck.samples, "last_sample_ts": last,
            "last_sample_age_s": None if last is None else round(self.clock() - last, 1),
            "schedulers": nodes, "anomalies": self.ck.anomalies, "gaps": self.ck.gaps,
            "in_gap": sorted(op for op, st in self._ops.items() if st.gap_start is not None),
        }

    def write_status(self) -> None:
        atomic_write_text(self.dir / "status.json", json.dumps(self.status(), indent=1) + "\n")

    def progress(self) -> None:
        st = self.status()
        run = st["running"]
        running = f", running round {run['round']} ({run['terminal']}/{run['pods']} done)" if run else ""
        procs = "; ".join(
            f"{n} rss {_mib(ps[0]['rss_bytes'])} fd {ps[0]['fd_count']}" for n, ps in sorted(st["schedulers"].items())
            if ps
        )
        age = st["last_sample_age_s"]
        self.say(
            f"{_fmt_hms(st['elapsed_s'])} elapsed, {_fmt_hms(st['remaining_s'])} left | rounds {st['rounds']}"
            f"{running} | pods ok {st['pods_ok']}, bad {st['pods_bad']} | last sample "
            f"{'-' if age is None else f'{age:.0f}s ago'}: {procs or '-'} | anomalies {st['anomalies']}, "
            f"gaps {st['gaps']}{' (in gap: ' + ','.join(st['in_gap']) + ')' if st['in_gap'] else ''}"
        )
        self.write_status()

    def interim(self) -> None:
        """Write ``interim/interim-<k>.md``: live trends, rounds, anomalies, gaps (and keep the last scrapes)."""
        self.ck.interim_reports += 1
        k = self.ck.interim_reports
        st = self.status()
        lines = [
            f"# Interim report {k}: {self.label}", "",
            f"- elapsed {_fmt_hms(st['elapsed_s'])}, remaining {_fmt_hms(st['remaining_s'])}",
            f"- rounds {st['rounds']}, pods ok {st['pods_ok']}, failed or stuck {st['pods_bad']}",
            f"- samples {st['samples']}, gaps {st['gaps']}, anomalies {st['anomalies']}", "",
            "| node | pid | points | RSS last | RSS slope /h | RSS growth | FD last | FD slope /h |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for key, reg in self._regs.items():
            fd = self._fd_regs.get(key)
            slope = reg.slope
            fd_slope = fd.slope if fd else None
            lines.append(
                f"| {key[0]} | {key[1]} | {reg.n} | {_mib(reg.last)} | "
                f"{'-' if slope is None else _mib(slope * 3600)} | {_mib(reg.growth)} | "
                f"{'-' if fd is None else int(fd.last)} | {'-' if fd_slope is None else f'{fd_slope * 3600:.2f}'} |"
            )
        lines += ["", "Live slopes are plain least squares (no significance test); the verdict refits the stored",
                  "series with the autocorrelation-corrected test (xpushare/judge/trend.py).", ""]
        d = self.dir / "interim"
        d.mkdir(exist_ok=True)
        path = d / f"interim-{k:03d}.md"
        atomic_write_text(path, "\n".join(lines))
        self._save_scrapes(f"interim-{k:03d}")
        self.event("interim_report", n=k, path=f"interim/{path.name}")
        self.say(f"interim report: {path}")
