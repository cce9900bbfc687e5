"""``--dry-run`` of a suite task: what a run would do, told before anything runs, without contacting any host.

The plan lists the selected cases in run order, which of them will SKIP and why (as far as the inventory tells:
a capability the cluster's backend lacks, a case not implemented, a disruptive case without
``--allow-disruptive``; a case may still SKIP at run time on what it finds, e.g. the GPU model), each parameter's
resolved value and the layer it came from (:func:`xpushare.engine.plan.resolved_params`), and the expected
duration (``-`` where none is known). A run of several clusters (``--cluster c1,c2``) has one plan per cluster
(:func:`render_all`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from xpushare.cases import CaseDef
from xpushare.cases.base import title_for
from xpushare.cases.premise_table import case_premises
from xpushare.engine import release
from xpushare.engine.lifecycle import cluster_facts, inventory_gpu_count, skip_reason
from xpushare.engine.plan import Selection, expected_case_duration, resolved_params
from xpushare.inventory.schema import ClusterSpec
from xpushare.model.premises import ClusterFacts, unmet_before
from xpushare.report import history, output
from xpushare.report.output import plain

__all__ = ["DISRUPTIVE_SKIP", "expected_duration_s", "plan_run", "render", "render_all"]

DISRUPTIVE_SKIP = "needs --allow-disruptive (allow_disruptive is false)"


def expected_duration_s(case: CaseDef, cluster: str, root: Path | None) -> float | None:
    """Expected seconds of ``case`` on ``cluster``: its last PASS/FAIL duration among the runs stored under
    ``root`` (:func:`xpushare.report.history.expected_duration`); None (shown ``-``) without one."""
    found = history.expected_duration(root, cluster, case.suite, case.case_id) if root is not None else None
    return found.seconds if found else None


def _planned_skip(case: CaseDef, params: Mapping[str, Any], capabilities: frozenset[str], mode: str,
                  facts: ClusterFacts) -> str | None:
    reason = skip_reason(case, capabilities, mode, facts)
    if reason is None and "allow_disruptive" in params and not params["allow_disruptive"]:
        return DISRUPTIVE_SKIP
    return reason


def plan_run(cases: Sequence[CaseDef], cluster: ClusterSpec, selection: Selection, overrides: Mapping[str, Any],
             capabilities: frozenset[str], root: Path | None = None) -> dict[str, Any]:
    """The dry run of ``cases`` on ``cluster`` as JSON-ready data::

        {"cluster", "mode", "selection", "release", "gpu_count", "cases": [{"case_id", "suite", "title",
         "plan": "RUN" | "SKIP", "skip_reason", "premises", "premises_unmet", "expected_duration_s",
         "expected_duration_basis", "params": {name: {"value", "source"}}}]}

    ``premises``: those the case declares; ``premises_unmet``: those the inventory already shows unmet (the
    first of them is the SKIP reason); a premise known only at run time (the GPUs a backend finds, when the
    inventory lists none: ``gpu_count`` None) or in the evidence is not among them.

    ``expected_duration_s``: 0 for a case that will SKIP, else :func:`xpushare.engine.plan.expected_case_duration`
    (earlier runs, else the sizes or time windows, else the case's static estimate);
    ``release``: one line on the cluster's release profile and what this selection can decide (docs/release.md).

    ``capabilities``: the backend's (:func:`xpushare.engine.backend_factory.capabilities_of`); ``root``: where
    stored runs give the expected durations (None: none)."""
    planned = []
    facts = cluster_facts(cluster, capabilities, inventory_gpu_count(cluster))
    for case in cases:
        resolved = resolved_params(case, cluster, selection, overrides)
        values = {name: value for name, (value, _) in resolved.items()}
        reason = _planned_skip(case, values, capabilities, cluster.mode, facts)
        names = case_premises(case)
        unmet_names = [n for n in names if unmet_before([n], facts) is not None]
        seconds, basis = (0.0, "will SKIP before it acts") if reason else expected_case_duration(case, cluster, values,
                                                                                                  root)
        planned.append({
            "case_id": case.case_id, "suite": case.suite, "title": title_for(case, values),
            "plan": "SKIP" if reason else "RUN", "skip_reason": reason,
            "premises": names, "premises_unmet": unmet_names,
            "expected_duration_s": seconds, "expected_duration_basis": basis,
            "params": {name: {"value": plain(value), "source": source}
                       for name, (value, source) in sorted(resolved.items())},
        })
    profile = release.profile_record(cluster, selection)
    needed = set(profile["required"])
    chosen = needed & {c.case_id for c in cases}
    if not profile["sut"]:
        outlook = f"; release_ready will be NO: {profile['sut_reason']}"
    elif chosen != needed:
        outlook = "; release_ready will be n/a (partial selection)"
    else:
        outlook = "; release_ready YES needs each of them to PASS with the SUT in its path"
    release_line = (f"release profile {profile['profile']} ({profile['source']}): {len(chosen)} of {len(needed)} "
                    f"required case(s) selected{outlook}")
    return {"cluster": cluster.name, "mode": cluster.mode, "selection": selection.label, "release": release_line,
            "gpu_count": facts.gpu_count, "cases": planned}


def _premises_cell(case: Mapping[str, Any]) -> str:
    """The case's premises, each unmet one marked ``!`` (``sut!,gpu``)."""
    unmet_names = set(case.get("premises_unmet") or ())
    return ",".join(f"{n}!" if n in unmet_names else n for n in case.get("premises") or ()) or "-"


def _text(plan: Mapping[str, Any]) -> str:
    cases = plan["cases"]
    rows = [{"case": c["case_id"], "suite": c["suite"], "plan": c["plan"],
             "expected s": "-" if c["expected_duration_s"] is None else f"{c['expected_duration_s']:.0f}",
             "title": c["title"], "premises": _premises_cell(c), "skip reason": c["skip_reason"] or ""}
            for c in cases]
    # A parameter with the same value and source in several cases is one row naming them all.
    shared: dict[tuple[str, str, str], list[str]] = {}
    for c in cases:
        for name, p in c["params"].items():
            shared.setdefault((name, repr(p["value"]), p["source"]), []).append(c["case_id"])
    every = len(cases)
    params = [{"parameter": name, "value": value, "source": source,
               "cases": "all" if len(ids) == every else ",".join(ids)}
              for (name, value, source), ids in sorted(shared.items())]
    gpus = plan.get("gpu_count")
    head = (f"dry run on {plan['cluster']} ({plan['mode']} mode): {len(cases)} case(s), "
            f"{sum(c['plan'] == 'SKIP' for c in cases)} will SKIP; no host contacted; premises marked ! are unmet "
            f"on this cluster ({'GPUs: known at run time' if gpus is None else f'{gpus} GPU(s) in the inventory'})")
    return "\n\n".join([head + (f"\n{plan['release']}" if plan.get("release") else ""), output.table(rows),
                        output.table(params)])


def render(plan: Mapping[str, Any], fmt: str) -> str:
    """The plan of :func:`plan_run` in ``fmt`` (table | json | yaml)."""
    return output.render(plan, fmt, text=_text(plan))


def render_all(plans: Sequence[Mapping[str, Any]], fmt: str) -> str:
    """The plans of a run's clusters (one :func:`plan_run` each, in ``--cluster`` order) in ``fmt``: one plan as
    :func:`render` gives it; several as one table per cluster, or in json/yaml a list of the plans."""
    if len(plans) == 1:
        return render(plans[0], fmt)
    return output.render(list(plans), fmt, text="\n\n".join(_text(plan) for plan in plans))
