"""The run directory on disk: paths, per-case ``result.json`` / ``analysis.txt``, attempts and ``run.json``.

Layout (seed 000 section 13; docs/sut/bash-harness.md §artifacts, minus its defects)::

    <root>/.tmplog/<run-id>/xpushare/              run_dir(): run.json, run-summary.tsv, case-summary.tsv,
    ├── <cluster>/<suite>/<case-id>/               case_dir(): result.json, analysis.txt, evidence files
    │   └── attempts/<n>/                          earlier attempts (n = 1, 2, ...), moved there whole
    └── junit.xml, run-report.md                   written by :mod:`xpushare.report.build`

``result.json`` is the single source of truth for a case: the reports are rebuilt from it alone. Unlike
the bash harness it is real JSON (UTF-8, indent 2), written atomically (temp file + ``os.replace``), and
its ``status`` is one of the five :class:`~xpushare.model.verdict.Status` values, so a SKIP is stored as SKIP and
never as PASS. Record keys (the engine's contract, :class:`xpushare.model.case_record.CaseRecord`)::

    run_id cluster suite case_id title mode attempt status summary started ended duration_s phases_s
    thresholds params metrics checks evidence required operation sampling kubectl_calls kubectl_retries error
    [not_run] [premises] [rejudged rejudgments] [repeat verdicts pass_count attempts_run]

A stored run is read back as :class:`~xpushare.model.case_record.CaseRecord` s (:func:`load_results`), which every
report consumes; a key this version does not know is kept in the record's ``extra``.

Names used as path components (run id, cluster, suite, case id) must match ``[A-Za-z0-9._-]{1,64}`` and
must not be ``.`` or ``..``; anything else raises ``ValueError`` so no name can leave the run directory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import re
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path
from typing import Any

from xpushare import __version__
from xpushare.model import atomic_file, bounded_read
from xpushare.model.case_record import CaseRecord
from xpushare.model.errors import StoredRunDamaged
from xpushare.model.verdict import Status

#: Suites in report order (seed 000 section 12). Unknown suite names sort after these, alphabetically.
SUITES: tuple[str, ...] = ("functional", "combination", "performance", "metrics", "stability", "isolation")

RESULT_FILE = "result.json"
ANALYSIS_FILE = "analysis.txt"
RUN_META_FILE = "run.json"
#: The verdict a case had when its run ended, kept whole beside ``result.json`` by the first re-judgment.
ORIGINAL_RESULT_FILE = "result.original.json"
ATTEMPTS_DIR = "attempts"
#: The run id that names the latest stored run wherever a stored run is taken (:func:`resolve_run_id`).
LAST = "last"

#: The biggest result.json or run.json read (bytes): far beyond a real one; a larger one is damaged.
MAX_RECORD_BYTES = 64 * 1024 * 1024

_SAFE_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
_STATUSES = {s.value for s in Status}
# Characters that are invisible or break lines for some readers (C0/C1 controls but tab and LF, U+2028/9).
_INVISIBLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")


# --------------------------------------------------------------------------------------------- names/paths


def _check_name(kind: str, value: str) -> str:
    """Return ``value`` if it is a safe single path component, else raise ``ValueError`` naming ``kind``."""
    if not isinstance(value, str) or not _SAFE_NAME.fullmatch(value) or value in (".", ".."):
        raise ValueError(f"invalid {kind} {value!r}: expected 1-64 characters of [A-Za-z0-9._-], not '.' or '..'")
    return value


def validate_run_id(run_id: str) -> str:
    """Return ``run_id`` unchanged if it is ``[A-Za-z0-9._-]{1,64}`` and not ``.``/``..``.

    Raises ``ValueError`` otherwise (empty, ``a/b``, ``../x``, spaces, too long): a run id becomes a directory
    name, so it must never traverse out of ``.tmplog/``.
    """
    return _check_name("run id", run_id)


def new_run_id(now: datetime) -> str:
    """Run id ``YYYYmmdd-HHMMSS`` of ``now`` as given (the caller picks local time or UTC), e.g. ``20260215-134501``."""
    return now.strftime("%Y%m%d-%H%M%S")


def run_dir(root: Path, run_id: str) -> Path:
    """``<root>/.tmplog/<run_id>/xpushare``, the run directory (not created). ``ValueError`` on a bad run id."""
    return Path(root) / ".tmplog" / validate_run_id(run_id) / "xpushare"


def stored_run_ids(root: Path) -> list[str]:
    """Ids of the runs stored under ``<root>/.tmplog`` (those with an ``xpushare/`` run directory), oldest first.

    Order: the ``started`` time of each run's ``run.json`` (ISO 8601), else the run directory's modification
    time, then the run id. A run.json that cannot be read counts as having no start time.
    """
    base = Path(root) / ".tmplog"
    if not base.is_dir():
        return []
    keyed: list[tuple[float, str]] = []
    for entry in base.iterdir():
        if not _SAFE_NAME.fullmatch(entry.name) or not (entry / "xpushare").is_dir():
            continue
        keyed.append((_started_ts(entry / "xpushare"), entry.name))
    return [run_id for _, run_id in sorted(keyed)]


def _started_ts(path: Path) -> float:
    """Unix time the run in ``path`` started (run.json ``started``), else the directory's mtime."""
    with contextlib.suppress(OSError, ValueError, TypeError, AttributeError, RecursionError):
        started = _read_json(path / RUN_META_FILE).get("started")
        when = datetime.fromisoformat(str(started))
        return (when if when.tzinfo else when.astimezone()).timestamp()
    return path.stat().st_mtime


