"""envcheck: pure parsers and judgments, fleet majority and report, parameters, nominal table, manifests.

Healthy and broken inputs side by side: every judgment here can fail.
"""

from __future__ import annotations

import copy
import io
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from xpushare.envcheck import checks, context, fleet, k8s_mode, manifests
from xpushare.envcheck.nominal import lookup
from xpushare.envcheck.params import SMOKE_DEFAULTS, resolve_params
from xpushare.evidence import gpu_health
from xpushare.inventory.schema import local_cluster
from xpushare.model.errors import UsageError
from xpushare.model.exit_status import ExitStatus
from xpushare.model.overrides import parse_overrides
from xpushare.model.verdict import Status, Verdict

MIB = 1 << 20
TOPO_NV = ("\x1b[4m\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
           "GPU0\t X \tNV18\t0-31\t0\t\tN/A\nGPU1\tNV18\t X \t0-31\t0\t\tN/A\n\nLegend:\n  X    = Self\n")
TOPO_SYS = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tSYS\t0-15\nGPU1\tSYS\t X \t16-31\n"


def stack_doc(*, driver: str = "580.159.04", gpus: int = 2, cuda: bool = True, env: dict[str, str] | None = None,
              name: str = "NVIDIA H200", topo: str | None = TOPO_NV) -> dict[str, Any]:
    """A stack document as stack_probe.py prints it, for a node with ``gpus`` GPUs."""
    gpu_rows = [{"index": i, "name": name, "uuid": f"GPU-{i}", "memory_mib": 143771, "pci_bus_id": f"0:{i}"}
                for i in range(gpus)]
    return {
        "schema": "xpushare.envcheck.stack/1", "node": "n", "hostname": "n", "kernel": "6.8.0", "os": "Ubuntu 24.04",
        "python": {"version": "3.12.3", "executable": "/usr/bin/python3"},
        "nvidia_smi": {"path": "/usr/bin/nvidia-smi" if gpus else None, "driver_version": driver if gpus else None,
                       "cuda_driver_version": "13.0" if gpus else None, "gpus": gpu_rows,
                       "topology": topo if gpus > 1 else None},
        "torch": {"version": "2.11.0+cu130", "cuda": "13.0", "cudnn": 91900, "nccl": "2.28.9", "cuda_available": cuda,
                  "device_count": gpus if cuda else 0, "devices": []},
        "packages": {"sglang": "0.5.7", "torch": "2.11.0"},
        "pip_freeze": {"source": "pip", "count": 2, "sha256": "abc", "lines": ["sglang==0.5.7", "torch==2.11.0"]},
        "nccl_env": env if env is not None else {"NCCL_NVLS_ENABLE": "0"},
        "visible_devices": {}, "errors": [],
    }


def cublas_doc(tflops: tuple[float, ...] = (790.0, 780.0), ok: bool = True, device: str = "cuda") -> dict[str, Any]:
    return {"schema": "xpushare.envcheck.cublas/1", "device": device, "dtype": "bf16", "n": 8192, "skipped": None,
            "errors": [], "gpus": [{"index": i, "name": "NVIDIA H200", "tflops": t, "ms_per_iter": 1.4,
                                    "max_rel_err": 0.003 if ok else 0.5, "ok": ok} for i, t in enumerate(tflops)]}


SIZES = checks.expected_sizes(8 * MIB, 1024 * MIB)


def nccl_doc(peak: float = 330.0, *, wrong: int | None = None, drop: int | None = None,
             backend: str = "nccl") -> dict[str, Any]:
    rows = [{"bytes": s, "count": s // 4, "time_us": 1.0, "algbw_gbps": peak * (i + 1) / len(SIZES),
             "busbw_gbps": peak * (i + 1) / len(SIZES), "ok": i != wrong} for i, s in enumerate(SIZES) if i != drop]
    return {"schema": "xpushare.envcheck.nccl/1", "backend": backend, "world_size": 2, "nnodes": 1, "sizes": rows,
            "errors": [], "ok": wrong is None}


