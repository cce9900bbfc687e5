"""The legacy tables (xpushare/legacy/tables.py) against the output seed 004 shows, and their edge cases."""

from __future__ import annotations

import pytest

from xpushare.legacy import tables
from xpushare.model.workload import WorkloadRecord
from xpushare.transport.kube_objects import split_prefixed_logs

T0 = 1_700_000_000.0


def tqdm_history(total: int, rates: list[float], *, unit: str = "it/s") -> str:
    """One tqdm line as the workloads print it: refreshes joined by carriage returns, the last one final."""
    segs = []
    for i, rate in enumerate(rates):
        n = total * (i + 1) // len(rates)
        pct = 100 * n // total
        segs.append(f"[NVSHARE][INFO][2026-02-14 10:00:{i:02d}] {pct:3d}%|####      | {n}/{total} "
                    f"[00:{i:02d}<00:10, {rate:.2f}{unit}]")
    return "\r".join(segs)


def log(rates: list[float] | None = None, *, runtime: float | None = 164.2, passed: bool = True,
        kernel_windows: tuple[int, ...] = (512, 1024)) -> str:
    lines = ["2026-02-14T10:00:00.000001Z [NVSHARE][INFO]: Client ID = febebf756a61f686"]
    lines += [f"2026-02-14T10:00:01Z [NVSHARE][DEBUG]: Pending Kernel Window is {w} (warmup=0)."
              for w in kernel_windows]
    if rates:
        lines.append("2026-02-14T10:00:02Z " + tqdm_history(4000, rates))
    if passed:
        lines.append("2026-02-14T10:02:44Z PASS")
    if runtime is not None:
        lines.append(f"2026-02-14T10:02:44Z --- {runtime!r} seconds ---")
    return "\n".join(lines) + "\n"


def record(name: str, seconds: float | None, phase: str = "Succeeded") -> WorkloadRecord:
    finished = None if seconds is None else T0 + seconds
    return WorkloadRecord(name=name, phase=phase, exit_code=0 if phase == "Succeeded" else 1, started=T0,
                          finished=finished)


def test_rows_reproduce_seed_004_test_1() -> None:
    # seed 004, test 1: "nvshare-cross-gpu-1            | PASS     | 164s         | 25.83 it/s   | 1024"
    row = tables.pod_row("nvshare-cross-gpu-1", record("nvshare-cross-gpu-1", 164), log([3.10, 24.0, 25.83]))
    seed = "nvshare-cross-gpu-1            | PASS     | 164s         | 25.83 it/s   | 1024"
    assert tables.format_pod_line(row) == seed
    row = tables.pod_row("nvshare-small-1", record("nvshare-small-1", 392), log([90.0, 103.61], kernel_windows=(2048,)))
    seed = "nvshare-small-1                | PASS     | 392s         | 103.61 it/s  | 2048"
    assert tables.format_pod_line(row) == seed


def test_speed_is_the_last_refresh_not_the_first() -> None:
    # The bash took the first match (an early refresh): 3.10 here. The last segment after '\r' is 25.83.
    row = tables.pod_row("p", record("p", 10), log([3.10, 11.0, 25.83]))
    assert row.rate_it_s == pytest.approx(25.83)


def test_seconds_per_iteration_rate_is_inverted() -> None:
    text = "2026-02-14T10:00:02Z " + tqdm_history(100, [2.0, 4.0], unit="s/it") + "\nPASS\n--- 400.0 seconds ---\n"
    row = tables.pod_row("p", record("p", 400), text)
    assert row.speed_text == "0.25 it/s"


def test_statistics_block_matches_seed_004_test_2_serial() -> None:
    durations = [309, 310, 346, 342]
    speeds = [22.24, 22.21, 23.62, 23.65]
    rows = [tables.pod_row(f"p{i}", record(f"p{i}", d), log([1.0, s]))
            for i, (d, s) in enumerate(zip(durations, speeds, strict=True))]
    text = tables.format_stats(tables.stats(rows))
    assert text.splitlines()[1:] == [
        "  Total: 4, Pass: 4, Fail: 0",
        "  Duration: Min=309s, Max=346s, Avg=326.8s",
        "  Speed   : Min=22.21, Max=23.65, Avg=22.93 (it/s)",
    ]


def test_a_pod_without_pass_or_runtime_fails_and_leaves_the_statistics() -> None:
    rows = [
        tables.pod_row("ok", record("ok", 100), log([10.0])),
        tables.pod_row("nopass", record("nopass", 50), log([99.0], passed=False)),
        tables.pod_row("noruntime", record("noruntime", 60), log([99.0], runtime=None)),
        tables.pod_row("failed", record("failed", 5, phase="Failed"), log([99.0], passed=False, runtime=None)),
        tables.pod_row("missing", None, None),
    ]
    assert [r.status_text for r in rows] == ["PASS", "FAIL (no PASS)", "FAIL (no runtime)", "FAIL (Failed)",
                                             "FAIL (no record)"]
    s = tables.stats(rows)
    assert (s.total, s.passed, s.failed) == (5, 1, 4)
    assert (s.duration_min, s.duration_max, s.speed_avg) == (100, 100, 10.0)
    missing = "missing                        | FAIL (no record) | -            | -            | -"
    assert tables.format_pod_line(rows[-1]) == missing


def test_no_passed_pod_gives_na_statistics() -> None:
    rows = [tables.pod_row("f", record("f", 5, phase="Failed"), log(passed=False, runtime=None))]
    text = tables.format_stats(tables.stats(rows))
    assert "Duration: n/a" in text and "Speed   : n/a" in text and "Pass: 0, Fail: 1" in text


