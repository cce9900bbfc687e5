"""The task body of ``invoke metrics-check`` (:func:`metrics_check_task`: ``--url``, or every scheduler of a
``--cluster``), :func:`check_scheduler` (one exporter: its lines and status) and :func:`run_metrics_check`, which
checks one exporter and prints its table. Line by line: ``docs/metrics-check.md``.
"""

from __future__ import annotations

import io
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from xpushare.evidence.http_fetch import Fetch, urllib_fetcher
from xpushare.evidence.scrape_capture import ScrapeRecord
from xpushare.inventory.schema import ClusterSpec
from xpushare.inventory.sut import sut_names
from xpushare.metrics_check.checklist import CheckLine, check_line, exit_status, idle_checks, render_table
from xpushare.metrics_check.counters import DropLockWindow, ReadLog
from xpushare.metrics_check.endpoint import EndpointEvidence, HttpResponse, fetch_endpoint, metrics_scraper
from xpushare.metrics_check.probes import ProbeLoad, run_load_checks
from xpushare.metrics_check.saved import RunDirectory, check_run_id, claim_run_dir
from xpushare.metrics_check.targets import SchedulerTarget, close_all, host_targets, k8s_targets, url_target
from xpushare.model.errors import UsageError
from xpushare.model.exit_status import ExitStatus, decide_exit_status
from xpushare.model.verdict import Status
from xpushare.report.output import render

__all__ = ["SchedulerResult", "check_scheduler", "check_target", "metrics_check_task", "overall_status",
           "run_metrics_check"]

_VERDICT = {ExitStatus.OK: "PASS", ExitStatus.UNREACHABLE: "UNREACHABLE"}


@dataclass
class SchedulerResult:
    """The check of one scheduler: ``lines`` (PASS/FAIL rows), ``status`` (0 all PASS, 1 a FAIL, 3 no response at
    all), ``error`` (why it was unreachable or not checked), the idle part's ``evidence`` (None when not fetched)
    and the load part's pages (``load_scrapes``, Unix times)."""

    name: str
    url: str
    lines: list[CheckLine]
    status: ExitStatus
    error: str | None = None
    fetched_from: str = "this machine"
    node: str | None = None
    pod: str | None = None
    evidence: EndpointEvidence | None = None
    load_scrapes: list[ScrapeRecord] = field(default_factory=list)

    @property
    def failed(self) -> int:
        return sum(1 for ln in self.lines if ln.status is Status.FAIL)

    @property
    def passed(self) -> int:
        return sum(1 for ln in self.lines if ln.ok)

    @property
    def skipped(self) -> int:
        return len(self.lines) - self.passed - self.failed

    def record(self) -> dict[str, Any]:
        """``{"scheduler", "url", "node", "pod", "fetched_from", "status": PASS | FAIL | UNREACHABLE, "passed",
        "failed", "skipped", "error", "checks": [{"check", "expected", "observed", "result"}]}``."""
        return {"scheduler": self.name, "url": self.url, "node": self.node, "pod": self.pod,
                "fetched_from": self.fetched_from, "status": _VERDICT.get(self.status, "FAIL"),
                "passed": self.passed, "failed": self.failed, "skipped": self.skipped, "error": self.error,
                "checks": [{"check": ln.item, "expected": ln.expected, "observed": ln.observed,
                            "result": ln.status.value} for ln in self.lines]}

    def text(self) -> str:
        """``metrics-check <url>``, the table, and the closing line (``n/m PASS``, or ``UNREACHABLE: ...``)."""
        head = f"metrics-check {self.url}" + (f" ({self.name})" if self.name not in self.url else "")
        out = [head, render_table(self.lines)]
        if self.status is ExitStatus.UNREACHABLE:
            out.append(f"UNREACHABLE: no response from {self.url} ({self.error})")
        else:
            n = len(self.lines)
            out.append(f"{self.passed}/{n} PASS" + (f", {self.failed} FAIL" if self.failed else "")
                       + (f", {self.skipped} SKIP" if self.skipped else ""))
        return "\n".join(out)


def _recording(scrape: Callable[[], HttpResponse], into: list[ScrapeRecord]) -> Callable[[], HttpResponse]:
    def recorded() -> HttpResponse:
        started = time.time()
        resp = scrape()
        into.append(ScrapeRecord(started, resp.elapsed_s, resp.status, resp.error, resp.body))
        return resp

    return recorded


