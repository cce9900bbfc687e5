"""The SUT proven in the path and placement from two sources (judge/sut_path.py, evidence/nvml_placement.py,
evidence/workload_env.py, parsers/sampler_csv.py), and the host backend's GPU environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from xpushare.backends.host import HostBackend
from xpushare.evidence import workload_env
from xpushare.evidence.nvml_placement import key_uuid, nvml_placement
from xpushare.evidence.store import Evidence
from xpushare.inventory.schema import Inventory, InventoryError, load
from xpushare.judge.sut_path import gpu_identity_check, sut_path_check, with_sut_checks
from xpushare.model.verdict import Status, Verdict
from xpushare.model.workload import WorkloadRecord, WorkloadSpec
from xpushare.parsers.sampler_csv import gpu_rows, index_to_uuid, proc_rows

U0, U1 = "GPU-aaaa0000-0000-0000-0000-000000000000", "GPU-bbbb1111-1111-1111-1111-111111111111"
GPU_CSV = (f"timestamp,gpu_index,uuid,sm_util_pct,mem_used_bytes,mem_total_bytes\n"
           f"1.0,0,{U0},5,10,100\n1.0,1,{U1},0,0,100\n")


def procs_csv(*rows: tuple[int, int]) -> str:
    """procs.csv with one row per ``(gpu_index, pid)``."""
    return "timestamp,gpu_index,pid,used_bytes\n" + "".join(f"1.5,{g},{p},1048576\n" for g, p in rows)


def registration(cid: str, key: str, pid: int) -> str:
    return (f"[XPUSHARE][DEBUG]: SO_PEERCRED: client fd=7 pid={pid} (client reported pid={pid})\n"
            f"[XPUSHARE][INFO]: Registered client {cid} on GPU {key} with Pod name = none, Pod namespace = none\n")


def host_evidence(pods: dict[str, tuple[int, str | None]], nvml: list[tuple[int, int]],
                  logs: dict[str, str] | None = None, preload: bool = True, scheduler_log: str | None = "") -> Evidence:
    """Host-mode evidence of pods ``name -> (pid, registered key or None)`` on node ``n1``; NVML saw ``nvml``."""
    records = [WorkloadRecord(name, "Succeeded", 0, node="n1", host_pid=pid) for name, (pid, _) in pods.items()]
    sched = "".join(registration(f"{i:016x}", key, pid) for i, (pid, key) in enumerate(pods.values(), 1) if key)
    env = b"PATH=/bin\0" + (b"LD_PRELOAD=/opt/lib.so\0" if preload else b"")
    files = {"sampler/n1_gpu.csv": GPU_CSV, "sampler/n1_procs.csv": procs_csv(*nvml),
             **{workload_env.environ_file(n): workload_env.render(env) for n in pods}}
    if scheduler_log is not None:
        files["scheduler.log"] = scheduler_log + sched
    default_logs = {n: "[XPUSHARE][INFO]: initialize_client backend=cuda\n" for n in pods}
    return Evidence.from_parts(records, {**default_logs, **(logs or {})}, files, mode="host")


def test_sampler_csv_rows_and_index_map() -> None:
    assert index_to_uuid(gpu_rows(GPU_CSV)) == {0: U0, 1: U1}
    rows = proc_rows(procs_csv((1, 42)) + "bad,row\n")
    assert [(r.gpu_index, r.pid, r.used_bytes) for r in rows] == [(1, 42, 1048576.0)]


def test_key_uuid_resolves_indexes_and_uuids_only() -> None:
    gpus = {0: U0, 1: U1}
    assert key_uuid("1", gpus) == U1 and key_uuid(U0, gpus) == U0 and key_uuid("GPU-bbbb", gpus) == U1
    assert key_uuid("default", gpus) is None and key_uuid("7", gpus) is None and key_uuid(None, gpus) is None


def test_nvml_placement_says_why_it_has_none() -> None:
    files = {"sampler/n1_no_gpu.txt": "NVMLError"}
    assert "no GPU" in (nvml_placement(files.get, "n1", 5).note or "")
    empty: dict[str, str] = {}
    assert "not stored" in (nvml_placement(empty.get, "n1", 5).note or "")
    seen = nvml_placement({"sampler/n1_gpu.csv": GPU_CSV, "sampler/n1_procs.csv": procs_csv((1, 5))}.get, "n1", 6)
    assert seen.uuids == () and "never in NVML" in (seen.note or "")


def test_environment_is_sorted_and_redacted() -> None:
    text = workload_env.render(b"Z=1\0AWS_SECRET_ACCESS_KEY=abc\0API_TOKEN=t\0CUDA_VISIBLE_DEVICES=1\0MY_KEY=k\0")
    assert text.splitlines() == ["API_TOKEN=***", "AWS_SECRET_ACCESS_KEY=***", "CUDA_VISIBLE_DEVICES=1",
                                 "MY_KEY=***", "Z=1"]
    assert workload_env.parse(text)["CUDA_VISIBLE_DEVICES"] == "1"


def test_nvml_is_the_placement_and_agrees_with_the_registration() -> None:
    ev = host_evidence({"a": (10, "0"), "b": (11, "1")}, [(0, 10), (1, 11)])
    assert {p.name: p.gpu for p in ev.pods} == {"a": U0, "b": U1}
    check = gpu_identity_check(ev)
    assert check is not None and check.ok is True and set(check.values["agree"]) == {"a", "b"}
    path = sut_path_check(ev)
    assert path is not None and path.ok is True


def test_a_wrong_gpu_key_fails_naming_the_disagreement_even_over_a_skip() -> None:
    """Every client registered on GPU 0 (NVIDIA_VISIBLE_DEVICES=0,1 inherited) while NVML saw GPU 1: FAIL."""
    ev = host_evidence({"a": (10, "0"), "b": (11, "0")}, [(0, 10), (1, 11)])
    assert {p.gpu for p in ev.pods} == {U0, U1}  # the judgments see NVML's spread, not the SUT's key
    verdict = with_sut_checks(Verdict(Status.SKIP, "fewer than 2 distinct GPUs used"), ev)
    assert verdict.status is Status.FAIL and "b: SUT key 0 -> " + U0 in verdict.summary, verdict.summary
    assert "was SKIP" in verdict.summary


@pytest.mark.parametrize(("log", "why"), [
    ("ERROR: ld.so: object '/x.so' from LD_PRELOAD cannot be preloaded (file too short): ignored.\n",
     "preload refused"),
    ("Traceback (most recent call last):\nModuleNotFoundError: No module named 'torch'\n",
     "the workload failed before it reached the GPU"),
    ("just output\n", "no registration in scheduler.log and no line of the client library"),
])
def test_a_workload_the_sut_never_saw_is_error(log: str, why: str) -> None:
    ev = host_evidence({"a": (10, None)}, [], logs={"a": log})
    verdict = with_sut_checks(Verdict(Status.PASS, "pod passed"), ev)
    assert verdict.status is Status.ERROR and verdict.summary.startswith(
        "premise unmet: sut: SUT not in the path: a: " + why)
    assert verdict.summary.endswith("(was PASS: pod passed)")


@pytest.mark.parametrize("stamp", ["", "2026-11-27T02:51:59.140707Z "])
def test_a_loaded_library_the_scheduler_never_registered_is_a_fail(stamp: str) -> None:
    """The scheduler is down: the library ran (its lines, with kubectl's timestamps in Kubernetes) but nothing
    registered the client. That is the SUT failing, not a test that never reached it."""
    log = f"{stamp}[XPUSHARE][INFO]: initialize_client backend=cuda\n{stamp}[XPUSHARE][FATAL]: Condition failed\n"
    ev = host_evidence({"a": (10, None)}, [(0, 10)], logs={"a": log})
    verdict = with_sut_checks(Verdict(Status.PASS, "pod passed"), ev)
    assert verdict.status is Status.FAIL and "never registered" in verdict.summary


def test_no_scheduler_log_cannot_establish_the_path() -> None:
    ev = host_evidence({"a": (10, "0")}, [(0, 10)], scheduler_log=None)
    check = sut_path_check(ev)
    assert check is not None and check.ok is None and "scheduler.log" in check.detail


def test_without_the_library_in_the_environment_nothing_is_checked() -> None:
    ev = host_evidence({"a": (10, None)}, [(0, 10)], preload=False)
    assert sut_path_check(ev) is None
    assert with_sut_checks(Verdict(Status.PASS, "ok"), ev).status is Status.PASS


INVENTORY = """
clusters:
  h:
    mode: host
    sut_lib: /opt/lib.so
    {extra}
    hosts:
      box: {{connection: local, roles: [gpu]}}
"""


def inventory(tmp_path: Path, extra: str) -> Inventory:
    path = tmp_path / "inventory.yaml"
    path.write_text(INVENTORY.format(extra=extra), encoding="utf-8")
    return load(path)


@pytest.mark.parametrize(("setting", "want_cuda", "want_nvidia", "unset"), [
    ("", "1", None, ["NVIDIA_VISIBLE_DEVICES"]),
    ("visible_devices: unset", "1", None, ["NVIDIA_VISIBLE_DEVICES"]),
    ("visible_devices: uuid", U1, U1, []),
])
def test_host_backend_decides_the_gpu_variables(setting: str, want_cuda: str, want_nvidia: str | None,
                                                unset: list[str], monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    """Whatever the tool's environment holds (NVIDIA_VISIBLE_DEVICES=0,1 here), the workload's GPU variables are
    the backend's: the index with NVIDIA_VISIBLE_DEVICES removed, or the UUID in both."""
    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", "0,1")
    cluster = inventory(tmp_path, setting).cluster("h")
    backend = HostBackend(cluster)
    env = backend.pod_env(WorkloadSpec(name="p", workload="w2_medium_add"), "p0", 1, U1)
    assert env["CUDA_VISIBLE_DEVICES"] == want_cuda and env.get("NVIDIA_VISIBLE_DEVICES") == want_nvidia
    assert backend.unset_vars(env, 1) == unset and backend.unset_vars(env, None) == []
    backend.close()


def test_visible_devices_must_be_a_known_choice(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match="visible_devices"):
        inventory(tmp_path, "visible_devices: all")


def k8s_evidence(registered: str, nvml_index: int) -> Evidence:
    """A pod ``p`` on ``n1`` registered on GPU ``registered``; NVML saw its process (named by HOSTNAME) on
    ``nvml_index``."""
    sched = (f"[XPUSHARE][INFO]: Registered client 00000000000000aa on GPU {registered} with Pod name = p, "
             "Pod namespace = default\n")
    files = {"scheduler.log": sched, "sampler/n1_gpu.csv": GPU_CSV, "sampler/n1_procs.csv": procs_csv((nvml_index, 77)),
             "sampler/n1_pids.csv": "timestamp,pid,hostname,pod_uid\n1.5,77,p,\n1.5,78,other,\n"}
    return Evidence.from_parts([WorkloadRecord("p", "Succeeded", 0, node="n1", namespace="default")], {"p": ""}, files,
                               mode="k8s")


def test_kubernetes_placement_comes_from_nvml_by_the_pods_hostname() -> None:
    ev = k8s_evidence(U1, 1)
    assert ev.pods[0].gpu == U1
    check = gpu_identity_check(ev)
    assert check is not None and check.ok is True
    wrong = with_sut_checks(Verdict(Status.PASS, "ok"), k8s_evidence(U0, 1))
    assert wrong.status is Status.FAIL and f"SUT key {U0} -> {U0}; NVML {U1}" in wrong.summary


def test_node_sampler_names_a_process_by_hostname_and_pod_uid(tmp_path: Path) -> None:
    import importlib.util
    import sys

    from xpushare.data import workloads_dir

    sys.path.insert(0, str(workloads_dir()))
    try:
        spec = importlib.util.spec_from_file_location("node_sampler_under_test", workloads_dir() / "node_sampler.py")
        assert spec is not None and spec.loader is not None
        sampler = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sampler)
    finally:
        sys.path.remove(str(workloads_dir()))
    proc = tmp_path / "42"
    proc.mkdir()
    (proc / "environ").write_bytes(b"PATH=/bin\0HOSTNAME=func-003-w2-1\0")
    uid = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
    (proc / "cgroup").write_text(f"0::/kubepods.slice/kubepods-besteffort-pod{uid.replace('-', '_')}.slice/cri-x\n")
    assert sampler.pid_identity(42, str(tmp_path)) == ("func-003-w2-1", uid)
    assert sampler.pid_identity(43, str(tmp_path)) == ("", "")


