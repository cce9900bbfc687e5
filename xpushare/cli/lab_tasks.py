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


@task(name="up", help={"sut-src": "xpushare source tree to build and run (default: $XPUSHARE_SUT_SRC, else the "
                                   "upstream tree; any patched copy works)"})
def lab_up(c: Context, sut_src: str | None = None) -> None:
    """Start the test lab (3 sshd hosts, the lab Kubernetes cluster running the real SUT built from source)
    and write .lab/inventory.yaml (cluster 'lab').

    Without a SUT source tree (``--sut-src``, ``$XPUSHARE_SUT_SRC`` or the upstream tree) it says how to give one,
    exit status 2, before anything starts; a start that fails later stops what it had started (exit 1)."""

    def body() -> None:
        env = _lab_env()
        from tests.lab.build import BuildError
        from tests.lab.cluster import LabError
        from tests.lab.nodens import NamespaceError
        from tests.lab.sut import SourceMissing

        try:
            inventory = env.up(LAB_DIR.absolute(), sut_src=sut_src)
        except SourceMissing as exc:
            raise UsageError(f"no xpushare source tree at {exc.source} (no Makefile/scheduler.c): pass the SUT's "
                             "source with 'invoke lab.up --sut-src DIR' (or set $XPUSHARE_SUT_SRC)") from None
        except (BuildError, LabError, NamespaceError) as exc:
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
