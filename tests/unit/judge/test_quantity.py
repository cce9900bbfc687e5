"""The quantity grammars of the system under test (xpushare/judge/quantity.py, docs/sut/annotations.md §memory-limit).

One memory grammar, the scheduler's ``parse_memory_size``: :func:`parse_quantity` raises where the
scheduler ignores a value, :func:`annotation_bytes` gives 0 there; every judgment, case and legacy
scenario reads memory quantities through them. The library's env grammar and the core ``atoi`` differ.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xpushare.judge.quantity import GIB, MIB, annotation_bytes, core_limit_value, env_bytes, parse_quantity

# The probe table of docs/sut/annotations.md §memory-limit: value -> bytes the scheduler applies (0: ignored).
SCHEDULER_TABLE = [
    ("4Gi", 4 * GIB), ("4GiB", 4 * GIB), ("4gi", 4 * GIB), ("1.5Gi", 1610612736), ("512Mi", 512 * MIB),
    ("4096", 4096), ("4096Mi", 4 * GIB), ("4G", 0), ("4GB", 0), ("4096MB", 0), ("2 Gi", 2 * GIB), ("2Ti", 0),
]


@pytest.mark.parametrize(("text", "expected"), [*SCHEDULER_TABLE, (None, 0), ("", 0), ("-1Gi", 0), ("abc", 0)])
def test_annotation_bytes_matches_the_scheduler(text: str | None, expected: int) -> None:
    assert annotation_bytes(text) == expected


@pytest.mark.parametrize(("text", "expected"), [(t, b) for t, b in SCHEDULER_TABLE if b])
def test_parse_quantity_accepts_what_the_scheduler_applies(text: str, expected: int) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("1Gi", GIB), ("2Mi", 2 * MIB), ("3Ki", 3 * 1024), ("100B", 100), ("100b", 100), ("0", 0), ("0Mi", 0),
    (" 2Gi ", 2 * GIB), ("2 GiB", 2 * GIB), ("0.5Mi", MIB // 2), (".5Ki", 512), ("1e3", 1000), ("1.5gib", 1610612736),
    ("1.0000000001Ki", 1024),  # truncated to whole bytes, like the scheduler's cast
])
def test_parse_quantity_grammar(text: str, expected: int) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize("text", [
    "", " ", "Gi", "G", "4G", "4GB", "4M", "4MB", "4K", "2Ti", "4 G", "-1Gi", "-0.5", "1e999", "1.2.3Gi", "4Gi2",
    "0x10", "4 Gi B", "four",
])
def test_parse_quantity_rejects_what_the_scheduler_ignores(text: str) -> None:
    with pytest.raises(ValueError):
        parse_quantity(text)
    assert annotation_bytes(text) == 0


@pytest.mark.parametrize(("text", "expected"), [
    ("4Gi", 4 * GIB), ("4G", 4000000000), ("4GB", 4000000000), ("4096MB", 4096000000), ("2Ti", 2),
    ("1.5Gi", 1610612736), (None, None), ("x", None)])
def test_env_bytes_matches_the_library(text: str | None, expected: int | None) -> None:
    assert env_bytes(text) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("50", 50), ("50%", 50), ("0.5", 100), ("0", 100), ("101", 100), (None, 100), (35, 35), ("abc", 100)])
def test_core_limit_value(text: str | int | None, expected: int) -> None:
    assert core_limit_value(text) == expected


@settings(max_examples=300, deadline=None)
@given(st.one_of(
    st.text(max_size=30),
    st.builds(lambda n, sp, suf: f"{n}{sp}{suf}", st.floats(0, 1e6, allow_nan=False), st.sampled_from(["", " "]),
              st.sampled_from(["", "B", "Ki", "KiB", "Mi", "MiB", "Gi", "GiB", "gi", "G", "GB", "Ti", "k"])),
))
def test_one_grammar(text: str) -> None:
    """parse_quantity and annotation_bytes are the same grammar: a value either parses to the bytes the
    annotation gives, or raises ValueError and the annotation is ignored; the library reads every value the
    scheduler accepts the same way."""
    try:
        value = parse_quantity(text)
    except ValueError:
        assert annotation_bytes(text) == 0
        return
    assert value >= 0 and annotation_bytes(text) == value
    assert env_bytes(text) == value
