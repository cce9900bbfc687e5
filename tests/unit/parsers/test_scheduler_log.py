"""Tests of xpushare.parsers.scheduler_log on the captured sample and handcrafted logs."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.paths import FIXTURES
from xpushare.evidence import scheduler_log_file
from xpushare.parsers import scheduler_log, scheduler_log_parser, scheduler_log_records
from xpushare.parsers.scheduler_log_parser import SchedulerLogParser
from xpushare.parsers.scheduler_log_records import LimitChange

SAMPLES = FIXTURES / "samples"
FIXTURES = FIXTURES / "parsers"

GPU_A = "GPU-1f4246ce-cc92-8c8d-9f31-83660be04a1e"
GPU_B = "GPU-dc895bd6-43d7-a984-b1ee-870332194bd1"


# ---------------------------------------------------------------------------------------------- real sample


def test_real_sample() -> None:
    s = scheduler_log_file.parse_file(SAMPLES / "scheduler.log")
    text = (SAMPLES / "scheduler.log").read_text()
    # Level counts must agree with a plain count of the prefixes in the file.
    for level in ("INFO", "WARN", "DEBUG"):
        assert s.levels.get(level, 0) == text.count(f"[XPUSHARE][{level}]: ")
    assert s.levels.get("FATAL", 0) == 0 and s.fatal_lines == ()
    assert s.lines == len(text.splitlines())
    assert s.generation == "xpushare"
    assert s.starts == 1 and s.debug_mode is True
    assert s.scheduling_mode == "AUTO"
    assert s.scheduling_mode_line == "Scheduling mode: AUTO (default)"
    assert s.metrics_enabled is True
    # Two processes registered on GPU key "0" (outside Kubernetes: pod/namespace "none").
    assert [(r.cid, r.gpu, r.pod, r.namespace) for r in s.registrations] == [
        ("4bc9ebed1b560511", "0", "none", "none"),
        ("0600a8daa2b6e910", "0", "none", "none"),
    ]
    assert s.gpu_client_counts == {"0": 2}
    assert s.pod_gpu == {("none", "none"): "0"}
    assert s.sent == {"SCHED_ON": 2}
    assert s.received == {"REGISTER": 2, "MEM_UPDATE": 5}
    assert s.lock_ok == 0 and s.drop_lock == 0  # unlimited clients never take the lock
    # (docs/sut/client.md §lock-control)
    assert s.disconnects == 2 and s.active_clients == ()
    assert s.first_ts is None and s.duration_s is None  # captured without --timestamps
    with pytest.raises(ValueError):
        s.rates()
    assert s.rates(10.0)["registration"] == pytest.approx(0.2)


# ---------------------------------------------------------------------------------------------- handcrafted


@pytest.fixture(scope="module")
def ts_summary() -> scheduler_log_records.SchedulerLogSummary:
    return scheduler_log_file.parse_file(FIXTURES / "scheduler_timestamps.log")


def test_timestamps_and_duration(ts_summary: scheduler_log_records.SchedulerLogSummary) -> None:
    assert ts_summary.first_ts == datetime(2026, 2, 14, 10, 0, 0, 0, tzinfo=timezone.utc)
    assert ts_summary.last_ts == datetime(2026, 2, 14, 10, 0, 20, tzinfo=timezone.utc)
    assert ts_summary.duration_s == pytest.approx(20.0, abs=1e-6)
    assert ts_summary.registrations[0].ts == datetime(2026, 2, 14, 10, 0, 1, 500700, tzinfo=timezone.utc)


def test_registrations_and_gpu_map(ts_summary: scheduler_log_records.SchedulerLogSummary) -> None:
    assert [(r.cid, r.gpu, r.namespace, r.pod) for r in ts_summary.registrations] == [
        ("a309de43403205dc", GPU_A, "default", "xpf-a-1"),
        ("f2a9071d95ed7ff5", GPU_B, "team-b", "xpf-b-1"),
        ("0123456789abcdef", GPU_A, "team-b", "xpf-b-1"),
    ]
    # xpf-b-1 re-registered on GPU A after its first process went away: the last registration wins.
    assert ts_summary.pod_gpu == {("default", "xpf-a-1"): GPU_A, ("team-b", "xpf-b-1"): GPU_A}
    assert ts_summary.gpu_client_counts == {GPU_A: 2, GPU_B: 1}
    assert ts_summary.clients_on_gpu(GPU_A) == ("a309de43403205dc", "0123456789abcdef")
    assert ts_summary.active_clients == ("a309de43403205dc", "0123456789abcdef")


def test_lock_traffic_counts(ts_summary: scheduler_log_records.SchedulerLogSummary) -> None:
    s = ts_summary
    assert s.lock_ok == 2
    # 2 generic DROP_LOCK lines (throttle + overload); the "for fallback to serial mode" line that
    # follows the overload one is the same message and must not be counted twice.
    assert s.drop_lock == 2
    assert s.fallback_drops == 1
    assert s.throttles == 1 and s.throttles_by_client == {"a309de43403205dc": 1}
    assert s.admissions == 2 and s.releases == 1
    assert s.promotions == 1 and s.wait_queue_moves == 1
    assert s.overload_warnings == 1
    assert s.sent["MEM_AVAILABLE"] == 1 and s.sent["UPDATE_LIMIT"] == 2 and s.sent["UPDATE_CORE_LIMIT"] == 1
    assert s.received == {"REGISTER": 3, "REQ_LOCK": 2, "LOCK_RELEASED": 1, "SET_TQ": 1}
    assert s.sent_by_client["a309de43403205dc"]["LOCK_OK"] == 2
    # "Removing client <id> from wait queue" is not a disconnect; <UNREGISTERED> is.
    assert s.disconnects == 2 and s.unregistered_disconnects == 1
    assert s.disconnected_clients == frozenset({"f2a9071d95ed7ff5"})


def test_limit_changes(ts_summary: scheduler_log_records.SchedulerLogSummary) -> None:
    changes = [(c.kind, c.namespace, c.pod, c.old, c.new, c.initial) for c in ts_summary.limit_changes]
    assert changes == [
        ("compute", "default", "xpf-a-1", None, 40, True),
        ("memory", "default", "xpf-a-1", None, 2147483648, True),
        ("compute", "default", "xpf-a-1", 40, 100, False),
        ("memory", "team-b", "xpf-b-1", 2147483648, 8589934592, False),
    ]
    sends = [(x.kind, x.cid, x.value) for x in ts_summary.limit_sends]
    assert sends == [
        ("memory", "a309de43403205dc", 2147483648),
        ("compute", "a309de43403205dc", 100),
        ("memory", "f2a9071d95ed7ff5", 8589934592),
    ]
    core = ts_summary.limit_changes[2]
    assert core.ts == datetime(2026, 2, 14, 10, 0, 10, tzinfo=timezone.utc)


def test_levels_mode_and_fatal(ts_summary: scheduler_log_records.SchedulerLogSummary) -> None:
    s = ts_summary
    assert s.scheduling_mode == "SERIAL"
    assert s.debug_mode is False
    assert s.levels == {"INFO": 47, "DEBUG": 2, "WARN": 2, "FATAL": 1}  # grep -c per level
    assert s.lines == 52
    assert s.fatal_count == 1
    assert s.fatal_lines[0].text == "Condition failed: xpushare_send_noblock() failed unrecoverably"
    assert s.fatal_lines[0].lineno == 52  # the last line


def test_rates(ts_summary: scheduler_log_records.SchedulerLogSummary) -> None:
    r = ts_summary.rates()  # over the 20 s timestamp span
    assert r["lock_ok"] == pytest.approx(2 / 20.0)
    assert r["drop_lock"] == pytest.approx(2 / 20.0)
    assert r["req_lock"] == pytest.approx(2 / 20.0)
    assert set(r) == set(scheduler_log_records.RATE_KEYS)
    assert ts_summary.rates(4.0)["lock_ok"] == 0.5
    with pytest.raises(ValueError):
        ts_summary.rates(0)


def test_nvshare_generation() -> None:
    s = scheduler_log_file.parse_file(FIXTURES / "scheduler_nvshare.log")
    assert s.generation == "nvshare"
    assert [(r.cid, r.gpu, r.pod) for r in s.registrations] == [
        ("1111111111111111", None, "nvshare-cross-gpu-1"),
        ("2222222222222222", None, "nvshare-cross-gpu-2"),
    ]
    assert s.gpu_client_counts == {None: 2}
    assert s.lock_ok == 1 and s.drop_lock == 1 and s.received["LOCK_RELEASED"] == 1
    assert s.starts == 1 and s.debug_mode is True
    assert s.scheduling_mode is None  # nvshare has no scheduling-mode line
    assert s.levels == {"INFO": 12, "DEBUG": 2, "WARN": 1}
    table = s.distribution_table()
    assert "nvshare-cross-gpu-1" in table and " - " in table.splitlines()[-1] + " "


def test_distribution_table_layout(ts_summary: scheduler_log_records.SchedulerLogSummary) -> None:
    lines = ts_summary.distribution_table().splitlines()
    assert lines[0] == scheduler_log_records.DISTRIBUTION_TITLE
    assert [c.strip() for c in lines[1].split("|")] == ["Pod Name", "Client ID", "GPU UUID"]
    assert set(lines[2]) <= {"-", "+"}
    rows = [[c.strip() for c in ln.split("|")] for ln in lines[3:]]
    assert rows == [
        ["xpf-a-1", "a309de43403205dc", GPU_A],
        ["xpf-b-1", "f2a9071d95ed7ff5", GPU_B],
        ["xpf-b-1", "0123456789abcdef", GPU_A],
    ]
    assert not ts_summary.distribution_table(title=False).startswith("Scheduler")


def test_all_digit_client_id_stays_text() -> None:
    s = scheduler_log.parse_text(
        "[XPUSHARE][INFO]: Registered client 0000000000000042 on GPU 0 with Pod name = p, Pod namespace = n\n"
    )
    assert "0000000000000042" in s.distribution_table()  # tabulate must not turn it into 42


def test_kubectl_prefix_and_crlf_and_missing_trailing_newline() -> None:
    lines = [
        "[pod/xpushare-scheduler-abc/sched] 2026-02-14T10:00:00Z [XPUSHARE][INFO]: Sent LOCK_OK to client "
        "a309de43403205dc\r\n",
        "[pod/xpushare-scheduler-abc/sched] 2026-02-14T10:00:02Z [XPUSHARE][INFO]: Sent LOCK_OK to client "
        "a309de43403205dc",
    ]
    s = scheduler_log.parse_lines(lines)
    assert s.lock_ok == 2 and s.levels == {"INFO": 2}
    assert s.duration_s == 2.0


def test_garbage_and_near_misses() -> None:
    lines = [
        "random text",
        "[XPUSHARE][TRACE]: Sent LOCK_OK to client a309de43403205dc",  # unknown level -> OTHER, not parsed
        "[FOO][INFO]: Sent LOCK_OK to client a309de43403205dc",  # unknown generation
        "[XPUSHARE][INFO]: Registered client XYZ on GPU 0 with Pod name = p, Pod namespace = n",
        "[XPUSHARE][INFO]: Sent LOCK_OK to someone",
        "[XPUSHARE][INFO]: Received message of unknown type 99 from a309de43403205dc",
        "[XPUSHARE][INFO]: Compute limit changed for pod default/x: abc% -> 1%",
        "",
    ]
    s = scheduler_log.parse_lines(lines)
    assert s.levels == {"OTHER": 4, "INFO": 4}
    assert s.registrations == () and s.sent == {} and s.received == {} and s.limit_changes == ()


def test_streaming_equals_whole_parse_and_parser_is_incremental() -> None:
    text = (FIXTURES / "scheduler_timestamps.log").read_text()
    p = SchedulerLogParser()
    for i, line in enumerate(text.splitlines(keepends=True)):
        p.feed(line)
        if i == 20:
            mid = p.summary()
    assert mid.lines == 21 and mid.lock_ok == 1
    assert p.summary() == scheduler_log.parse_text(text)


def test_event_caps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scheduler_log_parser, "MAX_EVENTS", 2)
    monkeypatch.setattr(scheduler_log_parser, "MAX_FATAL", 1)
    reg = "[XPUSHARE][INFO]: Registered client {:016x} on GPU 0 with Pod name = p{}, Pod namespace = n"
    lines = [reg.format(i, i) for i in range(5)] + ["[XPUSHARE][FATAL]: boom"] * 3
    s = scheduler_log.parse_lines(lines)
    assert len(s.registrations) == 2 and s.registrations_total == 5
    assert s.gpu_client_counts == {"0": 5}  # counts are not capped
    assert len(s.fatal_lines) == 1 and s.fatal_count == 3


def test_to_dict_is_json_ready(ts_summary: scheduler_log_records.SchedulerLogSummary) -> None:
    import json

    d = json.loads(json.dumps(ts_summary.to_dict()))
    assert d["lock_ok"] == 2 and d["pod_gpu"]["team-b/xpf-b-1"] == GPU_A
    assert d["first_ts"] == "2026-02-14T10:00:00+00:00"


def test_limit_change_is_frozen() -> None:
    c = LimitChange("memory", "ns", "p", None, 1, True, None, 1)
    with pytest.raises(AttributeError):
        c.new = 2  # type: ignore[misc]


# ---------------------------------------------------------------------------------------------- fuzz

_TOKENS = st.sampled_from(
    [
        "[XPUSHARE][INFO]: ",
        "[NVSHARE][FATAL]: ",
        "[XPUSHARE][",
        "]: ",
        "2026-02-14T10:00:00.1Z ",
        "2026-99-99T99:99:99Z ",
        "[pod/a/b] ",
        "Registered client ",
        "a309de43403205dc",
        " on GPU ",
        " with Pod name = ",
        ", Pod namespace = ",
        "Sent ",
        "Received ",
        " to client ",
        "LOCK_OK",
        "Memory limit changed for pod ",
        "Compute limit changed for pod ",
        "Applying initial memory limit for ",
        "Sending UPDATE_LIMIT to client ",
        "Throttling client ",
        "Removing client ",
        "Scheduling mode: ",
        "a/b: ",
        "1",
        "% -> ",
        " -> ",
        " bytes",
        "\r",
        " ",
    ]
)


@given(st.lists(st.one_of(st.text(max_size=80), st.lists(_TOKENS, max_size=12).map("".join)), max_size=30))
def test_fuzz_feed_never_raises(lines: list[str]) -> None:
    s = scheduler_log.parse_lines(lines)
    assert s.lines == len(lines)
    assert sum(s.levels.values()) == len(lines)
    s.distribution_table()
    s.to_dict()
    if s.duration_s:
        s.rates()


def test_head_cache_overflow_keeps_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Beyond MAX_HEADS distinct line heads, lines are still counted and interpreted."""
    monkeypatch.setattr(scheduler_log_parser, "MAX_HEADS", 3)
    lines = [f"[XPUSHARE][DEBUG]: word{i} x" for i in range(10)]
    lines += ["[XPUSHARE][INFO]: Sent LOCK_OK to client a309de43403205dc"] * 2
    lines += ["[XPUSHARE][FATAL]: Condition failed: x"]
    s = scheduler_log.parse_lines(lines)
    assert s.levels == {"DEBUG": 10, "INFO": 2, "FATAL": 1}
    assert s.lock_ok == 2 and s.fatal_count == 1 and len(s.fatal_lines) == 1


