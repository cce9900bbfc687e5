"""Prometheus exposition of the scheduler's exporter (``GET /metrics`` on port 9402).

Parsing uses ``prometheus_client.parser.text_string_to_metric_families`` (never a hand-written
exposition parser). On top of it this module records what that lenient parser hides: whether each
family really had ``# HELP`` / ``# TYPE`` lines (the parser fills defaults), the declared type, the
first line it could not parse, and sample lines whose name lacks the expected prefix (the
verification doc's ``grep -v "^#" | grep -v "^xpushare_"`` check, seed 002 §5).

Names are prefix-agnostic (docs/sut/README.md §naming): the exposition's prefix (``xpushare`` or
``nvshare``) is detected, and lookups accept either prefix, or none. Counter names work with and
without ``_total`` (prometheus_client strips ``_total`` from counter *family* names).

Interfaces: docs/sut/metrics.md (exporter, metric catalogue, 36/28 families), §http (HTTP), docs/sut/README.md §pitfalls
item 8; seed 002 (metrics checklist).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

__all__ = [
    "KNOWN_PREFIXES",
    "Exposition",
    "Family",
    "Sample",
    "parse_exposition",
]

KNOWN_PREFIXES = ("xpushare", "nvshare")
"""Metric prefixes of the two naming generations (docs/sut/README.md §naming)."""

_HELP_RE = re.compile(r"#\s+HELP\s+(?P<name>\S+)(?:[ \t]+(?P<doc>.*))?$")
_TYPE_RE = re.compile(r"#\s+TYPE\s+(?P<name>\S+)(?:[ \t]+(?P<type>\S+))?")


@dataclass(frozen=True)
class Sample:
    """One series value: ``name{labels} value``.

    ``name`` is the sample name as written in the text (e.g. ``xpushare_scheduler_messages_total``);
    ``labels`` are ``(name, value)`` pairs in text order; ``value`` is a float (bytes, ratios 0-1,
    percent, ms or counts, per the metric's catalogue entry in docs/sut/metrics.md §catalogue);
    ``family``: the declared family name. See :attr:`label_dict` and :meth:`label`.
    """

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float
    family: str

    @property
    def label_dict(self) -> dict[str, str]:
        """The labels as a dict."""
        return dict(self.labels)

    def label(self, key: str) -> str | None:
        """Value of label ``key``, or ``None`` if absent."""
        for k, v in self.labels:
            if k == key:
                return v
        return None

    def matches(self, labels: dict[str, Any]) -> bool:
        """True if every ``labels`` item equals this sample's label (values compared as ``str``)."""
        own = self.label_dict
        return all(own.get(k) == str(v) for k, v in labels.items())


@dataclass(frozen=True)
class Family:
    """One metric family.

    ``name``: the name as declared by ``# HELP``/``# TYPE`` (counters keep ``_total``), or the
    sample name of an undeclared sample; ``type``: the declared type (``gauge``, ``counter`` ...) or
    ``None`` without a ``# TYPE`` line; ``has_help``/``has_type``: whether those lines were in the
    raw text; ``help``: the HELP text or ``None``; ``samples``: in text order.
    Source: docs/sut/metrics.md §families (every family prints HELP and TYPE, even without samples).
    """

    name: str
    type: str | None
    has_help: bool
    has_type: bool
    help: str | None
    samples: tuple[Sample, ...]


@dataclass(frozen=True)
class Exposition:
    """A parsed ``/metrics`` page.

    * ``families``: in text order (a family without samples is kept: its HELP/TYPE were there);
    * ``prefix``: ``"xpushare"``/``"nvshare"`` (given or detected from names), or ``None``;
    * ``error``: ``None`` if the whole text parsed; else the parser's message, with
      ``offending_line`` (the raw text of the first line that failed) and ``offending_lineno``
      (1-based). Families parsed before the error are kept, so check :attr:`ok` first;
    * ``foreign_lines``: non-comment, non-blank lines whose metric name does not start with
      ``<prefix>_`` (if no prefix is known: lines starting with neither known prefix);
    * ``help_lines``/``type_lines``: counts of raw ``# HELP``/``# TYPE`` lines (seed 002 §5 expects
      >= 25; the exporter prints 36 with a GPU sampler and 28 without, docs/sut/metrics.md §families).

    Lookup helpers take a metric name with either known prefix or none, with or without ``_total``
    for counters, and label filters as keyword arguments (compared as strings).
    """

    families: tuple[Family, ...]
    prefix: str | None
    error: str | None = None
    offending_line: str | None = None
    offending_lineno: int | None = None
    foreign_lines: tuple[str, ...] = ()
    help_lines: int = 0
    type_lines: int = 0
    _by_name: dict[str, list[Sample]] = field(default_factory=dict, init=False, repr=False, compare=False)
    _families_by_name: dict[str, Family] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_name: dict[str, list[Sample]] = {}
        fams: dict[str, Family] = {}
        for fam in self.families:
            fams.setdefault(fam.name, fam)
            for s in fam.samples:
                by_name.setdefault(s.name, []).append(s)
        object.__setattr__(self, "_by_name", by_name)
        object.__setattr__(self, "_families_by_name", fams)

    @property
    def ok(self) -> bool:
        """True if the whole text parsed (``error is None``)."""
        return self.error is None

    # -- name resolution -----------------------------------------------------------------------

    def _candidates(self, name: str) -> list[str]:
        """Names to try for ``name``, most specific first (prefix swapped/added, ``_total`` +/-)."""
        bases = [name]
        if self.prefix is not None:
            own = self.prefix + "_"
            for p in KNOWN_PREFIXES:
                if name.startswith(p + "_") and p != self.prefix:
                    bases = [own + name[len(p) + 1 :]]
                    break
            else:
                if not name.startswith(own):
                    bases.append(own + name)
        out: list[str] = []
        for b in bases:
            out.append(b)
            out.append(b[:-6] if b.endswith("_total") else b + "_total")
        return out

    def resolve(self, name: str) -> str | None:
        """The sample or family name present in this exposition that ``name`` refers to, or ``None``."""
        for c in self._candidates(name):
            if c in self._by_name or c in self._families_by_name:
                return c
        return None

    def family(self, name: str) -> Family | None:
        """The family ``name`` refers to (prefix-agnostic, ``_total`` optional), or ``None``."""
        for c in self._candidates(name):
            fam = self._families_by_name.get(c)
            if fam is not None:
                return fam
        for c in self._candidates(name):
            samples = self._by_name.get(c)
            if samples:
                return self._families_by_name.get(samples[0].family)
        return None

    # -- lookups -------------------------------------------------------------------------------

    def values(self, name: str, **labels: Any) -> list[Sample]:
        """All samples of metric ``name`` whose labels include ``labels`` (text order); ``[]`` if none."""
        for c in self._candidates(name):
            samples = self._by_name.get(c)
            if samples:
                return [s for s in samples if s.matches(labels)]
        return []

    def value(self, name: str, **labels: Any) -> float | None:
        """The value of the ONE series ``name{labels...}``; ``None`` if no series matches.

        Raises ``ValueError`` if several series match (the filter is ambiguous: add labels, or use
        :meth:`values` / :meth:`sum`).
        """
        found = self.values(name, **labels)
        if not found:
            return None
        if len(found) > 1:
            raise ValueError(f"{len(found)} series match {name}{labels or ''}; use values() or sum()")
        return found[0].value

    def sum(self, name: str, **labels: Any) -> float | None:
        """Sum of the matching series' values (``0.0`` if the family is declared but none matches).

        ``None`` only if the metric is absent altogether (neither declared nor sampled), so a missing
        metric is not mistaken for zero.
        """
        if self.resolve(name) is None:
            return None
        return math.fsum(s.value for s in self.values(name, **labels))

    def series_count(self, name: str | None = None) -> int:
        """Number of samples (series) in the page, or of metric ``name`` (prefix-agnostic).

        Useful for LEAK-005 (series must not grow without bound, seed 000 §10.2).
        """
        if name is None:
            return sum(len(v) for v in self._by_name.values())
        return len(self.values(name))

    def family_names(self) -> list[str]:
        """Declared family names in text order (counters keep ``_total``), without duplicates."""
        return list(dict.fromkeys(f.name for f in self.families))

    def per_pod(self, name: str) -> dict[tuple[str, str], float]:
        """``(namespace, pod) -> value`` for a client metric, summed over the pod's clients.

        Client series carry the labels ``namespace`` and ``pod`` (docs/sut/metrics.md §catalogue; e.g.
        ``xpushare_client_managed_allocated_bytes``). A pod with several CUDA processes has several
        series; their values are added (for ``client_info`` that counts the pod's clients). Series
        without both labels are ignored.
        """
        out: dict[tuple[str, str], float] = {}
        for s in self.values(name):
            ns, pod = s.label("namespace"), s.label("pod")
            if ns is None or pod is None:
                continue
            out[(ns, pod)] = out.get((ns, pod), 0.0) + s.value
        return out

    def families_missing_help(self) -> list[str]:
        """Names of families without a ``# HELP`` line in the raw text."""
        return [f.name for f in self.families if not f.has_help]

    def families_missing_type(self) -> list[str]:
        """Names of families without a ``# TYPE`` line in the raw text."""
        return [f.name for f in self.families if not f.has_type]

    def type_of(self, name: str) -> str | None:
        """Declared type of metric ``name`` (``gauge``/``counter``...), ``None`` if undeclared/absent."""
        fam = self.family(name)
        return fam.type if fam is not None else None


def _detect_prefix(names: list[str]) -> str | None:
    counts = {p: 0 for p in KNOWN_PREFIXES}
    for n in names:
        for p in KNOWN_PREFIXES:
            if n.startswith(p + "_"):
                counts[p] += 1
    best = max(KNOWN_PREFIXES, key=lambda p: counts[p])
    return best if counts[best] > 0 else None


def _sample_name(line: str) -> str:
    """The metric name at the start of a sample line (up to ``{``, space or tab)."""
    end = len(line)
    for ch in "{ \t":
        i = line.find(ch)
        if 0 <= i < end:
            end = i
    return line[:end]


def parse_exposition(text: str, prefix: str | None = None) -> Exposition:
    """Parse a Prometheus text exposition (format 0.0.4) into an :class:`Exposition`. Never raises.

    ``prefix``: the expected metric prefix (``"xpushare"`` or ``"nvshare"``, without ``_``); when
    ``None`` it is detected from the names (majority of the two known prefixes). Unparsable text
    gives ``error`` and ``offending_line``/``offending_lineno`` (the first line the parser rejected)
    and keeps the families parsed before it. Empty text parses to no families and no error.
    Source: docs/sut/metrics.md; seed 002 §5 (HELP/TYPE counts, prefix check).
    """
    raw_lines = text.split("\n")
    help_docs: dict[str, str] = {}
    types: dict[str, str] = {}
    help_count = 0
    type_count = 0
    sample_names: list[str] = []
    sample_lines: list[str] = []
    for raw in raw_lines:
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            m = _HELP_RE.match(line)
            if m:
                help_count += 1
                help_docs.setdefault(m.group("name"), m.group("doc") or "")
                continue
            m = _TYPE_RE.match(line)
            if m:
                type_count += 1
                types.setdefault(m.group("name"), m.group("type") or "")
            continue
        sample_lines.append(line)
        sample_names.append(_sample_name(line))

    if prefix is None:
        prefix = _detect_prefix(list(help_docs) + list(types) + sample_names)
    if prefix is not None:
        prefix = prefix.rstrip("_")
        foreign = tuple(ln for ln, n in zip(sample_lines, sample_names, strict=True) if not n.startswith(prefix + "_"))
    else:
        foreign = tuple(
            ln
            for ln, n in zip(sample_lines, sample_names, strict=True)
            if not any(n.startswith(p + "_") for p in KNOWN_PREFIXES)
        )

    parsed: list[Any] = []
    error: str | None = None
    offending: str | None = None
    offending_no: int | None = None
    try:
        for fam in text_string_to_metric_families(text):
            parsed.append(fam)
    except Exception as exc:  # the parser raises ValueError, but malformed input can raise others
        error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        idx = _first_failing_line(raw_lines)
        offending = raw_lines[idx]
        offending_no = idx + 1

    families = tuple(_to_family(f, help_docs, types) for f in parsed)
    return Exposition(
        families=families,
        prefix=prefix,
        error=error,
        offending_line=offending,
        offending_lineno=offending_no,
        foreign_lines=foreign,
        help_lines=help_count,
        type_lines=type_count,
    )


def _fails(lines: list[str]) -> bool:
    try:
        for _ in text_string_to_metric_families("\n".join(lines) + "\n"):
            pass
    except Exception:
        return True
    return False


def _first_failing_line(lines: list[str]) -> int:
    """0-based index of the first line at which parsing fails, by bisecting over text prefixes.

    Parsing progressively finds the culprit even when the parser raises later than the bad line (an
    invalid ``# TYPE`` is only rejected when its family is built, at the next family or at the end).
    Failure is monotone in the prefix length, so the smallest failing prefix ends at the culprit.
    """
    lo, hi = 1, len(lines)  # invariant: lines[:hi] fails
    while lo < hi:
        mid = (lo + hi) // 2
        if _fails(lines[:mid]):
            hi = mid
        else:
            lo = mid + 1
    return max(hi - 1, 0)


def _to_family(fam: Any, help_docs: dict[str, str], types: dict[str, str]) -> Family:
    """Map a prometheus_client Metric to :class:`Family` using the raw HELP/TYPE declarations."""
    pname: str = fam.name
    declared = pname
    if pname not in help_docs and pname not in types and (pname + "_total") in (help_docs.keys() | types.keys()):
        declared = pname + "_total"
    has_help = declared in help_docs
    has_type = declared in types
    typ = types.get(declared) if has_type else None
    samples = []
    for s in fam.samples:
        name = s.name
        # prometheus_client appends "_total" to samples of a counter declared without it; undo that.
        if typ == "counter" and not declared.endswith("_total") and name == declared + "_total":
            name = declared
        try:
            value = float(s.value)
        except (TypeError, ValueError):
            value = math.nan
        samples.append(Sample(name, tuple((str(k), str(v)) for k, v in s.labels.items()), value, declared))
    return Family(
        name=declared,
        type=typ,
        has_help=has_help,
        has_type=has_type,
        help=help_docs.get(declared) if has_help else None,
        samples=tuple(samples),
    )
