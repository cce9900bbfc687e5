"""Counting, the TSV summaries and the release decision of a run, from its stored ``result.json`` records.

Every function here and every report takes the records as :class:`~xpushare.model.case_record.CaseRecord` s
(source: model/case_record.py), as :func:`xpushare.report.run_store.load_results` reads them.

:func:`xpushare.report.build.build` writes into the run directory:

* ``case-summary.tsv``: ``cluster suite case_id status summary case_log_dir``, one row per case (latest
  attempt), ``case_log_dir`` relative to the run directory.
* ``run-summary.tsv``: ``cluster suite selector status``; per (cluster, suite) one ``all`` row with the
  aggregate status (:func:`aggregate_status`), then one row per case with the case id as selector.
* ``junit.xml``: one ``<testsuite name="<cluster>.<suite>">`` per pair (the convention of Ansible's junit callback).
* ``run-report.md``: overview, per-suite counts, cases, problems, key metrics, coverage, release
  recommendation, plots.

TSV escaping (docs/sut/bash-harness.md §defects item 7 is the defect this avoids): every field is written with
:func:`tsv_escape`, which replaces backslash, tab, newline and carriage return with ``\\\\``, ``\\t``, ``\\n``
and ``\\r``, and any other control character (or U+2028/U+2029) with ``\\xNN``/``\\uNNNN``. A row is therefore
always one line of tab-separated fields, whatever splits lines; :func:`read_tsv` undoes it. The csv module is
not used because it would quote embedded newlines and so spread one row over several lines.

Counting rules: only PASS counts as a pass. SKIP, ERROR, INTERRUPTED and INTERMITTENT (``--repeat N`` whose
attempts disagreed) are counted as themselves and never as PASS; the pass rate is ``PASS / (cases not SKIP)``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from xpushare.model.case_record import CaseRecord
from xpushare.model.verdict import Status
from xpushare.report import run_store

CASE_SUMMARY_HEADER = ("cluster", "suite", "case_id", "status", "summary", "case_log_dir")
RUN_SUMMARY_HEADER = ("cluster", "suite", "selector", "status")
STATUS_ORDER: tuple[Status, ...] = (Status.PASS, Status.FAIL, Status.INTERMITTENT, Status.SKIP, Status.ERROR,
                                     Status.INTERRUPTED)
#: Statuses that count as a failure of the case (the exit status 1, the problems of the reports).
FAILURE_STATUSES: tuple[Status, ...] = (Status.FAIL, Status.INTERMITTENT, Status.ERROR, Status.INTERRUPTED)


# --------------------------------------------------------------------------------------------- counting


def record_status(record: CaseRecord) -> Status:
    """The record's status; ``ValueError`` if it is not one of :class:`Status`."""
    return Status(record.status)


def counts(results: Iterable[CaseRecord]) -> dict[str, int]:
    """``{"PASS": n, "FAIL": n, "INTERMITTENT": n, "SKIP": n, "ERROR": n, "INTERRUPTED": n}``, every key present,
    in that order (:data:`STATUS_ORDER`).

    ``ValueError`` on a record whose status is not one of :class:`Status` (records from
    :func:`~xpushare.report.run_store.load_results` are already normalised).
    """
    out = {s.value: 0 for s in STATUS_ORDER}
    for r in results:
        out[record_status(r).value] += 1
    return out


def pass_rate(c: Mapping[str, int]) -> float | None:
    """PASS / (every status but SKIP) from :func:`counts`, i.e. SKIP leaves the denominator.

    None when no case ran (every case SKIP, or none at all).
    """
    ran = sum(c[s.value] for s in STATUS_ORDER if s is not Status.SKIP)
    return c[Status.PASS.value] / ran if ran else None


def aggregate_status(statuses: Iterable[Status | str]) -> Status:
    """Status of a group of cases (a suite): FAIL if any FAIL; else INTERMITTENT if any INTERMITTENT; else ERROR
    if any ERROR; else INTERRUPTED if any INTERRUPTED; else PASS if at least one PASS (the rest being SKIP, which
    are listed per case); else SKIP (all SKIP, or no case at all). An all-SKIP suite is never PASS."""
    present = {Status(s) for s in statuses}
    for s in (Status.FAIL, Status.INTERMITTENT, Status.ERROR, Status.INTERRUPTED, Status.PASS):
        if s in present:
            return s
    return Status.SKIP


