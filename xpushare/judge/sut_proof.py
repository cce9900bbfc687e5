"""Whether another GPU-sharing system (HAMi-core, NVIDIA MPS) was in each workload's path, from its own lines.

A quota a workload was never under proves nothing about the system: without the system's own evidence of the
workload the case is ERROR, premise ``sut`` (never PASS, never FAIL). What counts, per system
(:mod:`xpushare.inventory.sut_profiles`, ``proof``):

* ``hami-core``: the workload's log holds ``[HAMI-core Msg(<its pid>:...)]: Initializing.....`` (libvgpu.so ran its
  ``preInit`` in that process). Without its pid in the record, any such line.
* ``mps``: the MPS server's log excerpt stored as ``scheduler.log`` (the inventory's ``scheduler.log_file`` =
  ``<state_dir>/log/server.log``) holds ``New client <the workload's pid> connected``.

The project's own SUT (``xpushare``, ``nvshare``) is judged by :mod:`xpushare.judge.sut_path` where a case asks
for it. Parsers: :mod:`xpushare.parsers.sut_lines`. Source: docs/isolation.md §cross-SUT comparison.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from xpushare.evidence.store import Evidence
from xpushare.model.premises import SUT
from xpushare.model.verdict import Check
from xpushare.parsers.sut_lines import hami_lines, mps_client_events

__all__ = ["EXPRESSION", "check_system_in_path"]

# the inventory's sut values (xpushare.inventory.sut_profiles; the judge layer reads them from plan.json only)
HAMI_CORE = "hami-core"
MPS = "mps"

EXPRESSION = "every workload shows in the system's own evidence (docs/isolation.md §cross-SUT comparison)"


def _hami(ev: Evidence, pods: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
    seen: dict[str, Any] = {}
    missing: list[str] = []
    for pod in pods:
        rec = ev.pod(pod)
        pid = rec.host_pid if rec is not None else None
        inits = [x for x in hami_lines(ev.logs.get(pod) or "") if x.message.startswith("Initializing")]
        mine = [x for x in inits if pid is None or x.pid == pid]
        seen[pod] = {"host_pid": pid, "initializing_pids": sorted({x.pid for x in inits})}
        if not mine:
            missing.append(f"{pod} (pid {pid if pid is not None else '?'}: no '[HAMI-core Msg(...)]: Initializing' "
                           "line of its own; is libvgpu.so preloaded, LIBCUDA_LOG_LEVEL >= 2?)")
    return seen, missing


def _mps(ev: Evidence, pods: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
    text = ev.text("scheduler.log")
    clients = {e.client_pid for e in mps_client_events(text or "") if e.connected}
    seen: dict[str, Any] = {"server_log": text is not None, "clients": sorted(clients)}
    missing: list[str] = []
    if text is None:
        return seen, ["no MPS server log stored (set scheduler.log_file to <state_dir>/log/server.log)"]
    for pod in pods:
        rec = ev.pod(pod)
        pid = rec.host_pid if rec is not None else None
        if pid is None or pid not in clients:
            missing.append(f"{pod} (pid {pid if pid is not None else '?'} never connected to an MPS server: is the "
                           "daemon running with the pipe directory the workload got?)")
    return seen, missing


def check_system_in_path(ev: Evidence, plan: Mapping[str, Any], pods: Sequence[str]) -> Check | None:
    """Check ``sut_in_path`` for the started ``pods`` of a case whose ``plan["sut"]`` is ``hami-core`` or ``mps``
    (None for any other system: nothing to add). ok=None names the premise ``sut`` and each workload not seen."""
    sut = plan.get("sut")
    if sut == HAMI_CORE:
        seen, missing = _hami(ev, pods)
    elif sut == MPS:
        seen, missing = _mps(ev, pods)
    else:
        return None
    values = {"sut": sut, "seen": seen}
    if missing:
        return Check("sut_in_path", EXPRESSION, values, None,
                     f"premise unmet: {SUT}: {sut} not shown in the workloads' path: " + "; ".join(missing))
    return Check("sut_in_path", EXPRESSION, values, True)