# ---------------------------------------------------------------------------------------------- blocks


def block(step: str, doc: Any) -> str:
    return f"noise\n{checks.BEGIN} {step}\n{json.dumps(doc, indent=1)}\n{checks.END} {step}\n"


def test_extract_block_takes_the_last_block_and_ignores_noise() -> None:
    text = (block("stack", {"a": 1}) + "[stack] warning\n" + block("stack", {"a": 2})
            + "@@xpushare-envcheck-exit stack 0 1.5\n")
    assert checks.extract_block(text, "stack") == {"a": 2}
    assert checks.exit_codes(text) == {"stack": 0}


@pytest.mark.parametrize(("text", "reason"), [
    ("nothing here\n", "no 'nccl' result"),
    (f"{checks.BEGIN} nccl\n{{\"a\": 1\n", "cut off"),
    (f"{checks.BEGIN} nccl\n{{not json\n{checks.END} nccl\n", "not JSON"),
    (f"{checks.BEGIN} nccl\n[1, 2]\n{checks.END} nccl\n", "not a JSON object"),
])
def test_extract_block_rejects_broken_output(text: str, reason: str) -> None:
    with pytest.raises(checks.BlockError, match=reason):
        checks.extract_block(text, "nccl")
    doc, error = checks.try_block(text, "nccl")
    assert doc is None and error is not None and reason in error


def test_exit_codes_ignore_malformed_lines() -> None:
    text = "@@xpushare-envcheck-exit cublas 1 2.0\n@@xpushare-envcheck-exit nccl x 1\n@@xpushare-envcheck-exit\n"
    assert checks.exit_codes(text) == {"cublas": 1}


# ---------------------------------------------------------------------------------------------- stack


def test_stack_values_flatten_the_alignment_keys() -> None:
    values = checks.stack_values(stack_doc())
    assert list(values) == list(checks.ALIGN_KEYS)
    assert values["driver_version"] == "580.159.04" and values["gpu_count"] == "2"
    assert values["gpu_model"] == "NVIDIA H200" and values["nccl_env"] == "NCCL_NVLS_ENABLE=0"
    assert values["sglang_version"] == "0.5.7" and values["cuda_available"] == "true"
    empty = checks.stack_values(stack_doc(gpus=0, cuda=False, env={}))
    assert empty["gpu_model"] == "(no GPU)" and empty["driver_version"] == checks.ABSENT
    assert empty["nccl_env"] == "(none)"
    mixed = stack_doc()
    mixed["nvidia_smi"]["gpus"][1]["name"] = "NVIDIA H100"
    assert checks.stack_values(mixed)["gpu_model"] == "NVIDIA H100; NVIDIA H200"


def test_judge_stack_pass_deviation_and_unusable_cuda() -> None:
    assert checks.judge_stack(stack_doc(), {}).status is Status.PASS
    dev = checks.judge_stack(stack_doc(), {"driver_version": ("550.1", "580.159.04")})
    assert dev.status is Status.FAIL and "driver_version" in dev.summary
    broken = checks.judge_stack(stack_doc(cuda=False), {})
    assert broken.status is Status.FAIL and "cuda_usable" in broken.summary
    missing = checks.judge_stack(None, {}, error="no 'stack' result")
    assert missing.status is Status.ERROR and "no 'stack' result" in missing.summary
    # issue 35: a node without nvidia-smi misses a prerequisite: ERROR naming it, never PASS
    no_gpu = checks.judge_stack(stack_doc(gpus=0, cuda=False), {})
    assert no_gpu.status is Status.ERROR and no_gpu.summary == f"nvidia_smi: {checks.NVIDIA_SMI_MISSING}"
    smoke = checks.judge_stack(stack_doc(gpus=0, cuda=False), {}, require_nvidia_smi=False)  # the CPU smoke test
    assert smoke.status is Status.PASS


