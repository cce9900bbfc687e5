"""Several lab clusters of one module running its tool runs at once.

A lab test's wall time is mostly waiting: probes and workloads that run for a set time on simulated GPUs whose
kernels sleep, settle times, the watcher's 5 s annotation period. A module whose tests each run the tool once
under another build of the SUT (a mutant) spends its time in those waits one after the other; on labs of its own
the same runs overlap, and a lab costs under a CPU-second to start (tests/bench/ci_time.md). The module's fixture
runs every job here, its tests assert on the outcomes.

Plain functions, no asserts (the tests assert), as in :mod:`tests.lab.kubelab`.
"""

from __future__ import annotations

import contextlib
import queue
import subprocess
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.lab.cluster import LabCluster
from tests.lab.env import write_inventory
from tests.lab.kubelab import started_kube_lab
from tests.lab.sshd import SshLab

Lab = TypeVar("Lab")
Job = TypeVar("Job")
Outcome = TypeVar("Outcome")


def started_kube_labs(tmp_path_factory: pytest.TempPathFactory, name: str, count: int, ssh: SshLab, *,
                      params: dict[str, Any] | None = None, **options: Any) -> Iterator[list[tuple[LabCluster, Path]]]:
    """Body of a module fixture of ``count`` lab clusters (:func:`tests.lab.kubelab.started_kube_lab`,
    ``options`` their keyword arguments, directories ``name0``, ``name1``, ...), each with its inventory beside
    the SSH lab ``ssh`` (``params`` over the ``lab`` cluster's, :func:`tests.lab.env.write_inventory`):
    ``[(lab, inventory path)]``, stopped at the end."""
    with contextlib.ExitStack() as stack:
        labs = []
        for i in range(count):
            kube = stack.enter_context(contextlib.contextmanager(started_kube_lab)(
                tmp_path_factory, f"{name}{i}", **options))
            inventory = tmp_path_factory.mktemp(f"{name}-inv") / "inventory.yaml"
            labs.append((kube, write_inventory(inventory, ssh, kube, params=params)))
        yield labs


@dataclass(frozen=True)
class LabRun:
    """One run of the tool on a lab of the pool: the lab, the run's ``--root``, the tool's process and the results
    (``result.json``) by case id."""

    lab: LabCluster
    root: Path
    proc: subprocess.CompletedProcess[str]
    got: dict[str, dict[str, Any]]


@contextlib.contextmanager
def build_of(lab: LabCluster, mutant: str | None) -> Iterator[None]:
    """Within the block the lab runs the mutant build ``mutant`` (:meth:`LabCluster.running_mutant`); None: the
    lab's own build, unchanged."""
    if mutant is None:
        yield
        return
    with lab.running_mutant(mutant):
        yield


def run_on_labs(labs: Sequence[Lab], jobs: Sequence[Job], run: Callable[[Lab, Job], Outcome]
                ) -> dict[Job, Outcome | BaseException]:
    """``run(lab, job)`` for every job, each lab running one job at a time in a thread of its own and taking the
    next job in ``jobs``' order (longest first gives the shortest wall time) once its last one ended.

    Returns every job's outcome, or the exception its run raised (its test reports it: one broken job must not
    hide the others' verdicts). Jobs are keys: hashable and distinct."""
    todo: queue.SimpleQueue[Job] = queue.SimpleQueue()
    for job in jobs:
        todo.put(job)
    outcomes: dict[Job, Outcome | BaseException] = {}

    def worker(lab: Lab) -> None:
        while True:
            try:
                job = todo.get_nowait()
            except queue.Empty:
                return
            try:
                outcomes[job] = run(lab, job)
            except BaseException as exc:  # reported by the job's test (pytest.fail raises a BaseException)
                outcomes[job] = exc

    threads = [threading.Thread(target=worker, args=(lab,), daemon=True) for lab in labs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


def outcome_of(outcomes: dict[Job, Outcome | BaseException], job: Job) -> Outcome:
    """The job's outcome; re-raises the exception its run raised, in the test that asks."""
    outcome = outcomes[job]
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome
