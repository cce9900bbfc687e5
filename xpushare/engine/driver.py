"""Run engine: case selection, parameters, run ids, the case lifecycle, resume, interrupts and progress.

Lifecycle of a case (DESIGN.md "Evidence first, verdict second"):
prepare (fresh case dir, earlier attempt archived) -> act -> harvest evidence -> clean up (``finally``)
-> judge (from the case dir only) -> ``result.json`` + ``analysis.txt``.
A harness or infrastructure exception during ``act`` is ERROR; Ctrl-C is INTERRUPTED (evidence is
still harvested and the pods cleaned up) and ends the run with status 130, resumable with ``--resume``.
"""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

import yaml
from rich.console import Console

from xpushare import __version__, artifacts, interrupt, inventory, report
from xpushare.backends.base import CAP_KUBERNETES, Backend
from xpushare.cases import REGISTRY, SUITE_ALIASES, SUITES, CaseDef
from xpushare.cases.base import COMMON_PARAMS, CaseRun, load_plan
from xpushare.data import playbooks_dir
from xpushare.errors import UsageError, XpushareError
from xpushare.evidence import Evidence, write_gpu_mapping
from xpushare.inventory import ClusterSpec
from xpushare.model import Status, Verdict
from xpushare.status import ExitStatus

PLAYBOOK_DIR = playbooks_dir()


@dataclass
class Selection:
    """Cases chosen for a run, the ones the release recommendation requires, and playbook parameters."""

    cases: list[CaseDef]
    required: set[str]
    params: dict[str, Any] = field(default_factory=dict)
    cluster_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    label: str = ""


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
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise UsageError(f"{path}: bad YAML: {getattr(exc, 'problem', exc)}") from None
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
        for name, body in (book.get("clusters") or {}).items():
            cluster_params[str(name)] = dict((body or {}).get("params") or {})
        if book.get("required") is not None:
            required = {str(c) for c in book["required"]}
    for s in suites:
        suite = normalise_suite(s)
        label_parts.append(f"suite={suite}")
        wanted += [c.case_id for c in REGISTRY.values() if c.suite == suite]
    for cid in case_ids:
        label_parts.append(f"case={cid}")
        wanted.append(cid.upper())
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
    )


def parse_overrides(items: Sequence[str]) -> dict[str, Any]:
    """``--set name=value`` pairs; values are YAML scalars (``0.08``, ``true``, ``[1, 2]``)."""
    out: dict[str, Any] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"bad --set {item!r}: expected name=value")
        try:
            out[name.strip()] = yaml.safe_load(raw)
        except yaml.YAMLError:
            raise UsageError(f"bad --set value for {name!r}: {raw!r}") from None
    return out


def case_params(
    case: CaseDef, cluster: ClusterSpec, selection: Selection, overrides: Mapping[str, Any]
) -> dict[str, Any]:
    """Parameters of one case: common < case < playbook < playbook per cluster < inventory < ``--set``."""
    params: dict[str, Any] = {**COMMON_PARAMS, **case.params}
    for layer in (selection.params, selection.cluster_params.get(cluster.name, {}), cluster.params, overrides):
        for key, value in layer.items():
            if key in params:
                params[key] = value
    return params


def check_overrides(cases: Sequence[CaseDef], overrides: Mapping[str, Any]) -> None:
    """Every ``--set`` name must be a parameter of some selected case (typos fail loudly)."""
    known = set(COMMON_PARAMS)
    for c in cases:
        known |= set(c.params)
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise UsageError(f"unknown parameter(s) for --set: {', '.join(unknown)} (known: {', '.join(sorted(known))})")


def make_backend(cluster: ClusterSpec) -> Backend:
    """The backend for the cluster's mode."""
    if cluster.mode == "host":
        from xpushare.backends.host import HostBackend

        return HostBackend(cluster)
    if cluster.mode == "k8s":
        from xpushare.backends.k8s import K8sBackend

        return K8sBackend(cluster)
    raise UsageError(f"cluster {cluster.name!r}: mode {cluster.mode!r} is not available in this version")


