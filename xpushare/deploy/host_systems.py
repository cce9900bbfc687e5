"""The other GPU-sharing systems on the GPU hosts of a host-mode cluster: HAMi-core built from its upstream source,
NVIDIA MPS's control daemon started and stopped (the inventory's ``sut: hami-core`` / ``sut: mps``).

**HAMi-core** (``invoke deploy [--sut-src HAMI_CORE_TREE]``): the tree given (copied as a tarball), else a shallow
``git clone`` of :data:`HAMI_CORE_GIT` on the host (HAMi-core's repository has no licence file: the tool never
ships its source, it builds it where it runs). Prerequisites on the host (one line naming what is missing):
``cmake``, ``make``, a C compiler, ``cuda.h`` and ``nvml.h`` under ``$CUDA_HOME/include`` (default
``/usr/local/cuda``; the nvcc FindCUDA needs for the upstream tests' configure step). The build is upstream's
``build.sh`` configuration (``DLSYM_HOOK_ENABLE``, ``MULTIPROCESS_LIMIT_ENABLE``, ``HOOK_MEMINFO_ENABLE``,
``HOOK_NVML_ENABLE``, ``CMAKE_BUILD_TYPE=Debug``) with only the ``vgpu`` target made; ``build/libvgpu.so`` is
installed at the inventory's ``sut_lib``. ``start`` creates ``/tmp/vgpulock`` and removes the shared region cache
(``/tmp/cudevshr.cache``, or ``$CUDA_DEVICE_MEMORY_SHARED_CACHE``), whose limits would otherwise outlive a change
of quota; ``stop`` removes the cache again; ``status`` is the library's presence.

**MPS** (``invoke deploy`` / ``sut.start``): ``nvidia-cuda-mps-control -d`` with ``CUDA_MPS_PIPE_DIRECTORY`` and
``CUDA_MPS_LOG_DIRECTORY`` under the inventory's ``scheduler.state_dir`` (:func:`~xpushare.inventory.sut_profiles.
mps_dirs`); ``stop`` / ``undeploy`` send it ``quit``; ``status`` asks it ``get_server_list``.

Every remote command is an argv; scripts get their values as positional arguments. Source: HAMi-core's
README, ``build.sh``, ``CMakeLists.txt``; NVIDIA's MPS documentation (``nvidia-cuda-mps-control``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from xpushare.deploy.host import BUILD_TIMEOUT_S, DeployError
from xpushare.inventory.schema import ClusterSpec
from xpushare.inventory.sut_profiles import HAMI_CORE, MPS, mps_dirs
from xpushare.model.errors import UsageError
from xpushare.transport.base import Host

__all__ = ["HAMI_CORE_GIT", "HAMI_DEFAULT_STATE", "HAMI_OPTIONS", "SYSTEMS", "SystemLayout", "hami_source_tarball",
           "missing_hami_prerequisites", "operation"]

SYSTEMS = (HAMI_CORE, MPS)
HAMI_CORE_GIT = "https://github.com/Project-HAMi/HAMi-core.git"
HAMI_DEFAULT_STATE = "/var/lib/xpushare-hami-core"
#: upstream build.sh's configuration (HAMi-core's build.sh), so the library is the one upstream builds
HAMI_OPTIONS = ("-DDLSYM_HOOK_ENABLE=1", "-DMULTIPROCESS_LIMIT_ENABLE=1", "-DHOOK_MEMINFO_ENABLE=1",
                "-DHOOK_NVML_ENABLE=1", "-DCMAKE_BUILD_TYPE=Debug", "-DTEST_DEVICE_ID=0",
                # CMake 4 refuses the project's cmake_minimum_required(2.8.11) without it
                "-DCMAKE_POLICY_VERSION_MINIMUM=3.5")
HAMI_CACHE = "/tmp/cudevshr.cache"
HAMI_LOCK_DIR = "/tmp/vgpulock"


@dataclass(frozen=True)
class SystemLayout:
    """Where a system lives on each GPU host: ``system`` (``hami-core`` | ``mps``), ``library`` (HAMi-core's
    install path, the inventory's ``sut_lib``; None for MPS), ``state_dir`` (HAMi-core: source and build; MPS:
    the daemon's ``pipe`` and ``log`` directories), ``cache`` (HAMi-core's shared region cache file)."""

    system: str
    library: str | None
    state_dir: str
    cache: str = HAMI_CACHE

    @classmethod
    def of(cls, cluster: ClusterSpec) -> SystemLayout:
        """The layout of a host-mode cluster whose ``sut`` is one of :data:`SYSTEMS`.

        Raises:
            UsageError: not host mode, another system, HAMi-core without an absolute ``sut_lib``, or a state
                directory too close to ``/``.
        """
        if not cluster.is_host or cluster.sut not in SYSTEMS:
            raise UsageError(f"cluster {cluster.name}: sut {cluster.sut} in mode {cluster.mode} is not deployed here")
        default = HAMI_DEFAULT_STATE if cluster.sut == HAMI_CORE else mps_dirs(None)[0].rsplit("/", 1)[0]
        state = cluster.scheduler.state_dir or default
        if not state.startswith("/") or len(PurePosixPath(state).parts) < 3:
            raise UsageError(f"cluster {cluster.name}: scheduler.state_dir must be an absolute path of its own "
                             f"(e.g. {default}), not {state!r}")
        if cluster.sut == MPS:
            return cls(MPS, None, state)
        lib = cluster.sut_lib
        if not lib or not lib.startswith("/"):
            raise UsageError(f"cluster {cluster.name}: sut hami-core needs sut_lib, the absolute path libvgpu.so is "
                             "installed at (e.g. /usr/local/lib/hami-core/libvgpu.so)")
        cache = str(cluster.scheduler.env.get("CUDA_DEVICE_MEMORY_SHARED_CACHE") or HAMI_CACHE)
        return cls(HAMI_CORE, lib, state, cache)

    def mps_env(self) -> list[str]:
        """``K=V`` words for ``env`` that point ``nvidia-cuda-mps-control`` at this layout's pipe and log dirs."""
        pipe, log = mps_dirs(self.state_dir)
        return [f"CUDA_MPS_PIPE_DIRECTORY={pipe}", f"CUDA_MPS_LOG_DIRECTORY={log}"]


