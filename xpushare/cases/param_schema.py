"""The one schema of every parameter a run takes: its kind, its range and its allowed names.

Every entry point checks parameters with it before anything runs or is stored: ``--set`` of the suite tasks,
``invoke soak``, ``invoke legacy.*`` and ``invoke judge`` (:func:`xpushare.engine.plan.check_overrides`), a
playbook's ``params`` (:func:`xpushare.engine.plan.check_vacuous`), the inventory's ``params`` of a cluster
(:func:`xpushare.engine.cluster_params.check_cluster_params`, also from ``invoke hosts``). A parameter is known by
its default among the cases (``COMMON_PARAMS`` and each case's ``params``), the Kubernetes backend's settings
(:data:`xpushare.backends.k8s.K8S_DEFAULTS`) and the cluster settings other owners read (:data:`OWNED`); its rules
come from its default's type and from its name (docs/config.md "Parameters"):

- the kind of its default (:func:`value_fits`): a whole number, a number, text, true/false, a list, a mapping;
- a quantity with a unit (a name ending ``_s``, ``_ms``, ``_pct``, ``_ratio``, ``_factor``) is finite, 0..1e9;
- a count (:data:`COUNT_SUFFIXES`) is a whole number 1..:data:`MAX_COUNT`; a time window (:data:`WINDOW_SUFFIXES`),
  a timeout, a polling period and pods per GPU are above 0 (:func:`vacuous_problem`);
- a fraction (:data:`FRACTION_SUFFIXES`) is 0..1;
- a compute (core) quota (:data:`CORE_SUFFIXES`, and ``core`` in a quota mapping) is a whole percent 1..100, as
  the scheduler takes it;
- a memory quota (:data:`MEMORY_SUFFIXES`) is a quantity the scheduler accepts (``4Gi``,
  :func:`xpushare.judge.quantity.parse_quantity`), or a list of them;
- a parameter of :data:`CHOICES` is one of its names; a port is 1..65535.

Names under :data:`OWNED_PREFIXES` (``envcheck_*``, ``deploy_*``, ``legacy_*``) belong to features above the
cases, which declare their tables (:mod:`xpushare.model.param_owners`); :func:`owned_problem` checks them with the
same rules, plus each owner's own (``envcheck_cublas_iters`` at least 1), and refuses a name its owner does not have.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from xpushare.backends.k8s import K8S_DEFAULTS
from xpushare.judge.quantity import parse_quantity
from xpushare.model import param_owners
from xpushare.model.gpu_faults import KINDS
from xpushare.model.lease import DEFAULT_RENEW_S, DEFAULT_STALE_S

__all__ = ["CHOICES", "CORE_SUFFIXES", "COUNT_SUFFIXES", "FRACTION_SUFFIXES", "MAX_COUNT", "MAX_QUANTITY",
           "MEMORY_SUFFIXES", "OWNED", "OWNED_PREFIXES", "UNIT_SUFFIXES", "WINDOW_SUFFIXES", "ParamSpec",
           "cluster_setting_defaults", "owned_problem", "owned_refusal", "owned_unknown", "vacuous_problem",
           "value_fits"]

#: The largest value a quantity parameter (a name ending in a unit: ``_s``, ``_pct``, ``_ratio`` ...) takes.
MAX_QUANTITY = 1e9
#: The largest count (pods, rounds, repeats, samples ...) a parameter may ask for.
MAX_COUNT = 100_000
#: Name endings of quantities with a unit.
UNIT_SUFFIXES = ("_s", "_ms", "_pct", "_ratio", "_factor")
#: Parameters that count things a case runs or requires (pods, rounds, repeats, samples ...), by name ending.
COUNT_SUFFIXES = ("_pods", "_pods_small", "_pods_large", "_max_pods", "_repeats", "_pairs",
                  "_rounds", "_intervals", "_batch", "_n", "_min_scrapes", "_min_samples", "_min_success",
                  "_min_succeeded", "_min_changes")
#: Parameters that are a time window a case measures over (a duration, a window, a sampling interval).
WINDOW_SUFFIXES = ("_duration_s", "_window_s", "_interval_s", "_load_s")
#: Waits that end the case when they run out, and polling periods: 0 would end every wait at once or spin.
POSITIVE_SUFFIXES = ("_timeout_s", "poll_s", "poll_max_s")
#: Fractions of a whole (a share of rounds, of successes, of the memory quota ...): 0..1.
FRACTION_SUFFIXES = ("_fraction", "_overlap_ratio", "_success_ratio", "_update_ratio", "_fill_ratio", "_alert_ratio",
                     "_progress_min_ratio", "_max_drop", "_tolerance_ratio", "_tolerance", "_tolerance_t4",
                     "trend_alpha")
#: Compute (core) quotas in percent of the GPU (a number, or a list of them: ``perf003_quotas``).
CORE_SUFFIXES = ("_core_limit", "_core", "_core_from", "_core_to", "_cores", "_quotas", "_slices")
#: Memory quotas: a quantity (``4Gi``) or a list of them.
MEMORY_SUFFIXES = ("_memory_limit", "_memory_limits", "_memory_from", "_memory_to", "_memory_cycle",
                   "_memory_base")
#: Parameters that take one of a few names.
CHOICES: dict[str, tuple[str, ...]] = {
    "perf002_mode": ("scrape", "exporter"),
    "fault_injector": ("auto", "simulated-gpu"),
    "fail005_kind": tuple(KINDS),
    "trend_samples": ("idle", "all"),
}
#: Parameters of features above the cases, declared by their owners (:mod:`xpushare.model.param_owners`):
#: ``invoke envcheck`` (``envcheck_*``), ``invoke deploy`` (``deploy_*``), the legacy scenarios (``legacy_*``).
OWNED_PREFIXES = param_owners.OWNED_PREFIXES
#: Cluster settings read outside the cases, with their defaults (their kinds): the lease (``engine/lease.py``,
#: ``model/lease.py``), ``invoke metrics-check`` (``metrics_check/``).
OWNED: dict[str, Any] = {
    "lease_renew_s": DEFAULT_RENEW_S,
    "lease_stale_s": DEFAULT_STALE_S,
    "lease_path": "",
    "metrics_check_settle_s": 60.0,
    "probe_image": "",
}
_PORTS = ("_port",)


def cluster_setting_defaults() -> dict[str, list[Any]]:
    """The defaults of the cluster settings that are no case parameter: the Kubernetes backend's and :data:`OWNED`."""
    return {name: [value] for name, value in {**K8S_DEFAULTS, **OWNED}.items()}


