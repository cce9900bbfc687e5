"""The previous-container logs of the SUT's pods that restarted (``kubectl logs --previous``): what a crashed
scheduler or device plugin said before it died, kept as evidence by the soak and by FAIL-001..004
(docs/soak.md, docs/faults.md). File format: ``<dest>/<pod>.previous.log``, the log as kubectl gave it, or one
``# kubectl logs --previous <pod>: <error>`` line when kubectl could not give it.
"""

from __future__ import annotations

from pathlib import Path

from xpushare.backends.base import KubeAccess
from xpushare.inventory.sut import SutNames
from xpushare.model.atomic_file import atomic_write_text
from xpushare.transport.kube_errors import KubeError


def harvest_previous_logs(kube: KubeAccess, names: SutNames, dest: Path) -> list[Path]:
    """Write the previous-container log of every scheduler and device-plugin pod with a restart count above 0
    into ``dest`` (created when there is one); return the files written. A label kubectl cannot list is skipped
    (the soak's and the fault's own checks report the SUT's state); raises nothing of kubectl's."""
    got: list[Path] = []
    for label in (names.scheduler_label, names.device_plugin_label):
        try:
            pods = kube.sut_pods(label)
        except KubeError:
            continue
        for p in pods:
            if p.restart_count <= 0:
                continue
            try:
                text = kube.previous_log(p.name)
            except KubeError as exc:
                text = f"# kubectl logs --previous {p.name}: {exc}\n"
            dest.mkdir(parents=True, exist_ok=True)
            path = dest / f"{p.name}.previous.log"
            atomic_write_text(path, text)
            got.append(path)
    return got