def test_gpu_plan_skip_fail_error_and_run() -> None:
    assert checks.gpu_plan(stack_doc(), skip_gpu=False, cpu_smoke=False) == checks.GpuPlan(True, 2, "cuda")
    skip = checks.gpu_plan(stack_doc(), skip_gpu=True, cpu_smoke=False)
    assert (skip.run, skip.status, skip.reason) == (False, Status.SKIP, "--skip-gpu given")
    none = checks.gpu_plan(stack_doc(gpus=0, cuda=False), skip_gpu=False, cpu_smoke=False)
    assert none.status is Status.SKIP and "nvidia-smi not found" in none.reason
    broken = checks.gpu_plan(stack_doc(cuda=False), skip_gpu=False, cpu_smoke=False)
    assert broken.status is Status.FAIL and "2 GPU(s)" in broken.reason
    assert checks.gpu_plan(None, skip_gpu=False, cpu_smoke=False).status is Status.ERROR
    assert checks.gpu_plan(stack_doc(gpus=0, cuda=False), skip_gpu=False, cpu_smoke=True, smoke_procs=3) == \
        checks.GpuPlan(True, 3, "cpu")


def test_topology_links() -> None:
    assert checks.topology_links(TOPO_NV) == ["NV18"]
    assert checks.topology_links(TOPO_SYS) == ["SYS"]
    assert checks.topology_links(None) == [] and checks.topology_links("garbage") == []


# ---------------------------------------------------------------------------------------------- cuBLAS and NCCL


def judge_cublas(doc: dict[str, Any] | None, exit_code: int | None = 0) -> Verdict:
    return checks.judge_cublas(doc, exit_code=exit_code, nominal_tflops=989.5, nominal_source="t", min_pct=70.0,
                               error="boom")


def test_judge_cublas_pass_and_percentages() -> None:
    v = judge_cublas(cublas_doc())
    assert v.status is Status.PASS
    assert v.metrics["tflops"] == {"0": 790.0, "1": 780.0} and v.metrics["pct_of_nominal"]["0"] == 79.8
    assert v.metrics["min_tflops"] == 780.0


@pytest.mark.parametrize(("doc", "exit_code", "status", "words"), [
    (cublas_doc((790.0, 600.0)), 0, Status.FAIL, "gpu1_tflops"),
    (cublas_doc(ok=False), 1, Status.FAIL, "max relative error"),
    (None, None, Status.ERROR, "boom"),
    ({**cublas_doc(), "skipped": "no CUDA device"}, 0, Status.SKIP, "no CUDA device"),
    (cublas_doc(), 1, Status.FAIL, "exit code 1"),
])
def test_judge_cublas_broken(doc: dict[str, Any] | None, exit_code: int | None, status: Status, words: str) -> None:
    v = judge_cublas(doc, exit_code)
    assert v.status is status and words in v.summary


def test_a_busy_gpu_is_error_never_a_hardware_fail() -> None:
    """The H100 case: four leftover workloads on the GPU, 141.1 TFLOP/s = 14.3 % of nominal: ERROR, not FAIL."""
    doc = cublas_doc((141.1, 780.0))
    leftovers = [{"pid": 4100 + k, "name": "python3", "used_mib": 610} for k in range(4)]
    doc["gpus"][0]["others_before"] = leftovers
    doc["gpus"][0]["others_after"] = leftovers[:3]
    doc["gpus"][1]["others_before"] = doc["gpus"][1]["others_after"] = []
    v = judge_cublas(doc)
    assert v.status is Status.ERROR and "GPU busy: pid 4100 python3 (610 MiB)" in v.summary, v.summary
    assert not any(c.name == "gpu0_tflops" for c in v.checks) and "0" not in v.metrics["pct_of_nominal"]
    # the idle GPU is still judged: a slow idle GPU FAILs whatever its busy neighbour did
    doc["gpus"][1]["tflops"] = 300.0
    assert judge_cublas(doc).status is Status.FAIL


