"""The lab's simulated GPU: a stub CUDA driver and a stub NVML for machines without a GPU.

``build_simgpu()`` compiles ``tests/lab/simgpu_src/*.c`` with gcc into ``libcuda.so.1`` and
``libnvidia-ml.so.1`` (cached by content hash, :mod:`tests.lab.build`), under which the real
``libxpushare.so`` and ``xpushare-scheduler`` run unchanged. Put the build directory on
``LD_LIBRARY_PATH`` and point ``SIMGPU_CONFIG`` at a device file written by :func:`write_config`
(:meth:`SimGpuBuild.env` does both, and puts the ``nvidia-smi`` look-alike on ``PATH``).

Kernels are timed, not computed: ``simgpu_work(flops, bytes)`` lasts
``max(flops / flops_per_s, bytes / bytes_per_s)`` seconds on the device's one timeline, shared by
every process, so clients of one device contend and clients of different devices do not. See
``tests/lab/README-simgpu.md`` for the whole contract and what the simulation cannot show.

The node's kernel log is the file ``SIMGPU_KMSG`` names (lines in ``dmesg --time-format=iso`` form); the
``dmesg`` look-alike beside ``nvidia-smi`` prints it. :func:`start_kmsg` creates one, :func:`xid_line` and
:func:`append_kmsg` write an ``NVRM: Xid`` line as the driver would, :func:`set_health` sets a device's ECC
counters, retired pages, remap failure and lost flag (``struct simgpu_health``), as the fault injector does
(docs/faults.md).

``python -m tests.lab.simgpu`` builds and prints the build directory.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import stat
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from tests.lab.build import Build, BuildError, cached_build, content_hash, require_tools, run_step, tree_files

#: The C sources (and the ``nvidia-smi`` script) of the simulated GPU.
SOURCE_DIR = Path(__file__).resolve().parent / "simgpu_src"
#: Where the libraries look for the device file when ``SIMGPU_CONFIG`` is unset.
DEFAULT_CONFIG = Path("/run/simgpu/devices")
#: Context overhead each process pays per device once it has a context, unless
#: ``SIMGPU_CONTEXT_BYTES`` says otherwise (bytes).
DEFAULT_CONTEXT_BYTES = 256 << 20

GiB = 1 << 30
MiB = 1 << 20

_CFLAGS = ("-std=gnu11", "-Wall", "-Wextra", "-O2", "-fPIC", "-shared", "-fvisibility=hidden",
           "-Wl,-Bsymbolic")
_LIBRARIES = (
    # (output, soname link, sources)
    ("libcuda.so.1", "libcuda.so", ("simcuda.c", "simgpu_state.c")),
    ("libnvidia-ml.so.1", "libnvidia-ml.so", ("simnvml.c", "simgpu_state.c")),
)
_SMI = "nvidia-smi"
_DMESG = "dmesg"
_LOG = "build.log"
OUTPUTS = ("libcuda.so.1", "libcuda.so", "libnvidia-ml.so.1", "libnvidia-ml.so", _SMI, _DMESG, _LOG)
_RECIPE = "gcc " + " ".join(_CFLAGS) + " -lpthread; simgpu 1"


@dataclass(frozen=True)
class SimGpuBuild(Build):
    """One build of the simulated GPU: a directory holding the stub driver, NVML and nvidia-smi."""

    @property
    def libcuda(self) -> Path:
        """The stub CUDA driver (``libcuda.so.1``)."""
        return self.directory / "libcuda.so.1"

    @property
    def libnvml(self) -> Path:
        """The stub NVML (``libnvidia-ml.so.1``)."""
        return self.directory / "libnvidia-ml.so.1"

    @property
    def nvidia_smi(self) -> Path:
        """The ``nvidia-smi`` look-alike (a Python script using the stub NVML)."""
        return self.directory / _SMI

    @property
    def compiler_output(self) -> str:
        """What gcc printed while building (empty when there were no warnings)."""
        return (self.directory / _LOG).read_text()

    def env(self, config: str | os.PathLike[str], visible: str | None = None,
            base: Mapping[str, str] | None = None) -> dict[str, str]:
        """Environment entries that make a process see the simulated GPUs of ``config``.

        ``LD_LIBRARY_PATH`` and ``PATH`` get the build directory in front of their value in ``base``
        (default: this process's environment); ``SIMGPU_CONFIG`` is ``config``; with ``visible``,
        ``NVIDIA_VISIBLE_DEVICES`` too. Merge the result into a full environment yourself.
        """
        source = os.environ if base is None else base
        out = {
            "LD_LIBRARY_PATH": _prepend(str(self.directory), source.get("LD_LIBRARY_PATH")),
            "PATH": _prepend(str(self.directory), source.get("PATH", os.defpath)),
            "SIMGPU_CONFIG": str(config),
        }
        if visible is not None:
            out["NVIDIA_VISIBLE_DEVICES"] = visible
        return out


def _prepend(entry: str, value: str | None) -> str:
    return entry if not value else f"{entry}:{value}"


@dataclass(frozen=True)
class SimDevice:
    """One simulated GPU (a line of the device file).

    Attributes:
        uuid: the device's UUID as NVML reports it (``GPU-`` + 8-4-4-4-12 hex digits for realism;
            any string without tab, newline or ``/`` works).
        name: the product name NVML and ``cuDeviceGetName`` report.
        total_bytes: device memory in bytes.
        flops_per_s: compute speed in FLOP/s (``simgpu_work`` time = flops / flops_per_s).
        bytes_per_s: memory bandwidth in bytes/s (``simgpu_work`` time = bytes / bytes_per_s).
    """

    uuid: str
    name: str = "NVIDIA A100-SXM4-80GB"
    total_bytes: int = 80 * GiB
    flops_per_s: float = 1e12
    bytes_per_s: float = 1e12

    def __post_init__(self) -> None:
        for field, value in (("uuid", self.uuid), ("name", self.name)):
            if not value or any(c in value for c in "\t\n\r") or value != value.strip():
                raise ValueError(f"SimDevice.{field} must be non-empty, without surrounding spaces, tabs or "
                                 f"newlines: {value!r}")
        if "/" in self.uuid:
            raise ValueError(f"SimDevice.uuid must not contain '/': {self.uuid!r}")
        if self.total_bytes < 0 or self.flops_per_s < 0 or self.bytes_per_s < 0:
            raise ValueError("SimDevice sizes and rates must be >= 0")

    def line(self) -> str:
        """The device file line (tab-separated, no newline)."""
        return "\t".join((self.uuid, self.name, str(int(self.total_bytes)), _number(self.flops_per_s),
                          _number(self.bytes_per_s)))


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def make_uuid(index: int, seed: str = "simgpu") -> str:
    """A deterministic NVML-style UUID (``GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx``) for device ``index``."""
    h = hashlib.sha256(f"{seed}:{index}".encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def write_config(path: str | os.PathLike[str], devices: Iterable[SimDevice]) -> Path:
    """Write the device file ``path`` (parent created; replaced atomically) and return it.

    Format: one device per line, ``uuid<TAB>name<TAB>total_bytes<TAB>flops_per_s<TAB>bytes_per_s``;
    the device index is the line order. Shared state goes to ``<path>.d/`` (:func:`state_dir`).
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    lines = ["# simgpu devices: uuid<TAB>name<TAB>total_bytes<TAB>flops_per_s<TAB>bytes_per_s"]
    lines += [device.line() for device in devices]
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(target)
    return target