def test_feed_single_lines_equals_feed_lines() -> None:
    text = (FIXTURES / "scheduler_timestamps.log").read_text()
    one = SchedulerLogParser()
    for line in text.splitlines():
        one.feed(line)
    assert one.summary() == scheduler_log.parse_lines(text.splitlines(keepends=True))


def test_parse_file_splits_on_newline_only(tmp_path: Path) -> None:
    p = tmp_path / "s.log"
    p.write_bytes(
        b"[XPUSHARE][INFO]: Sent LOCK_OK to client a309de43403205dc\r\n"
        b"[XPUSHARE][INFO]: x\ry\n"  # a lone \r is not a line break
        b"\xff\xfe broken utf-8\n"
        b"[XPUSHARE][INFO]: Removing client a309de43403205dc"  # no final newline
    )
    s = scheduler_log_file.parse_file(p)
    assert s.lines == 4
    assert s.levels == {"INFO": 3, "OTHER": 1}
    assert s.lock_ok == 1 and s.disconnects == 1


@given(
    st.text(alphabet=st.sampled_from(["A", "B", "_", ":", " ", "x", "\r", "1"]), max_size=20),
    st.sampled_from(["", "\n", "\r\n"]),
)
def test_inlined_received_matches_reference_handler(rest: str, eol: str) -> None:
    """feed_lines inlines the 'Received' handler for speed; it must count exactly like _on_received."""
    msg = "Received " + rest
    s = scheduler_log.parse_lines(["[XPUSHARE][DEBUG]: " + msg + eol])
    ref = SchedulerLogParser()
    ref._on_received(msg.rstrip("\r\n"), None, 1)  # trailing CR/LF are never part of a message
    assert s.received == ref.received