def test_the_node_script_lists_the_other_processes_of_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util
    import subprocess

    from xpushare.data import workloads_dir

    spec = importlib.util.spec_from_file_location("cublas_bf16", workloads_dir() / "envcheck" / "cublas_bf16.py")
    assert spec and spec.loader
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    smi = ("GPU-aaa, 4101, python3, 610\nGPU-bbb, 4102, python3, 700\n"
           f"GPU-aaa, {os.getpid()}, python3, 900\n")
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, smi, ""))
    assert script.other_processes("GPU-aaa") == [{"pid": 4101, "name": "python3", "used_mib": 610}]
    assert script.other_processes(None) is None


def test_judge_cublas_cpu_and_unknown_model_are_not_judged_against_a_nominal() -> None:
    cpu = checks.judge_cublas(cublas_doc((0.01,), device="cpu"), exit_code=0, nominal_tflops=989.5,
                              nominal_source="t", min_pct=70)
    assert cpu.status is Status.PASS and "CPU smoke" in cpu.summary and not cpu.metrics["pct_of_nominal"]
    unknown = checks.judge_cublas(cublas_doc((50.0,)), exit_code=0, nominal_tflops=None, nominal_source="-",
                                  min_pct=70)
    assert unknown.status is Status.PASS and "not judged" in unknown.summary


def judge_nccl(doc: dict[str, Any] | None, links: tuple[str, ...] = ("NV18",), exit_code: int | None = 0) -> Verdict:
    return checks.judge_nccl(doc, exit_code=exit_code, sizes=SIZES, nominal_busbw=450.0, min_pct=60.0,
                             links=links, error="no log")


def test_judge_nccl_pass() -> None:
    v = judge_nccl(nccl_doc(330.0))
    assert v.status is Status.PASS and v.metrics["peak_busbw_gbps"] == 330.0
    assert list(v.metrics["busbw_gbps"]) == ["8 MiB", "16 MiB", "32 MiB", "64 MiB", "128 MiB", "256 MiB", "512 MiB",
                                             "1 GiB"]


@pytest.mark.parametrize(("doc", "links", "words"), [
    (nccl_doc(330.0, wrong=3), ("NV18",), "wrong sums at 64 MiB"),
    (nccl_doc(330.0, drop=7), ("NV18",), "not measured: 1 GiB"),
    (nccl_doc(40.0), ("SYS",), "not NVLink-connected"),
    ({**nccl_doc(), "errors": ["DistBackendError: NCCL error"]}, ("NV18",), "NCCL error"),
])
def test_judge_nccl_broken(doc: dict[str, Any], links: tuple[str, ...], words: str) -> None:
    v = judge_nccl(doc, links)
    assert v.status is Status.FAIL and words in v.summary


def test_judge_nccl_missing_and_gloo() -> None:
    assert judge_nccl(None).status is Status.ERROR
    gloo = judge_nccl(nccl_doc(0.3, backend="gloo"))
    assert gloo.status is Status.PASS and "CPU smoke" in gloo.summary
    assert judge_nccl(nccl_doc(330.0), exit_code=1).status is Status.FAIL


def test_size_labels_and_sizes() -> None:
    assert checks.expected_sizes(8 * MIB, 64 * MIB) == [8 * MIB, 16 * MIB, 32 * MIB, 64 * MIB]
    assert [checks.size_label(n) for n in (1 << 30, 8 * MIB, 64 * 1024, 100)] == ["1 GiB", "8 MiB", "64 KiB", "100 B"]


# ---------------------------------------------------------------------------------------------- nominal


