"""The whole lab as an inventory cluster named ``lab``: SSH lab hosts + the lab Kubernetes cluster.

``lab-master`` (127.0.0.11) is where kubectl runs (over real SSH); ``lab-node1``/``lab-node2`` are the
GPU nodes reached over SSH (node evidence, curl of the scheduler pod IP). Used by the end-to-end tests
and by ``invoke lab.up`` / ``invoke lab.down`` for contributors (files in ``.lab/``).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.lab.cluster import LabCluster, find_kubectl, lab_plan, reserve_address_block
from tests.lab.simgpu import DEFAULT_CONTEXT_BYTES
from tests.lab.sshd import SshLab
from tests.lab.sut import source_tree
from xpushare.cases.metrics_scraping import met008_size

REPO = Path(__file__).resolve().parents[2]
#: The lab's simulated GPU memory: 1536 MiB (the library's reserve) + 64 MiB, so the oversubscription workload
#: (1.5 x 64 MiB) crosses the physical limit; untouched simulated allocations cost no host memory.
LAB_GPU_MEMORY_BYTES = (1536 + 64) * 2**20
#: LabCluster options of the lab behind the ``lab`` cluster: the memory above and 500 ms quota windows (the SUT's
#: minimum: it raises a smaller XPUSHARE_COMPUTE_WINDOW_MS to 500), so that second-long workloads see their quota.
LAB_OPTIONS: dict[str, Any] = {"gpu_memory_bytes": LAB_GPU_MEMORY_BYTES, "window_ms": 500}
#: LabCluster options of a lab whose workloads run for a set time (W5 probes beside short W2/W4 pods) rather than a set
#: amount of work: a quarter of the memory bandwidth (25 GB/s) makes each W5 add of n 1024 last 504 us instead of 126,
#: so a probe launches a quarter of the kernels over the same seconds. The real client library does work on every
#: launch: a W5 pod cost 3.3 s of CPU over its 30 s with the standard lab (tests/bench/ci_time.md), against 0.6 s
#: for the same probe without the library. W2 of 500 adds at n 2048 lasts 1.0 s instead of 0.25.
PROBE_LAB_OPTIONS: dict[str, Any] = {**LAB_OPTIONS, "gpu_bandwidth": 25e9}
#: Workload sizes of the ``lab`` cluster, by simulated GPU time (W2/W6 at n 2048: 0.5 ms per add).
LAB_WORKLOAD_ARGS: dict[str, list[str]] = {
    # W1 is the legacy cross-gpu pods' workload: its progress line stays on (the legacy tables read its it/s)
    "w1_large_add": ["--n", "2048", "--iters", "4000"],  # 2.0 s
    "w2_medium_add": ["--n", "2048", "--iters", "4000", "--no-progress"],  # 2.0 s
    "w3_idle_add": ["--n", "1024", "--steps", "50", "--sleep-s", "0.1", "--no-progress"],
    "w5_quota_probe": ["--n", "1024"],  # 16 MiB of buffers: fits the 64 MiB allocatable without a limit
    "w4_alloc_free": ["--rounds", "20", "--mib", "2", "--no-progress"],
    "w6_fixed_add": ["--n", "2048", "--iters", "12000", "--no-progress"],  # 6.0 s: over perf_baseline_min_s
}
LAB_HOSTS = (
    ("lab-master", "127.0.0.11", "master"),
    ("lab-node1", "127.0.0.12", "gpu"),
    ("lab-node2", "127.0.0.13", "gpu"),
)
#: A real GPU's CUDA context as MET-008's fill counts it (PyTorch's context on an H100 is about 500 MiB).
REAL_CONTEXT_BYTES = 512 * 2**20
#: Where ``up --gpus real`` records the add loop's calibration (tests/lab/realgpu.py), in the lab's kube directory.
CALIBRATION_FILE = "calibration.json"


def lab_hosts(nodes: list[str] | None = None) -> tuple[tuple[str, str, str], ...]:
    """The SSH hosts of the lab: ``lab-master`` and one GPU host per lab node (``nodes`` None: the simulated lab's
    two); node ``lab-node<i>`` on 127.0.0.(11+i)."""
    if nodes is None:
        return LAB_HOSTS
    return (LAB_HOSTS[0], *((name, f"127.0.0.{11 + i}", "gpu") for i, name in enumerate(nodes, start=1)))


def lab_params(kube: LabCluster) -> dict[str, Any]:
    """The ``lab`` cluster's parameters: every suite's sizes for the simulated GPUs, kept in this one place so
    that ``invoke lab.up`` followed by any suite task gives the verdicts the lab tests assert.

    Measured on the lab (1e12 FLOP/s, 100e9 B/s per simulated GPU, 500 ms quota windows; the modules'
    docstrings give the numbers): W2 at n 2048 is 0.5 ms of GPU time per add, 4000 adds 2.0 s (2.6 s at 80 %,
    5.0 s at 40 %, 6.9-7.4 s at 30 %); the real watcher re-reads annotations every 5 s, so dynamic steps are
    8 s and probe lines come every second (largest gap seen 1.0 s); memory quotas are fractions of the
    1600 MiB card the workloads fit in (64 MiB allocatable without a limit).
    """
    return {
        "workload_args": {k: list(v) for k, v in LAB_WORKLOAD_ARGS.items()},
        "pod_python": sys.executable,
        "pod_workload_dir": str(REPO / "workloads"),
        "pod_workload_configmap": False,
        "pod_image": "lab",
        "poll_s": 0.5,
        "poll_max_s": 2.0,
        "pod_timeout_s": 300,
        # functional
        "func003_pods": 4,
        "func006_memory_limit": "1Mi",
        # FUNC-006/007 and COMBO-001 run the memory probe after their workload: a quota the card can show (W2's
        # 64 MiB fit 256 MiB; the default 8Gi is over the 1600 MiB card), from 1 s after the registration
        "func007_memory_limit": "256Mi",
        "quota_probe_free_margin_mib": 64,
        "quota_probe_start_delay_s": 1,
        "dynamic_step_s": 8,
        "probe_interval_s": 1,
        # FUNC-010/011's memory probe: limits the 1600 MiB card can show (1.5 x 512 MiB under its free 1344 MiB
        # less 64), measured from 7 s after each change (the watcher's 5 s period and the UPDATE_LIMIT round trip)
        "func010_memory_limits": ["256Mi", "512Mi"],
        "func011_memory_limits": ["512Mi", "256Mi"],
        "dynamic_probe_free_margin_mib": 64,
        "dynamic_probe_start_delay_s": 1,
        "dynamic_probe_settle_s": 7,
        # isolation: 3 x 256 MiB fits the card's free memory, so a bypass shows as 768 MiB
        "iso_memory_limit": "256Mi",
        "iso_free_margin_mib": 64,
        "iso_start_delay_s": 1,
        # FUNC-013's two tenants: quotas the card can show (a probe's cap is 3 x its quota, at most the free 1344 MiB
        # less 64)
        "func013_memory_limits": ["256Mi", "512Mi"],
        # combination
        "max_probe_gap_s": 3,
        "combo001_memory_limit": "32Mi",
        "combo003_quotas": [{"core": 40, "memory": "256Mi"}, {"core": 70, "memory": "512Mi"}],
        "combo004_memory_limits": ["256Mi", "512Mi", "384Mi"],
        "combo005_memory_limits": ["512Mi", "1Gi", "256Mi", "768Mi"],
        "combo007_memory_limit": "256Mi",
        "combo007_w5_duration_s": 8,
        "combo008_memory_limits": ["256Mi", "320Mi"],
        "combo008_w5_duration_s": 12,
        "metrics_mid_timeout_s": 30,
        "metrics_mid_poll_s": 1,
        # metrics
        "met_settle_s": 20,
        "met_poll_s": 0.5,
        "met_probe_duration_s": 120,
        # the node sampler (every case, and MET-003's) reads the node's simulated NVML: the SSH sessions of the
        # node hosts have no driver of their own, so it gets the node's devices and the stub library, and the
        # interpreter that has nvidia-ml-py
        "node_sampler_python": sys.executable,
        # MET-003's alloc/free loop beside the 16 MiB probe: 16 MiB blocks fit the 64 MiB the library leaves
        "met003_alloc_mib": 16,
        "met005_before_s": 2,
        "met005_timeout_s": 20,  # the watcher's 5 s period, the probe's REGISTER and slack
        "met006_duration_s": 10,
        "met007_duration_s": 10,
        "met008_n": met008_n(kube.gpu_memory_bytes),
        "met008_duration_s": 6,
        # performance
        "perf_baseline_min_s": 5,
        "perf003_workload": "w6_fixed_add",  # W2's 2.0 s is under perf_baseline_min_s; W6 is 6.0 s
        # fillers only hold the other GPU of the node while the pair is placed: an idle workload
        "perf_filler_workload": "w3_idle_add",
        "perf_filler_args": ["--n", "64", "--steps", "100", "--sleep-s", "0.1", "--no-progress"],
        "perf_placement_timeout_s": 30,
        # the scheduler re-reads annotations every 5 s: the change lands 0-5 s after the annotate call
        "perf007_pre_s": 8,
        "perf007_post_s": 15,
        "perf007_settle_s": 7,
        "perf007_poll_s": 0.5,
        "perf007_metric_timeout_s": 20,
        # stability, leak, fault and soak: the seed's hours and minutes compressed to seconds, rounds of one or
        # two small pods (tests/e2e/test_k8s_stability.py gives the measurements)
        "sample_interval_s": 2,  # every SSH command also runs the login shell's rc files: keep the rate low
        "soak_poll_s": 1.5,
        "progress_s": 2,
        "checkpoint_s": 3,
        "interim_report_s": 15,
        "log_rotate_s": 12,
        "settle_s": 15,
        "backoff_max_s": 3,
        "round_timeout_s": 120,
        "stop_grace_s": 20,
        "soak_plots": False,  # matplotlib costs seconds per case on 2 cores
        "trend_min_samples": 4,
        "stab_duration_s": 8,
        "stab001_pods": 2,
        "stab002_pods_small": 1,
        "stab002_pods_large": 2,
        "stab_quota_pods": 2,
        "stab_quota_interval_s": 8,  # the real scheduler re-reads annotations every 5 s
        # a change is only counted on a pod still running dynamic_max_latency_s (15) after it: pods of 30 s see
        # the change at 8 s counted (the one at 16 s is not), so a scheduler that never applies one is FAIL
        "stab_pod_duration_s": 30,
        # STAB-004 keeps the seed's shape (base 8Gi, 2Gi, 6Gi: no raise past the start quota, docs/findings.md 18)
        # at the card's size: a W5 holds 16 MiB, the memory probe up to 1.5 x 512 MiB; changes every 12 s (the
        # probe's 7 s settle plus measurements) on pods of 45 s, so the decrease, the raise and the return to the
        # base each have a measured phase
        "stab004_memory_base": "512Mi",
        "stab004_memory_cycle": ["128Mi", "384Mi"],
        "stab004_quota_interval_s": 12,
        "stab004_pod_duration_s": 45,
        "leak_rounds": 2,
        "leak003_pods": 2,
        "leak_churn_rounds": 2,
        "leak_pods": 1,
        "fail_pods": 1,
        "fail_load_s": 6,
        "fail_pre_fault_s": 2,  # the load has registered with the scheduler before the fault
        "fail_restart_timeout_s": 90,
        "fail_recovery_max_s": 90,
        "fail_pending_max_s": 90,
        "fail_drain_timeout_s": 60,
        "fail_drain_grace_s": 1,
        "fail004_pods": 2,
        # FAIL-005..007: the GPU fault 4 s into a 12 s W5 load, a progress line every 0.3 s
        "fail_fault_load_s": 12,
        "fail_fault_after_s": 4,
        "fail_probe_interval_s": 0.3,
        "fail_settle_s": 2,
        "fail_rate_margin_s": 1,
        # legacy scripts (invoke legacy.*): W2 holds 64 MiB here, so the limit that must refuse it is under that
        "legacy_memlimit_low": "32Mi",
        "legacy_dynamic_low": "32Mi",
        **(real_gpu_params(kube) if kube.real_gpus else sim_gpu_params(kube)),
    }


def sim_gpu_params(kube: LabCluster) -> dict[str, Any]:
    """The node sampler and dmon on the simulated GPUs: the node hosts' SSH sessions have no driver of their own,
    so they get the node's devices and the stub library (the paths hold the ``{node}`` placeholder the case fills
    in)."""
    return {
        "fault_injector": "simulated-gpu",  # FAIL-005..007: the simulated GPU injects the faults (SIMGPU_FAULT)
        "node_sampler_env": {"SIMGPU_CONFIG": str(kube.simgpu_config("{node}")),
                             "LD_LIBRARY_PATH": str(kube.simgpu_dir)},
        # the GPU health capture (evidence/gpu_health) on each node: its simulated GPUs through the nvidia-smi
        # look-alike, and its kernel log (SIMGPU_KMSG) through the dmesg look-alike
        "node_health_env": {"PATH": f"{kube.simgpu_dir}:/usr/local/bin:/usr/bin:/bin",
                            "LD_LIBRARY_PATH": str(kube.simgpu_dir),
                            "SIMGPU_CONFIG": str(kube.simgpu_config("{node}")),
                            "SIMGPU_KMSG": str(kube.kmsg("{node}"))},
        "met006_dmon_command": ["env", f"SIMGPU_CONFIG={kube.simgpu_config('{node}')}",
                                str(Path(str(kube.simgpu_dir)) / "nvidia-smi"), "dmon", "-s", "u", "-d", "1"],
    }


def real_gpu_params(kube: LabCluster) -> dict[str, Any]:
    """What differs on real GPUs (``lab.up --gpus real``): workload sizes from the add loop's calibration (else
    the GPU model's row, :func:`tests.lab.realgpu.model_adds_per_s`) so that each workload lasts what it lasts on
    the simulated GPU; the node sampler, dmon and MET-008's fill on the real driver and NVML (nvidia-smi by its
    path: the node hosts' SSH sessions have the system PATH)."""
    from tests.lab.realgpu import REAL_ADD_N, find_nvidia_smi, model_adds_per_s, real_workload_args

    smi = find_nvidia_smi() or "nvidia-smi"
    first = kube.nodes[0]
    spec = kube.node_specs[first]
    calibration = lab_calibration(kube)
    rate = calibration.get("adds_per_s") or model_adds_per_s(str(spec.get("gpu_name", "")), REAL_ADD_N)
    params: dict[str, Any] = {
        "node_sampler_env": {"PATH": os.pathsep.join([str(Path(smi).parent), "/usr/local/bin", "/usr/bin", "/bin"])},
        "met006_dmon_command": [smi, "dmon", "-s", "u", "-d", "1"],
        "met008_n": met008_n(int(spec["gpu_memory_bytes"]), REAL_CONTEXT_BYTES),
    }
    if rate:
        params["workload_args"] = real_workload_args(float(rate))
    return params


