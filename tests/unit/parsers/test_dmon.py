"""Tests of xpushare.parsers.dmon: columns come from the header, never from a fixed index."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.paths import FIXTURES
from xpushare.parsers import dmon

SAMPLES = FIXTURES / "samples"
FIXTURES = FIXTURES / "parsers"


def load(path: Path) -> dmon.DmonData:
    return dmon.parse(path.read_text(encoding="utf-8"))


def test_real_sample_s_u() -> None:
    d = load(SAMPLES / "dmon_u.txt")
    assert d.columns == ("gpu", "sm", "mem", "enc", "dec", "jpg", "ofa")
    assert d.units == ("Idx", "%", "%", "%", "%", "%", "%")
    assert d.gpus() == ["0"]
    assert dmon.sm_series(d) == [100.0] * 5  # -c 5 under full load
    assert d.series("dec") == [0.0] * 5  # what the legacy index-4 parser would have read
    assert d.malformed_count == 0 and d.headers == 1


def test_real_sample_default_layout_sm_is_not_column_1() -> None:
    d = load(SAMPLES / "dmon_default.txt")
    assert d.columns.index("sm") == 4
    assert dmon.sm_series(d) == [100.0, 100.0, 100.0]
    assert d.series("pwr") == [422.0, 422.0, 423.0]  # column 1 here is power in W
    assert d.series("pclk") == [1980.0] * 3


def test_default_layout_two_gpus_repeated_header_and_dashes() -> None:
    d = load(FIXTURES / "dmon_default_2gpu.txt")
    # sm values were chosen distinct from every other column of the same row.
    assert dmon.sm_series(d, gpu=0) == [31.0, 33.0, 29.0]
    assert dmon.sm_series(d, gpu="1") == [0.0, None, 2.0]  # "-" -> None
    assert d.series("mem", 0) == [12.0, 14.0, 13.0]
    assert d.series("jpg", 0) == [None, None, None]
    assert d.headers == 2
    # The last line was cut off ("    0    22"): reported, not parsed.
    assert d.malformed_count == 1 and d.malformed[0].strip() == "0    22"
    assert d.gpus() == ["0", "1"]
    assert dmon.sm_series(d, gpu=7) == []


def test_date_time_columns() -> None:
    d = load(FIXTURES / "dmon_u_datetime.txt")
    assert d.columns[:3] == ("date", "time", "gpu")
    assert dmon.sm_series(d) == [55.0, 60.0, None]
    assert [r.text("Time") for r in d.rows_for(0)] == ["10:00:01", "10:00:02", "10:00:03"]


def test_layout_change_between_headers() -> None:
    text = "# gpu sm mem\n# Idx % %\n 0 10 20\n# gpu pwr sm\n# Idx W %\n 0 300 40\n"
    d = dmon.parse(text)
    assert dmon.sm_series(d) == [10.0, 40.0]
    assert d.columns == ("gpu", "pwr", "sm")


def test_rows_before_any_header_and_no_sm_column() -> None:
    d = dmon.parse(" 0 10 20\n")
    assert d.rows == () and d.malformed_count == 1
    d = dmon.parse("# gpu pwr\n 0 100\n")
    assert dmon.sm_series(d) == [None]
    assert not d.has_column("sm") and d.has_column("PWR")


def test_command() -> None:
    assert dmon.command(count=300, interval_s=1) == ["nvidia-smi", "dmon", "-s", "u", "-d", "1", "-c", "300"]
    assert dmon.command(3, 2, groups=None, gpus=[0, 1], options="DT") == [
        "nvidia-smi",
        "dmon",
        "-d",
        "2",
        "-c",
        "3",
        "-i",
        "0,1",
        "-o",
        "DT",
    ]
    with pytest.raises(ValueError):
        dmon.command(count=0)


_DMON_TOKENS = st.sampled_from(["# gpu sm mem", "# Idx % %", "#", " 0", " 1", " -", " 12", " x", "\n", " "])


@given(st.one_of(st.text(), st.lists(_DMON_TOKENS, max_size=50).map("".join)))
def test_fuzz_never_raises(text: str) -> None:
    d = dmon.parse(text)
    for g in d.gpus():
        dmon.sm_series(d, g)
    assert all(len(r.raw) == len(r.columns) for r in d.rows)


@given(
    st.permutations(["sm", "mem", "pwr", "enc", "dec"]),
    st.lists(st.integers(min_value=0, max_value=100), min_size=1, max_size=20),
)
def test_fuzz_sm_found_in_any_column_order(order: list[str], sm_values: list[int]) -> None:
    header = "# gpu " + " ".join(order)
    rows = []
    for v in sm_values:
        vals = {"sm": v, "mem": 1000 + v, "pwr": 2000 + v, "enc": 3000, "dec": 4000}
        rows.append("    0 " + " ".join(str(vals[c]) for c in order))
    d = dmon.parse("\n".join([header, "# Idx " + " ".join("%" for _ in order), *rows]))
    assert dmon.sm_series(d, 0) == [float(v) for v in sm_values]
