"""Host mode on the real SUT: the tool tells clients apart by ``host_pid`` / ``client_id``, never by pod name.

The lab (:mod:`tests.lab.hostlab`) is a ``mode: host`` cluster of two GPU hosts over real SSH, each in its
own mount namespace with the real ``xpushare-scheduler`` (metrics on, debug log) on one simulated GPU;
workloads get the real ``libxpushare.so`` through the inventory's ``sut_lib``. Outside Kubernetes the real
library registers every client as pod ``none`` in namespace ``none``, which is what these tests rely on.

* ``invoke metrics-check --cluster hostlab``: the idle part PASSes, and under load each probe's
  ``client_info`` is found by the host pid the backend recorded (cross-checked against the scheduler's own
  ``SO_PEERCRED`` log lines). The one FAIL per load step is ``NVML per-process memory``: the real exporter
  looks NVML processes up by GPU UUID prefix and a host-mode client's GPU key is ``CUDA_VISIBLE_DEVICES``'s
  index ``0`` (docs/findings.md 9). The check exits 1 for that defect, which is the right verdict.
* Two probes on the *same* GPU have identical ``client_info`` labels except ``client_id`` and ``host_pid``:
  they are counted as two clients, each matched by its own pid; a pod-name match finds neither.
* ``invoke metrics --cluster hostlab``: MET-001, MET-002 (probe matched by host_pid) and MET-007 PASS, the
  Kubernetes-only cases SKIP; the harvested scheduler log maps the probe to its registration by host pid
  (``gpu_mapping.txt``).
* ``invoke func --case FUNC-003`` on a lab of one host with two simulated GPUs: every process is counted
  on the GPU key the real scheduler registered it on (``0`` / ``1``), found by its pid, not on the tool's
  own placement; the judgment writes ``gpu_mapping.txt``. With the host's scheduler and library from the
  ``gpu-key-ignores-cuda-visible-devices`` mutant (the library ignores ``CUDA_VISIBLE_DEVICES``), the tool
  still places the workloads on GPUs ``0``, ``0``, ``1``, ``1``, but every client registers under the key
  ``default``: FUNC-003 FAILs (``spread_over_gpus: all pods on one GPU``).
* Broken system: the host's scheduler from the ``metrics-missing`` mutant still registers the probe (the
  log shows its pid) but exports no ``client_info``: ``load 1: client_info per client`` FAILs, and so does
  MET-002.
* Tool fixes found here: with more than one GPU host, ``metrics-check`` placed the second probe on another
  host (least-loaded placement), whose scheduler is not the one scraped: ``load 2`` FAILed on a healthy
  system (``not found: metrics-check-2 [host_pid ...]; registered: none``). The probes now run on the first
  GPU host, the one ``scheduler.metrics_url`` belongs to. And the host backend's node sampler and
  ``nvidia-smi dmon`` kept running on every host after a metrics-check (only a harvest stopped them; the
  check does none): the case cleanup now stops what of the case still runs.

Lab-sized parameters: ``metrics_check_settle_s`` 15 (a load step whose lines never all pass, as with
finding 9, waits that long), ``met_settle_s`` 15, ``met007_duration_s`` 10, W5 ``--n 1024`` on a 1e9 B/s
simulated GPU (12.6 ms per kernel, so a probe costs little CPU). Measured on a 2-core machine shared with
other lab runs: the lab starts in 0.4 s, a healthy metrics-check takes 34 s (two 15 s load steps, each held
to its end by finding 9), the metrics suite 19 s, the two-probe test 4 s, the ``metrics-missing`` test 56 s
(its metrics-check and MET-002 wait out their settle times), each FUNC-003 test (healthy, mutant) 6 s; the
module 130 s. ``test_met_probe_cases_in_host_mode`` runs the healthy build and its three mutants on four host
labs at once (tests/lab/labpool.py): 277 s one after the other in the suite, 119 s at once.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.lab.env import LAB_GPU_MEMORY_BYTES, met008_n
from tests.lab.hostlab import CLUSTER, HostLab, unavailable_reason
from tests.lab.kubelab import require_lab
from tests.lab.labpool import outcome_of, run_on_labs
from tests.lab.mutants import build_mutant
from tests.paths import REPO_ROOT
from tests.processes import alive
from tests.toolrun import run_tool
from xpushare.backends.host import HostBackend
from xpushare.evidence.client_match import client_match, matched_clients, registrations_of
from xpushare.evidence.store import Evidence, write_gpu_mapping
from xpushare.inventory import schema
from xpushare.inventory.schema import ClusterSpec, HostSpec, SchedulerSpec, local_cluster
from xpushare.metrics_check import checklist, probes, targets, task
from xpushare.model.exit_status import ExitStatus
from xpushare.model.workload import WorkloadSpec
from xpushare.parsers.metrics import parse_exposition
from xpushare.parsers.scheduler_log import parse_text
from xpushare.transport.base import CommandResult

ROOT = REPO_ROOT
NODE = "hl-node1"  # the first GPU host: its scheduler is the inventory's
PARAMS: dict[str, Any] = {"metrics_check_settle_s": 15, "met_settle_s": 15, "met_poll_s": 0.5,
                          "met_probe_duration_s": 120, "met007_duration_s": 10}
HOST_ONLY = ("MET-001", "MET-002", "MET-007")
#: Run in host mode only on a lab of their own (MET-008 fills the GPU: a small one); MET-004/005 need Kubernetes.
HOST_PROBE_CASES = ("MET-003", "MET-006", "MET-008")
NEEDS_KUBERNETES = ("MET-004", "MET-005")
LAB = pytest.mark.lab
_FOUND = re.compile(r"(?P<probe>metrics-check-\d) = (?P<cid>[0-9a-f]{16}) \(matched by host_pid (?P<pid>\d+)")


# ------------------------------------------------------------------------------------------ unit tests


def _two_host_cluster(**params: Any) -> ClusterSpec:
    hosts = tuple(HostSpec(f"gpu{i}", ("gpu",), address=f"127.0.0.{i}") for i in (1, 2))
    return ClusterSpec("c", "host", "xpushare", "cuda", None, None, hosts, sut_lib="/opt/libxpushare.so",
                       scheduler=SchedulerSpec(metrics_url="http://127.0.0.1:9402"), params=params)


def test_host_mode_probes_run_on_the_scrapes_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scheduler of ``metrics_url`` serves the first GPU host only: every probe is pinned there, and the
    settle time comes from the cluster parameter."""
    seen: dict[str, Any] = {}

    class Up:
        name = "gpu1"

        def run(self, argv: Any, **kw: Any) -> CommandResult:
            return CommandResult(self.name, tuple(argv), "", "", 0, 0.01)

        def close(self) -> None:
            pass

    def fake_check(url: str, **kw: Any) -> task.SchedulerResult:
        seen.update(kw, url=url)
        return task.SchedulerResult(str(kw.get("name")), url, [], ExitStatus.OK)

    monkeypatch.setattr(targets, "connect", lambda spec: Up())
    monkeypatch.setattr(task, "check_scheduler", fake_check)
    cluster = _two_host_cluster(metrics_check_settle_s=7)
    assert task.metrics_check_task(None, cluster, out=io.StringIO()) is ExitStatus.OK
    # metrics_url names gpu1's address: that one scheduler is checked, its probes pinned to gpu1
    assert seen["name"] == "gpu1" and seen["url"] == "http://127.0.0.1:9402"
    assert isinstance(seen["load"], probes.BackendProbeLoad) and seen["load"].node == "gpu1"
    assert seen["settle_s"] == 7.0
    task.metrics_check_task(None, _two_host_cluster(), out=io.StringIO(), settle_s=3)
    assert seen["settle_s"] == 3
    task.metrics_check_task(None, _two_host_cluster(), out=io.StringIO())
    assert seen["settle_s"] == 60.0


