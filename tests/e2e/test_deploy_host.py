"""The SUT on a host-mode cluster: layout validation, and deploy / status / restart / stop / undeploy of the real
SUT (built from its source) on a ``connection: local`` host, its scheduler supervised as a background process."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.lab.build import BuildError, require_tools
from tests.lab.sshd import free_port
from tests.lab.sut import default_source
from xpushare.cases.gpu_fault_injector import find_injector
from xpushare.deploy import host as host_sut
from xpushare.deploy import run_on_cluster
from xpushare.inventory import schema
from xpushare.model.errors import UsageError
from xpushare.model.gpu_faults import deployed_shim
from xpushare.transport.base import CommandResult
from xpushare.transport.local import LocalHost


def cluster_text(root: Path, port: int, extra: str = "") -> str:
    return f"""
clusters:
  bm1:
    mode: host
    sut: xpushare
    sut_lib: {root}/lib/libxpushare.so
    scheduler:
      binary: {root}/bin/xpushare-scheduler
      log_file: {root}/log/scheduler.log
      metrics_url: http://127.0.0.1:{port}
      state_dir: {root}/state
      env: {{XPUSHARE_DEBUG: "1"}}
{extra}    hosts:
      box: {{connection: local, roles: [master, gpu]}}
"""


def test_layout_names_every_missing_setting_with_an_example() -> None:
    bare = schema.parse("clusters:\n  bm1:\n    mode: host\n    hosts:\n"
                           "      box: {connection: local, roles: [gpu]}\n")
    with pytest.raises(UsageError) as exc:
        host_sut.HostSutLayout.of(bare.cluster("bm1"))
    message = str(exc.value)
    assert "\n" not in message
    for key in ("sut_lib", "scheduler.log_file", "scheduler.metrics_url"):
        assert key in message
    assert "scheduler.binary" not in message and "scheduler.state_dir" not in message  # defaulted
    minimal = schema.parse(cluster_text(Path("/x"), 9402).replace("      binary: /x/bin/xpushare-scheduler\n", "")
                           .replace("      state_dir: /x/state\n", ""))
    layout = host_sut.HostSutLayout.of(minimal.cluster("bm1"))
    assert (layout.scheduler, layout.state_dir) == ("/usr/local/bin/xpushare-scheduler", "/var/lib/xpushare")
    relative = schema.parse(cluster_text(Path("/x"), 9402).replace("/x/state", "state"))
    with pytest.raises(UsageError, match=r"scheduler\.state_dir must be absolute"):
        host_sut.HostSutLayout.of(relative.cluster("bm1"))
    no_port = schema.parse(cluster_text(Path("/x"), 9402).replace("http://127.0.0.1:9402", "http://127.0.0.1"))
    with pytest.raises(UsageError, match="HOST:PORT"):
        host_sut.HostSutLayout.of(no_port.cluster("bm1"))


def test_layout_starts_the_scheduler_with_metrics_on_and_the_inventory_env() -> None:
    layout = host_sut.HostSutLayout.of(schema.parse(cluster_text(Path("/opt/x"), 9500)).cluster("bm1"))
    env = layout.scheduler_env()
    assert env["XPUSHARE_METRICS_ENABLE"] == "1" and env["XPUSHARE_METRICS_ADDR"] == "127.0.0.1:9500"
    assert env["XPUSHARE_DEBUG"] == "1" and layout.ctl == "/opt/x/bin/xpusharectl"
    unit = host_sut.unit_text(layout)
    assert "ExecStart=/opt/x/bin/xpushare-scheduler\n" in unit and "Restart=always" in unit
    assert 'Environment="XPUSHARE_METRICS_ENABLE=1"' in unit


def test_a_tree_that_is_not_the_sut_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not an xpushare source tree"):
        host_sut.source_tarball(tmp_path, tmp_path)


def test_missing_build_tools_are_named_in_one_line(tmp_path: Path) -> None:
    """A host whose PATH has no compiler: deploy stops before copying anything, naming what is missing."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sh", "tar", "echo"):
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)

    class BareHost(LocalHost):
        def run(self, argv: Sequence[str], **kw: Any) -> CommandResult:
            return super().run(["env", f"PATH={bin_dir}", *argv], **kw)

    layout = host_sut.HostSutLayout.of(schema.parse(cluster_text(tmp_path, 9402)).cluster("bm1"))
    with pytest.raises(host_sut.DeployError) as exc:
        host_sut.build_and_install(BareHost("bare"), layout, tmp_path / "unused.tar.gz")
    assert str(exc.value).startswith("bare: cannot build the SUT: missing gcc, make")
    assert not (tmp_path / "state").exists()


