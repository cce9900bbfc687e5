"""Tests of xpushare.parsers.nvidia_smi (-L, --query-gpu and --query-compute-apps CSV)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.paths import FIXTURES
from xpushare.parsers import nvidia_smi

SAMPLES = FIXTURES / "samples"
FIXTURES = FIXTURES / "parsers"
MIB = 2**20
H200_UUID = "GPU-ae708708-d6f0-f18f-0d42-ab51554bfb37"


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def test_list_real_sample() -> None:
    (g,) = nvidia_smi.parse_list(read(SAMPLES / "nvidia_smi_L.txt"))
    assert (g.index, g.name, g.uuid, g.migs) == (0, "NVIDIA H200", H200_UUID, ())
    assert nvidia_smi.uuid_to_index([g]) == {H200_UUID: 0}


def test_list_with_mig() -> None:
    gpus = nvidia_smi.parse_list(read(FIXTURES / "nvidia_smi_L_mig.txt"))
    assert [(g.index, g.uuid) for g in gpus] == [
        (0, "GPU-1f4246ce-cc92-8c8d-9f31-83660be04a1e"),
        (1, "GPU-dc895bd6-43d7-a984-b1ee-870332194bd1"),
    ]
    assert gpus[0].name == "NVIDIA A100-SXM4-80GB"
    assert [(m.device, m.profile) for m in gpus[0].migs] == [(0, "3g.40gb"), (1, "3g.40gb")]
    assert gpus[1].migs == ()


@pytest.mark.parametrize(
    ("name", "used_mib", "util"),
    [("nvidia_smi_query_idle.csv", 0, 0.0), ("nvidia_smi_query_busy.csv", 1605, 100.0)],
)
def test_query_gpu_real_samples(name: str, used_mib: int, util: float) -> None:
    (row,) = nvidia_smi.parse_query_gpu(read(SAMPLES / name))
    assert row.index == 0
    assert row.uuid == H200_UUID
    assert row.name == "NVIDIA H200"
    assert row.memory_total_bytes == 143771 * MIB
    assert row.memory_used_bytes == used_mib * MIB
    assert row.utilization_gpu_percent == util
    assert row.driver_version == "580.159.04"
    assert row.memory_free_bytes is None  # not queried


def test_query_gpu_noheader_nounits_needs_fields() -> None:
    text = read(FIXTURES / "nvidia_smi_query_noheader_nounits.csv")
    rows = nvidia_smi.parse_query_gpu(text, nvidia_smi.DEFAULT_GPU_FIELDS)
    assert [r.index for r in rows] == [0, 1]
    assert rows[0].memory_total_bytes == 81920 * MIB  # no unit printed: MiB assumed
    assert rows[0].memory_used_bytes == 3072 * MIB
    assert rows[0].utilization_gpu_percent == 37.0
    assert rows[1].memory_used_bytes is None  # [N/A]
    assert rows[1].utilization_gpu_percent is None  # [Not Supported]
    assert rows[1].raw("utilization.gpu") == "[Not Supported]"
    # Without the field list the first data row would be taken as header: nothing parses.
    assert [r.index for r in nvidia_smi.parse_query_gpu(text)] == [None]


def test_query_gpu_header_given_fields_too() -> None:
    """With fields given, a header line is still recognised and skipped (not parsed as data)."""
    rows = nvidia_smi.parse_query_gpu(read(SAMPLES / "nvidia_smi_query_busy.csv"), nvidia_smi.DEFAULT_GPU_FIELDS)
    assert len(rows) == 1 and rows[0].index == 0


def test_compute_apps_real_sample() -> None:
    (app,) = nvidia_smi.parse_compute_apps(read(SAMPLES / "nvidia_smi_compute_apps.csv"))
    assert (app.pid, app.process_name, app.used_memory_bytes, app.gpu_uuid) == (478, "python3", 610 * MIB, H200_UUID)


def test_compute_apps_multi_with_na_and_short_row() -> None:
    text = read(FIXTURES / "nvidia_smi_compute_apps_multi.csv")
    apps = nvidia_smi.parse_compute_apps(text, nvidia_smi.DEFAULT_APP_FIELDS)
    assert [(a.pid, a.process_name, a.used_memory_bytes) for a in apps] == [
        (2057141, "python", 3010 * MIB),
        (2057240, "/usr/bin/python3.10", None),
    ]  # the third row has 3 fields for 4 columns: skipped


def test_compute_apps_idle() -> None:
    assert nvidia_smi.parse_compute_apps("pid, process_name, used_gpu_memory [MiB], gpu_uuid\n") == []
    assert nvidia_smi.parse_compute_apps("") == []
    assert nvidia_smi.parse_compute_apps("No running processes found\n", nvidia_smi.DEFAULT_APP_FIELDS) == []


def test_units_in_values() -> None:
    (r,) = nvidia_smi.parse_query_gpu("memory.total [MiB], memory.used\n2 GiB, 1024 KiB\n")
    assert r.memory_total_bytes == 2 * 2**30 and r.memory_used_bytes == 2**20


def test_commands() -> None:
    assert nvidia_smi.list_command() == ["nvidia-smi", "-L"]
    assert nvidia_smi.query_gpu_command() == [
        "nvidia-smi",
        "--query-gpu=index,uuid,name,memory.total,memory.used,utilization.gpu,driver_version",
        "--format=csv",
    ]
    assert nvidia_smi.query_gpu_command(["index", "memory.used"], header=False, units=False) == [
        "nvidia-smi",
        "--query-gpu=index,memory.used",
        "--format=csv,noheader,nounits",
    ]
    assert nvidia_smi.compute_apps_command() == [
        "nvidia-smi",
        "--query-compute-apps=pid,process_name,used_memory,gpu_uuid",
        "--format=csv",
    ]
    with pytest.raises(ValueError):
        nvidia_smi.query_gpu_command([])


@given(st.text(), st.booleans())
def test_fuzz_never_raises(text: str, with_fields: bool) -> None:
    nvidia_smi.parse_list(text)
    for r in nvidia_smi.parse_query_gpu(text, nvidia_smi.DEFAULT_GPU_FIELDS if with_fields else None):
        _ = (r.index, r.uuid, r.name, r.memory_total_bytes, r.memory_used_bytes, r.utilization_gpu_percent)
    for a in nvidia_smi.parse_compute_apps(text, nvidia_smi.DEFAULT_APP_FIELDS if with_fields else None):
        _ = (a.pid, a.process_name, a.used_memory_bytes, a.gpu_uuid)


@given(st.integers(min_value=0, max_value=2**40), st.integers(min_value=0, max_value=100))
def test_fuzz_mib_round_trip(mib: int, util: int) -> None:
    text = f"index, memory.used [MiB], utilization.gpu [%]\n0, {mib} MiB, {util} %\n"
    (r,) = nvidia_smi.parse_query_gpu(text)
    assert r.memory_used_bytes == mib * MIB and r.utilization_gpu_percent == util


def test_huge_values_do_not_overflow() -> None:
    (r,) = nvidia_smi.parse_query_gpu("memory.total [MiB], index\n1e308 GiB, 1e400\n")
    assert r.memory_total_bytes is None and r.index is None
