"""The real system under test, built from a source tree for the lab.

``build_sut(src)`` copies an xpushare source tree (default: ``../shared/sut/xpushare/src`` beside the
repository, or ``$XPUSHARE_SUT_SRC``), runs the upstream Makefile's ``libxpushare.so xpushare-scheduler
xpusharectl`` targets in the copy, and caches the three outputs by the tree's content hash
(:mod:`tests.lab.build`). A patched or deliberately broken tree (a mutant) builds the same way, so any lab
can run against any tree: ``invoke lab.up --sut-src DIR`` or ``pytest --sut-src DIR``. The objects of
unchanged source files come from ``sut-obj/`` in the cache (keyed by the ``.c`` file, every header and the
Makefile), so a mutant recompiles only the files its patch touches.

Needs gcc, make and the libcurl development headers (``.ci/run`` installs them).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tests.lab.build import (
    Build,
    BuildError,
    cache_root,
    cached_build,
    content_hash,
    require_tools,
    run_step,
    tree_files,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
#: Where the upstream source sits beside the repository (the project's shared material).
DEFAULT_SUT_SRC = REPO_ROOT.parent / "shared" / "sut" / "xpushare" / "src"
OUTPUTS = ("libxpushare.so", "xpushare-scheduler", "xpusharectl")
_RECIPE = "make " + " ".join(OUTPUTS) + " v1"


@dataclass(frozen=True)
class SutBuild(Build):
    """Paths of one built SUT (all in one cache directory), the source tree's content hash and the tree."""

    source: Path

    @property
    def library(self) -> Path:
        """The client library to ``LD_PRELOAD`` (``libxpushare.so``)."""
        return self.directory / "libxpushare.so"

    @property
    def scheduler(self) -> Path:
        """The scheduler binary (``xpushare-scheduler``)."""
        return self.directory / "xpushare-scheduler"

    @property
    def ctl(self) -> Path:
        """The control CLI (``xpusharectl``)."""
        return self.directory / "xpusharectl"


def default_source() -> Path:
    """``$XPUSHARE_SUT_SRC`` when set, else the upstream tree beside the repository."""
    explicit = os.environ.get("XPUSHARE_SUT_SRC")
    return Path(explicit).expanduser().resolve() if explicit else DEFAULT_SUT_SRC


class SourceMissing(BuildError):
    """The SUT source tree to build is not there (no Makefile/scheduler.c); ``source`` is the path looked at."""

    def __init__(self, source: Path) -> None:
        super().__init__(f"not an xpushare source tree (no Makefile/scheduler.c): {source}")
        self.source = source


def source_tree(source: str | os.PathLike[str] | None = None) -> Path:
    """The SUT source tree ``source`` (default :func:`default_source`) as an absolute path.

    Raises:
        SourceMissing: it has no Makefile or scheduler.c.
    """
    src = Path(source).expanduser().resolve() if source is not None else default_source()
    if not (src / "Makefile").is_file() or not (src / "scheduler.c").is_file():
        raise SourceMissing(src)
    return src


def _object_keys(tree: Path) -> dict[str, str]:
    """``X.o`` -> cache key of the object compiled from ``X.c`` of ``tree``: the hash of that file, every
    header of the tree and the Makefile (its flags), so a header or flag change recompiles everything."""
    shared = content_hash(tree, [*sorted(p.relative_to(tree) for p in tree.glob("*.h")), Path("Makefile")],
                          _RECIPE + " objects")
    return {c.with_suffix(".o").name: content_hash(tree, [c.relative_to(tree)], shared) for c in tree.glob("*.c")}


def _objects_in(tree: Path) -> set[str]:
    """Put the cached objects of ``tree``'s unchanged sources into it (newer than their sources, so make
    keeps them); returns their names. A mutant patches one or two ``.c`` files: compiling every file again
    took 4.5 s of CPU per mutant (hook.c alone 1.2 s, at -O3), recompiling only the patched ones about 1."""
    root = cache_root() / "sut-obj"
    reused = set()
    for obj, key in _object_keys(tree).items():
        cached = root / f"{key}.o"
        if cached.is_file():
            shutil.copyfile(cached, tree / obj)  # mtime now: newer than the copied sources
            reused.add(obj)
    return reused


def _objects_out(tree: Path, reused: set[str]) -> None:
    """Keep the objects make compiled in ``tree`` for later builds (published by an atomic rename)."""
    root = cache_root() / "sut-obj"
    root.mkdir(parents=True, exist_ok=True)
    for obj, key in _object_keys(tree).items():
        if obj in reused or not (tree / obj).is_file() or (root / f"{key}.o").is_file():
            continue
        fd, tmp = tempfile.mkstemp(prefix=f".{key}-", dir=root)
        os.close(fd)
        shutil.copyfile(tree / obj, tmp)
        os.replace(tmp, root / f"{key}.o")


def build_sut(source: str | os.PathLike[str] | None = None) -> SutBuild:
    """Build (or reuse the cached build of) the SUT tree ``source``.

    Raises:
        SourceMissing: the tree has no Makefile or scheduler.c.
        BuildError: a tool or header is missing (one line naming it), or
            ``make`` failed (its last output lines in the message).
    """
    src = source_tree(source)
    files = tree_files(src)
    digest = content_hash(src, files, _RECIPE)

    def make(dest: Path) -> None:
        require_tools("the xpushare SUT", ("gcc", "make"), ("curl/curl.h",))
        with tempfile.TemporaryDirectory(prefix="xpushare-sut-") as work:
            tree = Path(work) / "src"
            shutil.copytree(src, tree, ignore=shutil.ignore_patterns("*.o", "*.so", ".git"))
            reused = _objects_in(tree)
            run_step(["make", "-j2", *OUTPUTS], f"make failed in {src}", timeout=300, cwd=tree)
            _objects_out(tree, reused)
            for name in OUTPUTS:
                shutil.copy2(tree / name, dest / name)

    return SutBuild(cached_build("sut", digest, make, OUTPUTS), digest, src)


def main() -> int:
    """``python -m tests.lab.sut [SRC]``: build and print the output directory."""
    import sys

    try:
        build = build_sut(sys.argv[1] if len(sys.argv) > 1 else None)
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(build.directory)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
