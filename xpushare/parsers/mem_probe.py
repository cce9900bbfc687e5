"""The memory probe's lines (``workloads/mem_probe.py``): one per measurement of one allocation path.

Input as :mod:`xpushare.parsers.pod_log` takes it (``kubectl logs [--timestamps]`` or a host-mode process's
output). Pure; never raises: a line that does not parse is skipped (a probe that printed no line is missing
evidence, which the judgment reports as such). The format (one line, ``error`` last and free text)::

    [XPUSHARE][MEM_PROBE] path=<path> round=<int> phase=<label> elapsed_s=<float> status=ok|unavailable|error
        step_bytes=<int> cap_bytes=<int> accepted_bytes=<int> refused_bytes=<int> mem_free_bytes=<int>
        mem_total_bytes=<int> detail=<token> error=<text>

Source: the probe's docstring (the writer); docs/isolation.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from xpushare.parsers.pod_log import timestamped_lines

__all__ = ["MEM_PROBE_PREFIX", "MemProbeLine", "parse_text"]

MEM_PROBE_PREFIX = "[XPUSHARE][MEM_PROBE]"
"""The marker of a probe line (also what a case waits for in a pod's output)."""

_LINE_RE = re.compile(
    r"\[XPUSHARE\]\[MEM_PROBE\] path=(?P<path>\S+) round=(?P<round>\d+) phase=(?P<phase>\S+) "
    r"elapsed_s=(?P<elapsed>[0-9.]+) status=(?P<status>ok|unavailable|error) step_bytes=(?P<step>\d+) "
    r"cap_bytes=(?P<cap>\d+) accepted_bytes=(?P<accepted>\d+) refused_bytes=(?P<refused>\d+) "
    r"mem_free_bytes=(?P<free>-?\d+) mem_total_bytes=(?P<total>-?\d+) detail=(?P<detail>\S+) error=(?P<error>.*)$"
)


@dataclass(frozen=True)
class MemProbeLine:
    """One measurement. Bytes are bytes; ``mem_free``/``mem_total`` are -1 when the probe could not ask.

    ``refused_bytes`` 0 (``error`` ``"none"``) means the probe stopped at ``cap_bytes`` without a refusal.
    ``timestamp`` is the line's ``kubectl logs --timestamps`` prefix, None without one; ``elapsed_s`` counts
    from the probe's start. ``detail``: ``parent:<bytes>,child:<bytes>`` on the child-process path, else ``-``.
    """

    path: str
    round: int
    phase: str
    elapsed_s: float
    status: str
    step_bytes: int
    cap_bytes: int
    accepted_bytes: int
    refused_bytes: int
    mem_free: int
    mem_total: int
    detail: str
    error: str
    timestamp: datetime | None = None

    @property
    def refused(self) -> bool:
        """The path refused a block (as opposed to reaching the cap)."""
        return self.refused_bytes > 0


def parse_text(text: str) -> list[MemProbeLine]:
    """Every probe line of a log, in order."""
    out: list[MemProbeLine] = []
    for ts, line in timestamped_lines(text):
        if MEM_PROBE_PREFIX not in line:
            continue
        m = _LINE_RE.search(line)
        if m is None:
            continue
        try:
            elapsed = float(m.group("elapsed"))
        except ValueError:
            continue
        out.append(
            MemProbeLine(
                path=m.group("path"),
                round=int(m.group("round")),
                phase=m.group("phase"),
                elapsed_s=elapsed,
                status=m.group("status"),
                step_bytes=int(m.group("step")),
                cap_bytes=int(m.group("cap")),
                accepted_bytes=int(m.group("accepted")),
                refused_bytes=int(m.group("refused")),
                mem_free=int(m.group("free")),
                mem_total=int(m.group("total")),
                detail=m.group("detail"),
                error=m.group("error").strip(),
                timestamp=ts,
            )
        )
    return out
