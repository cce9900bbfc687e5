"""Kept files are replaced atomically: a process killed in the middle of a write leaves the old file whole.

The crash is real: a child process starts writing through a writer, then SIGKILLs itself halfway (no
``finally``, no cleanup runs). A plain ``write_text`` under the same crash leaves half a file (the control
case: the check can fail).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.paths import REPO_ROOT
from xpushare.model.atomic_file import atomic_write, atomic_write_text

ROOT = REPO_ROOT

# The child replaces json.dumps/json.dump-driven output with one that writes half a document and is then killed.
_CHILD = textwrap.dedent('''
    import os, signal, sys
    from pathlib import Path
    import xpushare.model.atomic_file as af
    target, how = Path(sys.argv[1]), sys.argv[2]
    def half_then_die(fh):
        fh.write('{"status": "FA')
        fh.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    if how == "atomic":
        af.atomic_write(target, half_then_die)
    elif how == "plain":
        with target.open("w") as fh:
            half_then_die(fh)
    else:  # a real writer of the tool, its JSON encoder swapped for the dying one
        import json
        from xpushare.model import workload
        from xpushare.report import run_store
        def dump(obj, fh, **kw): half_then_die(fh)
        def dumps(obj, **kw): half_then_die(open(os.devnull, "w"))
        json.dump, json.dumps = dump, dumps
        if how == "run.json":
            run_store.write_run_meta(target.parent, {"run_id": "r2"})
        elif how == "result.json":
            run_store.write_result(target.parent, {"status": "FAIL"})
        elif how == "pods.json":
            workload.write_pod_records(target.parent, [])
''')


def _crash_while_writing(target: Path, how: str) -> None:
    res = subprocess.run([sys.executable, "-c", _CHILD, str(target), how], cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == -9, res.stderr  # it really died mid-write


@pytest.mark.parametrize("name", ["result.json", "run.json", "pods.json", "run-summary.tsv"])
def test_a_kill_mid_write_leaves_the_old_file_whole(tmp_path: Path, name: str) -> None:
    target = tmp_path / name
    target.write_text('{"status": "PASS"}\n')
    _crash_while_writing(target, "atomic" if name.endswith(".tsv") else name)
    assert json.loads(target.read_text()) == {"status": "PASS"}
    leftovers = [p.name for p in tmp_path.iterdir() if p.name != name]
    assert all(p.startswith(f".{name}.") and p.endswith(".tmp") for p in leftovers)  # only a hidden temp file


def test_control_a_plain_write_killed_midway_leaves_half_a_file(tmp_path: Path) -> None:
    target = tmp_path / "result.json"
    target.write_text('{"status": "PASS"}\n')
    _crash_while_writing(target, "plain")
    with pytest.raises(json.JSONDecodeError):
        json.loads(target.read_text())


def test_an_error_in_the_writer_keeps_the_old_file_and_removes_the_temp(tmp_path: Path) -> None:
    target = atomic_write_text(tmp_path / "sub" / "run.json", "old\n")

    def fails(fh: object) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(target, fails)
    assert target.read_text() == "old\n"
    assert [p.name for p in target.parent.iterdir()] == ["run.json"]
    assert atomic_write_text(target, "new \udcff\n").read_text() == "new \\udcff\n"  # lone surrogate kept readable
