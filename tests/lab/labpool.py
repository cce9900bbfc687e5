"""Several lab clusters of one module running its tool runs at once.

A lab test's wall time is mostly waiting: probes and workloads that run for a set time on simulated GPUs whose
kernels sleep, settle times, the watcher's 5 s annotation period. A module whose tests each run the tool once
under another build of the SUT (a mutant) spends its time in those waits one after the other; on labs of its own
the same runs overlap, and a lab costs under a CPU-second to start (tests/bench/ci_time.md). A module declares its
pool (:func:`pool_fixture`; :func:`first_of` for its tests that run one after the other), one module fixture runs
every run of the module on it (:func:`run_pool`; :func:`run_on_labs` for labs of another kind) and its tests assert
on the outcomes (:func:`outcome_of`). Runs judged on runtime ratios do not belong here: the runs beside them take
the CPU the ratios measure.

Plain functions, no asserts (the tests assert), as in :mod:`tests.lab.kubelab`.
"""

from __future__ import annotations

import contextlib
import queue
import subprocess
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
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


def pool_fixture(name: str, count: int, *, ssh: str = "ssh_lab", params: dict[str, Any] | None = None,
                 **options: Any) -> Any:
    """A module-scoped fixture of a pool of :func:`started_kube_labs` (``[(lab, inventory path)]``, beside the SSH
    lab of fixture ``ssh``), registered under the name the module gives it::

        labs = pool_fixture("met-kube", 3, **PROBE_LAB_OPTIONS)
    """

    @pytest.fixture(scope="module")
    def labs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[list[tuple[LabCluster, Path]]]:
        yield from started_kube_labs(tmp_path_factory, name, count, request.getfixturevalue(ssh), params=params,
                                     **options)

    return labs


def first_of(pool: str) -> tuple[Any, Any]:
    """Two module-scoped fixtures: the first lab of the pool fixture named ``pool`` and its inventory, for the tests
    that run one after the other::

        kube_lab, lab_inventory = first_of("labs")
    """

    @pytest.fixture(scope="module")
    def first_lab(request: pytest.FixtureRequest) -> LabCluster:
        return request.getfixturevalue(pool)[0][0]

    @pytest.fixture(scope="module")
    def first_inventory(request: pytest.FixtureRequest) -> Path:
        return request.getfixturevalue(pool)[0][1]

    return first_lab, first_inventory


@dataclass(frozen=True)
class LabRun:
    """One run of the tool on a lab of the pool: the lab, the run's ``--root``, the tool's process and the results
    (``result.json``) by case id."""

    lab: LabCluster
    root: Path
    proc: subprocess.CompletedProcess[str]
    got: dict[str, dict[str, Any]]


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


def run_pool(labs: Sequence[tuple[LabCluster, Path]], runs: Mapping[str, tuple[str | None, Sequence[str]]],
             tmp_path_factory: pytest.TempPathFactory,
             tool: Callable[[LabCluster, Path, Path, str, Sequence[str]], subprocess.CompletedProcess[str]],
             results: Callable[[Path, str], dict[str, dict[str, Any]]]) -> dict[str, LabRun | BaseException]:
    """Every run of ``runs`` (run id -> (the mutant its lab runs, None for the lab's own build; the tool's
    arguments)) on the pool ``labs`` (:func:`run_on_labs`, in ``runs``' order): ``tool(lab, inventory, root, run id,
    arguments)`` while the lab runs the mutant (:meth:`LabCluster.running_mutant`), in a fresh ``--root`` named
    after the run id, its results read by ``results(root, run id)``. Returns each run's :class:`LabRun`, or the
    exception it raised."""
    roots = {run_id: tmp_path_factory.mktemp(run_id) for run_id in runs}

    def one(lab: tuple[LabCluster, Path], run_id: str) -> LabRun:
        kube, inventory = lab
        mutant, args = runs[run_id]
        with contextlib.nullcontext() if mutant is None else kube.running_mutant(mutant):
            proc = tool(kube, inventory, roots[run_id], run_id, args)
        return LabRun(kube, roots[run_id], proc, results(roots[run_id], run_id))

    return run_on_labs(labs, list(runs), one)


def outcome_of(outcomes: dict[Job, Outcome | BaseException], job: Job) -> Outcome:
    """The job's outcome; re-raises the exception its run raised, in the test that asks."""
    outcome = outcomes[job]
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome
