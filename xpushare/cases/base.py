"""Case definitions: one :class:`CaseDef` per row of the seed's matrix, and the registry of all of them.

A case reads like its row in the seed table: id, title, the premises its verdict rests on (``requires``), parameters
with their defaults, the actions (``act``) and the judgment (``judge``). ``act`` only acts and
collects; ``judge`` reads the case directory (through :class:`~xpushare.evidence.store.Evidence` and the
``plan.json`` that ``act`` wrote) and nothing else, so a stored run can be re-judged offline.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xpushare.backends.base import CAP_ANNOTATIONS, Annotator, Backend, require_part
from xpushare.evidence.store import Evidence
from xpushare.inventory.schema import ClusterSpec
from xpushare.judge.quantity import parse_quantity
from xpushare.model.atomic_file import atomic_write_text
from xpushare.model.premises import PREMISES
from xpushare.model.verdict import Verdict
from xpushare.model.workload import WorkloadRecord, WorkloadSpec
from xpushare.transport import activity, interrupt

#: Suite ids (directory names under a run) and the aliases accepted by ``--suite``.
SUITES = ("functional", "combination", "performance", "metrics", "stability", "isolation")
SUITE_ALIASES = {
    "func": "functional",
    "combo": "combination",
    "perf": "performance",
    "met": "metrics",
    "stab": "stability",
    "leak": "stability",
    "fail": "stability",
    "iso": "isolation",
}


@dataclass
class CaseRun:
    """What ``act`` works with: the case dir, the backend, the cluster and the case's parameters.

    ``plan`` is saved as ``plan.json`` for the judgment (pod names, GPU counts, annotation times).
    """

    case_id: str
    case_dir: Path
    backend: Backend
    cluster: ClusterSpec
    params: Mapping[str, Any]
    plan: dict[str, Any] = field(default_factory=dict)
    sized_args: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Flags per workload that fit its size to the hardware (:mod:`xpushare.cases.sizing`), after
    ``workload_args``; a flag given twice takes its last value (argparse)."""

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds``, raising ``KeyboardInterrupt`` promptly on Ctrl-C."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            interrupt.check()
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
        interrupt.check()

    def wait_for_line(self, pod: str, marker: str, timeout_s: float, poll_s: float = 1.0) -> bool:
        """Poll the pod's output until ``marker`` appears (e.g. the first QUOTA_PROBE line); False on timeout
        or once the pod has ended without printing it (a workload that failed at start-up is not waited for;
        its phase is read every 5th poll, not one list call per poll)."""
        deadline = time.monotonic() + timeout_s
        polls = 0
        while time.monotonic() < deadline:
            if marker in self.backend.read_log(pod):
                return True
            polls += 1
            if polls % 5 == 0 and any(r.terminal for r in self.backend.wait_running([pod], 0)):
                return marker in self.backend.read_log(pod)
            self.sleep(poll_s)
        return False

    @property
    def namespace(self) -> str:
        """The namespace of the case's pods (Kubernetes: the run's own, or the inventory's fixed one); elsewhere
        the cluster's home namespace, which scheduler lines of host-mode workloads never name."""
        kube = self.backend.parts.kubernetes
        return kube.pod_namespace() if kube is not None else self.cluster.home_namespace

    @property
    def annotator(self) -> Annotator:
        """The backend's annotations part, for a case with the premise ``annotations``; raises
        :class:`~xpushare.model.errors.XpushareError` naming the premise where the cluster has none."""
        return require_part(self.backend.parts.annotations, CAP_ANNOTATIONS)

    def save_plan(self) -> None:
        atomic_write_text(self.case_dir / "plan.json", json.dumps(self.plan, indent=2) + "\n")

    def workload_args(self, workload: str) -> tuple[str, ...]:
        """Extra flags for a workload script from the ``workload_args`` parameter (per cluster/playbook)."""
        table = self.params.get("workload_args") or {}
        return tuple(str(a) for a in table.get(workload, ()))

    def pod(self, name: str, workload: str, **kw: Any) -> WorkloadSpec:
        """A :class:`WorkloadSpec` with the case's workload flags; names are ``<case>-<name>`` in DNS-1123 form."""
        full = f"{self.case_id.lower()}-{name}"
        extra = tuple(kw.pop("args", ()))
        args = (*self.workload_args(workload), *self.sized_args.get(workload, ()), *extra)
        return WorkloadSpec(name=full, workload=workload, args=args, **kw)

    def env_memory_quota(self, limit: str) -> dict[str, Any]:
        """The :meth:`pod` keywords of a memory quota ``limit`` (a Kubernetes quantity, e.g. ``1Gi``) set in the
        workload's environment: the project's SUT's ``<PREFIX>_GPU_MEMORY_LIMIT`` as written (``memory_limit_env``);
        in host mode another system's own variable in its own form (its profile's :meth:`memory_env`:
        ``CUDA_DEVICE_MEMORY_LIMIT=1024m``, ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=1024M``).

        Raises:
            ValueError: ``limit`` is no quantity.
        """
        profile = self.cluster.profile
        if self.cluster.is_kubernetes or profile.generation == profile.name:
            return {"memory_limit_env": limit}
        return {"env": tuple(profile.memory_env(parse_quantity(limit)).items())}

    def run_pods(self, pods: Sequence[WorkloadSpec]) -> list[WorkloadRecord]:
        """Start the pods and wait (``pod_timeout_s``) until they end; record the plan first."""
        self.plan.setdefault("pods", [])
        self.plan["pods"] += [p.name for p in pods]
        self.save_plan()
        activity.action(f"start {len(pods)} pod(s): {', '.join(p.name for p in pods)}")
        self.backend.start_pods(pods)
        return self.backend.wait_terminal([p.name for p in pods], float(self.params["pod_timeout_s"]))