def never_run(meta: Mapping[str, Any], results: Sequence[CaseRecord]) -> list[CaseRecord]:
    """Records for the cases ``run.json`` lists as selected (``selected``: cluster, suite, case_id, title) that have
    no result: the run ended (interrupt, kill, crash) before them. A required case (``required`` of run.json)
    is ERROR, another SKIP, so a report of an interrupted run counts every selected case."""
    have = {(r.cluster, r.suite, r.case_id) for r in results}
    required = set(meta.get("required") or [])
    out: list[CaseRecord] = []
    for s in meta.get("selected") or []:
        if not isinstance(s, Mapping) or (str(s.get("cluster")), str(s.get("suite")), str(s.get("case_id"))) in have:
            continue
        is_required = s.get("case_id") in required
        out.append(CaseRecord(run_id=str(meta.get("run_id") or ""), cluster=str(s.get("cluster")),
                              suite=str(s.get("suite")), case_id=str(s.get("case_id")), title=str(s.get("title") or ""),
                              mode=None, attempt=None, status=(Status.ERROR if is_required else Status.SKIP).value,
                              summary="never run: the run ended before this case", duration_s=0.0,
                              required=is_required))
    return out


def suite_groups(results: Sequence[CaseRecord]) -> dict[tuple[str, str], list[CaseRecord]]:
    """Records grouped by (cluster, suite), in the order of ``results`` (already sorted by load_results)."""
    groups: dict[tuple[str, str], list[CaseRecord]] = {}
    for r in results:
        groups.setdefault((r.cluster, r.suite), []).append(r)
    return groups


# --------------------------------------------------------------------------------------------- TSV

_TSV_ESCAPES = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"}
_TSV_UNESCAPES = {"\\": "\\", "t": "\t", "n": "\n", "r": "\r"}
_TSV_SPECIAL = re.compile("[\\\\\x00-\x1f\x7f-\x9f\u2028\u2029]")
_TSV_ESCAPE_SEQ = re.compile(r"\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|.)", re.DOTALL)


def tsv_escape(value: Any) -> str:
    """``str(value)`` (None -> ``""``) escaped for one TSV field: backslash, tab, LF and CR become ``\\\\``,
    ``\\t``, ``\\n``, ``\\r``; other control characters and U+2028/U+2029 become ``\\xNN``/``\\uNNNN``."""
    text = "" if value is None else str(value)
    return _TSV_SPECIAL.sub(lambda m: _TSV_ESCAPES.get(m.group(0)) or run_store.escape_char(m.group(0)), text)


def _unescape_one(m: re.Match[str]) -> str:
    seq = m.group(1)
    if len(seq) > 1:
        return chr(int(seq[1:], 16))
    return _TSV_UNESCAPES.get(seq, m.group(0))


def tsv_unescape(text: str) -> str:
    """Inverse of :func:`tsv_escape`; an unknown escape such as ``\\q`` is kept as written."""
    return _TSV_ESCAPE_SEQ.sub(_unescape_one, text)


