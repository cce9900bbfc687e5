"""HAMi-core's log lines and MPS's server log (parsers/sut_lines), on fixtures in the formats their sources print."""

from __future__ import annotations

from tests.paths import REPO_ROOT
from xpushare.parsers.sut_lines import hami_lines, mps_client_events

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "parsers"


def test_hami_core_lines_carry_the_pid_level_and_message() -> None:
    lines = hami_lines((FIXTURES / "hami_core_probe.log").read_text())
    assert [(x.level, x.pid) for x in lines] == [("Msg", 4242), ("Msg", 4242), ("ERROR", 4242),
                                                 ("Msg", 4242)]
    assert lines[0].message == "Initializing....." and lines[0].file == "libvgpu.c"
    assert lines[2].message == "Device 0 OOM 1140850688 / 1073741824"


def test_other_lines_and_garbage_are_skipped() -> None:
    assert hami_lines("[HAMI-core Msg(x:1:f.c:2)]: no pid\n[XPUSHARE][INFO]: hello\n\x00\n") == []
    bad = "[2026-11-28 16:00:01.390 Server 5100] New client x connected\nNew client 1 connected\n"
    assert mps_client_events(bad) == []


def test_mps_server_log_gives_connects_and_disconnects() -> None:
    events = mps_client_events((FIXTURES / "mps_server.log").read_text())
    assert [(e.client_pid, e.connected) for e in events] == [(4242, True), (4242, False), (4250, True)]
    assert events[0].server_pid == 5100 and events[0].when == "2026-11-28 16:00:01.390"


def test_the_r580_drivers_server_log_gives_connects_per_context_and_the_process_leaving() -> None:
    """The lines an R580 driver's MPS server wrote on an H200 (docs/runs/2026-11-28-cross-sut): a client connects
    once per context (``Client {PID: p, Context ID: c} connected``) and leaves as ``Client process p disconnected``;
    the documented ``New client p connected`` never appears there (the first real run judged every case ERROR on
    that)."""
    text = (FIXTURES / "mps_server_r580.log").read_text(encoding="utf-8")
    events = mps_client_events(text)
    joined = {e.client_pid for e in events if e.connected}
    assert {17960, 18382, 18603} <= joined
    assert any(not e.connected and e.client_pid == 18382 for e in events)
    assert all(e.server_pid == 17991 for e in events)


def test_a_server_pid_of_four_digits_is_padded_and_still_read() -> None:
    """The server pads its pid (``Server  6366``, two spaces, on the H200 of run 5 of docs/runs/2026-11-28-cross-sut):
    with one space required every line was skipped and each MPS workload judged "never connected"."""
    text = (FIXTURES / "mps_server_r580_padded_pid.log").read_text(encoding="utf-8")
    assert "Server  6366]" in text
    events = mps_client_events(text)
    assert [(e.client_pid, e.connected) for e in events] == [(6100, True), (6100, True), (6100, False)]
    assert {e.server_pid for e in events} == {6366}
