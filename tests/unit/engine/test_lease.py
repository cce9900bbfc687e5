"""Run isolation: the lease policy (free, held, stale, dead holder, renew, release, wait) on an in-memory store,
the host lock file on this machine's ``sh``, and a suite task refused / taking over on the ``local`` cluster.

Runs on ``local`` keep their lease in ``$XPUSHARE_LEASE_DIR`` (tests/conftest.py gives each pytest process its
own); the tests here that need a lease of their own point it at their ``tmp_path``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from tests.paths import REPO_ROOT
from tests.toolrun import run_tool
from xpushare.engine import lease
from xpushare.inventory.schema import local_cluster
from xpushare.model.errors import LeaseHeld, UsageError, XpushareError
from xpushare.model.lease import Holder, LeaseSettings, Observed, live_holder
from xpushare.transport.local import LocalHost
from xpushare.transport.lock_file import LockFileStore

ROOT = REPO_ROOT
SETTINGS = LeaseSettings(renew_s=10, stale_s=60)


class MemoryStore:
    """A lease store in memory; ``age_s`` is set by the test (no clock)."""

    where = "memory"

    def __init__(self) -> None:
        self.holder: Holder | None = None
        self.age_s = 0.0
        self.version = 0
        self.renewals = 0

    def read(self) -> Observed | None:
        return None if self.holder is None else Observed(self.holder, self.age_s, str(self.version))

    def _put(self, holder: Holder) -> None:
        self.holder, self.age_s, self.version = holder, 0.0, self.version + 1

    def create(self, holder: Holder, settings: LeaseSettings) -> bool:
        if self.holder is not None:
            return False
        self._put(holder)
        return True

    def take(self, holder: Holder, settings: LeaseSettings, stale: Observed) -> bool:
        if self.holder is None or str(self.version) != stale.version:
            return False
        self._put(holder)
        return True

    def renew(self, holder: Holder, settings: LeaseSettings) -> bool:
        if self.holder is None or self.holder.token != holder.token:
            return False
        self.renewals += 1
        self._put(holder)
        return True

    def release(self, holder: Holder) -> None:
        if self.holder is not None and self.holder.token == holder.token:
            self.holder = None


def other(run_id: str = "r-other", **kw: object) -> Holder:
    base = Holder(run_id=run_id, user="ana", machine="ws-ana", pid=4242, started="2026-01-01T12:00:00+00:00",
                  token="t-" + run_id)
    return replace(base, **kw)  # type: ignore[arg-type]


def must_not_wait(seconds: float) -> None:
    pytest.fail(f"waited {seconds} s")


def take(store: MemoryStore, me: Holder, *, wait: bool = False,
         sleep: Callable[[float], None] = must_not_wait) -> list[str]:
    said: list[str] = []
    lease.acquire(store, me, SETTINGS, cluster="c1", wait=wait, say=said.append, sleep=sleep)
    return said


def test_a_free_cluster_is_taken_silently() -> None:
    store, me = MemoryStore(), lease.new_holder("r1")
    assert take(store, me) == []
    assert store.holder == me and me.machine == socket.gethostname() and me.pid == os.getpid()


def test_a_held_cluster_refuses_naming_the_holder() -> None:
    store = MemoryStore()
    store.create(other(), SETTINGS)
    store.age_s = 59.0  # within the stale time: live
    with pytest.raises(LeaseHeld) as err:
        take(store, lease.new_holder("r2"))
    text = str(err.value)
    assert "cluster c1 is in use by run r-other (ana@ws-ana, pid 4242" in text and "--wait" in text
    assert "\n" not in text and err.value.exit_status == 2
    assert store.holder == other()  # untouched


def test_a_stale_lease_is_taken_and_the_taker_says_whose() -> None:
    store = MemoryStore()
    store.create(other(), SETTINGS)
    store.age_s = 61.0
    me = lease.new_holder("r3")
    said = take(store, me)
    assert store.holder == me
    assert len(said) == 1 and "took the lease of cluster c1 from run r-other" in said[0] and "stale" in said[0]


def test_a_holder_on_this_machine_whose_process_is_gone_is_taken_at_once() -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    store = MemoryStore()
    store.create(other(machine=socket.gethostname(), pid=int(dead.stdout)), SETTINGS)
    said = take(store, lease.new_holder("r4"))
    assert store.holder is not None and store.holder.run_id == "r4"
    assert "is gone" in said[0]
    store.holder = other(machine=socket.gethostname(), pid=os.getppid())  # alive: still held
    with pytest.raises(LeaseHeld):
        take(store, lease.new_holder("r5"))


def test_wait_polls_until_the_holder_releases() -> None:
    store = MemoryStore()
    store.create(other(), SETTINGS)
    sleeps: list[float] = []

    def sleep(s: float) -> None:
        sleeps.append(s)
        if len(sleeps) == 3:
            store.release(other())

    me = lease.new_holder("r6")
    said = take(store, me, wait=True, sleep=sleep)
    assert store.holder == me and sleeps == [10, 10, 10]
    assert len(said) == 1 and "in use by run r-other" in said[0] and "waiting" in said[0]


def test_renewal_keeps_the_lease_and_notices_a_takeover() -> None:
    store, me = MemoryStore(), lease.new_holder("r7")
    take(store, me)
    said: list[str] = []
    renewal = lease.Renewal(store, me, SETTINGS, cluster="c1", say=said.append)
    store.age_s = 50.0
    assert renewal.renew_once() and store.age_s == 0.0 and store.renewals == 1 and not renewal.lost
    store.holder = other("r-taker")
    assert not renewal.renew_once() and renewal.lost
    assert "taken by another run" in said[0]


def test_renewal_thread_stops_and_release_removes_only_our_lease() -> None:
    store, me = MemoryStore(), lease.new_holder("r8")
    take(store, me)
    renewal = lease.Renewal(store, me, LeaseSettings(renew_s=0.01, stale_s=1), cluster="c1", say=print)
    renewal.start()
    renewal.stop()
    store.release(other())
    assert store.holder == me
    store.release(me)
    assert store.read() is None


def test_a_store_that_keeps_changing_gives_up() -> None:
    class Flapping(MemoryStore):
        def create(self, holder: Holder, settings: LeaseSettings) -> bool:
            return False

        def read(self) -> Observed | None:
            return None

    with pytest.raises(XpushareError, match="other runs kept changing it"):
        take(Flapping(), lease.new_holder("r9"))


def test_settings_and_live_holder() -> None:
    assert LeaseSettings.from_params({}) == LeaseSettings(10, 60)
    assert LeaseSettings.from_params({"lease_renew_s": 1, "lease_stale_s": "5"}) == LeaseSettings(1, 5)
    for bad in ({"lease_renew_s": "x"}, {"lease_renew_s": 0}, {"lease_renew_s": 60, "lease_stale_s": 60}):
        with pytest.raises(UsageError):
            LeaseSettings.from_params(bad)
    assert live_holder(Observed(other(), 59, "1"), SETTINGS) == other()
    assert live_holder(Observed(other(), 61, "1"), SETTINGS) is None and live_holder(None, SETTINGS) is None
    with pytest.raises(ValueError):
        Holder.from_json('{"run_id": "x"}')


# -- the host lock file, with this machine's sh --------------------------------------------------


def test_lock_file_create_read_renew_take_release(tmp_path: Path) -> None:
    path = tmp_path / "locks" / "xpushare-run.lease"
    store = LockFileStore(LocalHost(), str(path))
    assert store.read() is None
    first = lease.new_holder("h1")
    assert store.create(first, SETTINGS) and not store.create(lease.new_holder("h2"), SETTINGS)
    seen = store.read()
    assert seen is not None and seen.holder == first and seen.age_s < 60
    os.utime(path, (path.stat().st_atime, path.stat().st_mtime - 600))  # not renewed for 10 minutes
    old = store.read()
    assert old is not None and old.age_s >= 600
    assert store.renew(first, SETTINGS)
    renewed = store.read()
    assert renewed is not None and renewed.age_s < 600
    second = lease.new_holder("h2")
    assert not store.renew(second, SETTINGS)
    assert not store.take(second, SETTINGS, replace(old, version=old.version + " "))  # changed meanwhile
    assert store.read() is not None and store.read().holder == first  # type: ignore[union-attr]
    assert store.take(second, SETTINGS, renewed)
    assert store.read().holder == second  # type: ignore[union-attr]
    assert not store.renew(first, SETTINGS)
    store.release(first)
    assert path.exists()
    store.release(second)
    assert not path.exists() and sorted(p.name for p in path.parent.iterdir()) == []


def test_lock_path_defaults() -> None:
    cluster = local_cluster()
    assert lease.lock_path(cluster, True) == os.path.join(os.environ["XPUSHARE_LEASE_DIR"], "xpushare-run.lease")
    assert lease.lock_path(cluster, False) == "/tmp/xpushare-run.lease"
    assert lease.lock_path(replace(cluster, params={"lease_path": "/srv/x.lease"}), False) == "/srv/x.lease"


# -- a suite task on the local cluster ------------------------------------------------------------


def invoke(*args: str, root: Path, lease_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XPUSHARE_LEASE_DIR": str(lease_dir)}
    return run_tool([sys.executable, "-m", "invoke", *args, "--root", str(root)], cwd=ROOT, env=env, timeout=240)


def test_a_run_on_a_held_local_cluster_stops_with_one_line_and_exit_2(tmp_path: Path) -> None:
    holder = other("busy-run", machine=socket.gethostname(), pid=os.getpid())  # alive: this test
    store = LockFileStore(LocalHost(), str(tmp_path / "xpushare-run.lease"))
    assert store.create(holder, SETTINGS)
    proc = invoke("func", "--cluster", "local", "--run-id", "second", "--case", "FUNC-009", root=tmp_path,
                  lease_dir=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "cluster local is in use by run busy-run" in lines[0], proc.stderr
    assert not (tmp_path / ".tmplog" / "second").exists()  # refused before anything was written
    assert store.read().holder == holder  # type: ignore[union-attr]


def test_a_run_takes_a_stale_local_lease_and_releases_it(tmp_path: Path) -> None:
    path = tmp_path / "xpushare-run.lease"
    store = LockFileStore(LocalHost(), str(path))
    assert store.create(other("old-run"), SETTINGS)
    os.utime(path, (0, path.stat().st_mtime - 3600))
    proc = invoke("func", "--cluster", "local", "--run-id", "taker", "--case", "FUNC-009", root=tmp_path,
                  lease_dir=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "took the lease of cluster local from run old-run" in proc.stdout
    assert not path.exists()  # released at the end


def test_clean_spares_the_run_that_holds_the_lease(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``invoke clean`` without ``--run-id`` asks the lease which run is alive (engine.lease.live_run_ids)."""
    import io

    from xpushare.engine import lease as run_lease
    from xpushare.inventory import schema

    monkeypatch.setenv("XPUSHARE_LEASE_DIR", str(tmp_path))
    cluster = schema.load(None).cluster("local")
    assert run_lease.live_run_ids(cluster) == frozenset()
    with run_lease.held(cluster, "r-live", out=io.StringIO()):
        assert run_lease.live_run_ids(cluster) == frozenset({"r-live"})
    assert run_lease.live_run_ids(cluster) == frozenset()


def test_clean_does_not_spare_a_dead_run_of_this_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A lease whose holder ran on this machine and whose process is gone (a run killed with SIGKILL) is fresh,
    but the run is not alive: ``invoke clean`` without ``--run-id`` removes its leftovers, as the next run
    would take its lease. A holder on another machine counts as alive until the lease goes stale."""
    from xpushare.engine import lease as run_lease
    from xpushare.inventory import schema

    monkeypatch.setenv("XPUSHARE_LEASE_DIR", str(tmp_path))
    cluster = schema.load(None).cluster("local")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    store = LockFileStore(LocalHost(), str(tmp_path / "xpushare-run.lease"))
    killed = other("r-killed", machine=socket.gethostname(), pid=int(dead.stdout))
    assert store.create(killed, SETTINGS)
    assert run_lease.live_run_ids(cluster) == frozenset()
    store.release(killed)
    assert store.create(other("r-elsewhere", machine="another-machine", pid=int(dead.stdout)), SETTINGS)
    assert run_lease.live_run_ids(cluster) == frozenset({"r-elsewhere"})