@pytest.mark.parametrize(("name", "key"), [
    ("NVIDIA H200", "H200"), ("NVIDIA H200 NVL", "H200 NVL"), ("NVIDIA H100 80GB HBM3", "H100 SXM"),
    ("NVIDIA H100 PCIe", "H100 PCIe"), ("NVIDIA A800-SXM4-80GB", "A800 SXM"), ("NVIDIA A800 40GB Active", "A800 PCIe"),
    ("NVIDIA L40S", "L40S"), ("Tesla T4", None), (None, None),
])
def test_nominal_lookup(name: str | None, key: str | None) -> None:
    entry = lookup(name)
    assert (entry.key if entry else None) == key


# ---------------------------------------------------------------------------------------------- fleet


def test_majority_deviation_and_ties() -> None:
    table = fleet.majority({"a": {"driver_version": "580"}, "b": {"driver_version": "580"},
                            "c": {"driver_version": "550"}}, ["driver_version"])
    m = table["driver_version"]
    assert (m.value, m.count, m.total, m.tied, dict(m.deviating)) == ("580", 2, 3, False, {"c": "550"})
    tie = fleet.majority({"b": {"k": "2"}, "a": {"k": "1"}}, ["k"])["k"]
    assert tie.tied and tie.value == "1" and dict(tie.deviating) == {"b": "2"}
    assert fleet.deviations_of("c", table) == {"driver_version": ("550", "580")}
    assert fleet.deviations_of("c", table, ignore=["driver_version"]) == {}


def ctx_for(tmp_path: Path, **params: Any) -> context.RunContext:
    return context.RunContext(local_cluster(), resolve_params({}, params), run_id="unit", root=tmp_path,
                             mode="ssh", skip_gpu=False, out=io.StringIO())


def raw_node(name: str, doc: dict[str, Any], *, cublas: dict[str, Any] | None = None,
             nccl: dict[str, Any] | None = None) -> context.NodeRaw:
    plan = checks.gpu_plan(doc, skip_gpu=False, cpu_smoke=False)
    return context.NodeRaw(name, stack=context.StepRaw(doc, None, 0), plan=plan,
                          cublas=context.StepRaw(cublas or cublas_doc(), None, 0),
                          nccl=context.StepRaw(nccl or nccl_doc(), None, 0))


def test_fleet_report_names_the_deviating_node_and_fails_it(tmp_path: Path) -> None:
    ctx = ctx_for(tmp_path)
    odd = stack_doc(driver="550.54.15", env={"NCCL_NVLS_ENABLE": "0", "NCCL_IB_HCA": "mlx5_0"})
    raws = [raw_node("gpu1", stack_doc()), raw_node("gpu2", stack_doc()), raw_node("gpu3", odd),
            context.NodeRaw("gpu4", error="cannot connect to 10.0.0.4 after 3 attempt(s)", unreachable=True,
                            why="timeout")]
    status = context.finish(ctx, raws, Verdict(Status.PASS, "cross ok"))
    assert status is ExitStatus.UNREACHABLE
    report = json.loads((ctx.base / "fleet.json").read_text())
    by_node = {n["node"]: n for n in report["nodes"]}
    assert [by_node[n]["status"] for n in ("gpu1", "gpu2", "gpu3", "gpu4")] == ["PASS", "PASS", "FAIL", "UNREACHABLE"]
    assert by_node["gpu4"]["why"] == "timeout" and report["counts"] == {"PASS": 2, "FAIL": 1, "UNREACHABLE": 1}
    assert report["deviating_nodes"] == {"gpu3": ["driver_version", "nccl_env"]}
    assert report["majority"]["driver_version"]["value"] == "580.159.04"
    md = (ctx.base / "fleet-report.md").read_text()
    assert "- `gpu3`: driver_version, nccl_env" in md
    assert "| gpu4 | UNREACHABLE |" in md and "UNREACHABLE (timeout): cannot connect to 10.0.0.4" in md
    assert (ctx.base / "local" / "gpu3" / "verdict.json").exists()


