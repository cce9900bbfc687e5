"""The rest of the seed's matrix (seed 000 sections 8-11), registered so every case id is known.

These rows carry the seed's title and operation but no implementation yet: selecting one gives a SKIP
whose reason names the piece of work that brings it, never a PASS.
"""

from __future__ import annotations

from xpushare.backends.base import CAP_KUBERNETES
from xpushare.cases.base import REGISTRY, CaseDef, register
from xpushare.model.premises import GPU, SUT

_ROWS: tuple[tuple[str, str, str, str], ...] = (
    ("COMBO-001", "combination", "Oversubscription + static memory quota", "W1 oversub=1, quota 10Gi"),
    ("COMBO-002", "combination", "Oversubscription + compute quota", "2 pods 30/70% on one GPU, oversub=1"),
    ("COMBO-003", "combination", "Static memory + static compute quota", "2 pods core 40/70, memory 4Gi/8Gi"),
    ("COMBO-004", "combination", "Dynamic memory + dynamic compute", "alternate memory/core annotations"),
    ("COMBO-005", "combination", "Oversubscription + dynamic memory", "memory 8Gi -> 2Gi -> 6Gi while running"),
    ("COMBO-006", "combination", "Oversubscription + dynamic compute", "core 80 -> 40 -> 100 while running"),
    ("COMBO-007", "combination", "Everything on", "4 mixed pods: core, memory, oversub"),
    ("COMBO-008", "combination", "Multi-GPU mixed configuration", "8 W5 pods, different quotas per GPU"),
    ("PERF-001", "performance", "Baseline per GPU model", "W6/W7 without quota"),
    ("PERF-002", "performance", "Metrics overhead", "exporter/scrape on vs off"),
    ("PERF-003", "performance", "Single-task quota 25/50/75%", "runtime vs quota"),
    ("PERF-004", "performance", "30% + 60% on one GPU", "runtime ratio vs ideal"),
    ("PERF-005", "performance", "Oversubscription cost (T4)", "oversub off/on"),
    ("PERF-006", "performance", "Oversubscription on large memory (A800)", "oversub off/on"),
    ("PERF-007", "performance", "Dynamic compute quota latency", "annotate -> exported value -> throughput"),
    ("PERF-008", "performance", "Scale ladder", "2/4/8/16 pods"),
    ("PERF-009", "performance", "Single-card subset", "pods on one card"),
    ("PERF-010", "performance", "Multi-card linearity", "pods across cards"),
    ("PERF-011", "performance", "Single-task quota precision", "25/50/75% vs baseline, +-8%"),
    ("MET-001", "metrics", "/healthz and /metrics reachable", "curl from the node"),
    ("MET-002", "metrics", "Required metrics present", "required-metrics list"),
    ("MET-003", "metrics", "Memory metrics consistent", "managed / NVML / estimated"),
    ("MET-004", "metrics", "Quota metrics equal the configuration", "annotation/env vs exported"),
    ("MET-005", "metrics", "Dynamic change latency", "annotate -> exported value"),
    ("MET-006", "metrics", "GPU utilization follows dmon", "metrics vs dmon sm"),
    ("MET-007", "metrics", "Scrape at 2 s", "scrape success and latency"),
    ("MET-008", "metrics", "High-memory alert", "alert expression on samples"),
    ("STAB-001", "stability", "4 pods rotating on one GPU (6 h)", "W2"),
    ("STAB-002", "stability", "16-32 mixed pods (24 h)", "W2/W3"),
    ("STAB-003", "stability", "Dynamic compute every 5 min (6 h)", "W3"),
    ("STAB-004", "stability", "Dynamic memory every 5 min (6 h)", "W2"),
    ("LEAK-001", "stability", "Scheduler RSS trend", "W4 rounds"),
    ("LEAK-002", "stability", "Scheduler FD trend", "W4 rounds"),
    ("LEAK-003", "stability", "GPU memory back to idle baseline", "W2/W4"),
    ("LEAK-004", "stability", "No ghost clients after churn", "W2/W3"),
    ("LEAK-005", "stability", "Metrics series bounded", "W2 churn"),
    ("FAIL-001", "stability", "Restart the scheduler DaemonSet under load", "disruptive"),
    ("FAIL-002", "stability", "Restart the device-plugin DaemonSet under load", "disruptive"),
    ("FAIL-003", "stability", "Drain a node under load", "disruptive"),
    ("FAIL-004", "stability", "Single-node heavy load and recovery", "disruptive"),
    ("FAIL-005", "stability", "One client's GPU error under load", "disruptive"),
    ("FAIL-006", "stability", "A lost GPU under load", "disruptive"),
    ("FAIL-007", "stability", "ECC storm on one GPU", "disruptive"),
)

_WORK = {
    "combination": "the Kubernetes mode (COMBO suite)",
    "performance": "the performance suite",
    "metrics": "the metrics suite",
    "stability": "the stability, leak and fault suites",
}

for _id, _suite, _title, _op in _ROWS:
    if _id in REGISTRY:
        continue
    register(
        CaseDef(
            _id,
            _suite,
            _title,
            "",
            _op,
            "",
            requires=frozenset({SUT, GPU} | ({CAP_KUBERNETES} if _suite == "combination" else set())),
            implemented_by=_WORK[_suite],
        )
    )
