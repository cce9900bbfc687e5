"""What a run runs: suite names, playbooks, case selection, ``-p key=value`` overrides and each case's parameters."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import yaml

from xpushare.cases import REGISTRY, SUITE_ALIASES, SUITES, CaseDef
from xpushare.cases.base import COMMON_PARAMS
from xpushare.cases.param_schema import ParamSpec, cluster_setting_defaults, owned_refusal
from xpushare.data import playbooks_dir
from xpushare.inventory.schema import ClusterSpec
from xpushare.model import strict_yaml
from xpushare.model.errors import UsageError

PLAYBOOK_DIR = playbooks_dir()


@dataclass
class Selection:
    """Cases chosen for a run, the ones the release recommendation requires, and playbook parameters."""

    cases: list[CaseDef]
    required: set[str]
    params: dict[str, Any] = field(default_factory=dict)
    cluster_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    label: str = ""
    required_given: bool = False
    """The playbook gave ``required``: it replaces each cluster's release profile (docs/release.md)."""


def normalise_suite(name: str) -> str:
    """``func`` -> ``functional`` etc.; raises :class:`UsageError` for an unknown suite."""
    suite = SUITE_ALIASES.get(name, name)
    if suite not in SUITES:
        known = ", ".join((*SUITES, *SUITE_ALIASES))
        raise UsageError(f"unknown suite {name!r} (known: {known})")
    return suite


def load_playbook(name_or_path: str) -> dict[str, Any]:
    """A playbook by name (``playbooks/<name>.yaml``) or path. Raises :class:`UsageError`."""
    path = Path(name_or_path)
    if not path.suffix:
        path = PLAYBOOK_DIR / f"{name_or_path}.yaml"
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in PLAYBOOK_DIR.glob("*.yaml")))
        raise UsageError(f"playbook {name_or_path!r} not found (known: {known})")
    try:
        data = strict_yaml.load(strict_yaml.read_text(path)) or {}
    except yaml.YAMLError as exc:
        raise UsageError(f"{path}: bad YAML: {strict_yaml.describe_error(exc)}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not UTF-8 text (a playbook is YAML)") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror}") from None
    except RecursionError:
        raise UsageError(f"{path}: bad YAML: nested too deeply") from None
    except ValueError as exc:  # larger than a playbook can be
        raise UsageError(f"{path}: {exc} (a playbook is a small YAML file)") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: expected a mapping")
    unknown = set(data) - {"description", "cases", "suites", "required", "params", "clusters"}
    if unknown:
        raise UsageError(f"{path}: unknown key(s) {', '.join(sorted(unknown))}")
    return data


def matrix_order(case_id: str) -> tuple[int, int, str]:
    """Sort key of the seed's matrix order: FUNC, COMBO, PERF, MET, STAB, LEAK, FAIL, then the number."""
    prefixes = ("FUNC", "COMBO", "PERF", "MET", "STAB", "LEAK", "FAIL")
    head, _, num = case_id.partition("-")
    rank = prefixes.index(head) if head in prefixes else len(prefixes)
    return rank, int(num) if num.isdigit() else 0, case_id


def select(
    *, suites: Sequence[str] = (), case_ids: Sequence[str] = (), playbook: str | None = None
) -> Selection:
    """Resolve ``--suite`` / ``--case`` / ``--playbook`` into cases in matrix order.

    An unknown case id or suite is a :class:`UsageError` (exit 2), never a silent pass.
    """
    wanted: list[str] = []
    params: dict[str, Any] = {}
    cluster_params: dict[str, dict[str, Any]] = {}
    required: set[str] | None = None
    label_parts: list[str] = []
    if playbook:
        book = load_playbook(playbook)
        label_parts.append(f"playbook={playbook}")
        wanted += [str(c) for c in book.get("cases") or []]
        for s in book.get("suites") or []:
            suite = normalise_suite(str(s))
            wanted += [c.case_id for c in REGISTRY.values() if c.suite == suite]
        params.update(book.get("params") or {})
        check_vacuous(params, f"playbook {playbook}: params")
        for name, body in (book.get("clusters") or {}).items():
            cluster_params[str(name)] = dict((body or {}).get("params") or {})
            check_vacuous(cluster_params[str(name)], f"playbook {playbook}: clusters.{name}.params")
        if book.get("required") is not None:
            required = {str(c) for c in book["required"]}
    for s in suites:
        suite = normalise_suite(s)
        label_parts.append(f"suite={suite}")
        wanted += [c.case_id for c in REGISTRY.values() if c.suite == suite]
    for cid in case_ids:
        label_parts.append(f"case={cid}")
        wanted += expand_case_patterns(cid)
    unknown = [c for c in wanted if c not in REGISTRY]
    if unknown:
        raise UsageError(f"unknown case id(s): {', '.join(unknown)} (see `invoke cases`)")
    if not wanted:
        raise UsageError("nothing selected: give --suite, --case or --playbook")
    order = {cid: i for i, cid in enumerate(sorted(REGISTRY, key=matrix_order))}
    chosen = [REGISTRY[c] for c in sorted(set(wanted), key=order.__getitem__)]
    return Selection(
        cases=chosen,
        required=required if required is not None else {c.case_id for c in chosen},
        params=params,
        cluster_params=cluster_params,
        label=" ".join(label_parts),
        required_given=required is not None,
    )


