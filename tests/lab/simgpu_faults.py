"""The simulated GPU's injected faults from the lab's side: read a device's health counters.

The injector is in ``tests/lab/simgpu_src/simcuda.c`` (``SIMGPU_FAULT``, README-simgpu.md "Injected faults");
it raises ``struct simgpu_health``, the last member of the device's state file (simgpu.h), which this module
reads without the library (for tests; NVML and nvidia-smi report the same counters).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

from tests.lab.simgpu import state_dir

#: struct simgpu_health: 4 x uint64 ECC counters, 4 x uint32 (retired_pages_dbe, remap_failure, lost, reserved1).
_HEALTH = struct.Struct("<4Q4I")


@dataclass(frozen=True)
class Health:
    """A device's health counters (simgpu.h ``struct simgpu_health``)."""

    ecc_volatile_corrected: int = 0
    ecc_volatile_uncorrected: int = 0
    ecc_aggregate_corrected: int = 0
    ecc_aggregate_uncorrected: int = 0
    retired_pages_dbe: int = 0
    remap_failure: int = 0
    lost: int = 0


def read_health(config: str | os.PathLike[str], uuid: str) -> Health:
    """The health of device ``uuid`` of ``config``: zeros when its state file does not exist yet."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in uuid)
    path = state_dir(config) / f"{safe}.state"
    if not path.exists():
        return Health()
    data = Path(path).read_bytes()
    values = _HEALTH.unpack_from(data, len(data) - _HEALTH.size)
    return Health(*values[:7])
