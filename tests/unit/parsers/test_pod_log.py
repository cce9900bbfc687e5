"""Tests of xpushare.parsers.pod_log on the captured sample and handcrafted logs (tests/fixtures/parsers)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.paths import FIXTURES
from xpushare.parsers import client_lines, pod_log

SAMPLES = FIXTURES / "samples"
FIXTURES = FIXTURES / "parsers"


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


# ---------------------------------------------------------------------------------------------- timestamps


def test_strip_timestamp_nanoseconds_truncated_to_micro() -> None:
    ts, rest = pod_log.strip_timestamp("2026-02-14T10:00:00.123456789Z PASS")
    assert ts == datetime(2026, 2, 14, 10, 0, 0, 123456, tzinfo=timezone.utc)
    assert rest == "PASS"


def test_strip_timestamp_offset_and_no_fraction() -> None:
    ts, rest = pod_log.strip_timestamp("2026-02-14T12:00:00+02:00 x y")
    assert ts is not None and ts.utcoffset() == timedelta(hours=2)
    assert ts.astimezone(timezone.utc).hour == 10
    assert rest == "x y"


@pytest.mark.parametrize(
    "line",
    [
        "PASS",
        "2026-02-14 10:00:00.000000: I tensorflow/core ...",  # TF's own time, not RFC3339
        "2026-13-40T10:00:00Z impossible date",
        "2026-02-14T10:00:00Zno-space",
        "",
    ],
)
def test_strip_timestamp_leaves_non_prefixed_lines_alone(line: str) -> None:
    assert pod_log.strip_timestamp(line) == (None, line)


# ---------------------------------------------------------------------------------------------- real sample


def test_real_sample_pod_a() -> None:
    text = read(SAMPLES / "pod_a.log")
    # The sample ends with "PASS", "--- 11.18428111076355 seconds ---", "exit=0".
    assert pod_log.runtime_seconds(text) == pytest.approx(11.18428111076355, abs=0)
    assert pod_log.has_pass_marker(text)
    assert client_lines.client_id(text) == "0600a8daa2b6e910"
    assert pod_log.oom_markers(text) == []  # a healthy run: allocations succeed
    assert [(u.kind, u.percent) for u in client_lines.core_limit_updates(text)] == [("initial", 100)]
    assert client_lines.memory_limit_updates(text) == []  # no limit was set for that run
    assert pod_log.last_tqdm(text) is None  # the run used a plain loop without tqdm
    assert pod_log.quota_probes(text) == []


# ---------------------------------------------------------------------------------------------- runtime / PASS


def test_runtime_takes_the_last_match() -> None:
    text = "--- 1.5 seconds ---\nnoise\n--- 2.25 seconds ---\n"
    assert pod_log.runtime_seconds(text) == 2.25


def test_runtime_missing_or_unparsable_is_none() -> None:
    assert pod_log.runtime_seconds("PASS\n") is None
    assert pod_log.runtime_seconds("--- 3 seconds ---\n--- 1.2.3 seconds ---") is None  # last is garbage
    assert pod_log.runtime_seconds("--- seconds ---") is None


def test_runtime_with_timestamps() -> None:
    text = read(FIXTURES / "pod_memlimit_pass.log")
    assert pod_log.runtime_seconds(text) == 72.9138913154602


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("PASS\n", True),
        ("  PASS  \r\n", True),
        ("2026-02-14T10:00:00Z PASS\n", True),
        ("BYPASS\n", False),
        ("PASSED\n", False),
        ("test PASS here\n", False),
        ("x\r 50%|#| 1/2 [00:01<00:01, 1.00it/s]\rPASS\n", True),  # tqdm without newline, then PASS
        ("", False),
    ],
)
def test_pass_marker(text: str, expected: bool) -> None:
    assert pod_log.has_pass_marker(text) is expected


def test_oom_log_has_no_pass_marker_because_of_bypass_only() -> None:
    assert not pod_log.has_pass_marker(read(FIXTURES / "pod_oom.log"))


# ---------------------------------------------------------------------------------------------- OOM


def test_memory_limit_line_is_not_an_oom_marker() -> None:
    """'GPU memory limit set to ...' contains 'memory limit' but is the startup INFO
    (docs/sut/client.md §memory-quota)."""
    text = read(FIXTURES / "pod_memlimit_pass.log")
    assert "GPU memory limit set to" in text
    assert pod_log.oom_markers(text) == []


def test_oom_markers_in_order_without_timestamps() -> None:
    markers = pod_log.oom_markers(read(FIXTURES / "pod_oom.log"))
    assert markers == [
        "[XPUSHARE][WARN]: cuMemAlloc rejected: 1568669696 + 784334848 = 2353004544 would exceed limit "
        "2147483648 bytes (2048.00 MiB)",
        "RuntimeError: CUDA out of memory. Tried to allocate 748.00 MiB (GPU 0; 2.00 GiB total capacity)",
        "[XPUSHARE][WARN]: aclrtMalloc rejected: 0 + 99999999999 exceeds physical allocatable 68719476736 bytes",
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB",
        "cuMemAlloc returned CUDA_ERROR_OUT_OF_MEMORY: out of memory",
    ]


@pytest.mark.parametrize(
    "line",
    [
        "Memory limit updated: 1 -> 2 bytes (0.00 GiB)",
        "OOM killer? no",
        "Memory allocations exceeded physical GPU memory capacity",  # nvshare oversub warning
        "cuMemAllocManaged allocated 257949696 bytes at 0x7f0b0a000000",
        "rejected: 1 + 2",  # no API name
    ],
)
def test_oom_false_positives(line: str) -> None:
    assert pod_log.oom_markers(line) == []


def test_rejections_structured() -> None:
    rej = pod_log.rejections(read(FIXTURES / "pod_oom.log"))
    assert [(r.api, r.allocated_bytes, r.requested_bytes, r.limit_bytes, r.physical_bytes) for r in rej] == [
        ("cuMemAlloc", 1568669696, 784334848, 2147483648, None),
        ("aclrtMalloc", 0, 99999999999, None, 68719476736),
    ]
    # The limit rejection means sum + request > limit; check the fixture is self-consistent.
    assert rej[0].allocated_bytes + rej[0].requested_bytes > (rej[0].limit_bytes or 0)
    assert rej[0].ts == datetime(2026, 2, 14, 10, 1, 2, tzinfo=timezone.utc)


# ---------------------------------------------------------------------------------------------- tqdm


def test_last_tqdm_takes_last_segment_with_timestamp_prefix() -> None:
    seg = pod_log.last_tqdm(read(FIXTURES / "pod_memlimit_pass.log"))
    assert seg is not None
    assert (seg.percent, seg.n, seg.total) == (100, 40000, 40000)
    assert seg.elapsed_s == 72.0  # 01:12
    assert seg.remaining_s == 0.0
    assert seg.rate_it_s == 552.47
    assert seg.ts is None  # only the first segment of the line carries the kubectl timestamp


def test_last_tqdm_converts_s_per_it() -> None:
    seg = pod_log.last_tqdm(read(FIXTURES / "pod_tf_running.log"))
    assert seg is not None
    assert (seg.percent, seg.n, seg.total) == (30, 3, 10)
    assert seg.rate_it_s == pytest.approx(1 / 2.5)
    assert seg.remaining_s == 28.0


def test_tqdm_question_marks() -> None:
    seg = pod_log.last_tqdm("  0%|          | 0/10 [00:00<?, ?it/s]")
    assert seg is not None
    assert seg.rate_it_s is None and seg.remaining_s is None and seg.elapsed_s == 0.0


def test_tqdm_hours_and_postfix() -> None:
    seg = pod_log.last_tqdm(" 99%|#########9| 99/100 [1:02:03<00:37, 12.50it/s, loss=0.1]")
    assert seg is not None
    assert seg.elapsed_s == 3723.0 and seg.rate_it_s == 12.5


def test_no_tqdm() -> None:
    assert pod_log.last_tqdm("PASS\n--- 1 seconds ---\n") is None


# ---------------------------------------------------------------------------------------------- probes, ids, limits


def test_quota_probes_both_prefixes() -> None:
    probes = pod_log.quota_probes(read(FIXTURES / "pod_w5_probe.log"))
    assert [(p.elapsed_s, p.iterations, p.it_per_sec) for p in probes] == [
        (10.0, 3000, 300.0),
        (20.1, 10000, 497.51),
        (30.2, 18000, 596.03),
    ]
    # Throughput rises after the core limit went 30% -> 80% (what COMBO-006 wants to see).
    assert probes[1].it_per_sec > probes[0].it_per_sec


def test_client_ids_after_restart() -> None:
    text = read(FIXTURES / "pod_oom.log")
    assert client_lines.client_ids(text) == ["1111111111111111", "2222222222222222"]
    assert client_lines.client_id(text) == "2222222222222222"
    assert client_lines.client_id("Client ID = 123") is None  # not 16 hex digits


def test_core_limit_updates_kinds() -> None:
    ups = client_lines.core_limit_updates(read(FIXTURES / "pod_w5_probe.log"))
    assert [(u.kind, u.percent) for u in ups] == [
        ("initial", 30),
        ("received", 80),
        ("applied", 80),
        ("ignored", 0),
    ]


def test_memory_limit_updates_kinds() -> None:
    ups = client_lines.memory_limit_updates(read(FIXTURES / "pod_w5_probe.log"))
    assert [(u.kind, u.new_bytes, u.old_bytes) for u in ups] == [
        ("received", 8589934592, None),
        ("applied", 8589934592, 4294967296),
    ]
    initial = client_lines.memory_limit_updates(read(FIXTURES / "pod_memlimit_pass.log"))
    assert [(u.kind, u.new_bytes) for u in initial] == [("initial", 4 * 2**30)]
    assert initial[0].ts == datetime(2026, 2, 14, 10, 1, 1, 0, tzinfo=timezone.utc)


# ---------------------------------------------------------------------------------------------- fuzz


def _exercise_all(text: str) -> None:
    pod_log.runtime_seconds(text)
    pod_log.has_pass_marker(text)
    pod_log.oom_markers(text)
    pod_log.rejections(text)
    pod_log.quota_probes(text)
    pod_log.last_tqdm(text)
    client_lines.client_id(text)
    client_lines.core_limit_updates(text)
    client_lines.memory_limit_updates(text)
    for line in text.split("\n"):
        pod_log.strip_timestamp(line)


@given(st.text())
def test_fuzz_never_raises(text: str) -> None:
    _exercise_all(text)


_LOG_ALPHABET = st.sampled_from(
    [
        "PASS",
        "--- ",
        " seconds ---",
        "\r",
        "\n",
        "1",
        "2.5",
        ".",
        "%|",
        "| ",
        "/",
        " [",
        "<",
        ", ",
        "it/s]",
        "s/it]",
        "?",
        ":",
        "00",
        "rejected: ",
        " + ",
        "2026-02-14T10:00:00Z ",
        "QUOTA_PROBE",
        "Client ID = ",
    ]
)


@given(st.lists(_LOG_ALPHABET, max_size=40).map("".join))
def test_fuzz_structured_tokens_never_raise(text: str) -> None:
    _exercise_all(text)


@given(
    st.floats(min_value=0, allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.text(alphabet=st.characters(blacklist_characters="-\n"), max_size=30),
)
def test_runtime_round_trip(x: float, with_ts: bool, noise: str) -> None:
    """Whatever Python prints for a float in the runtime line is read back exactly."""
    line = f"--- {x} seconds ---"
    if with_ts:
        line = "2026-02-14T10:00:00.5Z " + line
    text = f"{noise}\n--- 999.0 seconds ---\n{line}\n"
    assert pod_log.runtime_seconds(text) == x


@given(st.integers(min_value=0, max_value=10**9), st.integers(min_value=0, max_value=10**9))
def test_probe_round_trip(it: int, tenths: int) -> None:
    line = f"[XPUSHARE][QUOTA_PROBE] elapsed={tenths / 10:.1f}s it={it} it_per_sec={it / 7:.2f}"
    (p,) = pod_log.quota_probes(line)
    assert p.iterations == it
    assert p.elapsed_s == pytest.approx(tenths / 10)
    assert p.it_per_sec == pytest.approx(round(it / 7, 2))
