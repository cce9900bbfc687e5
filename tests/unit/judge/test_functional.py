"""Judgments on evidence from a healthy and from a broken system (real captured pod log as the healthy base)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.paths import FIXTURES, REPO_ROOT
from tests.toolrun import run_tool
from xpushare.cases import REGISTRY
from xpushare.engine import lifecycle
from xpushare.evidence.store import Evidence
from xpushare.judge import functional as judge
from xpushare.model.verdict import Status, Verdict
from xpushare.model.workload import WorkloadRecord

SAMPLES = FIXTURES / "samples"
HEALTHY_LOG = (SAMPLES / "pod_a.log").read_text()
TH = {"pod_timeout_s": 1800, "func002_min_overlap_ratio": 0.5}
REJECTED_LOG = (
    "[XPUSHARE][INFO]: GPU memory limit set to 1073741824 bytes (1.00 GiB)\n"
    "[XPUSHARE][WARN]: cuMemAlloc rejected: 784334848 + 784334848 = 1568669696 would exceed limit "
    "1073741824 bytes (1024.00 MiB)\n"
    "RuntimeError: CUDA out of memory. Tried to allocate 748.00 MiB\n"
)


def rec(
    name: str,
    phase: str = "Succeeded",
    code: int | None = 0,
    gpu: str | None = "GPU-a",
    start: float | None = 100.0,
    end: float | None = 110.0,
    node: str = "n1",
) -> WorkloadRecord:
    return WorkloadRecord(name=name, phase=phase, exit_code=code, node=node, gpu=gpu, started=start, finished=end)


def test_single_pass_healthy_records_runtime() -> None:
    ev = Evidence.from_parts([rec("p")], {"p": HEALTHY_LOG})
    v = judge.judge_single_pass(ev, TH, pod="p")
    assert v.status is Status.PASS
    assert v.metrics["runtime_s"] == pytest.approx(11.18428111076355)
    assert v.thresholds == TH and "pods/p.log" in v.evidence


@pytest.mark.parametrize(
    ("record", "log", "status"),
    [
        (rec("p", "Failed", 1), HEALTHY_LOG, Status.FAIL),  # exit code wins over a PASS line
        (rec("p"), HEALTHY_LOG.replace("PASS\n", "BYPASS\n"), Status.FAIL),  # no real PASS line
        (rec("p"), HEALTHY_LOG.replace("--- 11.18428111076355 seconds ---", ""), Status.FAIL),  # no runtime
        (rec("p", "Running", None), HEALTHY_LOG, Status.FAIL),  # never ended: stuck
        (rec("p"), None, Status.ERROR),  # log not collected: no evidence, never PASS
    ],
)
def test_single_pass_broken(record: WorkloadRecord, log: str | None, status: Status) -> None:
    ev = Evidence.from_parts([record], {} if log is None else {"p": log})
    assert judge.judge_single_pass(ev, TH, pod="p").status is status


def test_no_pod_record_is_not_a_pass() -> None:
    assert judge.judge_single_pass(Evidence.from_parts([], {}), TH, pod="p").status is not Status.PASS


def test_pair_on_one_gpu_overlapping_passes() -> None:
    ev = Evidence.from_parts(
        [rec("a", start=0, end=10), rec("b", start=1, end=11)], {"a": HEALTHY_LOG, "b": HEALTHY_LOG}
    )
    v = judge.judge_same_gpu_pair(ev, TH, pods=["a", "b"])
    assert v.status is Status.PASS and v.metrics["overlap_ratio"] == pytest.approx(0.9)


def test_pair_that_ran_one_after_the_other_fails() -> None:
    # Serialised (one pod starved until the other ended): both "succeeded" but never shared the GPU.
    ev = Evidence.from_parts(
        [rec("a", start=0, end=10), rec("b", start=10, end=20)], {"a": HEALTHY_LOG, "b": HEALTHY_LOG}
    )
    v = judge.judge_same_gpu_pair(ev, TH, pods=["a", "b"])
    assert v.status is Status.FAIL and "intervals_overlap" in v.summary


def test_pair_on_different_gpus_is_premise_error_never_pass_and_threshold_is_a_parameter() -> None:
    ev = Evidence.from_parts([rec("a", gpu="GPU-a"), rec("b", gpu="GPU-b")], {"a": HEALTHY_LOG, "b": HEALTHY_LOG})
    v = judge.judge_same_gpu_pair(ev, TH, pods=["a", "b"])
    assert v.status is Status.ERROR and v.summary.startswith("premise unmet: two-pods-one-gpu: co-location")
    partial = Evidence.from_parts(
        [rec("a", start=0, end=10), rec("b", start=6, end=16)], {"a": HEALTHY_LOG, "b": HEALTHY_LOG}
    )
    assert judge.judge_same_gpu_pair(partial, TH, pods=["a", "b"]).status is Status.FAIL  # overlap 0.4
    loose = {**TH, "func002_min_overlap_ratio": 0.3}
    assert judge.judge_same_gpu_pair(partial, loose, pods=["a", "b"]).status is Status.PASS


def test_pigeonhole_pods_the_sharing_pair_is_judged_and_every_pod_must_pass() -> None:
    pods = [
        rec("a", gpu="GPU-0", start=0, end=10),
        rec("b", gpu="GPU-1", start=0, end=5),
        rec("c", gpu="GPU-0", start=1, end=11),
    ]
    logs = dict.fromkeys("abc", HEALTHY_LOG)
    v = judge.judge_same_gpu_pair(Evidence.from_parts(pods, logs), TH, pods=["a", "b", "c"])
    assert v.status is Status.PASS and v.checks[-1].values["pair"] == ["a", "c"]
    failed_filler = [*pods[:1], rec("b", "Failed", 1, gpu="GPU-1"), pods[2]]
    v = judge.judge_same_gpu_pair(Evidence.from_parts(failed_filler, logs), TH, pods=["a", "b", "c"])
    assert v.status is Status.FAIL


def test_pair_without_times_is_error_not_pass() -> None:
    ev = Evidence.from_parts([rec("a", start=None), rec("b")], {"a": HEALTHY_LOG, "b": HEALTHY_LOG})
    assert judge.judge_same_gpu_pair(ev, TH, pods=["a", "b"]).status is Status.ERROR


def test_spread_over_gpus() -> None:
    names = [f"p{i}" for i in range(4)]
    logs = dict.fromkeys(names, HEALTHY_LOG)
    spread = [rec(n, gpu=f"GPU-{i % 2}") for i, n in enumerate(names)]
    assert judge.judge_spread(Evidence.from_parts(spread, logs), TH, pods=names, gpus_available=2).status is Status.PASS
    packed = [rec(n, gpu="GPU-0") for n in names]
    v = judge.judge_spread(Evidence.from_parts(packed, logs), TH, pods=names, gpus_available=2)
    assert v.status is Status.FAIL and "spread_over_gpus" in v.summary
    # One GPU only: the premise two-gpus did not hold, so the verdict says nothing of the spread: ERROR naming it.
    one = judge.judge_spread(Evidence.from_parts(packed, logs), TH, pods=names, gpus_available=1)
    assert one.status is Status.ERROR and one.summary == "premise unmet: two-gpus: the cluster had 1 GPU(s)"
    # Where the pods ran is not in the evidence (no registration, no recorded GPU): ERROR, not "all on one GPU".
    unplaced = [rec(n, gpu=None) for n in names]
    v = judge.judge_spread(Evidence.from_parts(unplaced, logs), TH, pods=names, gpus_available=2)
    assert v.status is Status.ERROR and "no GPU known" in v.summary, v.summary
    # The backend could not tell how many GPUs exist: the spread is unjudged, never a silent PASS.
    unknown = judge.judge_spread(Evidence.from_parts(packed, logs), TH, pods=names, gpus_available=None)
    assert unknown.status is Status.ERROR and unknown.summary.startswith("premise unmet: two-gpus: ")
    one_failed = [*spread[:3], rec("p3", "Failed", 1, gpu="GPU-1")]
    assert (
        judge.judge_spread(Evidence.from_parts(one_failed, logs), TH, pods=names, gpus_available=2).status
        is Status.FAIL
    )


@pytest.mark.parametrize("gpus", [0, 1, None])
def test_spread_without_two_gpus_is_never_pass(gpus: int | None) -> None:
    """Issue 35: on a machine without a GPU FUNC-003 PASSed "(no GPU: spread not applicable)"."""
    names = ["p0", "p1"]
    cpu = [rec(n, gpu=None) for n in names]
    v = judge.judge_spread(Evidence.from_parts(cpu, dict.fromkeys(names, HEALTHY_LOG)), TH, pods=names,
                           gpus_available=gpus)
    assert v.status is Status.ERROR and v.summary.startswith("premise unmet: two-gpus: ") \
        and "not applicable" not in v.summary


def test_pair_whose_gpu_is_in_no_evidence_is_never_pass() -> None:
    """Issue 35: FUNC-002 PASSed "(no GPU on the host: same-GPU placement not applicable)"."""
    ev = Evidence.from_parts([rec("a", gpu=None, start=0, end=10), rec("b", gpu=None, start=1, end=11)],
                             {"a": HEALTHY_LOG, "b": HEALTHY_LOG})
    v = judge.judge_same_gpu_pair(ev, TH, pods=["a", "b"], pair=["a", "b"])
    assert v.status is Status.ERROR and v.summary.startswith("premise unmet: two-pods-one-gpu: the GPU of a and b") \
        and "not applicable" not in v.summary


def test_rejection_healthy_and_broken() -> None:
    ok = Evidence.from_parts([rec("q", "Failed", 1)], {"q": REJECTED_LOG})
    assert judge.judge_rejected(ok, TH, pod="q").status is Status.PASS
    # The quota was not enforced: the pod ran to PASS although the startup line mentions a memory limit.
    not_enforced = Evidence.from_parts(
        [rec("q")], {"q": "[XPUSHARE][INFO]: GPU memory limit set to 1073741824 bytes\nPASS\n--- 3.1 seconds ---\n"}
    )
    v = judge.judge_rejected(not_enforced, TH, pod="q")
    assert v.status is Status.FAIL and "passed" in v.summary
    # A failure for another reason is not a quota rejection.
    other = Evidence.from_parts([rec("q", "Failed", 1)], {"q": "ImportError: no module named torch\n"})
    assert judge.judge_rejected(other, TH, pod="q").status is Status.FAIL


def test_oversub_on_with_and_without_scheduler_evidence() -> None:
    base = Evidence.from_parts([rec("o")], {"o": HEALTHY_LOG})
    assert judge.judge_oversub_on(base, TH, pod="o").status is Status.PASS
    dead = Evidence.from_parts([rec("o")], {"o": HEALTHY_LOG}, {"scheduler_proc.txt": "SCHEDULER_ALIVE=0\n"})
    assert judge.judge_oversub_on(dead, TH, pod="o").status is Status.FAIL
    oom = Evidence.from_parts([rec("o", "Failed", 1)], {"o": REJECTED_LOG})
    assert judge.judge_oversub_on(oom, TH, pod="o").status is Status.FAIL


# ------------------------------------------------------------------- FUNC-003 on real evidence, both modes
# tests/fixtures/evidence/: FUNC-003 case directories of lab runs on the real SUT (README.md there).

EVIDENCE = FIXTURES / "evidence"


def spread_case(tmp_path: Path, name: str) -> Path:
    """A stored run ``<tmp>/.tmplog/<name>/...`` holding one fixture's FUNC-003 case dir; returns the case dir."""
    src = EVIDENCE / name
    result = json.loads((src / "result.json").read_text())
    case = tmp_path / ".tmplog" / name / "xpushare" / result["cluster"] / "functional" / "FUNC-003"
    shutil.copytree(src, case)
    return case


