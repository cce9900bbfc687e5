"""A run's legacy scenarios against stored baselines, the way seed 004's analysis ("测试总结与分析") reads them.

Inputs: the stored evidence of ``cross-gpu`` (W1, pytorch-add), ``small`` (W2) and ``idle-small`` (W3) in
``.tmplog/<run-id>/xpushare/<cluster>/legacy/`` (and ``baseline`` when the run has one), and a baseline
file (``baselines/t4-seed004.yaml``; ``invoke legacy.baseline`` writes one per run)::

    gpu_model: Tesla T4
    workloads:
      standard:   {duration_s: 163, bound: compute}
      small:      {duration_s: 392, bound: compute}
      idle-small: {duration_s: 445, bound: idle}
    reference: [{test: 4, scenario: small, pods: 4, gpus: 2, avg_s: 867.5}, ...]   # optional

Per scenario: the mean duration (container start to finish, s) of the pods that passed, and the pods per
GPU from the scheduler's registration lines (``k`` = pods / GPUs used). Then, as seed 004 does:

* ``k == 1`` (exclusive): **virtualization overhead** = mean / baseline - 1 (seed: 164 s vs 163 s, < 1 %);
* ``k > 1``, compute-bound workload: ideal time slicing takes ``k`` x baseline; **concurrency efficiency**
  = k x baseline / mean (seed test 4: 2 x 392 / 867.5 = 90 %, i.e. ~10 % switching overhead; test 2:
  serial W1 ~2 x 163 s);
* ``k > 1``, low duty cycle (``bound: idle``): the ideal is the baseline itself; **per-task cost** = mean /
  baseline - 1 at ``k`` x density (seed test 6: 481.8 s vs 445 s, +8 % for 3 tasks per GPU), throughput
  ``k`` / (mean / baseline) exclusive tasks' worth.

Pods that did not pass are left out (and counted); a scenario without a passed pod, or whose placement is
unknown (no scheduler log, nvshare registrations without a GPU), is reported as such, never guessed.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

import yaml
from tabulate import tabulate

from xpushare.cases.base import load_plan
from xpushare.data import baselines_dir
from xpushare.evidence.store import Evidence
from xpushare.legacy import judgments, tables
from xpushare.model.case_record import CaseRecord
from xpushare.model.errors import UsageError
from xpushare.model.exit_status import ExitStatus
from xpushare.report import run_store
from xpushare.report.output import render

#: Workload kind of each pods-run scenario, and whether the kind saturates the GPU.
SCENARIO_KIND = {"cross-gpu": "standard", "small": "small", "idle-small": "idle-small"}
BOUND = {"standard": "compute", "small": "compute", "idle-small": "idle"}
DEFAULT_BASELINE = baselines_dir() / "t4-seed004.yaml"


@dataclass(frozen=True)
class BaselineEntry:
    """One workload's exclusive native duration (s) and whether it is compute-bound or idle (low duty)."""

    kind: str
    duration_s: float
    bound: str


@dataclass(frozen=True)
class Baseline:
    """A baseline file: its path, GPU model, entries per workload kind, and optional reference rows."""

    path: str
    gpu_model: str | None
    description: str
    workloads: dict[str, BaselineEntry]
    reference: tuple[Mapping[str, Any], ...] = ()


def load_baseline(path: str | Path) -> Baseline:
    """Read a baseline YAML. Raises :class:`UsageError` naming the file and the problem."""
    p = Path(path)
    try:
        doc = yaml.safe_load(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"baseline {p}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise UsageError(f"baseline {p}: bad YAML: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("workloads"), dict) or not doc["workloads"]:
        raise UsageError(f"baseline {p}: expected a mapping with 'workloads: {{kind: {{duration_s: ...}}}}'")
    entries: dict[str, BaselineEntry] = {}
    for kind, body in doc["workloads"].items():
        try:
            duration = float((body or {})["duration_s"])
        except (KeyError, TypeError, ValueError):
            raise UsageError(f"baseline {p}: workloads.{kind}.duration_s must be a number of seconds") from None
        if duration <= 0:
            raise UsageError(f"baseline {p}: workloads.{kind}.duration_s must be positive")
        bound = str((body or {}).get("bound") or BOUND.get(str(kind), "compute"))
        if bound not in ("compute", "idle"):
            raise UsageError(f"baseline {p}: workloads.{kind}.bound must be 'compute' or 'idle'")
        entries[str(kind)] = BaselineEntry(str(kind), duration, bound)
    return Baseline(str(p), doc.get("gpu_model"), str(doc.get("description") or ""), entries,
                    tuple(doc.get("reference") or ()))


