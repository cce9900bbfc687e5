"""Inventory parsing and validation: every bad input is one line naming the file, exit status 2."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.paths import REPO_ROOT
from tests.toolrun import run_tool
from xpushare.inventory import schema
from xpushare.model.errors import InventoryError
from xpushare.model.exit_status import ExitStatus

ROOT = REPO_ROOT

GOOD = """
defaults:
  ssh: {user: root, port: 22, identity: ~/.ssh/id_ed25519, host_key_policy: accept-new, connect_timeout: 10}
clusters:
  c1:
    mode: k8s
    sut: nvshare
    backend: cuda
    gpu: {model: Tesla T4, memory_gib: 16}
    hosts:
      c1-master: {address: 10.0.0.10, roles: [master]}
      c1-gpu[1:2]: {roles: [gpu], port: 2222, ssh: {host_key_policy: strict}}
"""


def test_schema_example_parses_with_ranges_and_overrides() -> None:
    inv = schema.parse(GOOD, source="inv.yaml")
    c1 = inv.cluster("c1")
    assert [h.name for h in c1.hosts] == ["c1-master", "c1-gpu1", "c1-gpu2"]
    assert c1.sut == "nvshare" and c1.gpu_model == "Tesla T4" and c1.gpu_memory_gib == 16
    master, gpu1, _ = c1.hosts
    assert master.target == "10.0.0.10" and master.ssh.port == 22 and master.ssh.user == "root"
    assert gpu1.target == "c1-gpu1"  # no address: resolved through ~/.ssh/config
    assert gpu1.ssh.port == 2222 and gpu1.ssh.host_key_policy == "strict"
    assert [h.name for h in c1.by_role("gpu")] == ["c1-gpu1", "c1-gpu2"]
    assert "local" in inv.clusters


def test_local_cluster_exists_without_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(schema.INVENTORY_ENV, raising=False)
    inv = schema.load(None)
    local = inv.cluster("local")
    assert local.mode == "host" and local.hosts[0].local


def test_explicit_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match="not found"):
        schema.load(tmp_path / "nope.yaml")


def test_env_variable_selects_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "inv.yaml"
    f.write_text(GOOD)
    monkeypatch.setenv(schema.INVENTORY_ENV, str(f))
    assert "c1" in schema.load(None).clusters


@pytest.mark.parametrize(
    ("pattern", "names"),
    [
        ("n[1:3]", ["n1", "n2", "n3"]),
        ("node[01-03]", ["node01", "node02", "node03"]),
        ("gpu[8:10].lab", ["gpu8.lab", "gpu9.lab", "gpu10.lab"]),
        ("plain", ["plain"]),
    ],
)
def test_range_expansion(pattern: str, names: list[str]) -> None:
    assert schema.expand_host_pattern(pattern) == names


def test_env_expansion(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XP_TEST_USER", "ops")
    text = GOOD.replace("user: root", 'user: "${XP_TEST_USER}"')
    assert schema.parse(text).cluster("c1").hosts[0].ssh.user == "ops"


LOCAL_BOX = """
clusters:
  bm1:
    mode: host
    sut: xpushare
    hosts:
      box: {connection: local, roles: [master, gpu], gpus: 2}
"""


def test_a_host_of_any_inventory_can_be_this_machine() -> None:
    inv = schema.parse(LOCAL_BOX + "      far: {address: 10.0.0.9, roles: [gpu]}\n")
    box, far = inv.cluster("bm1").hosts
    assert box.local and box.gpus == (0, 1) and box.address is None
    assert not far.local and far.target == "10.0.0.9"


def test_roles_as_one_string_is_that_one_role() -> None:
    """``roles: gpu`` (a string, as Ansible-like tools accept) means ``[gpu]``; a bad one names the role."""
    inv = schema.parse(GOOD.replace("roles: [master]", "roles: master").replace("roles: [gpu]", "roles: gpu"))
    c1 = inv.cluster("c1")
    assert c1.host("c1-master").roles == ("master",)
    assert [h.name for h in c1.by_role("gpu")] == ["c1-gpu1", "c1-gpu2"]
    with pytest.raises(InventoryError, match="bad role 'boss'"):
        schema.parse(GOOD.replace("roles: [master]", "roles: boss"))
    with pytest.raises(InventoryError, match=r"roles: must be one of master, gpu or a list of them, not 3"):
        schema.parse(GOOD.replace("roles: [master]", "roles: 3"))
    with pytest.raises(InventoryError, match="missing 'roles'"):
        schema.parse(GOOD.replace("roles: [master]", "roles: []"))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (GOOD.replace("address: 10.0.0.10", "adress: 10.0.0.10"), "c1-master: unknown key 'adress'"),
        (GOOD.replace("roles: [master]", "roles: [boss]"), "bad role 'boss'"),
        (GOOD.replace("    mode: k8s\n", ""), "missing required key 'mode'"),
        (GOOD.replace("mode: k8s", "mode: swarm"), "'swarm' is not one of k8s, host"),
        (GOOD.replace("sut: nvshare", "sut: hami"), "'hami' is not one of nvshare, xpushare"),
        (GOOD + "      c1-gpu1: {roles: [gpu]}\n", "duplicate host name 'c1-gpu1'"),
        (GOOD.replace("port: 22,", "port: 70000,"), "port must be an integer"),
        (GOOD.replace("accept-new", "yolo"), "'yolo' is not one of strict, accept-new, ignore"),
        (GOOD.replace("[master]}", "[master]"), "bad YAML at line"),
        (GOOD.replace("user: root", 'user: "${XP_SURELY_UNSET_VAR}"'), "${XP_SURELY_UNSET_VAR} is not set"),
        (GOOD.replace("c1-master: {address: 10.0.0.10, roles: [master]}", ""), "needs a host with role 'master'"),
        ("clusters: [1, 2]", "expected a mapping"),
        (LOCAL_BOX.replace("connection: local", "connection: winrm"), "'winrm' is not one of ssh, local"),
        (LOCAL_BOX.replace("connection: local,", "connection: local, address: 10.0.0.9,"),
         "'connection: local' is this machine; it takes no address"),
        (LOCAL_BOX.replace("box:", "box[1:2]:"), "one host name, not a range"),
        ("nonsense: 1", "unknown key 'nonsense'"),
    ],
)
def test_validation_errors_are_one_line_naming_the_file(text: str, message: str) -> None:
    with pytest.raises(InventoryError) as exc:
        schema.parse(text, source="bad.yaml")
    line = str(exc.value)
    assert line.startswith("bad.yaml: ")
    assert message in line
    assert "\n" not in line
    assert exc.value.exit_status == ExitStatus.USAGE


def test_shipped_inventory_describes_the_seed_clusters() -> None:
    inv = schema.load(ROOT / "inventory" / "inventory.yaml")
    c1, c2 = inv.cluster("c1"), inv.cluster("c2")
    assert c1.gpu_model == "Tesla T4" and c1.gpu_memory_gib == 16
    assert sorted(len(h.gpus or ()) for h in c1.by_role("gpu")) == [2, 8]
    assert c2.gpu_model == "A800" and c2.gpu_memory_gib == 40
    assert [len(h.gpus or ()) for h in c2.by_role("gpu")] == [8, 8]


def test_bad_inventory_through_invoke_exits_2_without_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(GOOD.replace("roles: [master]", "roles: [boss]"))
    proc = run_tool(
        [sys.executable, "-m", "invoke", "hosts", "--inventory", str(bad)],
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "bad role 'boss'" in proc.stderr
