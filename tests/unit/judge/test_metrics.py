"""MET-001..008 judgments (xpushare.judge_metrics) on healthy and broken evidence, and parser fuzzing.

Pages are built from the captured idle page (tests/fixtures/samples/metrics_idle.txt) with the
exporter's label sets (docs/sut/metrics.md §catalogue); dmon captures follow the real samples' layouts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.paths import FIXTURES
from tests.unit.metrics_check.test_metrics_check import IDLE, UUID, with_rows
from xpushare.evidence.client_match import client_match
from xpushare.evidence.store import Evidence
from xpushare.judge import metrics as jm
from xpushare.judge import quantity
from xpushare.model.verdict import Status, Verdict
from xpushare.parsers.scheduler_log import logged_allocations

SAMPLES = FIXTURES / "samples"
GIB = 2**30
POD = "xpm-met-1"
CID = "a309de43403205dc"
PID = 2057141
TRAILER = "\nHTTP_CODE=200\nCONTENT_TYPE=text/plain; version=0.0.4; charset=utf-8\n"
HEALTH_OK = "OK\n\nHTTP_CODE=200\nCONTENT_TYPE=text/plain\n"
UUID2 = "GPU-11111111-2222-3333-4444-555555555555"
K8S = client_match("k8s", POD)  # Kubernetes mode: the probe's clients carry its pod name


def ev(**files: str) -> Evidence:
    """In-memory evidence: file name (relative path) -> content."""
    return Evidence.from_parts([], {}, files)


def names(v: Verdict, ok: bool | None) -> list[str]:
    return [c.name for c in v.checks if c.ok is ok]


def page(*, pod: str = POD, managed: float = 3 * GIB, nvml: float = 3.2 * GIB, gpu_used: float = 3.5 * GIB,
         total: float = 16 * GIB, core: float = 50, mem_quota: float = 0, util: float = 0.6, pid: int = PID,
         extra_gpu: bool = False, gpu_used2: float = 0.0, overloaded: int = 0, drop: Sequence[str] = ()) -> str:
    """A loaded page with one client of ``pod`` and every family that needs a client populated."""
    b = f'{{namespace="default",pod="{pod}",client_id="{CID}",gpu_uuid="{UUID}"}}'
    g = f'{{gpu_uuid="{UUID}",gpu_index="0"}}'
    g2 = f'{{gpu_uuid="{UUID2}",gpu_index="1"}}'
    rows: dict[str, list[str]] = {
        "gpu_info": [f'{{gpu_uuid="{UUID}",gpu_index="0",gpu_name="Tesla T4"}} 1']
        + ([f'{{gpu_uuid="{UUID2}",gpu_index="1",gpu_name="Tesla T4"}} 1'] if extra_gpu else []),
        "gpu_memory_total_bytes": [f"{g} {total:.0f}"] + ([f"{g2} {total:.0f}"] if extra_gpu else []),
        "gpu_memory_used_bytes": [f"{g} {gpu_used:.0f}"] + ([f"{g2} {gpu_used2:.0f}"] if extra_gpu else []),
        "gpu_utilization_ratio": [f"{g} {util:.4f}"] + ([f"{g2} 0.0000"] if extra_gpu else []),
        "gpu_process_count": [f"{g} 1"],
        "client_info": [f'{b[:-1]},gpu_index="-1",host_pid="{pid}"}} 1'],
        "client_managed_allocated_bytes": [f"{b} {managed:.0f}"],
        "client_managed_allocated_peak_bytes": [f"{b} {managed:.0f}"],
        "client_nvml_used_bytes": [f'{b[:-1]},host_pid="{pid}"}} {nvml:.0f}'],
        "client_memory_quota_bytes": [f"{b} {mem_quota:.0f}"],
        "client_memory_quota_exceeded": [f"{b} 0"],
        "client_core_quota_config_percent": [f"{b} {core:g}"],
        "client_core_quota_effective_percent": [f"{b} {core:g}"],
        "client_core_window_usage_ms": [f"{b} 120"],
        "client_core_window_limit_ms": [f"{b} {20 * core:g}"],
        "client_core_usage_ratio": [f"{b} 0.1200"],
        "client_throttled": [f"{b} 0"],
        "client_pending_drop": [f"{b} 0"],
        "client_quota_debt_ms": [f"{b} 0"],
        "scheduler_running_clients": [f"{g} 1"],
        "scheduler_request_queue_clients": [f"{g} 0"],
        "scheduler_wait_queue_clients": [f"{g} 0"],
        "scheduler_running_memory_bytes": [f"{g} {managed:.0f}"],
        "scheduler_peak_running_memory_bytes": [f"{g} {managed:.0f}"],
        "scheduler_memory_safe_limit_bytes": [f"{g} {total * 0.9:.0f}"],
        "scheduler_memory_overloaded": [f"{g} {overloaded}"],
    }
    text = with_rows(IDLE, rows)
    for fam in drop:  # remove a family entirely (HELP, TYPE and samples)
        text = "\n".join(ln for ln in text.splitlines() if f"xpushare_{fam} " not in ln + " "
                         and f"xpushare_{fam}{{" not in ln) + "\n"
    return text


# ---------------------------------------------------------------------------------------- MET-001


def test_met001_healthy_and_legacy_capture() -> None:
    v = jm.judge_met001(ev(**{"metrics_health.txt": HEALTH_OK, "metrics.txt": IDLE + TRAILER}), {})
    assert v.status is Status.PASS, v.summary
    assert v.metrics["samples"] > 0 and v.metrics["metrics_http_code"] == 200
    legacy = ev(**{"metrics_health.txt": "OK\n\nHTTP_CODE=200\n", "metrics.txt": IDLE})  # bash harness format
    assert jm.judge_met001(legacy, {}).status is Status.PASS


def test_met001_broken() -> None:
    v = jm.judge_met001(ev(**{"metrics_health.txt": "\nHTTP_CODE=000\nCONTENT_TYPE=\n", "metrics.txt": IDLE}), {})
    assert v.status is Status.FAIL and "healthz_200" in names(v, False)
    v = jm.judge_met001(ev(**{"metrics_health.txt": HEALTH_OK, "metrics.txt": "process_cpu_seconds_total 1\n"}), {})
    assert v.status is Status.FAIL and names(v, False) == ["metrics_has_prefix"]
    v = jm.judge_met001(ev(**{"metrics_health.txt": HEALTH_OK, "metrics.txt": "garbage {\n" + TRAILER}), {})
    assert "exposition_parses" in names(v, False)
    v = jm.judge_met001(ev(**{"metrics.txt": IDLE}), {})
    assert v.status is Status.ERROR and "metrics_health.txt was not collected" in v.summary


# ---------------------------------------------------------------------------------------- MET-002


def test_met002_required_table_is_data() -> None:
    t = jm.load_required_metrics()
    assert "client_info" in t.always and "scheduler_messages_total" in t.always
    assert "gpu_info" in t.with_sampler and "gpu_info" not in t.required(False)
    assert "client_memory_need_estimated_bytes" in t.optional
    assert not any(s.startswith(("xpushare_", "nvshare_")) for s in t.always + t.with_sampler)


def test_met002_healthy() -> None:
    v = jm.judge_met002(ev(**{"metrics_mid.txt": page()}), {}, client=K8S)
    assert v.status is Status.PASS, v.summary
    assert v.metrics["missing_metric_count"] == 0
    # idle page, no probe: client families need only their HELP/TYPE
    assert jm.judge_met002(ev(**{"metrics.txt": IDLE}), {}).status is Status.PASS
    nv = page().replace("xpushare_", "nvshare_")
    assert jm.judge_met002(ev(**{"metrics_mid.txt": nv}), {}, client=K8S, prefix="nvshare").status is Status.PASS


def test_met002_broken() -> None:
    v = jm.judge_met002(ev(**{"metrics_mid.txt": page(drop=["client_throttled", "gpu_utilization_ratio"])}), {},
                        client=K8S)
    assert v.status is Status.FAIL
    assert v.metrics["missing_metrics"] == ["xpushare_client_throttled", "xpushare_gpu_utilization_ratio"]
    v = jm.judge_met002(ev(**{"metrics_mid.txt": page()}), {}, client=client_match("k8s", "another-pod"))
    assert v.status is Status.FAIL and "probe_client_seen" in names(v, False)
    # the probe runs but the page has no client rows: required samples are missing
    v = jm.judge_met002(ev(**{"metrics_mid.txt": IDLE}), {}, client=K8S)
    assert "required_metrics_present" in names(v, False)
    assert jm.judge_met002(ev(**{"metrics_mid.txt": IDLE}), {"met002_require_samples": False}, client=K8S).checks[2].ok
    no_help = page().replace("# HELP xpushare_client_throttled Whether client is throttled (0/1)\n", "")
    v = jm.judge_met002(ev(**{"metrics_mid.txt": no_help}), {}, client=K8S)
    assert names(v, False) == ["required_metrics_declared"]
    assert jm.judge_met002(ev(), {}).status is Status.ERROR


# ---------------------------------------------------------------------------------------- MET-003


def sampler(pid: int = PID, used: float = 3.2 * GIB, gpu_used: float = 3.5 * GIB, t0: float = 1000.0) -> dict[str, str]:
    procs = "timestamp,gpu_index,pid,used_bytes\n" + "".join(
        f"{t0 + i:.3f},0,{pid},{used:.0f}\n" for i in range(5)) + f"{t0:.3f},0,999,{GIB}\n"
    gpus = "timestamp,gpu_index,uuid,sm_util_pct,mem_used_bytes,mem_total_bytes\n" + "".join(
        f"{t0 + i:.3f},0,{UUID},60,{gpu_used:.0f},{16 * GIB}\n" for i in range(5))
    return {"sampler/c1-gpu1_procs.csv": procs, "sampler/c1-gpu1_gpu.csv": gpus}


def test_met003_healthy() -> None:
    files = {"metrics_mid.txt": page(), **sampler()}
    v = jm.judge_met003(ev(**files), {}, client=K8S, node="c1-gpu1", mid_at=1002.0)
    assert v.status is Status.PASS, v.summary
    assert v.metrics["client_nvml_used_bytes"] == {CID: pytest.approx(3.2 * GIB)}
    assert jm.judge_met003(ev(**files), {}, client=K8S).status is Status.PASS  # sampler files found by name


def test_met003_broken() -> None:
    def judge(files: dict[str, str], th: Mapping[str, Any] | None = None) -> Verdict:
        return jm.judge_met003(ev(**files), th or {}, client=K8S, node="c1-gpu1")

    v = judge({"metrics_mid.txt": page(nvml=0), **sampler()})
    assert v.status is Status.FAIL and "nvml_used_positive" in names(v, False)
    v = judge({"metrics_mid.txt": page(nvml=5 * GIB, gpu_used=3.5 * GIB), **sampler(used=5 * GIB)})
    assert names(v, False) == ["nvml_within_gpu_used"]
    v = judge({"metrics_mid.txt": page(), **sampler(used=1 * GIB)})  # the metric disagrees with NVML
    assert names(v, False) == ["nvml_process_memory_matches"]
    v = judge({"metrics_mid.txt": page(), **sampler(gpu_used=8 * GIB)})
    assert names(v, False) == ["nvml_gpu_memory_matches"]
    v = judge({"metrics_mid.txt": page(), **sampler(pid=4242)})  # host_pid is not NVML's pid (pid-namespace bug)
    assert names(v, False) == ["nvml_process_memory_matches"]
    v = judge({"metrics_mid.txt": page()})
    assert v.status is Status.ERROR and "node sampler" in v.summary
    v = judge({"metrics_mid.txt": page()}, {"met003_require_nvml": False})
    assert v.status is Status.PASS and "NVML cross-check not possible" in v.summary
    v = judge({"metrics_mid.txt": page(pod="other"), **sampler()})
    assert v.status is Status.FAIL and names(v, False) == ["probe_client_seen"]
    v = jm.judge_met003(ev(**{"metrics_mid.txt": page(), **sampler(t0=5000.0)}), {}, client=K8S, node="c1-gpu1",
                        mid_at=1002.0)  # sampler rows far from the snapshot are not used
    assert v.status is Status.ERROR


def sched_log(*mib: int, cid: str = CID, t0: str = "2026-02-14T10:00:0") -> str:
    """The scheduler pods' log (kubectl --prefix --timestamps) with one MEM_UPDATE line per value, a second apart."""
    head = "[pod/xpushare-scheduler-x/xpushare-scheduler] "
    return head + f"{t0}0.1Z [XPUSHARE][INFO]: Registered client {cid} on GPU {UUID}\n" + "".join(
        f"{head}{t0}{i + 1}.5Z [XPUSHARE][DEBUG]: Received MEM_UPDATE from {cid}: {m} MB\n" for i, m in enumerate(mib))