@dataclass(frozen=True)
class ScenarioResult:
    """What a stored scenario measured: pods, passed pods, mean/min/max duration (s) of the passed ones,
    GPUs used and pods per GPU (None when the placement is unknown), and its verdict."""

    cluster: str
    scenario: str
    kind: str
    status: str
    pods: int
    passed: int
    avg_s: float | None
    min_s: int | None
    max_s: int | None
    gpus: int | None
    max_per_gpu: int | None
    gpu_model: str | None = None

    @property
    def density(self) -> float | None:
        """Pods per GPU used (the ``k`` of the analysis)."""
        return self.passed / self.gpus if self.gpus else None


def scenario_result(case_dir: Path, record: CaseRecord) -> ScenarioResult:
    """Measure a stored pods-run scenario from its case dir (pods.json, pods/*.log, scheduler.log, plan.json)."""
    plan = load_plan(case_dir)
    ev = Evidence.load(case_dir)
    pods = list(plan.get("pods") or [])
    rows = [r for r in tables.pod_rows(pods, ev.pods, ev.logs) if r.passed]
    durations = [r.duration_s for r in rows if r.duration_s is not None and not r.estimated]
    gpus = max_per_gpu = None
    ok_pods = [r.name for r in rows]
    if ok_pods:
        _check, placement = judgments.check_registered(ev, ok_pods, str(plan.get("namespace", "default")))
        per_gpu: Mapping[str, int] = placement.get("pods_per_gpu") or {}
        placed = placement.get("gpu_of_pod") or {}
        if per_gpu and "None" not in per_gpu and all(placed.get(p) for p in ok_pods):
            gpus, max_per_gpu = len(per_gpu), max(per_gpu.values())
    scenario = record.case_id
    return ScenarioResult(
        cluster=record.cluster,
        scenario=scenario,
        kind=SCENARIO_KIND.get(scenario, scenario),
        status=record.status,
        pods=len(pods),
        passed=len(rows),
        avg_s=sum(durations) / len(durations) if durations else None,
        min_s=min(durations) if durations else None,
        max_s=max(durations) if durations else None,
        gpus=gpus,
        max_per_gpu=max_per_gpu,
        gpu_model=plan.get("gpu_model"),
    )


@dataclass(frozen=True)
class Comparison:
    """One scenario against its baseline. ``regime``: ``exclusive``, ``shared`` or ``unknown``;
    ``ratio`` = mean / baseline; ``overhead`` (exclusive) = ratio - 1; ``efficiency`` (shared,
    compute-bound) = k x baseline / mean; ``cost`` (shared, idle) = ratio - 1; ``throughput`` (shared) =
    k / ratio, in exclusive tasks' worth; ``analysis``: the sentence printed for it."""

    label: str
    kind: str
    pods: int
    passed: int
    density: float | None
    avg_s: float | None
    baseline_s: float | None
    ratio: float | None
    regime: str
    overhead: float | None
    efficiency: float | None
    cost: float | None
    throughput: float | None
    analysis: str


def _size_word(fraction: float) -> str:
    a = abs(fraction)
    return "negligible (< 1 %)" if a < 0.01 else "small (< 5 %)" if a < 0.05 else "significant"