def judge_stored_spread(case: Path, mode: str) -> Verdict:
    th = json.loads((case / "result.json").read_text())["thresholds"]
    return lifecycle.judge_case(REGISTRY["FUNC-003"], case, th, mode)


def spread_values(v: Verdict) -> dict[str, Any]:
    return next(c for c in v.checks if c.name == "spread_over_gpus").values


def test_k8s_spread_from_registrations_passes(tmp_path: Path) -> None:
    """Four pods over two nodes x two GPUs; pods.json holds no GPU (the harvest never maps)."""
    case = spread_case(tmp_path, "k8s-func003-spread")
    assert all(r["gpu"] is None for r in json_of(case / "pods.json"))
    v = judge_stored_spread(case, "k8s")
    assert v.status is Status.PASS, v.summary
    values = spread_values(v)
    assert values["gpus"] == ["lab-node1/GPU-lab-lab-node1-0", "lab-node1/GPU-lab-lab-node1-1",
                              "lab-node2/GPU-lab-lab-node2-0", "lab-node2/GPU-lab-lab-node2-1"]
    assert set(values["gpu_source"].values()) == {f"registration (pod default/func-003-w2-{i})" for i in range(1, 5)}
    assert "gpu_mapping.txt" in v.evidence
    # no node sampler in this fixture: nothing NVML says to compare (the last two columns)
    row = "func-003-w2-1\tlab-node1\tGPU-lab-lab-node1-0\t-\t-"
    assert (case / "gpu_mapping.txt").read_text().splitlines()[1] == row


