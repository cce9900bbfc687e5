"""The lab control plane's reconcile loop wakes on change, not on a fixed 20 Hz poll (tests/lab/README-kube.md "CPU").

The pieces: the store's change stamp (:meth:`Store.version`, :meth:`Store.kick`, :meth:`Store.wait_change`), a
pod process's exit waking it (:func:`tests.lab.kubelet._exit_waiter`), a kubelet's time-driven transitions
(:meth:`Kubelet.next_wake`) and the loop's wait between steps (:func:`tests.lab.cluster._wait_for_work`).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.lab import cluster
from tests.lab.kubeapi import Store
from tests.lab.kubelet import PROBE_PERIOD_S, ContainerRun, Kubelet, LabNode, PodRun, _exit_waiter


class FakeSettings:
    """The part of ``LabSettings`` the loop's wait reads: the stamp of ``faults.json``."""

    def __init__(self) -> None:
        self.stamp: tuple[int, int, int] | None = (1, 1, 1)

    def faults_stamp(self) -> tuple[int, int, int] | None:
        return self.stamp


class FakeKubelet:
    def __init__(self, wake: float | None = None) -> None:
        self.wake = wake

    def next_wake(self, now: float) -> float | None:
        return self.wake


def _wait(store: Store, settings: FakeSettings, kubelets: list[FakeKubelet], started: float | None = None,
          stop: threading.Event | None = None) -> float:
    """Seconds :func:`cluster._wait_for_work` blocked, from a step that began ``started`` (default now)."""
    t0 = time.monotonic()
    cluster._wait_for_work(store, settings.faults_stamp, [k.next_wake for k in kubelets], stop or threading.Event(),
                           store.version(), settings.faults_stamp(), t0 if started is None else started)
    return time.monotonic() - t0


def _pod(name: str) -> dict[str, object]:
    return {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "x"}]}}


def test_version_changes_on_every_write_and_kick() -> None:
    store = Store()
    v0 = store.version()
    store.create("pods", "default", _pod("a"))
    v1 = store.version()
    store.mutate("pods", "default", "a", lambda o: o.__setitem__("status", {"phase": "Running"}))
    v2 = store.version()
    store.mutate("pods", "default", "a", lambda o: None)  # no change: no write, same stamp
    store.kick()
    v3 = store.version()
    store.remove("pods", "default", "a")
    assert len({v0, v1, v2, v3, store.version()}) == 5


def test_wait_change_returns_at_once_on_a_write_from_another_thread() -> None:
    store = Store()
    seen = store.version()
    threading.Timer(0.1, lambda: store.create("pods", "default", _pod("a"))).start()
    t0 = time.monotonic()
    assert store.wait_change(seen, 10.0) != seen
    assert time.monotonic() - t0 < 5.0  # woken, not timed out (generous: the machine may be loaded)


def test_idle_loop_sleeps_until_the_idle_step() -> None:
    """Nothing changed and nothing due: one step per IDLE_STEP_S (the old loop stepped every 0.05 s)."""
    took = _wait(Store(), FakeSettings(), [FakeKubelet(None)])
    assert cluster.IDLE_STEP_S - 0.01 <= took < cluster.IDLE_STEP_S + 5.0
    assert cluster.IDLE_STEP_S >= 1.0


def test_a_write_wakes_the_loop_well_before_the_idle_step() -> None:
    store = Store()
    threading.Timer(0.2, lambda: store.create("pods", "default", _pod("a"))).start()
    assert _wait(store, FakeSettings(), []) < cluster.IDLE_STEP_S - 0.3


def test_a_write_during_the_step_steps_again_after_the_minimum_gap() -> None:
    store = Store()
    started = time.monotonic()
    seen = store.version()
    store.create("pods", "default", _pod("a"))  # the step's own write: its effects need another step
    settings = FakeSettings()
    cluster._wait_for_work(store, settings.faults_stamp, [], threading.Event(), seen, settings.faults_stamp(), started)
    took = time.monotonic() - started
    assert cluster.MIN_STEP_GAP_S - 0.005 <= took < 1.0