def compare(label: str, kind: str, *, pods: int, passed: int, avg_s: float | None, density: float | None,
            max_per_gpu: float | None, baseline: Baseline) -> Comparison:
    """The seed-004 reading of one measurement (see the module docstring for the formulas)."""
    entry = baseline.workloads.get(kind)
    base = entry.duration_s if entry else None
    empty = dict(overhead=None, efficiency=None, cost=None, throughput=None)
    if entry is None or base is None:
        return Comparison(label, kind, pods, passed, density, avg_s, None, None, "unknown", **empty,
                          analysis=f"no baseline for workload {kind!r} in {baseline.path}")
    if avg_s is None:
        return Comparison(label, kind, pods, passed, density, None, base, None, "unknown", **empty,
                          analysis=f"no pod passed with a measured duration ({passed}/{pods} passed)")
    ratio = avg_s / base
    left_out = f" ({pods - passed} of {pods} pods did not pass and are left out)" if passed < pods else ""
    if density is None or max_per_gpu is None:
        return Comparison(label, kind, pods, passed, None, avg_s, base, ratio, "unknown", **empty,
                          analysis=f"{avg_s:.1f}s = {ratio:.2f}x baseline {base:g}s; GPU placement unknown "
                                   f"(no GPU in the scheduler's registrations){left_out}")
    if max_per_gpu <= 1:
        overhead = ratio - 1
        return Comparison(label, kind, pods, passed, density, avg_s, base, ratio, "exclusive", overhead=overhead,
                          efficiency=None, cost=None, throughput=None,
                          analysis=f"exclusive (1 pod per GPU): {avg_s:.1f}s vs baseline {base:g}s, virtualization "
                                   f"overhead {overhead * 100:+.1f} %: {_size_word(overhead)}{left_out}")
    k = density
    throughput = k / ratio
    if entry.bound == "idle":
        cost = ratio - 1
        return Comparison(label, kind, pods, passed, k, avg_s, base, ratio, "shared", overhead=None, efficiency=None,
                          cost=cost, throughput=throughput,
                          analysis=f"{k:g} pods per GPU, low duty cycle: {avg_s:.1f}s vs baseline {base:g}s, "
                                   f"{cost * 100:+.1f} % per task for {k:g}x density (throughput {throughput:.2f}x "
                                   f"one exclusive task){left_out}")
    ideal = k * base
    efficiency = ideal / avg_s
    return Comparison(label, kind, pods, passed, k, avg_s, base, ratio, "shared", overhead=None,
                      efficiency=efficiency, cost=None, throughput=throughput,
                      analysis=f"{k:g} pods per GPU, compute-bound: {avg_s:.1f}s = {ratio:.2f}x baseline {base:g}s; "
                               f"ideal time slicing {k:g}x = {ideal:.0f}s; concurrency efficiency "
                               f"{efficiency * 100:.0f} % (switching overhead {(1 / efficiency - 1) * 100:+.1f} %)"
                               f"{left_out}")


def compare_result(res: ScenarioResult, baseline: Baseline) -> Comparison:
    """:func:`compare` for a measured scenario (label ``<cluster>/<scenario>``)."""
    return compare(f"{res.cluster}/{res.scenario}", res.kind, pods=res.pods, passed=res.passed, avg_s=res.avg_s,
                   density=res.density, max_per_gpu=res.max_per_gpu, baseline=baseline)