Act = Callable[[CaseRun], None]
Judge = Callable[[Evidence, Mapping[str, Any], Mapping[str, Any]], Verdict]


@dataclass(frozen=True)
class CaseDef:
    """One case of the matrix (seed 000 sections 7-11 and 17)."""

    case_id: str
    suite: str
    title: str
    workload: str
    operation: str
    """What the case does, as the seed's 17.x table says it."""
    sampling: str
    """Which evidence it looks at."""
    requires: frozenset[str] = frozenset()
    """The premises the verdict rests on (names of :data:`xpushare.model.premises.PREMISES`: ``sut``, ``gpu``,
    ``kubernetes`` ...): one unmet before the act SKIPs the case naming it, one found unmet in the evidence makes
    the verdict ERROR naming it (docs/verdicts.md "Premises")."""
    params: Mapping[str, Any] = field(default_factory=dict)
    act: Act | None = None
    judge: Judge | None = None
    implemented_by: str = ""
    """When ``act`` is None: which piece of work brings the case (its SKIP reason names it)."""
    measures_gpu: bool = False
    """A measurement other GPU processes would disturb: the lifecycle records the GPU processes before ``act``
    and after cleanup (evidence/gpu_apps.py), and any found makes the verdict ERROR ("GPU busy")."""
    expects_gpu_faults: bool = False
    """A case about GPU faults (FAIL-005..007 inject them): a fault during it is its subject, not a reason to
    make the verdict ERROR (docs/faults.md)."""
    premise_notes: Mapping[str, str] = field(default_factory=dict)
    """Why this case needs a premise, by premise name: added to its SKIP when that premise is unmet (MET-004: why
    Kubernetes, not host mode)."""


REGISTRY: dict[str, CaseDef] = {}

#: Parameters every case has.
COMMON_PARAMS: dict[str, Any] = {"pod_timeout_s": 1800, "workload_args": {}, "registration_timeout_s": 60.0}


def register(case: CaseDef) -> CaseDef:
    if case.case_id in REGISTRY:
        raise ValueError(f"duplicate case id {case.case_id}")
    if case.suite not in SUITES:
        raise ValueError(f"{case.case_id}: unknown suite {case.suite}")
    unknown = sorted(case.requires - set(PREMISES))
    if unknown:
        raise ValueError(f"{case.case_id}: unknown premise(s) {', '.join(unknown)}")
    REGISTRY[case.case_id] = case
    return case


_TITLE_DURATION = re.compile(r"\(\d+(?:\.\d+)? h\)$")
DURATION_PARAM = "stab_duration_s"
"""The parameter a soak case's length is (seconds); its title's ``(24 h)`` is that parameter's default."""


def _span(seconds: float) -> str:
    for unit, size in (("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g} {unit}"
    return f"{seconds / 3600:.2g} h" if seconds >= 3600 else f"{seconds / 60:.2g} min" if seconds >= 60 \
        else f"{seconds:g} s"


def title_for(case: CaseDef, params: Mapping[str, Any]) -> str:
    """The title of ``case`` as run with ``params``: a soak case's title names the length its
    ``stab_duration_s`` gives (``16-32 mixed pods (2 min)``), not its default's (``(24 h)``); any other title as
    registered."""
    seconds = params.get(DURATION_PARAM)
    if not _TITLE_DURATION.search(case.title) or isinstance(seconds, bool) or not isinstance(seconds, (int, float)) \
            or seconds <= 0:
        return case.title
    return _TITLE_DURATION.sub(f"({_span(float(seconds))})", case.title)


def load_plan(case_dir: Path) -> dict[str, Any]:
    path = case_dir / "plan.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
