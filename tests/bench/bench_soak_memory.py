"""Benchmark: the soak orchestrator's own memory over 10,000 sampling rounds (issue: < 20 MB of RSS growth).

The real :class:`xpushare.soak.loop.SoakLoop` runs against a fake two-node cluster in virtual time (its
clock and sleep are injected), as fast as the CPU allows: every tick parses a realistic ``/metrics`` page
(32 clients per node, ~500 series), writes the CSV/JSONL series, and the loop runs rounds of 32 pods,
quota changes, progress lines, checkpoints and interim reports like a 24 h STAB-002/003 soak would.
RSS is read from ``/proc/self/status`` after a warm-up of ``--warmup`` ticks and at the end::

    python tests/bench/bench_soak_memory.py [--ticks 10000] [--warmup 500] [--nodes 2] [--clients 32]

Prints one line per 1000 ticks and a summary; exits 1 when the growth reaches ``--limit-mb`` (20).
Results: docs/benchmarks-stability.md.
"""

from __future__ import annotations

import argparse
import io
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from xpushare.model.workload import WorkloadRecord, WorkloadSpec  # noqa: E402
from xpushare.soak.checkpoint import Checkpoint  # noqa: E402
from xpushare.soak.loop import SoakLoop, SoakSettings  # noqa: E402
from xpushare.soak.ops import NodeSample, ProcSample, SchedPod  # noqa: E402

T0 = 1_795_000_000.0


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def clock(self) -> float:
        return self.t

    def mono(self) -> float:
        return self.t - T0

    def sleep(self, dt: float) -> None:
        self.t += max(dt, 0.001)


def page(node: str, clients: int, rng: random.Random) -> str:
    """A /metrics page shaped like the exporter's: GPU rows, per-client families, counters."""
    out = []
    gpus = [f"GPU-{node}-{i}" for i in range(8)]
    for fam in ("gpu_memory_used_bytes", "gpu_memory_total_bytes", "gpu_utilization_ratio", "gpu_process_count"):
        out += [f"# HELP xpushare_{fam} x", f"# TYPE xpushare_{fam} gauge"]
        out += [f'xpushare_{fam}{{gpu_uuid="{g}",gpu_index="{i}"}} {rng.random() * 1e9:.0f}' for i, g in
                enumerate(gpus)]
    for fam in ("client_info", "client_managed_allocated_bytes", "client_memory_quota_bytes",
                "client_core_quota_config_percent", "client_core_quota_effective_percent",
                "client_core_window_usage_ms", "client_core_window_limit_ms", "client_throttled",
                "client_quota_debt_ms", "client_nvml_used_bytes",
                "client_core_usage_ratio", "client_pending_drop", "client_memory_quota_exceeded"):
        out += [f"# HELP xpushare_{fam} x", f"# TYPE xpushare_{fam} gauge"]
        out += [f'xpushare_{fam}{{namespace="default",pod="stab-002-r1-{c}",client_id="{c:016x}",'
                f'gpu_uuid="{gpus[c % 8]}"}} {rng.randint(0, 10**9)}' for c in range(clients)]
    out += ["# HELP xpushare_scheduler_messages_total x", "# TYPE xpushare_scheduler_messages_total counter"]
    out += [f'xpushare_scheduler_messages_total{{type="T{i}"}} {rng.randint(0, 10**6)}' for i in range(14)]
    return "\n".join(out) + "\n\nHTTP_CODE=200\nCONTENT_TYPE=text/plain; version=0.0.4; charset=utf-8\n"


