#!/usr/bin/env python3
"""Build the CUDA error-injection shim (README.md here; docs/faults.md "Injected faults").

    python3 workloads/faultshim/build.py --out DIR [--real-libcuda PATH]

writes ``DIR/libcuda.so.1`` (the shim, soname ``libcuda.so.1``, RUNPATH ``$ORIGIN``) and ``DIR/libcuda-real.so.1``,
a symbolic link to the real driver (``--real-libcuda``, default: the ``libcuda.so.1`` the loader finds first, in
``LD_LIBRARY_PATH`` or ``ldconfig -p``). Load it
after the client library: ``LD_PRELOAD="<libxpushare.so> DIR/libcuda.so.1"``. Needs gcc. Prints the shim's path;
on an error prints one ``error:`` line and exits 1. Stdlib only (runs on the GPU node).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "faultshim.c"
SHIM = "libcuda.so.1"
REAL = "libcuda-real.so.1"


def find_real_libcuda() -> str:
    """The driver's ``libcuda.so.1`` the dynamic loader would load: the first in ``LD_LIBRARY_PATH``'s
    directories (searched before the cache, as the loader does), else the cache's (``ldconfig -p``)."""
    for directory in os.environ.get("LD_LIBRARY_PATH", "").split(":"):
        candidate = Path(directory) / SHIM
        if directory and candidate.is_file() and SHIM_MARK not in candidate.read_bytes():
            return str(candidate)
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    out = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, check=False).stdout
    for line in out.splitlines():
        name, _, path = line.strip().partition(" => ")
        if name.split(" ")[0] == SHIM and path.strip():
            return path.strip()
    raise RuntimeError("no libcuda.so.1 in `ldconfig -p`: pass --real-libcuda")


#: A string every build of the shim carries (faultshim.c's log prefix): a ``libcuda.so.1`` without it is not ours.
SHIM_MARK = b"[FAULTSHIM]"


def refuse_foreign(out: Path) -> None:
    """Raise RuntimeError when ``out`` holds a ``libcuda.so.1`` that is not an earlier build of the shim (a real
    driver, say) or a ``libcuda-real.so.1`` that is not a link: the build replaces only what it wrote."""
    shim, link = out / SHIM, out / REAL
    if shim.is_symlink() or (shim.exists() and SHIM_MARK not in shim.read_bytes()):
        raise RuntimeError(f"{shim} exists and is not a build of the shim: refusing to replace it")
    if link.exists() and not link.is_symlink():
        raise RuntimeError(f"{link} exists and is not a symbolic link: refusing to replace it")


def build(out: Path, real_libcuda: str) -> Path:
    """Compile the shim into ``out`` against a stub of soname ``libcuda-real.so.1``, then point that name at
    ``real_libcuda``. Raises RuntimeError (gcc missing or failing, real driver missing, ``out`` holding files the
    build did not write: :func:`refuse_foreign`)."""
    if not Path(real_libcuda).exists():
        raise RuntimeError(f"real driver {real_libcuda} does not exist")
    refuse_foreign(out)
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        raise RuntimeError("gcc not found")
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        stub_src = Path(tmp) / "stub.c"
        stub_src.write_text("int faultshim_real_stub;\n")
        steps = [
            [gcc, "-shared", "-fPIC", "-o", str(Path(tmp) / REAL), str(stub_src), f"-Wl,-soname,{REAL}"],
            [gcc, "-std=gnu11", "-Wall", "-Wextra", "-O2", "-shared", "-fPIC", "-fvisibility=hidden",
             "-o", str(Path(tmp) / SHIM), str(SOURCE), f"-Wl,-soname,{SHIM}", "-Wl,--no-as-needed",
             f"-L{tmp}", f"-l:{REAL}", "-Wl,-rpath,$ORIGIN", "-ldl", "-lpthread"],
        ]
        for argv in steps:
            proc = subprocess.run(argv, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise RuntimeError(f"{' '.join(argv[:1])} failed: {proc.stderr.strip()[-400:]}")
        os.replace(Path(tmp) / SHIM, out / SHIM)
    link = out / REAL
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(os.path.abspath(real_libcuda))
    return out / SHIM


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="directory for libcuda.so.1 and libcuda-real.so.1")
    parser.add_argument("--real-libcuda", help="the real driver (default: libcuda.so.1 from ldconfig -p)")
    args = parser.parse_args(argv)
    try:
        print(build(args.out, args.real_libcuda or find_real_libcuda()))
    except (RuntimeError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
