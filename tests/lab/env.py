"""The whole lab as an inventory cluster named ``lab``: SSH lab hosts + the lab Kubernetes cluster.

``lab-master`` (127.0.0.11) is where kubectl runs (over real SSH); ``lab-node1``/``lab-node2`` are the
GPU nodes reached over SSH (node evidence, curl of the scheduler pod IP). Used by the end-to-end tests
and by ``invoke lab.up`` / ``invoke lab.down`` for contributors (files in ``.lab/``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.lab.cluster import LabCluster, find_kubectl, lab_plan, reserve_address_block
from tests.lab.sshd import SshLab

REPO = Path(__file__).resolve().parents[2]
#: The lab's fake GPU memory: 1536 MiB (the library's reserve) + 64 MiB, so the oversubscription workload
#: (1.5 x 64 MiB on a CPU) crosses the physical limit without using real memory.
LAB_GPU_MEMORY_BYTES = (1536 + 64) * 2**20
#: LabCluster options of the lab behind the ``lab`` cluster: the memory above and 250 ms quota windows, so that
#: second-long lab workloads see their compute quota.
LAB_OPTIONS: dict[str, Any] = {"gpu_memory_bytes": LAB_GPU_MEMORY_BYTES, "window_ms": 250}
LAB_HOSTS = (
    ("lab-master", "127.0.0.11", "master"),
    ("lab-node1", "127.0.0.12", "gpu"),
    ("lab-node2", "127.0.0.13", "gpu"),
)


def lab_inventory(ssh: SshLab, kube: LabCluster, *, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """Inventory data with one cluster ``lab`` (k8s mode, xpushare naming) over the running labs."""
    first = next(iter(ssh.hosts.values()))
    hosts: dict[str, Any] = {}
    for name, _address, role in LAB_HOSTS:
        h = ssh.host(name)
        hosts[name] = {"address": h.address, "port": h.port, "roles": [role]}
    return {
        "clusters": {
            "lab": {
                "mode": "k8s",
                "sut": "xpushare",
                "backend": "cuda",
                "gpu": {"model": "lab", "memory_gib": 16},
                "kubeconfig": str(kube.kubeconfig_path),
                "kubectl": find_kubectl() or "kubectl",
                "namespace": "default",
                "ssh": {
                    "user": first.user,
                    "identity": str(first.identity),
                    "known_hosts": str(ssh.workdir / "known_hosts"),
                    "host_key_policy": "strict",
                    "connect_timeout": 10,
                },
                "hosts": hosts,
                "params": {
                    # Lab-sized workloads: ~1 s of CPU per W2 at 100 % (4 windows; 16 at a 25 % quota), quotas
                    # scaled to the lab's memory model.
                    "workload_args": {"w2_medium_add": ["--n", "2048", "--iters", "2000", "--no-progress"],
                                      "w5_quota_probe": ["--n", "1024"]},
                    "func003_pods": 4,
                    "func006_memory_limit": "1Mi",
                    "dynamic_step_s": 8,
                    "probe_interval_s": 1,
                    "pod_python": sys.executable,
                    "pod_workload_dir": str(REPO / "workloads"),
                    "pod_workload_configmap": False,
                    "pod_image": "lab",
                    "poll_s": 0.5,
                    "pod_timeout_s": 300,
                    **(params or {}),
                },
            }
        }
    }


def write_inventory(path: Path, ssh: SshLab, kube: LabCluster, **kw: Any) -> Path:
    path.write_text(yaml.safe_dump(lab_inventory(ssh, kube, **kw), sort_keys=False), encoding="utf-8")
    return path


def up(workdir: Path, *, sut_src: str | None = None) -> Path:
    """Start the SSH lab and the Kubernetes lab detached under ``workdir``; return the inventory path."""
    workdir.mkdir(parents=True, exist_ok=True)
    ssh = SshLab(workdir / "ssh", detached=True)
    for name, address, _role in LAB_HOSTS:
        ssh.add_host(name, address)
    ssh.write_known_hosts()
    ssh.write_ssh_config()
    (workdir / "ssh" / "lab.json").write_text(json.dumps(ssh.to_json(), indent=2) + "\n")
    block, _lock = reserve_address_block()
    kube = LabCluster(workdir / "kube", die_with_parent=False, sut_src=sut_src, **LAB_OPTIONS,
                      **lab_plan(block))
    kube.start()
    return write_inventory(workdir / "inventory.yaml", ssh, kube)


def down(workdir: Path) -> None:
    """Stop what :func:`up` started (exactly the recorded processes)."""
    from tests.lab.sshd import lab_down

    if (workdir / "kube" / "lab.json").exists():
        LabCluster.attach(workdir / "kube").stop()
    lab_down(workdir / "ssh")
    (workdir / "inventory.yaml").unlink(missing_ok=True)
