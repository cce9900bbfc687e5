"""The ``lab`` namespace: ``lab.up`` / ``lab.down`` start and stop the test lab of ``tests/lab/``.

The lab is test infrastructure that lives in the repository, not in the installed package: these tasks
work with ``invoke`` in a checkout's root (where ``tests`` is importable) and say so elsewhere (exit status 2).
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from invoke import Collection, Context

from xpushare.cli.guard import guarded
from xpushare.cli.taskdef import task
from xpushare.model.errors import UsageError, XpushareError

__all__ = ["lab"]

LAB_DIR = Path(".lab")


def _lab_env() -> ModuleType:
    try:
        from tests.lab import env
    except ModuleNotFoundError as exc:
        if exc.name not in ("tests", "tests.lab", "tests.lab.env"):
            raise
        raise UsageError("the test lab is in a checkout of the xpushare repository (tests/lab/): "
                         "run 'invoke lab.up' in its root") from None
    return env


GPU_MODES = ("sim", "real")


@task(name="up", help={"sut-src": "xpushare source tree to build and run (default: $XPUSHARE_SUT_SRC, else the "
                                   "upstream tree; any patched copy works)",
                       "gpus": "sim (default): simulated GPUs, 2 nodes of 2; real: this machine's NVIDIA GPUs "
                               "(nvidia-smi), the real driver and NVML, workloads on PyTorch CUDA",
                       "gpus-per-node": "with --gpus real: GPUs each lab node owns (default 1; one node per share)"})
def lab_up(c: Context, sut_src: str | None = None, gpus: str = "sim", gpus_per_node: int = 1) -> None:
    """Start the test lab (sshd hosts, the lab Kubernetes cluster running the real SUT built from source)
    and write .lab/inventory.yaml (cluster 'lab').

    ``--gpus real`` runs it on the machine's NVIDIA GPUs (tests/lab/README.md, "The lab on real GPUs"): each lab
    node owns ``--gpus-per-node`` of them, pods get their GPU's UUID in ``NVIDIA_VISIBLE_DEVICES`` and
    ``CUDA_VISIBLE_DEVICES``, and the workload sizes come from a short calibration of the add loop.

    Without a SUT source tree (``--sut-src``, ``$XPUSHARE_SUT_SRC`` or the upstream tree) it says how to give one,
    exit status 2, before anything starts, as for an unknown ``--gpus``; a start that fails later (no NVIDIA GPU
    with ``--gpus real`` included) stops what it had started (exit 1)."""

    def body() -> None:
        if gpus not in GPU_MODES:
            raise UsageError(f"--gpus must be one of {', '.join(GPU_MODES)}, not {gpus!r}")
        if int(gpus_per_node) < 1:
            raise UsageError(f"--gpus-per-node must be at least 1, not {gpus_per_node}")
        env = _lab_env()
        from tests.lab.build import BuildError
        from tests.lab.cluster import LabError
        from tests.lab.nodens import NamespaceError
        from tests.lab.realgpu import GpuDiscoveryError
        from tests.lab.sut import SourceMissing

        try:
            inventory = env.up(LAB_DIR.absolute(), sut_src=sut_src, gpus=gpus, gpus_per_node=int(gpus_per_node))
        except SourceMissing as exc:
            raise UsageError(f"no xpushare source tree at {exc.source} (no Makefile/scheduler.c): pass the SUT's "
                             "source with 'invoke lab.up --sut-src DIR' (or set $XPUSHARE_SUT_SRC)") from None
        except (BuildError, LabError, NamespaceError, GpuDiscoveryError) as exc:
            raise XpushareError(str(exc).splitlines()[0]) from None
        print(f"lab up; inventory: {inventory}")
        print("try: invoke ping --cluster lab; invoke func --cluster lab; stop with: invoke lab.down")

    guarded(body)


@task(name="down")
def lab_down(c: Context) -> None:
    """Stop exactly the lab processes that 'invoke lab.up' started."""

    def body() -> None:
        _lab_env().down(LAB_DIR.absolute())
        print("lab down")

    guarded(body)


lab = Collection("lab", lab_up, lab_down)