def test_logged_allocations() -> None:
    text = sched_log(1024, 2048, 3072)
    assert logged_allocations(text) == {CID: 3072}
    t = datetime(2026, 2, 14, 10, 0, 2, 600000, tzinfo=timezone.utc).timestamp()  # after the second line
    assert logged_allocations(text, t) == {CID: 2048}
    bare = "[XPUSHARE][DEBUG]: Received MEM_UPDATE from ABCDEF0123456789: 16 MB\n"  # no timestamp: always counts
    assert logged_allocations(bare, 0.0) == {"abcdef0123456789": 16}
    assert logged_allocations("[XPUSHARE][INFO]: Received MEM_UPDATE from x: 1 MB\n") == {}


def test_met003_against_the_scheduler_log() -> None:
    def judge(log: str | None, managed: float = 3 * GIB) -> Verdict:
        files = {"metrics_mid.txt": page(managed=managed), **sampler()}
        if log is not None:
            files["scheduler.log"] = log
        return jm.judge_met003(ev(**files), {}, client=K8S, node="c1-gpu1")

    v = judge(sched_log(1024, 3072))
    assert v.status is Status.PASS and "scheduler.log" in v.evidence, v.summary
    assert names(v, True)[-3:] == ["managed_matches_scheduler_log", "nvml_process_memory_matches",
                                   "nvml_gpu_memory_matches"]
    assert judge(sched_log(3072), managed=3 * GIB + 2**20 - 1).status is Status.PASS  # the log is in whole MiB
    v = judge(sched_log(3072), managed=3.3 * GIB)  # exported 10 % high (the values-off-10 mutant)
    assert v.status is Status.FAIL and names(v, False) == ["managed_matches_scheduler_log"]
    assert "metric 3379 MiB, log 3072 MB" in v.summary
    for log in (None, sched_log(3072, cid="0123456789abcdef"), "no debug lines\n"):  # nothing to compare with
        v = judge(log, managed=3.3 * GIB)
        assert v.status is Status.PASS and "managed allocation not compared" in v.summary, v.summary
        assert "managed_matches_scheduler_log" not in names(v, True) + names(v, False) + names(v, None)


