"""The compute probe's lines (``workloads/compute_probe.py``): one per interval of one kernel launch path.

Input as :mod:`xpushare.parsers.pod_log` takes it (``kubectl logs [--timestamps]`` or a host-mode process's
output). Pure; never raises: a line that does not parse is skipped (a probe that printed no line is missing
evidence, which the judgment reports as such). The format (one line, ``error`` last and free text)::

    [XPUSHARE][COMPUTE_PROBE] path=<path> interval=<int> phase=<label> elapsed_s=<float>
        status=ok|unavailable|error kernels=<int> batches=<int> wall_s=<float> kernels_per_s=<float>
        kernel_ms_events=<float> kernel_ms_wall=<float> busy_events=<float> busy_wall=<float>
        device=sim|gpu|- error=<text>

Source: the probe's docstring (the writer); docs/isolation.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from xpushare.parsers.pod_log import timestamped_lines

__all__ = ["COMPUTE_PROBE_PREFIX", "ComputeProbeLine", "parse_text"]

COMPUTE_PROBE_PREFIX = "[XPUSHARE][COMPUTE_PROBE]"
"""The marker of a probe line."""

_F = r"[0-9.]+(?:[eE][-+]?\d+)?|inf|nan"
_LINE_RE = re.compile(
    r"\[XPUSHARE\]\[COMPUTE_PROBE\] path=(?P<path>\S+) interval=(?P<interval>\d+) phase=(?P<phase>\S+) "
    rf"elapsed_s=(?P<elapsed>{_F}) status=(?P<status>ok|unavailable|error) kernels=(?P<kernels>\d+) "
    rf"batches=(?P<batches>\d+) wall_s=(?P<wall>{_F}) kernels_per_s=(?P<kps>{_F}) "
    rf"kernel_ms_events=(?P<kev>{_F}) kernel_ms_wall=(?P<kwall>{_F}) busy_events=(?P<bev>{_F}) "
    rf"busy_wall=(?P<bwall>{_F}) device=(?P<device>\S+) error=(?P<error>.*)$"
)


@dataclass(frozen=True)
class ComputeProbeLine:
    """One interval. Times in seconds, ``kernel_ms_*`` in milliseconds, ``busy_*`` fractions (0..1).

    ``kernel_ms_events``: the shortest batch per kernel by the GPU's events; ``kernel_ms_wall``: the same by the
    process's clock (launches included). ``busy_*`` = kernels x kernel_ms_* / wall_s. ``timestamp`` is the
    line's ``kubectl logs --timestamps`` prefix, None without one.
    """

    path: str
    interval: int
    phase: str
    elapsed_s: float
    status: str
    kernels: int
    batches: int
    wall_s: float
    kernels_per_s: float
    kernel_ms_events: float
    kernel_ms_wall: float
    busy_events: float
    busy_wall: float
    device: str
    error: str
    timestamp: datetime | None = None


def parse_text(text: str) -> list[ComputeProbeLine]:
    """Every probe line of a log, in order."""
    out: list[ComputeProbeLine] = []
    for ts, line in timestamped_lines(text):
        if COMPUTE_PROBE_PREFIX not in line:
            continue
        m = _LINE_RE.search(line)
        if m is None:
            continue
        try:
            floats = [float(m.group(k)) for k in ("elapsed", "wall", "kps", "kev", "kwall", "bev", "bwall")]
        except ValueError:
            continue
        elapsed, wall, kps, kev, kwall, bev, bwall = floats
        out.append(
            ComputeProbeLine(
                path=m.group("path"),
                interval=int(m.group("interval")),
                phase=m.group("phase"),
                elapsed_s=elapsed,
                status=m.group("status"),
                kernels=int(m.group("kernels")),
                batches=int(m.group("batches")),
                wall_s=wall,
                kernels_per_s=kps,
                kernel_ms_events=kev,
                kernel_ms_wall=kwall,
                busy_events=bev,
                busy_wall=bwall,
                device=m.group("device"),
                error=m.group("error").strip(),
                timestamp=ts,
            )
        )
    return out