# ------------------------------------------------------------------------------------------------ HAMi-core

_HAMI_TOOLS = r"""
missing=""
for t in cmake make tar; do command -v "$t" >/dev/null 2>&1 || missing="$missing $t"; done
command -v cc >/dev/null 2>&1 || command -v gcc >/dev/null 2>&1 || missing="$missing cc"
[ "$1" = git ] && { command -v git >/dev/null 2>&1 || missing="$missing git"; }
cuda=${CUDA_HOME:-/usr/local/cuda}
for h in cuda.h nvml.h; do [ -f "$cuda/include/$h" ] || missing="$missing $h($cuda/include)"; done
echo "$missing"
"""

# $1 state dir, $2 tarball ("" = clone), $3 git URL, then cmake's options. Only the vgpu target: the upstream tests
# need the CUDA runtime's headers and libraries to build, which the library itself does not.
_HAMI_BUILD = r"""
set -e
state=$1; tarball=$2; url=$3; shift 3
cuda=${CUDA_HOME:-/usr/local/cuda}
rm -rf "$state/src"; mkdir -p "$state"
if [ -n "$tarball" ]; then mkdir -p "$state/src"; tar -xzf "$tarball" -C "$state/src"; rm -f "$tarball"
else git clone -q --depth 1 "$url" "$state/src" >"$state/build.log" 2>&1 \
  || { tail -n 3 "$state/build.log" >&2; exit 1; }
fi
cd "$state/src"; mkdir -p build; cd build
export CUDA_HOME="$cuda" LIBRARY_PATH="$cuda/lib64/stubs:$cuda/lib64${LIBRARY_PATH:+:$LIBRARY_PATH}"
{ cmake .. "$@" -DCUDA_TOOLKIT_ROOT_DIR="$cuda" && make -j"$(nproc 2>/dev/null || echo 2)" vgpu; } \
  >>"$state/build.log" 2>&1 || { tail -n 5 "$state/build.log" >&2; exit 1; }
git -C "$state/src" log -1 --format=%H 2>/dev/null || echo unknown
"""

