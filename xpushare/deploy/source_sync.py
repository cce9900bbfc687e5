"""Steps 0-1 of the legacy deploy pipeline (:mod:`xpushare.deploy.k8s_pipeline`): the source tree to the build
host (rsync over SSH, else one tar archive over SFTP) and the git helpers (tag, auto-commit), with the
pipeline's step outcomes :class:`StepFailed` / :class:`StepSkipped`. Split out of :mod:`xpushare.deploy.k8s_pipeline`.
"""

from __future__ import annotations

import fnmatch
import shlex
import shutil
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import BinaryIO

from xpushare.inventory.schema import HostSpec
from xpushare.model.atomic_file import atomic_write_bytes
from xpushare.model.errors import XpushareError
from xpushare.transport.base import Host


class StepFailed(XpushareError):
    """A pipeline step failed; the message is its one-line outcome."""


class StepSkipped(Exception):
    """A step had nothing to do; the message says why."""



# --------------------------------------------------------------------------------------------- syncing


def ssh_command(spec: HostSpec) -> list[str]:
    """The ``ssh`` argv rsync uses (``-e``) for an inventory host: port, user, key, known_hosts and the
    host-key policy of the inventory (strict -> yes, accept-new, ignore -> no), batch mode (no password)."""
    opts = spec.ssh
    argv = ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={max(1, int(opts.connect_timeout))}"]
    if opts.ssh_config:
        argv += ["-F", str(Path(opts.ssh_config).expanduser())]
    if opts.port:
        argv += ["-p", str(opts.port)]
    if opts.user:
        argv += ["-l", opts.user]
    if opts.identity:
        argv += ["-i", str(Path(opts.identity).expanduser()), "-o", "IdentitiesOnly=yes"]
    if opts.host_key_policy == "ignore":
        argv += ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"]
    else:
        policy = "yes" if opts.host_key_policy == "strict" else "accept-new"
        argv += ["-o", f"StrictHostKeyChecking={policy}", "-o",
                 f"UserKnownHostsFile={Path(opts.known_hosts).expanduser()}"]
    return argv


def rsync_argv(rsync: str, source: Path, spec: HostSpec, remote_dir: str, excludes: Sequence[str]) -> list[str]:
    """``rsync -az --exclude ... -e '<ssh>' <source>/ <target>:<dir>/`` (a local path for a local host)."""
    argv = [rsync, "-az"]
    for pattern in excludes:
        argv += ["--exclude", pattern]
    if spec.local:
        return [*argv, f"{source}/", f"{remote_dir.rstrip('/')}/"]
    return [*argv, "-e", shlex.join(ssh_command(spec)), f"{source}/", f"{spec.target}:{remote_dir.rstrip('/')}/"]


def _excluded(name: str, excludes: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in excludes)


def make_archive(source: Path, archive: Path, excludes: Sequence[str]) -> int:
    """A gzip tar of ``source``'s contents (``./...``; excluded names left out at any depth); file count."""
    count = 0

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        nonlocal count
        if info.name != "." and _excluded(Path(info.name).name, excludes):
            return None
        if info.isfile():
            count += 1
        return info

    def write(fh: BinaryIO) -> None:
        with tarfile.open(fileobj=fh, mode="w:gz") as tar:
            tar.add(str(source), arcname=".", filter=keep)

    atomic_write_bytes(archive, write)
    return count


def sync_source(source: Path, host: Host, spec: HostSpec, remote_dir: str, *, rsync: str,
                excludes: Sequence[str], log: Callable[[str], None]) -> str:
    """Copy the source tree to ``remote_dir`` on the build host; return how (one line).

    rsync when it is installed here and on the host (and succeeds); otherwise one tar archive over SFTP
    (``Host.put``) extracted with ``tar -xzf`` there. Raises :class:`StepFailed` when both fail.
    """
    local_rsync = shutil.which(rsync)
    reason = f"{rsync!r} not installed here"
    if local_rsync is not None:
        remote_ok = spec.local or host.run(["sh", "-c", "command -v rsync"], timeout=30).ok
        if not remote_ok:
            reason = "rsync not installed on the build host"
        else:
            host.run(["mkdir", "-p", remote_dir], timeout=30, check=True)
            argv = rsync_argv(local_rsync, source, spec, remote_dir, excludes)
            t0 = time.monotonic()
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=3600, stdin=subprocess.DEVNULL)
            if proc.returncode == 0:
                return f"rsync to {remote_dir} in {time.monotonic() - t0:.1f} s"
            reason = f"rsync exited {proc.returncode}: {(proc.stderr.strip().splitlines() or [''])[-1]}"
    log(f"  {reason}; falling back to a tar archive over SFTP")
    with tempfile.TemporaryDirectory(prefix="xpushare-sync-") as tmp:
        archive = Path(tmp) / "source.tar.gz"
        t0 = time.monotonic()
        files = make_archive(source, archive, excludes)
        remote_archive = f"{remote_dir.rstrip('/')}.xpushare-sync.tar.gz"
        host.put(archive, remote_archive)
        res = host.run(["sh", "-c", 'mkdir -p "$1" && tar -xzf "$2" -C "$1"; rc=$?; rm -f "$2"; exit $rc',
                        "sh", remote_dir, remote_archive], timeout=600)
        if not res.ok:
            raise StepFailed(f"extracting the archive on {host.name} failed (exit {res.exit_code}): "
                             f"{res.stderr.strip()[-300:]}")
        return (f"sftp: {files} files ({archive.stat().st_size / 1e6:.1f} MB archive) to {remote_dir} "
                f"in {time.monotonic() - t0:.1f} s ({reason})")


# ------------------------------------------------------------------------------------------------- git


def _git(source: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(source), *args], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


def git_tag(source: Path) -> str:
    """First 8 characters of ``git rev-parse HEAD`` in ``source`` (the image tag ``make all`` pushes)."""
    res = _git(source, "rev-parse", "HEAD")
    if res.returncode != 0 or len(res.stdout.strip()) < 8:
        raise StepFailed(f"cannot read the image tag from {source} (git rev-parse HEAD: "
                         f"{res.stderr.strip() or 'no commit'}); set deploy_tag")
    return res.stdout.strip()[:8]


def auto_commit(source: Path, label: str) -> str:
    """``git add -A`` and commit ``wip: auto-commit by <label> [HH:MM:SS]`` when the tree is dirty."""
    status = _git(source, "status", "--porcelain")
    if status.returncode != 0:
        raise StepFailed(f"git status in {source}: {status.stderr.strip()}")
    if not status.stdout.strip():
        raise StepSkipped("nothing to commit")
    for args in (("add", "-A"), ("commit", "-q", "-m", f"wip: auto-commit by {label} [{datetime.now():%H:%M:%S}]")):
        res = _git(source, *args)
        if res.returncode != 0:
            raise StepFailed(f"git {args[0]}: {(res.stderr or res.stdout).strip()}")
    return f"committed {len(status.stdout.splitlines())} change(s) as {git_tag(source)}"
