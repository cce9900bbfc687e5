"""PERF-013: the wait for a first usable CUDA context with the sharing system in the path (issue 38: the overheads a
user pays, side by side on every sharing system).

``perf013_repeats`` processes of the context probe (``workloads/ctx_probe.py``) run one after another on one GPU,
each timing its driver start (``cuInit``: xpushare's client registers with its scheduler there), its primary
context (an MPS client connects to its server there), its first allocation and its first kernel. No quota: the
wait is what the system adds to every process's start. The judgment is
:func:`xpushare.judge.context_latency.judge_context_latency`; docs/performance.md explains the figures.
"""

from __future__ import annotations

from typing import Any

from xpushare.backends.base import CAP_CLIENT_LIBRARY
from xpushare.cases.base import CaseDef, CaseRun, register
from xpushare.judge.context_latency import judge_context_latency
from xpushare.model.premises import GPU, SUT

CTX_PROBE = "ctx_probe"

PARAMS: dict[str, Any] = {
    "perf013_repeats": 5,
    # the project's own default, not the seed's (the seed has no such case): a process that waits a second for its
    # first kernel pays it at every start; the register-after-5s mutant makes it five
    "perf013_max_total_ms": 1000.0,
}


def _perf013(run: CaseRun) -> None:
    repeats = int(run.params["perf013_repeats"])
    run.plan.update(sut=run.cluster.profile.name, repeats=repeats)
    for i in range(1, repeats + 1):  # one after another: each is a process's first context, alone on the GPU
        run.run_pods([run.pod(f"r{i}", CTX_PROBE)])


register(CaseDef(
    "PERF-013", "performance", "Context creation latency", CTX_PROBE,
    "perf013_repeats processes of the context probe one after another, no quota: driver start (cuInit), primary "
    "context, first 1 MiB allocation, first kernel, each timed; median total <= perf013_max_total_ms",
    "pods/*.log ([XPUSHARE][CTX_PROBE] milliseconds per step), pods.json",
    requires=frozenset({CAP_CLIENT_LIBRARY, SUT, GPU}),
    params=PARAMS, act=_perf013, judge=judge_context_latency, measures_gpu=True,
))
