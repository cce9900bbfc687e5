"""Invoke tasks of the stability suite: ``stab``, ``leak``, ``fail`` and ``soak`` (tasks.py adds every task in TASKS).

``stab`` / ``leak`` / ``fail`` run STAB-001..004 / LEAK-001..005 / FAIL-001..004 through the engine like
``invoke func``; ``fail`` SKIPs every case unless ``--allow-disruptive`` is given (it restarts DaemonSets and
drains a node). ``soak`` runs one long STAB case with live progress, hourly interim reports and ``--resume``
(docs/soak.md).
"""

from __future__ import annotations

from pathlib import Path

from invoke import task

from xpushare import engine
from xpushare.cli import guarded
from xpushare.errors import UsageError

INVENTORY_HELP = "inventory YAML (default: $XPUSHARE_INVENTORY, else inventory/inventory.yaml)"
RUN_HELP = {
    "cluster": "cluster name from the inventory (required), e.g. c1, c2, lab",
    "case": "run only this case id (repeatable)",
    "playbook": "preset from playbooks/ or a YAML path",
    "run_id": "run id (default: YYYYmmdd-HHMMSS now); with --resume, the run to continue",
    "resume": "re-run only the cases whose latest verdict is not PASS, in the same run dir",
    "set": "override a parameter/threshold: --set name=value (repeatable), e.g. --set stab_duration_s=3600",
    "root": "directory that holds .tmplog/ (default: the current one)",
    "inventory": INVENTORY_HELP,
}


def _prefixed(prefix: str) -> tuple[str, ...]:
    from xpushare.cases import REGISTRY

    return tuple(sorted(c for c in REGISTRY if c.startswith(prefix + "-")))


def _run(prefix, cluster, case, playbook, run_id, resume, set_, root, inventory_, extra=()):
    def body():
        request = engine.RunRequest(
            cluster=cluster,
            case_ids=case or (() if playbook else _prefixed(prefix)),
            playbook=playbook,
            run_id=run_id,
            resume=resume,
            overrides=(*(set_ or ()), *extra),
            inventory_path=inventory_,
            root=Path(root),
        )
        return engine.run(request)

    guarded(body)


@task(help=RUN_HELP, iterable=["case", "set_"])
def stab(c, cluster, case=None, playbook=None, run_id=None, resume=False, set_=None, root=".", inventory_=None):
    """Run STAB-001..004 (seed 000 §10.1): soaks of 6 h / 24 h by default (--set stab_duration_s=S)."""
    _run("STAB", cluster, case, playbook, run_id, resume, set_, root, inventory_)


@task(help=RUN_HELP, iterable=["case", "set_"])
def leak(c, cluster, case=None, playbook=None, run_id=None, resume=False, set_=None, root=".", inventory_=None):
    """Run LEAK-001..005 (seed 000 §10.2): RSS/FD trends, GPU memory recovery, ghost clients, series growth."""
    _run("LEAK", cluster, case, playbook, run_id, resume, set_, root, inventory_)


@task(help={**RUN_HELP, "allow_disruptive": "really inject the faults (restart DaemonSets, drain a node); "
                                            "without it every FAIL case is SKIP"},
      iterable=["case", "set_"])
def fail(c, cluster, allow_disruptive=False, case=None, playbook=None, run_id=None, resume=False, set_=None,
         root=".", inventory_=None):
    """Run FAIL-001..004 (seed 000 §10.3): fault injection, only with --allow-disruptive; restores in finally."""
    extra = ("allow_disruptive=true",) if allow_disruptive else ()
    _run("FAIL", cluster, case, playbook, run_id, resume, set_, root, inventory_, extra)


@task(
    help={
        "cluster": "cluster name from the inventory (required), e.g. c2",
        "case": "STAB-001..004 (default STAB-002: 16-32 mixed W2/W3 pods)",
        "hours": "soak duration in hours (default: the case's, 24 h for STAB-002)",
        "minutes": "soak duration in minutes (short runs; added to --hours)",
        "run_id": "run id (default: now); with --resume, the soak to continue",
        "resume": "continue an interrupted soak in the same run dir and time series",
        "set": "override a parameter: --set sample_interval_s=10 (repeatable)",
        "root": "directory that holds .tmplog/ (default: the current one)",
        "inventory": INVENTORY_HELP,
    },
    iterable=["set_"],
    auto_shortflags=False,
)
def soak(c, cluster, case="STAB-002", hours=None, minutes=None, run_id=None, resume=False, set_=None, root=".",
         inventory_=None):
    """Soak a cluster for hours: rounds of a STAB mix, sampling, checkpoints, interim reports (docs/soak.md)."""
    from xpushare.soak.runner import SoakRequest
    from xpushare.soak.runner import soak as run_soak

    def body():
        duration = None
        if hours is not None or minutes is not None:
            try:
                duration = float(hours or 0) * 3600 + float(minutes or 0) * 60
            except ValueError:
                raise UsageError("--hours/--minutes take a number") from None
        request = SoakRequest(cluster=cluster, case=case, duration_s=duration, run_id=run_id, resume=resume,
                              overrides=tuple(set_ or ()), inventory_path=inventory_, root=Path(root))
        return run_soak(request)

    guarded(body)


TASKS = [stab, leak, fail, soak]
