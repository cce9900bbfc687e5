"""invoke deploy / sut.* for HAMi-core and MPS (deploy/host_systems) on a fake host: this machine with stand-in
``cmake``, ``make``, ``nvidia-cuda-mps-control`` on PATH and a fake CUDA_HOME, so the real scripts run and their
command lines are recorded."""

from __future__ import annotations

import dataclasses
import io
import os
import shutil
from pathlib import Path

import pytest

from xpushare import deploy
from xpushare.deploy import host_systems
from xpushare.inventory.schema import SchedulerSpec, local_cluster
from xpushare.model.errors import UsageError
from xpushare.transport.local import LocalHost

CMAKE = """#!/bin/sh
echo "cmake $*" >> "$CALLS"
"""
MAKE = """#!/bin/sh
echo "make $*" >> "$CALLS"
echo "LIBRARY_PATH=$LIBRARY_PATH CUDA_HOME=$CUDA_HOME" >> "$CALLS"
: > libvgpu.so
"""
# a stand-in MPS control daemon: -d starts it (a state file), get_server_list answers while it runs, quit stops it
MPS = """#!/bin/sh
echo "mps $* pipe=$CUDA_MPS_PIPE_DIRECTORY log=$CUDA_MPS_LOG_DIRECTORY" >> "$CALLS"
state="$CUDA_MPS_PIPE_DIRECTORY/fake-running"
if [ "$1" = -d ]; then : > "$state"; exit 0; fi
read -r cmd
echo "mps-cmd $cmd" >> "$CALLS"
case "$cmd" in
  get_server_list) [ -f "$state" ] || exit 1; echo 5100 ;;
  quit) rm -f "$state" ;;
esac
"""


@pytest.fixture
def fake_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("cmake", CMAKE), ("make", MAKE), ("nvidia-cuda-mps-control", MPS)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    cuda = tmp_path / "cuda"
    (cuda / "include").mkdir(parents=True)
    for header in ("cuda.h", "nvml.h"):
        (cuda / "include" / header).write_text("")
    calls = tmp_path / "calls.txt"
    calls.write_text("")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_HOME", str(cuda))
    monkeypatch.setenv("CALLS", str(calls))
    return tmp_path


def _hami_tree(root: Path) -> Path:
    src = root / "hami-src"
    (src / "src").mkdir(parents=True)
    (src / "CMakeLists.txt").write_text("project(libvgpu)\n")
    (src / "src" / "libvgpu.c").write_text("")
    return src


def _cluster(sut: str, tmp: Path, **kw: str | None) -> object:
    return dataclasses.replace(local_cluster(), sut=sut, sut_lib=kw.get("sut_lib"),
                               scheduler=SchedulerSpec(state_dir=str(tmp / "state")))


def test_hami_core_is_built_with_upstream_options_and_installed(fake_host: Path) -> None:
    cluster = _cluster("hami-core", fake_host, sut_lib=str(fake_host / "lib" / "hami" / "libvgpu.so"))
    out = io.StringIO()
    assert deploy.run_on_cluster(cluster, "deploy", src=_hami_tree(fake_host), out=out) == 0, out.getvalue()
    calls = (fake_host / "calls.txt").read_text()
    cmake = next(x for x in calls.splitlines() if x.startswith("cmake"))
    assert all(opt in cmake for opt in host_systems.HAMI_OPTIONS)
    assert f"-DCUDA_TOOLKIT_ROOT_DIR={fake_host}/cuda" in cmake
    assert "make -j" in calls and calls.splitlines()[1].endswith(" vgpu")  # only the library's target
    assert f"LIBRARY_PATH={fake_host}/cuda/lib64/stubs:{fake_host}/cuda/lib64" in calls
    assert (fake_host / "lib" / "hami" / "libvgpu.so").is_file()
    assert "built and installed" in out.getvalue()


