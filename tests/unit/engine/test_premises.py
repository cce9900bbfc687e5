"""Premises (issue 35): every case declares what its verdict rests on; one unmet before the act is SKIP naming it,
before any pod; a parameter value that makes a case vacuous is exit 2 before anything runs; `invoke cases`, the dry
run and docs/verdicts.md list the premises."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.backend import FakeBackend, FakePlacement
from tests.paths import REPO_ROOT
from tests.toolrun import run_tool
from xpushare.backends.base import CAP_ANNOTATIONS, CAP_CLIENT_LIBRARY, CAP_KUBERNETES, CAP_SCHEDULER_PROCESS
from xpushare.cases import REGISTRY, CaseDef
from xpushare.cases.base import register
from xpushare.cases.premise_table import premises_markdown
from xpushare.engine import lifecycle, suite_run
from xpushare.inventory.schema import ClusterSpec, HostSpec
from xpushare.model.errors import InventoryError, UsageError
from xpushare.model.premises import PREMISES, ClusterFacts, unmet_before

K8S_CAPS = frozenset({CAP_KUBERNETES, CAP_ANNOTATIONS, CAP_CLIENT_LIBRARY, CAP_SCHEDULER_PROCESS})


def counting(mode: str, capabilities: frozenset[str], gpus: int | None) -> FakeBackend:
    """A backend that knows its GPU count and records whether any case-level call happened (none may, on a SKIP)."""
    return FakeBackend.having(capabilities, mode=mode, placement=FakePlacement(gpus=gpus))


def k8s_cluster() -> ClusterSpec:
    return ClusterSpec("k", "k8s", "xpushare", "cuda", "Tesla T4", 16,
                       (HostSpec("m", ("master",), local=True), HostSpec("n1", ("gpu",), local=True)))


def host_cluster(sut_lib: str | None) -> ClusterSpec:
    return ClusterSpec("h", "host", "xpushare", "cuda", None, None, (HostSpec("localhost", ("gpu",), local=True),),
                       sut_lib=sut_lib)


def run(case_id: str, cluster: ClusterSpec, backend: FakeBackend, tmp_path: Path) -> tuple[str, str]:
    record, _ = lifecycle.run_case(REGISTRY[case_id], run_id="r", run_dir=tmp_path, cluster=cluster,
                                   backend=backend, params={}, required=True)
    return record.status, record.summary


def test_every_case_declares_known_premises_and_the_sut_judging_ones_need_the_sut() -> None:
    for case in REGISTRY.values():
        assert case.requires <= set(PREMISES), case.case_id
        if case.case_id not in ("MET-001", "MET-007"):  # no workload: their premise is the scheduler's /metrics
            assert {"sut", "gpu"} <= case.requires, case.case_id
    assert {"two-gpus"} <= REGISTRY["COMBO-008"].requires and {"two-gpus"} <= REGISTRY["PERF-010"].requires
    assert "two-pods-one-gpu" in REGISTRY["FUNC-002"].requires and "two-gpus" in REGISTRY["FUNC-003"].requires
    with pytest.raises(ValueError, match="unknown premise"):
        register(CaseDef("FUNC-999", "functional", "t", "", "", "", requires=frozenset({"a-gpu"})))


@pytest.mark.parametrize("case_id", ["COMBO-008", "PERF-010"])
def test_a_two_gpu_case_skips_on_one_gpu_before_any_pod(case_id: str, tmp_path: Path) -> None:
    """On one real GPU COMBO-008 FAILed ``distinct_gpus: all pods on one GPU``: a premise judged as a defect."""
    backend = counting("k8s", K8S_CAPS, gpus=1)
    status, summary = run(case_id, k8s_cluster(), backend, tmp_path)
    assert (status, summary) == ("SKIP", "premise unmet: two-gpus: this cluster has 1 GPU(s)")
    assert backend.calls == []
    two = counting("k8s", K8S_CAPS, gpus=2)
    assert lifecycle.skip_reason(REGISTRY[case_id], two.parts.capabilities, "k8s",
                                 lifecycle.cluster_facts(k8s_cluster(), two.parts.capabilities, 2)) is None


@pytest.mark.parametrize(("case_id", "premise"), [("FUNC-001", "gpu"), ("FUNC-002", "gpu"), ("FUNC-003", "gpu")])
def test_func_cases_without_a_gpu_skip_naming_it_never_pass(case_id: str, premise: str, tmp_path: Path) -> None:
    """Issue 35: on a machine without a GPU FUNC-002 and FUNC-003 PASSed as "not applicable"."""
    backend = counting("host", frozenset({CAP_CLIENT_LIBRARY}), gpus=0)
    status, summary = run(case_id, host_cluster("/opt/lib/libxpushare.so"), backend, tmp_path)
    assert status == "SKIP" and summary.startswith(f"premise unmet: {premise}: no GPU on this cluster")
    assert backend.calls == []


def test_func003_skips_on_one_gpu(tmp_path: Path) -> None:
    backend = counting("host", frozenset({CAP_CLIENT_LIBRARY}), gpus=1)
    assert run("FUNC-003", host_cluster("/lib.so"), backend, tmp_path) == (
        "SKIP", "premise unmet: two-gpus: this cluster has 1 GPU(s)")


def test_host_mode_without_sut_lib_skips_every_func_case_naming_the_sut(tmp_path: Path) -> None:
    for case_id in ("FUNC-001", "FUNC-002", "FUNC-003"):
        backend = counting("host", frozenset(), gpus=2)
        status, summary = run(case_id, host_cluster(None), backend, tmp_path / case_id)
        assert status == "SKIP" and summary.startswith("premise unmet: sut: host mode without the SUT's client")


@pytest.mark.parametrize("case_id", ["FUNC-004", "FUNC-005"])
def test_oversubscription_cases_skip_on_a_system_without_the_switch(case_id: str, tmp_path: Path) -> None:
    """MPS has no oversubscription switch: FUNC-004 would "PASS" on the card's own out-of-memory error, a verdict
    on nothing the system does. HAMi-core has one (CUDA_OVERSUBSCRIBE), so its FUNC-004/005 run."""
    mps = dataclasses.replace(host_cluster(None), sut="mps")
    backend = counting("host", frozenset({CAP_CLIENT_LIBRARY}), gpus=1)
    assert run(case_id, mps, backend, tmp_path) == (
        "SKIP", "premise unmet: oversubscription: sut mps has no switch to oversubscribe GPU memory")
    assert backend.calls == []
    hami = dataclasses.replace(host_cluster("/opt/hami/libvgpu.so"), sut="hami-core")
    caps = frozenset({CAP_CLIENT_LIBRARY})
    assert lifecycle.skip_reason(REGISTRY[case_id], caps, "host", lifecycle.cluster_facts(hami, caps, 1)) is None


@pytest.mark.parametrize("sut", ["mps", "hami-core"])
def test_the_time_to_enforce_a_quota_change_skips_in_host_mode_saying_why(sut: str) -> None:
    """PERF-007 times a running pod's quota change: in host mode every system reads its quotas at start."""
    cluster = dataclasses.replace(host_cluster("/opt/x.so"), sut=sut)
    caps = frozenset({CAP_CLIENT_LIBRARY})
    why = lifecycle.skip_reason(REGISTRY["PERF-007"], caps, "host", lifecycle.cluster_facts(cluster, caps, 1))
    assert why is not None and why.startswith("premise unmet: annotations: needs Kubernetes (this cluster runs in "
                                              f"host mode: sut {sut} takes a workload's quotas from its environment")
    assert "a running workload's quota cannot be changed, so there is no change to time" in why