_HAMI_INSTALL = r"""
set -e
install -D -m 0755 "$1/src/build/libvgpu.so" "$2"
"""

# $1 lock dir, $2 shared region cache: HAMi-core takes its limits from the cache when it exists
_HAMI_START = r"""
mkdir -p "$1" && chmod 0777 "$1" 2>/dev/null; rm -f "$2"
"""


def missing_hami_prerequisites(host: Host, *, clone: bool) -> list[str]:
    """What ``host`` lacks to build HAMi-core: of ``cmake``, ``make``, ``tar``, ``cc``, ``git`` (``clone``),
    ``cuda.h`` and ``nvml.h`` (named with the include directory looked in). Raises :class:`TransportError`."""
    return host.run(["sh", "-c", _HAMI_TOOLS, "sh", "git" if clone else ""], timeout=60).stdout.split()


def hami_source_tarball(src: Path, dest_dir: Path) -> Path:
    """A gzip tarball of a HAMi-core tree ``src`` (``build/`` and ``.git`` left out) in ``dest_dir``.

    Raises:
        UsageError: ``src`` is not a HAMi-core tree (no CMakeLists.txt or src/libvgpu.c).
    """
    import tarfile

    if not (src / "CMakeLists.txt").is_file() or not (src / "src" / "libvgpu.c").is_file():
        raise UsageError(f"not a HAMi-core source tree (no CMakeLists.txt/src/libvgpu.c): {src}")
    out = dest_dir / "hami-core-src.tar.gz"

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        return None if Path(info.name).name in (".git", "build") else info

    with tarfile.open(out, "w:gz") as tar:
        for child in sorted(src.iterdir()):
            tar.add(child, arcname=child.name, filter=keep)
    return out


def build_hami(host: Host, layout: SystemLayout, tarball: Path | None, url: str = HAMI_CORE_GIT) -> str:
    """Build HAMi-core on ``host`` (from ``tarball``, else a clone of ``url``) and install ``libvgpu.so`` at the
    layout's library; return the commit built (``unknown`` from a tree without git).

    Raises:
        DeployError: a prerequisite missing (one line naming them), the clone, cmake/make or the install failed.
    """
    missing = missing_hami_prerequisites(host, clone=tarball is None)
    if missing:
        raise DeployError(host.name, "cannot build HAMi-core: missing " + ", ".join(missing)
                          + " (cmake, make and a C compiler from the distribution; cuda.h and nvml.h from the CUDA "
                            "toolkit: set CUDA_HOME)")
    host.run(["mkdir", "-p", layout.state_dir], timeout=30, check=True)
    remote = ""
    if tarball is not None:
        remote = f"{layout.state_dir}/hami-core-src.tar.gz"
        host.put(tarball, remote)
    res = host.run(["sh", "-c", _HAMI_BUILD, "sh", layout.state_dir, remote, url, *HAMI_OPTIONS],
                   timeout=BUILD_TIMEOUT_S)
    if not res.ok:
        raise DeployError(host.name, f"HAMi-core build failed: {' | '.join(res.stderr.strip().splitlines()[-5:])}")
    commit = (res.stdout.strip().splitlines() or ["unknown"])[-1]
    assert layout.library is not None
    res = host.run(["sh", "-c", _HAMI_INSTALL, "sh", layout.state_dir, layout.library], timeout=60)
    if not res.ok:
        raise DeployError(host.name, f"install failed: {res.stderr.strip()[-300:]}")
    return commit


# ------------------------------------------------------------------------------------------------ MPS

# $1 pipe dir, $2 log dir; the daemon's environment comes from ``env`` in the argv
_MPS_START = r"""
command -v nvidia-cuda-mps-control >/dev/null 2>&1 || { echo "nvidia-cuda-mps-control not found" >&2; exit 3; }
mkdir -p "$1" "$2"
if echo get_server_list | nvidia-cuda-mps-control >/dev/null 2>&1; then echo "already running"; exit 0; fi
nvidia-cuda-mps-control -d || exit 1
i=0; until echo get_server_list | nvidia-cuda-mps-control >/dev/null 2>&1; do
  i=$((i + 1)); [ $i -gt 50 ] && { echo "the daemon does not answer" >&2; tail -n 3 "$2/control.log" >&2; exit 1; }
  sleep 0.1
done
echo started
"""

