"""Inventories, host ranges and ``--limit`` patterns a careless or hostile user writes: each is one
:class:`InventoryError`/:class:`UsageError` line, found at once, never a traceback, a MemoryError or a silent
acceptance."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from xpushare.inventory import schema
from xpushare.inventory.selection import expand, select_hosts
from xpushare.model.errors import InventoryError, UsageError

HOST = ("clusters:\n  c9:\n    mode: host\n    hosts:\n"
        "      c9-gpu1: {{address: 127.0.0.1, roles: [gpu, master]{extra}}}\n")


def inv(extra: str = "", cluster: str = "") -> str:
    return HOST.format(extra=extra) + cluster


BAD = {
    "gpus-huge": (inv(", gpus: 1000000000"), "gpus"),
    "gpus-negative": (inv(", gpus: -4"), "gpus"),
    "gpus-list-bad": (inv(", gpus: [-1, true, 99999]"), "gpus"),
    "gpus-duplicate": (inv(", gpus: [0, 0]"), "given twice"),
    "range-huge": ("clusters:\n  c9:\n    mode: host\n    hosts:\n      x[1-1000000000]: {roles: [gpu, master]}\n",
                   "more than"),
    "retries-inf": (inv(", ssh: {connect_retries: .inf}"), "connect_retries"),
    "retries-nan": (inv(", ssh: {connect_retries: .nan}"), "connect_retries"),
    "retries-fraction": (inv(", ssh: {connect_retries: 1.5}"), "connect_retries"),
    "keepalive-inf": (inv(", ssh: {keepalive_s: .inf}"), "keepalive_s"),
    "timeout-nan": (inv(", ssh: {connect_timeout: .nan}"), "connect_timeout"),
    "cluster-name-70": ("clusters:\n  " + "c" * 70 + ":\n    mode: host\n    hosts:\n      h1: {roles: [gpu]}\n",
                        "bad cluster name"),
    "cluster-name-newline": ('clusters:\n  "c9\\n":\n    mode: host\n    hosts:\n      h1: {roles: [gpu]}\n',
                             "bad cluster name"),
    "host-name-newline": ('clusters:\n  c9:\n    mode: host\n    hosts:\n      "h1\\n": {roles: [gpu]}\n',
                          "bad host name"),
    "duplicate-host": (inv() + "      c9-gpu1: {address: 127.0.0.2, roles: [gpu]}\n", "duplicate key 'c9-gpu1'"),
    "duplicate-cluster": (inv() + "  c9:\n    mode: k8s\n", "duplicate key 'c9'"),
    "redefine-local": ("clusters:\n  local:\n    mode: host\n    hosts:\n      h1: {roles: [gpu]}\n", "built-in"),
    "namespace-list": (inv(cluster="") .replace("mode: host", "mode: host\n    namespace: [a, b]"), "namespace"),
    "namespace-upper": (inv().replace("mode: host", "mode: host\n    namespace: Prod"), "namespace"),
    "address-list": (inv(", address2: 1").replace(", address2: 1", "").replace("127.0.0.1", "[127.0.0.1]"),
                     "address"),
    "user-mapping": (inv(", user: {a: 1}"), "user"),
    "deep-nesting": ("clusters: " + "[" * 5000 + "]" * 5000 + "\n", "bad"),
}


#: A bound that only an expansion or a parse gone quadratic reaches (a billion hosts takes hours), far above a
#: busy CI machine's slowest honest parse (6.3 s for ``deep-nesting`` on 2 loaded cores): speed is not judged here.
HANG_S = 60


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_inventory_is_one_line(name: str) -> None:
    text, word = BAD[name]
    start = time.monotonic()
    with pytest.raises(InventoryError) as info:
        schema.parse(text, source="inv.yaml")
    message = str(info.value)
    assert word in message and "\n" not in message, message
    assert time.monotonic() - start < HANG_S


def test_good_values_still_load() -> None:
    parsed = schema.parse(inv(", gpus: [0, 3], ssh: {connect_retries: 5, keepalive_s: 0}").replace(
        "mode: host", "mode: host\n    namespace: gpu-tests"))
    c9 = parsed.cluster("c9")
    assert c9.hosts[0].gpus == (0, 3) and c9.hosts[0].ssh.connect_retries == 5 and c9.namespace == "gpu-tests"
    assert schema.parse(inv(", gpus: 2")).cluster("c9").hosts[0].gpus == (0, 1)


def test_an_endless_inventory_file_is_refused_without_reading_it_whole() -> None:
    with pytest.raises(InventoryError, match="larger than"):
        schema.load("/dev/zero")


@pytest.mark.parametrize("pattern", ["x[1-1000000000]", "c9-gpu[1-99999999]", "a[1-100000],b1"])
def test_a_huge_limit_range_is_one_line(pattern: str) -> None:
    start = time.monotonic()
    with pytest.raises(UsageError, match="more than"):
        expand(pattern, ["c9-gpu1"])
    assert time.monotonic() - start < HANG_S


def test_a_limit_file_is_bounded_and_never_echoed(tmp_path: Path) -> None:
    cluster = schema.parse(inv()).cluster("c9")
    with pytest.raises(UsageError, match="larger than"):
        select_hosts(cluster, limit="@/dev/zero")
    secret = tmp_path / "secret"
    secret.write_text("password=hunter2\n")
    with pytest.raises(UsageError) as info:
        select_hosts(cluster, limit=f"@{secret}")
    assert "hunter2" not in str(info.value)
    secret.write_text("hunter2-host\n")
    with pytest.raises(UsageError) as info:
        select_hosts(cluster, limit=f"@{secret}")
    assert "hunter2" not in str(info.value) and "1 name(s)" in str(info.value)