def format_tsv(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """TSV text: the header and the escaped rows, each ending in ``\\n``."""
    lines = ["\t".join(header)] + ["\t".join(tsv_escape(v) for v in row) for row in rows]
    return "\n".join(lines) + "\n"


def read_tsv(path: Path) -> list[list[str]]:
    """Rows of a TSV written by :func:`build` (header included), split on ``\\n`` and tab, unescaped."""
    text = Path(path).read_text(encoding="utf-8")
    return [[tsv_unescape(f) for f in line.split("\t")] for line in text.split("\n") if line != ""]


def case_summary_rows(results: Sequence[CaseRecord]) -> list[tuple[str, ...]]:
    """Rows of ``case-summary.tsv`` (without the header), one per result."""
    return [
        (
            r.cluster,
            r.suite,
            r.case_id,
            record_status(r).value,
            cell_text(r.summary),
            r.case_log_dir,
        )
        for r in results
    ]


def run_summary_rows(results: Sequence[CaseRecord]) -> list[tuple[str, ...]]:
    """Rows of ``run-summary.tsv`` (without the header): per (cluster, suite) the ``all`` row, then its cases."""
    rows: list[tuple[str, ...]] = []
    for (cluster, suite), group in suite_groups(results).items():
        rows.append((cluster, suite, "all", aggregate_status(record_status(r) for r in group).value))
        rows.extend((cluster, suite, r.case_id, record_status(r).value) for r in group)
    return rows


def cell_text(value: Any) -> str:
    """The stored summary as text (None -> ""); kept verbatim, escaping happens when written."""
    return "" if value is None else str(value)




def record_duration(record: CaseRecord) -> float:
    """The record's ``duration_s`` in seconds; 0.0 when missing or not a finite number."""
    d = record.duration_s
    return float(d) if isinstance(d, (int, float)) and not isinstance(d, bool) and math.isfinite(d) else 0.0


def failure_text(record: CaseRecord) -> str:
    """The failed checks of a record, one line each, its error, case dir and evidence files (JUnit and Markdown)."""
    lines = []
    for c in record.checks or []:
        if isinstance(c, Mapping) and c.get("ok") is not True:
            verdict = "FAIL" if c.get("ok") is False else "n.a."
            values = ", ".join(f"{k}={run_store.format_value(v, str(k))}" for k, v in (c.get("values") or {}).items())
            line = f"[{verdict}] {c.get('name', '?')}: {c.get('expression', '')}"
            lines.append(line + (f" with {values}" if values else ""))
            if c.get("detail"):
                lines.append(f"    {c['detail']}")
    if record.error:
        lines.append(f"error: {record.error}")
    base = record.case_log_dir
    verdicts = record.verdicts
    if isinstance(verdicts, list) and len(verdicts) > 1:
        lines.append(f"attempts: {record.pass_count} of {len(verdicts)} PASS ({', '.join(map(str, verdicts))})")
        for a in record.attempts_run or []:
            if isinstance(a, Mapping) and a.get("status") != Status.PASS.value:
                where = f"{base}/{a.get('dir')}" if base else str(a.get("dir"))
                lines.append(f"attempt {a.get('attempt')} {a.get('status')} ({where}): {a.get('summary')}")
    evidence = [f"{base}/{e}" if base else str(e) for e in record.evidence or []]
    lines.append(f"case dir: {base}")
    lines.extend(f"evidence: {e}" for e in evidence)
    return "\n".join(lines)




# --------------------------------------------------------------------------------------------- release


#: The three answers of a release decision.
YES, NO, NOT_APPLICABLE = "YES", "NO", "n/a"


@dataclass(frozen=True)
class ReleaseDecision:
    """``verdict``: YES, NO or n/a; ``ready`` is True only for YES (then ``reasons`` is empty); each reason is one
    readable line. ``profiles``: per cluster the release profile that decided (``c1: seed-t4 (inventory)``);
    ``partial``: for a run that did not select every required case, ``partial selection: N of M required cases``."""

    ready: bool
    reasons: tuple[str, ...]
    verdict: str = ""
    profiles: tuple[str, ...] = ()
    partial: str | None = None

    @property
    def answer(self) -> str:
        """YES, NO or n/a."""
        return self.verdict or (YES if self.ready else NO)

    @property
    def label(self) -> str:
        """The answer as every report prints it: ``YES``, ``NO`` or ``n/a (partial selection: 3 of 35 required
        cases)``."""
        if self.answer == NOT_APPLICABLE and self.partial:
            return f"{NOT_APPLICABLE} ({self.partial})"
        return self.answer


def default_required(results: Iterable[CaseRecord]) -> set[str]:
    """Case ids whose records say ``required`` (a missing key counts as required)."""
    return {r.case_id for r in results if r.required is not False}


def case_where(r: CaseRecord) -> str:
    """``cluster/suite/case_id`` of a record."""
    return f"{r.cluster}/{r.suite}/{r.case_id}"


def ran_workloads(record: CaseRecord) -> bool:
    """Whether the case ran workloads (its evidence has their outputs, ``pods/...``): then a verdict about the SUT
    needs the SUT in their path. MET-001's scrape of the scheduler runs none."""
    return any(str(e).startswith("pods/") for e in record.evidence or [])


def sut_path_problem(record: CaseRecord) -> str | None:
    """Why a record's verdict does not show the SUT in its workloads' path (its ``sut_in_path`` check is absent or
    not ok), or None when it does."""
    checks = [c for c in record.checks or [] if isinstance(c, Mapping) and c.get("name") == "sut_in_path"]
    if not checks:
        return "no sut_in_path check in its record: the SUT was not shown in its workloads' path"
    bad = [c for c in checks if c.get("ok") is not True]
    if bad:
        return f"sut_in_path not ok: {bad[0].get('detail') or 'not established'}"
    return None


def profile_line(cluster: str, info: Mapping[str, Any]) -> str:
    """``c1: seed-t4 (inventory release_profile), 35 required cases``: what the reports say decided a cluster."""
    required = info.get("required") or []
    source = f" ({info['source']})" if info.get("source") else ""
    return f"{cluster}: {info.get('profile') or 'selection'}{source}, {len(required)} required case(s)"


def release_decision(
    results: Sequence[CaseRecord],
    required: set[str] | None = None,
    *,
    clusters: Iterable[str] = (),
    interrupted: bool = False,
    profiles: Mapping[str, Mapping[str, Any]] | None = None,
    selected: Sequence[Mapping[str, Any]] | None = None,
    sut_judging_suites: Iterable[str] = (),
    interrupted_by: str | None = None,
) -> ReleaseDecision:
    """The release decision of a run: YES, NO or n/a (docs/release.md).

    ``profiles`` (run.json's ``release_profiles``): per cluster ``{"profile", "source", "required": [case ids],
    "sut": bool, "sut_reason"}``; ``selected`` (run.json's ``selected``): the ``{"cluster", "case_id"}`` the run
    selected; ``sut_judging_suites``: the suites whose verdicts are about the SUT; ``interrupted_by``: the signal that
    interrupted the run, named in its reason (``Ctrl-C``, ``SIGTERM``, ``SIGHUP``; None: not named).

    YES only when every cluster has the SUT (``sut``), the run selected every case of each cluster's profile, each
    of them has a result and none is SKIP, a PASS of a ``sut_judging_suites`` case that ran workloads has its
    ``sut_in_path`` check ok, there are results, at least one PASS, no case (required or not) is FAIL,
    INTERMITTENT, ERROR or INTERRUPTED, every cluster in ``clusters`` has results and the run was not
    ``interrupted``. NO when one of those fails, except that a partial selection (a required case not selected) is
    n/a, "partial selection: N of M required cases", unless something refuses the release whatever was selected:
    a cluster without the SUT, a FAIL or INTERMITTENT case, a PASS without the SUT in its path.

    Without ``profiles`` (a run stored before profiles, a soak, a legacy scenario) the required case ids are
    ``required`` (default :func:`default_required`) and a partial selection cannot be told: YES or NO.
    """
    required = default_required(results) if required is None else set(required)
    reasons: list[str] = []
    refusals: list[str] = []  # reasons that say NO whatever the selection
    lines: list[str] = []
    partial: str | None = None
    judging = set(sut_judging_suites)
    required_on: dict[str, set[str]] = {}
    chosen: dict[str, set[str]] = {}  # per cluster, the case ids the run selected
    if profiles:
        for s in selected or []:
            if isinstance(s, Mapping):
                chosen.setdefault(str(s.get("cluster")), set()).add(str(s.get("case_id")))
        have = sum_required = 0
        for cluster, info in profiles.items():
            needed = {str(c) for c in info.get("required") or []}
            required_on[cluster] = needed
            lines.append(profile_line(cluster, info))
            if not info.get("sut", True):
                refusals.append(f"cluster {cluster} has no SUT: {info.get('sut_reason') or 'the SUT is not there'}")
            have += len(needed & chosen.get(cluster, set()))
            sum_required += len(needed)
        if have < sum_required:
            partial = f"partial selection: {have} of {sum_required} required cases"
            missing = sorted({c for cl, need in required_on.items() for c in need - chosen.get(cl, set())},
                             key=run_store.natural_key)
            shown = ", ".join(missing[:12]) + (f" and {len(missing) - 12} more" if len(missing) > 12 else "")
            reasons.append(f"{partial}; not selected: {shown}")
    if not results:
        reasons.append("no case results in this run")
    if interrupted:
        by = f" ({interrupted_by})" if interrupted_by else ""  # run.json's interrupted_by: the signal as it was
        reasons.append(f"the run was interrupted{by} before it finished")
    for status in (Status.FAIL, Status.INTERMITTENT, Status.ERROR, Status.INTERRUPTED):
        for r in results:
            if record_status(r) is status:
                line = f"{status.value}: {case_where(r)}: {cell_text(r.summary)}"
                (refusals if status in (Status.FAIL, Status.INTERMITTENT) else reasons).append(line)

    def is_required(r: CaseRecord) -> bool:
        needed = required_on.get(r.cluster) if profiles else required
        return needed is not None and r.case_id in needed

    if profiles:
        for cluster, needed in required_on.items():
            present = {r.case_id for r in results if r.cluster == cluster}
            for case_id in sorted((needed & chosen.get(cluster, set())) - present, key=run_store.natural_key):
                reasons.append(f"required case missing: {cluster}/{case_id}")
    else:
        present = {r.case_id for r in results}
        for case_id in sorted(required - present, key=run_store.natural_key):
            reasons.append(f"required case missing: {case_id}")
    for r in results:
        if is_required(r) and record_status(r) is Status.SKIP:
            reasons.append(f"required case skipped: {case_where(r)}: {cell_text(r.summary)}")
        has_sut = (profiles or {}).get(r.cluster, {}).get("sut", True)  # without it: refused above
        if (is_required(r) and has_sut and record_status(r) is Status.PASS and r.suite in judging
                and ran_workloads(r)):
            problem = sut_path_problem(r)
            if problem:
                refusals.append(f"PASS without the SUT in the path: {case_where(r)}: {problem}")
    seen_clusters = {r.cluster for r in results}
    for cluster in sorted(set(clusters) - seen_clusters, key=run_store.natural_key):
        reasons.append(f"cluster {cluster} has no case results")
    if results and not any(record_status(r) is Status.PASS for r in results):
        reasons.append("no case passed")
    every = tuple(refusals + reasons)
    if refusals:
        verdict = NO
    elif partial:
        verdict = NOT_APPLICABLE
    else:
        verdict = NO if reasons else YES
    return ReleaseDecision(verdict == YES, every, verdict, tuple(lines), partial)


def decision_of_run(results: Sequence[CaseRecord], meta: Mapping[str, Any], required: set[str] | None = None,
                    *, interrupted: bool | None = None) -> ReleaseDecision:
    """:func:`release_decision` of a stored run from its run.json (``meta``): its clusters, interruption, release
    profiles, selection and SUT-judging suites; ``required`` defaults to run.json's ``required`` (then the
    records' flags)."""
    if required is None:
        required = set(meta.get("required") or []) or None
    return release_decision(results, required, clusters=meta.get("clusters") or (),
                            interrupted=bool(meta.get("interrupted")) if interrupted is None else interrupted,
                            profiles=meta.get("release_profiles") or None, selected=meta.get("selected") or (),
                            sut_judging_suites=meta.get("sut_judging_suites") or (),
                            interrupted_by=interrupted_by(meta))


def interrupted_by(meta: Mapping[str, Any]) -> str | None:
    """What interrupted a stored run as its run.json says (``interrupted_by``: ``Ctrl-C``, ``SIGTERM``,
    ``SIGHUP``), or None (not interrupted, or a run stored before the field existed)."""
    by = meta.get("interrupted_by")
    return by if isinstance(by, str) and by else None


def release_scope(results: Sequence[CaseRecord], meta: Mapping[str, Any]) -> str:
    """The one line that says what a release decision covers: the cases this run selected (``run.json``'s
    ``selected`` and ``selection``; the case ids of ``results`` for a run.json without them), never the cases of
    the matrix outside that selection. Shared by ``run-report.md`` and ``report.html``."""
    selected = meta.get("selected") or []
    ids = {str(s.get("case_id")) for s in selected if isinstance(s, Mapping)} or {r.case_id for r in results}
    selection = meta.get("selection")
    how = f" (selection: {selection})" if selection else ""
    return (f"The decision covers the {len(ids)} case(s) this run selected{how}, not the cases of the matrix "
            "outside that selection.")


def fmt_rate(rate: float | None) -> str:
    """A :func:`pass_rate` as the reports print it: ``97.5%``, or ``n/a`` when no case ran to a verdict."""
    return "n/a" if rate is None else f"{rate * 100:.1f}%"


@dataclass(frozen=True)
class SuiteLine:
    """One (cluster, suite) of a run as the reports list it: its counts, aggregate status and pass rate."""

    cluster: str
    suite: str
    counts: dict[str, int]
    total: int
    status: str
    rate: str


@dataclass(frozen=True)
class RunOverview:
    """What ``run-report.md`` and ``report.html`` both say of a run before its cases."""

    meta: Mapping[str, Any]
    now: datetime
    counts: dict[str, int]
    required: set[str]
    clusters: list[str]
    decision: ReleaseDecision
    scope: str
    suites: list[SuiteLine]


def run_overview(results: Sequence[CaseRecord], meta: Mapping[str, Any] | None = None, required: set[str] | None = None,
                 now: datetime | None = None) -> RunOverview:
    """The :class:`RunOverview` of ``results`` (``meta`` from ``run.json``; ``required`` defaults to
    :func:`default_required`, ``now`` to the current time): the clusters of the results and of ``meta``, the
    :func:`release_decision` with its :func:`release_scope`, and a :class:`SuiteLine` per :func:`suite_groups` group."""
    meta = meta or {}
    required = default_required(results) if required is None else set(required)
    clusters = sorted({r.cluster for r in results} | {str(x) for x in meta.get("clusters") or []},
                      key=run_store.natural_key)
    decision = decision_of_run(results, meta, required)
    suites = []
    for (cluster, suite), group in suite_groups(results).items():
        gc = counts(group)
        suites.append(SuiteLine(cluster, suite, gc, len(group), aggregate_status(record_status(r) for r in group).value,
                                fmt_rate(pass_rate(gc))))
    return RunOverview(meta, now or datetime.now(timezone.utc), counts(results), required, clusters, decision,
                       release_scope(results, meta), suites)
