"""Tests of xpushare.parsers.metrics on the captured idle page and handcrafted variants."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.paths import FIXTURES
from xpushare.evidence import scrape_capture
from xpushare.parsers import metrics

SAMPLES = FIXTURES / "samples"
FIXTURES = FIXTURES / "parsers"


def load(name: str, folder: Path = FIXTURES) -> metrics.Exposition:
    return metrics.parse_exposition((folder / name).read_text(encoding="utf-8"))


# ---------------------------------------------------------------------------------------------- real sample


def test_idle_sample() -> None:
    text = (SAMPLES / "metrics_idle.txt").read_text()
    e = metrics.parse_exposition(text)
    assert e.ok and e.error is None and e.offending_line is None
    assert e.prefix == "xpushare"
    # With a working sampler the exporter prints 36 families (docs/sut/metrics.md §families).
    assert e.help_lines == text.count("# HELP ") == 36
    assert e.type_lines == 36
    assert len(e.family_names()) == 36
    assert e.families_missing_help() == [] and e.families_missing_type() == []
    assert e.foreign_lines == ()
    # Idle: NVML up, one GPU, no client series, 14 message types all zero.
    assert e.value("xpushare_nvml_up") == 1.0
    assert e.value("xpushare_gpu_memory_total_bytes") == 143771 * 2**20  # = nvidia-smi's 143771 MiB
    assert e.values("xpushare_client_info") == []
    assert e.series_count("xpushare_scheduler_messages_total") == 14
    assert e.value("xpushare_scheduler_messages_total", type="REGISTER") == 0.0
    # Every sample line of the page is one series.
    assert e.series_count() == len([ln for ln in text.splitlines() if ln and not ln.startswith("#")])
    # Counters: declared name keeps _total, type from the raw TYPE line.
    assert "xpushare_scheduler_drop_lock_total" in e.family_names()
    assert e.type_of("xpushare_scheduler_drop_lock_total") == "counter"
    assert e.type_of("xpushare_gpu_info") == "gauge"
    gpu = e.values("xpushare_gpu_info")[0]
    assert gpu.label("gpu_name") == "NVIDIA H200" and gpu.label("gpu_index") == "0"


def test_counter_names_with_and_without_total() -> None:
    e = load("metrics_clients.txt")
    assert e.value("xpushare_scheduler_drop_lock_total") == 284.0
    assert e.value("xpushare_scheduler_drop_lock") == 284.0
    assert e.value("scheduler_drop_lock_total") == 284.0  # prefix added
    assert e.value("xpushare_scheduler_messages_total", type="REQ_LOCK") == 17.0
    assert e.value("xpushare_scheduler_messages", type="REGISTER") == 3.0
    assert e.family("xpushare_scheduler_messages") is not None


def test_counter_declared_without_total_suffix() -> None:
    text = "# HELP foo_events Events\n# TYPE foo_events counter\nfoo_events 7\n"
    e = metrics.parse_exposition(text)
    assert e.ok
    assert e.value("foo_events") == 7.0 and e.value("foo_events_total") == 7.0
    (s,) = e.values("foo_events")
    assert s.name == "foo_events"  # as written in the text, not prometheus_client's munged name
    assert e.family_names() == ["foo_events"]


# ---------------------------------------------------------------------------------------------- clients


def test_clients_page() -> None:
    e = load("metrics_clients.txt")
    assert e.ok
    assert e.series_count("xpushare_client_info") == 3
    # Two processes of pod default/fake-pod-1 (3 GiB + 1 GiB) and one of team-b/other.
    assert e.per_pod("xpushare_client_managed_allocated_bytes") == {
        ("default", "fake-pod-1"): float(4 * 2**30),
        ("team-b", "other"): 0.0,
    }
    assert e.per_pod("xpushare_client_info") == {("default", "fake-pod-1"): 2.0, ("team-b", "other"): 1.0}
    assert e.sum("xpushare_client_managed_allocated_bytes", pod="fake-pod-1") == float(4 * 2**30)
    assert e.value("xpushare_client_memory_quota_bytes", client_id="a309de43403205dc") == 2147483648.0
    assert e.value("xpushare_client_info", pod="other", host_pid=20001) == 1.0  # non-str label values
    assert e.value("xpushare_scheduler_running_clients", gpu_index="1") == 0.0
    # client_info.gpu_index is always -1 (docs/sut/metrics.md §catalogue).
    assert {s.label("gpu_index") for s in e.values("xpushare_client_info")} == {"-1"}


def test_value_ambiguous_raises_and_missing_is_none() -> None:
    e = load("metrics_clients.txt")
    with pytest.raises(ValueError, match="3 series"):
        e.value("xpushare_client_info")
    assert e.value("xpushare_client_info", pod="nope") is None
    assert e.value("xpushare_client_allocated_bytes") is None  # documented but not produced
    # (docs/sut/metrics.md §catalogue)
    # sum: declared family with no matching series -> 0.0; absent metric -> None.
    assert e.sum("xpushare_client_info", pod="nope") == 0.0
    assert e.sum("xpushare_client_allocated_bytes") is None
    idle = load("metrics_idle.txt", SAMPLES)
    assert idle.sum("xpushare_client_managed_allocated_bytes") == 0.0  # HELP/TYPE present, no rows


def test_nvshare_prefix_is_detected_and_names_translate() -> None:
    e = load("metrics_nvshare.txt")
    assert e.ok and e.prefix == "nvshare" and e.foreign_lines == ()
    assert e.value("xpushare_scheduler_drop_lock_total") == 284.0  # asked with the other prefix
    assert e.value("nvshare_scheduler_drop_lock_total") == 284.0
    assert e.per_pod("client_info") == {("default", "fake-pod-1"): 2.0, ("team-b", "other"): 1.0}
    assert all(n.startswith("nvshare_") for n in e.family_names())


def test_expected_prefix_given_flags_other_generation_lines() -> None:
    text = (FIXTURES / "metrics_nvshare.txt").read_text()
    e = metrics.parse_exposition(text, prefix="xpushare")
    assert e.prefix == "xpushare"
    assert len(e.foreign_lines) == e.series_count()  # every sample line lacks "xpushare_"


# ---------------------------------------------------------------------------------------------- broken pages


def test_garbage_line_in_the_middle() -> None:
    text = (FIXTURES / "metrics_garbage_middle.txt").read_text()
    e = metrics.parse_exposition(text)
    assert not e.ok
    assert e.error is not None and "ValueError" in e.error
    assert e.offending_line == "<html>502 Bad Gateway</html>"
    assert e.offending_lineno == text.split("\n").index("<html>502 Bad Gateway</html>") + 1
    # Families before the bad line are kept; none after it.
    assert "xpushare_gpu_sampler_up" in e.family_names()
    assert "xpushare_scheduler_messages_total" not in e.family_names()


def test_truncated_body_reports_the_cut_line() -> None:
    e = load("metrics_truncated.txt")
    assert not e.ok
    assert e.offending_line == "xpushare_scheduler_wait_for"


def test_invalid_type_reported_on_its_own_line() -> None:
    """prometheus_client rejects an unknown type only when the family is built (at the next family);
    bisecting over prefixes still names the TYPE line."""
    e = load("metrics_bad_type.txt")
    assert not e.ok and "sometype" in (e.error or "")
    assert e.offending_line == "# TYPE xpushare_bogus_metric sometype"
    assert e.offending_lineno == 7


def test_missing_help_and_type_detected_from_raw_text() -> None:
    e = load("metrics_missing_help_type.txt")
    assert e.ok  # the parser accepts it, filling defaults ...
    assert e.families_missing_help() == ["xpushare_nvml_up"]  # ... but the raw lines were missing
    assert e.families_missing_type() == ["xpushare_gpu_process_count"]
    fam = e.family("xpushare_gpu_process_count")
    assert fam is not None and fam.type is None and fam.has_help and not fam.has_type
    assert e.help_lines == 35 and e.type_lines == 35


def test_foreign_lines() -> None:
    e = load("metrics_foreign.txt")
    assert e.ok and e.prefix == "xpushare"
    assert e.foreign_lines == ("go_goroutines 12", "process_open_fds 9")
    fam = e.family("go_goroutines")
    assert fam is not None and not fam.has_help and not fam.has_type


def test_empty_and_whitespace() -> None:
    e = metrics.parse_exposition("")
    assert e.ok and e.families == () and e.prefix is None
    assert metrics.parse_exposition("\n\n  \n").ok


def test_error_on_first_line_and_last_line() -> None:
    e = metrics.parse_exposition("garbage\n# HELP x_y ok\n")
    assert e.offending_lineno == 1 and e.offending_line == "garbage"
    e = metrics.parse_exposition("xpushare_a 1\nxpushare_b")
    assert e.offending_lineno == 2 and e.offending_line == "xpushare_b"


# ---------------------------------------------------------------------------------------------- curl


def test_scrape_command() -> None:
    argv = scrape_capture.scrape_command("http://10.0.0.5:9402/metrics", timeout_s=5)
    assert argv == [
        "curl",
        "-sS",
        "-m",
        "5",
        "-o",
        "-",
        "-w",
        "\\nHTTP_CODE=%{http_code}\\nCONTENT_TYPE=%{content_type}\\n",
        "http://10.0.0.5:9402/metrics",
    ]
    with pytest.raises(ValueError):
        scrape_capture.scrape_command("")
    with pytest.raises(ValueError):
        scrape_capture.scrape_command("http://x", timeout_s=0)


def test_parse_curl_output_metrics() -> None:
    body = (SAMPLES / "metrics_idle.txt").read_text()
    out = body + "\nHTTP_CODE=200\nCONTENT_TYPE=text/plain; version=0.0.4; charset=utf-8\n"
    r = scrape_capture.parse_curl_output(out)
    assert r.body == body
    assert r.http_code == 200
    assert r.content_type == "text/plain; version=0.0.4; charset=utf-8"
    assert metrics.parse_exposition(r.body).ok


def test_parse_curl_output_404_and_failure() -> None:
    # Body "Not Found\n" (docs/sut/metrics.md §http, sample notfound.txt).
    r = scrape_capture.parse_curl_output("Not Found\n\nHTTP_CODE=404\nCONTENT_TYPE=text/plain\n")
    assert r == ("Not Found\n", 404, "text/plain")
    # Connection refused: curl prints 000 and an empty content type.
    r = scrape_capture.parse_curl_output("\nHTTP_CODE=000\nCONTENT_TYPE=\n")
    assert r == ("", 0, None)
    # No trailer at all: the whole text is body.
    assert scrape_capture.parse_curl_output("OK\n") == ("OK\n", None, None)
    # A body that itself contains a fake trailer in the middle is not cut there.
    r = scrape_capture.parse_curl_output("a\nHTTP_CODE=1\nCONTENT_TYPE=x\nb\nHTTP_CODE=200\nCONTENT_TYPE=t\n")
    assert r.body == "a\nHTTP_CODE=1\nCONTENT_TYPE=x\nb" and r.http_code == 200


# ---------------------------------------------------------------------------------------------- fuzz

_EXPO_TOKENS = st.sampled_from(
    [
        "# HELP ",
        "# TYPE ",
        "xpushare_a",
        "nvshare_b_total",
        " counter",
        " gauge",
        " histogram",
        "{",
        "}",
        'x="1"',
        ",",
        '"',
        "\\",
        " ",
        "1",
        "-2.5e3",
        "NaN",
        "\n",
        "#",
        "=",
    ]
)


def _check(text: str) -> None:
    e = metrics.parse_exposition(text)
    if e.ok:
        assert e.offending_line is None
    else:
        assert e.offending_line is not None and e.offending_lineno is not None
        assert text.split("\n")[e.offending_lineno - 1] == e.offending_line
    for n in e.family_names():
        e.values(n)
        e.sum(n)
        e.per_pod(n)
        e.type_of(n)
    e.series_count()


@given(st.text())
def test_fuzz_arbitrary_text_never_raises(text: str) -> None:
    _check(text)


@given(st.lists(_EXPO_TOKENS, max_size=60).map("".join))
def test_fuzz_exposition_like_text_never_raises(text: str) -> None:
    _check(text)


@given(
    st.lists(
        st.tuples(
            st.from_regex(re.compile(r"[a-z][a-z_]{0,10}"), fullmatch=True),
            st.floats(allow_nan=False, allow_infinity=False, width=32),
        ),
        min_size=1,
        max_size=8,
        unique_by=lambda t: t[0],
    )
)
def test_fuzz_generated_gauges_round_trip(items: list[tuple[str, float]]) -> None:
    lines = []
    for name, v in items:
        lines += [f"# HELP xpushare_{name} h", f"# TYPE xpushare_{name} gauge", f"xpushare_{name} {v!r}"]
    e = metrics.parse_exposition("\n".join(lines) + "\n")
    assert e.ok and e.prefix == "xpushare"
    for name, v in items:
        assert e.value(f"xpushare_{name}") == v
        assert e.value(name) == v
