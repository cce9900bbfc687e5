"""Release profiles: per kind of cluster, the case ids a release requires (docs/release.md).

The profiles are data, ``xpushare/data/release_profiles.yaml`` (``profiles: {name: {description, cases}}``); their
defaults follow the seed's matrix (seed 000 sections 6-11: the ``seed-t4`` and ``seed-a800`` profiles are the FUNC,
COMBO, PERF and MET cases whose cluster column names C1 or C2), plus ``one-gpu`` (no case that needs two GPUs),
``host`` and ``host-one-gpu`` (no Kubernetes-only case). A cluster's profile is the inventory's
``release_profile`` key (validated by :mod:`xpushare.inventory.schema`), else :func:`default_profile_name` of its
mode, GPU model and GPU count; a playbook's ``required`` list replaces the profile's cases
(:func:`xpushare.engine.plan.select`).

Whether a cluster has the SUT in its workloads' path at all (:func:`sut_in_path`): a Kubernetes cluster always
(the device plugin preloads the client library); a host-mode cluster only with ``sut_lib`` (the built-in ``local``
cluster has none), so its verdicts never decide a release.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from xpushare.data import data_dir
from xpushare.model import strict_yaml

__all__ = ["PROFILES_FILE", "ReleaseProfile", "default_profile_name", "gpu_count", "profile", "profile_names",
           "profiles", "sut_in_path"]

PROFILES_FILE = "release_profiles.yaml"
"""The file under ``xpushare/data/`` that holds the profiles."""


@dataclass(frozen=True)
class ReleaseProfile:
    """One profile: ``name`` (``seed-t4``), a one-line ``description``, the case ids a release requires."""

    name: str
    description: str
    cases: tuple[str, ...]


def _parse(doc: Any, where: str) -> dict[str, ReleaseProfile]:
    """The profiles of a loaded YAML document; ``ValueError`` naming ``where`` and the problem."""
    body = doc.get("profiles") if isinstance(doc, Mapping) else None
    if not isinstance(body, Mapping) or not body:
        raise ValueError(f"{where}: expected a mapping 'profiles' of profile names")
    out: dict[str, ReleaseProfile] = {}
    for name, spec in body.items():
        cases = spec.get("cases") if isinstance(spec, Mapping) else None
        if not isinstance(name, str) or not isinstance(cases, list) or not cases \
                or not all(isinstance(c, str) for c in cases) or len(set(cases)) != len(cases):
            raise ValueError(f"{where}: profiles.{name}: expected 'cases', a list of distinct case ids")
        out[name] = ReleaseProfile(name, str(spec.get("description") or ""), tuple(cases))
    return out


@functools.lru_cache(maxsize=1)
def profiles() -> dict[str, ReleaseProfile]:
    """Every shipped profile by name, in the file's order (read once)."""
    path = Path(data_dir()) / PROFILES_FILE
    try:
        doc = strict_yaml.load(strict_yaml.read_text(path))
    except (OSError, yaml.YAMLError) as exc:  # a damaged installation, not the user's input
        raise ValueError(f"{path}: cannot be read: {exc}") from None
    return _parse(doc, str(path))


def profile_names() -> tuple[str, ...]:
    """The shipped profiles' names."""
    return tuple(profiles())


def profile(name: str) -> ReleaseProfile:
    """The profile called ``name``; ``KeyError`` for an unknown one."""
    return profiles()[name]


def gpu_count(gpu_count_key: int | None, host_gpus: list[tuple[int, ...] | None]) -> int | None:
    """A cluster's GPUs: the sum of its GPU hosts' ``gpus`` when every GPU host declares them, else the inventory's
    ``gpu.count``, else None (not known before a host is asked)."""
    if host_gpus and all(g is not None for g in host_gpus):
        return sum(len(g or ()) for g in host_gpus)
    return gpu_count_key


def default_profile_name(*, kubernetes: bool, gpu_model: str | None, gpus: int | None) -> str:
    """The profile of a cluster without ``release_profile``: host mode -> ``host`` (``host-one-gpu`` with one
    known GPU); Kubernetes with one known GPU -> ``one-gpu``; an A800 -> ``seed-a800``; else ``seed-t4`` (the
    seed's Cluster-1 matrix, the larger of the two)."""
    if not kubernetes:
        return "host-one-gpu" if gpus == 1 else "host"
    if gpus == 1:
        return "one-gpu"
    if gpu_model and "A800" in gpu_model.upper():
        return "seed-a800"
    return "seed-t4"


def sut_in_path(*, kubernetes: bool, sut_lib: str | None) -> tuple[bool, str]:
    """Whether a cluster puts the SUT in its workloads' path, and if not why (one line)."""
    if kubernetes:
        return True, ""
    if sut_lib:
        return True, ""
    return False, ("host mode without sut_lib: the SUT's client library is not in the workloads' path, so no "
                   "verdict of this cluster is about the SUT")
