"""A config file Invoke would read that is not usable is one ``error:`` line and exit 2 from every entry point
(xpushare/cli/config_files.py): not YAML/JSON/Python, not a mapping, binary, a folder, a ``-f`` file that does not
exist. Before: Invoke's traceback (a parser error, ``AttributeError: 'list' object has no attribute 'items'``,
``UnicodeDecodeError``, ``IsADirectoryError``), exit 1; and the transport read ``~/.invoke.yaml`` (and
``~/.fabric.yaml``) again for each host, so a malformed one broke ``xpushare run --cluster local``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.inprocess import run_xpushare
from tests.paths import REPO_ROOT
from xpushare.cli import config_files
from xpushare.cli.config_files import ConfigFileError
from xpushare.transport.local import LocalHost

#: name -> (file suffix, bytes): each a config file Invoke could not use.
BROKEN = {
    "syntax": ("yaml", b"xpushare: [a\n  b: :\n"),
    "list": ("yaml", b"- 1\n- 2\n"),
    "scalar": ("yml", b"hello\n"),
    "binary": ("yaml", b"\xff\xfe\x00\x01bin"),
    "json": ("json", b'{"a": '),
    "json-list": ("json", b"[1]"),
    "python": ("py", b"def (:\n"),
}


def _write(path: Path, content: bytes | None) -> Path:
    if content is None:
        path.mkdir(parents=True)
    else:
        path.write_bytes(content)
    return path


@pytest.mark.parametrize("name", [*BROKEN, "folder"])
def test_every_broken_file_is_a_config_file_error_naming_it(name: str, tmp_path: Path) -> None:
    suffix, content = BROKEN.get(name, ("yaml", None))
    path = _write(tmp_path / f"conf.{suffix}", content)
    with pytest.raises(ConfigFileError) as caught:
        config_files.check_file(path)
    assert caught.value.code == 2 and caught.value.message.startswith(f"error: config file {path}: ")
    assert "\n" not in caught.value.message


@pytest.mark.parametrize("text", ["", "# nothing\n", "xpushare:\n  forks: 4\n", "run: {echo: true}\n"])
def test_a_usable_file_passes(text: str, tmp_path: Path) -> None:
    config_files.check_file(_write(tmp_path / "c.yaml", text.encode()))


def test_the_level_checks_the_one_file_invoke_reads(tmp_path: Path) -> None:
    """Invoke reads the first of .yaml, .yml, .json, .py that exists: a broken file behind it is never read."""
    (tmp_path / "invoke.yaml").write_text("a: 1\n")
    (tmp_path / "invoke.json").write_text("[")
    config_files.check_level(str(tmp_path / "invoke"))
    (tmp_path / "invoke.yaml").unlink()
    with pytest.raises(ConfigFileError, match=r"invoke\.json: not valid JSON"):
        config_files.check_level(str(tmp_path / "invoke"))
    config_files.check_level(str(tmp_path / "none"))  # no file: nothing to check


def test_a_runtime_file_that_does_not_exist_or_has_no_known_type_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigFileError, match="no such file"):
        config_files.check_runtime(str(tmp_path / "missing.yaml"))
    with pytest.raises(ConfigFileError, match="unsupported type 'txt'"):
        config_files.check_runtime(str(_write(tmp_path / "c.txt", b"a: 1\n")))
    config_files.check_runtime(None)


def _xpushare(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    ran = run_xpushare(argv)
    return ran.code, ran.err


@pytest.mark.parametrize("name", ["syntax", "list", "binary", "json", "python"])
def test_the_xpushare_command_says_one_line_for_its_user_and_runtime_files(
        name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    suffix, content = BROKEN[name]
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    _write(home / f".xpushare.{suffix}", content)
    code, err = _xpushare(["hosts"], capsys)
    assert code == 2 and err.count("\n") == 1 and err.startswith(f"error: config file {home}/.xpushare."), err
    (home / f".xpushare.{suffix}").unlink()
    runtime = _write(tmp_path / f"rt.{suffix}", content)
    code, err = _xpushare(["--config", str(runtime), "hosts"], capsys)
    assert code == 2 and err == err.splitlines()[0] + "\n" and str(runtime) in err and "Traceback" not in err


def test_the_transport_does_not_read_the_users_invoke_or_fabric_files(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """``xpushare run --cluster local`` failed on a malformed ``~/.invoke.yaml``: every LocalHost read it again
    (and a ``run.echo: true`` there would have echoed every command of the tool)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".invoke.yaml").write_bytes(BROKEN["syntax"][1])
    (tmp_path / ".fabric.yaml").write_bytes(BROKEN["list"][1])
    assert LocalHost().run(["echo", "ok"], timeout=30).stdout == "ok\n"


