"""The compute probe and the simulated driver's launch paths without the SUT: ``cuLaunchKernelEx``, explicit and
captured CUDA graphs and ``cuGraphLaunch`` put their kernels on the device's one shared timeline like
``cuLaunchKernel`` (tests/lab/README-simgpu.md), resolvable through ``cuGetProcAddress``; the probe's two clocks
agree, and two probes on one simulated GPU split it whatever their launch paths.

The module runs last, alone (``cpu_exclusive``, tests/cpu_share.py; 7 s): the simulated device is busy only while
its client gets a CPU to launch on, so a probe's busy share and two probes' split measure the machine's load when
the lab modules beside it take the cores (busy 0.66 in one half-second interval of a full run, against 0.85, where
it had read 0.92 with four labs on two cores)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.lab.build import BuildError
from tests.lab.simgpu import SimDevice, build_simgpu, make_uuid, write_config
from tests.paths import REPO_ROOT
from xpushare.parsers.compute_probe import ComputeProbeLine, parse_text

pytestmark = [pytest.mark.cpu_exclusive]
PROBE = REPO_ROOT / "xpushare" / "data" / "workloads" / "compute_probe.py"
PATHS = ("cuLaunchKernel", "cuLaunchKernelEx", "cuGraphLaunch")


def sim_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a process on one simulated GPU (built once; SKIP where it cannot be built)."""
    if not sys.platform.startswith("linux"):
        pytest.skip("the simulated GPU needs Linux")
    try:
        build = build_simgpu()
    except BuildError as exc:
        if os.environ.get("XPUSHARE_REQUIRE_LAB") == "1":
            raise
        pytest.skip(f"cannot build the simulated GPU: {exc}")
    config = tmp_path / "devices"
    if not config.exists():
        write_config(config, [SimDevice(make_uuid(0), "NVIDIA A100-SXM4-80GB", 2 << 30, 1e12, 1e12)])
    env = {**os.environ, **build.env(config)}
    env.pop("LD_PRELOAD", None)
    return env


def _start(env: dict[str, str], path: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(PROBE), "--path", path, "--kernel-ms", "2", "--interval-s", "0.5",
                             *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _lines(proc: subprocess.Popen[str]) -> list[ComputeProbeLine]:
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, (out, err)
    return parse_text(out)


@pytest.mark.parametrize("path", PATHS)
def test_each_launch_path_alone_fills_the_gpu_and_both_clocks_agree(tmp_path: Path, path: str) -> None:
    lines = _lines(_start(sim_env(tmp_path), path, "--intervals", "2"))
    assert [x.interval for x in lines] == [0, 1] and all(x.status == "ok" and x.path == path for x in lines)
    for x in lines:
        assert abs(x.kernel_ms_events - 2.0) < 0.05 and x.device == "sim", x
        # the simulated device idles while its only client waits for a CPU: 0.92 with four labs on two cores
        assert x.busy_events > 0.85 and abs(x.busy_wall / x.busy_events - 1) < 0.05, x
        assert x.kernels % 8 == 0 and 200 < x.kernels_per_s <= 500, x


def test_two_probes_on_one_gpu_split_it_whatever_their_paths(tmp_path: Path) -> None:
    env = sim_env(tmp_path)
    a, b = _start(env, "cuLaunchKernel", "--intervals", "4"), _start(env, "cuGraphLaunch", "--intervals", "4")
    la, lb = _lines(a), _lines(b)
    both = [(x.busy_events, y.busy_events) for x, y in zip(la[1:3], lb[1:3], strict=True)]  # while both ran
    for ka, kb in both:
        assert 0.3 < ka < 0.7 and 0.3 < kb < 0.7 and 0.9 < ka + kb < 1.05, both


CLIENT = textwrap.dedent("""
    import ctypes, json, time
    cu = ctypes.CDLL("libcuda.so.1")
    V = ctypes.c_void_p
    assert cu.cuInit(0) == 0
    ctx = V()
    assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0 and cu.cuCtxSetCurrent(ctx) == 0
    found = {}
    for name in (b"cuLaunchKernelEx", b"cuGraphCreate", b"cuGraphAddKernelNode", b"cuGraphInstantiate",
                 b"cuGraphInstantiateWithFlags", b"cuGraphLaunch", b"cuGraphExecDestroy", b"cuGraphDestroy",
                 b"cuStreamBeginCapture", b"cuStreamEndCapture", b"cuStreamIsCapturing"):
        fn = V()
        found[name.decode()] = cu.cuGetProcAddress(name, ctypes.byref(fn), 12040, ctypes.c_uint64(0)) == 0
    mod, f, s = V(), V(), V()
    assert cu.cuModuleLoadData(ctypes.byref(mod), b"x") == 0
    assert cu.cuModuleGetFunction(ctypes.byref(f), mod, b"simgpu_sleep") == 0
    assert cu.cuStreamCreate(ctypes.byref(s), 0) == 0
    ns = ctypes.c_ulonglong(100_000_000)
    params = (V * 1)(ctypes.addressof(ns))
    class Cfg(ctypes.Structure):
        _fields_ = [("g", ctypes.c_uint * 7), ("stream", V), ("attrs", V), ("n", ctypes.c_uint)]
    def timed(fn):
        t = time.monotonic(); fn(); assert cu.cuStreamSynchronize(s) == 0; return round(time.monotonic() - t, 2)
    out = {"found": found}
    out["ex"] = timed(lambda: cu.cuLaunchKernelEx(ctypes.byref(Cfg((ctypes.c_uint * 7)(1, 1, 1, 1, 1, 1, 0), s,
                                                                   None, 0)), f, params, None))
    status = ctypes.c_int()
    assert cu.cuStreamBeginCapture_v2(s, 0) == 0
    assert cu.cuStreamIsCapturing(s, ctypes.byref(status)) == 0
    out["capturing"] = status.value
    out["capture_launch"] = timed(lambda: [cu.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, params, None)
                                           for _ in range(2)])
    g, e = V(), V()
    assert cu.cuStreamEndCapture(s, ctypes.byref(g)) == 0
    ns.value = 1  # node arguments were copied when captured
    assert cu.cuGraphInstantiateWithFlags(ctypes.byref(e), g, ctypes.c_ulonglong(0)) == 0
    out["graph"] = timed(lambda: cu.cuGraphLaunch(e, s))
    out["destroy"] = [cu.cuGraphExecDestroy(e), cu.cuGraphDestroy(g), cu.cuGraphLaunch(e, s)]
    out["legacy_capture"] = cu.cuStreamBeginCapture_v2(V(1), 0)
    print(json.dumps(out))
""")


def test_the_new_entry_points_resolve_and_run_on_the_timeline(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", CLIENT], env=sim_env(tmp_path), capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert all(out["found"].values()), out["found"]
    assert out["ex"] == pytest.approx(0.1, abs=0.03)  # one 100 ms kernel through cuLaunchKernelEx
    assert out["capturing"] == 1 and out["capture_launch"] < 0.03  # captured, not run
    assert out["graph"] == pytest.approx(0.2, abs=0.03)  # the two captured 100 ms nodes, their own arguments
    assert out["destroy"] == [0, 0, 400]  # a destroyed executable graph: CUDA_ERROR_INVALID_HANDLE
    assert out["legacy_capture"] == 801  # the legacy stream cannot be captured: CUDA_ERROR_NOT_SUPPORTED