# ---------------------------------------------------------------------------------------- MET-004


def test_read_capture_variants() -> None:
    assert jm.read_capture("OK\n\nHTTP_CODE=200\nCONTENT_TYPE=text/plain\n") == ("OK\n", 200, "text/plain")
    assert jm.read_capture("OK\n\nHTTP_CODE=200\n") == ("OK\n", 200, None)
    assert jm.read_capture("OK\n") == ("OK\n", None, None)


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=400))
def test_fuzz_evidence_parsers_never_raise(text: str) -> None:
    records, _bad = jm.parse_series(text)
    assert all(isinstance(r, jm.ScrapeRecord) for r in records)
    _body, code, _ = jm.read_capture(text)
    assert code is None or code >= 0
    assert quantity.annotation_bytes(text) >= 0
    assert 1 <= quantity.core_limit_value(text) <= 100
    quantity.env_bytes(text)


@settings(max_examples=60, deadline=None)
@given(st.one_of(st.text(max_size=300), st.builds(lambda cut: page()[:cut], st.integers(0, 6000))))
def test_fuzz_judgments_never_raise(text: str) -> None:
    e = ev(**{"metrics_mid.txt": text, "metrics.txt": text, "metrics_health.txt": text,
              "metrics_series.jsonl": jm.ScrapeRecord(1.0, 0.1, 200, None, text).to_json_line()})
    for v in (jm.judge_met001(e, {}), jm.judge_met002(e, {}, client=K8S), jm.judge_met003(e, {}, client=K8S),
              jm.judge_met004(e, {}, client=K8S, core_limit=50), jm.judge_met005(e, {}, client=K8S, changed_at=0.0,
                                                                            core_limit=80),
              jm.judge_met006(e, {}), jm.judge_met007(e, {}), jm.judge_met008(e, {})):
        assert v.status in (Status.PASS, Status.FAIL, Status.ERROR)
        json.dumps(v.to_dict(), default=str)
