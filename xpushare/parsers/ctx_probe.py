"""The context probe's line (``workloads/ctx_probe.py``): how long one process waited for its first usable CUDA
context, step by step.

Input as :mod:`xpushare.parsers.pod_log` takes it (``kubectl logs [--timestamps]`` or a host-mode process's
output). Pure; never raises: a line that does not parse is skipped (a probe that printed no line is missing
evidence, which the judgment reports as such). The format (one line, ``error`` last and free text)::

    [XPUSHARE][CTX_PROBE] status=ok|unavailable|error init_ms=<float> context_ms=<float> alloc_ms=<float>
        launch_ms=<float> total_ms=<float> device=sim|gpu|- error=<text>

Milliseconds; a step the probe did not reach is ``nan``. Source: the probe's docstring (the writer).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from xpushare.parsers.pod_log import timestamped_lines

__all__ = ["CTX_PROBE_PREFIX", "STEPS", "CtxProbeLine", "parse_text"]

CTX_PROBE_PREFIX = "[XPUSHARE][CTX_PROBE]"
"""The marker of a probe line."""
STEPS = ("init_ms", "context_ms", "alloc_ms", "launch_ms")
"""The timed steps, in the order a program takes them."""

_F = r"[0-9.]+(?:[eE][-+]?\d+)?|inf|nan"
_LINE_RE = re.compile(
    r"\[XPUSHARE\]\[CTX_PROBE\] status=(?P<status>ok|unavailable|error) "
    + " ".join(rf"{k}=(?P<{k}>{_F})" for k in (*STEPS, "total_ms"))
    + r" device=(?P<device>\S+) error=(?P<error>.*)$"
)


@dataclass(frozen=True)
class CtxProbeLine:
    """One process's wait for its first context, in milliseconds per step (NaN: not reached)."""

    status: str
    init_ms: float
    context_ms: float
    alloc_ms: float
    launch_ms: float
    total_ms: float
    device: str
    error: str

    def steps(self) -> dict[str, float]:
        """``step -> ms`` in :data:`STEPS` order, then ``total_ms``."""
        return {"init_ms": self.init_ms, "context_ms": self.context_ms, "alloc_ms": self.alloc_ms,
                "launch_ms": self.launch_ms, "total_ms": self.total_ms}

    @property
    def complete(self) -> bool:
        """``status=ok`` and every step measured."""
        return self.status == "ok" and not any(math.isnan(v) for v in self.steps().values())


def parse_text(text: str) -> list[CtxProbeLine]:
    """Every probe line of a log, in order."""
    out: list[CtxProbeLine] = []
    for _ts, line in timestamped_lines(text):
        if CTX_PROBE_PREFIX not in line:
            continue
        m = _LINE_RE.search(line)
        if m is None:
            continue
        values = {k: float(m.group(k)) for k in (*STEPS, "total_ms")}
        out.append(CtxProbeLine(status=m.group("status"), device=m.group("device"), error=m.group("error"),
                                **values))
    return out