def reference_comparisons(baseline: Baseline) -> list[Comparison]:
    """The baseline file's ``reference`` rows (e.g. seed 004's tests 1-6) read the same way."""
    out = []
    for ref in baseline.reference:
        scenario = str(ref.get("scenario"))
        pods, gpus = int(ref.get("pods", 0)), int(ref.get("gpus", 0)) or None
        density = pods / gpus if gpus else None
        per_gpu = -(-pods // gpus) if gpus else None
        label = f"test {ref.get('test', '?')} {scenario}" + (f" ({ref['mode']})" if ref.get("mode") else "")
        out.append(compare(label, SCENARIO_KIND.get(scenario, scenario), pods=pods, passed=pods,
                           avg_s=float(ref["avg_s"]) if ref.get("avg_s") is not None else None, density=density,
                           max_per_gpu=per_gpu, baseline=baseline))
    return out


def _table(comparisons: Sequence[Comparison]) -> str:
    def f(v: float | None, spec: str) -> str:
        return "n/a" if v is None else format(v, spec)

    rows = [[c.label, c.kind, f"{c.passed}/{c.pods}", f(c.density, "g"), f(c.avg_s, ".1f"), f(c.baseline_s, "g"),
             f(c.ratio, ".2f"), c.regime] for c in comparisons]
    return tabulate(rows, headers=["Scenario", "Workload", "Passed", "Pods/GPU", "Avg s", "Baseline s", "Ratio",
                                   "Regime"], tablefmt="simple", disable_numparse=True)


def model_mismatch(measured: str | None, baseline: str | None) -> bool:
    """True when both GPU models are known and neither name contains the other (case-insensitive)."""
    if not measured or not baseline:
        return False
    a, b = measured.lower(), baseline.lower()
    return a not in b and b not in a


def format_report(run_id: str, baseline: Baseline, comparisons: Sequence[Comparison],
                  measured_baseline: Mapping[str, float] | None = None,
                  gpu_models: Sequence[str] = ()) -> str:
    """The printed comparison: the table, then the analysis in seed 004's three headings.

    ``gpu_models``: the GPU models the scenarios ran on (inventory); a model the baseline was not
    measured on is called out, since the ratios then compare different hardware.
    """
    lines = [f"Baseline comparison: run {run_id} vs {baseline.path}"
             + (f" ({baseline.gpu_model})" if baseline.gpu_model else ""), ""]
    for model in sorted(set(gpu_models)):
        if model_mismatch(model, baseline.gpu_model):
            lines += [f"WARNING: measured on {model!r}, the baseline on {baseline.gpu_model!r}: the ratios compare "
                      "different GPUs (run legacy.baseline on this cluster for a matching baseline)", ""]
    lines.append(_table(comparisons) if comparisons else "(no cross-gpu / small / idle-small scenario in this run)")
    sections = (("1. Virtualization overhead (exclusive vs baseline)", "exclusive"),
                ("2./3. Sharing: concurrency efficiency and density", "shared"),
                ("Not classified", "unknown"))
    for title, regime in sections:
        chosen = [c for c in comparisons if c.regime == regime]
        if chosen:
            lines += ["", title] + [f"  - {c.label} ({c.kind}): {c.analysis}" for c in chosen]
    if measured_baseline:
        lines += ["", "This run's own native baseline vs the stored one:"]
        for kind, seconds in measured_baseline.items():
            entry = baseline.workloads.get(kind)
            if entry:
                lines.append(f"  - {kind}: {seconds:g}s vs {entry.duration_s:g}s "
                             f"({(seconds / entry.duration_s - 1) * 100:+.1f} %)")
    refs = reference_comparisons(baseline)
    if refs:
        lines += ["", f"Reference rows of the baseline file ({baseline.description or baseline.path}):"]
        lines += [f"  - {c.label}: {c.analysis}" for c in refs]
    return "\n".join(lines)


def baseline_compare(run_id: str, baseline_path: str | Path | None = None, *, root: Path = Path("."),
                     cluster: str | None = None, out: TextIO | None = None, fmt: str = "table") -> ExitStatus:
    """Compare the legacy scenarios of a stored run with a baseline file; print and store the result.

    ``fmt`` table prints the report's text; json or yaml print only the record stored as
    ``baseline-compare.json`` (``{"run_id", "baseline", "gpu_model", "comparisons", "own_baseline_s"}``).

    Writes ``baseline-compare.txt`` and ``baseline-compare.json`` into the run directory. Raises
    :class:`UsageError` for a bad run id, a missing run or baseline file, or a run without any
    cross-gpu / small / idle-small / baseline scenario. Returns 0 otherwise (it reports, it does not judge).
    """
    out = out or sys.stdout
    try:
        run_dir = run_store.stored_run_dir(root, run_id)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    baseline = load_baseline(baseline_path or DEFAULT_BASELINE)
    results = [r for r in run_store.load_results(run_dir)
               if r.suite == "legacy" and (cluster is None or r.cluster == cluster)]
    measured = [r for r in results if r.case_id in SCENARIO_KIND]
    natives = [r for r in results if r.case_id == "baseline"]
    if not measured and not natives:
        raise UsageError(f"run {run_id!r} has no legacy cross-gpu, small, idle-small or baseline scenario"
                         + (f" on cluster {cluster!r}" if cluster else ""))
    measured_results = [scenario_result(run_dir / r.case_log_dir, r) for r in measured]
    comparisons = [compare_result(res, baseline) for res in measured_results]
    models = [res.gpu_model for res in measured_results if res.gpu_model]
    own: dict[str, float] = {}
    for r in natives:
        case_dir = run_dir / r.case_log_dir
        plan = load_plan(case_dir)
        ev = Evidence.load(case_dir)
        for row in tables.pod_rows(list(plan.get("pods") or []), ev.pods, ev.logs):
            kind = (plan.get("workloads") or {}).get(row.name)
            if kind and row.passed and row.duration_s is not None and not row.estimated:
                own[kind] = float(row.duration_s)
    text = format_report(run_id, baseline, comparisons, own, models)
    run_store.atomic_write_text(run_dir / "baseline-compare.txt", text + "\n")
    data = {"run_id": run_id, "baseline": baseline.path, "gpu_model": baseline.gpu_model,
            "comparisons": [asdict(c) for c in comparisons], "own_baseline_s": own}
    print(render(data, fmt, text=text), file=out)
    run_store.atomic_write_text(run_dir / "baseline-compare.json", json.dumps(data, indent=2) + "\n")
    return ExitStatus.OK