def state_dir(config: str | os.PathLike[str]) -> Path:
    """Directory of the shared per-device state files of ``config`` (``<config>.d``)."""
    return Path(f"{os.fspath(config)}.d")


# -- GPU health and the kernel log (docs/faults.md) ----------------------------------------------------

#: ``struct simgpu_state`` (simgpu.h, ``SIMGPU_STATE_VERSION`` 3): magic, version, the timeline and process
#: slots, then ``struct simgpu_health`` as its last member.
STATE_MAGIC = 0x3130555047304953
STATE_VERSION = 3
_STATE_HEAD = struct.Struct("<QIIQII")
_INTERVALS_BYTES = 4096 * 16
_PROCS_BYTES = 256 * 32
HEALTH_OFFSET = _STATE_HEAD.size + _INTERVALS_BYTES + _PROCS_BYTES
_HEALTH = struct.Struct("<QQQQIIII")
HEALTH_FIELDS = ("ecc_volatile_corrected", "ecc_volatile_uncorrected", "ecc_aggregate_corrected",
                 "ecc_aggregate_uncorrected", "retired_pages_dbe", "remap_failure", "lost")


def pci_bus_id(config_index: int) -> str:
    """The kernel log's bus id of the device on line ``config_index`` of its config (``0000:01:00``), the one
    the stub NVML reports as ``00000000:01:00.0``."""
    return f"0000:{config_index + 1:02X}:00"