def test_unknown_gpu_count_is_left_to_the_evidence() -> None:
    facts = ClusterFacts(capabilities=frozenset(), kubernetes=True, gpu_count=None)
    assert unmet_before({"gpu", "two-gpus", "sut"}, facts) is None
    assert unmet_before({"tenant-namespaces"}, ClusterFacts(frozenset(), kubernetes=False)) == (
        "tenant-namespaces", "needs Kubernetes (this cluster runs in host mode)")


@pytest.mark.parametrize("value", ["0", "-1", "abc"])
def test_a_vacuous_pod_count_is_a_usage_error_before_anything_runs(value: str, tmp_path: Path) -> None:
    request = suite_run.RunRequest(cluster="local", case_ids=["FUNC-003"], overrides=[f"func003_pods={value}"],
                                root=tmp_path)
    with pytest.raises(UsageError, match="func003_pods"):
        suite_run.run(request)
    assert not (tmp_path / ".tmplog").exists()


@pytest.mark.parametrize(("setting", "words"), [
    ("met007_duration_s=0", "time window of 0 s"),
    ("combo002_cores=[]", "empty list"),
    ("perf008_pods_per_gpu=0", "pods per GPU"),
])
def test_other_vacuous_values_are_usage_errors(setting: str, words: str, tmp_path: Path) -> None:
    request = suite_run.RunRequest(cluster="local", suites=["met", "combo", "perf"], overrides=[setting], root=tmp_path,
                                dry_run=True)
    with pytest.raises(UsageError, match=words):
        suite_run.run(request)