def test_a_replaced_faults_file_wakes_the_loop_within_its_poll() -> None:
    settings = FakeSettings()

    def replace() -> None:
        settings.stamp = (2, 2, 2)

    threading.Timer(0.2, replace).start()
    assert _wait(Store(), settings, []) < cluster.IDLE_STEP_S - 0.3
    assert cluster.FAULTS_POLL_S <= 0.05  # LabCluster.set_faults waits on the kubelets' acknowledgement


def test_a_kubelet_deadline_bounds_the_wait() -> None:
    took = _wait(Store(), FakeSettings(), [FakeKubelet(None), FakeKubelet(time.monotonic() + 0.3)])
    assert 0.29 <= took < cluster.IDLE_STEP_S - 0.2


def test_stop_ends_the_wait() -> None:
    stop = threading.Event()
    threading.Timer(0.1, stop.set).start()
    assert _wait(Store(), FakeSettings(), [], stop=stop) < cluster.IDLE_STEP_S - 0.3


def test_a_process_exit_kicks_the_store_and_poll_then_sees_the_code() -> None:
    store = Store()
    seen = store.version()
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.2); raise SystemExit(3)"])
    threading.Thread(target=_exit_waiter, args=(proc, store.kick), daemon=True).start()
    assert store.wait_change(seen, 20.0) != seen
    assert proc.poll() == 3


def _kubelet(runs: dict[str, PodRun]) -> Kubelet:
    """A kubelet with only its pod records (no mount namespace, no store): enough for :meth:`Kubelet.next_wake`."""
    k = Kubelet.__new__(Kubelet)
    k.node = LabNode("n1", 1, "127.0.0.12", "127.0.0.22", ("GPU-a",))
    k.runs = runs
    return k


class _Running:
    """Stands in for a running container's Popen."""

    pid = 4242


def _container(*, exit_code: int | None = None, ready: bool = False) -> ContainerRun:
    cr = ContainerRun("c", 0, 0.0, Path("/dev/null"), exit_code=exit_code, ready=ready)
    cr.proc = _Running()  # type: ignore[assignment]
    return cr


def test_next_wake_none_without_time_driven_work() -> None:
    now = time.monotonic()
    run = PodRun("u1", "default", "p", "127.0.1.2", "t")
    run.runs["c"] = _container()
    assert _kubelet({"u1": run}).next_wake(now) is None
    ready_scheduler = PodRun("u2", "ns", "sched", "127.0.0.22", "t")
    ready_scheduler.runs["c"] = _container(ready=True)
    assert _kubelet({"u2": ready_scheduler}).next_wake(now) is None


def test_next_wake_grace_period_and_crash_loop_restart() -> None:
    now = time.monotonic()
    deleting = PodRun("u1", "default", "p", "127.0.1.2", "t", grace_deadline=now + 5.0)
    deleting.runs["c"] = _container()
    backoff = PodRun("u2", "default", "q", "127.0.1.3", "t")
    backoff.runs["c"] = _container(exit_code=1)
    backoff.next_start["c"] = now + 2.0
    assert _kubelet({"u1": deleting, "u2": backoff}).next_wake(now) == pytest.approx(now + 2.0)
    assert _kubelet({"u1": deleting}).next_wake(now) == pytest.approx(now + 5.0)
    deleting.runs["c"].exit_code = 0  # its processes are gone: the grace period no longer matters
    assert _kubelet({"u1": deleting}).next_wake(now) is None


def test_next_wake_probes_a_starting_scheduler_and_never_spins() -> None:
    now = time.monotonic()
    starting = PodRun("u1", "ns", "sched", "127.0.0.22", "t")
    starting.runs["c"] = _container()
    assert _kubelet({"u1": starting}).next_wake(now) == pytest.approx(now + PROBE_PERIOD_S)
    overdue = PodRun("u2", "default", "p", "127.0.1.2", "t", grace_deadline=now - 3.0)
    overdue.runs["c"] = _container()  # SIGKILLed, not reaped yet: look again a probe period on
    assert _kubelet({"u2": overdue}).next_wake(now) == pytest.approx(now + PROBE_PERIOD_S)
