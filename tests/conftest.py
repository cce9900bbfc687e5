"""Shared pytest fixtures: the SSH test lab (real sshd daemons on 127.0.0.0/8, see tests/lab/README.md).

Without OpenSSH the lab fixtures skip; with ``XPUSHARE_REQUIRE_LAB=1`` (set in CI) they fail instead.
"""

from __future__ import annotations

import os
import resource
import sys
import tempfile
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

_REPO_ROOT = str(Path(__file__).resolve().parent.parent)
if _REPO_ROOT not in sys.path:  # plain `pytest` only puts tests/ on sys.path; the lab is tests.lab
    sys.path.insert(0, _REPO_ROOT)

from tests import toolrun  # noqa: E402
from tests.lab.sshd import SshLab, lab_unavailable_reason  # noqa: E402

pytest_plugins = ["tests.cpu_share"]  # cpu_exclusive tests run last, alone


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--sut-src", default=None, metavar="DIR",
                     help="xpushare source tree the lab builds and runs (default: the upstream tree; "
                          "any patched copy, e.g. a mutant)")
    parser.addoption("--module-durations", type=int, default=0, metavar="N",
                     help="list the N slowest test modules (setup, call and teardown of their tests summed: with "
                          "--dist loadfile a module runs on one worker, so this is its share of the run)")


#: Seconds per test module (setup + call + teardown of each of its tests), collected from the test reports
#: (under pytest-xdist the controller receives every worker's reports), and the CPU seconds of the same phases.
_MODULE_SECONDS: dict[str, float] = {}
_MODULE_CPU: dict[str, float] = {}
#: When each module's first phase began and its last ended (epoch seconds): where the run's tail comes from.
_MODULE_SPAN: dict[str, tuple[float, float]] = {}
_CPU_PROPERTY = "cpu_s"
#: This process's CPU seconds when its last test phase ended (each phase's report carries the difference).
_LAST_CPU = 0.0


