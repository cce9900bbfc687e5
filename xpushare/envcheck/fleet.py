"""Fleet view of envcheck: majority value per stack key, deviating nodes, per-node status, reports.

Pure: node results in, a :class:`FleetResult` and its Markdown/JSON out; :func:`write_report` is the
only function that touches the disk (``<out_dir>/fleet-report.md`` and ``fleet.json``).

Majority rule (:func:`majority`): per key, the most frequent value among the nodes that reported one;
a tie is broken by the value of the alphabetically first node holding a tied value, and the entry is
marked ``tied`` (no strict majority: every node outside the chosen value is listed as deviating, so a
2-node fleet that disagrees shows the disagreement rather than hiding it).

Readable at fleet size (1,000 nodes and more): :func:`outcomes` groups the nodes that ended alike (the same
status and summary; unreachable nodes by why), failing groups first, each a folded ClusterShell node set
(``gpu[001-480,482-999]``, the syntax ``--limit`` takes back); the report and the terminal summary lead with these
groups, list the per-node rows failing nodes first, and fold the node lists of the alignment table, the deviating
nodes and the checks that did not pass.

Node status: UNREACHABLE when the node did not answer (with why: dns, refused, timeout, auth, host key; the
other nodes are still checked); else FAIL when any of its steps (stack, cublas, nccl) is FAIL; else ERROR when any
is ERROR; else PASS (SKIP steps don't fail a node). Fleet exit status: UNREACHABLE (3) when a node could not be
reached, else FAILED (1) when a node or the cross-node step is FAIL or ERROR,
else OK (0).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xpushare.envcheck.checks import ALIGN_KEYS
from xpushare.inventory.selection import fold
from xpushare.model.exit_status import ExitStatus, decide_exit_status
from xpushare.model.verdict import Status, Verdict
from xpushare.report.run_store import atomic_write_text

UNREACHABLE = "UNREACHABLE"
"""A node's label in the fleet report when it did not answer."""

REPORT_MD = "fleet-report.md"
REPORT_JSON = "fleet.json"
STEPS: tuple[str, ...] = ("stack", "cublas", "nccl")
SCHEMA = "xpushare.envcheck.fleet/1"


@dataclass(frozen=True)
class Majority:
    """The fleet's majority value of one key: ``count`` of ``total`` reporting nodes hold it.

    ``deviating`` maps node -> its value for nodes that differ; ``tied`` when no value has a strict majority.
    """

    key: str
    value: str
    count: int
    total: int
    tied: bool
    deviating: Mapping[str, str]


def majority(values_by_node: Mapping[str, Mapping[str, str]], keys: Sequence[str] = ALIGN_KEYS) -> dict[str, Majority]:
    """Majority value and deviating nodes per key (see the module docstring for ties).

    ``values_by_node``: node -> {key: value} for the nodes that reported (unreachable nodes are left out).
    Keys no node reported are absent from the result.
    """
    out: dict[str, Majority] = {}
    nodes = sorted(values_by_node)
    for key in keys:
        held = {n: values_by_node[n][key] for n in nodes if key in values_by_node[n]}
        if not held:
            continue
        counts = Counter(held.values())
        top = max(counts.values())
        tied_values = {v for v, c in counts.items() if c == top}
        winner = next(held[n] for n in nodes if n in held and held[n] in tied_values)
        out[key] = Majority(key, winner, top, len(held), len(tied_values) > 1,
                            {n: v for n, v in held.items() if v != winner})
    return out


def deviations_of(node: str, table: Mapping[str, Majority], ignore: Sequence[str] = ()) -> dict[str, tuple[str, str]]:
    """``{key: (node's value, majority value)}`` of the keys where ``node`` deviates (``ignore`` left out)."""
    return {k: (m.deviating[node], m.value) for k, m in table.items() if node in m.deviating and k not in ignore}


