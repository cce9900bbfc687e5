"""The tables the legacy scripts print, rebuilt from a case's stored evidence (pure text functions).

Formats (docs/sut/legacy-scripts.md §drivers "check_results output" and step 7; seed 004 shows them filled in):

* per-pod rows ``%-30s | %-8s | %-12s | %-12s | %-12s`` -- pod, status, duration, speed, MaxKernelWin --
  between two lines of 90 ``=``, under the header ``Pod Name | Status | Duration | Avg Speed |
  MaxKernelWin`` (the header of the scripts' ``wait_all_pods_complete``)::

      nvshare-cross-gpu-1            | PASS     | 164s         | 25.83 it/s   | 1024

* the statistics block ``Total: n, Pass: p, Fail: f`` / ``Duration: Min=<d>s, Max=<d>s, Avg=<f1>s`` /
  ``Speed   : Min=<f2>, Max=<f2>, Avg=<f2> (it/s)``;
* ``Scheduler Log Analysis (GPU Distribution):``, per scheduler pod ``Analyzing scheduler pod: <pod>``
  and a table ``Pod Name`` (30) ``| Client ID`` (18) ``| GPU UUID`` (40) over 92 dashes, one row per
  distinct client id of the ``Registered client`` lines.

Where this is stricter than the scripts (their defects are in docs/sut/legacy-scripts.md §drivers "Extraction
caveats"): a pod is ``PASS`` only with phase Succeeded, the ``PASS`` line and a ``--- N seconds ---``
runtime (the scripts accepted either the word or the phase); the speed is the rate of the *last* tqdm
refresh after splitting the log on ``\\r`` (the scripts took the first match, an early refresh, and
carried one pod's speed over to the next); the statistics cover the pods that passed (a failed pod's
time says nothing about the workload). Trailing blanks of padded lines are stripped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from xpushare.model.workload import WorkloadRecord
from xpushare.parsers import pod_log
from xpushare.parsers.scheduler_log import parse_text
from xpushare.parsers.scheduler_log_records import DISTRIBUTION_TITLE
from xpushare.transport.kube_objects import split_prefixed_logs

RULE = "=" * 90
DIST_RULE = "-" * 92
POD_HEADER = ("Pod Name", "Status", "Duration", "Avg Speed", "MaxKernelWin")
STATS_TITLE = "Statistics:"

_KERNEL_WINDOW_RE = re.compile(r"Pending Kernel Window is (\d+)")


@dataclass(frozen=True)
class PodRow:
    """One row of the per-pod table.

    ``phase``: the pod's last phase (``None`` without a pod record); ``passed``: phase Succeeded, the
    ``PASS`` line and a runtime line; ``duration_s``: whole seconds from the container's ``startedAt`` to
    ``finishedAt``, or, with ``estimated``, the elapsed field of the last tqdm refresh (the container had
    not terminated); ``rate_it_s``: iterations per second of the last tqdm refresh; ``runtime_s``: the
    workload's own ``--- N seconds ---``; ``max_kernel_window``: the largest ``Pending Kernel Window is
    <n>`` of the log (client library debug line, docs/sut/client.md §memory-quota), ``None`` when absent.
    """

    name: str
    phase: str | None
    passed: bool
    duration_s: int | None
    estimated: bool
    rate_it_s: float | None
    runtime_s: float | None
    max_kernel_window: int | None
    why: str = ""

    @property
    def status_text(self) -> str:
        """``PASS``, or ``FAIL (<reason>)`` with the phase (or what is missing when it Succeeded)."""
        return "PASS" if self.passed else f"FAIL ({self.why or self.phase or 'no record'})"

    @property
    def duration_text(self) -> str:
        """``<n>s``; ``MM:SS (est)`` when estimated from tqdm; ``-`` when unknown."""
        if self.duration_s is None:
            return "-"
        if self.estimated:
            m, s = divmod(self.duration_s, 60)
            return f"{m:02d}:{s:02d} (est)"
        return f"{self.duration_s}s"

    @property
    def speed_text(self) -> str:
        """``<rate> it/s`` with two decimals, ``-`` when the log has no tqdm refresh with a rate."""
        return "-" if self.rate_it_s is None else f"{self.rate_it_s:.2f} it/s"


def max_kernel_window(text: str) -> int | None:
    """The largest ``Pending Kernel Window is <n>`` value in a workload log, ``None`` when there is none."""
    values = [int(m.group(1)) for m in _KERNEL_WINDOW_RE.finditer(text)]
    return max(values) if values else None


def pod_row(name: str, record: WorkloadRecord | None, log: str | None) -> PodRow:
    """The table row of one pod from its record (``pods.json``) and log (``pods/<pod>.log``); never raises."""
    text = log or ""
    phase = record.phase if record is not None else None
    has_pass = pod_log.has_pass_marker(text)
    runtime = pod_log.runtime_seconds(text)
    passed = phase == "Succeeded" and has_pass and runtime is not None
    why = ""
    if not passed:
        if record is None:
            why = "no record"
        elif log is None:
            why = "no log"
        elif phase != "Succeeded":
            why = str(phase)
        else:
            why = "no PASS" if not has_pass else "no runtime"
    tqdm = pod_log.last_tqdm(text)
    duration: int | None = None
    estimated = False
    if record is not None and record.started is not None and record.finished is not None:
        duration = round(record.finished - record.started)
    elif tqdm is not None:
        duration, estimated = int(tqdm.elapsed_s), True
    return PodRow(
        name=name,
        phase=phase,
        passed=passed,
        duration_s=duration,
        estimated=estimated,
        rate_it_s=tqdm.rate_it_s if tqdm is not None else None,
        runtime_s=runtime,
        max_kernel_window=max_kernel_window(text),
        why=why,
    )


def pod_rows(names: Sequence[str], records: Iterable[WorkloadRecord], logs: Mapping[str, str]) -> list[PodRow]:
    """Rows for ``names`` in that order (a name without a record still gets a FAIL row)."""
    by_name = {r.name: r for r in records}
    return [pod_row(n, by_name.get(n), logs.get(n)) for n in names]


def _cells(cells: Sequence[str]) -> str:
    name, status, duration, speed, window = cells
    return f"{name:<30} | {status:<8} | {duration:<12} | {speed:<12} | {window:<12}".rstrip()


def format_pod_line(row: PodRow) -> str:
    """One legacy row: ``%-30s | %-8s | %-12s | %-12s | %-12s`` (trailing blanks stripped)."""
    window = "-" if row.max_kernel_window is None else str(row.max_kernel_window)
    return _cells((row.name, row.status_text, row.duration_text, row.speed_text, window))


def format_pod_table(rows: Sequence[PodRow], *, header: bool = True) -> str:
    """The per-pod table between two 90-``=`` rules (with the column header unless ``header`` is False)."""
    lines = [RULE]
    if header:
        lines.append(_cells(POD_HEADER))
    lines += [format_pod_line(r) for r in rows]
    lines.append(RULE)
    return "\n".join(lines)


@dataclass(frozen=True)
class Stats:
    """Counts and Min/Max/Avg of the passed pods: durations in seconds, speeds in it/s (None: no value)."""

    total: int
    passed: int
    failed: int
    duration_min: int | None
    duration_max: int | None
    duration_avg: float | None
    speed_min: float | None
    speed_max: float | None
    speed_avg: float | None


def stats(rows: Sequence[PodRow]) -> Stats:
    """Statistics of the rows: measured (not estimated) durations and speeds of the pods that passed."""
    ok = [r for r in rows if r.passed]
    durations = [r.duration_s for r in ok if r.duration_s is not None and not r.estimated]
    speeds = [r.rate_it_s for r in ok if r.rate_it_s is not None]
    return Stats(
        total=len(rows),
        passed=len(ok),
        failed=len(rows) - len(ok),
        duration_min=min(durations) if durations else None,
        duration_max=max(durations) if durations else None,
        duration_avg=sum(durations) / len(durations) if durations else None,
        speed_min=min(speeds) if speeds else None,
        speed_max=max(speeds) if speeds else None,
        speed_avg=sum(speeds) / len(speeds) if speeds else None,
    )


def format_stats(s: Stats) -> str:
    """The statistics block (``n/a`` where no pod that passed gave a value)."""
    if s.duration_avg is None:
        duration = "n/a (no pod passed with a measured duration)"
    else:
        duration = f"Min={s.duration_min}s, Max={s.duration_max}s, Avg={s.duration_avg:.1f}s"
    if s.speed_avg is None:
        speed = "n/a (no tqdm rate in the logs of the pods that passed)"
    else:
        speed = f"Min={s.speed_min:.2f}, Max={s.speed_max:.2f}, Avg={s.speed_avg:.2f} (it/s)"
    return "\n".join([
        STATS_TITLE,
        f"  Total: {s.total}, Pass: {s.passed}, Fail: {s.failed}",
        f"  Duration: {duration}",
        f"  Speed   : {speed}",
    ])


@dataclass(frozen=True)
class DistributionRow:
    """One client registration: the pod, its 16-hex client id and the GPU key (``-`` for nvshare)."""

    pod: str
    client_id: str
    gpu: str


def distribution(scheduler_log: str) -> dict[str, list[DistributionRow]]:
    """Scheduler pod -> its registrations (one per distinct client id, in order).

    ``scheduler_log`` is ``kubectl logs --prefix`` output (``[pod/<name>/<container>] ...``, with or
    without ``--timestamps``); a log without prefixes counts as one scheduler pod named ``-``.
    """
    per_pod = split_prefixed_logs(scheduler_log) or ({"-": scheduler_log} if scheduler_log.strip() else {})
    out: dict[str, list[DistributionRow]] = {}
    for sched, text in per_pod.items():
        seen: dict[str, DistributionRow] = {}
        for r in parse_text(text).registrations:
            if r.cid not in seen:
                seen[r.cid] = DistributionRow(r.pod, r.cid, r.gpu if r.gpu is not None else "-")
        out[sched] = list(seen.values())
    return out


def format_distribution(dist: Mapping[str, Sequence[DistributionRow]]) -> str:
    """``Scheduler Log Analysis (GPU Distribution):`` with one block per scheduler pod that saw clients."""
    lines = [DISTRIBUTION_TITLE]
    shown = {k: v for k, v in dist.items() if v}
    if not shown:
        lines.append("(no client registrations in the captured scheduler log)")
    for sched, rows in shown.items():
        lines.append(f"Analyzing scheduler pod: {sched}")
        lines.append(f"{'Pod Name':<30} | {'Client ID':<18} | {'GPU UUID':<40}".rstrip())
        lines.append(DIST_RULE)
        lines += [f"{r.pod:<30} | {r.client_id:<18} | {r.gpu:<40}".rstrip() for r in rows]
    return "\n".join(lines)


def format_monitor_line(clock: str, elapsed_s: float, cells: Sequence[tuple[str, str]]) -> str:
    """A progress poll line of the drivers: ``<HH:MM:SS> [Elapsed: <n>s] <pod>: <cell> | ...``."""
    body = " | ".join(f"{pod}: {cell}" for pod, cell in cells)
    return f"{clock} [Elapsed: {int(elapsed_s)}s] {body}"


def monitor_cell(phase: str, log_tail: str | None) -> str:
    """The cell of one pod: ``Succeeded``/``Failed``, ``Running (<NN>%)`` from the last tqdm refresh,
    ``Running (Wait...)`` without one, else the phase (``Pending``)."""
    if phase in ("Succeeded", "Failed") or phase != "Running":
        return phase
    seg = pod_log.last_tqdm(log_tail or "")
    return f"Running ({seg.percent}%)" if seg is not None else "Running (Wait...)"


def banner(text: str) -> str:
    """A 42-``=`` framed line as the scripts end with (``PASS: ...``)."""
    rule = "=" * 42
    return f"{rule}\n{text}\n{rule}"
