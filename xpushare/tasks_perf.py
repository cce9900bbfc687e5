"""Invoke task ``perf``: the performance suite PERF-001..011 (seed 000 sections 9, 16.4, 17.4).

``tasks.py`` imports this module and adds every task of :data:`TASKS` to its namespace. The task is thin:
it builds a :class:`~xpushare.engine.RunRequest` for the ``performance`` suite and hands it to the
engine; exit statuses are those of the README (0 ok, 1 a FAIL/ERROR, 2 usage, 3 unreachable, 130 Ctrl-C).
"""

from __future__ import annotations

from invoke import task

from xpushare.cli import run_suite

_HELP = {
    "cluster": "cluster name from the inventory (required), e.g. c1, lab",
    "case": "run only this case id (repeatable), e.g. --case PERF-011 --case PERF-004",
    "playbook": "preset from playbooks/ (smoke, release, all) or a YAML path",
    "run_id": "run id (default: YYYYmmdd-HHMMSS now); with --resume, the run to continue",
    "resume": "re-run only the cases whose latest verdict is not PASS, in the same run dir",
    "set": "override a parameter/threshold (repeatable), e.g. --set perf_quota_tolerance=0.1 "
    "--set perf_baseline_min_s=120 (see docs/performance.md)",
    "root": "directory that holds .tmplog/ (default: the current one)",
    "inventory": "inventory YAML (default: $XPUSHARE_INVENTORY, else inventory/inventory.yaml)",
}


@task(help=_HELP, iterable=["case", "set_"])
def perf(c, cluster, case=None, playbook=None, run_id=None, resume=False, set_=None, root=".", inventory_=None):
    """Run the performance suite PERF-001..011 (baseline, quota precision, overhead, latency, scale) and judge it."""

    run_suite("performance", cluster, case, playbook, run_id, resume, set_, root, inventory_)


TASKS = [perf]
