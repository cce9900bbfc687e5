"""Content-addressed build cache of the lab: C code built once per distinct source tree.

The lab builds the system under test (:mod:`tests.lab.sut`) and its simulated GPU (:mod:`tests.lab.simgpu`)
from source. A build is keyed by the SHA-256 of its inputs (every file's relative path and bytes, plus a
recipe tag), kept under the cache directory, and published by an atomic rename, so concurrent test workers
build a tree once and never see half a build.

Cache directory: ``$XPUSHARE_LAB_CACHE``, else ``$XDG_CACHE_HOME/xpushare-lab``, else ``~/.cache/xpushare-lab``.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path


class BuildError(RuntimeError):
    """A lab build could not run or failed; the message is one line naming what is missing or failed."""


@dataclass(frozen=True)
class Build:
    """One cached build: the directory holding its outputs and the content hash of its inputs."""

    directory: Path
    digest: str


def cache_root() -> Path:
    """The lab's build cache directory (created on first use)."""
    explicit = os.environ.get("XPUSHARE_LAB_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "xpushare-lab"


def tree_files(root: Path) -> list[Path]:
    """Regular files under ``root`` (sorted, relative), skipping build outputs and VCS metadata."""
    skip_suffixes = (".o", ".so", ".a", ".tar.gz")
    out: list[Path] = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if any(part.startswith(".") for part in rel.parts) or not path.is_file():
            continue
        if path.name.endswith(skip_suffixes):
            continue
        out.append(rel)
    return out


def content_hash(root: Path, files: Iterable[Path], recipe: str) -> str:
    """SHA-256 (hex, first 16 characters) of ``recipe`` and each file's relative path and bytes."""
    digest = hashlib.sha256(recipe.encode())
    for rel in files:
        digest.update(b"\0" + str(rel).encode() + b"\0")
        digest.update((root / rel).read_bytes())
    return digest.hexdigest()[:16]


def cached_build(kind: str, digest: str, build: Callable[[Path], None], outputs: Iterable[str]) -> Path:
    """The directory holding ``outputs`` of build ``kind``/``digest``, building it when absent.

    Args:
        kind: cache namespace (``sut``, ``simgpu``, ``mutant-src``).
        digest: the inputs' content hash (:func:`content_hash`).
        build: ``build(dest)`` writes the outputs into the empty directory ``dest``; raises
            :class:`BuildError` on failure.
        outputs: file names that must exist in ``dest`` after ``build`` for the build to count.

    Raises:
        BuildError: the build failed or left an output missing (nothing is published then).
    """
    root = cache_root() / kind
    root.mkdir(parents=True, exist_ok=True)
    final = root / digest
    wanted = list(outputs)
    if all((final / name).is_file() for name in wanted):
        return final
    with open(root / f".{digest}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker may be building the same tree
        if all((final / name).is_file() for name in wanted):
            return final
        staging = Path(tempfile.mkdtemp(prefix=f".{digest}-", dir=root))
        try:
            build(staging)
            missing = [name for name in wanted if not (staging / name).is_file()]
            if missing:
                raise BuildError(f"{kind} build {digest} did not produce {', '.join(missing)}")
            if final.exists():
                shutil.rmtree(final)
            staging.rename(final)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
    return final


def run_step(argv: Sequence[str], failure: str, *, timeout: float, cwd: Path | None = None) -> str:
    """Run one build command and return its output (stdout then stderr, stripped).

    Raises:
        BuildError: it exited non-zero: ``"<failure> (exit N): <its last 4 output lines>"``.
    """
    proc = subprocess.run(list(argv), cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)
    text = (proc.stdout + proc.stderr).strip()
    if proc.returncode != 0:
        tail = " | ".join(text.splitlines()[-4:])
        raise BuildError(f"{failure} (exit {proc.returncode}): {tail}")
    return text


def require_tools(what: str, tools: Iterable[str], headers: Iterable[str] = ()) -> None:
    """Raise :class:`BuildError` naming every missing compiler tool or C header needed to build ``what``.

    ``headers`` are include paths such as ``curl/curl.h``, looked up in the usual system include dirs.
    """
    missing = [tool for tool in tools if shutil.which(tool) is None]
    include_dirs = [Path("/usr/include"), Path("/usr/local/include"),
                    *Path("/usr/include").glob("*-linux-gnu")]
    for header in headers:
        if not any((d / header).is_file() for d in include_dirs):
            missing.append(f"{header} (e.g. the libcurl development package)" if header.startswith("curl/")
                           else header)
    if missing:
        raise BuildError(f"cannot build {what}: missing {', '.join(missing)}")