def test_invoke_says_one_line_for_the_projects_and_the_runtime_file(tmp_path: Path) -> None:
    """``invoke`` (tasks.py) checks the project's invoke.yaml beside tasks.py and the ``-f`` file; a user's
    ``~/.invoke.yaml`` Invoke reads before any tasks.py is loaded (docs/config.md)."""
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(REPO_ROOT / "tasks.py", project / "tasks.py")
    (project / "invoke.yaml").write_bytes(BROKEN["list"][1])
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "invoke", "-r", str(project), "hosts"], capture_output=True,
                          text=True, env=env, timeout=120)
    assert proc.returncode == 2 and proc.stderr.splitlines() == [
        f"error: config file {project}/invoke.yaml: holds a list, not a mapping of sections (e.g. 'xpushare: {{...}}')"]
    (project / "invoke.yaml").unlink()
    proc = subprocess.run([sys.executable, "-m", "invoke", "-r", str(project), "-f", str(tmp_path / "no.yaml"),
                           "hosts"], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2 and proc.stderr == f"error: config file {tmp_path}/no.yaml: no such file\n"


#: Python config files that compile but fail when Invoke runs them: an error raised, a module among the values.
RAISING = {"raises": "x = 1 / 0\n", "module": "import os\n"}


@pytest.mark.parametrize("name", list(RAISING))
def test_a_python_config_that_fails_when_run_is_one_line(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Before: the ``xpushare`` command printed Invoke's traceback (``ZeroDivisionError``, ``UnpicklableConfigMember``)
    for a ``~/.xpushare.py`` or ``--config rt.py`` that compiles but raises when Invoke runs it."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    (home / ".xpushare.py").write_text(RAISING[name])
    code, err = _xpushare(["hosts"], capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"error: config file {home}/.xpushare.py: Invoke could not load it: "), err
    (home / ".xpushare.py").unlink()
    runtime = tmp_path / "rt.py"
    runtime.write_text(RAISING[name])
    code, err = _xpushare(["--config", str(runtime), "hosts"], capsys)
    assert code == 2 and err.count("\n") == 1 and err.startswith(f"error: config file {runtime}: "), err


def test_invoke_says_one_line_for_a_runtime_python_file_that_raises(tmp_path: Path) -> None:
    runtime = tmp_path / "rt.py"
    runtime.write_text(RAISING["raises"])
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "invoke", "-r", str(REPO_ROOT), "-f", str(runtime), "hosts"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2 and proc.stderr == (
        f"error: config file {runtime}: Invoke could not load it: ZeroDivisionError: division by zero\n")


def test_the_xpushare_command_is_untouched_by_a_malformed_invoke_yaml_and_names_its_own(tmp_path: Path) -> None:
    """A malformed ``~/.invoke.yaml`` (``/etc/invoke.yaml``) is read by Invoke's own ``invoke`` program before any
    ``tasks.py`` is loaded, so no code of the project can report it there (docs/config.md); the ``xpushare``
    command is the entry point that never reads it and reports its own files in one line."""
    home = tmp_path / "home"
    home.mkdir()
    (home / ".invoke.yaml").write_bytes(b"xpushare: [1,\n")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "HOME": str(home)}
    inventory = tmp_path / "inv.yaml"
    inventory.write_text("clusters:\n  c1:\n    mode: host\n    hosts:\n      h1: {connection: local, roles: [gpu]}\n")
    argv = [sys.executable, "-m", "xpushare", "hosts", "-i", str(inventory)]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0 and "c1" in proc.stdout and proc.stderr == "", proc.stderr
    (home / ".xpushare.yaml").write_bytes(b"xpushare: [1,\n")
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"error: config file {home}/.xpushare.yaml: not valid YAML: "), proc.stderr