def timed_k8s_evidence(started: float | None, stamp: str) -> Evidence:
    """A pod ``p`` started at ``started`` (Unix s) whose registration kubectl stamped ``stamp``."""
    sched = (f"{stamp + ' ' if stamp else ''}[XPUSHARE][INFO]: Registered client 00000000000000aa on GPU {U0} "
             "with Pod name = p, Pod namespace = default\n")
    return Evidence.from_parts([WorkloadRecord("p", "Succeeded", 0, node="n1", namespace="default", started=started)],
                               {"p": ""}, {"scheduler.log": sched}, mode="k8s")


START = 1794985600.0  # 2026-11-18T07:06:40Z
REG_AFTER_2S = "2026-11-18T07:06:42.000000000Z"
REG_AFTER_90S = "2026-11-18T07:08:10.500000000Z"


def test_registration_within_the_timeout_passes_and_records_the_threshold() -> None:
    verdict = with_sut_checks(Verdict(Status.PASS, "ok"), timed_k8s_evidence(START, REG_AFTER_2S))
    assert verdict.status is Status.PASS and verdict.thresholds["registration_timeout_s"] == 60.0
    path = next(c for c in verdict.checks if c.name == "sut_in_path")
    assert path.values["registration_delay_s"] == {"p": 2.0}
    assert "within registration_timeout_s 60 s" in path.expression


