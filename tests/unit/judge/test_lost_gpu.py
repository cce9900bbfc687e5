"""FAIL-006's ``lost_gpu_reported`` (xpushare/judge/lost_gpu.py) on recorded evidence.

``EXPOSITION_AFTER`` is the real scheduler's ``/metrics`` after Xid 79 on the lab (FAIL-006, unmodified SUT,
trimmed to the lost GPU's and the other GPU's series): NVML's placeholder ``GPU-0`` exported as a present GPU
(finding 22), so the check FAILs. A correct exporter (the lost GPU's series gone, or marked down) PASSes; without
NVML saying the GPU is lost nothing is judged.
"""

from __future__ import annotations

from typing import Any

from xpushare.evidence.store import Evidence
from xpushare.judge.lost_gpu import check_lost_gpu_reported

LOST = "GPU-d9da30a8-7507-3635-400f-0bf968f3d640"
KEPT = "GPU-17a609a5-2b90-b11b-6c00-38ec5fb92dd6"
BEFORE = f"""# xpushare gpu health
## nvidia-smi exit=0
0, {LOST}, 00000000:01:00.0, 0, 0, 0, 0, 0, No, No, No, 0x0000000000000001
1, {KEPT}, 00000000:02:00.0, 0, 0, 0, 0, 0, No, No, No, 0x0000000000000001
## kernel-log source=dmesg lines=1
"""
AFTER = f"""# xpushare gpu health
## nvidia-smi exit=15
Unable to determine the device handle for GPU00000000:01:00.0: GPU is lost.  Reboot the system to recover this GPU
1, {KEPT}, 00000000:02:00.0, 0, 0, 0, 0, 0, No, No, No, 0x0000000000000001
## kernel-log source=dmesg lines=2
2026-11-27T06:52:52,830213+00:00 NVRM: Xid (PCI:0000:01:00): 79, pid=24472, name=python, GPU has fallen off the bus.
"""
HEAD = """# HELP xpushare_nvml_up Whether NVML is available (1=yes, 0=no)
# TYPE xpushare_nvml_up gauge
xpushare_nvml_up 1
"""
INFO = """# HELP xpushare_gpu_info GPU device information
# TYPE xpushare_gpu_info gauge
"""
LOST_INFO = 'xpushare_gpu_info{gpu_uuid="GPU-0",gpu_index="0",gpu_name="NVIDIA A100-SXM4-80GB"} 1\n'
KEPT_INFO = f'xpushare_gpu_info{{gpu_uuid="{KEPT}",gpu_index="1",gpu_name="NVIDIA A100-SXM4-80GB"}} 1\n'
TAIL = """# HELP xpushare_gpu_memory_total_bytes Total GPU memory in bytes
# TYPE xpushare_gpu_memory_total_bytes gauge
{lost}xpushare_gpu_memory_total_bytes{{gpu_uuid="{kept}",gpu_index="1"}} 17179869184
# HELP xpushare_scheduler_running_clients Running list length
# TYPE xpushare_scheduler_running_clients gauge
xpushare_scheduler_running_clients{{gpu_uuid="0",gpu_index="0"}} 0
xpushare_scheduler_running_clients{{gpu_uuid="1",gpu_index="1"}} 0
"""
EXPOSITION_AFTER = HEAD + INFO + LOST_INFO + KEPT_INFO + TAIL.format(
    lost='xpushare_gpu_memory_total_bytes{gpu_uuid="GPU-0",gpu_index="0"} 0\n', kept=KEPT)
#: What a correct exporter could say: the lost GPU's series gone.
EXPOSITION_GONE = HEAD + INFO + KEPT_INFO + TAIL.format(lost="", kept=KEPT)
PLAN: dict[str, Any] = {
    "fault": {"kind": "device-lost", "victims_ended": {"fail-006-victim-1": {"gpu": LOST, "node": "gf-node1"}}},
    "metrics_after": {"gf-node1": {"file": "metrics_after_fault.txt", "ok": True, "http_code": 200}},
}


def judge(page: str, after: str = AFTER) -> Any:
    files = {"gpu_health/gf-node1-before.txt": BEFORE, "gpu_health/gf-node1-after.txt": after,
             "metrics_after_fault.txt": page}
    return check_lost_gpu_reported(Evidence.from_parts([], {}, files, mode="host"), PLAN, [LOST])


def test_the_real_exporter_shows_a_lost_gpu_as_present() -> None:
    check = judge(EXPOSITION_AFTER)
    assert check.ok is False, check
    assert 'xpushare_gpu_info{gpu_uuid="GPU-0",gpu_index="0"' in check.detail
    assert "0000:01:00" in check.detail and "nvml_up 1" in check.detail
    (nvml,) = check.values["nvml"]
    assert nvml["nvml_says_lost"] and nvml["xid_after"] == [79] and nvml["index"] == 0
    assert check.values["metrics"][LOST]["scheduler_series"] == [
        'xpushare_scheduler_running_clients{gpu_uuid="0",gpu_index="0"} 0']


def test_a_correct_exporter_passes() -> None:
    assert judge(EXPOSITION_GONE).ok is True
    marked = EXPOSITION_AFTER + ("# HELP xpushare_gpu_up Whether the GPU answers NVML\n# TYPE xpushare_gpu_up gauge\n"
                                 'xpushare_gpu_up{gpu_uuid="GPU-0",gpu_index="0"} 0\n')
    check = judge(marked)
    assert check.ok is True, check
    assert check.values["metrics"][LOST]["marked_lost"] == ['xpushare_gpu_up{gpu_uuid="GPU-0",gpu_index="0"} 0']
    assert judge(EXPOSITION_AFTER.replace("xpushare_nvml_up 1", "xpushare_nvml_up 0")).ok is True


def test_no_loss_seen_by_nvml_is_not_judged() -> None:
    check = judge(EXPOSITION_AFTER, after=BEFORE)
    assert check.ok is None and "not lost" in check.detail
    check = judge(EXPOSITION_AFTER, after="# xpushare gpu health\n## nvidia-smi exit=9\nNVIDIA-SMI has failed\n")
    assert check.ok is None and "not established" in check.detail