def test_vacuous_values_in_the_inventory_and_a_playbook_are_refused(tmp_path: Path) -> None:
    inv = tmp_path / "inv.yaml"
    inv.write_text("clusters:\n  h:\n    mode: host\n    params: {func003_pods: 0}\n"
                   "    hosts:\n      me: {connection: local, roles: [gpu]}\n")
    with pytest.raises(InventoryError, match=r"params\.func003_pods: bad value 0: makes the case vacuous"):
        suite_run.run(suite_run.RunRequest(cluster="h", case_ids=["FUNC-003"], inventory_path=str(inv), root=tmp_path))
    book = tmp_path / "book.yaml"
    book.write_text("cases: [FUNC-003]\nparams: {func003_pods: 0}\n")
    with pytest.raises(UsageError, match=r"playbook .*func003_pods=0: makes the case vacuous"):
        suite_run.run(suite_run.RunRequest(cluster="local", playbook=str(book), root=tmp_path))


def invoke(*args: str) -> subprocess.CompletedProcess[str]:
    return run_tool([sys.executable, "-m", "invoke", *args], cwd=REPO_ROOT, timeout=120)


def test_invoke_cases_and_the_dry_run_show_the_premises(tmp_path: Path) -> None:
    table = invoke("cases", "--suite", "func")
    assert table.returncode == 0 and "premises" in table.stdout.splitlines()[0]
    assert any(line.startswith("FUNC-002") and "sut,gpu,two-pods-one-gpu" in line for line in table.stdout.splitlines())
    records = {r["case"]: r for r in json.loads(invoke("cases", "--suite", "combo", "-o", "json").stdout)}
    assert records["COMBO-008"]["premises"] == ["kubernetes", "sut", "gpu", "two-gpus", "annotations"]
    plan = json.loads(invoke("func", "--cluster", "local", "--case", "FUNC-001,FUNC-009", "--dry-run", "-o", "json",
                             "--root", str(tmp_path)).stdout)
    by_id = {c["case_id"]: c for c in plan["cases"]}
    assert by_id["FUNC-001"]["premises"] == ["sut", "gpu"] and by_id["FUNC-001"]["premises_unmet"] == ["sut"]
    assert by_id["FUNC-001"]["skip_reason"].startswith("premise unmet: sut: ")
    assert by_id["FUNC-009"]["premises_unmet"] == ["kubernetes", "sut", "annotations"]


def test_the_cli_refuses_func003_pods_0_with_exit_2(tmp_path: Path) -> None:
    proc = invoke("func", "--cluster", "local", "--case", "FUNC-003", "--set", "func003_pods=0",
                  "--root", str(tmp_path))
    assert proc.returncode == 2 and proc.stderr.startswith("error: bad --set func003_pods=0: makes the case vacuous")
    assert "Traceback" not in proc.stderr and not (tmp_path / ".tmplog").exists()


def test_docs_verdicts_has_the_premises_table_of_the_registry() -> None:
    text = (REPO_ROOT / "docs" / "verdicts.md").read_text(encoding="utf-8")
    assert premises_markdown() in text, "regenerate: python -m tests.lab.matrix --write docs/verdicts.md"
