"""Help strings of the flags many tasks share (``invoke --help <task>`` shows them).

:data:`RUN_HELP` is the help of the flags every suite task takes (:func:`xpushare.cli.suites.suite_task`);
a suite task may give its own example for a flag, e.g. its case ids for ``--case``.
"""

from __future__ import annotations

INVENTORY_HELP = "inventory YAML (default: $XPUSHARE_INVENTORY, else inventory/inventory.yaml)"
ROOT_HELP = "directory that holds .tmplog/ (default: the current one)"

RUN_HELP: dict[str, str] = {
    "cluster": "cluster name from the inventory (required), e.g. local, c1, lab",
    "case": "run only this case id (repeatable), e.g. --case FUNC-001 --case FUNC-002",
    "playbook": "preset from playbooks/ (smoke, release, all) or a YAML path",
    "run_id": "run id (default: YYYYmmdd-HHMMSS now); with --resume, the run to continue",
    "resume": "re-run only the cases whose latest verdict is not PASS, in the same run dir",
    "set": "override a parameter/threshold: --set name=value (repeatable)",
    "root": ROOT_HELP,
    "inventory": INVENTORY_HELP,
}
