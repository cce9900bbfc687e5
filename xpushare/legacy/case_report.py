"""What a legacy scenario leaves besides its verdict: the post-processing (``baseline.yaml``, complex2's log copy)
and the scenario's closing report with the legacy tables (:mod:`xpushare.legacy.run` calls both).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from xpushare.cases.base import load_plan
from xpushare.evidence.store import Evidence
from xpushare.inventory.schema import ClusterSpec
from xpushare.legacy import judgments, tables
from xpushare.legacy.compare import BOUND
from xpushare.model.atomic_file import atomic_write_text, copy_file
from xpushare.model.case_record import CaseRecord

if TYPE_CHECKING:
    from xpushare.legacy.scenarios import Scenario


def post_process(sc: Scenario, case_dir: Path, record: CaseRecord, params: Mapping[str, Any],
                  cluster: ClusterSpec) -> None:
    """Files the scripts left beside their output: complex2's ``scheduler<suffix>.log``, the baseline file."""
    if sc.name == "complex2" and (case_dir / "scheduler.log").exists():
        suffix = str(params.get("legacy_log_suffix") or "")
        if suffix:
            copy_file(case_dir / "scheduler.log", case_dir / f"scheduler{suffix}.log")
    if sc.name == "baseline":
        write_baseline_file(case_dir, record, cluster)


def write_baseline_file(case_dir: Path, record: CaseRecord, cluster: ClusterSpec) -> Path | None:
    """``baseline.yaml`` in the case dir from the passed native pods, usable as ``baseline-compare --baseline``.

    Returns its path, or None when no pod passed (nothing measured, nothing written).
    """
    plan = load_plan(case_dir)
    ev = Evidence.load(case_dir)
    rows = {r.name: r for r in tables.pod_rows(list(plan.get("pods") or []), ev.pods, ev.logs)}
    workloads = {}
    for pod, kind in (plan.get("workloads") or {}).items():
        row = rows.get(pod)
        if row is not None and row.passed and row.duration_s is not None and not row.estimated:
            workloads[kind] = {"duration_s": row.duration_s, "pod": pod, "bound": BOUND.get(kind, "compute")}
    if not workloads:
        return None
    doc = {"description": f"native baseline measured by invoke legacy.baseline, run {record.run_id}",
           "gpu_model": cluster.gpu_model, "cluster": cluster.name, "source": f"run {record.run_id}",
           "unit": "seconds (container start to finish)", "workloads": workloads}
    path = case_dir / "baseline.yaml"
    atomic_write_text(path, yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))
    return path


def format_checks(checks: Sequence[Mapping[str, Any]]) -> str:
    """The verdict's checks as ``[PASS]``/``[FAIL]``/``[N/A]`` lines with their details."""
    lines = ["Checks:"]
    for c in checks:
        mark = "[PASS]" if c.get("ok") is True else "[FAIL]" if c.get("ok") is False else "[N/A] "
        lines.append(f"  {mark} {c.get('name')}: {c.get('expression')}")
        if c.get("detail"):
            lines.append(f"         {c['detail']}")
    return "\n".join(lines)


def memlimit_blocks(plan: Mapping[str, Any], ev: Evidence, results: Mapping[str, str]) -> str:
    """Per test of ``remote-test-memlimit.sh``: the outcome line and the last log lines (20 for test 1, else 10)."""
    out = []
    for test in plan.get("tests") or []:
        key = f"Test {test['n']} ({test['label']})"
        status = results.get(key, "ERROR")
        mark = "[INFO]" if status == "PASS" else "[ERROR]"
        want = "refused" if test["expect"] == "rejected" else "passed"
        out.append(f"{mark} Test {test['n']} {'PASSED' if status == 'PASS' else status}: {test['label']} "
                   f"(pod {test['pod']} must be {want})")
        log = ev.logs.get(str(test["pod"]))
        tail = (log or "(no log)").rstrip("\n").split("\n")[-(20 if test["n"] == 1 else 10):]
        out += [f"    {line}" for line in tail]
    return "\n".join(out)


def render_case_report(sc: Scenario, case_dir: Path, record: CaseRecord, params: Mapping[str, Any]) -> str:
    """The script's closing output, rebuilt from the stored evidence and verdict of the case (``record``:
    model/case_record.py)."""
    plan = load_plan(case_dir)
    ev = Evidence.load(case_dir)
    pods = list(plan.get("pods") or [])
    parts: list[str] = []
    metrics = record.metrics or {}
    if sc.name not in ("baseline", "memlimit"):
        log = ev.text("scheduler.log")
        parts.append(tables.format_distribution(tables.distribution(log)) if log is not None
                     else f"{tables.DISTRIBUTION_TITLE}\n(no scheduler log captured)")
    if sc.name == "memlimit":
        parts.append(memlimit_blocks(plan, ev, metrics.get("tests") or {}))
        parts.append(judgments.memlimit_summary(metrics.get("tests") or {}))
    elif sc.name in ("compute-limit", "complex", "dynamic-limit"):
        if sc.name != "dynamic-limit":
            parts.append(judgments.format_compute_analysis(metrics, float(params.get("legacy_util_tolerance", 15))))
        parts.append(format_checks(record.checks or []))
    else:
        rows = tables.pod_rows(pods, ev.pods, ev.logs)
        parts.append(tables.format_pod_table(rows))
        parts.append(tables.format_stats(tables.stats(rows)))
        if sc.name in ("smoke", "complex2"):
            parts.append(format_checks(record.checks or []))
    if sc.name == "baseline" and (case_dir / "baseline.yaml").exists():
        parts.append(f"baseline file: {case_dir / 'baseline.yaml'} (use with invoke baseline-compare --baseline)")
    status, summary = record.status, record.summary
    if status == "PASS":
        parts.append(tables.banner(f"PASS: {sc.title}"))
    else:
        parts.append(tables.banner(f"{status}: {sc.title}\n{summary}"))
    return "\n\n".join(parts)
