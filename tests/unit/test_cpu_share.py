"""tests/cpu_share.py: under pytest-xdist a ``cpu_exclusive`` test starts only once every other test has finished,
and never beside another exclusive one; collection puts them last; two modules that mix them with other tests are
refused."""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

CONFTEST = textwrap.dedent("""
    pytest_plugins = ["tests.cpu_share"]

    def pytest_configure(config):
        config.addinivalue_line("markers", "cpu_exclusive: runs last, alone")
""")

# Each test appends (name, start, end) to a shared file; the slow ones keep a worker busy while the exclusive
# tests would otherwise start.
MODULE = textwrap.dedent("""
    import os, time
    import pytest

    def span(name, seconds):
        start = time.time()
        time.sleep(seconds)
        with open(os.environ["SPANS"], "a") as fh:
            fh.write(f"{name} {start} {time.time()}\\n")

    @pytest.mark.cpu_exclusive
    def test_exclusive_a():
        span("exclusive_a", 0.5)

    def test_slow_other():
        span("slow", 3.0)

    @pytest.mark.cpu_exclusive
    def test_exclusive_b():
        span("exclusive_b", 0.5)

    def test_quick_other():
        span("quick", 0.1)
""")


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    from tests.paths import REPO_ROOT

    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    monkeypatch.delenv("PYTEST_XDIST_TESTRUNUID", raising=False)  # this session's ledger is not the inner one's
    monkeypatch.setenv("SPANS", str(pytester.path / "spans.txt"))
    pytester.makeconftest(CONFTEST)
    return pytester


def test_exclusive_tests_run_last_and_alone_under_xdist(project: pytest.Pytester) -> None:
    project.makepyfile(test_timing=MODULE)
    result = project.runpytest_subprocess("-n", "3", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=4)
    spans = {name: (float(a), float(b)) for name, a, b in
             (line.split() for line in (project.path / "spans.txt").read_text().splitlines())}
    others_end = max(spans["slow"][1], spans["quick"][1])
    a, b = spans["exclusive_a"], spans["exclusive_b"]
    assert min(a[0], b[0]) >= others_end, spans
    assert a[1] <= b[0] or b[1] <= a[0], spans  # never side by side


def test_collection_puts_exclusive_tests_last(project: pytest.Pytester) -> None:
    project.makepyfile(test_timing=MODULE, test_plain="def test_plain():\n    pass\n")
    result = project.runpytest_subprocess("--collect-only", "-q")
    ids = [line for line in result.outlines if "::" in line]
    assert ids == ["test_plain.py::test_plain", "test_timing.py::test_slow_other", "test_timing.py::test_quick_other",
                   "test_timing.py::test_exclusive_a", "test_timing.py::test_exclusive_b"]


def test_two_mixed_modules_are_refused(project: pytest.Pytester) -> None:
    project.makepyfile(test_one=MODULE, test_two=MODULE)
    result = project.runpytest_subprocess("--collect-only", "-q")
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*mix cpu_exclusive tests with others: only one module may*"])


def test_an_exclusive_test_stops_waiting_for_tests_that_are_not_coming(project: pytest.Pytester,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """``-x``: the first failure stops the run before the other test of its module starts, while the exclusive test,
    alone in its module on the other worker, already waits for it. It goes ahead once no other worker has run a test
    for the idle time (3 s here) instead of waiting out its hour."""
    monkeypatch.setenv("XPUSHARE_CPU_SHARE_IDLE_S", "3")
    project.makepyfile(
        test_a=textwrap.dedent("""
            import time

            def test_fails_first():
                time.sleep(2.0)
                assert False

            def test_never_started():
                pass
        """),
        test_b=textwrap.dedent("""
            import pytest

            @pytest.mark.cpu_exclusive
            def test_exclusive():
                pass
        """))
    started = time.monotonic()
    result = project.runpytest_subprocess("-n", "2", "--dist", "loadfile", "-x", "-p", "no:cacheprovider",
                                          timeout=600)
    assert result.ret in (pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.INTERRUPTED)  # xdist's -x ends INTERRUPTED
    assert time.monotonic() - started < 300, "waited for a test the stopped run never started"


def test_no_finished_test_yet_is_not_idle_until_the_idle_time_has_passed_since_the_wait_began(tmp_path: Path) -> None:
    """At a session's start no test has finished (no ledger) and the other workers may not have begun (no marker):
    an exclusive test that had just begun to wait ran at once beside them (seen under load); it waits the idle time
    first."""
    from tests.cpu_share import IDLE_S, others_idle

    ledger, mine = tmp_path / "s.done", tmp_path / "s.running.gw0"
    mine.write_text("x")
    now = time.time()
    assert not others_idle(ledger, mine, since=now)
    assert others_idle(ledger, mine, since=now - IDLE_S - 1)
    (tmp_path / "s.running.gw1").write_text("y")  # another worker runs a test
    assert not others_idle(ledger, mine, since=now - IDLE_S - 1)
