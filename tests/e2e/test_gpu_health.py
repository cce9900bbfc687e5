"""A GPU fault during a case is ERROR, never a verdict on the SUT (docs/faults.md), on the host-mode lab (real
sshd, the real SUT on simulated GPUs, :mod:`tests.lab.hostlab`).

Each host's kernel log is its ``SIMGPU_KMSG`` file, which the ``dmesg`` look-alike prints; the simulated NVML
reports the ECC counters :func:`tests.lab.simgpu.set_health` sets. The fault is put in at the harvest boundary
(a wrapper around :meth:`HostBackend.harvest`, as tests/e2e/test_host_harvest.py injects its faults): the
``before`` capture was taken at ``begin_case``, the ``after`` one sees the fault. One FUNC-001 pod (40 adds)
per run, on the first host's one GPU; the second host's GPU is not used by the case.

* the control: no fault, PASS, with both captures and ``gpu_health`` ok;
* Xid 79 for the pod's GPU: ERROR "GPU fault on <node> GPU <uuid> during the case (Xid 79: GPU has fallen off
  the bus): not a verdict on the SUT";
* an uncorrected ECC error on the pod's GPU: ERROR naming it;
* Xid 79 on the other host's GPU (not the case's), and an application Xid (31) on the case's GPU: the verdict
  stands (the Xid 31 recorded);
* envcheck's health step flags a host whose kernel log has an Xid 79 within its 2 h window and passes one whose
  Xid 79 is older.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tests.e2e.test_faults_while_running import Outcome, assert_no_traceback, wrap
from tests.e2e.test_faults_while_running import run_case as faults_run_case
from tests.lab.hostlab import CLUSTER, HostLab, unavailable_reason
from tests.lab.kubelab import require_lab
from tests.lab.simgpu import append_kmsg, pci_bus_id, set_health, start_kmsg, xid_line
from xpushare.backends.host import HostBackend
from xpushare.envcheck import envcheck_task
from xpushare.model.exit_status import ExitStatus

pytestmark = [pytest.mark.lab, pytest.mark.slow]

NODE1, NODE2 = "gh-node1", "gh-node2"  # NODE1: the pod's host and the scheduler's (the inventory's first)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostLab]:
    require_lab("host-mode lab", unavailable_reason())
    with HostLab(tmp_path_factory.mktemp("gpuhealth-hostlab"), nodes=(NODE1, NODE2),
                 base_address="127.0.97.1") as lab:
        yield lab


@pytest.fixture(scope="module")
def inventory(lab: HostLab) -> Path:
    params = {"workload_args": {"w2_medium_add": ["--n", "2048", "--iters", "40", "--no-progress"]},
              "pod_timeout_s": 60, "lease_path": str(lab.workdir / "run.lease")}
    return lab.write_inventory(lab.workdir / "inventory.yaml", params=params)


@pytest.fixture(autouse=True)
def _healthy_after(lab: HostLab) -> Iterator[None]:
    yield
    for node in lab.nodes.values():
        for uuid in node.gpu_uuids:
            set_health(node.config, uuid, ecc_volatile_uncorrected=0, ecc_aggregate_uncorrected=0)


def run_case(inventory: Path, root: Path, run_id: str) -> Outcome:
    o = faults_run_case(inventory, root, run_id, CLUSTER)
    assert_no_traceback(o)
    return o


def health_check(o: Outcome) -> dict[str, object]:
    return next(c for c in o.record["checks"] if c["name"] == "gpu_health")


def xid_into(lab: HostLab, node: str, xid: int, text: str) -> None:
    append_kmsg(lab.nodes[node].kmsg, xid_line(pci_bus_id(0), xid, text, pid=4242, name="python3"))


def test_without_a_fault_the_verdict_stands(inventory: Path, tmp_path: Path) -> None:
    o = run_case(inventory, tmp_path, "healthy")
    assert o.record["status"] == "PASS", o.explain() + json.dumps(o.record)[:2000]
    files = o.files()
    assert {f"gpu_health/{NODE1}-before.txt", f"gpu_health/{NODE1}-after.txt"} <= files, files
    check = health_check(o)
    assert check["ok"] is True and check["values"]["healthy"] == [NODE1], check  # type: ignore[index]
    before = (o.case_dir / f"gpu_health/{NODE1}-before.txt").read_text()
    assert "## kernel-log source=dmesg" in before and "## nvidia-smi exit=0" in before, before


def test_xid_79_on_the_case_gpu_is_error_naming_it(inventory: Path, lab: HostLab, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    wrap(monkeypatch, HostBackend, "harvest", lambda: xid_into(lab, NODE1, 79, "GPU has fallen off the bus."))
    o = run_case(inventory, tmp_path, "xid79")
    uuid = lab.nodes[NODE1].gpu_uuids[0]
    assert o.record["status"] == "ERROR", o.explain()
    assert o.record["summary"].startswith(
        f"GPU fault on {NODE1} GPU {uuid} during the case (Xid 79: GPU has fallen off the bus): "
        "not a verdict on the SUT (was PASS: "), o.record["summary"]
    assert f"gpu_health/{NODE1}-after.txt" in o.record["evidence"]


def test_uncorrected_ecc_on_the_case_gpu_is_error(inventory: Path, lab: HostLab, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    node = lab.nodes[NODE1]
    wrap(monkeypatch, HostBackend, "harvest",
         lambda: set_health(node.config, node.gpu_uuids[0], ecc_volatile_uncorrected=2, ecc_aggregate_uncorrected=2))
    o = run_case(inventory, tmp_path, "ecc")
    assert o.record["status"] == "ERROR", o.explain()
    assert o.record["summary"].startswith(
        f"GPU fault on {NODE1} GPU {node.gpu_uuids[0]} during the case (uncorrected ECC errors (volatile) 0 -> 2)"), \
        o.record["summary"]


def test_faults_off_the_case_gpus_and_application_xids_leave_the_verdict(
        inventory: Path, lab: HostLab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def inject() -> None:
        xid_into(lab, NODE2, 79, "GPU has fallen off the bus.")
        xid_into(lab, NODE1, 31, "Ch 00000010, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted")

    wrap(monkeypatch, HostBackend, "harvest", inject)
    o = run_case(inventory, tmp_path, "elsewhere")
    assert o.record["status"] == "PASS", o.explain() + o.record["summary"]
    check = health_check(o)
    assert check["ok"] is True, check
    assert any("Xid 31: GPU memory page fault" in a for a in check["values"]["application_xids"]), check  # type: ignore[index]


# ------------------------------------------------------------------------------------------- envcheck


def fresh_kmsg(lab: HostLab) -> None:
    for node in lab.nodes.values():
        node.kmsg.unlink()
        start_kmsg(node.kmsg, node.name)


def test_envcheck_flags_a_recent_xid_79_and_passes_an_old_one(inventory: Path, lab: HostLab, tmp_path: Path) -> None:
    """Node 1's kernel log has an Xid 79 of ten minutes ago, node 2's one of five hours ago: envcheck's health step
    flags node 1 naming the Xid (default window 2 h) and passes node 2; the fleet report names the reason."""
    fresh_kmsg(lab)
    now = datetime.now(timezone.utc)
    append_kmsg(lab.nodes[NODE1].kmsg, xid_line(pci_bus_id(0), 79, "GPU has fallen off the bus.",
                                                 when=now - timedelta(minutes=10)))
    append_kmsg(lab.nodes[NODE2].kmsg, xid_line(pci_bus_id(0), 79, "GPU has fallen off the bus.",
                                                 when=now - timedelta(hours=5)))
    out = io.StringIO()
    status = envcheck_task(CLUSTER, inventory_path=str(inventory), run_id="health", root=tmp_path, forks=2, out=out,
                           skip_gpu=True, overrides=["envcheck_probe_torch=false", "envcheck_freeze_source=metadata",
                                                     "envcheck_cross_node=false"])
    report = json.loads((tmp_path / ".tmplog" / "health" / "envcheck" / "fleet.json").read_text())
    by_node = {n["node"]: n for n in report["nodes"]}
    one, two = by_node[NODE1], by_node[NODE2]
    assert status is not ExitStatus.OK, out.getvalue()
    assert one["status"] == "FAIL", one
    health = one["steps"]["health"]
    assert health["status"] == "FAIL" and "Xid 79: GPU has fallen off the bus (critical) on GPU 0000:01:00" in \
        health["summary"], health
    assert "health: xid: 1 Xid(s) in the last 2 h" in one["summary"], one["summary"]
    assert two["steps"]["health"]["status"] == "PASS", two["steps"]["health"]
    xid = next(c for c in two["steps"]["health"]["checks"] if c["name"] == "xid")
    assert xid["values"]["older"] == 1, xid
    md = (tmp_path / ".tmplog" / "health" / "envcheck" / "fleet-report.md").read_text()
    assert "Xid 79: GPU has fallen off the bus" in md
    fresh_kmsg(lab)