_MPS_STOP = r"""
command -v nvidia-cuda-mps-control >/dev/null 2>&1 || { echo "not installed"; exit 0; }
if echo get_server_list | nvidia-cuda-mps-control >/dev/null 2>&1; then
  echo quit | nvidia-cuda-mps-control; echo stopped
else echo "not running"; fi
"""

_MPS_STATUS = r"""
command -v nvidia-cuda-mps-control >/dev/null 2>&1 || { echo "nvidia-cuda-mps-control not found"; exit 1; }
if servers=$(echo get_server_list | nvidia-cuda-mps-control 2>/dev/null); then
  echo "running (servers: $(echo $servers | tr -s ' ' ','))"
else echo "not running"; exit 1; fi
"""


def _mps(host: Host, layout: SystemLayout, script: str) -> tuple[int, str, str]:
    pipe, log = mps_dirs(layout.state_dir)
    res = host.run(["env", *layout.mps_env(), "sh", "-c", script, "sh", pipe, log], timeout=60)
    return res.exit_code, res.stdout.strip(), res.stderr.strip()


def mps_start(host: Host, layout: SystemLayout) -> str:
    """Start the MPS control daemon on ``host`` (nothing when it already answers). Raises :class:`DeployError`."""
    code, out, err = _mps(host, layout, _MPS_START)
    if code != 0:
        raise DeployError(host.name, f"MPS control daemon not started: {err or out or f'exit {code}'}")
    return f"MPS control daemon {out} (pipe {mps_dirs(layout.state_dir)[0]})"


def mps_stop(host: Host, layout: SystemLayout) -> str:
    """Send the daemon ``quit`` (nothing when it does not answer). Raises :class:`TransportError`."""
    return f"MPS control daemon {_mps(host, layout, _MPS_STOP)[1]}"


def mps_status(host: Host, layout: SystemLayout) -> tuple[str, bool]:
    """``(detail, running)`` from ``get_server_list``. Raises :class:`TransportError`."""
    code, out, _ = _mps(host, layout, _MPS_STATUS)
    return f"MPS control daemon {out}", code == 0


# ------------------------------------------------------------------------------------------------ per host


def operation(layout: SystemLayout, action: str, tarball: Path | None) -> Callable[[Host], tuple[str, bool]]:
    """One host's ``action`` (deploy, undeploy, status, start, stop, restart) for the layout's system:
    ``(detail, ok)``; ok is False only where ``status`` finds the system not ready."""

    def hami(host: Host) -> tuple[str, bool]:
        lib = str(layout.library)
        if action == "deploy":
            commit = build_hami(host, layout, tarball)
            host.run(["sh", "-c", _HAMI_START, "sh", HAMI_LOCK_DIR, layout.cache], timeout=30, check=True)
            return (f"HAMi-core {commit[:12]} built and installed at {lib}; {HAMI_LOCK_DIR} ready, {layout.cache} "
                    "cleared"), True
        if action == "undeploy":
            host.run(["rm", "-rf", "--", lib, layout.state_dir, layout.cache], timeout=60, check=True)
            return f"removed {lib}, {layout.state_dir}, {layout.cache}", True
        if action in ("stop", "restart"):
            host.run(["rm", "-f", "--", layout.cache], timeout=30, check=True)
            if action == "stop":
                return f"{layout.cache} removed (HAMi-core has no daemon)", True
        if action in ("start", "restart"):
            host.run(["sh", "-c", _HAMI_START, "sh", HAMI_LOCK_DIR, layout.cache], timeout=30, check=True)
        present = host.run(["test", "-f", lib], timeout=30).ok
        return (f"libvgpu.so {'installed' if present else 'missing'} at {lib}", present)

    def mps(host: Host) -> tuple[str, bool]:
        if action == "deploy":
            mps_stop(host, layout)  # a daemon of an earlier deploy may use other directories
            return mps_start(host, layout), True
        if action in ("undeploy", "stop"):
            return mps_stop(host, layout), True
        if action == "restart":
            mps_stop(host, layout)
        if action in ("start", "restart"):
            mps_start(host, layout)
        return mps_status(host, layout)

    return hami if layout.system == HAMI_CORE else mps
