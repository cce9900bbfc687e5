"""Mutants of the system under test: realistic bugs as patches to the upstream xpushare source.

Each ``<name>.patch`` beside this file is a unified diff (``diff -ru a b``, paths relative to the source
directory, applied with ``patch -p1``) whose first line is ``# <one-line description of the bug>``
(patch(1) skips that leading line). A mutant proves that the tool's verdicts can fail: the lab runs the
real scheduler and client library built from the patched tree, and the case that covers the bug must
report FAIL.

* :data:`MUTANTS` maps each name to its description.
* :func:`mutant_tree` copies the base tree (default :func:`tests.lab.sut.default_source`) and applies the
  patch; the copy sits in the lab's build cache (:func:`tests.lab.build.cached_build`) under
  ``mutant-src/<name>-<hash>`` (hash of the patch and of the base tree), so repeated calls reuse it.
* :func:`build_mutant` builds that tree with :func:`tests.lab.sut.build_sut` (content-hash cached).

``python -m tests.lab.mutants [NAME...]`` builds the named mutants (default: all) and prints each build
directory. See ``README.md`` here for the table of mutants and how to add one.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from tests.lab.build import BuildError, cached_build, content_hash, tree_files
from tests.lab.sut import OUTPUTS, SutBuild, build_sut, default_source

#: The directory holding the ``<name>.patch`` files.
PATCH_DIR = Path(__file__).resolve().parent
_MARKER = ".mutant-complete"


def _description(patch: Path) -> str:
    """The patch's header line without its leading ``#``; raises :class:`BuildError` when it has none."""
    with patch.open(encoding="utf-8") as fh:
        first = fh.readline().rstrip("\n")
    if not first.startswith("#"):
        raise BuildError(f"mutant patch {patch.name} does not start with a '# <description>' line")
    return first.lstrip("#").strip()


def _load() -> dict[str, str]:
    return {p.stem: _description(p) for p in sorted(PATCH_DIR.glob("*.patch"))}


#: Mutant name -> one-line description of its bug (from each patch's header line).
MUTANTS: dict[str, str] = _load()


def patch_path(name: str) -> Path:
    """The patch file of mutant ``name``; raises :class:`BuildError` for an unknown name."""
    path = PATCH_DIR / f"{name}.patch"
    if name not in MUTANTS or not path.is_file():
        raise BuildError(f"unknown mutant {name!r} (known: {', '.join(sorted(MUTANTS))})")
    return path


def _tree_digest(patch: Path, base: Path) -> str:
    """Hash of the patch bytes and the base tree's content (16 hex characters)."""
    digest = hashlib.sha256(patch.read_bytes())
    digest.update(content_hash(base, tree_files(base), "mutant-base").encode())
    return digest.hexdigest()[:16]


def mutant_tree(name: str, base: str | os.PathLike[str] | None = None) -> Path:
    """A copy of the base source tree with mutant ``name``'s patch applied (created once, then reused).

    Args:
        name: a key of :data:`MUTANTS`.
        base: the source tree to patch; default :func:`tests.lab.sut.default_source` (the upstream tree).

    Returns:
        ``<cache_root>/mutant-src/<name>-<hash>``, where the hash covers the patch and the base tree.

    Raises:
        BuildError: unknown mutant, base is not a directory, ``patch`` is missing, or the patch does not
            apply (one line: the mutant, the base and patch's first complaint).
    """
    patch = patch_path(name)
    src = Path(base).expanduser().resolve() if base is not None else default_source()
    if not src.is_dir():
        raise BuildError(f"mutant {name}: base source tree not found: {src}")
    if shutil.which("patch") is None:
        raise BuildError("cannot apply mutant patches: missing patch (the GNU patch program)")

    def apply(tree: Path) -> None:
        shutil.copytree(src, tree, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("*.o", "*.so", "*.tar.gz", ".git", *OUTPUTS))
        proc = subprocess.run(
            ["patch", "-p1", "--batch", "--forward", "--no-backup-if-mismatch", "--reject-file=-",
             "-i", str(patch)],
            cwd=tree, capture_output=True, text=True, timeout=60, check=False)
        if proc.returncode != 0:
            lines = [ln.strip() for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
            complaint = next((ln for ln in lines if not ln.startswith("patching file")), "no output")
            raise BuildError(f"mutant {name} does not apply to {src} (patch exit {proc.returncode}): {complaint}")
        (tree / _MARKER).write_text(f"{name}\n")

    return cached_build("mutant-src", f"{name}-{_tree_digest(patch, src)}", apply, (_MARKER,))


def build_mutant(name: str, base: str | os.PathLike[str] | None = None) -> SutBuild:
    """Build (or reuse the cached build of) mutant ``name``: ``build_sut(mutant_tree(name, base))``.

    Raises:
        BuildError: as :func:`mutant_tree`, or the patched tree does not build.
    """
    return build_sut(mutant_tree(name, base))


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.lab.mutants [NAME...]``: build the mutants and print ``name<TAB>build dir``."""
    import sys

    names = (sys.argv[1:] if argv is None else argv) or sorted(MUTANTS)
    status = 0
    for name in names:
        try:
            print(f"{name}\t{build_mutant(name).directory}")
        except BuildError as exc:
            print(f"error: {exc}", file=sys.stderr)
            status = 2
    return status
