"""The soak loop's sampling tick: scheduler pods, their processes (RSS, fds, threads) and ``/metrics`` of every
node -> ``schedulers.csv``, ``samples.csv``, ``metrics.csv``, with the live anomalies (a scheduler restart,
RSS growth over ``rss_alarm_bytes``, a failed scrape) and what the last tick saw (baseline/final snapshots,
the recovery check of the final phase).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from xpushare.evidence.scrape_capture import ScrapeFacts, scrape_facts
from xpushare.evidence.soak_series import CsvAppender
from xpushare.model.atomic_file import atomic_write_text
from xpushare.model.errors import TransportError
from xpushare.soak.checkpoint import Checkpoint
from xpushare.soak.loop_guard import OpGuard
from xpushare.soak.loop_settings import SoakSettings
from xpushare.soak.loop_text import mib
from xpushare.soak.loop_trends import LiveTrends
from xpushare.soak.ops import NodeSample, SchedPod, SoakOps
from xpushare.transport.kube_errors import KubeError

__all__ = ["Sampler"]


class Sampler:
    """Samples the cluster for one soak segment and keeps what the last tick saw.

    Args:
        ops / guard / checkpoint / settings: the loop's (``checkpoint.samples`` and ``last_sample_ts`` are
            updated here).
        soak_dir: ``<case_dir>/soak``; scheds / samples / metrics: the appenders of its series files.
        clock: unix time; active: active soak seconds; anomaly: records one live anomaly.
        ours_prefix: pod-name prefix of this case's pods; wall0: unix time the segment started.

    Public state: ``baseline`` (``baseline.json`` content), ``our_pids`` (host pids of this case's
    processes, filled by the loop), ``last_*`` (the last tick per node), ``last_tick_wall`` (unix time of the
    last tick that sampled a node), ``rotate_now``/``rotate_since`` (why and from when the log streams must
    be restarted early; the loop clears them).
    """

    def __init__(
        self,
        ops: SoakOps,
        guard: OpGuard,
        checkpoint: Checkpoint,
        settings: SoakSettings,
        soak_dir: Path,
        *,
        scheds: CsvAppender,
        samples: CsvAppender,
        metrics: CsvAppender,
        clock: Callable[[], float],
        active: Callable[[], float],
        anomaly: Callable[..., None],
        ours_prefix: str,
        wall0: float,
    ) -> None:
        self.ops = ops
        self.guard = guard
        self.ck = checkpoint
        self.s = settings
        self.soak_dir = soak_dir
        self.scheds, self.samples, self.metrics = scheds, samples, metrics
        self.clock = clock
        self.active = active
        self.anomaly = anomaly
        self.prefix = ours_prefix
        self._wall0 = wall0
        self.trends = LiveTrends()
        self._alarmed: set[tuple[str, int]] = set()
        self.last_scrape: dict[str, str] = {}
        self.last_facts: dict[str, ScrapeFacts] = {}
        self.last_procs: dict[str, tuple[Any, ...]] = {}
        self.last_scheds: list[SchedPod] = []
        self._restart_seen: set[tuple[str, str, int]] = set()
        self.rotate_now: str | None = None  # why the log streams must be restarted before their time
        self.rotate_since: float | None = None  # and from when (unix time)
        self._scrape_bad: set[str] = set()
        self.baseline: dict[str, Any] = {}
        self.last_tick_wall: float | None = checkpoint.last_sample_ts
        # Host mode: every client is pod "none"; this case's clients are known by the pids of its processes.
        self.our_pids: set[int] = set()
        self.missing: dict[str, float] = {}
        """Node -> unix time since when its host does not answer (it dropped out; the soak goes on without it)."""

    def tick(self, phase: str, *, full: bool = False) -> bool:
        """One sampling tick; returns True when every node was sampled (else a gap is open or continues).

        ``full``: validate the /metrics pages with the full exposition parser (baseline and final state).
        """
        st = self.guard.state("sample")
        if self.guard.mono() < st.backoff_until:
            return False
        now = self.clock()
        el = round(self.active(), 3)
        try:
            pods = list(self.ops.scheduler_pods())
            self.last_scheds = pods
            for sp in pods:
                self.scheds.write({"ts": now, "elapsed_s": el, "node": sp.node, "pod": sp.pod, "uid": sp.uid,
                                   "restarts": sp.restarts, "ready": sp.ready})
                self._check_restart(sp)
            samples = list(self.ops.sample(pods))
        except (TransportError, KubeError) as exc:
            self.guard.failed("sample", st, exc)
            return False
        for ns in samples:
            self._presence(ns, now)
            self._record_node(ns, now, el, phase, full=full)
        self.ck.samples += 1
        errors = [s for s in samples if s.error]
        if samples and len(errors) < len(samples):
            self.ck.last_sample_ts = now
            self.last_tick_wall = now
        answered = [s for s in samples if s.why is None]  # a node that dropped out is tracked on its own
        errors = [s for s in answered if s.error]
        if errors:
            self.guard.failed("sample", st, TransportError(errors[0].node, errors[0].error or "sampling failed"))
            return False
        if samples and not answered:
            first = samples[0]
            self.guard.failed("sample", st, TransportError(first.node, first.error or "no node answers"))
            return False
        if not samples:
            self.guard.failed("sample", st, TransportError("cluster", "no scheduler pod found"))
            return False
        self.guard.succeeded("sample", st)
        return True

    def _presence(self, ns: NodeSample, now: float) -> None:
        """A node whose host stops answering is a ``host_unreachable`` event; once it answers again, a ``host_back``
        event with how long it was missing (``missing_s``; the soak report sums them per node)."""
        if ns.why is not None:
            if ns.node not in self.missing:
                self.missing[ns.node] = now
                self.guard.event("host_unreachable", node=ns.node, why=ns.why, error=(ns.error or "")[:500])
                self.guard.say(f"{ns.node}: UNREACHABLE ({ns.why}): {ns.error}; the soak goes on without it")
            return
        since = self.missing.pop(ns.node, None)
        if since is not None:
            self.guard.event("host_back", node=ns.node, missing_s=round(now - since, 3), how="answered again")
            self.guard.say(f"{ns.node}: answers again after {now - since:.0f}s")

    def close_missing(self, end: float, reason: str) -> None:
        """At the segment's end: each node still missing gets its ``host_back`` event with ``how`` ``still
        missing at <reason>`` (a resumed soak finds it again at its first tick)."""
        for node, since in sorted(self.missing.items()):
            self.guard.event("host_back", node=node, missing_s=round(max(0.0, end - since), 3),
                             how=f"still missing at {reason}")
        self.missing = {}

    def _check_restart(self, sp: SchedPod) -> None:
        base = (self.baseline.get("schedulers") or {}).get(sp.node)
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
                if self.rotate_now is None:
                    self.rotate_since = max(self.last_tick_wall or self._wall0, self._wall0)
                self.rotate_now = f"scheduler on {sp.node} restarted"

    def _record_node(self, ns: NodeSample, now: float, el: float, phase: str, *, full: bool = False) -> None:
        if ns.error:
            self.metrics.write({"ts": now, "elapsed_s": el, "node": ns.node, "ok": 0, "phase": phase})
            return
        self.last_procs[ns.node] = ns.procs
        for p in ns.procs:
            self.samples.write({"ts": now, "elapsed_s": el, "node": ns.node, "pid": p.pid, "rss_bytes": p.rss_bytes,
                                "fd_count": p.fd_count, "threads": p.threads, "phase": phase})
            key = (ns.node, p.pid)
            if p.rss_bytes is not None:
                growth = self.trends.add_rss(key, now, float(p.rss_bytes)).growth
                if growth is not None and growth > self.s.rss_alarm_bytes and key not in self._alarmed:
                    self._alarmed.add(key)
                    self.anomaly(f"scheduler RSS on {ns.node} (pid {p.pid}) grew {mib(growth)} so far",
                                 node=ns.node, pid=p.pid, growth_bytes=growth)
            if p.fd_count is not None:
                self.trends.add_fd(key, now, float(p.fd_count))
        facts = scrape_facts(ns.metrics_text, full=full)
        if ns.metrics_text is not None:
            self.last_scrape[ns.node] = ns.metrics_text
        self.last_facts[ns.node] = facts
        if not facts.ok and ns.node not in self._scrape_bad:
            self._scrape_bad.add(ns.node)
            self.anomaly(f"/metrics on {ns.node} failed (HTTP {facts.http_code})", node=ns.node)
        elif facts.ok:
            self._scrape_bad.discard(ns.node)
        self.metrics.write({
            "ts": now, "elapsed_s": el, "node": ns.node, "ok": 1 if facts.ok else 0,
            "series_total": facts.series_total, "client_series": facts.client_series,
            "client_info_total": len(facts.client_info) if facts.ok else None,
            "client_info_ours": len(facts.ours(self.prefix, self.our_pids)) if facts.ok else None,
            "gpu_used_bytes": facts.gpu_used_sum, "phase": phase,
        })

    def snapshot(self) -> dict[str, Any]:
        """Scheduler pods and the last scrape of every node (baseline.json / final.json content)."""
        good = {n: f for n, f in self.last_facts.items() if f.ok}
        return {
            "schedulers": {sp.node: {"pod": sp.pod, "uid": sp.uid, "restarts": sp.restarts, "ready": sp.ready}
                           for sp in self.last_scheds},
            "scrape_ok": {n: f.ok for n, f in self.last_facts.items()},
            "gpu_used": {n: dict(f.gpu_used) for n, f in good.items()},
            "series_total": {n: f.series_total for n, f in good.items()},
            "client_series": {n: f.client_series for n, f in good.items()},
            "client_info_total": {n: len(f.client_info) for n, f in good.items()},
            "client_info_ours": {n: [list(c) for c in f.ours(self.prefix, self.our_pids)] for n, f in good.items()},
        }

    def save_scrapes(self, label: str) -> None:
        """Keep the last ``/metrics`` page of every node as ``metrics/<label>_<node>.txt``."""
        d = self.soak_dir / "metrics"
        d.mkdir(exist_ok=True)
        for node, text in self.last_scrape.items():
            atomic_write_text(d / f"{label}_{node}.txt", text)

    def recovered(self) -> bool:
        """Every node scraped, none shows a client series of ours, and every GPU's memory is back within
        ``gpu_tolerance_bytes`` of the baseline."""
        base = self.baseline.get("gpu_used") or {}
        for node, facts in self.last_facts.items():
            if not facts.ok or facts.ours(self.prefix, self.our_pids):
                return False
            for gpu, used in facts.gpu_used:
                ref = (base.get(node) or {}).get(gpu)
                if ref is not None and used > ref + self.s.gpu_tolerance_bytes:
                    return False
        return bool(self.last_facts)
