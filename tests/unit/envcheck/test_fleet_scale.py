"""The fleet report at 1,000 nodes (issue 39): grouped by outcome, the failing nodes first, node sets folded.

A synthetic fleet of 1,000 nodes, judged as a run would judge it: 980 healthy
nodes, 12 on another driver (FAIL: a deviation), 5 whose probe left no result (ERROR) and 3 that did not answer.
Before, the terminal summary was one line per node (1,000 lines, the failing ones among them in inventory order),
and the report listed every deviating node on a line and in a cell of its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.unit.envcheck.test_checks import stack_doc
from xpushare.envcheck import checks, context, fleet, ssh_mode
from xpushare.envcheck.context import NodeRaw, StepRaw
from xpushare.inventory.schema import HostSpec
from xpushare.model.exit_status import ExitStatus
from xpushare.model.verdict import Status, Verdict

NODES = [f"gpu{i:04d}" for i in range(1, 1001)]
OLD_DRIVER = {"gpu0250", "gpu0750", *(f"gpu{i:04d}" for i in range(500, 510))}
NO_RESULT = {f"gpu{i:04d}" for i in (17, 18, 19, 20, 333)}
GONE = {"gpu0100": "refused", "gpu0600": "refused", "gpu0900": "refused"}


def fleet_result() -> fleet.FleetResult:
    """The fleet judged as :func:`xpushare.envcheck.context.judge_nodes` judges it (stack step only: --skip-gpu)."""
    good, old = stack_doc(gpus=1), stack_doc(gpus=1, driver="570.86.15")
    docs = {n: old if n in OLD_DRIVER else good for n in NODES if n not in GONE and n not in NO_RESULT}
    table = fleet.majority({n: checks.stack_values(d) for n, d in docs.items()})
    nodes = []
    for name in NODES:
        if name in GONE:
            nodes.append(fleet.NodeResult(name, unreachable=True, why=GONE[name],
                                          error=f"cannot connect to 10.0.{NODES.index(name)}.1 after 3 attempt(s)"))
            continue
        doc = docs.get(name)
        error = None if doc else "no 'stack' result in the output (exit 1)"
        nodes.append(fleet.NodeResult(name, steps={"stack": checks.judge_stack(doc, fleet.deviations_of(name, table),
                                                                               error=error)}))
    return fleet.FleetResult("r1", "big", "ssh", "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z", nodes, table,
                             Verdict(Status.SKIP, "fewer than two nodes with usable GPUs"))


def test_a_1000_node_fleet_report_is_grouped_failing_first_and_folded() -> None:
    result = fleet_result()
    assert result.exit_status() is ExitStatus.UNREACHABLE
    summary = context.summary_lines(result)
    # one line per outcome, failing first, each with its folded node set (before: 1,000 lines, one per node)
    assert len(summary) == 6, summary
    assert summary[0].split()[:3] == ["UNREACHABLE", "3", "gpu[0100,0600,0900]"]
    assert "unreachable (refused); e.g. gpu0100: cannot connect to 10.0.99.1" in summary[0]
    assert summary[1].split()[:3] == ["FAIL", "12", "gpu[0250,0500-0509,0750]"]
    assert "driver_version: '570.86.15' (majority '580.159.04')" in summary[1]
    assert summary[2].split()[:3] == ["ERROR", "5", "gpu[0017-0020,0333]"]
    assert summary[3].split() == ["PASS", "980", "gpu[0001-0016,0021-0099,0101-0249,0251-0332,0334-0499,0510-0599,"
                                  "0601-0749,0751-0899,0901-1000]"]
    assert summary[4].startswith("cross-node") and "SKIP" in summary[4]
    assert summary[5] == "deviating: gpu[0250,0500-0509,0750] (driver_version)"

    md = fleet.render_markdown(result)
    outcomes = md[md.index("## Outcomes"):md.index("## Nodes")].strip().splitlines()
    assert outcomes[4:] == [
        "| UNREACHABLE | 3 | `gpu[0100,0600,0900]` | unreachable (refused); e.g. gpu0100: cannot connect to 10.0.99.1 "
        "after 3 attempt(s) |",
        "| FAIL | 12 | `gpu[0250,0500-0509,0750]` | stack: aligned: driver_version: '570.86.15' (majority "
        "'580.159.04') |",
        "| ERROR | 5 | `gpu[0017-0020,0333]` | stack: stack probe gave no result: no 'stack' result in the "
        "output (exit 1) |",
        "| PASS | 980 | `gpu[0001-0016,0021-0099,0101-0249,0251-0332,0334-0499,0510-0599,0601-0749,0751-0899,"
        "0901-1000]` | ok |"]
    # the per-node table keeps every node, the 20 that did not pass first
    rows = [line.split(" | ")[0].lstrip("| ") for line in md[md.index("## Nodes"):].splitlines()[4:1004]]
    assert len(rows) == 1000 and set(rows[:20]) == set(GONE) | OLD_DRIVER | NO_RESULT
    assert rows[:3] == ["gpu0100", "gpu0600", "gpu0900"]
    # the deviating nodes and the checks that did not pass are folded
    assert "| driver_version | 580.159.04 | 980/992 | gpu[0250,0500-0509,0750]=570.86.15 |" in md
    assert "- `gpu[0250,0500-0509,0750]`: driver_version" in md
    failed = md[md.index("## Checks that did not pass"):md.index("## Parameters")].strip().splitlines()
    assert failed[4:] == [  # after the heading, a blank line, the header and its rule
        "| gpu[0100,0600,0900] | 3 | - | reachable | - | unreachable (refused) |",
        "| gpu[0250,0500-0509,0750] | 12 | stack | aligned | every key equals the fleet majority | driver_version: "
        "'570.86.15' (majority '580.159.04') |",
        "| gpu[0017-0020,0333] | 5 | stack | - | - | stack probe gave no result: no 'stack' result in the output "
        "(exit 1) |"]

    record = result.to_dict()
    assert [(o["status"], o["count"], o["nodes"]) for o in record["outcomes"]][:3] == [
        ("UNREACHABLE", 3, "gpu[0100,0600,0900]"), ("FAIL", 12, "gpu[0250,0500-0509,0750]"),
        ("ERROR", 5, "gpu[0017-0020,0333]")]
    assert len(record["nodes"]) == 1000  # the record keeps every node


def test_outcomes_group_unreachable_nodes_by_why_and_keep_one_message() -> None:
    nodes = [fleet.NodeResult("b", unreachable=True, why="timeout", error="timed out connecting to 10.0.0.2"),
             fleet.NodeResult("a", unreachable=True, why="refused", error="cannot connect to 10.0.0.1"),
             fleet.NodeResult("c", unreachable=True, why="timeout", error="timed out connecting to 10.0.0.3")]
    groups = fleet.outcomes(nodes)
    assert [(o.label, o.nodeset, o.text) for o in groups] == [
        ("UNREACHABLE", "b,c", "unreachable (timeout); e.g. b: timed out connecting to 10.0.0.2"),
        ("UNREACHABLE", "a", "unreachable (refused): cannot connect to 10.0.0.1")]


class _CountingHost:
    """A host whose connection opens with its first command and closes with :meth:`close`."""

    open_now = 0
    most_open = 0

    def __init__(self, name: str) -> None:
        self.name = name
        self.is_open = False

    def work(self) -> None:
        if not self.is_open:
            self.is_open = True
            _CountingHost.open_now += 1
            _CountingHost.most_open = max(_CountingHost.most_open, _CountingHost.open_now)

    def close(self) -> None:
        if self.is_open:
            self.is_open = False
            _CountingHost.open_now -= 1


def test_ssh_mode_keeps_at_most_forks_connections_open(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before, every node's connection stayed open until the last node was done (peak RSS 206 MB at 1,000 hosts);
    now each closes when its node is done, as ``invoke run`` does."""
    from tests.unit.envcheck.test_checks import ctx_for

    monkeypatch.setattr(_CountingHost, "open_now", 0)
    monkeypatch.setattr(_CountingHost, "most_open", 0)
    monkeypatch.setattr(ssh_mode, "connect", lambda spec: _CountingHost(spec.name))

    def run(node: Any) -> NodeRaw:
        node.host.work()
        return NodeRaw(node.host.name, stack=StepRaw(stack_doc(gpus=0), None, 0))

    monkeypatch.setattr(ssh_mode._SshNode, "run", run)
    ctx = ctx_for(tmp_path, envcheck_cross_node=False)
    hosts = [HostSpec(name=f"n{i:02d}", roles=("gpu",), address="127.0.0.1") for i in range(40)]
    ssh_mode.run_ssh(ctx, hosts, forks=4)
    assert _CountingHost.most_open <= 4 and _CountingHost.open_now == 0
