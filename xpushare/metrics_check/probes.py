"""The under-load part of ``invoke metrics-check``: probe workloads that register with the scheduler being
checked (:class:`~xpushare.backends.k8s_probes.KubeProbeLoad` through kubectl, re-exported here;
:class:`BackendProbeLoad` through any backend) and
:func:`run_load_checks`, which starts them one by one and judges ``/metrics`` with each count.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from xpushare.backends.base import Backend
from xpushare.backends.k8s_probes import DEFAULT_PROBE_IMAGE, PROBE_COMMAND, RUN_LABEL, KubeProbeLoad
from xpushare.evidence.client_match import KEY_POD, ClientMatch, live_matches
from xpushare.metrics_check.checklist import CheckLine, answer_text, check_line, load_checks, shorten
from xpushare.metrics_check.endpoint import HttpResponse
from xpushare.model.errors import XpushareError
from xpushare.model.workload import WorkloadSpec
from xpushare.parsers.metrics import parse_exposition

__all__ = ["DEFAULT_PROBE_IMAGE", "PROBE_COMMAND", "RUN_LABEL", "BackendProbeLoad", "KubeProbeLoad", "ProbeLoad",
           "run_load_checks"]


class ProbeLoad(Protocol):
    """Starts and stops probe workloads that register with the scheduler being checked.

    ``start(index)`` starts probe number ``index`` (1, 2 ...) and returns its pod name once it runs
    (raises :class:`~xpushare.model.errors.XpushareError` when it cannot); ``stop()`` removes every probe
    (idempotent, called in a ``finally``); ``matches(names)`` says how each probe's clients are
    recognised on the page (:func:`xpushare.evidence.client_match.client_match` for the load's mode; called on
    every poll, since a host-mode probe's pid and client id appear after its start); ``core_limit`` is
    the core limit each probe is configured with (``None``: none, so the exporter shows 100).
    """

    core_limit: int | None

    def start(self, index: int) -> str: ...

    def matches(self, names: Sequence[str]) -> list[ClientMatch]: ...

    def stop(self) -> None: ...


@dataclass
class BackendProbeLoad:
    """Probe "pods" through any :class:`~xpushare.backends.base.Backend`: host mode (processes on the
    GPU hosts with the client library preloaded; no annotations, so ``core_limit`` must stay ``None``)
    or a Kubernetes backend (``core_limit`` becomes the annotation, ``node`` pins the pod).

    :meth:`matches` follows the backend's ``mode``: host mode matches by the pid the backend recorded for
    the probe process (``WorkloadRecord.host_pid``) and the ``Client ID`` lines of its output; Kubernetes by
    the pod name (in ``namespace``, None: any)."""

    backend: Backend
    case_dir: Path
    args: tuple[str, ...] = PROBE_COMMAND[2:]
    run_id: str = field(default_factory=lambda: secrets.token_hex(4))
    timeout_s: float = 120.0
    core_limit: int | None = None
    node: str | None = None
    namespace: str | None = None
    _started: bool = False
    _known: dict[str, ClientMatch] = field(default_factory=dict)

    def start(self, index: int) -> str:
        if not self._started:
            self.backend.prepare_run(self.run_id)
            self.backend.begin_case(self.case_dir, "metrics-check")
            self._started = True
        name = f"metrics-check-{index}"
        spec = WorkloadSpec(name=name, workload="w5_quota_probe", args=self.args, core_limit=self.core_limit,
                       node=self.node)
        self.backend.start_pods([spec])
        rec = self.backend.wait_running([name], self.timeout_s)
        if not rec or rec[0].phase != "Running":
            raise XpushareError(f"probe {name} is {rec[0].phase if rec else 'missing'}, not Running")
        return rec[0].name

    def matches(self, names: Sequence[str]) -> list[ClientMatch]:
        """The probes' matches from their current records and output (each kept once nothing more can appear):
        one record poll for every probe not known yet, and only in host mode (a pod name needs none)."""
        unknown = [n for n in names if n not in self._known]
        current = dict(zip(unknown, live_matches(self.backend, unknown, namespace=self.namespace),
                           strict=True))
        for name, found in current.items():
            if found.key == KEY_POD or (found.host_pids and found.client_ids):
                self._known[name] = found
        return [self._known.get(name) or current[name] for name in names]

    def stop(self) -> None:
        if self._started:
            self.backend.cleanup()


def run_load_checks(scrape: Callable[[], HttpResponse], load: ProbeLoad, *, prefix: str | None = None,
                    steps: Sequence[int] = (1, 2), settle_s: float = 60.0, poll_s: float = 1.0,
                    clock: Callable[[], float] = time.monotonic,
                    sleep: Callable[[float], None] = time.sleep,
                    while_loaded: Callable[[], list[CheckLine]] | None = None) -> list[CheckLine]:
    """Start probes one by one (``steps``: 1, then 2 running), and judge ``/metrics`` with each count.

    After each start ``scrape()`` (a GET of ``/metrics``) is polled every ``poll_s`` until
    :func:`load_checks` passes or ``settle_s`` runs out (a new client needs a moment: registration,
    first allocation, a utilisation sample); the last page's lines are kept, items prefixed
    ``load <n>:``. The probes' clients are selected with ``load.matches(names)`` on every poll (pod name
    in Kubernetes, host pid / client id in host mode). A probe that cannot start is a FAIL line and
    ends the load part. ``while_loaded``: lines judged after the last step while the probes still run
    (the DROP_LOCK window), appended as they come. The probes are stopped in a ``finally`` (a failed
    removal is a FAIL line ``probe pods removed``).
    """
    lines: list[CheckLine] = []
    pods: list[str] = []
    try:
        for n in steps:
            try:
                while len(pods) < n:
                    pods.append(load.start(len(pods) + 1))
            except (XpushareError, OSError) as exc:
                lines.append(check_line(f"load {n}: probe pods running", f"{n} running", shorten(str(exc)), False))
                break
            deadline = clock() + settle_s
            while True:
                resp = scrape()
                if resp.status != 200:
                    last = [check_line("/metrics answers 200", "200", answer_text(resp), False)]
                else:
                    limits = {p: load.core_limit for p in pods} if load.core_limit is not None else None
                    last = load_checks(parse_exposition(resp.body, prefix), expected_clients=n,
                                       matches=load.matches(pods), core_limits=limits)
                if all(ln.ok for ln in last) or clock() >= deadline:
                    break
                sleep(poll_s)
            lines += [ln._replace(item=f"load {n}: {ln.item}") for ln in last]
        if while_loaded is not None:
            lines += while_loaded()
    finally:
        try:
            load.stop()
        except (XpushareError, OSError) as exc:
            lines.append(check_line("probe pods removed", "removed", shorten(str(exc)), False))
    return lines