@dataclass
class NodeResult:
    """One node's outcome: its verdict per step, where its files are, and why it failed to run if it did."""

    node: str
    steps: dict[str, Verdict] = field(default_factory=dict)
    unreachable: bool = False
    error: str | None = None
    why: str | None = None
    """Why the node did not answer (:attr:`~xpushare.model.errors.HostUnreachable.why`), when ``unreachable``."""
    gpu_name: str | None = None
    gpu_count: int = 0
    artifacts_dir: str | None = None

    @property
    def status(self) -> Status:
        statuses = [v.status for v in self.steps.values()]
        if Status.FAIL in statuses:
            return Status.FAIL
        if self.unreachable or self.error or Status.ERROR in statuses or not statuses:
            return Status.ERROR
        return Status.PASS

    @property
    def label(self) -> str:
        """The status the reports show: ``UNREACHABLE`` for a node that did not answer (its :attr:`status` is
        ERROR: it counts as a node not accepted), else :attr:`status`."""
        return UNREACHABLE if self.unreachable else self.status.value

    @property
    def summary(self) -> str:
        if self.unreachable:
            return f"{UNREACHABLE} ({self.why or 'unreachable'}): {self.error or 'no answer'}"
        if self.error and not self.steps:
            return self.error
        bad = [f"{s}: {v.summary}" for s, v in self.steps.items() if v.status in (Status.FAIL, Status.ERROR)]
        return "; ".join(bad) if bad else "ok"

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "status": self.label, "summary": self.summary,
                "unreachable": self.unreachable, "why": self.why, "error": self.error, "gpu_name": self.gpu_name,
                "gpu_count": self.gpu_count, "artifacts_dir": self.artifacts_dir,
                "steps": {k: v.to_dict() for k, v in self.steps.items()}}


#: Report order of the node labels: failing first (a node not reached, then FAIL, then ERROR), PASS last.
LABEL_ORDER: tuple[str, ...] = (UNREACHABLE, Status.FAIL.value, Status.ERROR.value, Status.SKIP.value,
                                Status.PASS.value)


def label_rank(label: str) -> int:
    """Position of a node label in :data:`LABEL_ORDER` (unknown labels after the failing ones, before PASS)."""
    return LABEL_ORDER.index(label) if label in LABEL_ORDER else len(LABEL_ORDER) - 1


def failing_first(nodes: Sequence[NodeResult]) -> list[NodeResult]:
    """``nodes`` ordered by :data:`LABEL_ORDER`, keeping their order within a label."""
    return sorted(nodes, key=lambda n: label_rank(n.label))


def group_summary(node: NodeResult) -> str:
    """What nodes are grouped by besides their label: the summary, and for a node not reached only why (its
    message names its own address), e.g. ``unreachable (refused)``."""
    if node.unreachable:
        return f"unreachable ({node.why or 'no answer'})"
    return node.summary


@dataclass(frozen=True)
class Outcome:
    """Nodes that ended alike: ``label`` (PASS, FAIL, ERROR, UNREACHABLE), ``summary`` (:func:`group_summary`),
    ``nodes`` in report order, and ``example``: the first node's own summary (its message when unreachable)."""

    label: str
    summary: str
    nodes: tuple[str, ...]
    example: str

    @property
    def nodeset(self) -> str:
        """The nodes folded into one ClusterShell node set (``gpu[001-003,007]``)."""
        return fold(self.nodes)

    @property
    def text(self) -> str:
        """The summary, with the first node's own message where the group hides it (unreachable nodes)."""
        if self.example == self.summary:
            return self.summary
        return f"{self.summary}: {self.example}" if len(self.nodes) == 1 else \
            f"{self.summary}; e.g. {self.nodes[0]}: {self.example}"

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.label, "summary": self.summary, "count": len(self.nodes), "nodes": self.nodeset,
                "example": self.example}


def outcomes(nodes: Sequence[NodeResult]) -> list[Outcome]:
    """The nodes grouped by (label, :func:`group_summary`): failing labels first (:data:`LABEL_ORDER`), within a
    label the biggest group first."""
    groups: dict[tuple[str, str], list[NodeResult]] = {}
    for n in nodes:
        groups.setdefault((n.label, group_summary(n)), []).append(n)
    found = [Outcome(label, summary, tuple(n.node for n in members),
                     members[0].error or members[0].summary if members[0].unreachable else members[0].summary)
             for (label, summary), members in groups.items()]
    return sorted(found, key=lambda o: (label_rank(o.label), -len(o.nodes), o.summary))


def folded_by_value(by_node: Mapping[str, str]) -> list[tuple[str, str]]:
    """``[(node set, value)]``: the nodes of ``by_node`` folded per value, the value most nodes hold first."""
    groups: dict[str, list[str]] = {}
    for node, value in by_node.items():
        groups.setdefault(value, []).append(node)
    return [(fold(names), value) for value, names in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))]


