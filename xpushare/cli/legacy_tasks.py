"""Invoke tasks that mirror the legacy ``tests/remote-test-*.sh`` scripts (``docs/legacy.md``).

Root tasks ``deploy`` and ``baseline-compare``, and the ``legacy`` namespace (``legacy.cross-gpu N``,
``legacy.small N``, ...). Task bodies only parse flags and call :mod:`xpushare.legacy`; exit statuses are
the README's.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from invoke import Collection, Context

from xpushare.cli import defaults, flags
from xpushare.cli.flags import CLUSTER_HELP, INVENTORY_HELP, ROOT_HELP
from xpushare.cli.guard import guarded
from xpushare.cli.taskdef import task
from xpushare.model.errors import UsageError
from xpushare.report.output import OUTPUT_HELP, output_format

__all__ = ["baseline_compare", "deploy", "legacy"]

COMMON_HELP = {
    "cluster": CLUSTER_HELP,
    "run_id": "run id (default: YYYYmmdd-HHMMSS now); several scenarios can share one run",
    "set": "parameter override name=value (repeatable): legacy_* scenario parameters, deploy_* setup parameters",
    "root": ROOT_HELP,
    "inventory": INVENTORY_HELP,
}
SETUP_HELP = {
    "skip_setup": "skip the setup pipeline (the script's -s/--skip-setup): use the deployed system as it is",
    "mode": "scheduling mode written into the scheduler DaemonSet by the setup: auto | serial | concurrent "
            "(the script's --serial = --mode serial)",
    "autocommit": "setup step 0: commit uncommitted changes of the source tree first",
    "source": "the SUT checkout to sync and build (default: the deploy_source parameter)",
}


def _scenario(name: str, cluster: str | None, *, count: Any = None, suffix: str | None = None,
              keep_sut: bool = False, skip_setup: bool = False, mode: str = "auto", autocommit: bool = False,
              source: str | None = None, run_id: str | None = None, set_: Sequence[str] | None = None,
              root: str = ".", inventory_: str | None = None) -> None:
    def body() -> Any:
        from xpushare.legacy.run import LegacyRequest, run_scenario

        request = LegacyRequest(
            scenario=name, cluster=defaults.need_cluster(cluster),
            count=flags.count("N", count, 1) if count is not None else None,
            mode=mode, skip_setup=skip_setup, autocommit=autocommit, source=source, suffix=suffix,
            keep_sut=keep_sut, run_id=run_id, overrides=set_ or (), inventory_path=inventory_, root=Path(root),
        )
        return run_scenario(request, out=sys.stdout)

    guarded(body)


# ------------------------------------------------------------------------------------------ root tasks


@task(
    help={
        **COMMON_HELP,
        "mode": "scheduling mode written into the scheduler DaemonSet: auto | serial | concurrent",
        "skip_setup": "skip steps 0-2 (commit, sync, build): redeploy the images that exist",
        "autocommit": "step 0: git add -A + commit in the source tree when it has changes",
        "source": "the SUT checkout to sync and build (default: the deploy_source parameter)",
        "set": "deploy parameter name=value (repeatable), e.g. --set deploy_make='make build-base all'",
        "sut_src": "host mode: the SUT source tree to build on each GPU host (default: $XPUSHARE_SUT_SRC)",
    },
    iterable=["set_"],
)
def deploy(c: Context, cluster: str | None = None, mode: str = "auto", skip_setup: bool = False,
           autocommit: bool = False, source: str | None = None, run_id: str | None = None,
           set_: list[str] | None = None, root: str = ".", inventory_: str | None = None,
           sut_src: str | None = None) -> None:
    """Deploy the SUT: the Kubernetes setup pipeline of remote-test.sh, or a host-mode build and start on each GPU host.

    Kubernetes: the setup pipeline of remote-test.sh (commit, sync, remote make, render,
    redeploy the DaemonSets, verify the mode). Host mode: build the SUT from --sut-src on each GPU host, install
    it where the inventory says (sut_lib, scheduler.binary), start the scheduler with its metrics on, and build the
    CUDA error-injection shim for FAIL-005..007 into <scheduler.state_dir>/faultshim/."""

    def body() -> Any:
        from xpushare.cli.sut_tasks import deploy_host_mode
        from xpushare.deploy.k8s_pipeline import DeployRequest, run_deploy
        from xpushare.inventory import schema

        name = defaults.need_cluster(cluster)
        spec = schema.load(inventory_).cluster(name)
        if spec.is_host:
            return deploy_host_mode(spec, sut_src or source)

        request = DeployRequest(cluster=name, mode=mode, skip_setup=skip_setup, autocommit=autocommit,
                                source=source, run_id=run_id, overrides=set_ or (), inventory_path=inventory_,
                                root=Path(root))
        return run_deploy(request, out=sys.stdout)

    guarded(body)


@task(
    name="baseline-compare",
    help={
        "run_id": "the stored run with legacy cross-gpu / small / idle-small scenarios (required)",
        "baseline": "baseline YAML (default: baselines/t4-seed004.yaml; legacy.baseline writes one per run)",
        "cluster": "only this cluster of the run (default: all)",
        "root": ROOT_HELP,
        "output": OUTPUT_HELP + " (one record: run_id, baseline, gpu_model, comparisons, own_baseline_s)",
    },
    cluster_default=False,
)
def baseline_compare(c: Context, run_id: str | None = None, baseline: str | None = None,
                     cluster: str | None = None, root: str = ".", output: str | None = None) -> None:
    """Contrast a run with stored baselines: virtualization overhead, concurrency efficiency, idle density."""

    def body() -> Any:
        from xpushare.legacy.compare import baseline_compare as compare

        fmt = output_format(output)
        if not run_id:
            raise UsageError("--run-id is required")
        return compare(run_id, baseline, root=Path(root), cluster=cluster, out=sys.stdout, fmt=fmt)

    guarded(body)


# ------------------------------------------------------------------------------------- legacy namespace

_POD_HELP = {**COMMON_HELP, **SETUP_HELP, "count": "N: number of pods (positional; the script's first argument)"}


@task(name="cross-gpu", positional=["count"], help=_POD_HELP, iterable=["set_"])
def cross_gpu(c: Context, count: str, cluster: str | None = None, skip_setup: bool = False, mode: str = "auto",
              autocommit: bool = False, source: str | None = None, run_id: str | None = None,
              set_: list[str] | None = None, root: str = ".", inventory_: str | None = None) -> None:
    """remote-test.sh N: N pytorch-add pods (oversub on) across the GPUs; tables and statistics (script default 3)."""
    _scenario("cross-gpu", cluster, count=count, skip_setup=skip_setup, mode=mode, autocommit=autocommit,
              source=source, run_id=run_id, set_=set_, root=root, inventory_=inventory_)


@task(name="small", positional=["count"], help=_POD_HELP, iterable=["set_"])
def small(c: Context, count: str, cluster: str | None = None, skip_setup: bool = False, mode: str = "auto",
          autocommit: bool = False, source: str | None = None, run_id: str | None = None,
          set_: list[str] | None = None, root: str = ".", inventory_: str | None = None) -> None:
    """remote-test-small.sh N: N pytorch-add-small pods at once (script default 10)."""
    _scenario("small", cluster, count=count, skip_setup=skip_setup, mode=mode, autocommit=autocommit,
              source=source, run_id=run_id, set_=set_, root=root, inventory_=inventory_)


@task(name="idle-small", positional=["count"], help=_POD_HELP, iterable=["set_"])
def idle_small(c: Context, count: str, cluster: str | None = None, skip_setup: bool = False,
               mode: str = "auto", autocommit: bool = False, source: str | None = None,
               run_id: str | None = None, set_: list[str] | None = None, root: str = ".",
               inventory_: str | None = None) -> None:
    """remote-test-idle-small.sh N: N pytorch-add-idle-small pods at once (script default 10)."""
    _scenario("idle-small", cluster, count=count, skip_setup=skip_setup, mode=mode, autocommit=autocommit,
              source=source, run_id=run_id, set_=set_, root=root, inventory_=inventory_)


@task(help={**COMMON_HELP, "keep_sut": "do not delete the SUT DaemonSets first (the script always does)"},
      iterable=["set_"])
def baseline(c: Context, cluster: str | None = None, keep_sut: bool = False, run_id: str | None = None,
             set_: list[str] | None = None, root: str = ".", inventory_: str | None = None) -> None:
    """remote-base-test.sh: native nvidia.com/gpu pods (pytorch-add, -small, -idle-small) one by one; baseline.yaml."""
    _scenario("baseline", cluster, keep_sut=keep_sut, run_id=run_id, set_=set_, root=root, inventory_=inventory_)


_SETUP_ONLY = {**COMMON_HELP, **SETUP_HELP}


@task(help=_SETUP_ONLY, iterable=["set_"])
def memlimit(c: Context, cluster: str | None = None, skip_setup: bool = False, mode: str = "auto",
             autocommit: bool = False, source: str | None = None, run_id: str | None = None,
             set_: list[str] | None = None, root: str = ".", inventory_: str | None = None) -> None:
    """remote-test-memlimit.sh: 1Gi limit must be refused, 4Gi and no limit must pass."""
    _scenario("memlimit", cluster, skip_setup=skip_setup, mode=mode, autocommit=autocommit, source=source,
              run_id=run_id, set_=set_, root=root, inventory_=inventory_)


@task(name="dynamic-limit", help=_SETUP_ONLY, iterable=["set_"])
def dynamic_limit(c: Context, cluster: str | None = None, skip_setup: bool = False, mode: str = "auto",
                  autocommit: bool = False, source: str | None = None, run_id: str | None = None,
                  set_: list[str] | None = None, root: str = ".", inventory_: str | None = None) -> None:
    """remote-test-dynamic-limit.sh: memory annotations 2Gi, 4Gi, removed, 1Gi on a running pod."""
    _scenario("dynamic-limit", cluster, skip_setup=skip_setup, mode=mode, autocommit=autocommit, source=source,
              run_id=run_id, set_=set_, root=root, inventory_=inventory_)


@task(name="compute-limit", help=_SETUP_ONLY, iterable=["set_"])
def compute_limit(c: Context, cluster: str | None = None, skip_setup: bool = False, mode: str = "auto",
                  autocommit: bool = False, source: str | None = None, run_id: str | None = None,
                  set_: list[str] | None = None, root: str = ".", inventory_: str | None = None) -> None:
    """remote-test-compute-limit.sh: core limit 30, 80, removed on a running pod; dmon sm per phase."""
    _scenario("compute-limit", cluster, skip_setup=skip_setup, mode=mode, autocommit=autocommit, source=source,
              run_id=run_id, set_=set_, root=root, inventory_=inventory_)


@task(name="complex", help=_SETUP_ONLY, iterable=["set_"])
def complex_(c: Context, cluster: str | None = None, skip_setup: bool = False, mode: str = "auto",
             autocommit: bool = False, source: str | None = None, run_id: str | None = None,
             set_: list[str] | None = None, root: str = ".", inventory_: str | None = None) -> None:
    """remote-test-complex.sh: two pods, core limits 30/60 then 70/20 then removed; dmon per GPU."""
    _scenario("complex", cluster, skip_setup=skip_setup, mode=mode, autocommit=autocommit, source=source,
              run_id=run_id, set_=set_, root=root, inventory_=inventory_)


@task(positional=["suffix"], help={**_SETUP_ONLY, "suffix": "log suffix: the scheduler log is also kept as "
                                   "scheduler<suffix>.log (positional; the script's first argument)"},
      iterable=["set_"])
def complex2(c: Context, suffix: str, cluster: str | None = None, skip_setup: bool = False, mode: str = "auto",
             autocommit: bool = False, source: str | None = None, run_id: str | None = None,
             set_: list[str] | None = None, root: str = ".", inventory_: str | None = None) -> None:
    """remote-test-complex2.sh SUFFIX: four pods at a 50% core limit (two, settle, two more)."""
    _scenario("complex2", cluster, suffix=str(suffix), skip_setup=skip_setup, mode=mode, autocommit=autocommit,
              source=source, run_id=run_id, set_=set_, root=root, inventory_=inventory_)


@task(help=_SETUP_ONLY, iterable=["set_"])
def smoke(c: Context, cluster: str | None = None, skip_setup: bool = False, mode: str = "auto",
          autocommit: bool = False, source: str | None = None, run_id: str | None = None,
          set_: list[str] | None = None, root: str = ".", inventory_: str | None = None) -> None:
    """remote-test-smoke.sh: one probe pod, then /healthz and /metrics of its node's scheduler."""
    _scenario("smoke", cluster, skip_setup=skip_setup, mode=mode, autocommit=autocommit, source=source,
              run_id=run_id, set_=set_, root=root, inventory_=inventory_)


legacy = Collection("legacy", cross_gpu, small, idle_small, baseline, memlimit, dynamic_limit, compute_limit,
                    complex_, complex2, smoke)
