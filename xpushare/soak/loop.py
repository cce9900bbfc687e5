"""The soak loop: workload rounds, periodic sampling, quota changes, gaps, checkpoints, progress.

One thread, one event loop (no sampler thread, so the SSH connections are never shared)::

    baseline (idle: scheduler pods, processes, /metrics)        -> baseline.json
    until the duration (active seconds) or the round limit is reached:
        every sample_interval_s: a tick                          -> samples.csv, metrics.csv, schedulers.csv
        every quota_interval_s (STAB-003/004): annotate the running pods (each pod's call time)  -> events.jsonl
        rounds: create the round's pods, poll until they end (or round_timeout_s), record -> rounds.jsonl,
                keep failed pods' logs (bounded)                 -> failed-pods/
                and the logs of pods named ``*<keep_logs_suffix>`` (the memory probe) -> probe-pods/,
                both with the kubelet's timestamps where the backend has them,
                delete the pods, take an idle tick
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

The parts: :mod:`~xpushare.soak.loop_settings` (:class:`SoakSettings`, re-exported here),
:mod:`~xpushare.soak.loop_guard` (backoff and gaps), :mod:`~xpushare.soak.loop_sampling` (the tick),
:mod:`~xpushare.soak.loop_trends` (live regressions), :mod:`~xpushare.soak.loop_rounds` (a round and its
record), :mod:`~xpushare.soak.loop_text` (progress line, interim report).
"""

from __future__ import annotations

import functools
import gzip
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from xpushare.evidence.soak_series import (
    METRICS_FIELDS,
    SAMPLE_FIELDS,
    SCHEDULER_FIELDS,
    CsvAppender,
    JsonlAppender,
)
from xpushare.model.atomic_file import atomic_write_bytes
from xpushare.model.workload import WorkloadSpec
from xpushare.report.run_store import atomic_write_text
from xpushare.soak.checkpoint import Checkpoint
from xpushare.soak.loop_guard import OpGuard
from xpushare.soak.loop_rounds import Round, round_record, start_values
from xpushare.soak.loop_sampling import Sampler
from xpushare.soak.loop_settings import SoakSettings
from xpushare.soak.loop_text import fmt_hms, interim_lines, mib, progress_line
from xpushare.soak.ops import SoakOps
from xpushare.transport import interrupt

__all__ = ["SoakLoop", "SoakSettings"]