def expand_case_patterns(text: str) -> list[str]:
    """Case ids of one ``--case`` value: a comma list of ids or globs (``FUNC-00*,PERF-001``), case-insensitive.

    A plain id is kept as given (an unknown one is reported by :func:`select`); a glob that matches no
    registered case raises :class:`UsageError` naming it. Matches come in matrix order.
    """
    patterns = [p.strip().upper() for p in text.split(",")]
    if not any(patterns):
        raise UsageError(f"--case {text!r}: no case id or pattern given")
    ids: list[str] = []
    for pattern in patterns:
        if not pattern:
            raise UsageError(f"--case {text!r}: empty item in the comma list")
        if not any(ch in pattern for ch in "*?["):
            ids.append(pattern)
            continue
        hits = sorted((c for c in REGISTRY if fnmatchcase(c, pattern)), key=matrix_order)
        if not hits:
            raise UsageError(f"--case {pattern}: matches no case (see `invoke cases`)")
        ids += hits
    return ids


def case_params(
    case: CaseDef, cluster: ClusterSpec, selection: Selection, overrides: Mapping[str, Any]
) -> dict[str, Any]:
    """Parameters of one case: common < case < playbook < playbook per cluster < inventory < ``--set``."""
    return {name: value for name, (value, _) in resolved_params(case, cluster, selection, overrides).items()}


def resolved_params(
    case: CaseDef, cluster: ClusterSpec, selection: Selection, overrides: Mapping[str, Any]
) -> dict[str, tuple[Any, str]]:
    """Each parameter of one case as ``(value, source)``, the source of the layer that set it last:
    ``default`` (common or the case's), ``playbook``, ``playbook (cluster NAME)``, ``inventory`` or ``--set``."""
    params: dict[str, tuple[Any, str]] = {k: (v, "default") for k, v in {**COMMON_PARAMS, **case.params}.items()}
    layers = ((selection.params, "playbook"), (selection.cluster_params.get(cluster.name, {}),
              f"playbook (cluster {cluster.name})"), (cluster.params, "inventory"), (overrides, "--set"))
    for layer, source in layers:
        for key, value in layer.items():
            if key in params:
                params[key] = (value, source)
    return params


def parameter_defaults(cases: Sequence[CaseDef]) -> dict[str, list[Any]]:
    """Each parameter name of the common parameters and of ``cases``, with every default it has among them."""
    defaults: dict[str, list[Any]] = {name: [value] for name, value in COMMON_PARAMS.items()}
    for c in cases:
        for name, value in c.params.items():
            defaults.setdefault(name, []).append(value)
    return defaults


def check_overrides(cases: Sequence[CaseDef], overrides: Mapping[str, Any]) -> None:
    """Every ``--set`` name must be a parameter of some selected case (typos fail loudly), and its value must keep
    the parameter's rules (:class:`~xpushare.cases.param_schema.ParamSpec`: its kind, range and allowed names),
    before anything runs or is stored. Raises :class:`UsageError`."""
    defaults = parameter_defaults(cases)
    unknown = sorted(set(overrides) - set(defaults))
    if unknown:
        raise UsageError(
            f"unknown parameter(s) for --set: {', '.join(unknown)} (known: {', '.join(sorted(defaults))})")
    for name, value in overrides.items():
        problem = value_problem(name, defaults[name], value)
        if problem:
            raise UsageError(f"bad --set {name}={value!r}: {problem}")


def value_problem(name: str, defaults: Sequence[Any], value: Any) -> str | None:
    """Why ``value`` cannot be parameter ``name`` 's (whose defaults among the cases are ``defaults``): the rule of
    the one parameter schema it breaks (:meth:`xpushare.cases.param_schema.ParamSpec.problem`); None when it can."""
    return ParamSpec(name, tuple(defaults)).problem(value)


def check_vacuous(params: Mapping[str, Any], where: str) -> None:
    """Every entry of a playbook's ``params`` (``where`` names it) checked against the parameter schema
    (:func:`value_problem` with the registered cases' defaults and the cluster settings'; an owned parameter,
    ``envcheck_*``, ``deploy_*``, ``legacy_*``, with its owner's table:
    :func:`~xpushare.cases.param_schema.owned_problem`, and a name its owner does not have is refused). Raises
    :class:`UsageError`."""
    defaults = {**cluster_setting_defaults(), **parameter_defaults(list(REGISTRY.values()))}
    for name, value in params.items():
        if name in defaults:
            problem = value_problem(str(name), defaults[name], value)
            if problem:
                raise UsageError(f"{where}: bad {name}={value!r}: {problem}")
            continue
        refusal = owned_refusal(str(name), value)
        if refusal:
            raise UsageError(f"{where}: {name}: {refusal}")


def expected_case_duration(case: CaseDef, cluster: ClusterSpec, params: Mapping[str, Any], root: Path | None, *,
                           exclude_run: str | None = None) -> tuple[float | None, str]:
    """Expected seconds of ``case`` on ``cluster`` before it runs, and the basis in words: its newest PASS/FAIL
    duration among the runs stored under ``root`` (:func:`xpushare.report.history.expected_duration`), else,
    for a quota case, what its workload sizes and quotas make of it on the cluster's GPU model
    (:func:`xpushare.cases.sizing.sized_case_duration`), for a case of time windows their sum
    (:func:`xpushare.cases.sizing.window_case_duration`), else the case's static estimate
    (:func:`xpushare.cases.estimates.static_case_duration`); ``(None, why)`` when none tells (a case outside the
    matrix)."""
    from xpushare.cases.estimates import static_case_duration
    from xpushare.cases.sizing import sized_case_duration, window_case_duration
    from xpushare.report import history

    found = history.expected_duration(root, cluster.name, case.suite, case.case_id,
                                      exclude_run=exclude_run) if root is not None else None
    if found is not None:
        return found.seconds, found.basis
    sized = (sized_case_duration(case.case_id, params, cluster.gpu_model) or window_case_duration(case.case_id, params)
             or static_case_duration(case.case_id))
    if sized is not None:
        return sized
    return None, "no earlier PASS/FAIL of this case on this cluster under this root, and no estimate of its own"