def _cpu_seconds() -> float:
    """User + system CPU of this process, of the children it has waited for (a lab's daemons count when
    their module's fixture stops them) and of the tool's runs forked for it (tests/toolrun.py)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime + toolrun.cpu_seconds()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None],
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    # CPU of the phase just ended, measured from the end of the previous phase in this process: with
    # ``--dist loadfile`` a module runs in one worker, so the sum per module is the module's CPU.
    global _LAST_CPU
    now = _cpu_seconds()
    report.user_properties.append((_CPU_PROPERTY, round(now - _LAST_CPU, 3)))
    _LAST_CPU = now
    return report


def pytest_collection_finish(session: pytest.Session) -> None:
    global _LAST_CPU
    _LAST_CPU = _cpu_seconds()  # collection is nobody's module


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    module = report.nodeid.split("::", 1)[0]
    _MODULE_SECONDS[module] = _MODULE_SECONDS.get(module, 0.0) + report.duration
    first, last = _MODULE_SPAN.get(module, (report.start, report.stop))
    _MODULE_SPAN[module] = (min(first, report.start), max(last, report.stop))
    cpu = sum(value for name, value in report.user_properties
              if name == _CPU_PROPERTY and isinstance(value, (int, float)))
    _MODULE_CPU[module] = _MODULE_CPU.get(module, 0.0) + cpu


def pytest_unconfigure(config: pytest.Config) -> None:
    toolrun.stop_server()  # each worker waits for its fork server: the CPU of the tool's runs counts in CI's total


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int,
                            config: pytest.Config) -> None:
    count = config.getoption("--module-durations")
    if count <= 0 or not _MODULE_SECONDS:
        return
    terminalreporter.write_sep("=", f"slowest {count} test modules (LONG_MODULES in tests/conftest.py orders them)")
    for module, seconds in sorted(_MODULE_SECONDS.items(), key=lambda kv: -kv[1])[:count]:
        terminalreporter.write_line(f"{seconds:8.1f}s {_MODULE_CPU.get(module, 0.0):8.1f} CPU-s {module}")
    begin = min(first for first, _ in _MODULE_SPAN.values())
    terminalreporter.write_sep("=", f"the {count} test modules that ended last (start and end, s from the first test)")
    for module, (first, last) in sorted(_MODULE_SPAN.items(), key=lambda kv: -kv[1][1])[:count]:
        terminalreporter.write_line(f"{first - begin:8.1f} {last - begin:8.1f} {module}")
    terminalreporter.write_sep("=", f"the {count} test modules using the most CPU (user + system, with children)")
    for module, cpu in sorted(_MODULE_CPU.items(), key=lambda kv: -kv[1])[:count]:
        terminalreporter.write_line(f"{cpu:8.1f} CPU-s {_MODULE_SECONDS.get(module, 0.0):8.1f}s {module}")


def pytest_configure(config: pytest.Config) -> None:
    # Runs on the built-in `local` cluster take its lease (a lock file in the temporary directory, see
    # xpushare.engine.lease): each pytest process (xdist worker) gets a directory of its own, so tests that run
    # concurrently never refuse each other; tests of the lease itself set XPUSHARE_LEASE_DIR themselves. Workers
    # inherit the controller's environment, so a worker makes its own directory inside the controller's.
    base = os.environ.get("XPUSHARE_LEASE_DIR") or tempfile.mkdtemp(prefix="xpushare-lease-")
    worker = getattr(config, "workerinput", {}).get("workerid")
    os.environ["XPUSHARE_LEASE_DIR"] = lease_dir = tempfile.mkdtemp(prefix=f"{worker}-", dir=base) if worker else base
    # The files the lease protects go with it: two workers' runs with one run id (``r2``) on ``local`` would
    # otherwise stop each other's workload processes at run start (xpushare.backends.host STOP_LEFTOVERS).
    os.environ["XPUSHARE_SPAWN_DIR"] = os.path.join(lease_dir, "spawn")
    src = config.getoption("--sut-src")
    if src:  # the lab's builds read it (tests.lab.sut.default_source), in xdist workers too
        os.environ["XPUSHARE_SUT_SRC"] = str(Path(src).expanduser().resolve())


#: (name, address) of the standard lab hosts.
LAB_HOSTS: tuple[tuple[str, str], ...] = (
    ("lab-master", "127.0.0.11"),
    ("lab-node1", "127.0.0.12"),
    ("lab-node2", "127.0.0.13"),
)


def _require_lab() -> None:
    """Skip the test if the lab cannot run here; fail instead when XPUSHARE_REQUIRE_LAB=1."""
    reason = lab_unavailable_reason()
    if reason is None:
        return
    if os.environ.get("XPUSHARE_REQUIRE_LAB") == "1":
        pytest.fail(f"SSH lab required (XPUSHARE_REQUIRE_LAB=1) but unavailable: {reason}", pytrace=False)
    pytest.skip(f"SSH lab unavailable: {reason}")


def _lab(workdir: Path) -> Iterator[SshLab]:
    """Start the standard hosts in ``workdir``, write ssh_config/known_hosts there, yield, stop."""
    _require_lab()
    with SshLab(workdir) as lab:
        for name, address in LAB_HOSTS:
            lab.add_host(name, address)
        lab.write_known_hosts()
        lab.write_ssh_config()
        yield lab


@pytest.fixture(scope="session")
def ssh_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshLab]:
    """Session-wide lab with lab-master/lab-node1/lab-node2; do not break its hosts (see fresh_ssh_lab)."""
    yield from _lab(tmp_path_factory.mktemp("ssh-lab"))


@pytest.fixture
def fresh_ssh_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshLab]:
    """A private lab per test, same hosts: for tests that rotate keys, stop hosts or kill sessions."""
    yield from _lab(tmp_path_factory.mktemp("fresh-ssh-lab"))


#: The longest modules, longest first (their wall time in the last full run, tests/bench/ci_time.md), down to about
#: 20 s: collected first, so that pytest-xdist's ``--dist loadfile`` hands them out first and the short modules fill
#: in around them. A worker takes its next module while the last two tests of its current one still run, so a long
#: module handed out late waits behind them, and a worker left with the queue's last long module runs alone at the
#: end: the order is what keeps the four workers ending together. The modules of ``cpu_exclusive`` tests go last
#: whatever their place here (tests/cpu_share.py).
LONG_MODULES = (
    "e2e/test_verdict_matrix.py",
    "e2e/test_k8s_isolation_compute.py",
    "e2e/test_k8s_performance.py",
    "e2e/test_k8s_functional.py",
    "e2e/test_k8s_combination.py",
    "e2e/test_k8s_stability.py",
    "e2e/test_host_real_sut.py",
    "e2e/test_k8s_metrics.py",
    "e2e/test_host_stability.py",
    "e2e/test_k8s_quota_probe.py",
    "e2e/test_gpu_faults.py",
    "e2e/test_faults_while_running.py",
    "e2e/test_k8s_isolation.py",
    "e2e/test_metrics_check.py",
    "e2e/test_host_harvest.py",
    "e2e/test_lease.py",
    "unit/engine/test_driver_local.py",
    "e2e/test_deploy_hostlab.py",
    "e2e/test_gpu_health.py",
    "unit/cases/test_metrics.py",
    "unit/engine/test_clusters.py",
    "e2e/test_soak_lease.py",
    "e2e/test_host_isolation.py",
    "unit/test_cpu_share.py",
    "e2e/lab/test_real_sut.py",
    "unit/engine/test_signal_property.py",
    "e2e/lab/test_cluster.py",
    "unit/cli/test_fuzz_tasks.py",
    "e2e/test_under_load.py",
    "e2e/test_workloads.py",
)


def misplaced_marks(module: object) -> list[str]:
    """Names of the module's non-test functions that carry a mark: a mark on a helper (a decorator that
    slipped above the wrong ``def``) is silently ignored by pytest, so the test it was meant for runs without it."""
    return [name for name, obj in vars(module).items()
            if callable(obj) and not name.startswith(("test", "pytest_")) and getattr(obj, "pytestmark", None)
            and not hasattr(obj, "_pytestfixturefunction") and not hasattr(obj, "_fixture_function_marker")
            and getattr(obj, "__module__", None) == getattr(module, "__name__", None)]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for module in {id(m): m for m in (getattr(item, "module", None) for item in items) if m is not None}.values():
        if misplaced := misplaced_marks(module):
            raise pytest.UsageError(f"{module.__name__}: marks on non-test functions {misplaced} are ignored; "
                                    "move them to the test they were meant for")
    rank = {name: i for i, name in enumerate(LONG_MODULES)}
    tests_dir = Path(__file__).resolve().parent
    # stable: the order within a module is kept
    items.sort(key=lambda item: rank.get(item.path.relative_to(tests_dir).as_posix(), len(LONG_MODULES)))