class Progress:
    """Live progress: a rich spinner on a terminal, plain lines otherwise (CI, pipes)."""

    def __init__(self, out: TextIO) -> None:
        self.console = Console(file=out)
        self.live = self.console.is_terminal
        self._status: Any = None

    def start(self, text: str) -> None:
        if self.live:
            self._status = self.console.status(text)
            self._status.start()
        else:
            print(f"[xpushare] {text}", file=self.console.file, flush=True)

    def done(self, line: str) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None
        print(f"[xpushare] {line}", file=self.console.file, flush=True)


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _skip_reason(case: CaseDef, backend: Backend, cluster: ClusterSpec) -> str | None:
    missing = case.requires - backend.capabilities - ({CAP_KUBERNETES} if cluster.mode == "k8s" else set())
    if CAP_KUBERNETES in missing:
        return "needs Kubernetes (this cluster runs in host mode)"
    if "client-library" in missing:
        return "needs the nvshare client library (set sut_lib in the inventory)"
    if missing:
        return f"needs {', '.join(sorted(missing))}"
    if case.act is None or case.judge is None:
        return f"not implemented in this version (comes with {case.implemented_by})"
    return None


def run_case(
    case: CaseDef,
    *,
    run_id: str,
    run_dir: Path,
    cluster: ClusterSpec,
    backend: Backend,
    params: dict[str, Any],
    required: bool,
) -> tuple[dict[str, Any], bool]:
    """Run one case through its lifecycle; return its stored record and whether Ctrl-C stopped it."""
    case_dir = artifacts.case_dir(run_dir, cluster.name, case.suite, case.case_id)
    attempt = (artifacts.archive_previous_attempt(case_dir) or 0) + 1
    case_dir.mkdir(parents=True, exist_ok=True)
    started, t0 = _now(), time.monotonic()
    calls0 = backend.kubectl_calls()
    interrupted = False
    error: str | None = None
    reason = _skip_reason(case, backend, cluster)
    harvested: list[str] = []
    phases: dict[str, float] = {}  # phase name -> monotonic end time, in lifecycle order
    if reason is None:
        assert case.act is not None
        run = CaseRun(case.case_id, case_dir, backend, cluster, params)
        try:
            backend.begin_case(case_dir, case.case_id)
            phases["begin"] = time.monotonic()
            case.act(run)
            interrupt.check()  # a Ctrl-C swallowed by a command runner still counts
        except KeyboardInterrupt:
            interrupted = True
        except XpushareError as exc:
            error = str(exc)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            (case_dir / "harness-traceback.txt").write_text(traceback.format_exc(), encoding="utf-8")
        finally:
            phases["act"] = time.monotonic()
            harvested = _guarded_step(case_dir, "harvest", lambda: backend.harvest(case_dir)) or []
            phases["harvest"] = time.monotonic()
            _guarded_step(case_dir, "cleanup", lambda: backend.cleanup(case_dir))
            phases["cleanup"] = time.monotonic()
    if reason is not None:
        verdict = Verdict(Status.SKIP, reason)
    elif interrupted:
        verdict = Verdict(Status.INTERRUPTED, f"interrupted ({interrupt.describe()}); resume with --resume")
    elif error is not None:
        verdict = Verdict(Status.ERROR, f"harness/infrastructure error: {error}")
    else:
        verdict = judge_case(case, case_dir, params, cluster.mode)
        phases["judge"] = time.monotonic()
    ended = _now()
    calls1 = backend.kubectl_calls()
    record = {
        "run_id": run_id,
        "cluster": cluster.name,
        "suite": case.suite,
        "case_id": case.case_id,
        "title": case.title,
        "mode": cluster.mode,
        "attempt": attempt,
        "status": verdict.status.value,
        "summary": verdict.summary,
        "started": started.isoformat(),
        "ended": ended.isoformat(),
        "duration_s": round(time.monotonic() - t0, 3),
        "phases_s": _phase_durations(t0, phases),
        "thresholds": _jsonable(params),
        "metrics": _jsonable(verdict.metrics),
        "checks": _jsonable(verdict.to_dict()["checks"]),
        "evidence": sorted(set(verdict.evidence) | set(harvested)),
        "required": required,
        "operation": f"{case.workload}: {case.operation}".strip(": "),
        "sampling": case.sampling,
        "kubectl_calls": None if calls0 is None or calls1 is None else calls1 - calls0,
        "error": error,
    }
    artifacts.write_result(case_dir, record)
    artifacts.write_analysis(case_dir, record)
    return record, interrupted