def value_fits(default: Any, value: Any, *, measured: bool = False) -> bool:
    """Whether an override ``value`` (a parsed YAML scalar, list or mapping) may replace a parameter whose
    default is ``default``; ``measured``: the parameter is a quantity with a unit (``pod_timeout_s``).

    The same kind: a whole number is also a number; any value replaces a ``None`` default; a text parameter
    takes any scalar (``--set tag=1.0``); a whole-number default takes a fraction only when ``measured`` (a
    count such as ``perf001_repeats`` does not). A number is never NaN or infinite, and a ``measured`` one is
    0..:data:`MAX_QUANTITY` (a negative timeout or ratio would blame the system under test)."""
    if isinstance(value, float) and not math.isfinite(value):
        return False
    if measured and isinstance(value, (int, float)) and not isinstance(value, bool) \
            and not 0 <= value <= MAX_QUANTITY:
        return False
    if default is None:
        return True
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(default, bool) and isinstance(value, bool)
    if isinstance(default, int):
        return isinstance(value, int) or (isinstance(value, float) and measured)
    if isinstance(default, float):
        return isinstance(value, (int, float))
    if isinstance(default, str):
        return isinstance(value, (str, int, float))
    if isinstance(default, (list, tuple)):
        return isinstance(value, (list, tuple))
    if isinstance(default, dict):
        return isinstance(value, dict)
    return True


