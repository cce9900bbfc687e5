"""GPU faults injected into one client (docs/faults.md "Injected faults"; seed 003, hardware fault injection).

One specification, ``<kind>:after_calls=N`` or ``<kind>:after_s=S``, optionally ``:gpu=<UUID|index>``, is
understood by both injectors of the repository:

* the lab's simulated GPU (``tests/lab/simgpu_src/simcuda.c``) reads it from ``SIMGPU_FAULT``: it fails the
  driver call, writes the matching ``NVRM: Xid`` line to the node's kernel log and raises the GPU's health
  counters (ECC, lost);
* the CUDA error-injection shim (``workloads/faultshim/``) reads it from ``CUDA_FAULT_INJECT`` on a real
  GPU: it returns the error from the wrapped driver call without touching the hardware (no Xid, no ECC
  counter moves: nothing happened to the GPU).

Counted calls are kernel launches, synchronisations and synchronous copies; with ``after_calls=N`` the first N
succeed and the next one fails, with ``after_s=S`` the first one S seconds or more after ``cuInit``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_STATE_DIR", "KINDS", "SHIM_ENV", "SIM_ENV", "FaultKind", "deployed_shim", "fault_spec"]

#: The simulated GPU's variable (tests/lab/README-simgpu.md) and the shim's (workloads/faultshim/README.md).
SIM_ENV = "SIMGPU_FAULT"
SHIM_ENV = "CUDA_FAULT_INJECT"
#: ``scheduler.state_dir`` when the inventory names none: where ``invoke deploy`` keeps its build, pid files and
#: the error-injection shim on a host-mode GPU host.
DEFAULT_STATE_DIR = "/var/lib/xpushare"


def deployed_shim(state_dir: str | None) -> str:
    """Where ``invoke deploy`` installs the error-injection shim on each GPU host of a host-mode cluster:
    ``<state_dir>/faultshim/libcuda.so.1`` (``state_dir`` None: :data:`DEFAULT_STATE_DIR`); FAIL-005..007 look
    for it there (docs/faults.md "Where the fault comes from")."""
    return f"{(state_dir or DEFAULT_STATE_DIR).rstrip('/')}/faultshim/libcuda.so.1"


@dataclass(frozen=True)
class FaultKind:
    """One injectable fault: the CUDA error the failing call returns (code and name), the Xid the simulated
    GPU logs, whether the error is sticky for the process's context (every later call fails the same way) and
    whether the device is lost for every process (Xid 79)."""

    name: str
    cuda_error: int
    cuda_error_name: str
    description: str
    """cuGetErrorString's text (what PyTorch prints: ``CUDA error: <description>``)."""
    xid: int
    sticky: bool = True
    device_lost: bool = False


KINDS: dict[str, FaultKind] = {
    k.name: k
    for k in (
        FaultKind("illegal-address", 700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered",
                  31),
        FaultKind("ecc-uncorrectable", 214, "CUDA_ERROR_ECC_UNCORRECTABLE", "uncorrectable ECC error encountered",
                  48),
        FaultKind("launch-failure", 719, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure", 13),
        FaultKind("device-lost", 999, "CUDA_ERROR_UNKNOWN", "unknown error", 79, sticky=False, device_lost=True),
    )
}


def fault_spec(kind: str, *, after_calls: int | None = None, after_s: float | None = None,
               gpu: str | None = None) -> str:
    """The specification string for ``kind`` (a key of :data:`KINDS`): exactly one of ``after_calls`` (calls
    that succeed first, >= 0) and ``after_s`` (seconds after ``cuInit``, >= 0); ``gpu`` a UUID or index.

    Raises:
        ValueError: an unknown kind, both or neither trigger, a negative trigger, a ``:`` in ``gpu``.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown GPU fault kind {kind!r} (known: {', '.join(KINDS)})")
    if (after_calls is None) == (after_s is None):
        raise ValueError("a GPU fault needs exactly one of after_calls and after_s")
    if after_calls is not None:
        if after_calls < 0:
            raise ValueError(f"after_calls must be >= 0, not {after_calls}")
        spec = f"{kind}:after_calls={int(after_calls)}"
    else:
        assert after_s is not None
        if after_s < 0:
            raise ValueError(f"after_s must be >= 0, not {after_s}")
        spec = f"{kind}:after_s={after_s:g}"
    if gpu is not None:
        if ":" in gpu or not gpu:
            raise ValueError(f"bad gpu {gpu!r} for a GPU fault")
        spec += f":gpu={gpu}"
    return spec