def test_k8s_mode_with_a_master_that_does_not_answer_writes_the_fleet_report(tmp_path: Path) -> None:
    """Before: one line (the connection error), exit 3, no fleet report."""
    import socket

    from xpushare.envcheck import envcheck_task
    from xpushare.inventory import schema

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    spec = schema.parse("defaults: {ssh: {connect_timeout: 2, connect_retries: 1, host_key_policy: ignore}}\n"
                        "clusters:\n  k:\n    mode: k8s\n    hosts:\n"
                        f"      km: {{address: 127.0.0.1, port: {port}, roles: [master]}}\n").cluster("k")
    out = io.StringIO()
    status = envcheck_task("k", mode="k8s", run_id="km", root=tmp_path, out=out, cluster_spec=spec)
    assert status is ExitStatus.UNREACHABLE, out.getvalue()
    report = json.loads((tmp_path / ".tmplog" / "km" / "envcheck" / "fleet.json").read_text())
    assert [(n["node"], n["status"], n["why"]) for n in report["nodes"]] == [("km", "UNREACHABLE", "refused")]
    assert report["notes"] == ["the master km did not answer: no node was checked"]


def test_fleet_all_healthy_is_ok_and_broken_gpu_fails(tmp_path: Path) -> None:
    ctx = ctx_for(tmp_path)
    assert context.finish(ctx, [raw_node("a", stack_doc()), raw_node("b", stack_doc())], None) is ExitStatus.OK
    slow = raw_node("b", stack_doc(), cublas=cublas_doc((790.0, 300.0)))
    status = context.finish(ctx_for(tmp_path / "2"), [raw_node("a", stack_doc()), slow], None)
    assert status is ExitStatus.FAILED


def test_one_gpu_node_skips_the_intra_node_all_reduce(tmp_path: Path) -> None:
    nodes, _ = context.judge_nodes(ctx_for(tmp_path), [raw_node("a", stack_doc(gpus=1), cublas=cublas_doc((790.0,)))])
    assert nodes[0].steps["nccl"].status is Status.SKIP and nodes[0].status is Status.PASS


def test_cublas_switched_off_is_skip(tmp_path: Path) -> None:
    raw = raw_node("a", stack_doc())
    raw.cublas = None
    nodes, _ = context.judge_nodes(ctx_for(tmp_path, envcheck_cublas=False), [raw])
    assert nodes[0].steps["cublas"].status is Status.SKIP and nodes[0].status is Status.PASS
    nodes, _ = context.judge_nodes(ctx_for(tmp_path / "on"), [raw])
    assert nodes[0].steps["cublas"].status is Status.ERROR  # switched on but no result


def test_cross_node_failure_fails_the_fleet(tmp_path: Path) -> None:
    status = context.finish(ctx_for(tmp_path), [raw_node("a", stack_doc())], Verdict(Status.FAIL, "wrong sums"))
    assert status is ExitStatus.FAILED


def test_markdown_escapes_pipes() -> None:
    assert fleet._table(["a"], [["x|y"]]).splitlines()[-1] == "| x\\|y |"


# ---------------------------------------------------------------------------------------------- parameters


def test_params_from_inventory_and_set() -> None:
    p = resolve_params({"envcheck_cublas_min_pct": 80, "other_case_param": 1},
                              parse_overrides(["envcheck_ignore_keys=[kernel]", "envcheck_cross_node=false"]))
    assert p.cublas_min_pct == 80.0 and p.ignore_keys == ("kernel",) and p.cross_node is False
    smoke = resolve_params({}, {"envcheck_cpu_smoke": True, "envcheck_cublas_n": 64})
    assert smoke.cublas_n == 64 and smoke.nccl_max_bytes == SMOKE_DEFAULTS["nccl_max_bytes"]