def resolve_run_id(root: Path, run_id: str) -> str:
    """The stored run ``run_id`` names: :data:`LAST` (``last``) is the latest stored run
    (:func:`stored_run_ids`), any other id is returned validated (:func:`validate_run_id`).

    Raises ``ValueError``: a bad run id, or ``last`` when no run is stored under ``root``.
    """
    if run_id == LAST:
        ids = stored_run_ids(root)
        if not ids:
            raise ValueError(f"--run-id {LAST}: no run stored under {root}")
        return ids[-1]
    return validate_run_id(run_id)


def stored_run_dir(root: Path, run_id: str) -> Path:
    """:func:`run_dir` of a run that was stored (for offline work on it); ``run_id`` may be ``last``
    (:func:`resolve_run_id`). ``ValueError`` on a bad run id or when there is no such run directory
    (``no run '<id>' under <root>``)."""
    path = run_dir(root, resolve_run_id(root, run_id))
    if not path.is_dir():
        raise ValueError(f"no run {run_id!r} under {root}")
    return path


def case_dir(run_dir: Path, cluster: str, suite: str, case_id: str) -> Path:
    """``<run_dir>/<cluster>/<suite>/<case_id>`` (not created). ``ValueError`` if a name is not a safe component."""
    names = (_check_name("cluster", cluster), _check_name("suite", suite), _check_name("case id", case_id))
    return Path(run_dir).joinpath(*names)


def suite_rank(suite: str) -> tuple[int, str]:
    """Sort key of a suite: its index in :data:`SUITES`, unknown suites after them by name."""
    return (SUITES.index(suite), "") if suite in SUITES else (len(SUITES), suite)