def test_host_cleanup_stops_what_the_case_left_running(tmp_path: Path) -> None:
    """A caller that skips the harvest (metrics-check's probe load) must not leave the case's background
    commands behind: cleanup stops whatever of the case still has a pid file before removing its files."""
    backend = HostBackend(local_cluster())
    backend.prepare_run(f"cleanup-{os.getpid()}")
    backend.begin_case(tmp_path, "c1")
    host = backend.hosts["localhost"]
    pid = host.spawn(f"{backend.case_prefix}-capture", ["sleep", "60"]).pid
    assert alive(pid)
    backend.cleanup()
    deadline = time.monotonic() + 5
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pid)
    assert not list(Path(host.spawn_dir).glob(f"{backend.case_prefix}-*"))




# ------------------------------------------------------------------------------------------------ the lab


@pytest.fixture(scope="module")
def host_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostLab]:
    require_lab("host-mode lab", unavailable_reason())
    with HostLab(tmp_path_factory.mktemp("hostlab")) as lab:
        yield lab


@pytest.fixture(scope="module")
def inventory_file(host_lab: HostLab) -> Path:
    return host_lab.write_inventory(host_lab.workdir / "inventory.yaml", params=PARAMS)


def invoke(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return run_tool([sys.executable, "-m", "invoke", *args], cwd=ROOT, timeout=timeout)


def check_lines(stdout: str) -> dict[str, tuple[str, str]]:
    """``item -> (observed, PASS|FAIL)`` of every metrics-check table in ``stdout`` (tabulate ``simple``: the
    dashes under the header give the columns; a row whose first column is blank continues the row above, as a long
    cell wraps)."""
    out: dict[str, tuple[str, str]] = {}
    spans: list[tuple[int, int]] = []
    item = ""
    for line in stdout.splitlines():
        if re.fullmatch(r"-+(  -+){3}", line.strip()):
            spans = [m.span() for m in re.finditer(r"-+", line)]
            continue
        if not spans or not line.strip():
            spans = spans if line.strip() or not spans else []
            continue
        cells = [line[a:b if i < len(spans) - 1 else None].strip() for i, (a, b) in enumerate(spans)]
        if cells[0]:
            item = cells[0]
            if cells[-1] in ("PASS", "FAIL"):
                out[item] = (cells[2], cells[-1])
        elif item in out:
            observed, status = out[item]
            out[item] = (f"{observed} {cells[2]}".strip(), status)
    return out


def page(lab: HostLab) -> str:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(lab.nodes[NODE].metrics_url + "/metrics", timeout=5) as resp:
        return str(resp.read().decode())


def wait_idle(lab: HostLab, timeout_s: float = 30.0) -> None:
    """Until the first host's scheduler shows no client (an earlier test's probes may still be leaving)."""
    deadline = time.monotonic() + timeout_s
    while parse_exposition(page(lab)).values("client_info"):
        if time.monotonic() > deadline:
            pytest.fail(f"clients still registered on {NODE} after {timeout_s} s")
        time.sleep(0.2)


def log_size(lab: HostLab) -> int:
    return lab.nodes[NODE].log_file.stat().st_size


def log_since(lab: HostLab, offset: int) -> str:
    with lab.nodes[NODE].log_file.open("rb") as fh:
        fh.seek(offset)
        return fh.read().decode(errors="replace")


def leftovers(lab: HostLab, wait_s: float = 5.0) -> list[str]:
    """Workloads, node samplers and dmon still running on the hosts after ``wait_s`` (they get SIGTERM)."""
    deadline = time.monotonic() + wait_s
    while True:
        left = [c for n in lab.nodes for c in lab.processes(n).values()
                if any(k in c for k in ("node_sampler", " dmon ", "w5_quota_probe"))]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def metrics_suite(inv: Path, root: Path, run_id: str, *cases: str) -> dict[str, dict[str, Any]]:
    proc = invoke("metrics", "--cluster", CLUSTER, "--inventory", str(inv), "--run-id", run_id, "--root", str(root),
                  *[a for c in cases for a in ("--case", c)])
    base = root / ".tmplog" / run_id / "xpushare" / CLUSTER / "metrics"
    got = {p.parent.name: json.loads(p.read_text()) for p in base.glob("*/result.json")}
    assert got, proc.stdout[-3000:] + proc.stderr[-3000:]
    return got


@LAB
def test_metrics_check_matches_probes_by_host_pid(host_lab: HostLab, inventory_file: Path) -> None:
    wait_idle(host_lab)
    offset = log_size(host_lab)
    proc = invoke("metrics-check", "--cluster", CLUSTER, "--inventory", str(inventory_file))
    lines = check_lines(proc.stdout)
    detail = proc.stdout[-6000:] + proc.stderr[-2000:]
    assert len(lines) == 31, detail
    failed = {k for k, (_, status) in lines.items() if status == "FAIL"}
    # Finding 9: the only FAILs are the exporter's NVML memory of an index-keyed client, and the line says why.
    assert failed == {"load 1: NVML per-process memory", "load 2: NVML per-process memory"}, detail
    assert all("GPU key '0' matches no gpu_info UUID" in lines[k][0] for k in failed), detail
    assert proc.returncode == 1, detail
    one, two = lines["load 1: client_info per client"][0], lines["load 2: client_info per client"][0]
    assert [m["probe"] for m in _FOUND.finditer(one)] == ["metrics-check-1"], detail
    found = {m["probe"]: (m["cid"], int(m["pid"])) for m in _FOUND.finditer(two)}
    assert set(found) == {"metrics-check-1", "metrics-check-2"}, detail
    assert len({pid for _, pid in found.values()}) == 2, detail
    # The scheduler's own record of those clients: its SO_PEERCRED pid and pod "none".
    regs = {r.cid: r for r in parse_text(log_since(host_lab, offset)).registrations}
    for cid, pid in found.values():
        assert regs[cid].host_pid == pid and regs[cid].pod == "none" and regs[cid].namespace == "none"
    # Nothing of the check is left on the hosts (its node sampler and dmon are stopped with the probes).
    assert not leftovers(host_lab), leftovers(host_lab)


@LAB
def test_two_concurrent_probes_on_one_gpu_are_two_clients(host_lab: HostLab, inventory_file: Path,
                                                          tmp_path: Path) -> None:
    wait_idle(host_lab)
    cluster = schema.load(inventory_file).cluster(CLUSTER)
    backend = HostBackend(cluster)
    args = ("--n", "1024", "--duration-s", "60", "--interval-s", "1", "--no-progress")
    specs = [WorkloadSpec("probe-a", "w5_quota_probe", args=args, node=NODE),
             WorkloadSpec("probe-b", "w5_quota_probe", args=args, same_gpu_as="probe-a")]
    backend.prepare_run(f"two-{os.getpid()}")
    backend.begin_case(tmp_path, "two-probes")
    try:
        backend.start_pods(specs)
        records = {r.name: r for r in backend.wait_running(["probe-a", "probe-b"], 60)}
        assert all(r.phase == "Running" and r.host_pid for r in records.values()), records
        deadline = time.monotonic() + 30
        while True:  # until both registered and both printed their Client ID line
            matches = [client_match("host", n, record=records[n], log=backend.read_log(n))
                       for n in ("probe-a", "probe-b")]
            exp = parse_exposition(page(host_lab))
            if all(m.client_ids and matched_clients(exp, m) for m in matches) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        clients = exp.values("client_info")
        # Same GPU key, same pod/namespace: only client_id and host_pid tell the two apart.
        assert len(clients) == 2 and {(s.label("pod"), s.label("namespace"), s.label("gpu_uuid"))
                                      for s in clients} == {("none", "none", "0")}, exp.values("client_info")
        line = checklist.load_checks(exp, expected_clients=2, matches=matches)[0]
        assert line.item == "client_info per client" and line.ok, line
        hits = [matched_clients(exp, m) for m in matches]
        assert [len(h) for h in hits] == [1, 1] and hits[0][0][0].label("client_id") != hits[1][0][0].label("client_id")
        for m, h in zip(matches, hits, strict=True):
            assert h[0][1].startswith(f"host_pid {m.host_pids[0]}"), h
        # The check can fail: one probe's key for two expected clients, and the old pod-name key.
        assert not checklist.load_checks(exp, expected_clients=2, matches=matches[:1])[0].ok
        assert not any(matched_clients(exp, client_match("k8s", n)) for n in ("probe-a", "probe-b"))
        backend.harvest()
    finally:
        backend.cleanup()
        backend.close()
    # The scheduler-log analysis at judgment time: each probe's registration found by its own pid.
    assert not (tmp_path / "gpu_mapping.txt").exists()  # the harvest stores evidence only
    assert write_gpu_mapping(Evidence.load(tmp_path, "host")) == ["gpu_mapping.txt"]
    rows = [ln.split("\t") for ln in (tmp_path / "gpu_mapping.txt").read_text().splitlines()[1:]]
    assert {r[0]: (r[2], r[3].split(" and ")[0]) for r in rows} == {
        n: ("0", f"host_pid {records[n].host_pid}") for n in ("probe-a", "probe-b")}, rows
    summary = parse_text((tmp_path / "scheduler.log").read_text())
    assert summary.gpu_client_counts.get("0") == 2
    for m in matches:
        assert [r.host_pid for r, _ in registrations_of(summary, m)] == list(m.host_pids)


@LAB
def test_metrics_suite_in_host_mode(host_lab: HostLab, inventory_file: Path, tmp_path: Path) -> None:
    wait_idle(host_lab)
    # MET-003/006/008 run on a lab of their own (test_met_probe_cases_in_host_mode: MET-008 fills the GPU)
    got = metrics_suite(inventory_file, tmp_path, "healthy", *HOST_ONLY, *NEEDS_KUBERNETES)
    statuses = {k: v["status"] for k, v in got.items()}
    want = {c: "PASS" for c in HOST_ONLY} | {c: "SKIP" for c in NEEDS_KUBERNETES}
    assert statuses == want, json.dumps({k: v["summary"] for k, v in got.items()}, indent=1)
    assert all("needs Kubernetes" in got[c]["summary"] for c in NEEDS_KUBERNETES), got
    assert "matched by host_pid" in got["MET-002"]["summary"]
    case = tmp_path / ".tmplog" / "healthy" / "xpushare" / CLUSTER / "metrics" / "MET-002"
    probe = json.loads((case / "plan.json").read_text())["probe"]
    pid = next(p["host_pid"] for p in json.loads((case / "pods.json").read_text()) if p["name"] == probe)
    rows = [ln.split("\t") for ln in (case / "gpu_mapping.txt").read_text().splitlines()[1:]]
    assert len(rows) == 1 and rows[0][:3] == [probe, NODE, "0"] and rows[0][3].startswith(f"host_pid {pid} and "), rows
    regs = parse_text((case / "scheduler.log").read_text()).registrations
    assert [(r.host_pid, r.pod, r.namespace) for r in regs] == [(pid, "none", "none")]


@LAB
def test_metrics_missing_mutant_fails_the_load_part(host_lab: HostLab, inventory_file: Path, tmp_path: Path) -> None:
    build = build_mutant("metrics-missing")
    wait_idle(host_lab)
    host_lab.set_sut(NODE, build.directory)
    try:
        offset = log_size(host_lab)
        proc = invoke("metrics-check", "--cluster", CLUSTER, "--inventory", str(inventory_file))
        lines = check_lines(proc.stdout)
        detail = proc.stdout[-6000:] + proc.stderr[-2000:]
        assert proc.returncode == 1, detail
        assert lines["required families exported"][1] == "FAIL" and "client_info" in lines[
            "required families exported"][0], detail
        observed, status = lines["load 1: client_info per client"]
        assert status == "FAIL" and observed.startswith("0; not found: metrics-check-1 [host_pid "), detail
        # The real scheduler did register the probe, with the pid the tool looked for.
        pid = int(re.search(r"metrics-check-1 \[host_pid (\d+)", observed).group(1))  # type: ignore[union-attr]
        regs = parse_text(log_since(host_lab, offset)).registrations
        assert pid in [r.host_pid for r in regs], detail
        got = metrics_suite(inventory_file, tmp_path, "mutant", "MET-002")
        assert got["MET-002"]["status"] == "FAIL", got["MET-002"]["summary"]
    finally:
        host_lab.set_sut(NODE, None)


def unloadable_library_build(tmp_path: Path, lab: HostLab) -> Path:
    """A build directory with the lab's real scheduler and a ``libxpushare.so`` the dynamic loader refuses (a text
    file: what a wrong ``sut_lib`` path or a truncated copy gives)."""
    build = tmp_path / "unloadable-build"
    build.mkdir()
    for item in lab.sut.directory.iterdir():
        (build / item.name).symlink_to(item)
    (build / "libxpushare.so").unlink()
    (build / "libxpushare.so").write_text("not a shared object\n", encoding="utf-8")
    return build


def spread_case(tmp_path: Path, mutant: str | None = None, *, unloadable: bool = False
                ) -> tuple[dict[str, Any], Path, str]:
    """FUNC-003 on a lab of one host with two simulated GPUs (its scheduler and library from ``mutant``'s
    build, if given; with ``unloadable``, a library the loader refuses): ``(result.json, case directory, output
    tail)``."""
    require_lab("host-mode lab", unavailable_reason())
    build = build_mutant(mutant) if mutant is not None else None
    w2 = ["--n", "512", "--iters", "300", "--no-progress"]  # 3.1 ms per kernel on a 1e9 B/s GPU: about 1 s
    with HostLab(tmp_path / "lab", nodes=("hl-solo",), gpus=2, base_address="127.0.74.1") as lab:
        inv = lab.write_inventory(tmp_path / "inventory.yaml", params={
            "func003_pods": 4, "workload_args": {"w2_medium_add": w2}})
        if build is not None:  # the inventory's sut_lib is a link to the host's build: both switch
            lab.set_sut("hl-solo", build.directory)
        if unloadable:
            lab.set_sut("hl-solo", unloadable_library_build(tmp_path, lab))
        proc = invoke("func", "--cluster", CLUSTER, "--inventory", str(inv), "--run-id", "spread", "--root",
                      str(tmp_path), "--case", "FUNC-003")
    case = tmp_path / ".tmplog" / "spread" / "xpushare" / CLUSTER / "functional" / "FUNC-003"
    detail = proc.stdout[-3000:] + proc.stderr[-2000:]
    assert (case / "result.json").is_file(), detail
    return json.loads((case / "result.json").read_text()), case, detail


@LAB
def test_spread_case_in_host_mode_judges_the_registrations(tmp_path: Path) -> None:
    """FUNC-003 on one host with two simulated GPUs: each workload's GPU is the one the real scheduler
    registered it on (matched by the pid the backend recorded), not the tool's own placement."""
    got, case, detail = spread_case(tmp_path)
    assert got["status"] == "PASS", detail
    spread = next(c for c in got["checks"] if c["name"] == "spread_over_gpus")["values"]
    pids = {p["name"]: p["host_pid"] for p in json.loads((case / "pods.json").read_text())}
    assert spread["distinct_gpus"] == 2 and "not_registered" not in spread, spread
    assert {p: s.split(" and ")[0] for p, s in spread["gpu_source"].items()} == {
        p: f"registration (host_pid {pid}" for p, pid in pids.items()}, spread
    rows = [ln.split("\t") for ln in (case / "gpu_mapping.txt").read_text().splitlines()[1:]]
    assert sorted(r[2] for r in rows) == ["0", "0", "1", "1"], rows
    assert [r[6] for r in rows] == ["yes"] * 4 and all(r[4] == r[5] for r in rows), rows  # SUT key == NVML
    assert (case / "scheduler_node.txt").read_text().strip() == "hl-solo"
    identity = next(c for c in got["checks"] if c["name"] == "gpu_identity")
    path = next(c for c in got["checks"] if c["name"] == "sut_in_path")
    assert identity["ok"] is True and len(identity["values"]["agree"]) == 4, identity
    assert path["ok"] is True and len(path["values"]["registered"]) == 4, path
    env = (case / "pods" / "func-003-w2-1.environ.txt").read_text()
    assert "CUDA_VISIBLE_DEVICES=" in env and "NVIDIA_VISIBLE_DEVICES" not in env and "LD_PRELOAD=" in env, env


@LAB
def test_spread_case_fails_when_every_client_registers_on_one_gpu(tmp_path: Path) -> None:
    """The library of the ``gpu-key-ignores-cuda-visible-devices`` mutant ignores the CUDA_VISIBLE_DEVICES
    the tool placed each workload with: the workloads still run on both GPUs (NVML, through the node sampler,
    sees them there), but the scheduler registers all of them under one key (``default``), so FUNC-003 FAILs
    on the SUT's GPU identity, naming each disagreement, while the spread itself (NVML's truth) holds."""
    got, case, detail = spread_case(tmp_path, "gpu-key-ignores-cuda-visible-devices")
    assert got["status"] == "FAIL" and got["summary"].startswith("gpu_identity: the SUT's GPU identity is wrong"), \
        detail
    identity = next(c for c in got["checks"] if c["name"] == "gpu_identity")
    assert identity["ok"] is False and len(identity["values"]["disagree"]) == 4, identity
    spread = next(c for c in got["checks"] if c["name"] == "spread_over_gpus")
    assert spread["ok"] is True and spread["values"]["distinct_gpus"] == 2, spread
    pods = json.loads((case / "pods.json").read_text())
    assert sorted(p["gpu_key"] for p in pods) == ["0", "0", "1", "1"], pods  # the tool's placement spread
    rows = [ln.split("\t") for ln in (case / "gpu_mapping.txt").read_text().splitlines()[1:]]
    assert [r[2] for r in rows] == ["default"] * 4, rows
    assert [r[6] for r in rows] == ["NO"] * 4 and len({r[5] for r in rows}) == 2, rows


@LAB
def test_spread_case_with_a_library_the_loader_refuses_is_error(tmp_path: Path) -> None:
    """``sut_lib`` names a file the dynamic loader cannot preload: the workloads run without the SUT (the loader
    only warns), so their success says nothing about it. FUNC-003 is ERROR "SUT not in the path", never PASS."""
    got, case, detail = spread_case(tmp_path, unloadable=True)
    assert got["status"] == "ERROR" and got["summary"].startswith(
        "premise unmet: sut: SUT not in the path: func-003-w2-1: preload refused"), detail
    path = next(c for c in got["checks"] if c["name"] == "sut_in_path")
    assert path["ok"] is None and len(path["values"]["not_in_path"]) == 4, path
    assert "cannot be preloaded" in (case / "pods" / "func-003-w2-1.log").read_text()


@LAB
@pytest.mark.slow
def test_met_probe_cases_in_host_mode(tmp_path: Path) -> None:
    """MET-003, MET-006 and MET-008 in host mode, on the real scheduler's ``/metrics`` and the host backend's node
    sampler and dmon, PASS on the healthy build, and each FAILs under a mutant of the exporter: ``values-off-10``
    (MET-003: managed memory 10 % high), ``gpu-memory-sampled-once`` (MET-008: GPU memory frozen at its first
    sample; MET-003 FAILs on it too, on gpu_memory_follows_nvml: seen, not repeated here to save a run),
    ``utilization-smoothing-halved`` (MET-006: half of dmon's utilisation).
    ``running-clients-high-water`` cannot show in host mode: no client there has a limit, so none ever takes the
    lock. On the healthy build MET-003 may FAIL on ``running_memory_within_reports`` alone: finding 23 (a client
    record the scheduler does not initialise counts a client that holds no lock as running), intermittent.
    One host with one small simulated GPU (MET-008's probe fills 85 % of it, in host memory), the workloads
    keyed by GPU UUID (``visible_devices: uuid``: with the default index key the exporter finds no NVML process
    memory for a host-mode client, finding 9, and MET-003 FAILs on the healthy build for it)."""
    require_lab("host-mode lab", unavailable_reason())
    # the healthy build and each mutant on a host lab of its own, the four runs at once (tests/lab/labpool.py):
    # each waits on its settle times and probe durations, and judges memory and utilisation read from the NVML of
    # its own simulated GPU, which the other labs do not touch
    runs: dict[str | None, tuple[str, ...]] = {None: HOST_PROBE_CASES, **{m: tuple(b) for m, b in MET_MUTANTS.items()}}
    with contextlib.ExitStack() as stack:
        labs = []
        for i in range(len(runs)):
            lab = stack.enter_context(HostLab(tmp_path / f"lab{i}", nodes=("hl-met",), gpus=1,
                                              base_address=f"127.0.{81 + i}.1", gpu_memory_bytes=LAB_GPU_MEMORY_BYTES))
            data = lab.inventory(params={**PARAMS, "met003_alloc_mib": 16, "met006_duration_s": 10,
                                         "met008_n": met008_n(LAB_GPU_MEMORY_BYTES), "met008_duration_s": 6})
            data["clusters"][CLUSTER]["visible_devices"] = "uuid"
            inv = tmp_path / f"inventory{i}.yaml"
            inv.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
            labs.append((lab, inv))

        def one(lab_inv: tuple[HostLab, Path], mutant: str | None) -> dict[str, dict[str, Any]]:
            lab, inv = lab_inv
            if mutant is not None:
                lab.set_sut("hl-met", build_mutant(mutant).directory)
            return metrics_suite(inv, tmp_path / (mutant or "healthy"), f"met-{mutant or 'healthy'}", *runs[mutant])

        outcomes = run_on_labs(labs, list(runs), one)
    cases = HOST_PROBE_CASES
    got = outcome_of(outcomes, None)
    detail = {c: (got[c]["summary"], [k["name"] for k in got[c]["checks"] if k["ok"] is not True]) for c in cases}
    assert got["MET-006"]["status"] == got["MET-008"]["status"] == "PASS", detail
    assert got["MET-003"]["status"] == "PASS" or (got["MET-003"]["status"] == "FAIL" and not_ok(got["MET-003"]) == {
        "running_memory_within_reports": False} and "0 lock holder(s)" in got["MET-003"]["summary"]), detail
    case = tmp_path / "healthy" / ".tmplog" / "met-healthy" / "xpushare" / CLUSTER / "metrics"
    plan3 = json.loads((case / "MET-003" / "plan.json").read_text())
    assert plan3["node"] == "hl-met" and plan3["sampler"]["source"] == "backend", plan3
    assert plan3["gauges"]["core_limit"] is None and (case / "MET-003" / "sampler" / "hl-met_procs.csv").is_file()
    assert json.loads((case / "MET-006" / "plan.json").read_text())["dmon"]["source"] == "backend"
    # each mutant FAILs the case on what it breaks (MET-003: the named check, beside finding 23's)
    for mutant, broken in MET_MUTANTS.items():
        bad = outcome_of(outcomes, mutant)
        for c, check in broken.items():
            assert bad[c]["status"] == "FAIL", (mutant, c, bad[c]["summary"])
            assert check is None or not_ok(bad[c]).get(check) is False, (mutant, c, not_ok(bad[c]))


#: The exporter's mutants of :func:`test_met_probe_cases_in_host_mode`: mutant -> {the case it breaks: the check
#: that FAILs, None for the case's verdict alone}.
MET_MUTANTS: dict[str, dict[str, str | None]] = {
    "values-off-10": {"MET-003": "managed_follows_client_reports"},
    "gpu-memory-sampled-once": {"MET-008": None},
    "utilization-smoothing-halved": {"MET-006": None},
}


def not_ok(result: dict[str, Any]) -> dict[str, bool | None]:
    """``check name -> ok`` of a result's checks that did not pass."""
    return {c["name"]: c["ok"] for c in result["checks"] if c["ok"] is not True}
