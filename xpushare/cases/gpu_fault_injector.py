"""Which injector makes FAIL-005..007's GPU fault happen, found before any pod starts (docs/faults.md "Where the
fault comes from").

A case about an injected fault means nothing when nothing can inject it: its premise is an injector, and a case
without one SKIPs at once (``premise unmet: fault-injector: ...``), never runs its load to find the fault missing.
In this order:

1. the ``fault_shim`` parameter: the error-injection shim (``workloads/faultshim/``) at that path on every GPU host;
2. ``fault_injector: simulated-gpu``: the lab's simulated GPU injects the fault itself (``SIMGPU_FAULT``);
3. the shim ``invoke deploy`` installed on every GPU host of a host-mode cluster, at
   :func:`~xpushare.model.gpu_faults.deployed_shim` of the cluster's ``scheduler.state_dir``.

The shim is loaded after the client library (``LD_PRELOAD="<sut_lib> <shim>"``), so it needs host mode, where the
tool starts the workload process and knows the library's path; in Kubernetes the preload is the workload image's.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from xpushare.inventory.schema import ClusterSpec
from xpushare.model.errors import XpushareError
from xpushare.model.gpu_faults import SHIM_ENV, SIM_ENV, deployed_shim
from xpushare.transport.base import Host

__all__ = ["INJECTOR_VALUES", "PREMISE", "SIMULATED_GPU", "Injector", "find_injector"]

PREMISE = "premise unmet: fault-injector: "
"""How a SKIP for a missing injector starts (the premise's name is ``fault-injector``)."""
SIMULATED_GPU = "simulated-gpu"
#: Values of the ``fault_injector`` parameter: ``auto`` (the shim, from ``fault_shim`` or ``invoke deploy``) or
#: ``simulated-gpu`` (the lab's GPU injects faults itself; on a real GPU nothing would happen).
INJECTOR_VALUES = ("auto", SIMULATED_GPU)


@dataclass(frozen=True)
class Injector:
    """The injector a case uses: ``via`` (``faultshim`` | ``simulated GPU``), the shim's path on the GPU hosts
    (None for the simulated GPU) and where it was found (``source``, for the plan)."""

    via: str
    shim: str | None
    source: str

    def victim_env(self, sut_lib: str | None, spec: str) -> tuple[tuple[str, str], ...]:
        """The environment that makes a victim fault (``spec``: :func:`~xpushare.model.gpu_faults.fault_spec`)."""
        if self.shim is None:
            return ((SIM_ENV, spec),)
        return (("LD_PRELOAD", f"{sut_lib} {self.shim}"), (SHIM_ENV, spec))

    def describe(self) -> dict[str, Any]:
        return {"via": self.via, "shim": self.shim, "source": self.source}


def _missing_on(hosts: Mapping[str, Host], path: str) -> list[str]:
    """The hosts where ``path`` is not a file (``test -f``). Raises TransportError (a host that cannot be asked:
    a prerequisite of the node, the case is ERROR)."""
    return [name for name, host in hosts.items() if not host.run(["test", "-f", path], timeout=30).ok]


def find_injector(cluster: ClusterSpec, params: Mapping[str, Any],
                  gpu_hosts: Callable[[], Mapping[str, Host]]) -> Injector | str:
    """The case's :class:`Injector`, or why there is none (the text after :data:`PREMISE`).

    ``gpu_hosts``: the backend's GPU hosts (asked only in host mode). Raises :class:`XpushareError` for a
    ``fault_injector`` value not in :data:`INJECTOR_VALUES`, TransportError when a GPU host cannot be asked.
    """
    choice = str(params.get("fault_injector") or "auto")
    if choice not in INJECTOR_VALUES:
        raise XpushareError(f"fault_injector: {choice!r} is not one of {', '.join(INJECTOR_VALUES)}")
    given = params.get("fault_shim")
    if choice == SIMULATED_GPU and not given:
        return Injector("simulated GPU", None, "fault_injector: simulated-gpu")
    if cluster.is_kubernetes:
        return ("the error-injection shim is loaded after the client library (LD_PRELOAD=\"<client library> <shim>\" "
                "and CUDA_FAULT_INJECT in the victim's container), which a Kubernetes workload image has to provide; "
                "only a simulated GPU injects by itself (fault_injector: simulated-gpu)")
    if not cluster.sut_lib:
        return f"the shim is loaded after the client library, and cluster {cluster.name} names no sut_lib"
    shim = str(given) if given else deployed_shim(cluster.scheduler.state_dir)
    missing = _missing_on(gpu_hosts(), shim)
    if missing:
        if given:
            return f"fault_shim {shlex.quote(shim)} is not a file on {', '.join(missing)}"
        return (f"no fault_shim set and no shim installed by invoke deploy at {shim} on {', '.join(missing)} "
                "(invoke deploy builds it on each GPU host; or set fault_shim)")
    return Injector("faultshim", shim, "fault_shim" if given else f"invoke deploy ({shim})")
