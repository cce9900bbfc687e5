"""Mutants of the SUT (tests/lab/mutants): every patch applies exactly to the upstream tree, changes it,
and the patched tree builds; a patch that does not apply is a one-line :class:`BuildError`.

Building all mutants takes about 2 s each on 2 cores the first time; the build cache makes reruns cheap.
Where gcc, make or the libcurl headers are missing the build test skips (fails with
``XPUSHARE_REQUIRE_LAB=1``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from tests.lab.build import BuildError, content_hash, tree_files
from tests.lab.mutants import MUTANTS, PATCH_DIR, build_mutant, mutant_tree, patch_path
from tests.lab.sut import OUTPUTS, build_sut, default_source

#: The mutants that replace the old simulated lab's broken-lab switches (must always exist).
REQUIRED = ("no-core-enforcement", "quota-generous-30", "quota-stingy-30", "metrics-missing",
            "leak-per-registration")
NAMES = sorted(MUTANTS)
T = TypeVar("T")


def _base() -> Path:
    base = default_source()
    if not (base / "scheduler.c").is_file():
        pytest.skip(f"upstream xpushare source not found: {base}")
    return base


def _patched_files(name: str) -> list[str]:
    """Paths (relative to the source dir) that mutant ``name``'s patch changes."""
    text = patch_path(name).read_text()
    return [m.group(1).split("/", 1)[1] for m in re.finditer(r"^\+\+\+ (\S+)", text, re.M)]


def _lab_required(reason: str) -> None:
    if os.environ.get("XPUSHARE_REQUIRE_LAB") == "1":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


def _or_lab_required(make: Callable[[], T], missing: str) -> T:
    """``make()``; a :class:`BuildError` that starts with ``missing`` (the machine lacks a tool) is
    :func:`_lab_required`, any other is raised."""
    try:
        return make()
    except BuildError as exc:
        if str(exc).startswith(missing):
            _lab_required(str(exc))
        raise


def test_required_mutants_exist() -> None:
    assert set(REQUIRED) <= set(MUTANTS), sorted(set(REQUIRED) - set(MUTANTS))


@pytest.mark.parametrize("name", NAMES)
def test_patch_header_is_one_line_description(name: str) -> None:
    lines = patch_path(name).read_text().splitlines()
    assert lines[0].startswith("# ") and lines[0][2:].strip() == MUTANTS[name]
    assert MUTANTS[name] and "\n" not in MUTANTS[name] and len(MUTANTS[name]) <= 300
    assert lines[1].startswith(("diff ", "--- ")), "the description is the only line before the diff"
    assert _patched_files(name), "the patch changes no file"


@pytest.mark.parametrize("name", NAMES)
def test_patch_applies_exactly_to_upstream(name: str, tmp_path: Path) -> None:
    """No fuzz and no offset against the upstream tree (the patches were made from it)."""
    if shutil.which("patch") is None:
        _lab_required("patch (GNU patch) is not installed")
    tree = tmp_path / "src"
    shutil.copytree(_base(), tree)
    proc = subprocess.run(["patch", "-p1", "--batch", "--forward", "--dry-run", "-i", str(patch_path(name))],
                          cwd=tree, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not re.search(r"fuzz|offset|ignored|malformed", proc.stdout + proc.stderr, re.I), proc.stdout


@pytest.mark.parametrize("name", NAMES)
def test_mutant_tree_differs_and_builds(name: str) -> None:
    base = _base()
    tree = _or_lab_required(lambda: mutant_tree(name), "cannot apply")
    assert mutant_tree(name) == tree, "a second call reuses the patched copy"
    assert content_hash(tree, tree_files(tree), "x") != content_hash(base, tree_files(base), "x")
    for rel in _patched_files(name):
        assert (tree / rel).read_bytes() != (base / rel).read_bytes(), rel
    built = _or_lab_required(lambda: build_mutant(name), "cannot build")
    assert all((built.directory / out).is_file() for out in OUTPUTS)
    assert built.source == tree.resolve()
    assert built.digest != build_sut(base).digest


def test_unknown_mutant_is_a_build_error() -> None:
    with pytest.raises(BuildError, match="unknown mutant"):
        mutant_tree("no-such-mutant")


def test_patch_that_does_not_apply_is_a_one_line_build_error(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    if shutil.which("patch") is None:
        _lab_required("patch (GNU patch) is not installed")
    monkeypatch.setenv("XPUSHARE_LAB_CACHE", str(tmp_path / "cache"))
    other = tmp_path / "other"
    other.mkdir()
    (other / "Makefile").write_text("all:\n")
    for rel in {f for n in NAMES for f in _patched_files(n)}:
        (other / rel).write_text("/* not the upstream file */\n")
    with pytest.raises(BuildError) as info:
        mutant_tree(REQUIRED[0], base=other)
    message = str(info.value)
    assert "\n" not in message and REQUIRED[0] in message and "does not apply" in message
    assert not list((tmp_path / "cache" / "mutant-src").glob(f"{REQUIRED[0]}-*")), "no half-patched tree kept"


def test_patch_dir_holds_only_patches_and_docs() -> None:
    stray = [p.name for p in PATCH_DIR.iterdir()
             if p.suffix not in (".patch", ".py", ".md") and p.name != "__pycache__"]
    assert not stray