def is_manager_probe(argv: Sequence[str]) -> bool:
    """The command of ``host_sut.manager_of`` (a script that prints ``systemd`` or ``process``)."""
    return len(argv) == 3 and argv[0] == "sh" and "echo systemd" in argv[2]


class ScriptedHost(LocalHost):
    """A host whose scheduler runs (pid 4242, supervised process) but whose ``/healthz`` answers ``code``;
    records every command it was asked to run."""

    def __init__(self, name: str, code: str) -> None:
        super().__init__(name)
        self.code = code
        self.calls: list[tuple[str, ...]] = []

    def run(self, argv: Sequence[str], **kw: Any) -> CommandResult:
        self.calls.append(tuple(argv))
        if argv[0] == "curl":  # the scraper's GET: the body, then curl's status trailer
            out = f"ok\n\nHTTP_CODE={self.code}\n"
        elif is_manager_probe(argv):
            out = "process\n"
        else:
            out = "4242\n"
        return CommandResult(self.name, tuple(argv), out, "", 0, 0.0)


def test_status_exits_1_for_a_running_scheduler_whose_healthz_fails(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A scheduler with a pid but /healthz 500 is not a healthy SUT: the exit status follows
    ``SchedulerStatus.healthy``, not the word "running"."""
    cluster = schema.parse(cluster_text(tmp_path, 9402)).cluster("bm1")
    monkeypatch.setattr("xpushare.deploy.connect", lambda spec: ScriptedHost(spec.name, "500"))
    out = io.StringIO()
    assert run_on_cluster(cluster, "status", out=out) == 1, out.getvalue()
    assert "running (pid 4242, process, /healthz 500)" in out.getvalue()
    monkeypatch.setattr("xpushare.deploy.connect", lambda spec: ScriptedHost(spec.name, "200"))
    assert run_on_cluster(cluster, "status", out=out) == 0, out.getvalue()
    out = io.StringIO()
    assert run_on_cluster(cluster, "status", out=out, fmt="json") == 0
    [record] = json.loads(out.getvalue())  # sut.status --output json
    assert record["host"] == "box" and record["result"] == "ok" and "/healthz 200" in record["detail"]


def test_wait_healthy_asks_for_the_manager_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each poll is the pid and /healthz only: how the scheduler is run does not change while polling."""
    layout = host_sut.HostSutLayout.of(schema.parse(cluster_text(tmp_path, 9402)).cluster("bm1"))
    host = ScriptedHost("box", "503")
    monkeypatch.setattr(host_sut.time, "sleep", lambda s: None)
    with pytest.raises(host_sut.DeployError, match="not healthy"):
        host_sut.wait_healthy(host, layout, timeout_s=0.05)
    polls = [c for c in host.calls if c[0] == "curl"]
    managers = [c for c in host.calls if is_manager_probe(c)]
    assert len(polls) >= 2 and len(managers) == 1


@pytest.mark.lab
@pytest.mark.slow
def test_deploy_runs_the_real_scheduler_and_undeploy_removes_it(tmp_path: Path) -> None:
    try:
        require_tools("the xpushare SUT", ("gcc", "make"), ("curl/curl.h",))
    except BuildError as exc:
        pytest.skip(str(exc))
    if os.geteuid() != 0:
        pytest.skip("the real scheduler's socket directory /var/run/xpushare needs root")
    root = tmp_path / "inst"
    port = free_port("127.0.0.1")
    cluster = schema.parse(cluster_text(root, port)).cluster("bm1")
    layout = host_sut.HostSutLayout.of(cluster)
    out = io.StringIO()
    try:
        assert run_on_cluster(cluster, "deploy", src=default_source(), out=out) == 0, out.getvalue()
        assert "started (process)" in out.getvalue()
        for installed in (layout.library, layout.scheduler, layout.ctl):
            assert os.access(installed, os.X_OK), installed
        first = host_sut.status(LocalHost("box"), layout)
        assert first.healthy and first.manager == "process"
        # the supervisor restarts a scheduler that dies, as a DaemonSet would
        os.kill(first.pid or 0, 9)
        again = host_sut.wait_healthy(LocalHost("box"), layout, timeout_s=15)
        assert again.pid != first.pid
        assert run_on_cluster(cluster, "restart", out=out) == 0
        assert run_on_cluster(cluster, "stop", out=out) == 0
        assert not host_sut.status(LocalHost("box"), layout).healthy
        assert run_on_cluster(cluster, "status", out=out) == 1  # a stopped scheduler is not a healthy SUT
        assert run_on_cluster(cluster, "undeploy", out=out) == 0
        assert not Path(layout.library).exists() and not Path(layout.state_dir).exists()
        assert "Metrics server listening on 127.0.0.1" in Path(layout.log_file).read_text()  # the log stays
    finally:
        host_sut.stop(LocalHost("box"), layout)


def test_deploy_builds_the_fault_shim_where_fail_005_looks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``invoke deploy``'s last step on each GPU host: the error-injection shim built with gcc against the driver the
    host's loader finds first (here a stand-in ``libcuda.so.1`` in ``LD_LIBRARY_PATH``) and installed at
    ``<state_dir>/faultshim/libcuda.so.1``, the path FAIL-005..007 find it at without any setting."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc not installed")
    driver = tmp_path / "driver"
    driver.mkdir()
    (driver / "libcuda.so.1").write_bytes(b"\x7fELF a stand-in driver\n")
    monkeypatch.setenv("LD_LIBRARY_PATH", str(driver))
    cluster = schema.parse(cluster_text(tmp_path / "inst", 9402)).cluster("bm1")
    layout = host_sut.HostSutLayout.of(cluster)
    before = find_injector(cluster, {}, lambda: {"box": LocalHost("box")})
    assert isinstance(before, str) and "no shim installed by invoke deploy" in before
    path = host_sut.install_fault_shim(LocalHost("box"), layout, sys.executable)
    assert path == deployed_shim(layout.state_dir) == f"{tmp_path}/inst/state/faultshim/libcuda.so.1"
    assert b"[FAULTSHIM]" in Path(path).read_bytes()
    assert os.readlink(Path(path).with_name("libcuda-real.so.1")) == str(driver / "libcuda.so.1")
    found = find_injector(cluster, {}, lambda: {"box": LocalHost("box")})
    assert not isinstance(found, str) and found.shim == path and found.source == f"invoke deploy ({path})"


def test_a_shim_that_cannot_be_built_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No driver for the shim to stand in front of: build.py's ``error:`` line becomes one line of the host's deploy
    detail (deploy itself goes on: the SUT stays deployed and FAIL-005..007 SKIP naming the missing shim)."""
    if "libcuda.so.1" in subprocess.run(["sh", "-c", "ldconfig -p 2>/dev/null"], capture_output=True,
                                        text=True).stdout:
        pytest.skip("this machine has a CUDA driver")
    monkeypatch.setenv("LD_LIBRARY_PATH", "")
    cluster = schema.parse(cluster_text(tmp_path / "inst", 9402)).cluster("bm1")
    layout = host_sut.HostSutLayout.of(cluster)
    with pytest.raises(host_sut.DeployError, match=r"^box: fault shim not built: no libcuda.so.1 in `ldconfig -p`"):
        host_sut.install_fault_shim(LocalHost("box"), layout, sys.executable)
