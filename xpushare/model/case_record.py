"""The record of one case of a run: what ``result.json`` holds (the single source of truth of the reports).

:class:`CaseRecord` is written by the case lifecycle (:mod:`xpushare.engine.lifecycle`) and replaced, never edited,
by a re-judgment (:func:`xpushare.engine.stored_run.rejudge`). Its JSON form (:meth:`CaseRecord.to_json`) has the keys
listed in :mod:`xpushare.report.run_store` in this order::

    run_id cluster suite case_id title mode attempt status summary started ended duration_s phases_s
    thresholds params metrics checks evidence required operation sampling kubectl_calls kubectl_retries error
    [not_run] [premises] [rejudged rejudgments] [repeat verdicts pass_count attempts_run]

``thresholds`` are the parameters the verdict used (``Verdict.thresholds``: what its judgment read, and only
those; empty when nothing was judged); ``params`` every parameter the case ran with (what a re-judgment starts
from). Times are ISO 8601 UTC; ``duration_s`` and ``phases_s`` seconds. ``repeat`` .. ``attempts_run`` are kept by
``--repeat N`` (:mod:`xpushare.engine.repeat`).

Every report reads a run through these records (:func:`xpushare.report.run_store.load_results` returns them, each
:data:`~xpushare.model.verdict.Status` value checked); ``case_log_dir``, the case directory relative to the run
directory (posix), is set by that reader and never stored.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CaseRecord"]

# Keys of to_json in their order; a key of a stored record not among them is kept as it was (``extra``).
_KEYS = ("run_id", "cluster", "suite", "case_id", "title", "mode", "attempt", "status", "summary", "started",
         "ended", "duration_s", "phases_s", "thresholds", "params", "metrics", "checks", "evidence", "required",
         "operation", "sampling", "kubectl_calls", "kubectl_retries", "error")
_DERIVED = ("case_log_dir",)  # set by the reader (report/run_store.load_results), never stored
# Optional keys of to_json after the others, in this order, each only when set.
_REPEAT_KEYS = ("repeat", "verdicts", "pass_count", "attempts_run")


@dataclass(frozen=True)
class CaseRecord:
    """One case's stored record (see the module docstring for the fields)."""

    run_id: str
    cluster: str
    suite: str
    case_id: str
    title: str
    mode: str | None
    attempt: int | None
    status: str
    summary: str | None
    """One line of the verdict; None in a stored record without one (an older or damaged record)."""
    started: str | None = None
    ended: str | None = None
    duration_s: float | None = None
    phases_s: dict[str, float] = field(default_factory=dict)
    thresholds: dict[str, Any] = field(default_factory=dict)
    params: dict[str, Any] | None = None
    """Every parameter of the case; None in a record stored before it was kept apart (then ``thresholds``)."""
    metrics: dict[str, Any] = field(default_factory=dict)
    checks: list[Any] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)
    required: bool | None = None
    operation: str = ""
    sampling: str = ""
    kubectl_calls: int | None = None
    kubectl_retries: int | None = None
    error: str | None = None
    not_run: bool = False
    """A case the run did not reach (``--maxfail``): INTERRUPTED, never acted."""
    premises: list[str] = field(default_factory=list)
    """What the verdict rests on (docs/verdicts.md "Premises"): the case's declared premises; empty in a record
    stored before they were kept."""
    rejudged: str | None = None
    rejudgments: list[dict[str, Any]] | None = None
    repeat: int | None = None
    """``--repeat N``: the N asked (None: the case ran once)."""
    verdicts: list[str] | None = None
    """``--repeat N``: each attempt's status in order."""
    pass_count: int | None = None
    """``--repeat N``: how many attempts PASSed."""
    attempts_run: list[dict[str, Any]] | None = None
    """``--repeat N``: per attempt ``{"attempt", "status", "summary", "dir"}`` (``dir`` relative to the case
    directory)."""
    case_log_dir: str = ""
    """The case directory relative to the run directory (posix), set by the reader of a stored run; never stored."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Keys of a stored record this version does not know, kept so that rewriting the record loses nothing."""

    @property
    def replay_params(self) -> dict[str, Any]:
        """The parameters to judge the case again with: ``params``, or for an older record its ``thresholds``."""
        return dict(self.params if self.params is not None else self.thresholds)

    def to_json(self) -> dict[str, Any]:
        """The record as ``result.json`` stores it (keys in the module docstring's order)."""
        out = {key: getattr(self, key) for key in _KEYS}
        if self.params is None:
            del out["params"]
        if self.not_run:
            out["not_run"] = True
        if self.premises:
            out["premises"] = list(self.premises)
        if self.rejudged is not None:
            out["rejudged"] = self.rejudged
        if self.rejudgments is not None:
            out["rejudgments"] = self.rejudgments
        for key in _REPEAT_KEYS:
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return {**out, **self.extra}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], *, case_log_dir: str = "") -> CaseRecord:
        """A record read back (:func:`xpushare.report.run_store.load_results` validated its field types): missing
        keys take their defaults, unknown keys go to ``extra``; ``case_log_dir`` is the reader's (a stored
        ``case_log_dir`` key is dropped)."""
        known = {f.name for f in dataclasses.fields(cls)} - {"extra", *_DERIVED}
        values = {k: v for k, v in doc.items() if k in known}
        for key, empty in (("phases_s", {}), ("thresholds", {}), ("metrics", {}), ("checks", []),
                           ("evidence", []), ("operation", ""), ("sampling", "")):
            if values.get(key) is None:
                values[key] = empty
        values.setdefault("run_id", "")
        values.setdefault("title", "")
        values.setdefault("summary", None)  # absent stays absent: --output prints it as null, as stored
        values.setdefault("mode", None)
        values.setdefault("attempt", None)
        values["not_run"] = bool(values.get("not_run"))
        extra = {k: v for k, v in doc.items() if k not in known and k not in _DERIVED}
        return cls(**values, case_log_dir=case_log_dir, extra=extra)

    def replace(self, **changes: Any) -> CaseRecord:
        """A copy with ``changes`` (field name -> value)."""
        return dataclasses.replace(self, **changes)