@pytest.mark.parametrize(("cluster_params", "overrides", "words"), [
    ({}, {"envcheck_nope": 1}, "unknown envcheck parameter"),
    ({"envcheck_typo": 1}, {}, "inventory params"),
    ({}, {"func002_min_overlap_ratio": 1}, "envcheck parameters start with envcheck_"),
    ({}, {"envcheck_cublas_n": "big"}, "bad value"),
    ({}, {"envcheck_cross_node": "maybe"}, "bad value"),
    ({}, {"envcheck_scripts": "nfs"}, "not one of"),
    ({}, {"envcheck_nccl_min_bytes": 10, "envcheck_nccl_max_bytes": 4}, "min_bytes"),
])
def test_params_reject_bad_input(cluster_params: dict[str, Any], overrides: dict[str, Any], words: str) -> None:
    with pytest.raises(UsageError, match=words):
        resolve_params(cluster_params, overrides)


def test_bad_set_syntax() -> None:
    with pytest.raises(UsageError, match="expected name=value"):
        parse_overrides(["envcheck_cublas_n"])


# ---------------------------------------------------------------------------------------------- manifests


def test_manifests_render_structurally() -> None:
    settings = manifests.K8sSettings(image="registry.local/sglang:v0.5.7", node_selector={"gpu": "true"})
    ds = manifests.render_stack_daemonset("20261121-150000", settings, probe_args=["--freeze-source", "pip"],
                                          nodes=["node-a"])
    assert ds["kind"] == "DaemonSet" and ds["metadata"]["name"] == "xpushare-envcheck-stack-20261121-150000"
    labels = ds["spec"]["template"]["metadata"]["labels"]
    assert ds["spec"]["selector"]["matchLabels"] == labels and labels[manifests.LABEL_RUN] == "20261121-150000"
    spec = ds["spec"]["template"]["spec"]
    container = spec["containers"][0]
    assert container["command"] == ["python3", "workloads/envcheck/node_steps.py", "--stack", "--freeze-source pip",
                                    "--hold"]
    assert container["image"] == "registry.local/sglang:v0.5.7" and spec["nodeSelector"] == {"gpu": "true"}
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms[0]["matchFields"][0]["values"] == ["node-a"]
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"} in container["env"]
    assert container["volumeMounts"][-1]["mountPath"] == "/xpushare/workloads/envcheck"
    pod = manifests.render_step_pod("r1", "gpu", "Node_A.example", settings, steps_args=["--cublas", ""], gpus=8)
    assert pod["spec"]["nodeName"] == "Node_A.example" and pod["spec"]["restartPolicy"] == "Never"
    assert pod["metadata"]["name"] == "xpushare-envcheck-gpu-r1-node-a-example"
    assert pod["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": 8}}
    assert "hostNetwork" not in pod["spec"]
    cross = manifests.render_step_pod("r1", "cross", "n", manifests.K8sSettings(scripts="image"),
                                      steps_args=[], gpus=0, host_network=True)
    assert cross["spec"]["hostNetwork"] is True and cross["spec"]["containers"][0]["resources"] == {}
    assert all(v["name"] != "envcheck-scripts" for v in cross["spec"]["volumes"])
    job = manifests.wrap_job(pod)
    assert job["kind"] == "Job" and job["spec"]["backoffLimit"] == 0
    assert job["spec"]["template"]["spec"]["nodeName"] == "Node_A.example"
    cm = manifests.render_scripts_configmap("r1")
    assert set(cm["data"]) == set(manifests.SCRIPT_NAMES) and "def main" in cm["data"]["node_steps.py"]
    docs = list(yaml.safe_load_all(manifests.to_yaml([cm, ds, pod])))
    assert [d["kind"] for d in docs] == ["ConfigMap", "DaemonSet", "Pod"]
    assert docs[1] == ds