class FakeCluster:
    def __init__(self, clock: Clock, nodes: int, clients: int) -> None:
        self.clock = clock
        self.nodes = [f"node{i}" for i in range(1, nodes + 1)]
        self.clients = clients
        self.rng = random.Random(1)
        self.pages = {n: page(n, clients, self.rng) for n in self.nodes}  # re-parsed every tick
        self.pods: dict[str, float] = {}
        self.ticks = 0

    def scheduler_pods(self) -> list[SchedPod]:
        return [SchedPod(n, f"sched-{n}", f"uid-{n}", 0, True, "10.0.0.1") for n in self.nodes]

    def sample(self, pods: Any) -> list[NodeSample]:
        self.ticks += 1
        rss = 30 * 2**20 + self.rng.randint(0, 2**16)
        return [NodeSample(n, (ProcSample(1000 + i, rss, 40 + self.rng.randint(0, 3), 9),), self.pages[n])
                for i, n in enumerate(self.nodes)]

    def start_pods(self, specs: Any) -> None:
        for s in specs:
            self.pods[s.name] = self.clock.t

    def poll_pods(self) -> list[WorkloadRecord]:
        out = []
        for name, created in self.pods.items():
            age = self.clock.t - created
            phase = "Pending" if age < 5 else ("Running" if age < 120 else "Succeeded")
            out.append(WorkloadRecord(name, phase, 0 if phase == "Succeeded" else None, self.nodes[0], None,
                                 created + 5 if age >= 5 else None, created + 120 if age >= 120 else None))
        return out

    def delete_pods(self, timeout_s: float) -> None:
        self.pods.clear()

    def annotate(self, pod: str, annotations: dict[str, str]) -> float:
        return self.clock.t

    def pod_log(self, pod: str) -> str:
        return ""

    def rotate_logs(self, dest: Path, index: int, *, since: float | None = None) -> list[Path]:
        return []

    def harvest_previous(self, dest: Path) -> list[Path]:
        return []

    def end_round(self) -> None:
        pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ticks", type=int, default=10_000)
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--limit-mb", type=float, default=20.0)
    args = parser.parse_args()
    clock = Clock()
    cluster = FakeCluster(clock, args.nodes, args.clients)
    interval = 1.0
    # Bounded by virtual time: enough for ``--ticks`` samples (each tick is one sample interval).
    settings = SoakSettings(duration_s=args.ticks * interval, max_rounds=None, sample_interval_s=interval, poll_s=0.5,
                            progress_s=60.0, interim_s=3600.0, checkpoint_s=60.0, log_rotate_s=3600.0,
                            quota_interval_s=300.0, quota_key="core", quota_cycle=("60", "90", "30"),
                            round_timeout_s=3600.0, settle_s=5.0)

    def mix(r: int) -> list[WorkloadSpec]:
        return [WorkloadSpec(name=f"stab-002-r{r}-{i}", workload="w2_medium_add", core_limit=30) for i in range(32)]

    marks: dict[str, float] = {}
    base = Path(tempfile.mkdtemp(prefix="xpushare-soak-bench-"))
    ck = Checkpoint("STAB-002", "bench", "fake", settings.duration_s, None)
    out = io.StringIO()
    loop = SoakLoop(cluster, base / "soak", settings, mix, ck, ours_prefix="stab-002-", out=out,
                    clock=clock.clock, monotonic=clock.mono, sleep=clock.sleep)
    original_tick = loop.sampler.tick
    start = time.perf_counter()

    def tick(phase: str, *, full: bool = False) -> bool:
        ok = original_tick(phase, full=full)
        n = cluster.ticks
        if n == args.warmup:
            marks["warm"] = rss_bytes()
            marks["warm_t"] = time.perf_counter()
        if n and n % 1000 == 0:
            out.seek(0)
            out.truncate()  # progress lines would otherwise accumulate in this in-memory stream
            print(f"tick {n:6d}  rss {rss_bytes() / 2**20:7.1f} MiB  {time.perf_counter() - start:6.1f} s", flush=True)
        return ok

    loop.sampler.tick = tick  # type: ignore[method-assign]
    loop.run()
    end_rss = rss_bytes()
    elapsed = time.perf_counter() - start
    growth = end_rss - marks["warm"]
    disk = sum(p.stat().st_size for p in (base / "soak").rglob("*") if p.is_file())
    ok = growth < args.limit_mb * 2**20
    print(f"ticks {cluster.ticks} (rounds {ck.rounds}, nodes {args.nodes}, {args.clients} clients/node) in "
          f"{elapsed:.1f} s ({cluster.ticks / elapsed:.0f} ticks/s); RSS after {args.warmup} ticks "
          f"{marks['warm'] / 2**20:.1f} MiB, at the end {end_rss / 2**20:.1f} MiB: growth {growth / 2**20:.2f} MiB "
          f"(limit {args.limit_mb:g} MB) -> {'PASS' if ok else 'FAIL'}; soak dir {disk / 2**20:.1f} MiB on disk "
          f"({base})")
    if os.environ.get("XPUSHARE_BENCH_KEEP") != "1":
        import shutil

        shutil.rmtree(base, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