def test_k8s_packing_device_plugin_fails_the_spread(tmp_path: Path) -> None:
    """A device plugin that packs: the real scheduler registered all four pods on GPU 0 of lab-node1."""
    v = judge_stored_spread(spread_case(tmp_path, "k8s-func003-packed"), "k8s")
    assert v.status is Status.FAIL and "all pods on one GPU" in v.summary, v.summary
    assert spread_values(v)["gpus"] == ["lab-node1/GPU-lab-lab-node1-0"]


def test_host_spread_judges_the_registrations_by_host_pid(tmp_path: Path) -> None:
    """One host, two GPUs: each process is found by its pid on the GPU key the scheduler registered."""
    case = spread_case(tmp_path, "host-func003-spread")
    v = judge_stored_spread(case, "host")
    assert v.status is Status.PASS, v.summary
    values = spread_values(v)
    pids = {r["name"]: r["host_pid"] for r in json_of(case / "pods.json")}
    assert values["gpus"] == ["hl-solo/0", "hl-solo/1"] and "not_registered" not in values
    assert all(values["gpu_source"][p].startswith(f"registration (host_pid {pid} and client_id ")
               for p, pid in pids.items())


def test_host_spread_fails_when_the_scheduler_put_every_client_on_one_gpu(tmp_path: Path) -> None:
    """The real H200 capture: two processes (pids 478, 479) both registered on GPU 0. The tool had placed
    them on GPUs 0 and 1: that placement is not what is judged, so the case FAILs."""
    (tmp_path / "pods").mkdir()
    records = []
    for i, (name, pid) in enumerate((("func-003-w2-1", 478), ("func-003-w2-2", 479))):
        records.append(WorkloadRecord(name, "Succeeded", 0, "localhost", f"GPU-placed-{i}", 100.0, 110.0,
                                 log=f"pods/{name}.log", host_pid=pid, gpu_key=str(i)))
        (tmp_path / "pods" / f"{name}.log").write_text(HEALTHY_LOG)
    (tmp_path / "pods.json").write_text(json.dumps([r.__dict__ for r in records]))
    (tmp_path / "scheduler.log").write_text((SAMPLES / "scheduler.log").read_text())
    ev = Evidence.load(tmp_path, "host")
    v = judge.judge_spread(ev, TH, pods=[r.name for r in records], gpus_available=2)
    assert v.status is Status.FAIL and "all pods on one GPU" in v.summary, v.summary
    assert spread_values(v)["gpus"] == ["localhost/0"]
    # Without the registrations only the tool's placement is left: counted, and the values say so.
    (tmp_path / "scheduler.log").unlink()
    v = judge.judge_spread(Evidence.load(tmp_path, "host"), TH, pods=[r.name for r in records], gpus_available=2)
    values = spread_values(v)
    assert v.status is Status.PASS and values["not_registered"] == ["func-003-w2-1", "func-003-w2-2"]
    assert "tool's placement" in values["fallback"] and "not registered" in v.summary


