"""Which release profile decides each cluster of a run, as run.json records it (``release_profiles``).

Per cluster: the inventory's ``release_profile`` or the default of its mode and GPUs
(:attr:`~xpushare.inventory.schema.ClusterSpec.release_profile_name`), or a playbook's ``required`` list when
it gives one; whether the cluster has the SUT in its workloads' path at all
(:func:`xpushare.inventory.release.sut_in_path`). :func:`xpushare.report.summaries.release_decision` decides from
this record (docs/release.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from xpushare.engine.plan import Selection
from xpushare.inventory import release
from xpushare.inventory.schema import ClusterSpec

__all__ = ["profile_record", "profile_records"]


def profile_record(cluster: ClusterSpec, selection: Selection, playbook: str | None = None) -> dict[str, Any]:
    """``{"profile", "source", "description", "required": [case ids], "sut": bool, "sut_reason"}`` of ``cluster``.

    ``source``: ``inventory release_profile``, ``default for <mode> mode, <n> GPU(s)`` or ``playbook <name>
    required``."""
    sut, why = release.sut_in_path(kubernetes=cluster.is_kubernetes, sut_lib=cluster.sut_lib)
    if selection.required_given:
        name = f"playbook:{playbook}" if playbook else "playbook"
        return {"profile": name, "source": "the playbook's required list", "description": "",
                "required": sorted(selection.required), "sut": sut, "sut_reason": why}
    name = cluster.release_profile_name
    found = release.profile(name)
    if cluster.release_profile:
        source = "inventory release_profile"
    else:
        gpus = release.gpu_count(cluster.gpu_count, [h.gpus for h in cluster.hosts if "gpu" in h.roles])
        known = "GPU count unknown" if gpus is None else f"{gpus} GPU(s)"
        source = f"default for {cluster.mode} mode, {cluster.gpu_model or 'GPU model unknown'}, {known}"
    return {"profile": name, "source": source, "description": found.description, "required": list(found.cases),
            "sut": sut, "sut_reason": why}


def profile_records(clusters: Iterable[ClusterSpec], selection: Selection,
                    playbook: str | None = None) -> dict[str, dict[str, Any]]:
    """:func:`profile_record` of each cluster, by name."""
    return {c.name: profile_record(c, selection, playbook) for c in clusters}
