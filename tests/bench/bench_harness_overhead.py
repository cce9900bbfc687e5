"""Benchmark: harness overhead of one case on the ``local`` cluster with a ~2-second workload.

Overhead = the case's wall time (result.json ``duration_s``) minus the workload's own run time (the pod
record's start..finish interval, which includes interpreter start-up). Run on demand, not in pytest:

    python tests/bench/bench_harness_overhead.py [--repeat 7] [--iters N]

It runs FUNC-001 ``--repeat`` times in one run (``--resume`` is not used: each repetition is a new run
id) and prints the median overhead; target: under 1 s. Results: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--n", type=int, default=512)
    parser.add_argument("--iters", type=int, default=7000, help="W2 iterations (about 2 s of CPU at n=512)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="xpushare-overhead-"))
    rows = []
    for i in range(args.repeat):
        run_id = f"overhead-{i}"
        workload = f"workload_args={{w2_medium_add: [--n, '{args.n}', --iters, '{args.iters}', --no-progress]}}"
        subprocess.run(
            [sys.executable, "-m", "invoke", "func", "--cluster", "local", "--case", "FUNC-001", "--run-id", run_id,
             "--root", str(root), "--set", workload],
            cwd=ROOT, check=True, capture_output=True, timeout=600,
        )
        case = root / ".tmplog" / run_id / "xpushare" / "local" / "functional" / "FUNC-001"
        result = json.loads((case / "result.json").read_text())
        pod = json.loads((case / "pods.json").read_text())[0]
        workload_s = pod["finished"] - pod["started"]
        overhead = result["duration_s"] - workload_s
        rows.append((result["duration_s"], workload_s, overhead))
        print(f"case {result['duration_s']:6.2f} s  workload {workload_s:6.2f} s  overhead {overhead:5.2f} s",
              flush=True)
    med = statistics.median(r[2] for r in rows)
    print(f"median overhead {med:.2f} s over {len(rows)} cases (workload median "
          f"{statistics.median(r[1] for r in rows):.2f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
