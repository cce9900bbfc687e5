"""The soak keeps the memory probe's log with the kubelet's times: STAB-004 dates each probe line by them
(tests/unit/judge/test_quota_probe.py::test_stab004_dates_the_probe_lines_by_the_kubelets_timestamps)."""

from __future__ import annotations

from pathlib import Path

from tests.fakes.backend import FakeBackend
from xpushare.soak.ops import BackendSoakOps


def test_the_soak_reads_pod_logs_with_timestamps(tmp_path: Path) -> None:
    backend = FakeBackend(log="2026-11-29T10:00:00.000000000Z [XPUSHARE][MEM_PROBE] ...\n")
    assert BackendSoakOps(backend, tmp_path).pod_log("stab-004-r1-probe").startswith("2026-11-29T10:00:00")
    assert backend.log_reads == [("stab-004-r1-probe", True)]