def vacuous_problem(name: str, defaults: Sequence[Any], value: Any) -> str | None:
    """Why ``value`` would make a case of parameter ``name`` (defaults ``defaults``) vacuous, a verdict about
    nothing: a count (:data:`COUNT_SUFFIXES`) below 1 (``func003_pods=0``: no pod runs, "0/0 pods passed"), pods
    per GPU of 0 or less, a time window (:data:`WINDOW_SUFFIXES`) of 0 s or less, an empty list where every
    default lists something (an empty quota list). None when it is not; ``None`` (the default's "choose for me")
    never is."""
    if value is None or isinstance(value, bool):
        return None
    if name.endswith(COUNT_SUFFIXES) and "_skip_" not in name:  # skipping 0 intervals is a choice
        if not isinstance(value, int):
            return f"expected a whole number of at least 1 (a count), got {value!r}"
        if value < 1:
            return f"makes the case vacuous: a count of {value} runs or requires nothing (at least 1)"
    if name.endswith("_per_gpu") and isinstance(value, (int, float)) and value <= 0:
        return f"makes the case vacuous: {value:g} pods per GPU runs nothing (more than 0)"
    if name.endswith(WINDOW_SUFFIXES) and isinstance(value, (int, float)) and value <= 0:
        return f"makes the case vacuous: a time window of {value:g} s measures nothing (more than 0)"
    listed = [d for d in defaults if d is not None]
    if isinstance(value, (list, tuple)) and not value and listed \
            and all(isinstance(d, (list, tuple)) and d for d in listed):
        return "makes the case vacuous: an empty list (give at least one item)"
    return None


_KIND_WORDS: dict[type, str] = {
    bool: "true or false", int: "a whole number", float: "a number", str: "a text value",
    list: "a list, e.g. [1, 2]", dict: "a mapping, e.g. {a: 1}",
}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _core_problem(value: Any) -> str | None:
    items = value if isinstance(value, (list, tuple)) else [value]
    for item in items:
        core = item.get("core") if isinstance(item, dict) else item
        if core is None:
            continue
        if isinstance(core, bool) or not isinstance(core, int) or not 1 <= core <= 100:
            return f"a compute (core) quota is a whole percent 1..100, got {core!r}"
    return None


def _memory_problem(value: Any) -> str | None:
    items = value if isinstance(value, (list, tuple)) else [value]
    for item in items:
        memory = item.get("memory") if isinstance(item, dict) else item
        if memory is None:
            continue
        if isinstance(memory, bool) or not isinstance(memory, (str, int)):
            return f"a memory quota is a quantity such as 4Gi, got {memory!r}"
        try:
            size = parse_quantity(str(memory))
        except ValueError as exc:
            return f"{exc} (a memory quota: a number and Gi, Mi, Ki or B, e.g. 4Gi)"
        if size <= 0:
            return f"a memory quota of 0 bytes limits nothing, got {memory!r}"
    return None


