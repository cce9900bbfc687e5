"""The data xpushare ships, found through the installed package (:mod:`importlib.resources`).

Kept here so that a non-editable ``pip install`` runs every suite from any directory; the repository root
keeps links of the same names (``playbooks/``, ``manifests/``, ``baselines/``, ``workloads/``) so the
documented repository paths still work.

- ``playbooks/``: YAML presets (smoke, release, all, local) of ``--playbook NAME``;
- ``manifests/``: the pod and ConfigMap templates, ``legacy/`` DaemonSets, ``envcheck/`` objects;
- ``baselines/``: stored baselines of ``invoke baseline-compare``;
- ``workloads/``: the W1–W7 scripts, the node sampler and ``envcheck/`` node scripts (copied to nodes);
- ``required_metrics.yaml``: the metric families MET-002 and ``invoke metrics-check`` require;
- ``templates/``: the Jinja2 templates of the reports (``report.html.j2``).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

__all__ = ["baselines_dir", "data_dir", "manifests_dir", "playbooks_dir", "templates_dir", "workloads_dir"]


def data_dir() -> Path:
    """This package's directory as a real path. Raises ``RuntimeError`` when the package is not plain
    files (a zip import): the suites hand these paths to subprocesses and ``scp``, so they must exist."""
    root = resources.files(__name__)
    if not isinstance(root, Path):
        raise RuntimeError(f"xpushare's data is not on the file system ({root!r}); install it as plain files")
    return root


def playbooks_dir() -> Path:
    """``playbooks/``: one ``<name>.yaml`` per preset of ``--playbook NAME``."""
    return data_dir() / "playbooks"


def manifests_dir() -> Path:
    """``manifests/``: ``pod.yaml`` (every Pod, :mod:`xpushare.backends.k8s_manifests`), ``workloads-configmap.yaml``,
    ``legacy/`` and ``envcheck/`` templates."""
    return data_dir() / "manifests"


def baselines_dir() -> Path:
    """``baselines/``: stored baseline YAML files (``t4-seed004.yaml``)."""
    return data_dir() / "baselines"


def workloads_dir() -> Path:
    """``workloads/``: the workload scripts (``w1_large_add.py`` ...), ``node_sampler.py`` and ``envcheck/``."""
    return data_dir() / "workloads"


def templates_dir() -> Path:
    """``templates/``: the Jinja2 report templates (``report.html.j2``)."""
    return data_dir() / "templates"
