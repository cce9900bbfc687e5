"""The one fake backend of the unit tests: a :class:`~xpushare.backends.base.Backend` with fake parts, each a
subclass of its capability ABC, so mypy checks the fake against the interface as it checks the real backends.

Nothing runs: a test scripts what it needs (the records a wait returns, a pod's log, what a harvest stores) and
reads back what the code under test did (:attr:`FakeBackend.calls`, :attr:`FakeBackend.started`, the parts'
own records). A part the test leaves out is None, as on a cluster without it; an operation of a fake part the
test did not script fails the test (AssertionError), never pretends.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from xpushare.backends.base import (
    CAP_ANNOTATIONS,
    CAP_CLIENT_LIBRARY,
    CAP_KUBERNETES,
    CAP_SCHEDULER_PROCESS,
    CAP_TENANT_NAMESPACES,
    Annotator,
    Backend,
    BackendParts,
    CaseContext,
    EvidenceRotation,
    KubeAccess,
    Placement,
    SchedulerControl,
    SchedulerFacts,
    SchedulerRestart,
)
from xpushare.inventory.sut import SutNames, sut_names
from xpushare.model.unreached import Unreached
from xpushare.model.workload import WorkloadRecord, WorkloadSpec
from xpushare.transport.base import Host
from xpushare.transport.kube_objects import DaemonSetStatus, Node, Pod

#: ``records(names, until)``: the records a wait returns (``until``: ``"running"`` or ``"terminal"``).
Records = Callable[[Sequence[str], str], list[WorkloadRecord]]


def _unscripted(part: str, name: str) -> AssertionError:
    return AssertionError(f"{part}.{name} is not scripted in this test")


class FakePlacement(Placement):
    """``gpus`` GPUs (None: unknown), ``colocation`` as :meth:`colocation_target` answers, ``hosts`` the GPU hosts."""

    def __init__(self, *, gpus: int | None = None, colocation: tuple[str | None, int] = (None, 1),
                 hosts: Mapping[str, Host] | None = None) -> None:
        self.gpus = gpus
        self.colocation = colocation
        self.hosts = dict(hosts or {})
        self.asked_hosts = 0

    def gpu_node_hosts(self) -> dict[str, Host]:
        self.asked_hosts += 1
        return dict(self.hosts)

    def gpu_count(self) -> int | None:
        return self.gpus

    def colocation_target(self) -> tuple[str | None, int]:
        return self.colocation


class FakeRotation(EvidenceRotation):
    """Records each rotation (its tag) and each forget; rotates no file."""

    def __init__(self) -> None:
        self.rotations: list[str] = []
        self.forgets = 0

    def restart_log_streams(self, dest: Path, tag: str, *, since: datetime | None = None) -> list[Path]:
        self.rotations.append(tag)
        return []

    def forget_pod_specs(self) -> None:
        self.forgets += 1


class FakeScheduler(SchedulerControl):
    """Answers :meth:`scheduler_facts` with ``facts`` (a list, or a callable of ``metrics``); counts the asks
    (:attr:`snapshots`). A restart is scripted by ``restart`` (None: the test fails if one is asked)."""

    def __init__(self, facts: Sequence[SchedulerFacts] | Callable[[bool], list[SchedulerFacts]] = (),
                 restart: Callable[[], SchedulerRestart] | None = None) -> None:
        self.facts = facts
        self.restart = restart
        self.snapshots = 0

    def scheduler_facts(self, *, metrics: bool = False) -> list[SchedulerFacts]:
        self.snapshots += 1
        return self.facts(metrics) if callable(self.facts) else list(self.facts)

    def restart_scheduler(self) -> SchedulerRestart:
        if self.restart is None:
            raise _unscripted("FakeScheduler", "restart_scheduler")
        return self.restart()


class FakeAnnotator(Annotator):
    """Records every annotation (:attr:`calls`); the call time is the next of ``times`` (else now). With
    ``journal`` (a case directory) and ``names`` it appends to ``annotations.jsonl`` as the Kubernetes backend
    does (``core``/``memory`` stand for the SUT's limit annotations); ``on_annotate`` sees each call."""

    def __init__(self, *, times: Sequence[float] = (), journal: Path | None = None, names: SutNames | None = None,
                 on_annotate: Callable[[str, dict[str, str]], None] | None = None) -> None:
        self.times = list(times)
        self.journal = journal
        self.names = names or sut_names("xpushare")
        self.on_annotate = on_annotate
        self.calls: list[tuple[str, dict[str, str]]] = []

    def annotate(self, pod: str, annotations: dict[str, str]) -> float:
        when = self.times.pop(0) if self.times else time.time()
        self.calls.append((pod, dict(annotations)))
        if self.on_annotate is not None:
            self.on_annotate(pod, dict(annotations))
        if self.journal is not None:
            keys = {"core": self.names.annotation_core_limit, "memory": self.names.annotation_memory_limit}
            full = {keys.get(k, k): v for k, v in annotations.items()}
            with (self.journal / "annotations.jsonl").open("a", encoding="utf-8") as fh:
                fh.write(json.dumps({"time": when, "pod": pod, "annotations": full}) + "\n")
        return when


class FakeKube(KubeAccess):
    """The Kubernetes part, in memory: the run's ``namespace``, the SUT's pods (``sut_pods``: by selector, or
    one list for every selector), each DaemonSet's environment (``env``, one for all), the scheduler log
    (text, or a callable), ``node_hosts`` and GPU ``hosts``. Every change (``set env``, ``rollout status``,
    ``delete pod``) is recorded in :attr:`calls` as kubectl's arguments."""

    def __init__(self, *, namespace: str = "default", metrics_port: int = 9402, vgpus_per_gpu: int = 10,
                 sut_pods: Sequence[Pod] | Mapping[str, Sequence[Pod]] = (),
                 env: Mapping[str, str] | None = None, scheduler_log: str | Callable[[], str] = "",
                 node_hosts: Mapping[str, str] | None = None, hosts: Mapping[str, Host] | None = None,
                 on_delete_pod: Callable[[str], None] | None = None) -> None:
        self.namespace = namespace
        self.port = metrics_port
        self._vgpus_per_gpu = vgpus_per_gpu
        self.pods = sut_pods
        self.env = dict(env or {})
        self.log = scheduler_log
        self.node_host = dict(node_hosts or {})
        self.hosts = dict(hosts or {})
        self.on_delete_pod = on_delete_pod
        self.calls: list[list[str]] = []
        self.started = datetime.now(timezone.utc)

    def kubectl_calls(self) -> int:
        return len(self.calls)

    def kubectl_retries(self) -> int:
        return 0

    def pod_namespace(self, tenant: str | None = None) -> str:
        return self.namespace if tenant is None else f"{self.namespace}-{tenant}"

    def sut_pods(self, selector: str) -> list[Pod]:
        pods = self.pods.get(selector, ()) if isinstance(self.pods, Mapping) else self.pods
        return sorted(pods, key=lambda p: p.name)

    def sut_logs(self, selector: str) -> str:
        raise _unscripted("FakeKube", "sut_logs")

    def previous_log(self, pod: str) -> str:
        raise _unscripted("FakeKube", "previous_log")

    def restart_daemonset(self, name: str) -> None:
        self.calls.append(["rollout", "restart", f"daemonset/{name}"])

    def await_daemonset(self, name: str, timeout_s: float) -> str:
        self.calls.append(["rollout", "status", name])
        return ""

    def daemonset_status(self, name: str) -> DaemonSetStatus:
        raise _unscripted("FakeKube", "daemonset_status")

    def daemonset_env(self, name: str, variable: str) -> str | None:
        return self.env.get(variable)

    def set_daemonset_env(self, name: str, variable: str, value: str | None) -> None:
        self.calls.append(["set", "env", f"daemonset/{name}", f"{variable}={value}" if value is not None
                           else f"{variable}-"])
        if value is None:
            self.env.pop(variable, None)
        else:
            self.env[variable] = value

    def nodes(self) -> list[Node]:
        raise _unscripted("FakeKube", "nodes")

    def node(self, name: str) -> Node:
        raise _unscripted("FakeKube", "node")

    def drain_node(self, node: str, *, timeout_s: float, grace_period_s: int | None = None) -> str:
        raise _unscripted("FakeKube", "drain_node")

    def uncordon_node(self, node: str) -> None:
        raise _unscripted("FakeKube", "uncordon_node")

    @property
    def case_start(self) -> datetime:
        return self.started

    @property
    def metrics_port(self) -> int:
        return self.port

    @property
    def vgpus_per_gpu(self) -> int:
        return self._vgpus_per_gpu

    def node_hosts(self) -> dict[str, str]:
        return dict(self.node_host)

    def host_for_node(self, node: str | None) -> str | None:
        return None if node is None else self.node_host.get(node)

    def gpu_host(self, name: str) -> Host:
        return self.hosts[name]

    def scheduler_pods(self) -> dict[str, Pod]:
        raise _unscripted("FakeKube", "scheduler_pods")

    def curl_scheduler(self, node: str, path: str, sched: dict[str, Pod] | None = None) -> str | None:
        raise _unscripted("FakeKube", "curl_scheduler")

    def scrape_metrics(self, name: str, node: str | None = None) -> str | None:
        raise _unscripted("FakeKube", "scrape_metrics")

    def scheduler_log(self, *, prefix: bool = True, timestamps: bool = True) -> str:
        return self.log() if callable(self.log) else self.log

    def delete_pod(self, name: str, timeout_s: float = 60.0) -> None:
        self.calls.append(["delete", "pod", name])
        if self.on_delete_pod is not None:
            self.on_delete_pod(name)


class FakeBackend(Backend):
    """A backend that runs nothing. ``mode`` is the cluster's (``host``/``k8s``), as evidence records it.

    Scripted: ``records`` (what :meth:`wait_running`/:meth:`wait_terminal` return; default none), ``log`` (a
    pod's output: one text for all, or a callable of the pod name), ``on_start`` (sees each :meth:`start_pods`),
    ``on_harvest`` (what :meth:`harvest` stores, given the backend; default nothing), ``on_cleanup``/``on_close``,
    ``unreachable`` hosts, and the parts (``kubernetes``, ``scheduler``, ``annotations``, ``scheduler_host``,
    ``placement``, ``rotation``; ``client_library``, ``tenant_namespaces``). ``case_dir``: a case already begun;
    ``run_id``: a run already prepared.
    Recorded: :attr:`calls` (method names, in order), :attr:`started` (every pod spec started), :attr:`log_reads`.
    """

    def __init__(self, *, mode: str = "host", names: SutNames | None = None, records: Records | None = None,
                 log: str | Callable[[str], str] = "", on_start: Callable[[Sequence[WorkloadSpec]], None] | None = None,
                 on_harvest: Callable[[FakeBackend], list[str]] | None = None,
                 on_cleanup: Callable[[], None] | None = None, on_close: Callable[[], None] | None = None,
                 unreachable: Sequence[Unreached] = (), kubernetes: KubeAccess | None = None,
                 scheduler: SchedulerControl | None = None, annotations: Annotator | None = None,
                 scheduler_host: Host | None = None, placement: Placement | None = None,
                 rotation: EvidenceRotation | None = None, client_library: bool = False,
                 tenant_namespaces: bool = False, case_dir: Path | None = None, run_id: str = "") -> None:
        self.mode = mode
        self.run_id = run_id
        self.names = names or sut_names("xpushare")
        self.records = records
        self.log = log
        self.on_start = on_start
        self.on_harvest = on_harvest
        self.on_cleanup = on_cleanup
        self.on_close = on_close
        self.lost = list(unreachable)
        self.calls: list[str] = []
        self.log_reads: list[tuple[str, bool]] = []  # (pod, timestamps) of each read_log
        self.started: list[WorkloadSpec] = []
        self.fake_parts = BackendParts(placement=placement or FakePlacement(), rotation=rotation or FakeRotation(),
                                       kubernetes=kubernetes, scheduler=scheduler, annotations=annotations,
                                       scheduler_host=scheduler_host, client_library=client_library,
                                       tenant_namespaces=tenant_namespaces)
        if case_dir is not None:
            self.case = CaseContext(case_dir, "unit")

    @classmethod
    def having(cls, capabilities: Collection[str], **kw: Any) -> FakeBackend:
        """A fake whose parts give exactly ``capabilities`` (the ``CAP_*`` premise names): a fresh fake part for
        each (unless ``kw`` gives it), None for the others."""
        fresh: dict[str, Callable[[], Any]] = {
            CAP_KUBERNETES: FakeKube, CAP_SCHEDULER_PROCESS: FakeScheduler, CAP_ANNOTATIONS: FakeAnnotator}
        field = {CAP_KUBERNETES: "kubernetes", CAP_SCHEDULER_PROCESS: "scheduler", CAP_ANNOTATIONS: "annotations"}
        for cap, make in fresh.items():
            if cap in capabilities:
                kw.setdefault(field[cap], make())
        kw.setdefault("client_library", CAP_CLIENT_LIBRARY in capabilities)
        kw.setdefault("tenant_namespaces", CAP_TENANT_NAMESPACES in capabilities)
        backend = cls(**kw)
        assert backend.parts.capabilities == frozenset(capabilities), (backend.parts.capabilities, capabilities)
        return backend

    @property
    def parts(self) -> BackendParts:
        return self.fake_parts

    def prepare_run(self, run_id: str) -> None:
        self.calls.append("prepare_run")
        self.run_id = run_id

    def unreachable(self) -> list[Unreached]:
        return list(self.lost)

    def begin_case(self, case_dir: Path, case_id: str) -> CaseContext:
        self.calls.append("begin_case")
        self.case = CaseContext(case_dir, case_id)
        return self.case

    def start_pods(self, pods: Sequence[WorkloadSpec]) -> None:
        self.calls.append("start_pods")
        self.started += pods
        if self.on_start is not None:
            self.on_start(pods)

    def _records(self, names: Sequence[str], until: str) -> list[WorkloadRecord]:
        return [] if self.records is None else self.records(names, until)

    def wait_running(self, names: Sequence[str], timeout_s: float) -> list[WorkloadRecord]:
        self.calls.append("wait_running")
        return self._records(names, "running")

    def wait_terminal(self, names: Sequence[str], timeout_s: float) -> list[WorkloadRecord]:
        self.calls.append("wait_terminal")
        return self._records(names, "terminal")

    def read_log(self, pod: str, *, timestamps: bool = False) -> str:
        self.log_reads.append((pod, timestamps))
        return self.log(pod) if callable(self.log) else self.log

    def case_pods(self) -> list[WorkloadRecord]:
        self.calls.append("case_pods")
        return self._records([p.name for p in self.started], "now")

    def delete_case_pods(self, timeout_s: float) -> None:
        self.calls.append("delete_case_pods")

    def harvest(self) -> list[str]:
        self.calls.append("harvest")
        return [] if self.on_harvest is None else self.on_harvest(self)

    def cleanup(self) -> None:
        self.calls.append("cleanup")
        if self.on_cleanup is not None:
            self.on_cleanup()

    def close(self) -> None:
        self.calls.append("close")
        if self.on_close is not None:
            self.on_close()