@pytest.mark.parametrize("name", ["k8s-func003-spread", "host-func003-spread"])
def test_invoke_judge_rederives_the_mapping_of_a_stored_run(tmp_path: Path, name: str) -> None:
    """``invoke judge --run-id`` after pods.json lost every GPU and gpu_mapping.txt is stale: the mapping is
    derived again from scheduler.log and written anew."""
    case = spread_case(tmp_path, name)
    recs = json_of(case / "pods.json")
    for r in recs:
        r["gpu"] = r["gpu_key"] = None
    (case / "pods.json").write_text(json.dumps(recs))
    (case / "gpu_mapping.txt").write_text("pod\tnode\tgpu_uuid\nstale\t-\t-\n")
    proc = run_tool([sys.executable, "-m", "invoke", "judge", "--run-id", name, "--root", str(tmp_path),
                     "--apply"], cwd=REPO_ROOT, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json_of(case / "result.json")
    assert result["status"] == "PASS" and "gpu_mapping.txt" in result["evidence"], result["summary"]
    rows = [ln.split("\t") for ln in (case / "gpu_mapping.txt").read_text().splitlines()[1:]]
    assert [r[0] for r in rows] == [r["name"] for r in recs] and all(r[2] != "-" for r in rows), rows
    assert len({(r[1], r[2]) for r in rows}) > 1


def json_of(path: Path) -> Any:
    return json.loads(path.read_text())


@pytest.mark.parametrize(("params", "gpus", "count"), [
    ({"func003_pods": None, "func003_pods_per_gpu": 1.5}, 8, 12),  # the seed's 12 pods for 8 cards
    ({"func003_pods": None, "func003_pods_per_gpu": 1.5}, 1, 2),  # one GPU: two pods share it
    ({"func003_pods": None, "func003_pods_per_gpu": 1.5}, 2, 3),  # two GPUs: spread, and one is shared
    ({"func003_pods": None, "func003_pods_per_gpu": 1.5}, None, 12),  # unknown: the seed's count
    ({"func003_pods": None, "func003_pods_per_gpu": 1.5}, 0, 2),  # a CPU node: two pods, minutes not on 2 cores
    ({"func003_pods": 4, "func003_pods_per_gpu": 1.5}, 8, 4),  # an explicit count wins
])
def test_func003_pod_count_follows_the_gpus(params: dict[str, Any], gpus: int | None, count: int) -> None:
    from xpushare.cases.functional import func003_pod_count

    assert func003_pod_count(params, gpus)[0] == count