#: Pids of this case's workload processes kept for the host-mode ghost check (a 24 h soak starts fewer).
MAX_OUR_PIDS = 200_000


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
        mix: Callable[[int], Sequence[WorkloadSpec]],
        checkpoint: Checkpoint,
        *,
        ours_prefix: str,
        out: TextIO | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = interrupt.sleep,
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
        self.guard = OpGuard(settings, checkpoint, clock=clock, monotonic=monotonic, sleep=sleep, event=self.event,
                             say=self.say)
        self._active0 = checkpoint.active_s
        self._mono0 = monotonic()
        self._wall0 = clock()
        self._round: Round | None = None
        self._need_delete = True
        self._time_up_at: float | None = None
        self._pods_ok = 0
        self._pods_bad = 0
        self.sampler = Sampler(ops, self.guard, checkpoint, settings, self.dir, scheds=self.scheds,
                               samples=self.samples, metrics=self.metrics, clock=clock, active=self.active,
                               anomaly=self.anomaly, ours_prefix=ours_prefix, wall0=self._wall0)

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
            self.sampler.baseline = self._load_json("baseline.json")
            self.sampler.trends.rebuild(self.dir / "samples.csv")
        segment: dict[str, Any] = {"started": round(now, 3), "ended": None, "reason": None}
        self.ck.segments.append(segment)
        self.event("segment", n=len(self.ck.segments), resumed=resumed, active_s=round(self.ck.active_s, 3),
                   rounds=self.ck.rounds)
        self.say(f"segment {len(self.ck.segments)} started ({'resumed' if resumed else 'new'}): "
                 f"target {fmt_hms(self.s.duration_s)}, {self.ck.rounds} round(s) done")
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
        self.guard.close_open_gaps(end, reason)
        self.sampler.close_missing(end, reason)
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

    def _baseline_phase(self) -> None:
        """Idle baseline: no pods of ours, then scheduler pods, processes and /metrics of every node."""
        limit = self.mono() + max(self.s.settle_s, self.s.backoff_max_s * 4)
        ok, _ = self.guard.retry("rounds", lambda: self.ops.delete_pods(self.s.delete_timeout_s), until=limit)
        self._need_delete = not ok
        while not self.sampler.tick("idle", full=True):
            if self.mono() >= limit:
                break
            self.sleep(max(0.05, self.guard.state("sample").backoff_until - self.mono()))
        base: dict[str, Any] = {
            "ts": round(self.clock(), 3),
            "complete": bool(self.sampler.last_scheds) and all(f.ok for f in self.sampler.last_facts.values()),
            **self.sampler.snapshot(),
            "procs": {n: [{"pid": p.pid, "rss_bytes": p.rss_bytes, "fd_count": p.fd_count} for p in procs]
                      for n, procs in self.sampler.last_procs.items()},
        }
        self.sampler.baseline = base
        atomic_write_text(self.dir / "baseline.json", json.dumps(base, indent=1) + "\n")
        self.sampler.save_scrapes("baseline")
        self.ck.baseline_done = True
        self.save()
        self.say(f"baseline: {len(base['schedulers'])} scheduler pod(s), GPU memory used "
                 f"{ {n: mib(sum(v.values())) for n, v in base['gpu_used'].items()} }")

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
                self.sampler.tick("load" if self._round is not None else "idle")
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
            if now >= next_rotate or self.sampler.rotate_now:
                self._rotate(self.sampler.rotate_now, self.sampler.rotate_since)
                self.sampler.rotate_now = self.sampler.rotate_since = None
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
        self.say(f"rounds over: {self.ck.rounds} round(s) in {fmt_hms(self.active())}")

    # ------------------------------------------------------------------------------------ rounds

    def _start_round(self) -> Round | None:
        if self._need_delete:
            ok, _ = self.guard.attempt("rounds", lambda: self.ops.delete_pods(self.s.delete_timeout_s))
            if not ok:
                return None
            self._need_delete = False
        no = self.ck.rounds + 1
        specs = list(self.mix(no))
        ok, _ = self.guard.attempt("rounds", lambda: self.ops.start_pods(specs))
        if not ok:
            self._need_delete = True
            return None
        names = [p.name for p in specs]
        return Round(no, self.clock(), self.mono(), specs, names, start_values(specs, self.s.quota_key))

    def _poll_round(self, rnd: Round) -> None:
        ok, recs = self.guard.attempt("rounds", self.ops.poll_pods)
        now = self.mono()
        if ok:
            wanted = set(rnd.names)
            for r in recs:
                if r.host_pid is not None and len(self.sampler.our_pids) < MAX_OUR_PIDS:
                    self.sampler.our_pids.add(r.host_pid)
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

    def _finish_round(self, rnd: Round, status: str, *, remote: bool = True) -> None:
        ended = self.clock()
        outcome = round_record(rnd, status, ended, self.active())
        phases, failed, stuck = outcome.phases, outcome.failed, outcome.stuck
        self.rounds.write(outcome.record)
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
            ok, text = self.guard.attempt("rounds", functools.partial(self.ops.pod_log, name))
            if ok:
                self.ck.failed_logs += 1
                d = self.dir / "failed-pods"
                d.mkdir(exist_ok=True)
                atomic_write_bytes(d / f"{name}.log.gz", gzip.compress(text.encode("utf-8", "backslashreplace")))
        self._keep_logs(rnd)
        ok, _ = self.guard.attempt("rounds", lambda: self.ops.delete_pods(self.s.delete_timeout_s))
        self._need_delete = not ok
        self.ops.end_round()
        if ok:
            self.sampler.tick("idle")
        self.save()

    def _keep_logs(self, rnd: Round) -> None:
        """Keep the logs of the round's pods named ``*<keep_logs_suffix>`` in ``probe-pods/<pod>.log`` (one per
        round: small); a log that cannot be fetched is an ``events.jsonl`` ``log_lost`` event."""
        suffix = self.s.keep_logs_suffix
        if not suffix:
            return
        for name in (n for n in rnd.names if n.endswith(suffix)):
            ok, text = self.guard.attempt("rounds", functools.partial(self.ops.pod_log, name))
            if not ok:
                self.event("log_lost", pod=name, round=rnd.no)
                continue
            d = self.dir / "probe-pods"
            d.mkdir(exist_ok=True)
            atomic_write_text(d / f"{name}.log", str(text))

    def _quota_change(self, rnd: Round) -> None:
        cycle = self.s.quota_cycle
        if not cycle or not self.s.quota_key:
            return
        value = cycle[self.ck.quota_index % len(cycle)]
        self.ck.quota_index += 1
        running = [n for n in rnd.names if (r := rnd.last.get(n)) is not None and r.phase == "Running"]
        done: list[str] = []
        changed: list[str] = []
        when = self.clock()
        times: dict[str, float] = {}
        for name in running:
            annotate = functools.partial(self.ops.annotate, name, {str(self.s.quota_key): value})
            ok, t = self.guard.attempt("quota", annotate)
            if ok:
                done.append(name)
                when = t
                times[name] = round(float(t), 3)
                if rnd.values.get(name) != value:
                    changed.append(name)
                rnd.values[name] = value
        self.event("annotate", key=self.s.quota_key, value=value, pods=done, changed=changed,
                   skipped=sorted(set(running) - set(done)), round=rnd.no, at=round(when, 3), times=times)

    # ------------------------------------------------------------------------------------ final

    def _final_phase(self) -> None:
        """Delete the pods, then wait up to ``settle_s`` for GPU memory and our client series to return."""
        limit = self.mono() + self.s.settle_s
        ok, _ = self.guard.retry("rounds", lambda: self.ops.delete_pods(self.s.delete_timeout_s),
                            until=limit + self.s.backoff_max_s)
        settled = False
        t0 = self.mono()
        while True:
            if self.sampler.tick("idle", full=True) and self.sampler.recovered():
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
            **self.sampler.snapshot(),
        }
        atomic_write_text(self.dir / "final.json", json.dumps(final, indent=1) + "\n")
        self.sampler.save_scrapes("final")
        ok, _ = self.guard.attempt("final", lambda: self.ops.harvest_previous(self.dir / "previous"))
        self.ck.final_done = True
        self.save()
        self.say(f"final: settled={settled} after {final['settle_s']:.1f}s")

    def _rotate(self, reason: str | None = None, since: float | None = None) -> None:
        idx = int(self.clock())
        dest = self.dir / "logs"
        ok, files = self.guard.attempt("logs", lambda: self.ops.rotate_logs(dest, idx, since=since))
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
        last = self.sampler.last_tick_wall
        nodes = {}
        for node, procs in self.sampler.last_procs.items():
            nodes[node] = [{"pid": p.pid, "rss_bytes": p.rss_bytes, "fd_count": p.fd_count} for p in procs]
        return {
            "case": self.label, "elapsed_s": round(self.active(), 1), "remaining_s": self.remaining(),
            "target_s": self.s.duration_s, "rounds": self.ck.rounds, "max_rounds": self.s.max_rounds,
            "running": running, "pods_ok": self._pods_ok, "pods_bad": self._pods_bad,
            "samples": self.ck.samples, "last_sample_ts": last,
            "last_sample_age_s": None if last is None else round(self.clock() - last, 1),
            "schedulers": nodes, "anomalies": self.ck.anomalies, "gaps": self.ck.gaps,
            "in_gap": self.guard.in_gap(),
        }

    def write_status(self) -> None:
        atomic_write_text(self.dir / "status.json", json.dumps(self.status(), indent=1) + "\n")

    def progress(self) -> None:
        self.say(progress_line(self.status()))
        self.write_status()

    def interim(self) -> None:
        """Write ``interim/interim-<k>.md``: live trends, rounds, anomalies, gaps (and keep the last scrapes)."""
        self.ck.interim_reports += 1
        k = self.ck.interim_reports
        st = self.status()
        lines = interim_lines(k, self.label, st, self.sampler.trends)
        d = self.dir / "interim"
        d.mkdir(exist_ok=True)
        path = d / f"interim-{k:03d}.md"
        atomic_write_text(path, "\n".join(lines))
        self.sampler.save_scrapes(f"interim-{k:03d}")
        self.event("interim_report", n=k, path=f"interim/{path.name}")
        self.say(f"interim report: {path}")
