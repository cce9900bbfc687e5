"""Faults injected by the simulated GPU (``SIMGPU_FAULT``; tests/lab/README-simgpu.md "Injected faults").

Each client is a small ctypes program on the stub driver; the kernel log is a file named by ``SIMGPU_KMSG``
(set here; the lab's nodes get their own), the health counters are read from the device's state file.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.lab.build import BuildError
from tests.lab.simgpu import GiB, SimDevice, SimGpuBuild, build_simgpu, make_uuid, write_config
from tests.lab.simgpu_faults import Health, read_health
from xpushare.model.gpu_faults import KINDS, SIM_ENV, fault_spec

DEV0 = SimDevice(make_uuid(0, "faults"), "NVIDIA A100-SXM4-40GB", 4 * GiB, 1e12, 1e12)
DEV1 = SimDevice(make_uuid(1, "faults"), "NVIDIA A100-SXM4-40GB", 4 * GiB, 1e12, 1e12)

#: argv: device index, then ops (launch, sync, copy, alloc); prints one JSON line per op with its result code.
CLIENT = textwrap.dedent(r'''
    import ctypes, json, sys
    cu = ctypes.CDLL("libcuda.so.1")
    U64 = ctypes.c_ulonglong
    def emit(**kw):
        print(json.dumps(kw), flush=True)
    rc = cu.cuInit(0)
    emit(op="init", rc=rc)
    if rc != 0:
        sys.exit(0)
    ctx = ctypes.c_void_p()
    emit(op="retain", rc=cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), int(sys.argv[1])))
    cu.cuCtxSetCurrent(ctx)
    mod, f = ctypes.c_void_p(), ctypes.c_void_p()
    cu.cuModuleLoadData(ctypes.byref(mod), b"image")
    cu.cuModuleGetFunction(ctypes.byref(f), mod, b"simgpu_sleep")
    cu.cuMemAlloc_v2.argtypes = [ctypes.POINTER(U64), ctypes.c_size_t]
    ns = U64(1000)
    params = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.byref(ns), ctypes.c_void_p))
    for op in sys.argv[2:]:
        if op == "launch":
            rc = cu.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, None, params, None)
        elif op == "sync":
            rc = cu.cuCtxSynchronize()
        elif op == "alloc":
            p = U64(0)
            rc = cu.cuMemAlloc_v2(ctypes.byref(p), 4096)
        elif op.startswith("sleep"):
            import time
            time.sleep(float(op[5:]))
            rc = 0
        name = ctypes.c_char_p()
        cu.cuGetErrorName(rc, ctypes.byref(name))
        emit(op=op, rc=rc, name=(name.value or b"?").decode())
''')


@pytest.fixture(scope="module")
def simgpu() -> SimGpuBuild:
    try:
        return build_simgpu()
    except BuildError as exc:
        pytest.skip(f"simulated GPU not buildable: {exc}")


class Node:
    def __init__(self, build: SimGpuBuild, tmp: Path) -> None:
        self.build = build
        self.config = write_config(tmp / "devices", [DEV0, DEV1])
        self.kmsg = tmp / "kmsg"

    def run(self, device: int, *ops: str, fault: str | None = None) -> tuple[list[dict[str, Any]], str]:
        env = {k: v for k, v in os.environ.items() if k not in ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")}
        env.update(self.build.env(self.config), SIMGPU_KMSG=str(self.kmsg))
        env.pop(SIM_ENV, None)
        if fault is not None:
            env[SIM_ENV] = fault
        proc = subprocess.run([sys.executable, "-c", CLIENT, str(device), *ops], capture_output=True, text=True,
                              env=env, timeout=60, check=True)
        return [json.loads(line) for line in proc.stdout.splitlines()], proc.stderr

    def kmsg_lines(self) -> list[str]:
        return self.kmsg.read_text().splitlines() if self.kmsg.exists() else []

    def health(self, dev: SimDevice) -> Health:
        return read_health(self.config, dev.uuid)


@pytest.fixture()
def node(simgpu: SimGpuBuild, tmp_path: Path) -> Node:
    return Node(simgpu, tmp_path)


def _rcs(out: list[dict[str, Any]]) -> list[int]:
    return [o["rc"] for o in out if o["op"] not in ("init", "retain")]


KMSG = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d,\d{6}\+00:00 NVRM: Xid \(PCI:0000:(?P<bus>[0-9a-f]{2}):00\): "
                  r"(?P<xid>\d+), pid=(?P<pid>\d+), name=(?P<name>[^,]+), .+$")


@pytest.mark.parametrize("kind", ["illegal-address", "ecc-uncorrectable", "launch-failure"])
def test_sticky_error_after_n_calls_with_its_xid_line(node: Node, kind: str) -> None:
    k = KINDS[kind]
    out, _ = node.run(0, "launch", "sync", "launch", "sync", "launch", "alloc", fault=fault_spec(kind, after_calls=3))
    assert _rcs(out) == [0, 0, 0, k.cuda_error, k.cuda_error, k.cuda_error]
    assert out[-1]["name"] == k.cuda_error_name
    lines = node.kmsg_lines()
    assert len(lines) == 1
    m = KMSG.match(lines[0])
    assert m and int(m["xid"]) == k.xid and m["bus"] == "01" and m["name"].startswith("python")
    ecc = kind == "ecc-uncorrectable"
    assert node.health(DEV0) == Health(ecc_volatile_uncorrected=int(ecc), ecc_aggregate_uncorrected=int(ecc),
                                       retired_pages_dbe=int(ecc))
    # another process on the same GPU is not affected (the error is this context's)
    again, _ = node.run(0, "launch", "sync")
    assert _rcs(again) == [0, 0]


def test_device_lost_fails_every_process_on_that_gpu_only(node: Node) -> None:
    out, _ = node.run(1, "launch", "sync", fault=fault_spec("device-lost", after_calls=1))
    assert _rcs(out) == [0, 999]
    assert node.health(DEV1).lost == 1 and node.health(DEV0).lost == 0
    (m,) = [KMSG.match(line) for line in node.kmsg_lines()]
    assert m and m["xid"] == "79" and m["bus"] == "02"
    assert "GPU has fallen off the bus." in node.kmsg_lines()[0]
    # a new process that sees the lost GPU: cuInit fails
    late, _ = node.run(1, "launch")
    assert late == [{"op": "init", "rc": 999}]
    # the other GPU works, for a process that sees only it
    env_other, _ = node.run(0, "launch", "sync")
    assert env_other[0]["rc"] == 999  # it sees both GPUs: cuInit fails, as for a node with a lost GPU


def test_device_lost_hits_a_running_neighbour(node: Node, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")}
    env.update(node.build.env(node.config), SIMGPU_KMSG=str(node.kmsg))
    neighbour = subprocess.Popen([sys.executable, "-c", CLIENT, "0", "launch", "sleep1.5", "launch", "sync"],
                                 stdout=subprocess.PIPE, text=True, env=env)
    out, _ = node.run(0, "sleep0.3", "launch", fault=fault_spec("device-lost", after_calls=0))
    assert _rcs(out) == [0, 999]
    stdout, _ = neighbour.communicate(timeout=30)
    rcs = _rcs([json.loads(line) for line in stdout.splitlines()])
    assert rcs == [0, 0, 999, 999]  # launch, sleep, then the GPU is gone


def test_after_seconds_and_gpu_filter(node: Node) -> None:
    out, _ = node.run(0, "launch", "sleep0.5", "launch", fault=fault_spec("launch-failure", after_s=0.4))
    assert _rcs(out) == [0, 0, 719]
    # gpu= names another device: nothing happens on this one
    out, _ = node.run(0, "launch", "launch", fault=fault_spec("launch-failure", after_calls=0, gpu=DEV1.uuid))
    assert _rcs(out) == [0, 0]
    out, _ = node.run(1, "launch", "launch", fault=fault_spec("launch-failure", after_calls=1, gpu="1"))
    assert _rcs(out) == [0, 719]


@pytest.mark.parametrize("bad", ["melt-down:after_calls=1", "launch-failure", "launch-failure:after_calls=x",
                                 "launch-failure:after_calls=1:gpu=GPU-nope", "launch-failure:when=1"])
def test_bad_specification_injects_nothing_and_says_so(node: Node, bad: str) -> None:
    out, err = node.run(0, "launch", "sync", fault=bad)
    assert _rcs(out) == [0, 0]
    assert "[SIMGPU] SIMGPU_FAULT:" in err and "no fault injected" in err
    assert node.kmsg_lines() == []


def test_fault_spec_validation() -> None:
    assert fault_spec("ecc-uncorrectable", after_s=2.5, gpu="0") == "ecc-uncorrectable:after_s=2.5:gpu=0"
    for kw in ({}, {"after_calls": 1, "after_s": 1.0}, {"after_calls": -1}):
        with pytest.raises(ValueError):
            fault_spec("launch-failure", **kw)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown GPU fault kind"):
        fault_spec("melt-down", after_calls=1)
