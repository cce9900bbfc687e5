"""A GPU fault during a case is ERROR, never a verdict on the SUT (judge/gpu_faults.py), and envcheck's node health
step (envcheck/node_health.py), on hand-made captures (the format of parsers/gpu_health.py)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta, timezone

from xpushare.envcheck.node_health import judge_health
from xpushare.evidence.store import Evidence
from xpushare.judge.gpu_faults import gpu_fault_check, with_gpu_fault_check
from xpushare.model.verdict import Status, Verdict
from xpushare.model.workload import WorkloadRecord

G0, G1 = "GPU-00000000-0000-0000-0000-000000000000", "GPU-11111111-1111-1111-1111-111111111111"
NOW = datetime(2026, 11, 27, 6, 0, tzinfo=timezone.utc)


def row(index: int, uuid: str, *, unc: int = 0, dbe: int = 0, failure: str = "No", throttle: int = 1) -> str:
    return (f"{index}, {uuid}, 00000000:0{index + 1}:00.0, 0, {unc}, 0, {unc}, {dbe}, No, No, {failure}, "
            f"0x{throttle:016X}")


def xid_line(index: int, number: int, when: datetime = NOW, text: str = "x") -> str:
    return (f"{when.strftime('%Y-%m-%dT%H:%M:%S,%f')}+00:00 NVRM: Xid (PCI:0000:0{index + 1}:00): {number}, "
            f"pid=7, name=python3, {text}")


def capture(rows: list[str], xids: Sequence[str] = (), *, smi_exit: int = 0, log: str | None = "dmesg",
            lost: Sequence[int] = ()) -> str:
    lines = ["# xpushare gpu health", f"## nvidia-smi exit={smi_exit}"]
    lines += [f"Unable to determine the device handle for GPU00000000:0{i + 1}:00.0: GPU is lost.  Reboot"
              for i in lost]
    lines += rows
    if log is None:
        lines += ["## kernel-log source=none lines=0", "dmesg: read kernel buffer failed: Operation not permitted"]
    else:
        lines += [f"## kernel-log source={log} lines=100", *xids]
    return "\n".join(lines) + "\n"


HEALTHY = capture([row(0, G0), row(1, G1)])


def evidence(after: str, before: str = HEALTHY, gpu: str | None = G0, node: str = "n1") -> Evidence:
    pods = [WorkloadRecord("p", "Succeeded", 0, node=node, gpu=gpu, host_pid=100)]
    files = {f"gpu_health/{node}-before.txt": before, f"gpu_health/{node}-after.txt": after}
    return Evidence.from_parts(pods, {"p": ""}, files, mode="host")


def judged(ev: Evidence, status: Status = Status.PASS, expects: bool = False) -> Verdict:
    return with_gpu_fault_check(Verdict(status, "all good"), ev, expects_gpu_faults=expects)


def test_no_fault_keeps_the_verdict_with_the_check_ok() -> None:
    v = judged(evidence(HEALTHY))
    assert v.status is Status.PASS and v.summary == "all good"
    assert v.checks[-1].name == "gpu_health" and v.checks[-1].ok is True
    assert {"gpu_health/n1-before.txt", "gpu_health/n1-after.txt"} <= set(v.evidence)


def test_xid_79_on_the_case_gpu_is_error_naming_node_gpu_and_meaning() -> None:
    after = capture([row(0, G0), row(1, G1)], [xid_line(0, 79, text="GPU has fallen off the bus.")])
    for was in (Status.PASS, Status.FAIL):
        v = judged(evidence(after), was)
        assert v.status is Status.ERROR
        assert v.summary == (f"GPU fault on n1 GPU {G0} during the case (Xid 79: GPU has fallen off the bus): "
                             f"not a verdict on the SUT (was {was}: all good)")


def test_an_xid_already_in_the_log_before_the_case_is_no_fault() -> None:
    old = xid_line(0, 79, NOW - timedelta(hours=1))
    v = judged(evidence(capture([row(0, G0), row(1, G1)], [old]), before=capture([row(0, G0), row(1, G1)], [old])))
    assert v.status is Status.PASS, v.summary


def test_faults_on_a_gpu_the_case_did_not_use_and_application_xids_are_no_fault() -> None:
    after = capture([row(0, G0), row(1, G1, unc=5)], [xid_line(1, 79), xid_line(0, 31), xid_line(0, 13)])
    v = judged(evidence(after))
    assert v.status is Status.PASS, v.summary
    apps = v.checks[-1].values["application_xids"]
    assert len(apps) == 2 and "Xid 31: GPU memory page fault" in apps[0]


def test_unknown_gpu_of_a_pod_means_every_gpu_of_its_node() -> None:
    after = capture([row(0, G0), row(1, G1)], [xid_line(1, 48)])
    v = judged(evidence(after, gpu=None))
    assert v.status is Status.ERROR and f"GPU {G1} during the case (Xid 48: Double Bit ECC Error)" in v.summary


def test_without_nvml_rows_before_every_new_xid_of_the_node_counts_and_throttling_is_recorded() -> None:
    blind_nvml = capture([], smi_exit=127)
    v = judged(evidence(capture([], [xid_line(1, 79)], smi_exit=127), before=blind_nvml))
    assert v.status is Status.ERROR
    assert v.summary.startswith("GPU fault on n1 GPU at PCI 0000:02:00 during the case (Xid 79: GPU has fallen off ")
    hot = judged(evidence(capture([row(0, G0, throttle=0x40), row(1, G1, throttle=0x8)])))
    assert hot.status is Status.PASS
    assert hot.checks[-1].values["throttled_after"] == {f"n1 GPU {G0} (0000:01:00)": ["hw_thermal_slowdown"]}


def test_counters_and_a_lost_gpu_are_faults() -> None:
    ecc = judged(evidence(capture([row(0, G0, unc=3), row(1, G1)])))
    assert ecc.status is Status.ERROR and "(uncorrected ECC errors (volatile) 0 -> 3)" in ecc.summary
    dbe = judged(evidence(capture([row(0, G0, dbe=1, failure="Yes"), row(1, G1)])))
    assert dbe.status is Status.ERROR and "pages retired for double-bit errors 0 -> 1" in dbe.summary
    assert "row remapping failure" in "; ".join(dbe.checks[-1].values["faults"])
    lost = judged(evidence(capture([row(1, G1)], smi_exit=15, lost=[0])))
    assert lost.status is Status.ERROR and "(GPU lost: no longer visible to nvidia-smi)" in lost.summary


def test_a_case_about_faults_keeps_its_verdict_and_skip_error_stay() -> None:
    after = capture([row(0, G0), row(1, G1)], [xid_line(0, 79)])
    v = judged(evidence(after), expects=True)
    assert v.status is Status.PASS and v.checks[-1].ok is None and v.checks[-1].values["faults"]
    assert judged(evidence(after), Status.SKIP).status is Status.SKIP
    err = judged(evidence(after), Status.ERROR)
    assert err.status is Status.ERROR and err.summary == "all good"


def test_not_observable_is_named_and_never_healthy_but_changes_no_verdict() -> None:
    v = judged(evidence(capture([row(0, G0), row(1, G1)], log=None)))
    assert v.status is Status.PASS
    check = v.checks[-1]
    assert check.ok is None and "kernel log not observable" in check.detail and not check.values["healthy"]
    missing = Evidence.from_parts([WorkloadRecord("p", "Succeeded", 0, node="n1", gpu=G0, host_pid=1)], {"p": ""},
                                  {"gpu_health/n1-after.txt": HEALTHY}, mode="host")
    c = gpu_fault_check(missing)
    assert c is not None and c.ok is None and "no health capture before the case" in c.detail


def test_no_capture_no_check() -> None:
    ev = Evidence.from_parts([WorkloadRecord("p", "Succeeded", 0, node="n1", gpu=G0, host_pid=1)], {"p": ""}, {},
                             mode="host")
    assert gpu_fault_check(ev) is None
    assert judged(ev).checks == []


# ------------------------------------------------------------------------------------------- envcheck


def test_envcheck_flags_recent_warning_or_critical_xids_only() -> None:
    text = capture([row(0, G0)], [xid_line(0, 79, NOW - timedelta(hours=3)), xid_line(0, 31, NOW),
                                  xid_line(0, 63, NOW - timedelta(minutes=5))])
    v = judge_health(text, now=NOW)
    assert v.status is Status.FAIL
    assert v.summary.startswith("xid: 1 Xid(s) in the last 2 h, latest Xid 63: ECC page retirement or row remapping "
                                "recording event (warning) on GPU 0000:01:00"), v.summary
    assert v.thresholds == {"xid_window_h": 2.0, "ecc_uncorrected_max": 0}
    wide = judge_health(text, now=NOW, window_h=4)
    assert "2 Xid(s) in the last 4 h" in wide.summary
    assert judge_health(capture([row(0, G0)], [xid_line(0, 79, NOW - timedelta(hours=3))]), now=NOW).status \
        is Status.PASS


def test_envcheck_ecc_remap_throttle_and_lost() -> None:
    assert judge_health(HEALTHY, now=NOW).status is Status.PASS
    ecc = judge_health(capture([row(0, G0, unc=1)]), now=NOW)
    assert ecc.status is Status.FAIL and "uncorrected ECC errors: GPU " in ecc.summary
    assert judge_health(capture([row(0, G0, unc=1)]), now=NOW, ecc_uncorrected_max=1).status is Status.PASS
    remap = judge_health(capture([row(0, G0, failure="Yes")]), now=NOW)
    assert remap.status is Status.FAIL and "remap failure" in remap.summary
    hot = judge_health(capture([row(0, G0, throttle=0x40 | 0x4)]), now=NOW)
    assert hot.status is Status.FAIL and "hw_thermal_slowdown" in hot.summary and "sw_power_cap" not in hot.summary
    fine = judge_health(capture([row(0, G0, throttle=0x1 | 0x2 | 0x4)]), now=NOW)
    assert fine.status is Status.PASS
    lost = judge_health(capture([row(1, G1)], smi_exit=15, lost=[0]), now=NOW)
    assert lost.status is Status.FAIL and "GPU lost (fallen off the bus): 0000:01:00" in lost.summary


def test_envcheck_unobservable_is_error_and_a_node_without_nvidia_smi_is_error() -> None:
    blind = judge_health(capture([row(0, G0)], log=None), now=NOW)
    assert blind.status is Status.ERROR and "kernel log not observable" in blind.summary
    no_smi = "## nvidia-smi exit=127\nnvidia-smi: not found\n## kernel-log source=journalctl lines=3\n"
    missing = judge_health(no_smi, now=NOW)  # a missing prerequisite: ERROR naming it, never PASS
    assert missing.status is Status.ERROR and "missing prerequisite: nvidia-smi not found" in missing.summary
    cpu = judge_health(no_smi, now=NOW, require_nvidia_smi=False)  # the CPU smoke test asks for no GPU
    assert cpu.status is Status.PASS and [c.name for c in cpu.checks] == ["kernel_log", "xid"]
    broken = judge_health(capture([], smi_exit=9), now=NOW)
    assert broken.status is Status.ERROR and "GPU health not observable" in broken.summary
    none = judge_health(None, now=NOW, error="connection lost")
    assert none.status is Status.ERROR and "connection lost" in none.summary
