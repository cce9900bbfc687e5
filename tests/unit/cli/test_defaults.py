"""Defaults from the user's config (Invoke's config files, section ``xpushare``) and ``$XPUSHARE_CLUSTER``:
precedence flag > environment > config > built-in, and a bad config is one line, exit status 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from invoke import Config, Context

from tests.paths import REPO_ROOT
from xpushare.cli import defaults
from xpushare.model.errors import UsageError

ROOT = REPO_ROOT


def ctx(section: object) -> Context:
    return Context(Config(overrides={"xpushare": section}))


def cli(*args: str, home: Path, env: dict[str, str] | None = None, binary: str = "invoke") \
        -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("XPUSHARE_CLUSTER", "XPUSHARE_INVENTORY")}
    clean.update(HOME=str(home), **(env or {}))
    return subprocess.run([sys.executable, "-m", binary, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env=clean)


def test_precedence_flag_env_config_builtin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("XPUSHARE_CLUSTER", raising=False)
    monkeypatch.delenv("XPUSHARE_INVENTORY", raising=False)
    c = ctx({"cluster": "from-config", "inventory": "~/inv.yaml", "forks": 3, "timeout": 7.5})
    assert defaults.cluster(c, None) == "from-config"
    assert defaults.inventory(c, None) == os.path.expanduser("~/inv.yaml")
    assert defaults.forks(c, None) == "3" and defaults.timeout(c, None) == "7.5"
    assert defaults.forks(c, "9") == "9" and defaults.timeout(c, "1") == "1"
    monkeypatch.setenv("XPUSHARE_CLUSTER", "from-env")
    monkeypatch.setenv("XPUSHARE_INVENTORY", "env.yaml")
    assert defaults.cluster(c, None) == "from-env"
    assert defaults.inventory(c, None) is None  # the loader reads $XPUSHARE_INVENTORY itself
    assert defaults.cluster(c, "flag") == "flag" and defaults.inventory(c, "f.yaml") == "f.yaml"
    monkeypatch.delenv("XPUSHARE_CLUSTER")
    monkeypatch.delenv("XPUSHARE_INVENTORY")
    empty = Context(Config())
    assert defaults.inventory(empty, None) is None and defaults.forks(empty, None) is None
    with pytest.raises(UsageError, match="--cluster is required"):
        defaults.cluster(empty, None)


@pytest.mark.parametrize("section", [["c1"], {"clustr": "c1"}, {"forks": 0}, {"forks": "8"}, {"timeout": -1},
                                     {"cluster": ""}, {"inventory": 3}])
def test_bad_config_is_a_usage_error(section: object) -> None:
    with pytest.raises(UsageError, match="config: "):
        defaults.settings(ctx(section))


def test_user_config_file_and_env_drive_the_cli(tmp_path: Path) -> None:
    (tmp_path / ".invoke.yaml").write_text("xpushare:\n  cluster: no-such-cluster\n", encoding="utf-8")
    proc = cli("ping", home=tmp_path)  # the config's cluster is used ...
    assert proc.returncode == 2 and "unknown cluster 'no-such-cluster'" in proc.stderr
    proc = cli("ping", home=tmp_path, env={"XPUSHARE_CLUSTER": "also-missing"})  # ... the environment wins ...
    assert proc.returncode == 2 and "'also-missing'" in proc.stderr
    proc = cli("func", "--cluster", "nope-flag", home=tmp_path, env={"XPUSHARE_CLUSTER": "also-missing"})
    assert proc.returncode == 2 and "'nope-flag'" in proc.stderr  # ... and the flag wins over both
    proc = cli("ping", home=tmp_path, env={"XPUSHARE_CLUSTER": "local"})
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_bad_config_files_are_one_line_exit_2(tmp_path: Path) -> None:
    (tmp_path / ".invoke.yaml").write_text("xpushare:\n  forks: many\n", encoding="utf-8")
    proc = cli("ping", "--cluster", "local", home=tmp_path)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "error: config: xpushare.forks must be a whole number >= 1, not 'many'"]
    # the installed command reads ~/.xpushare.yaml; a file that is not YAML is one line too
    (tmp_path / ".xpushare.yaml").write_text("xpushare: [\n", encoding="utf-8")
    proc = cli("ping", "--cluster", "local", home=tmp_path, binary="xpushare")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "not valid YAML" in proc.stderr and "Traceback" not in proc.stderr
    (tmp_path / ".xpushare.yaml").write_text("xpushare:\n  clustr: local\n", encoding="utf-8")
    proc = cli("ping", home=tmp_path, binary="xpushare")
    assert proc.returncode == 2 and "xpushare.clustr: unknown key" in proc.stderr