def _phase_durations(t0: float, ends: Mapping[str, float]) -> dict[str, float]:
    """Seconds spent in each lifecycle phase (begin, act, harvest, cleanup, judge) from their end times."""
    out: dict[str, float] = {}
    last = t0
    for name, end in ends.items():
        out[name] = round(end - last, 3)
        last = end
    return out


def _guarded_step(case_dir: Path, name: str, step: Any) -> Any:
    try:
        return step()
    except KeyboardInterrupt:
        return None
    except Exception as exc:
        with (case_dir / "harvest-errors.txt").open("a", encoding="utf-8") as fh:
            fh.write(f"{name}: {type(exc).__name__}: {exc}\n")
        return None


def judge_case(case: CaseDef, case_dir: Path, params: Mapping[str, Any], mode: str | None = None) -> Verdict:
    """Apply the case's judgment to its stored evidence; a judgment that crashes is ERROR.

    The pod -> GPU mapping is derived from the stored evidence here (:meth:`Evidence.load`, ``mode`` the
    cluster's) and written to ``gpu_mapping.txt``, which then joins the verdict's evidence.
    """
    assert case.judge is not None
    try:
        ev = Evidence.load(case_dir, mode)
        mapping = write_gpu_mapping(ev)
        verdict = case.judge(ev, params, load_plan(case_dir))
    except Exception as exc:
        return Verdict(Status.ERROR, f"judgment failed on the stored evidence: {type(exc).__name__}: {exc}")
    verdict.evidence = sorted(set(verdict.evidence) | set(mapping))
    return verdict


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


@dataclass
class RunRequest:
    """Everything a ``func``/``combo``/... task asks of the engine."""

    cluster: str
    suites: Sequence[str] = ()
    case_ids: Sequence[str] = ()
    playbook: str | None = None
    run_id: str | None = None
    resume: bool = False
    overrides: Sequence[str] = ()
    inventory_path: str | None = None
    root: Path = Path(".")


def exit_status_for(results: Sequence[Mapping[str, Any]], interrupted: bool) -> ExitStatus:
    """128 + the signal when interrupted (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP); 1 when any case is FAIL or ERROR;
    else 0 (SKIP is not a failure)."""
    if interrupted:
        return interrupt.exit_status()
    if any(r["status"] in ("FAIL", "ERROR", "INTERRUPTED") for r in results):
        return ExitStatus.FAILED
    return ExitStatus.OK


def _run_cases(
    cases: Sequence[CaseDef],
    run_id: str,
    run_dir: Path,
    cluster: ClusterSpec,
    backend: Backend,
    selection: Selection,
    overrides: Mapping[str, Any],
    progress: Progress,
) -> bool:
    """Run the cases in order; return True when Ctrl-C stopped the run."""
    interrupted = False
    try:
        try:
            backend.prepare_run(run_id)
        except KeyboardInterrupt:
            return True
        for case in cases:
            params = case_params(case, cluster, selection, overrides)
            progress.start(f"{case.case_id} {case.title} ...")
            record, interrupted = run_case(
                case,
                run_id=run_id,
                run_dir=run_dir,
                cluster=cluster,
                backend=backend,
                params=params,
                required=case.case_id in selection.required,
            )
            progress.done(f"{case.case_id} {record['status']:<11} {record['duration_s']:7.1f}s  {record['summary']}")
            if interrupted:
                break
    except KeyboardInterrupt:
        interrupted = True
    finally:
        backend.close()
    return interrupted


def resolve_run_id(run_id: str | None, *, resume: bool, what: str) -> str:
    """The run id to use: the given one (validated), else a new ``YYYYmmdd-HHMMSS`` id of now.

    Raises:
        UsageError: ``resume`` without a run id, or a run id that cannot name a directory.
    """
    if resume and not run_id:
        raise UsageError(f"--resume needs --run-id of the {what} to continue")
    chosen = run_id or artifacts.new_run_id(datetime.now())
    try:
        artifacts.validate_run_id(chosen)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return chosen