def test_a_late_registration_is_a_fail_on_the_sut() -> None:
    """Registered 90.5 s after its container started: the SUT was slow to admit it (FAIL, not ERROR)."""
    ev = timed_k8s_evidence(START, REG_AFTER_90S)
    verdict = with_sut_checks(Verdict(Status.PASS, "ok"), ev)
    assert verdict.status is Status.FAIL, verdict.summary
    assert "p: registered 90.5 s after it started" in verdict.summary
    assert "registration_timeout_s 60" in verdict.summary
    wider = with_sut_checks(Verdict(Status.PASS, "ok"), timed_k8s_evidence(START, REG_AFTER_90S),
                            {"registration_timeout_s": 120})
    assert wider.status is Status.PASS and wider.thresholds["registration_timeout_s"] == 120.0


def test_a_delay_that_cannot_be_measured_is_said_not_judged() -> None:
    """Host mode: the scheduler's own log has no timestamps; the registration is proven, its delay named unmeasured."""
    ev = host_evidence({"a": (10, "0")}, [(0, 10)])
    path = sut_path_check(ev)
    assert path is not None and path.ok is True
    assert path.values["delay_unmeasured"] == {"a": "no start time in pods.json"}
    no_stamp = timed_k8s_evidence(START, "")
    path = sut_path_check(no_stamp)
    assert path is not None and path.ok is True and "no timestamps" in path.values["delay_unmeasured"]["p"]
