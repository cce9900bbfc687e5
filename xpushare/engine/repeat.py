"""``--repeat N``: one case run N times, its verdicts folded into one record that says k of N.

Each attempt goes through the whole case lifecycle (:func:`xpushare.engine.lifecycle.run_case`), which archives
the attempt before it under ``attempts/<n>/`` of the case directory, so every attempt's evidence is kept: the last
one at the top of the case directory, attempt ``n`` under ``attempts/<n>/``. The stored record is the last
attempt's with:

* ``verdicts``: each attempt's status in order (``[PASS, FAIL, FAIL]``), ``pass_count`` (how many PASS),
  ``repeat`` (N asked);
* ``attempts_run``: per attempt ``{"attempt", "status", "summary", "dir"}`` (``dir`` relative to the case
  directory: ``attempts/2`` or ``.`` for the last), so the evidence of each failing attempt is named;
* ``status``: the attempts' common status when they agree; **INTERMITTENT** when they do not (PASS in some and
  FAIL or ERROR in others, or FAIL in some and ERROR in others), a failure everywhere (never a pass); INTERRUPTED
  when Ctrl-C stopped an attempt (the run stops there, ``--resume`` runs the case again).

A case that SKIPs is known before it acts: it is not repeated.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from xpushare.engine.lifecycle import store
from xpushare.model.case_record import CaseRecord
from xpushare.model.verdict import Status
from xpushare.report import run_store

__all__ = ["combine", "run_repeated"]

Attempt = Callable[[], tuple[CaseRecord, bool]]


def run_repeated(run_once: Attempt, repeat: int, case_dir: Path) -> tuple[CaseRecord, bool]:
    """Run ``run_once`` (one attempt: its stored record and whether Ctrl-C stopped it) up to ``repeat`` times,
    store the :func:`combine` d record in ``case_dir`` and return it with the interruption flag. One attempt
    alone (``repeat`` 1) is returned as it is."""
    records: list[CaseRecord] = []
    interrupted = False
    for _ in range(max(1, repeat)):
        record, interrupted = run_once()
        records.append(record)
        if interrupted or record.status == Status.SKIP.value:
            break
    if repeat <= 1:
        return records[0], interrupted
    combined = combine(records, repeat)
    store(case_dir, combined)
    return combined, interrupted


def _dir_of(record: CaseRecord, last: bool) -> str:
    if last or record.attempt is None:
        return "."
    return f"{run_store.ATTEMPTS_DIR}/{record.attempt}"


def combine(records: Sequence[CaseRecord], repeat: int) -> CaseRecord:
    """One record for a case's ``records`` (its attempts, in order; see the module docstring)."""
    last = records[-1]
    statuses = [r.status for r in records]
    passes = statuses.count(Status.PASS.value)
    attempts = [{"attempt": r.attempt, "status": r.status, "summary": r.summary,
                 "dir": _dir_of(r, i == len(records) - 1)} for i, r in enumerate(records)]
    k_of_n = f"{passes} of {len(records)} attempt(s) PASS"
    if Status.INTERRUPTED.value in statuses:
        status, summary = Status.INTERRUPTED.value, f"{last.summary} ({k_of_n} before it: {', '.join(statuses)})"
    elif len(set(statuses)) > 1:
        failing = "; ".join(f"attempt {a['attempt']} {a['status']} ({a['dir']}): {a['summary']}"
                            for a in attempts if a["status"] != Status.PASS.value)
        status, summary = Status.INTERMITTENT.value, f"{k_of_n} (verdicts {', '.join(statuses)}); {failing}"
    else:
        status, summary = last.status, f"{k_of_n}: {last.summary}"
    evidence = sorted(set(last.evidence) | {f"{a['dir']}/" for a in attempts if a["dir"] != "."})
    return last.replace(status=status, summary=summary, evidence=evidence, repeat=repeat, verdicts=statuses,
                        pass_count=passes, attempts_run=attempts,
                        duration_s=round(sum(r.duration_s or 0.0 for r in records), 3),
                        started=records[0].started)