@dataclass
class FleetResult:
    """Everything the fleet report shows."""

    run_id: str
    cluster: str
    mode: str
    started: str
    ended: str
    nodes: list[NodeResult]
    majority: dict[str, Majority]
    cross_node: Verdict | None = None
    params: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def deviating_nodes(self) -> dict[str, list[str]]:
        """node -> keys it deviates in, sorted by node name."""
        out: dict[str, list[str]] = {}
        for key, m in self.majority.items():
            for node in m.deviating:
                out.setdefault(node, []).append(key)
        return dict(sorted(out.items()))

    def exit_status(self) -> ExitStatus:
        bad = (Status.FAIL, Status.ERROR)
        failed = any(n.status in bad for n in self.nodes) or bool(self.cross_node and self.cross_node.status in bad)
        return decide_exit_status(failed=failed, unreachable=any(n.unreachable for n in self.nodes))

    def outcomes(self) -> list[Outcome]:
        """The nodes grouped by outcome, failing groups first (:func:`outcomes`)."""
        return outcomes(self.nodes)

    def deviating_groups(self) -> list[tuple[str, list[str]]]:
        """``[(node set, keys)]``: the deviating nodes folded per list of keys they deviate in."""
        return [(nodeset, keys.split(",")) for nodeset, keys in
                folded_by_value({n: ",".join(k) for n, k in self.deviating_nodes.items()})]

    def counts(self) -> dict[str, int]:
        c = Counter(n.label for n in self.nodes)
        return {s: c[s] for s in [*(s.value for s in Status), UNREACHABLE] if c.get(s)}

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA, "run_id": self.run_id, "cluster": self.cluster, "mode": self.mode,
            "started": self.started, "ended": self.ended, "exit_status": int(self.exit_status()),
            "counts": self.counts(), "outcomes": [o.to_dict() for o in self.outcomes()],
            "params": self.params, "notes": self.notes,
            "majority": {k: {"value": m.value, "count": m.count, "total": m.total, "tied": m.tied,
                             "deviating": dict(m.deviating)} for k, m in self.majority.items()},
            "deviating_nodes": self.deviating_nodes,
            "cross_node": self.cross_node.to_dict() if self.cross_node else None,
            "nodes": [n.to_dict() for n in self.nodes],
        }


# ---------------------------------------------------------------------------------------------- Markdown


def _cell(value: Any) -> str:
    text = "-" if value is None or value == "" else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _short(value: str, width: int = 60) -> str:
    return value if len(value) <= width else value[: width - 3] + "..."


def _figure(v: Verdict | None, key: str, fmt: str) -> str:
    if v is None or v.status is Status.SKIP:
        return "SKIP" if v is not None else "-"
    value = v.metrics.get(key)
    return fmt.format(value) if value is not None else v.status.value