def test_hami_core_prerequisites_are_named_in_one_line(fake_host: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (fake_host / "cuda" / "include" / "nvml.h").unlink()
    (fake_host / "bin" / "cmake").unlink()
    monkeypatch.setenv("PATH", f"{fake_host / 'bin'}{os.pathsep}/usr/bin:/bin")
    host = LocalHost()
    missing = host_systems.missing_hami_prerequisites(host, clone=False)
    assert f"nvml.h({fake_host}/cuda/include)" in missing and "cuda.h" not in " ".join(missing)
    assert ("cmake" in missing) == (shutil.which("cmake", path="/usr/bin:/bin") is None)
    cluster = _cluster("hami-core", fake_host, sut_lib=str(fake_host / "lib" / "libvgpu.so"))
    out = io.StringIO()
    assert deploy.run_on_cluster(cluster, "deploy", src=_hami_tree(fake_host), out=out) == 1
    failed = [x for x in out.getvalue().splitlines() if "failed" in x]
    assert len(failed) == 1 and "cannot build HAMi-core: missing" in failed[0] and "nvml.h" in failed[0]


def test_hami_core_needs_a_library_path_and_a_tree() -> None:
    with pytest.raises(UsageError, match="sut hami-core needs sut_lib"):
        host_systems.SystemLayout.of(dataclasses.replace(local_cluster(), sut="hami-core"))
    with pytest.raises(UsageError, match="not a HAMi-core source tree"):
        host_systems.hami_source_tarball(Path("/"), Path("/tmp"))


def test_hami_core_start_and_stop_clear_the_shared_region_cache(fake_host: Path) -> None:
    cache = fake_host / "cudevshr.cache"
    lib = fake_host / "libvgpu.so"
    lib.write_text("")
    cluster = dataclasses.replace(local_cluster(), sut="hami-core", sut_lib=str(lib),
                                  scheduler=SchedulerSpec(state_dir=str(fake_host / "state"),
                                                          env={"CUDA_DEVICE_MEMORY_SHARED_CACHE": str(cache)}))
    cache.write_text("old limits")
    assert deploy.run_on_cluster(cluster, "start", out=io.StringIO()) == 0
    assert not cache.exists()
    cache.write_text("old limits")
    out = io.StringIO()
    assert deploy.run_on_cluster(cluster, "stop", out=out) == 0 and not cache.exists()
    assert "has no daemon" in out.getvalue()


def test_mps_daemon_start_status_stop_per_host(fake_host: Path) -> None:
    cluster = _cluster("mps", fake_host)
    out = io.StringIO()
    assert deploy.run_on_cluster(cluster, "deploy", out=out) == 0, out.getvalue()
    assert "MPS control daemon started" in out.getvalue()
    calls = (fake_host / "calls.txt").read_text()
    pipe, log = f"{fake_host}/state/pipe", f"{fake_host}/state/log"
    assert f"mps -d pipe={pipe} log={log}" in calls
    assert (fake_host / "state" / "pipe").is_dir() and (fake_host / "state" / "log").is_dir()
    out = io.StringIO()
    assert deploy.run_on_cluster(cluster, "status", out=out) == 0 and "running (servers: 5100)" in out.getvalue()
    assert deploy.run_on_cluster(cluster, "stop", out=io.StringIO()) == 0
    assert "mps-cmd quit" in (fake_host / "calls.txt").read_text()
    out = io.StringIO()
    assert deploy.run_on_cluster(cluster, "status", out=out) == 1 and "not running" in out.getvalue()


def test_mps_without_its_control_program_is_one_line(fake_host: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (fake_host / "bin" / "nvidia-cuda-mps-control").unlink()
    monkeypatch.setenv("PATH", f"{fake_host / 'bin'}{os.pathsep}/usr/bin:/bin")
    out = io.StringIO()
    assert deploy.run_on_cluster(_cluster("mps", fake_host), "start", out=out) == 1
    assert "nvidia-cuda-mps-control not found" in out.getvalue()