def lab_calibration(kube: LabCluster) -> dict[str, Any]:
    """The add loop's calibration recorded by :func:`up` (empty where none ran)."""
    try:
        data = json.loads((kube.workdir / CALIBRATION_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


#: MET-008's fill: W5's buffers plus the simulated driver's context make this share of the GPU.
MET008_FILL = 0.85


def met008_n(total: int, context: int = DEFAULT_CONTEXT_BYTES) -> int:
    """W5's ``--n`` whose buffers (16 n²) plus one context (``context`` bytes: the simulated driver's 256 MiB by
    default) fill ``MET008_FILL`` of a ``total``-byte GPU."""
    return met008_size((MET008_FILL * total - context) / total, total)


def lab_inventory(ssh: SshLab, kube: LabCluster, *, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """Inventory data with one cluster ``lab`` (k8s mode, xpushare naming) over the running labs; ``params``
    override :func:`lab_params` (a test that sizes one case differently)."""
    first = next(iter(ssh.hosts.values()))
    hosts: dict[str, Any] = {}
    for name, _address, role in lab_hosts(kube.nodes if kube.real_gpus else None):
        h = ssh.host(name)
        hosts[name] = {"address": h.address, "port": h.port, "roles": [role]}
    return {
        "clusters": {
            "lab": {
                "mode": "k8s",
                "sut": "xpushare",
                "backend": "cuda",
                "gpu": real_gpu_entry(kube) if kube.real_gpus else {"model": "lab", "memory_gib": 16},
                "kubeconfig": str(kube.kubeconfig_path),
                "kubectl": find_kubectl() or "kubectl",
                "ssh": {
                    "user": first.user,
                    "identity": str(first.identity),
                    "known_hosts": str(ssh.workdir / "known_hosts"),
                    "host_key_policy": "strict",
                    "connect_timeout": 10,
                },
                "hosts": hosts,
                "params": {**lab_params(kube), **(params or {})},
            }
        }
    }


def real_gpu_entry(kube: LabCluster) -> dict[str, Any]:
    """The inventory's ``gpu`` of a real-GPU lab: the first node's GPU model and memory (GiB)."""
    spec = kube.node_specs[kube.nodes[0]]
    return {"model": str(spec.get("gpu_name") or "unknown"), "memory_gib": int(spec["gpu_memory_bytes"]) // 2**30}


def write_inventory(path: Path, ssh: SshLab, kube: LabCluster, **kw: Any) -> Path:
    path.write_text(yaml.safe_dump(lab_inventory(ssh, kube, **kw), sort_keys=False), encoding="utf-8")
    return path


def up(workdir: Path, *, sut_src: str | None = None, gpus: str = "sim", gpus_per_node: int = 1,
       calibrate: bool = True) -> Path:
    """Start the SSH lab and the Kubernetes lab detached under ``workdir``; return the inventory path.

    ``gpus``: ``"sim"`` (simulated GPUs, two nodes of two) or ``"real"``: the machine's NVIDIA GPUs, ``gpus_per_node``
    per lab node (:func:`tests.lab.realgpu.assign_gpus`), the add loop calibrated on the first GPU before the lab
    starts (``calibrate``; recorded in ``kube/calibration.json``) for the workload sizes.

    The SUT source tree (and, real, the GPUs) are checked before anything starts (:class:`tests.lab.sut.SourceMissing`,
    :class:`tests.lab.realgpu.GpuDiscoveryError`); a start that fails later stops what it had started
    (:func:`down`) before the error goes on, so no daemon is left.
    """
    source = source_tree(sut_src)
    if gpus not in ("sim", "real"):
        raise ValueError(f"gpus must be 'sim' or 'real', not {gpus!r}")
    block, _lock = reserve_address_block()
    options: dict[str, Any] = {**LAB_OPTIONS, **lab_plan(block)}
    if gpus == "real":
        from tests.lab.realgpu import assign_gpus, discover_gpus, real_lab_plan

        options = {"window_ms": LAB_OPTIONS["window_ms"],
                   **real_lab_plan(assign_gpus(discover_gpus(), gpus_per_node), block)}
    nodes = list(options["nodes"]) if gpus == "real" else None
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        if gpus == "real" and calibrate:
            from tests.lab.realgpu import calibrate_add

            first = next(iter(options["nodes"].values()))
            (workdir / "kube").mkdir(parents=True, exist_ok=True)
            record = {"gpu": first["gpu_name"], "uuid": first["gpu_uuids"][0], **calibrate_add(first["gpu_uuids"][0])}
            (workdir / "kube" / CALIBRATION_FILE).write_text(json.dumps(record, indent=1) + "\n")
        ssh = SshLab(workdir / "ssh", detached=True)
        (workdir / "ssh" / "lab.json").write_text(json.dumps(ssh.to_json(), indent=2) + "\n")
        for name, address, _role in lab_hosts(nodes):
            ssh.add_host(name, address)
            (workdir / "ssh" / "lab.json").write_text(json.dumps(ssh.to_json(), indent=2) + "\n")
        ssh.write_known_hosts()
        ssh.write_ssh_config()
        kube = LabCluster(workdir / "kube", die_with_parent=False, sut_src=str(source), **options)
        kube.start()
        return write_inventory(workdir / "inventory.yaml", ssh, kube)
    except BaseException:
        with contextlib.suppress(Exception):  # the start's own error is the one to tell
            down(workdir)
        raise


def down(workdir: Path) -> None:
    """Stop what :func:`up` started (exactly the recorded processes)."""
    from tests.lab.sshd import lab_down

    if (workdir / "kube" / "lab.json").exists():
        LabCluster.attach(workdir / "kube").stop()
    lab_down(workdir / "ssh")
    (workdir / "inventory.yaml").unlink(missing_ok=True)