def xid_line(bus_id: str, xid: int, text: str, *, pid: int | None = None, name: str | None = None,
             when: datetime | None = None) -> str:
    """One kernel log line of the driver's Xid report, in ``dmesg --time-format=iso`` form (no newline)."""
    stamp = (when or datetime.now(timezone.utc)).astimezone(timezone.utc)
    who = f"pid={pid}, name={name}, " if pid is not None else ""
    return f"{stamp.strftime('%Y-%m-%dT%H:%M:%S,%f')}+00:00 NVRM: Xid (PCI:{bus_id}): {xid}, {who}{text}"


def start_kmsg(path: str | os.PathLike[str], node: str) -> Path:
    """Create the node's kernel log ``path`` (``SIMGPU_KMSG``) with a boot line, world-writable (the lab's
    processes of any user append to it); an existing log is kept. Returns the path."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    if not target.exists():
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S,%f")
        target.write_text(f"{stamp}+00:00 Linux version 6.8.0-simgpu (lab node {node})\n")
        target.chmod(0o666)
    return target


def append_kmsg(path: str | os.PathLike[str], line: str) -> None:
    """Append one line to a kernel log (one ``write(2)`` of an ``O_APPEND`` file, as the injector does)."""
    fd = os.open(os.fspath(path), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        os.write(fd, (line.rstrip("\n") + "\n").encode())
    finally:
        os.close(fd)


def set_health(config: str | os.PathLike[str], uuid: str, **values: int) -> None:
    """Set fields of ``struct simgpu_health`` of device ``uuid`` (names: :data:`HEALTH_FIELDS`; the others
    keep their value). Creates the state file as the libraries would. Use with no client running."""
    unknown = set(values) - set(HEALTH_FIELDS)
    if unknown:
        raise ValueError(f"unknown health field(s): {', '.join(sorted(unknown))}")
    directory = state_dir(config)
    directory.mkdir(parents=True, exist_ok=True)
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in uuid)
    path = directory / f"{name}.state"
    size = HEALTH_OFFSET + _HEALTH.size
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # the libraries change the state only under this lock
        head = os.pread(fd, 12, 0).ljust(12, b"\0")
        magic, version = struct.unpack("<QI", head)
        if magic != STATE_MAGIC or version != STATE_VERSION:  # written in place: clients may have it mapped
            os.pwrite(fd, struct.pack("<QI", STATE_MAGIC, STATE_VERSION).ljust(size, b"\0"), 0)
        elif os.fstat(fd).st_size < size:
            os.ftruncate(fd, size)
        current = dict(zip(HEALTH_FIELDS, _HEALTH.unpack(os.pread(fd, _HEALTH.size, HEALTH_OFFSET)), strict=False))
        current.update(values)
        os.pwrite(fd, _HEALTH.pack(*(int(current[f]) for f in HEALTH_FIELDS), 0), HEALTH_OFFSET)
    finally:
        os.close(fd)
    path.chmod(0o666)


def build_simgpu() -> SimGpuBuild:
    """Build (or reuse the cached build of) the simulated GPU.

    Raises:
        BuildError: gcc is missing (one line naming it) or compiling failed (its last lines).
    """
    files = tree_files(SOURCE_DIR)
    digest = content_hash(SOURCE_DIR, files, _RECIPE)

    def build(dest: Path) -> None:
        require_tools("the simulated GPU", ("gcc",))
        dest.chmod(0o755)  # readable by lab processes of any user (mkdtemp makes it 0700)
        log: list[str] = []
        for output, link, sources in _LIBRARIES:
            argv = ["gcc", *_CFLAGS, f"-Wl,-soname,{output}", "-o", str(dest / output),
                    *(str(SOURCE_DIR / s) for s in sources), "-lpthread"]
            text = run_step(argv, f"gcc failed building {output}", timeout=120)
            if text:
                log.append(text)
            (dest / link).symlink_to(output)
        for script in (_SMI, _DMESG):
            target = dest / script
            shutil.copyfile(SOURCE_DIR / script, target)
            target.chmod(target.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        (dest / _LOG).write_text("\n".join(log))

    return SimGpuBuild(cached_build("simgpu", digest, build, OUTPUTS), digest)


def main() -> int:
    """``python -m tests.lab.simgpu``: build and print the build directory."""
    import sys

    try:
        build = build_simgpu()
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(build.directory)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
