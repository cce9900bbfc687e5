"""Invoke task of the metrics suite: ``invoke metrics --cluster C`` runs MET-001..008 (xpushare/cases/metrics.py).

``tasks.py`` adds every task of :data:`TASKS`. The flags are those of ``invoke func`` / ``invoke combo``;
the run directory, reports and exit statuses are the engine's (README "Runs, artifacts and verdicts").
"""

from __future__ import annotations

from invoke import task

from xpushare.cli import run_suite

RUN_HELP = {
    "cluster": "cluster name from the inventory (required), e.g. local, c1, lab",
    "case": "run only this case id (repeatable), e.g. --case MET-001 --case MET-007",
    "playbook": "preset from playbooks/ (smoke, release, all) or a YAML path",
    "run_id": "run id (default: YYYYmmdd-HHMMSS now); with --resume, the run to continue",
    "resume": "re-run only the cases whose latest verdict is not PASS, in the same run dir",
    "set": "override a parameter/threshold: --set name=value (repeatable), e.g. --set met007_duration_s=30",
    "root": "directory that holds .tmplog/ (default: the current one)",
    "inventory": "inventory YAML (default: $XPUSHARE_INVENTORY, else inventory/inventory.yaml)",
}


@task(help=RUN_HELP, iterable=["case", "set_"])
def metrics(c, cluster, case=None, playbook=None, run_id=None, resume=False, set_=None, root=".", inventory_=None):
    """Run the metrics suite MET-001..008 (seed 000 section 11) on the scheduler serving each probe's node."""

    run_suite("metrics", cluster, case, playbook, run_id, resume, set_, root, inventory_)


TASKS = [metrics]