def run(request: RunRequest, out: TextIO = sys.stdout) -> ExitStatus:
    """Run the selected cases on one cluster and write the run directory and reports.

    Raises :class:`UsageError` / :class:`~xpushare.errors.InventoryError` for bad input (before anything
    runs). Returns the exit status (see :func:`exit_status_for`).
    """
    cluster = inventory.load(request.inventory_path).cluster(request.cluster)
    selection = select(suites=request.suites, case_ids=request.case_ids, playbook=request.playbook)
    overrides = parse_overrides(request.overrides)
    check_overrides(selection.cases, overrides)
    run_id = resolve_run_id(request.run_id, resume=request.resume, what="run")
    run_dir = artifacts.run_dir(request.root, run_id)
    cases = selection.cases
    if request.resume:
        if not run_dir.exists():
            raise UsageError(f"--resume: no run {run_id!r} under {request.root}")
        latest = artifacts.latest_statuses(run_dir)
        cases = [c for c in cases if latest.get((cluster.name, c.suite, c.case_id)) != "PASS"]
    run_dir.mkdir(parents=True, exist_ok=True)
    meta = {
        "run_id": run_id,
        "tool_version": __version__,
        "clusters": [cluster.name],
        "selection": selection.label,
        "required": sorted(selection.required),
        "started": _now().isoformat(),
        "argv": sys.argv[1:],
        "resume": request.resume,
    }
    previous = artifacts.read_run_meta(run_dir) if request.resume else None
    if previous:
        meta["required"] = sorted(set(previous.get("required", [])) | selection.required)
        meta["started"] = previous.get("started", meta["started"])
    artifacts.write_run_meta(run_dir, meta)
    progress = Progress(out)
    progress.done(f"run {run_id} on {cluster.name} ({cluster.mode} mode): {len(cases)} case(s) -> {run_dir}")
    backend = make_backend(cluster)
    interrupted = False
    with interrupt.installed():
        interrupted = _run_cases(cases, run_id, run_dir, cluster, backend, selection, overrides, progress)
    results = artifacts.load_results(run_dir)
    status = exit_status_for(results, interrupted)
    meta.update(
        ended=_now().isoformat(), interrupted=interrupted, exit_status=int(status), counts=report.counts(results)
    )
    artifacts.write_run_meta(run_dir, meta)
    required: list[str] = meta["required"]  # type: ignore[assignment]  # run.json keeps it a sorted list
    paths = report.build(run_dir, required=set(required))
    counts = report.counts(results)
    summary = ", ".join(f"{k} {v}" for k, v in counts.items() if v)
    progress.done(f"done: {summary or 'no cases'}; report: {paths.markdown}")
    if interrupted:
        progress.done(f"interrupted: continue with --run-id {run_id} --resume")
    return status


def rejudge(run_id: str, overrides: Sequence[str], *, root: Path = Path("."), out: TextIO = sys.stdout) -> ExitStatus:
    """Re-judge a stored run with other parameters, offline (no cluster is touched), and rebuild reports.

    Cases that ended SKIP, ERROR (harness) or INTERRUPTED keep their status: there is no evidence to judge.
    """
    try:
        artifacts.validate_run_id(run_id)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    run_dir = artifacts.run_dir(root, run_id)
    if not run_dir.exists():
        raise UsageError(f"no run {run_id!r} under {root}")
    values = parse_overrides(overrides)
    results = artifacts.load_results(run_dir)
    check_overrides([REGISTRY[r["case_id"]] for r in results if r["case_id"] in REGISTRY], values)
    for record in results:
        case = REGISTRY.get(record["case_id"])
        if case is None or case.judge is None or record["status"] in ("SKIP", "INTERRUPTED") or record.get("error"):
            continue
        params = dict(record.get("thresholds") or {})
        params.update({k: v for k, v in values.items() if k in params})
        case_dir = artifacts.case_dir(run_dir, record["cluster"], record["suite"], record["case_id"])
        verdict = judge_case(case, case_dir, params, record.get("mode"))
        old = record["status"]
        record.update(
            status=verdict.status.value,
            summary=verdict.summary,
            thresholds=_jsonable(params),
            metrics=_jsonable(verdict.metrics),
            checks=_jsonable(verdict.to_dict()["checks"]),
            evidence=sorted(set(record.get("evidence") or []) | set(verdict.evidence)),
            rejudged=_now().isoformat(),
        )
        artifacts.write_result(case_dir, record)
        artifacts.write_analysis(case_dir, record)
        change = "" if old == record["status"] else f" (was {old})"
        print(f"[xpushare] {record['case_id']} {record['status']}{change}  {record['summary']}", file=out)
    meta = artifacts.read_run_meta(run_dir) or {}
    report.build(run_dir, required=set(meta.get("required") or []) or None)
    return exit_status_for(artifacts.load_results(run_dir), False)