def render_markdown(result: FleetResult) -> str:
    """The fleet report: summary, outcomes (grouped, failing first, folded node sets), per-node table (failing
    first), alignment table, deviating nodes, GPU figures, cross-node, the checks that did not pass (folded)."""
    exit_status = result.exit_status()
    counts = ", ".join(f"{k} {v}" for k, v in result.counts().items()) or "no node"
    ordered = failing_first(result.nodes)
    out = [f"# envcheck fleet report: {result.cluster} ({result.run_id})", ""]
    out.append(f"Mode `{result.mode}`, {len(result.nodes)} node(s): {counts}; exit status {int(exit_status)} "
               f"({exit_status.name}). Started {result.started}, ended {result.ended}.")
    for note in result.notes:
        out.append(f"\n> {note}")
    out += ["", "## Outcomes", ""]
    groups = [[o.label, len(o.nodes), f"`{o.nodeset}`", _short(o.text, 160)] for o in result.outcomes()]
    out.append(_table(["status", "nodes", "node set", "summary"], groups) if groups else "No node.")
    out += ["", "## Nodes", ""]
    rows = []
    for n in ordered:
        stack, cublas, nccl = (n.steps.get(s) for s in STEPS)
        values = (stack.metrics.get("values") if stack else None) or {}
        rows.append([n.node, n.label, values.get("driver_version"), values.get("torch_version"),
                     f"{n.gpu_count} x {n.gpu_name}" if n.gpu_count else "none",
                     _figure(cublas, "min_tflops", "{:.1f}"), _figure(nccl, "peak_busbw_gbps", "{:.1f}"),
                     _short(n.summary, 100)])
    out.append(_table(["node", "status", "driver", "torch", "GPUs", "min bf16 TFLOP/s", "peak busbw GB/s",
                       "summary"], rows))
    out += ["", "## Software-stack alignment", ""]
    rows = []
    for key, m in result.majority.items():
        dev = ", ".join(f"{nodeset}={_short(v, 40)}" for nodeset, v in folded_by_value(m.deviating))
        rows.append([key, _short(m.value), f"{m.count}/{m.total}" + (" (tie)" if m.tied else ""), dev or "none"])
    out.append(_table(["key", "majority value", "nodes", "deviating"], rows) if rows else "No stack results.")
    out += ["", "## Deviating nodes", ""]
    dev_groups = result.deviating_groups()
    if dev_groups:
        out += [f"- `{nodeset}`: {', '.join(keys)}" for nodeset, keys in dev_groups]
    else:
        out.append("None: every node that answered matches the majority on every key.")
    gpu_rows = []
    for n in ordered:
        cublas = n.steps.get("cublas")
        if cublas is None or cublas.status is Status.SKIP:
            continue
        pct = cublas.metrics.get("pct_of_nominal") or {}
        for idx, tf in (cublas.metrics.get("tflops") or {}).items():
            gpu_rows.append([n.node, idx, f"{tf:.1f}", f"{pct[idx]:.1f}%" if idx in pct else "-",
                             cublas.thresholds.get("nominal_tflops")])
    out += ["", "## cuBLAS bf16 matrix product", ""]
    out.append(_table(["node", "GPU", "TFLOP/s", "% of nominal", "nominal TFLOP/s"], gpu_rows) if gpu_rows
               else _skip_line(result.nodes, "cublas"))
    out += ["", "## All-reduce per node", ""]
    nccl_blocks = []
    for n in ordered:
        nccl = n.steps.get("nccl")
        if nccl is None or nccl.status is Status.SKIP or not nccl.metrics.get("busbw_gbps"):
            continue
        nccl_blocks.append(f"**{n.node}** ({nccl.status.value}): {nccl.summary}\n\n" + _bw_table(nccl))
    out.append("\n\n".join(nccl_blocks) if nccl_blocks else _skip_line(result.nodes, "nccl"))
    out += ["", "## Cross-node all-reduce", ""]
    cross = result.cross_node
    if cross is None:
        out.append("Not run: fewer than two nodes selected.")
    else:
        out.append(f"{cross.status.value}: {cross.summary}")
        if cross.metrics.get("busbw_gbps"):
            out += ["", _bw_table(cross)]
    out += ["", "## Checks that did not pass", ""]
    failed: dict[tuple[str, str, str, str], list[str]] = {}  # (step, check, rule, detail) -> nodes
    for n in ordered:
        for step, v in n.steps.items():
            for c in v.checks:
                if c.ok is not True:
                    failed.setdefault((step, c.name, c.expression, _short(c.detail, 100)), []).append(n.node)
            if v.status in (Status.FAIL, Status.ERROR) and all(c.ok is True for c in v.checks):  # e.g. no result
                failed.setdefault((step, "-", "-", _short(v.summary, 100)), []).append(n.node)
        if n.unreachable or (n.error and not n.steps):
            failed.setdefault(("-", "reachable", "-", _short(group_summary(n), 100)), []).append(n.node)
    bad = [[fold(nodes), len(nodes), *key] for key, nodes in failed.items()]
    if cross is not None:
        bad += [["cross-node", "-", "nccl", c.name, c.expression, _short(c.detail, 100)] for c in cross.checks
                if c.ok is not True]
    out.append(_table(["node set", "nodes", "step", "check", "rule", "detail"], bad) if bad else "None.")
    out += ["", "## Parameters", "", "```json", json.dumps(result.params, indent=1, sort_keys=True), "```", ""]
    return "\n".join(out)


def _skip_line(nodes: Sequence[NodeResult], step: str) -> str:
    reasons = sorted({v.summary for n in nodes if (v := n.steps.get(step)) is not None})
    return "Not measured: " + ("; ".join(reasons) if reasons else "no node ran this step") + "."


def _bw_table(v: Verdict) -> str:
    bus = v.metrics.get("busbw_gbps") or {}
    alg = v.metrics.get("algbw_gbps") or {}
    return _table(["size", "algbw GB/s", "busbw GB/s"], [[k, f"{alg.get(k, 0):.2f}", f"{bus[k]:.2f}"] for k in bus])


def write_report(result: FleetResult, out_dir: Path) -> tuple[Path, Path]:
    """Write ``fleet-report.md`` and ``fleet.json`` into ``out_dir`` (atomically); return both paths."""
    md = atomic_write_text(out_dir / REPORT_MD, render_markdown(result))
    js = atomic_write_text(out_dir / REPORT_JSON, json.dumps(result.to_dict(), indent=2, sort_keys=False,
                                                               default=str) + "\n")
    return md, js