def test_names_and_labels_stay_valid() -> None:
    long = manifests.dns_name("xpushare-envcheck-gpu", "r" * 40, "node" * 10)
    assert len(long) == 63 and long[-9] == "-" and long == manifests.dns_name("xpushare-envcheck-gpu", "r" * 40,
                                                                               "node" * 10)
    assert manifests.dns_name("A_b..c") == "a-b-c"
    assert manifests.label_value("-a/b:c-") == "a-b-c" and len(manifests.label_value("x" * 80)) == 63
    assert manifests.selector("r1", "gpu") == ("app.kubernetes.io/name=xpushare-envcheck,xpushare.io/envcheck-run=r1,"
                                               "app.kubernetes.io/component=gpu")


def test_node_filter() -> None:
    names = ["gpu1", "gpu2", "gpu3", "cpu1"]
    assert k8s_mode.node_filter(names, None) == names
    assert k8s_mode.node_filter(names, "gpu*,!gpu2") == ["gpu1", "gpu3"]


def test_deepcopy_of_docs_is_not_mutated_by_judging() -> None:
    doc = stack_doc()
    before = copy.deepcopy(doc)
    checks.judge_stack(doc, {})
    checks.stack_values(doc)
    assert doc == before


# ---------------------------------------------------------------------------------------------- health in pods


def test_the_stack_daemonset_runs_the_health_capture_after_the_stack_probe() -> None:
    argv = gpu_health.capture_argv(env={"SIMGPU_KMSG": "/lab/{node}/kmsg"})
    ds = manifests.render_stack_daemonset("r1", manifests.K8sSettings(), health_argv=argv)
    command = ds["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[:4] == ["python3", "workloads/envcheck/node_steps.py", "--stack", ""]
    assert command[4] == "--health" and shlex.split(command[5]) == argv and command[6:] == ["--hold"]


def test_node_steps_prints_the_health_capture_as_a_block_with_the_node_filled_in(tmp_path: Path) -> None:
    script = manifests.SCRIPTS_DIR / "node_steps.py"
    env = {**os.environ, "XPUSHARE_ENVCHECK_NODE": "gpu-7"}
    health = shlex.join(["sh", "-c", 'printf "# xpushare gpu health\\nnode=%s\\n" "$1"; echo oops >&2', "sh",
                         "{node}"])
    proc = subprocess.run([sys.executable, str(script), "--health", health], capture_output=True, text=True,
                          env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert checks.extract_block(proc.stdout, "health") == {"capture": "# xpushare gpu health\nnode=gpu-7\n"}
    assert checks.exit_codes(proc.stdout) == {"health": 0} and "[health] oops" in proc.stdout
    failed = subprocess.run([sys.executable, str(script), "--health", "sh -c 'exit 3'"], capture_output=True,
                            text=True, env=env, timeout=60)
    assert checks.exit_codes(failed.stdout) == {"health": 3} and "@@xpushare-envcheck-begin" not in failed.stdout


def test_k8s_health_step_from_the_stack_pod_log(tmp_path: Path) -> None:
    ctx = context.RunContext(local_cluster(), resolve_params({}, {}), run_id="h1", root=tmp_path, mode="k8s",
                             skip_gpu=True, out=io.StringIO())
    capture = ("# xpushare gpu health\n## nvidia-smi exit=127\nnvidia-smi: not found\n"
               "## kernel-log source=dmesg lines=3\n")
    log = (f"@@xpushare-envcheck-begin health\n{json.dumps({'capture': capture})}\n@@xpushare-envcheck-end health\n"
           "@@xpushare-envcheck-exit health 0 0.1\n")
    raw = k8s_mode.health_step(ctx, "n1", log, "pod p: phase Running")
    assert raw.doc == {"capture": capture} and raw.error is None
    assert (ctx.node_dir("n1") / "health.txt").read_text() == capture
    missing = k8s_mode.health_step(ctx, "n2", "@@xpushare-envcheck-exit stack 0 1.0\n", "pod q: phase Running")
    assert missing.doc is None and missing.error == "health capture missing (pod q: phase Running)"