def natural_key(text: str) -> tuple[Any, ...]:
    """Sort key that orders embedded numbers numerically: ``FUNC-2`` before ``FUNC-10``."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text))


def result_sort_key(record: CaseRecord) -> tuple[Any, ...]:
    """Sort key of a case record: cluster, suite order (:data:`SUITES`), case id (natural order)."""
    return (
        natural_key(str(record.cluster)),
        suite_rank(str(record.suite)),
        natural_key(str(record.case_id)),
    )


# --------------------------------------------------------------------------------------------- writing


def _jsonable(value: Any) -> Any:
    """Turn ``value`` into plain JSON data: Enum -> value, Path -> posix str, datetime -> ISO str,
    dataclass (e.g. :class:`~xpushare.model.verdict.Check`) -> dict, set/tuple -> list, NaN/inf -> ``"NaN"``/
    ``"Infinity"``/``"-Infinity"`` (strict JSON has no such numbers). Other objects raise ``TypeError``."""
    if isinstance(value, Enum):
        return _jsonable(value.value)
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, Path):
        return value.as_posix()
    if isinstance(value, datetime):
        return value.isoformat()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _jsonable(dataclasses.asdict(value))
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return sorted((_jsonable(v) for v in value), key=str)
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    raise TypeError(f"cannot store {type(value).__name__} in JSON: {value!r}")


def atomic_write_text(path: Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically: temp file in the same directory, fsync, ``os.replace``
    (:func:`xpushare.model.atomic_file.atomic_write`, the one writer of kept files).

    Creates the parent directory. On any error the temp file is removed and ``path`` is left as it was.
    A lone surrogate (text decoded with ``surrogateescape``) is written as ``\\udcXX``, which JSON and
    :func:`xpushare.report.summaries.tsv_unescape` read back as the same character, instead of failing the write.
    """
    return atomic_file.atomic_write_text(path, text)


def _write_json(path: Path, data: Mapping[str, Any]) -> Path:
    plain = _jsonable(data)

    def write(fh: Any) -> None:
        json.dump(plain, fh, indent=2, ensure_ascii=False, allow_nan=False)
        fh.write("\n")

    return atomic_file.atomic_write(path, write)


def write_result(case_dir: Path, doc: Mapping[str, Any]) -> Path:
    """Write ``doc`` (a record's JSON form, :meth:`CaseRecord.to_json`) as ``<case_dir>/result.json`` atomically;
    return the path.

    ``doc`` follows the contract in the module docstring; ``status`` may be a :class:`Status` or its
    string and ``checks`` may hold :class:`~xpushare.model.verdict.Check` objects. Raises ``ValueError`` if
    ``status`` is not one of the five statuses, ``TypeError`` for values JSON cannot hold. The previous
    file, if any, is intact after any error.
    """
    status = doc.get("status")
    status = status.value if isinstance(status, Status) else status
    if status not in _STATUSES:
        raise ValueError(f"result status must be one of {sorted(_STATUSES)}, got {status!r}")
    return _write_json(Path(case_dir) / RESULT_FILE, {**doc, "status": status})


def escape_char(ch: str) -> str:
    """``\\xNN`` for a character below U+0100, else ``\\uNNNN``."""
    return f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}"


def show_controls(text: str) -> str:
    """``text`` with control characters other than tab and LF (ANSI ESC from logs, CR, NUL, C1 controls such
    as U+0085) and U+2028/U+2029 written as ``\\xNN``/``\\uNNNN``, so they can neither hide text nor split
    a line for readers that treat them as line breaks (Python's ``str.splitlines``)."""
    return _INVISIBLE.sub(lambda m: escape_char(m.group(0)), text)


_EPOCH_NAME = re.compile(r"(?:^|_)(?:ts|time|timestamp|at|when|started|ended|epoch)$")
_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
#: Items of a list shown before ``... (+N more)``.
LIST_ITEMS = 8


def _plain_number(value: float) -> str:
    if not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if 1 <= abs(value) < 1e15:
        return f"{value:.3f}".rstrip("0").rstrip(".")
    return f"{value:.4g}"


def format_bytes(value: float) -> str:
    """``13201400`` -> ``12.6 MiB``: bytes in the largest binary unit under the value, 3 significant digits."""
    size, unit = float(value), 0
    while abs(size) >= 1024 and unit < len(_BYTE_UNITS) - 1:
        size, unit = size / 1024, unit + 1
    return f"{int(size)} B" if unit == 0 else f"{size:.3g} {_BYTE_UNITS[unit]}"


