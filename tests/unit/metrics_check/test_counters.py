"""The DROP_LOCK line of ``invoke metrics-check`` (xpushare/metrics_check/counters.py): the counter on /metrics
against the scheduler log's DROP_LOCK and throttle lines over the load window; FAIL when the counter did not rise
while the log shows DROP_LOCKs, SKIP (never PASS) without throttling or without a readable log."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from xpushare.metrics_check.checklist import CheckLine, exit_status
from xpushare.metrics_check.counters import DROP_LOCK_ITEM, DropLockWindow
from xpushare.metrics_check.endpoint import HttpResponse
from xpushare.model.exit_status import ExitStatus
from xpushare.model.verdict import Status

CID = "a309de43403205dc"


def page(drop_lock: float) -> str:
    return ("# HELP xpushare_scheduler_drop_lock_total DROP_LOCK messages sent\n"
            "# TYPE xpushare_scheduler_drop_lock_total counter\n"
            f"xpushare_scheduler_drop_lock_total {drop_lock:g}\n")


def log(drops: int, throttles: int = 0) -> str:
    lines = [f"[XPUSHARE][INFO]: Registered client {CID} on GPU GPU-x with Pod name = p, Pod namespace = default"]
    lines += [f"[XPUSHARE][INFO]: Throttling client {CID} (Used: 60/50 ms, weighted, wall=60, billed=60, "
              "concurrent=1)"] * throttles
    lines += [f"[XPUSHARE][INFO]: Sent DROP_LOCK to client {CID}"] * drops
    return "\n".join(lines) + "\n"


def reader(logs: list[str]) -> Callable[[], str]:
    """Returns each log in turn, then the last one for ever."""
    it = iter(logs)
    last = [logs[0]]

    def read() -> str:
        last[0] = next(it, last[0])
        return last[0]
    return read


def scraper(body: str, status: int = 200) -> Callable[[], HttpResponse]:
    return lambda: HttpResponse("http://x/metrics", status, "text/plain; version=0.0.4", body, None, 0.01)


def window_line(start: float, end: float, logs: list[str] | None, *, settle_s: float = 5.0) -> CheckLine:
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    window = DropLockWindow(reader(logs) if logs is not None else None, clock=lambda: now[0], sleep=sleep)
    window.open(page(start))
    return window.close(scraper(page(end)), settle_s=settle_s)


def test_counter_that_follows_the_log_passes_naming_both_sources() -> None:
    line = window_line(3, 13, [log(4), log(4), log(9, 2), log(14, 2)])
    assert line.item == DROP_LOCK_ITEM and line.status is Status.PASS, line
    assert "/metrics: +10 (3 -> 13)" in line.observed and "scheduler log: 10 'Sent DROP_LOCK'" in line.observed


def test_counter_that_never_counts_fails() -> None:
    """The mutant drop-lock-not-counted: DROP_LOCKs sent and logged, the counter stays 0."""
    line = window_line(0, 0, [log(0), log(6, 3)])
    assert line.status is Status.FAIL and "rose by 0" in line.observed, line
    assert exit_status([line]) is ExitStatus.FAILED


def test_counter_ahead_of_the_log_fails() -> None:
    line = window_line(0, 50, [log(0), log(5)])
    assert line.status is Status.FAIL, line


def test_no_throttling_in_the_window_is_skip_not_pass() -> None:
    line = window_line(0, 0, [log(2), log(2)], settle_s=3)
    assert line.status is Status.SKIP and "nothing to count" in line.observed
    assert exit_status([line]) is ExitStatus.OK  # a SKIP judged nothing: no failure, no PASS either


def test_no_readable_log_is_skip() -> None:
    line = window_line(0, 5, None)
    assert line.status is Status.SKIP and "not readable" in line.observed


def test_a_log_read_that_fails_is_skip_with_why() -> None:
    from xpushare.model.errors import XpushareError

    def broken() -> str:
        raise XpushareError("kubectl logs: pod gone")

    window = DropLockWindow(broken)
    window.open(page(0))
    line = window.close(scraper(page(0)), settle_s=1)
    assert line.status is Status.SKIP and "pod gone" in line.observed


def test_counter_absent_fails() -> None:
    window = DropLockWindow(reader([log(0), log(3)]), sleep=lambda s: None)
    window.open("")
    assert window.close(scraper(page(3)), settle_s=1).status is Status.FAIL


def test_host_mode_reads_the_inventory_log_file_of_the_scheduler_it_checks(tmp_path: Path) -> None:
    import io

    from xpushare.inventory.schema import ClusterSpec, HostSpec, SchedulerSpec
    from xpushare.metrics_check import targets

    log_file = tmp_path / "scheduler.log"
    log_file.write_text(log(3), encoding="utf-8")
    hosts = (HostSpec("g1", ("gpu",), address="127.0.0.1", local=True),)

    def cluster(path: str | None) -> ClusterSpec:
        return ClusterSpec("bm", "host", "xpushare", "cuda", None, None, hosts,
                           scheduler=SchedulerSpec(metrics_url="http://127.0.0.1:9402", log_file=path))

    found = targets.host_targets(cluster(str(log_file)), load=False, timeout_s=1, notes=io.StringIO())
    assert found[0].read_log is not None and found[0].read_log().count("Sent DROP_LOCK") == 3
    assert targets.host_targets(cluster(None), load=False, timeout_s=1, notes=io.StringIO())[0].read_log is None
