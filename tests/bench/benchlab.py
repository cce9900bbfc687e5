"""What the fleet benchmarks share: a tool timed as a fresh process (wall time, and peak RSS through GNU
``time -v``), an inventory of lab sshd hosts (tests/lab/sshd.py), and signals that stop the lab.

Used by ``bench_adhoc.py`` and ``bench_envcheck.py``; not a test module.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.lab.sshd import LabHost  # noqa: E402

GNU_TIME = Path("/usr/bin/time")
_RSS = re.compile(r"Maximum resident set size \(kbytes\): (\d+)")


@dataclass(frozen=True)
class Measure:
    """One timed run: wall seconds, peak RSS in KiB (the largest of the process and its waited-for children; None
    without GNU time), and what it printed on stdout."""

    wall_s: float
    peak_rss_kib: int | None
    stdout: str


def timed(argv: Sequence[str], env: Mapping[str, str] | None = None, ok: Collection[int] = (0,)) -> float:
    """Seconds ``argv`` took, run from the repository root; RuntimeError when its exit status is not in ``ok``."""
    return measured(argv, env, ok, rss=False).wall_s


def measured(argv: Sequence[str], env: Mapping[str, str] | None = None, ok: Collection[int] = (0,), *,
             rss: bool = True) -> Measure:
    """Run ``argv`` from the repository root and measure it (:class:`Measure`).

    The peak RSS is GNU ``time -v``'s "Maximum resident set size" (``/usr/bin/time``). Raises RuntimeError (with
    the output's tail) when the exit status is not in ``ok``.
    """
    wrap = rss and GNU_TIME.exists()
    with tempfile.NamedTemporaryFile("r", suffix=".time") as report:
        full = [str(GNU_TIME), "-v", "-o", report.name, *argv] if wrap else list(argv)
        start = time.monotonic()
        proc = subprocess.run(full, cwd=ROOT, capture_output=True, text=True, env=None if env is None else dict(env),
                              timeout=1200)
        took = time.monotonic() - start
        found = _RSS.search(report.read()) if wrap else None
    if proc.returncode not in ok:
        raise RuntimeError(f"{argv[0]} failed ({proc.returncode}): {proc.stdout[-800:]} {proc.stderr[-500:]}")
    return Measure(took, int(found.group(1)) if found else None, proc.stdout)


def load_average() -> float:
    """The 1-minute load average of this machine."""
    return float(Path("/proc/loadavg").read_text().split()[0])


def _stop_on_signal(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def stop_on_signals() -> None:
    """SIGTERM/SIGHUP (``timeout``, a closed terminal) end the run as Ctrl-C does, so the caller's ``finally``
    stops the lab's sshd daemons (without it a timeout left them all running)."""
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _stop_on_signal)


def write_inventory(path: Path, cluster: str, hosts: Sequence[LabHost], known_hosts: Path,
                    extra: Mapping[str, Any] | None = None) -> Path:
    """An inventory of one ``host``-mode cluster over the lab ``hosts`` (role ``gpu``, host keys checked against
    ``known_hosts``); ``extra`` adds cluster keys (``python``, ``params`` ...)."""
    ssh = {"host_key_policy": "strict", "known_hosts": str(known_hosts), "identity": str(hosts[0].identity),
           "user": hosts[0].user}
    spec = {"mode": "host", "ssh": ssh, **(extra or {}),
            "hosts": {h.name: {"address": h.address, "port": h.port, "roles": ["gpu"]} for h in hosts}}
    path.write_text(json.dumps({"clusters": {cluster: spec}}))
    return path
