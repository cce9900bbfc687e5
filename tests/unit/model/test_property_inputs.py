"""Property-based tests of every reader of user input: the inventory loader, ``--set`` values, ``--limit`` patterns
and the stored-run readers (run.json, result.json). Any generated input gives a clean result or the one error a
task prints as one ``error:`` line with exit status 2 (:class:`UsageError`, :class:`InventoryError`,
:class:`StoredRunDamaged`), never another exception, within bounded time (hypothesis' deadline) and memory (the
inputs are small; what they ask for, ranges and counts, must not be expanded blindly; an example taking 20 s
fails).

The example counts are modest (CI has 2 cores); ``XPUSHARE_PROPERTY_EXAMPLES`` raises them for a longer search.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xpushare.cases import REGISTRY
from xpushare.engine.cluster_params import check_cluster_params
from xpushare.engine.plan import check_overrides
from xpushare.inventory import schema
from xpushare.inventory.selection import expand
from xpushare.model.errors import InventoryError, StoredRunDamaged, UsageError
from xpushare.model.overrides import parse_overrides
from xpushare.report import build, run_store

EXAMPLES = int(os.environ.get("XPUSHARE_PROPERTY_EXAMPLES", "60"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=20_000, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

# Keys of the inventory's mappings, so that generated mappings often reach the checks behind them.
KEYS = ["address", "port", "user", "identity", "roles", "ssh", "gpus", "connection", "mode", "hosts", "namespace",
        "params", "scheduler", "gpu", "count", "memory_gib", "model", "metrics_url", "env", "connect_retries",
        "keepalive_s", "connect_timeout", "host_key_policy", "known_hosts", "pod_timeout_s", "workload_args"]

# YAML values: scalars of every kind a user may type (NaN, infinities, huge numbers, text with newlines).
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(10**12), max_value=10**12),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.sampled_from(["c1-gpu[1-3]", "x[1-1000000000]", "node[5-1]", "${NOPE}", "local", "master", "gpu", "host",
                     "k8s", "127.0.0.1", "accept-new", "a\nb", ".inf", "1e308", "[", "]"]),
)
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8) | st.sampled_from(KEYS), inner, max_size=4)),
    max_leaves=12)

host_bodies = st.fixed_dictionaries({}, optional={
    "address": scalars, "port": scalars, "user": scalars, "identity": scalars, "roles": values, "gpus": values,
    "connection": st.sampled_from(["ssh", "local", "x"]) | scalars, "ssh": values,
})
cluster_bodies = st.fixed_dictionaries({"mode": st.sampled_from(["k8s", "host"]) | scalars}, optional={
    "hosts": st.dictionaries(st.sampled_from(["h1", "h[1-3]", "x[1-1000000000]", "n[01-02]", "a\n", "-x"])
                             | st.text(max_size=8), host_bodies, max_size=3),
    "namespace": values, "params": values, "scheduler": values, "gpu": values, "ssh": values, "sut": scalars,
    "kubectl": values, "python": values, "workdir": values,
})
inventories = st.fixed_dictionaries({}, optional={
    "clusters": st.dictionaries(st.sampled_from(["c1", "local", "c" * 70, "b@d"]) | st.text(max_size=10),
                                cluster_bodies, max_size=2),
    "defaults": st.fixed_dictionaries({}, optional={"ssh": values, "params": values}),
})


@SETTINGS
@given(inventories)
def test_any_inventory_loads_or_is_one_inventory_error(data: dict[str, Any]) -> None:
    try:
        text = yaml.safe_dump(data, allow_unicode=True)
    except yaml.YAMLError:
        return
    try:
        inventory = schema.parse(text, source="inv.yaml")
    except InventoryError as exc:
        assert "\n" not in str(exc)
        return
    for cluster in inventory.clusters.values():
        assert len(cluster.hosts) <= 10_000
        for host in cluster.hosts:
            assert host.gpus is None or len(host.gpus) <= schema.MAX_GPUS
        try:
            check_cluster_params(cluster)
        except InventoryError as exc:
            assert "\n" not in str(exc)


@SETTINGS
@given(st.text(max_size=300) | st.binary(max_size=300).map(lambda b: b.decode("latin-1")))
def test_any_inventory_text_loads_or_is_one_inventory_error(text: str) -> None:
    try:
        schema.parse(text, source="inv.yaml")
    except InventoryError as exc:
        assert "\n" not in str(exc)


NAMES = sorted({name for case in REGISTRY.values() for name in case.params} | {"pod_timeout_s"})
set_items = st.one_of(
    st.builds(lambda n, v: f"{n}={v}", st.sampled_from(NAMES), st.text(max_size=20)),
    st.builds(lambda n, v: f"{n}={v}", st.sampled_from(NAMES), st.sampled_from(
        ["-5", ".nan", ".inf", "-.inf", "1e308", "abc", "[1, 2]", "{a: 1}", "true", "0", "0.5", "[", "{", "'"])),
    st.text(max_size=20),
)


@SETTINGS
@given(st.lists(set_items, max_size=4))
def test_any_set_values_are_accepted_or_one_usage_error(items: list[str]) -> None:
    try:
        check_overrides(list(REGISTRY.values()), parse_overrides(items))
    except UsageError as exc:
        assert "\n" not in str(exc).replace("\\n", "")


HOSTS = ["c1-gpu1", "c1-gpu2", "c1-gpu10", "c1-master"]
limit_tokens = st.sampled_from(["c1-gpu[1-2]", "c1-gpu*", "!", "&", "^", ",", "x[1-1000000000]", "[", "]",
                                "c1-master", "c1-gpu[2-1]", "@/dev/null", "@/nonexistent", "?", "c1-gpu[1-3,10]"])


@SETTINGS
@given(st.lists(limit_tokens, min_size=1, max_size=6).map("".join) | st.text(max_size=30))
def test_any_limit_pattern_selects_or_is_one_usage_error(pattern: str) -> None:
    try:
        chosen = expand(pattern, HOSTS)
    except UsageError as exc:
        assert "\n" not in str(exc)
        return
    assert len(chosen) <= 10_000


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10)
records = st.fixed_dictionaries({}, optional={
    "status": st.sampled_from(["PASS", "FAIL", "SKIP", "ERROR", "INTERRUPTED", "pass", ""]) | json_values,
    "summary": json_values, "thresholds": json_values, "metrics": json_values, "checks": json_values,
    "evidence": json_values, "duration_s": json_values, "required": json_values, "error": json_values,
    "title": json_values, "attempt": json_values, "rejudgments": json_values, "phases_s": json_values,
})
metas = st.fixed_dictionaries({}, optional={
    "run_id": json_values, "required": json_values, "selected": json_values, "clusters": json_values,
    "started": json_values, "ended": json_values, "exit_status": json_values, "counts": json_values,
    "rejudgments": json_values, "interrupted": json_values,
})
raw_files = st.binary(max_size=200) | st.sampled_from([b"", b"{", b"[]", b"null", b"\xff\xfe", b"[" * 5000])


def _stored_run(meta: bytes, result: bytes) -> Path:
    run_dir = Path(tempfile.mkdtemp(prefix="xp-prop-")) / ".tmplog" / "p" / "xpushare"
    case = run_dir / "local" / "functional" / "FUNC-001"
    case.mkdir(parents=True)
    (run_dir / "run.json").write_bytes(meta)
    (case / "result.json").write_bytes(result)
    return run_dir


@settings(SETTINGS, max_examples=max(10, EXAMPLES // 2))
@given(metas.map(lambda m: json.dumps(m).encode()) | raw_files, records.map(lambda r: json.dumps(r).encode())
       | raw_files)
def test_any_stored_run_is_read_and_reported_or_one_usage_error(meta: bytes, result: bytes) -> None:
    run_dir = _stored_run(meta, result)
    try:
        _read_and_report(run_dir)
    finally:
        shutil.rmtree(run_dir.parents[2])


def _read_and_report(run_dir: Path) -> None:
    loaded = run_store.load_results(run_dir)
    assert [r.status for r in loaded] and all(r.status in {"PASS", "FAIL", "SKIP", "ERROR", "INTERRUPTED"}
                                                  for r in loaded)
    try:
        stored = run_store.read_run_meta(run_dir)
    except StoredRunDamaged as exc:
        assert "\n" not in str(exc)
        return
    assert stored is None or isinstance(stored, dict)
    build.build(run_dir, required=set((stored or {}).get("required") or []) or None)
    assert (run_dir / "run-report.md").is_file() and (run_dir / "junit.xml").is_file()

