"""The kernel log's Xid lines (parsers/xid.py), the Xid catalogue (xpushare/data/xid.yaml) and the GPU health
capture (parsers/gpu_health.py)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from xpushare.parsers import gpu_health, xid

DMESG = """2026-11-27T02:28:38,000000+00:00 Linux version 6.8.0
2026-11-27T05:53:09,123456+00:00 NVRM: Xid (PCI:0000:01:00): 79, pid=1234, name=python3, GPU has fallen off the bus.
2026-11-27T05:53:10,000001+00:00 NVRM: GPU at PCI:0000:01:00: GPU-ae708708-d6f0-f18f-0d42-ab51554bfb37
2026-11-27T05:54:00,5+00:00 NVRM: Xid (PCI:0000:3b:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0.
"""  # noqa: E501
JOURNAL = ("2026-11-27T05:53:09+0000 gpu-7 kernel: NVRM: Xid (PCI:0000:3B:00): 13, Graphics SM Warp Exception on "
           "(GPC 0, TPC 0, SM 0): Out Of Range Address\n"
           "2026-11-27T05:53:09+00:00 gpu-7 kernel: NVRM: Xid (PCI:0000:3b:00): 31, pid=88, name=a.out, Ch 00000008\n")


def test_dmesg_iso_lines() -> None:
    events = xid.parse_log(DMESG)
    assert [(e.xid, e.bus, e.pid, e.process) for e in events] == [(79, "0000:01:00", 1234, "python3"),
                                                                   (48, "0000:3b:00", None, None)]
    assert events[0].time == datetime(2026, 11, 27, 5, 53, 9, 123456, tzinfo=timezone.utc)
    assert events[0].text == "GPU has fallen off the bus."
    assert events[1].time == datetime(2026, 11, 27, 5, 54, 0, 500000, tzinfo=timezone.utc)
    assert events[1].text.startswith("An uncorrectable double bit error")


def test_journalctl_short_iso_lines_and_old_drivers_without_pid() -> None:
    events = xid.parse_log(JOURNAL)
    assert [(e.xid, e.bus, e.pid) for e in events] == [(13, "0000:3b:00", None), (31, "0000:3b:00", 88)]
    assert events[0].time == datetime(2026, 11, 27, 5, 53, 9, tzinfo=timezone.utc)
    assert events[0].text.startswith("Graphics SM Warp Exception")


@pytest.mark.parametrize("line", ["", "NVRM: Xid", "NVRM: Xid (PCI:zz:00): 79, x", "kernel: usb 1-1: new device",
                                  "NVRM: Xid (PCI:0000:01:00): seventy-nine"])
def test_other_lines_are_no_xid(line: str) -> None:
    assert xid.parse_line(line) is None


@pytest.mark.parametrize(("raw", "key"), [("00000000:01:00.0", "0000:01:00"), ("0000:3B:00", "0000:3b:00"),
                                          ("3B:00.0", "0000:3b:00"), ("00000001:C1:00.0", "0001:c1:00"),
                                          ("GPU-1", None), ("", None)])
def test_bus_keys_compare_nvidia_smi_and_kernel_ids(raw: str, key: str | None) -> None:
    assert xid.bus_key(raw) == key


def test_catalogue_has_the_issue_xids_with_meaning_and_source() -> None:
    table = xid.catalogue()
    wanted = {13, 31, 32, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 109, 119, 120, 140}
    assert wanted <= set(table)
    assert {n for n, e in table.items() if e.device_plugin_skips} == {13, 31, 43, 45, 68, 109}
    assert all(e.name and e.meaning and e.action and e.severity in xid.SEVERITIES for e in table.values())
    assert "XID Errors" in xid.catalogue_source() and "r555" in xid.catalogue_source()
    assert xid.describe(79) == "Xid 79: GPU has fallen off the bus"
    assert xid.severity(79) == "critical" and xid.severity(31) == "application" and xid.severity(63) == "warning"
    assert xid.severity(12345) == "critical" and xid.describe(12345) == "Xid 12345: not in the catalogue"


CAPTURE = """# xpushare gpu health
## nvidia-smi exit=15
Unable to determine the device handle for GPU00000000:02:00.0: GPU is lost.  Reboot the system to recover this GPU
0, GPU-aaaa, 00000000:01:00.0, 4, 2, 10, 3, 1, No, No, Yes, 0x00000000000000C8
## kernel-log source=dmesg lines=812
2026-11-27T05:53:09,123456+00:00 NVRM: Xid (PCI:0000:02:00): 79, pid=1, name=x, GPU has fallen off the bus.
"""


def test_health_capture_rows_losses_and_xids() -> None:
    cap = gpu_health.parse_capture(CAPTURE)
    assert cap.smi_exit == 15 and cap.nvml_observable and cap.lost == ["0000:02:00"]
    (g,) = cap.gpus
    assert (g.uuid, g.bus, g.ecc_volatile_corrected, g.ecc_volatile_uncorrected, g.ecc_aggregate_corrected,
            g.ecc_aggregate_uncorrected, g.retired_pages_dbe) == ("GPU-aaaa", "0000:01:00", 4, 2, 10, 3, 1)
    assert (g.retired_pages_pending, g.remap_pending, g.remap_failure) == (False, False, True)
    assert g.throttle_reasons == 0xC8 and g.flagged_throttle == ["hw_slowdown", "hw_thermal_slowdown",
                                                                  "hw_power_brake_slowdown"]
    assert cap.kernel_log == "dmesg" and cap.kernel_log_lines == 812 and [e.xid for e in cap.xids] == [79]
    assert cap.gpu("GPU-aaaa") is g and cap.gpu("0") is g and cap.gpu("00000000:01:00.0") is g
    assert cap.gpu("GPU-bbbb") is None


def test_health_capture_not_observable_and_na_fields() -> None:
    cap = gpu_health.parse_capture(
        "# xpushare gpu health\n## nvidia-smi exit=9\nNVIDIA-SMI has failed because it couldn't communicate with the "
        "NVIDIA driver.\n## kernel-log source=none lines=0\n"
        "dmesg: read kernel buffer failed: Operation not permitted\n")
    assert not cap.nvml_observable and cap.smi_error.startswith("nvidia-smi exit 9: NVIDIA-SMI has failed")
    assert cap.kernel_log is None and "Operation not permitted" in cap.kernel_log_error and cap.xids == []
    na = gpu_health.parse_capture("## nvidia-smi exit=0\n0, GPU-a, 00000000:01:00.0, [N/A], [N/A], [N/A], [N/A], "
                                  "[N/A], [N/A], [N/A], [N/A], [N/A]\n")
    (g,) = na.gpus
    assert g.ecc_volatile_uncorrected is None and g.remap_failure is None and g.throttle_reasons is None
    assert gpu_health.parse_capture("").smi_exit is None and gpu_health.parse_capture("garbage\n").gpus == []


def test_throttle_names() -> None:
    assert gpu_health.throttle_names(0x1) == ["gpu_idle"]
    assert gpu_health.throttle_names(0x4 | 0x8 | 0x1000) == ["sw_power_cap", "hw_slowdown", "0x1000"]
