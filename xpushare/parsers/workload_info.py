"""The workloads' INFO line: which device, GPU model and sizes a workload ran with.

Written once to stderr before the work by every workload script (``_common.format_info``, workloads/README.md
"Output contract"): ``[XPUSHARE][INFO] workload=<key> device=<device> name=<repr> model=<repr>
<flag>=<value> ...``. Pod logs hold stderr and stdout together, possibly with kubectl timestamps.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

_INFO_RE = re.compile(r"\[XPUSHARE\]\[INFO\] (?P<rest>workload=.*)$")


@dataclass(frozen=True)
class WorkloadInfo:
    """What one workload run said about itself.

    Attributes:
        workload: the defaults-table key (``w6``, ``w2`` ...).
        device: ``cuda:0``, ``cpu``, ``cudadrv:0`` ...
        name: the device name (``NVIDIA H100 80GB HBM3``).
        model: the defaults-table row used (``H100``; an unknown GPU gets the nearest row).
        sizes: the effective size flags, e.g. ``{"n": 14000.0, "iters": 60000.0}``.
    """

    workload: str
    device: str
    name: str
    model: str
    sizes: dict[str, float] = field(default_factory=dict)


def parse_info(text: str) -> WorkloadInfo | None:
    """The first INFO line of a pod log, or None when there is none or it is malformed (raises nothing)."""
    for raw in text.splitlines():
        m = _INFO_RE.search(raw.split("\r")[-1])
        if not m:
            continue
        try:
            tokens = shlex.split(m.group("rest"))
        except ValueError:
            return None
        pairs = dict(t.split("=", 1) for t in tokens if "=" in t)
        if not {"workload", "device", "name", "model"} <= pairs.keys():
            return None
        sizes: dict[str, float] = {}
        for key, value in pairs.items():
            if key in ("workload", "device", "name", "model"):
                continue
            try:
                sizes[key] = float(value)
            except ValueError:
                continue
        return WorkloadInfo(pairs["workload"], pairs["device"], pairs["name"], pairs["model"], sizes)
    return None