@dataclass(frozen=True)
class ParamSpec:
    """One parameter of the schema: its ``name`` and every default it has among its owners (``defaults``)."""

    name: str
    defaults: tuple[Any, ...]

    @property
    def measured(self) -> bool:
        """A quantity with a unit (``pod_timeout_s``, ``func002_min_overlap_ratio``)."""
        return self.name.endswith(UNIT_SUFFIXES)

    def problem(self, value: Any) -> str | None:
        """Why ``value`` cannot be this parameter's, as ``expected ...``, ``makes the case vacuous: ...`` or the
        rule it breaks; None when it can. ``None`` (YAML ``null``: the default's "choose for me") passes the range
        rules of a parameter whose default is ``None``."""
        name, defaults = self.name, self.defaults or (None,)
        if not any(value_fits(default, value, measured=self.measured) for default in defaults):
            kind = next((d for d in defaults if d is not None), defaults[0])
            want = _KIND_WORDS.get(type(kind), type(kind).__name__)
            if self.measured and _is_number(value):
                want = f"a finite quantity 0..{MAX_QUANTITY:g}"
            elif isinstance(value, float) and not math.isfinite(value):
                want = f"{want}, finite"
            return f"expected {want} (default {kind!r})"
        vacuous = vacuous_problem(name, defaults, value)
        if vacuous or value is None:
            return vacuous
        counted = name.endswith(COUNT_SUFFIXES) and "_skip_" not in name
        if counted and _is_number(value) and value > MAX_COUNT:
            return f"a count of at most {MAX_COUNT} (got {value!r})"
        if name.endswith(POSITIVE_SUFFIXES) and _is_number(value) and value <= 0:
            return f"expected more than 0 s (got {value!r}): a wait of 0 s ends at once"
        if name.endswith(FRACTION_SUFFIXES) and _is_number(value) and not 0 <= value <= 1 \
                and all(0 <= d <= 1 for d in defaults if _is_number(d)):  # a legacy tolerance in percent is none
            return f"a fraction 0..1 (got {value!r})"
        if name.endswith(_PORTS) and _is_number(value) and not 1 <= value <= 65535:
            return f"a port 1..65535 (got {value!r})"
        if name.endswith("_retries") and _is_number(value) and not 0 <= value <= 100:
            return f"0..100 retries (got {value!r})"
        if name.endswith(CORE_SUFFIXES) and not name.endswith(MEMORY_SUFFIXES):
            problem = _core_problem(value)
            if problem:
                return problem
        if name.endswith(MEMORY_SUFFIXES) or (name.endswith("_quotas") and isinstance(value, (list, tuple))
                                              and any(isinstance(item, dict) for item in value)):
            problem = _memory_problem(value)
            if problem:
                return problem
        if name in CHOICES and str(value) not in CHOICES[name]:
            return f"{value!r} is not one of {', '.join(CHOICES[name])}"
        return None


def spec_of(name: str, defaults: Mapping[str, Sequence[Any]]) -> ParamSpec | None:
    """The :class:`ParamSpec` of ``name`` among ``defaults`` (name -> its defaults); None for an unknown name."""
    found = defaults.get(name)
    return None if found is None else ParamSpec(name, tuple(found))


def owned_unknown(name: str) -> str | None:
    """Why the owned parameter ``name`` (:data:`OWNED_PREFIXES`) is unknown: its owner does not have it (``unknown
    parameter (known envcheck_* parameters: ...)``). None when it has it, when ``name`` is not owned, or when its
    owner is not loaded (:func:`xpushare.model.param_owners.owner_of`)."""
    owner = param_owners.owner_of(name)
    if owner is None or name in owner.defaults:
        return None
    return f"unknown parameter (known {owner.prefix}* parameters: {', '.join(sorted(owner.defaults))})"


def owned_refusal(name: str, value: Any) -> str | None:
    """Why the owned parameter ``name`` cannot be given ``value``, in words for one error line: unknown to its owner
    (:func:`owned_unknown`), or ``bad value <value>: <the rule>`` (:func:`owned_problem`); None when it can."""
    unknown = owned_unknown(name)
    if unknown:
        return unknown
    problem = owned_problem(name, value)
    return f"bad value {value!r}: {problem}" if problem else None


def owned_problem(name: str, value: Any) -> str | None:
    """Why ``value`` cannot be the owned parameter ``name``'s: the rule of this schema it breaks
    (:meth:`ParamSpec.problem` on the owner's declared defaults), else the owner's own rule. None when it can, when
    ``name`` is not owned or unknown to its owner (:func:`owned_unknown`), or when its owner is not loaded."""
    owner = param_owners.owner_of(name)
    defaults = None if owner is None else owner.defaults.get(name)
    if owner is None or defaults is None or (value is None and None in defaults):
        return None
    typed = tuple(d for d in defaults if d is not None) or (None,)
    problem = ParamSpec(name, typed).problem(value)
    if problem is None and owner.check is not None:
        problem = owner.check(name, value)
    return problem
