"""The SUT build's object cache (tests/lab/sut.py): a tree that differs from a cached one in one ``.c`` file
recompiles that file only, and a change to a header or to the Makefile recompiles everything, so a mutant's
build never links a stale object. Runs on a small tree of the upstream Makefile's shape (gcc and make only).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.lab.sut import build_sut

MAKEFILE = """CC = gcc
CFLAGS = -O0 -fPIC

libxpushare.so: hook.o common.o
\t$(CC) -shared $^ -o $@

xpushare-scheduler: scheduler.o common.o
\t$(CC) $^ -o $@

xpusharectl: cli.o common.o
\t$(CC) $^ -o $@

hook.o: hook.c
\t$(CC) $(CFLAGS) -c $^ -o $@

scheduler.o: scheduler.c
\t$(CC) $(CFLAGS) -c $^ -o $@

cli.o: cli.c
\t$(CC) $(CFLAGS) -c $^ -o $@

common.o: common.c
\t$(CC) $(CFLAGS) -c $^ -o $@
"""


def _tree(root: Path, *, scheduler_says: str = "scheduler", value: int = 1) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "Makefile").write_text(MAKEFILE)
    (root / "common.h").write_text(f"#define VALUE {value}\nint common(void);\n")
    (root / "common.c").write_text('#include "common.h"\nint common(void) { return VALUE; }\n')
    (root / "hook.c").write_text('#include "common.h"\nint hook(void) { return common(); }\n')
    (root / "cli.c").write_text('#include <stdio.h>\n#include "common.h"\n'
                                'int main(void) { printf("cli %d\\n", common()); return 0; }\n')
    (root / "scheduler.c").write_text('#include <stdio.h>\n#include "common.h"\n'
                                      f'int main(void) {{ printf("{scheduler_says} %d %d\\n", common(), VALUE);'
                                      ' return 0; }\n')
    return root


def _run(binary: Path) -> str:
    return subprocess.run([str(binary)], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    if shutil.which("gcc") is None or shutil.which("make") is None:
        pytest.skip("gcc and make are needed")
    monkeypatch.setattr("tests.lab.sut.require_tools", lambda *a, **k: None)  # no libcurl headers needed here
    monkeypatch.setenv("XPUSHARE_LAB_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_an_unchanged_source_links_its_cached_object(tmp_path: Path, cache: Path) -> None:
    base = build_sut(_tree(tmp_path / "base"))
    assert _run(base.scheduler) == "scheduler 1 1"
    objects = sorted((cache / "sut-obj").glob("*.o"))
    assert len(objects) == 4
    # Every cached object of the base is swapped for one that answers 7 from common(): a tree that changes only
    # scheduler.c must link the cached common.o (reused, not compiled again) and compile its own scheduler.o.
    seven = tmp_path / "seven"
    seven.mkdir()
    (seven / "c.c").write_text("int common(void) { return 7; }\n")
    subprocess.run(["gcc", "-fPIC", "-c", "c.c", "-o", "c.o"], cwd=seven, check=True)
    for obj in objects:
        if subprocess.run(["nm", str(obj)], capture_output=True, text=True).stdout.count(" T common"):
            shutil.copyfile(seven / "c.o", obj)
    mutant = build_sut(_tree(tmp_path / "mutant", scheduler_says="mutant"))
    assert _run(mutant.scheduler) == "mutant 7 1"
    assert _run(mutant.ctl) == "cli 7"


def test_a_header_change_recompiles_every_object(tmp_path: Path, cache: Path) -> None:
    build_sut(_tree(tmp_path / "base"))
    changed = build_sut(_tree(tmp_path / "changed", value=2))
    assert _run(changed.scheduler) == "scheduler 2 2"
    assert _run(changed.ctl) == "cli 2"


def test_a_makefile_change_recompiles_every_object(tmp_path: Path, cache: Path) -> None:
    build_sut(_tree(tmp_path / "base"))
    tree = _tree(tmp_path / "flags")
    (tree / "Makefile").write_text(MAKEFILE.replace("-O0 -fPIC", "-O0 -fPIC -DVALUE_OVERRIDE"))
    before = len(list((cache / "sut-obj").glob("*.o")))
    build_sut(tree)
    assert len(list((cache / "sut-obj").glob("*.o"))) == before + 4