def check_scheduler(url: str, *, fetch: Fetch | None = None, prefix: str | None = None, min_families: int = 25,
                    load: ProbeLoad | None = None, expect_idle: bool = True, settle_s: float = 60.0,
                    name: str | None = None, read_log: ReadLog | None = None) -> SchedulerResult:
    """Check the exporter at ``url`` (``fetch`` default: urllib from this machine): the idle lines, then with
    ``load`` the under-load lines (:func:`run_load_checks`; not attempted when the endpoint gave no response at
    all) and the DROP_LOCK line (:class:`~xpushare.metrics_check.counters.DropLockWindow`, against the scheduler's
    log ``read_log``; SKIP without it). ``name``: what the table calls it (default: ``url``)."""
    fetch = fetch or urllib_fetcher()
    evidence = fetch_endpoint(url, fetch)
    lines = idle_checks(evidence, prefix=prefix, min_families=min_families, expect_idle=expect_idle)
    scrapes: list[ScrapeRecord] = []
    if load is not None and not evidence.unreachable:
        scrape = _recording(metrics_scraper(evidence.base_url, fetch), scrapes)
        window = DropLockWindow(read_log, prefix=prefix)
        window.open(evidence.metrics.body if evidence.metrics.status == 200 else None)
        lines += run_load_checks(scrape, load, prefix=prefix, settle_s=settle_s,
                                 while_loaded=lambda: [window.close(scrape, settle_s=settle_s)])
    status = exit_status(lines, unreachable=evidence.unreachable)
    return SchedulerResult(name or evidence.base_url, evidence.base_url, lines, status,
                           evidence.metrics.error if status is ExitStatus.UNREACHABLE else None,
                           evidence=evidence, load_scrapes=scrapes)


def check_target(target: SchedulerTarget, *, prefix: str | None, min_families: int, settle_s: float) -> SchedulerResult:
    """:func:`check_scheduler` of one :class:`~xpushare.metrics_check.targets.SchedulerTarget`; a target that
    cannot be checked (``problem``) is one FAIL line, or UNREACHABLE when nothing could reach it."""
    if target.fetch is None:
        line = check_line("scheduler checked", "reachable, Running", target.problem or "not checked", False)
        status = decide_exit_status(failed=True, unreachable=target.unreachable)
        return SchedulerResult(target.name, target.base_url, [line], status, target.problem, target.fetched_from,
                               target.node, target.pod)
    result = check_scheduler(target.base_url, fetch=target.fetch, prefix=prefix, min_families=min_families,
                             load=target.probe, settle_s=settle_s, name=target.name, read_log=target.read_log)
    result.fetched_from, result.node, result.pod = target.fetched_from, target.node, target.pod
    return result


def run_metrics_check(url: str, *, fetch: Fetch | None = None, prefix: str | None = None, min_families: int = 25,
                      load: ProbeLoad | None = None, expect_idle: bool = True, settle_s: float = 60.0,
                      out: TextIO | None = None, fmt: str = "table") -> ExitStatus:
    """Check the exporter at ``url`` (:func:`check_scheduler`), print its table and closing line to ``out`` (json
    or yaml: its :meth:`SchedulerResult.record` instead); return its status.

    Exit statuses: 0 every line PASS; 1 some line FAIL; 3 the endpoint gave no response at all.
    """
    out = out or sys.stdout
    result = check_scheduler(url, fetch=fetch, prefix=prefix, min_families=min_families, load=load,
                             expect_idle=expect_idle, settle_s=settle_s)
    print(result.text() if fmt == "table" else render(result.record(), fmt), file=out)
    return result.status


def overall_status(results: Sequence[SchedulerResult]) -> ExitStatus:
    """3 when a scheduler gave no response (it was not tested: that takes precedence), else 1 when any line of any
    scheduler FAILs, else 0."""
    statuses = {r.status for r in results}
    return decide_exit_status(failed=ExitStatus.FAILED in statuses, unreachable=ExitStatus.UNREACHABLE in statuses)


class _Tee(io.StringIO):
    """Text written here is also written to ``also`` (the notes go to the terminal and to the saved text)."""

    def __init__(self, also: TextIO) -> None:
        super().__init__()
        self.also = also

    def write(self, s: str) -> int:
        self.also.write(s)
        return super().write(s)