def _with_unit(name: str, value: float) -> str | None:
    key = name.lower()
    if _EPOCH_NAME.search(key) and 1e9 <= value < 1e11:  # a unix time stamp: 2001..5138
        return datetime.fromtimestamp(value, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    if key.endswith("bytes"):
        return format_bytes(value)
    if key.endswith(("_s", "seconds")):
        return f"{_plain_number(float(value))} s"
    if key.endswith(("_pct", "percent")):
        return f"{_plain_number(float(value))} %"
    return None


def format_value(value: Any, name: str | None = None) -> str:
    """Readable text of a threshold or metric: ints as is; floats of magnitude 1 to 1e15 with at most 3
    decimals (trailing zeros dropped: ``12.5``, ``3``), other floats to 4 significant digits (``0.1235``,
    ``1.2e-05``); bools ``true``/``false``; None ``n/a``; else ``str()``.

    ``name`` (the value's key) gives a number its unit: ``*bytes`` ``12.6 MiB``, ``*_s``/``*seconds`` ``2.5 s``,
    ``*_pct``/``*percent`` ``30 %``, a unix time under a time-like name (``ts``, ``*_time``, ``started`` ...) as
    ``2026-11-27T02:40:00Z``. Mappings read ``{key: value, ...}`` and lists ``[a, b, ...]`` (the first
    :data:`LIST_ITEMS`, then ``... (+N more)``), each item formatted by these rules under its key."""
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        shown = _with_unit(name, value) if name and math.isfinite(value) else None
        if shown is not None:
            return shown
        return str(value) if isinstance(value, int) else _plain_number(value)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {format_value(v, str(k))}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        items = [format_value(v, name) for v in value[:LIST_ITEMS]]
        more = f", ... (+{len(value) - LIST_ITEMS} more)" if len(value) > LIST_ITEMS else ""
        return "[" + ", ".join(items) + more + "]"
    return str(value)


def _indent(text: str, prefix: str = "  ") -> str:
    return "\n".join(prefix + line for line in (text.splitlines() or [""]))


def _section(title: str, body: str) -> str:
    return f"{title}\n{'-' * len(title)}\n{body}\n"


def _judgment_lines(checks: Iterable[Any]) -> str:
    lines: list[str] = []
    for check in checks:
        c = _jsonable(check) if not isinstance(check, Mapping) else check
        ok = c.get("ok")
        mark = "[ok]  " if ok is True else "[FAIL]" if ok is False else "[n.a.]"
        lines.append(f"{mark} {c.get('name', '?')}: {c.get('expression', '')}")
        values = c.get("values") or {}
        if values:
            lines.append("         with " + ", ".join(f"{k} = {format_value(v, str(k))}" for k, v in values.items()))
        if c.get("detail"):
            lines.append(_indent(str(c["detail"]), "         "))
    return "\n".join(lines) if lines else "  (no checks recorded)"


def _kv_lines(values: Mapping[str, Any] | None) -> str:
    if not values:
        return "  (none)"
    width = max(len(str(k)) for k in values)
    return "\n".join(f"  {k!s:<{width}} = {format_value(v, str(k))}" for k, v in values.items())


def render_analysis(record: CaseRecord) -> str:
    """Text of ``analysis.txt`` for ``record`` (seed 000 section 17.7): a header, then the sections
    Operation, Sampling, Judgment (each check: ``[ok]``/``[FAIL]``/``[n.a.]`` name: expression, with values),
    Thresholds, Key metrics, Evidence and Conclusion (``STATUS: summary``, plus the error text if any).
    Control characters other than tab and newline appear escaped (:func:`show_controls`)."""
    r = record
    title = f"{r.case_id}  {r.title}".rstrip()
    duration = r.duration_s
    header = "\n".join(
        [
            title,
            "=" * len(title),
            f"run {r.run_id}  cluster {r.cluster}  suite {r.suite}  mode {r.mode}  attempt {r.attempt}",
            f"started {r.started}  ended {r.ended}  "
            f"duration {format_value(duration)}{' s' if duration is not None else ''}",
        ]
    )
    evidence = "\n".join(f"  {e}" for e in (r.evidence or [])) or "  (none)"
    calls = r.kubectl_calls
    sampling = _indent(str(r.sampling or "(not recorded)"))
    if calls is not None:
        retried = r.kubectl_retries
        sampling += f"\n  kubectl calls: {calls}" + (
            f" ({retried} of them retries of reads after a transient API failure; debug.log names each)" if retried
            else "")
    phases = r.phases_s
    if phases:  # where the case's time went: begin, act, harvest, cleanup, judge (seconds)
        sampling += "\n  phases: " + ", ".join(f"{k} {format_value(v)} s" for k, v in phases.items())
    status: Any = r.status  # a record built in code may hold the Status itself
    conclusion = _indent(f"{status.value if isinstance(status, Status) else status}: {r.summary}")
    if r.error:
        conclusion += "\n  error:\n" + _indent(str(r.error), "    ")
    parts = [
        header + "\n",
        _section("Operation", _indent(str(r.operation or "(not recorded)"))),
        _section("Sampling", sampling),
        _section("Judgment", _judgment_lines(r.checks or [])),
        _section("Thresholds", _kv_lines(r.thresholds)),
        _section("Key metrics", _kv_lines(r.metrics)),
        _section("Evidence", evidence),
        _section("Conclusion", conclusion),
    ]
    return show_controls("\n".join(parts))


def keep_original_result(case_dir: Path) -> Path | None:
    """Before a re-judgment rewrites ``result.json``: copy it, once, to :data:`ORIGINAL_RESULT_FILE` beside it (a
    later re-judgment keeps the first copy: it is the verdict of the run itself). Returns the copy's path, or None
    without a result.json."""
    source = Path(case_dir) / RESULT_FILE
    target = Path(case_dir) / ORIGINAL_RESULT_FILE
    if not source.is_file():
        return None
    if not target.exists():
        atomic_write_text(target, source.read_text(encoding="utf-8"))
    return target


def rejudgment_label(rejudgments: Iterable[Mapping[str, Any]]) -> str:
    """How the latest re-judgment of a run or case is shown in reports: ``re-judged 2026-...Z with a=1, b=2``
    (``with the stored parameters`` when it overrode none); empty for none."""
    entries = [e for e in rejudgments if isinstance(e, Mapping)]
    if not entries:
        return ""
    last = entries[-1]
    overrides = last.get("overrides") or {}
    given = ", ".join(f"{k}={format_value(v)}" for k, v in overrides.items()) if isinstance(overrides, dict) else ""
    return f"re-judged {last.get('at', '?')} with {given or 'the stored parameters'}"


def write_analysis(case_dir: Path, record: CaseRecord) -> Path:
    """Write ``<case_dir>/analysis.txt`` (see :func:`render_analysis`) atomically; return the path."""
    return atomic_write_text(Path(case_dir) / ANALYSIS_FILE, render_analysis(record))


# --------------------------------------------------------------------------------------------- attempts


def archive_previous_attempt(case_dir: Path) -> int | None:
    """Move every entry of ``case_dir`` except ``attempts/`` into ``attempts/<n>/``; return ``n``.

    ``n`` is one more than the highest numeric directory already under ``attempts/`` (1 for the first).
    Returns None, moving nothing, when ``case_dir`` is missing or holds nothing but ``attempts/``.
    """
    case_dir = Path(case_dir)
    if not case_dir.is_dir():
        return None
    entries = [p for p in case_dir.iterdir() if p.name != ATTEMPTS_DIR]
    if not entries:
        return None
    attempts = case_dir / ATTEMPTS_DIR
    taken = [int(p.name) for p in attempts.iterdir() if p.name.isdigit()] if attempts.is_dir() else []
    n = max(taken, default=0) + 1
    target = attempts / str(n)
    atomic_file.make_dirs(attempts)  # a link planted as attempts/ is refused, never moved into
    target.mkdir()
    for entry in entries:
        os.replace(entry, target / entry.name)
    return n


# --------------------------------------------------------------------------------------------- reading


def _broken_record(rel: Path, message: str) -> dict[str, Any]:
    cluster, suite, case_id = rel.parts[:3]
    return {
        "cluster": cluster,
        "suite": suite,
        "case_id": case_id,
        "status": Status.ERROR.value,
        "summary": message,
        "error": message,
    }


# The types of the record fields readers rely on (a field of another type makes the record a broken one).
_RECORD_FIELDS: dict[str, tuple[type, ...]] = {
    "cluster": (str,), "suite": (str,), "case_id": (str,), "status": (str,), "summary": (str,),
    "title": (str,), "mode": (str, type(None)), "thresholds": (dict, type(None)), "params": (dict, type(None)),
    "metrics": (dict, type(None)), "checks": (list, type(None)), "evidence": (list, type(None)),
    "duration_s": (int, float, type(None)),
    "attempt": (int, type(None)), "required": (bool, type(None)), "error": (str, type(None)),
    "phases_s": (dict, type(None)), "rejudgments": (list, type(None)),
}


def _read_json(path: Path) -> Any:
    """The JSON in ``path``, read at most :data:`MAX_RECORD_BYTES`. Raises OSError, UnicodeDecodeError, ValueError."""
    return json.loads(bounded_read.read_text(path, limit=MAX_RECORD_BYTES))


def _wrong_field(doc: Mapping[str, Any]) -> str | None:
    """Why the stored JSON ``doc`` cannot be a record (a field of the wrong type), or None."""
    for name, types in _RECORD_FIELDS.items():
        value = doc.get(name)
        if name == "rejudgments" and isinstance(value, list) and not all(isinstance(e, dict) for e in value):
            return f"{RESULT_FILE} field 'rejudgments' holds a non-mapping"
        if name in doc and (not isinstance(value, types) or (isinstance(value, bool) and bool not in types)):
            return f"{RESULT_FILE} field {name!r} is a {type(doc[name]).__name__}"
    return None


def _load_one(run_dir: Path, path: Path) -> CaseRecord:
    rel = path.parent.relative_to(run_dir)
    try:
        record = _read_json(path)
    except IsADirectoryError:
        record = _broken_record(rel, f"{RESULT_FILE} is not a file")
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        record = _broken_record(rel, f"unreadable {RESULT_FILE}: {exc}")
    if not isinstance(record, dict):
        record = _broken_record(rel, f"{RESULT_FILE} is not a JSON object")
    wrong = _wrong_field(record)
    if wrong:
        record = _broken_record(rel, wrong)
    cluster, suite, case_id = rel.parts
    record.setdefault("cluster", cluster)
    record.setdefault("suite", suite)
    record.setdefault("case_id", case_id)
    if record.get("status") not in _STATUSES:
        record["summary"] = f"invalid status {record.get('status')!r} in {RESULT_FILE}; {record.get('summary', '')}"
        record["status"] = Status.ERROR.value
    return CaseRecord.from_json(record, case_log_dir=rel.as_posix())


def load_one_result(run_dir: Path, path: Path) -> CaseRecord:
    """The record in ``path`` (a ``result.json`` or ``result.original.json`` of a case of ``run_dir``), read like
    :func:`load_results` reads each: a damaged file is an ERROR record saying so."""
    return _load_one(Path(run_dir), Path(path))


def load_results(run_dir: Path) -> list[CaseRecord]:
    """Every case's latest ``result.json`` (``<run_dir>/*/*/*/result.json``; ``attempts/`` is never read), as
    :class:`~xpushare.model.case_record.CaseRecord` s (:meth:`~xpushare.model.case_record.CaseRecord.from_json`: a
    key missing from an older record takes its default, an unknown key is kept in ``extra``).

    Sorted by :func:`result_sort_key`. ``case_log_dir`` of each is the case directory relative to ``run_dir``
    (posix). Missing cluster/suite/case_id keys are taken from the path. A file that cannot be read, is not a
    JSON object, has a field of the wrong type or an unknown status yields an ERROR record that says so, so a
    damaged case is reported (and re-run on resume) rather than hidden.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    records = [_load_one(run_dir, p) for p in run_dir.glob(f"*/*/*/{RESULT_FILE}")]
    return sorted(records, key=result_sort_key)


def latest_statuses(run_dir: Path) -> dict[tuple[str, str, str], Status]:
    """``{(cluster, suite, case_id): Status}`` of the latest attempt of every case, for ``--resume``."""
    return {(r.cluster, r.suite, r.case_id): Status(r.status) for r in load_results(run_dir)}


# --------------------------------------------------------------------------------------------- run.json


def write_run_meta(run_dir: Path, meta: Mapping[str, Any]) -> Path:
    """Write ``<run_dir>/run.json`` atomically; return the path.

    ``meta`` keys (the engine's contract): run_id, clusters, selection, started, ended, counts (per status),
    tool_version, exit_status, interrupted (bool), argv. ``tool_version`` defaults to this package's version.
    """
    return _write_json(Path(run_dir) / RUN_META_FILE, {"tool_version": __version__, **meta})


# The types of the run.json fields readers rely on.
_META_FIELDS: dict[str, tuple[type, ...]] = {
    "run_id": (str, type(None)), "clusters": (list, type(None)), "selection": (str, type(None)),
    "required": (list, type(None)), "selected": (list, type(None)), "started": (str, type(None)),
    "ended": (str, type(None)), "exit_status": (int, type(None)), "counts": (dict, type(None)),
    "interrupted": (bool, type(None)), "resume": (bool, type(None)), "argv": (list, type(None)),
    "rejudgments": (list, type(None)),
}


def read_run_meta(run_dir: Path) -> dict[str, Any] | None:
    """The ``run.json`` dict, or None if there is none.

    Raises:
        StoredRunDamaged: (a ``ValueError`` and a usage error: exit 2) it cannot be read, is not a JSON object, is
        larger than :data:`MAX_RECORD_BYTES`, is another tool's JSON (a non-empty object with none of run.json's
        fields), or a field has the wrong type (``required: 5``; its list items must be text, ``selected`` and
        ``rejudgments`` items mappings).
    """
    path = Path(run_dir) / RUN_META_FILE
    try:
        data = _read_json(path)
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__
        raise StoredRunDamaged(f"{path}: damaged {RUN_META_FILE} ({detail.splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise StoredRunDamaged(f"{path}: damaged {RUN_META_FILE} (not a JSON object)")
    if data and not set(data) & set(_META_FIELDS):  # another tool's JSON (a Kubernetes object ...) put there
        keys = ", ".join(repr(str(k))[:40] for k in list(data)[:3])
        raise StoredRunDamaged(f"{path}: not a {RUN_META_FILE} of xpushare (none of its fields: {keys})")
    for name, types in _META_FIELDS.items():
        value = data.get(name)
        bad = not isinstance(value, types) or (isinstance(value, bool) and bool not in types)
        if bad:
            raise StoredRunDamaged(f"{path}: damaged {RUN_META_FILE} (field {name!r} is a {type(value).__name__})")
        item_type = str if name in ("clusters", "required") else dict if name in ("selected", "rejudgments") else None
        odd = next((item for item in value or () if not isinstance(item, item_type)), None) if item_type else None
        if item_type and any(not isinstance(item, item_type) for item in value or ()):
            raise StoredRunDamaged(f"{path}: damaged {RUN_META_FILE} (field {name!r} holds a {type(odd).__name__}, "
                                   f"not a {'text' if item_type is str else 'mapping'})")
    return data
