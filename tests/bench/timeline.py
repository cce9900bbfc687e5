"""When each test ran on which pytest-xdist worker: a pytest plugin that records it, and a summary of a record.

Record (the README's test command with the plugin; ``XPUSHARE_TIMELINE`` names the file, appended to)::

    XPUSHARE_TIMELINE=/tmp/timeline.jsonl python -m pytest -n 4 --dist loadfile --no-loadscope-reorder \\
        -p tests.bench.timeline ...

One JSON line per test phase: ``{"w": worker, "id": node id, "when": "setup"|"call"|"teardown", "start": s,
"stop": s}`` (Unix seconds). Summarise::

    python -m tests.bench.timeline /tmp/timeline.jsonl

prints per module its worker, start, end and span (seconds from the first test), the modules that ended last, and
per worker when its last test ended: what shows a worker left alone with a long module at the end, or a module
handed out late (tests/bench/ci_time.md, fifth round).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest


def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> None:
    path = os.environ.get("XPUSHARE_TIMELINE")
    if not path:
        return
    line = json.dumps({"w": os.environ.get("PYTEST_XDIST_WORKER", "-"), "id": item.nodeid, "when": call.when,
                       "start": call.start, "stop": call.stop}) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line.encode())  # one write per line (O_APPEND): the workers' lines never interleave
    finally:
        os.close(fd)


def summary(records: list[dict[str, Any]], *, min_span_s: float = 20.0) -> list[str]:
    """Lines: the modules that spanned at least ``min_span_s`` seconds (worker, start, end, span; seconds from the
    first test's start), then each worker's last end."""
    t0 = min(r["start"] for r in records)
    modules: dict[str, dict[str, Any]] = {}
    for r in records:
        m = modules.setdefault(r["id"].split("::")[0], {"w": r["w"], "start": r["start"], "stop": r["stop"]})
        m["start"], m["stop"] = min(m["start"], r["start"]), max(m["stop"], r["stop"])
    lines = [f"{'worker':6} {'start':>7} {'end':>7} {'span':>6}  module"]
    for name, m in sorted(modules.items(), key=lambda kv: kv[1]["start"]):
        start, stop = m["start"] - t0, m["stop"] - t0
        if stop - start >= min_span_s:
            lines.append(f"{m['w']:6} {start:7.0f} {stop:7.0f} {stop - start:6.0f}  {name}")
    ends: dict[str, float] = {}
    for r in records:
        ends[r["w"]] = max(ends.get(r["w"], 0.0), r["stop"] - t0)
    lines += [f"{w}: last test ended at {end:.0f} s" for w, end in sorted(ends.items())]
    return lines


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.bench.timeline TIMELINE.jsonl", file=sys.stderr)
        return 2
    records = [json.loads(line) for line in Path(argv[0]).read_text(encoding="utf-8").splitlines() if line.strip()]
    print("\n".join(summary(records)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