def metrics_check_task(url: str | None, cluster_spec: ClusterSpec | None, *, load: bool | None = None,
                       min_families: int = 25, out: TextIO | None = None, timeout_s: float = 10.0,
                       settle_s: float | None = None, fmt: str = "table", root: Path | None = None,
                       run_id: str | None = None) -> ExitStatus:
    """Body of ``invoke metrics-check``: ``--url http://HOST:PORT`` (one exporter) or ``--cluster C`` (every
    scheduler of the cluster, :mod:`xpushare.metrics_check.targets`), one table per scheduler.

    ``load``: run the under-load part; ``None`` is the default of the target: off for ``--url``, on for
    ``--cluster`` (probes on each scheduler's own node or host, one scheduler after the other). ``settle_s``: how
    long each load step polls for its lines to pass (None: the cluster parameter ``metrics_check_settle_s``, default
    60 s; a line that never passes costs that long, per scheduler).

    ``fmt``: table (notes, then each scheduler's table and closing line, then one overall line on ``out``) | json |
    yaml (only the overall record on ``out``, notes on stderr): ``{"run_id", "saved_to", "status": PASS | FAIL |
    UNREACHABLE, "exit_status", "passed", "failed", "schedulers": [SchedulerResult.record()]}`` (``run_id`` and
    ``saved_to`` null when nothing is saved).

    ``root``: save the run under ``<root>/.tmplog/<run-id>/metrics-check/`` (:mod:`xpushare.metrics_check.saved`;
    ``run_id`` default ``YYYYmmdd-HHMMSS`` now); None saves nothing.

    Returns the overall :class:`ExitStatus` (:func:`overall_status`: 3 a scheduler unreachable, 1 a FAIL line).

    Raises:
        UsageError: both or neither of ``url``/``cluster_spec``, ``load`` with ``url``, host mode without
            ``scheduler.metrics_url``, a bad or stored ``run_id``, a ``root`` that cannot hold the run.
        XpushareError: a k8s cluster without any scheduler pod; TransportError / KubeError from kubectl.
    """
    out = out or sys.stdout
    if (url is None) == (cluster_spec is None):
        raise UsageError("give exactly one of --url or --cluster")
    if url is not None and load is True:
        raise UsageError("--load needs --cluster: probe pods are started through the cluster")
    if root is not None:
        check_run_id(Path(root), run_id)
    notes = _Tee(out if fmt == "table" else sys.stderr)  # json/yaml: only the result on out
    prefix: str | None = None
    if url is not None:
        targets = [url_target(url, timeout_s)]
        settle = 60.0 if settle_s is None else settle_s
    else:
        assert cluster_spec is not None
        cluster = cluster_spec
        want_load = True if load is None else load
        settle = float(cluster.params.get("metrics_check_settle_s", 60.0)) if settle_s is None else settle_s
        names = sut_names(cluster.generation)
        prefix = names.metric_prefix.rstrip("_")
        if cluster.is_kubernetes:
            targets = k8s_targets(cluster, names, load=want_load, timeout_s=timeout_s, notes=notes)
        else:
            targets = host_targets(cluster, load=want_load, timeout_s=timeout_s, notes=notes)
    try:
        saved = claim_run_dir(Path(root), run_id) if root is not None else None
        results: list[SchedulerResult] = []
        for target in targets:
            result = check_target(target, prefix=prefix, min_families=min_families, settle_s=settle)
            results.append(result)
            if fmt == "table":
                print(("\n" if len(results) > 1 else "") + result.text(), file=out)
            if saved is not None:
                _save_scheduler(saved, result)
    finally:
        close_all(targets)
    status = overall_status(results)
    record = _overall_record(results, status, saved)
    closing = _closing_line(results, status, saved)
    if fmt == "table":
        if closing:
            print(closing, file=out)
    else:
        print(render(record, fmt), file=out)
    if saved is not None:
        text = notes.getvalue() + "\n\n".join(r.text() for r in results) + ("\n" + closing if closing else "")
        saved.save_result(text, record)
    return status


def _save_scheduler(saved: RunDirectory, result: SchedulerResult) -> None:
    if result.evidence is not None:
        saved.save_endpoint(result.name, result.evidence)
    saved.save_scrapes(result.name, result.load_scrapes)


def _overall_record(results: Sequence[SchedulerResult], status: ExitStatus,
                    saved: RunDirectory | None) -> dict[str, Any]:
    return {"run_id": saved.run_id if saved else None, "saved_to": str(saved.path) if saved else None,
            "status": _VERDICT.get(status, "FAIL"), "exit_status": int(status),
            "passed": sum(r.passed for r in results), "failed": sum(r.failed for r in results),
            "skipped": sum(r.skipped for r in results),
            "schedulers": [r.record() for r in results]}


def _closing_line(results: Sequence[SchedulerResult], status: ExitStatus, saved: RunDirectory | None) -> str:
    """``metrics-check: 2 schedulers: lab-node1 PASS, lab-node2 FAIL (3 FAIL lines); saved in DIR`` (nothing for
    one scheduler when nothing is saved: its own closing line says it all)."""
    if len(results) == 1 and saved is None:
        return ""
    parts = ", ".join(f"{r.name} {_VERDICT.get(r.status, 'FAIL')}"
                      + (f" ({r.failed} FAIL)" if r.failed and r.status is ExitStatus.FAILED else "")
                      for r in results)
    where = f"; saved in {saved.path}" if saved is not None else ""
    return f"metrics-check: {len(results)} scheduler(s): {parts}: {_VERDICT.get(status, 'FAIL')}{where}"