def test_duration_estimated_from_tqdm_while_running() -> None:
    text = "[XPUSHARE][INFO][2026-02-14 10:00:00]  50%|#####     | 2000/4000 [01:05<01:05, 30.77it/s]"
    row = tables.pod_row("r", WorkloadRecord(name="r", phase="Running", started=T0), text)
    assert row.duration_text == "01:05 (est)" and row.status_text == "FAIL (Running)"
    assert tables.stats([row]).duration_avg is None


def test_table_has_rules_and_header() -> None:
    rows = [tables.pod_row("p", record("p", 3), log([5.0]))]
    lines = tables.format_pod_table(rows).splitlines()
    assert lines[0] == "=" * 90 and lines[-1] == "=" * 90
    assert lines[1] == "Pod Name                       | Status   | Duration     | Avg Speed    | MaxKernelWin"


SEED_SCHED_LOG = "\n".join(
    f"[pod/nvshare-scheduler-g79d6/nvshare-scheduler] 2026-02-14T10:00:0{i}.5Z [NVSHARE][INFO]: Registered client "
    f"{cid} on GPU {gpu} with Pod name = {pod}, Pod namespace = default"
    for i, (cid, gpu, pod) in enumerate([
        ("c6c3068df341e374", "GPU-1f4246ce-cc92-8c8d-9f31-83660be04a1e", "nvshare-cross-gpu-1"),
        ("edbbd0a17e2b8350", "GPU-dc895bd6-43d7-a984-b1ee-870332194bd1", "nvshare-cross-gpu-2"),
        ("622900c037f9ea29", "GPU-dc895bd6-43d7-a984-b1ee-870332194bd1", "nvshare-cross-gpu-3"),
        ("c6c3068df341e374", "GPU-1f4246ce-cc92-8c8d-9f31-83660be04a1e", "nvshare-cross-gpu-1"),  # same client again
        ("d3ce8c7d1b51ded2", "GPU-1f4246ce-cc92-8c8d-9f31-83660be04a1e", "nvshare-cross-gpu-4"),
    ])
) + "\n[pod/nvshare-scheduler-g79d6/nvshare-scheduler] 2026-02-14T10:00:09Z [NVSHARE][DEBUG]: k8s_api: Response JSON\n"


def test_distribution_reproduces_seed_004_test_2() -> None:
    text = tables.format_distribution(tables.distribution(SEED_SCHED_LOG))
    assert text.splitlines() == [
        "Scheduler Log Analysis (GPU Distribution):",
        "Analyzing scheduler pod: nvshare-scheduler-g79d6",
        "Pod Name                       | Client ID          | GPU UUID",
        "-" * 92,
        "nvshare-cross-gpu-1            | c6c3068df341e374   | GPU-1f4246ce-cc92-8c8d-9f31-83660be04a1e",
        "nvshare-cross-gpu-2            | edbbd0a17e2b8350   | GPU-dc895bd6-43d7-a984-b1ee-870332194bd1",
        "nvshare-cross-gpu-3            | 622900c037f9ea29   | GPU-dc895bd6-43d7-a984-b1ee-870332194bd1",
        "nvshare-cross-gpu-4            | d3ce8c7d1b51ded2   | GPU-1f4246ce-cc92-8c8d-9f31-83660be04a1e",
    ]


def test_distribution_per_scheduler_pod_and_without_gpu() -> None:
    text = (
        "[pod/s-a/c] [NVSHARE][INFO]: Registered client 0000000000000001 with Pod name = p1, Pod namespace = default\n"
        "[pod/s-b/c] [XPUSHARE][INFO]: Registered client 0000000000000002 on GPU GPU-x with Pod name = p2, "
        "Pod namespace = default\n"
    )
    dist = tables.distribution(text)
    assert dist["s-a"][0].gpu == "-" and dist["s-b"][0].gpu == "GPU-x"
    out = tables.format_distribution(dist)
    assert out.count("Analyzing scheduler pod:") == 2


def test_distribution_of_an_empty_log_says_so() -> None:
    assert "no client registrations" in tables.format_distribution(tables.distribution(""))
    # A log without kubectl prefixes counts as one scheduler pod.
    plain = "[XPUSHARE][INFO]: Registered client 00000000000000aa on GPU g with Pod name = p, Pod namespace = d\n"
    assert list(tables.distribution(plain)) == ["-"]


def test_monitor_line_and_cells() -> None:
    assert tables.monitor_cell("Pending", None) == "Pending"
    assert tables.monitor_cell("Succeeded", "x") == "Succeeded"
    assert tables.monitor_cell("Running", None) == "Running (Wait...)"
    assert tables.monitor_cell("Running", tqdm_history(100, [1.0, 2.0])) == "Running (100%)"
    line = tables.format_monitor_line("10:00:05", 12.7, [("a", "Running (50%)"), ("b", "Succeeded")])
    assert line == "10:00:05 [Elapsed: 12s] a: Running (50%) | b: Succeeded"


def test_split_prefixed_keeps_carriage_returns() -> None:
    text = ("[pod/a/c] 2026-02-14T10:00:00Z 0%|x| 0/2 [00:00<?, ?it/s]\r100%|x| 2/2 [00:01<00:00, 2.00it/s]\n"
            "[pod/b/c] PASS\n")
    parts = split_prefixed_logs(text)  # what the legacy tables read: tqdm's \r refreshes stay in one line
    assert "\r100%" in parts["a"] and parts["b"] == "PASS\n"
    assert tables.pod_row("a", record("a", 1), parts["a"]).rate_it_s == 2.0
