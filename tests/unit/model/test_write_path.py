"""The one local write path (``xpushare/model/atomic_file.py``, docs/reliability.md "One write path").

Links at the target and in a folder of a tree the tool owns, existing files and directories, a full disk (a
small tmpfs when this process may mount one, else ``ENOSPC`` simulated in-process: each test says which it used),
a read-only root (a read-only tmpfs as root, else a ``0500`` folder; root ignores modes), and the modes of the
reports under umask 022 and 077. ``put``/``get`` run on the built-in ``local`` cluster (this machine, no SSH);
``SshHost.get`` (SFTP and its ``cat`` fallback) on a stand-in connection that serves the remote file's bytes.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import shutil
import stat
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.unit.report.test_artifacts import put as put_record
from xpushare import adhoc
from xpushare.inventory.schema import local_cluster
from xpushare.model import atomic_file
from xpushare.model.atomic_file import UnsafePath, atomic_write_text, claim_tree, open_append
from xpushare.report import build, run_store
from xpushare.transport import command_log, exec_copy
from xpushare.transport.ssh import SshHost

# --------------------------------------------------------------------------------------------- helpers


def _mount_tmpfs(path: Path, options: str) -> bool:
    """Mount a tmpfs at ``path`` with ``options``; False where this process may not (not root, no mount)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    path.mkdir(parents=True, exist_ok=True)
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True)
    return res.returncode == 0


def _umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


@contextlib.contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _leftovers(d: Path) -> list[str]:
    return [p.name for p in d.iterdir() if p.name.endswith(".tmp") or ".part" in p.name]


# --------------------------------------------------------------------------------------------- links


def test_a_link_at_the_target_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n", encoding="utf-8")
    run = tmp_path / "run"
    run.mkdir()
    (run / "report.html").symlink_to(victim)
    with pytest.raises(UnsafePath) as err:
        atomic_write_text(run / "report.html", "<html>")
    assert err.value.errno == errno.ELOOP and "symbolic link" in str(err.value.strerror)
    with pytest.raises(UnsafePath):
        open_append(run / "report.html")
    assert victim.read_text(encoding="utf-8") == "precious\n"
    assert (run / "report.html").is_symlink() and _leftovers(run) == []


def test_a_linked_folder_below_a_claimed_tree_is_refused_the_tree_itself_may_be_a_link(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    disk = tmp_path / "big-disk"
    disk.mkdir()
    (tmp_path / "tmplog").symlink_to(disk)  # the user's --root on another disk: followed
    run = claim_tree(tmp_path / "tmplog" / f"run-{uuid.uuid4().hex}")
    atomic_write_text(run / "run.json", "{}\n")
    assert (disk / run.name / "run.json").read_text() == "{}\n"
    (run / "c1").symlink_to(elsewhere)  # planted inside the run: refused, for every kind of write
    for write in (lambda: atomic_write_text(run / "c1" / "FUNC-001" / "result.json", "{}"),
                  lambda: open_append(run / "c1" / "harvest-errors.txt"),
                  lambda: run_store.write_result(run / "c1" / "functional" / "FUNC-001", {"status": "PASS"})):
        with pytest.raises(UnsafePath) as err:
            write()
        assert err.value.errno == errno.ELOOP and err.value.filename == os.path.abspath(run / "c1")
    assert list(elsewhere.iterdir()) == []


def test_a_debug_log_link_is_not_appended_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("", encoding="utf-8")
    (tmp_path / "debug.log").symlink_to(victim)
    with pytest.raises(UnsafePath), command_log.debug_log(tmp_path / "debug.log"):
        pass
    assert victim.read_text(encoding="utf-8") == ""


# --------------------------------------------------------------------------------------------- existing files


def test_an_existing_file_is_replaced_or_refused_as_asked_a_directory_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "result.json"
    target.write_text("old\n", encoding="utf-8")
    with atomic_file.writing(target) as w:
        w.fh.write("new\n")  # type: ignore[arg-type]
    assert w.replaced and target.read_text() == "new\n"
    with pytest.raises(UnsafePath) as err:
        atomic_write_text(target, "newer\n", replace=False)
    assert err.value.errno == errno.EEXIST and target.read_text() == "new\n"
    (tmp_path / "a-dir").mkdir()
    with pytest.raises(UnsafePath) as err:
        atomic_write_text(tmp_path / "a-dir", "x")
    assert err.value.errno == errno.EISDIR and (tmp_path / "a-dir").is_dir()
    assert _leftovers(tmp_path) == []


# --------------------------------------------------------------------------------------------- full disk, read-only


@pytest.fixture
def full_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, str]]:
    """A folder on a 64 KiB tmpfs (``how`` "tmpfs"); where no tmpfs can be mounted, a plain folder where every
    fsync fails with ENOSPC (``how`` "simulated"), as a full disk reports a write it could not place."""
    mnt = tmp_path / "full"
    if _mount_tmpfs(mnt, "size=64k,mode=0777"):
        try:
            yield mnt, "tmpfs"
        finally:
            _umount(mnt)
        return
    mnt.mkdir()

    def no_space(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", no_space)
    yield mnt, "simulated"


def test_a_full_disk_keeps_the_old_file_whole_and_leaves_no_temporary_file(full_disk: tuple[Path, str]) -> None:
    d, how = full_disk
    target = d / "scheduler.log"
    target.write_text("the old evidence\n", encoding="utf-8")
    with pytest.raises(OSError) as err:
        atomic_write_text(target, "x" * (1 << 20))
    assert err.value.errno == errno.ENOSPC, how
    assert target.read_text(encoding="utf-8") == "the old evidence\n", how
    assert _leftovers(d) == [], how


def test_get_onto_a_full_disk_keeps_the_file_there(tmp_path: Path, full_disk: tuple[Path, str]) -> None:
    """Before the one write path, the local copy was ``shutil.copyfile`` onto the file: a full disk truncated it."""
    d, how = full_disk
    remote = tmp_path / "remote.bin"
    remote.write_bytes(b"y" * (1 << 20))
    kept = d / "localhost" / "remote.bin"
    kept.parent.mkdir()
    kept.write_bytes(b"the copy of yesterday\n")
    out = io.StringIO()
    status = adhoc.get_files(list(local_cluster().hosts), str(remote), str(d), forks=1, out=out)
    assert status == 1, (how, out.getvalue())
    assert "No space left" in out.getvalue(), how
    assert kept.read_bytes() == b"the copy of yesterday\n", how
    assert _leftovers(kept.parent) == [], how


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A folder nothing may be written in: a read-only tmpfs as root (root ignores modes), a 0500 folder
    otherwise; skipped where neither holds."""
    d = tmp_path / "ro"
    if os.geteuid() == 0:
        if not _mount_tmpfs(d, "ro,size=64k"):
            pytest.skip("root ignores modes and no read-only tmpfs could be mounted")
        try:
            yield d, "read-only tmpfs"
        finally:
            _umount(d)
        return
    d.mkdir()
    d.chmod(0o500)
    try:
        yield d, "0500 folder"
    finally:
        d.chmod(0o700)


def test_a_read_only_root_is_one_error_and_nothing_written(read_only_dir: tuple[Path, str]) -> None:
    d, how = read_only_dir
    with pytest.raises(OSError) as err:
        atomic_write_text(d / "run" / "run.json", "{}")
    assert err.value.errno in (errno.EROFS, errno.EACCES), how
    out = io.StringIO()
    status = adhoc.get_files(list(local_cluster().hosts), __file__, str(d), forks=1, out=out)
    assert status == 1 and "localhost: ERROR: " in out.getvalue() and "Traceback" not in out.getvalue(), how
    assert list(d.iterdir()) == [], how


# --------------------------------------------------------------------------------------------- modes


@pytest.mark.parametrize(("mask", "file_mode", "dir_mode"), [(0o022, 0o644, 0o755), (0o077, 0o600, 0o700)])
def test_reports_and_records_follow_the_umask(tmp_path: Path, mask: int, file_mode: int, dir_mode: int) -> None:
    """Issue: report.html, run-report.md, junit.xml and result.json were 0600 under umask 022 (mkstemp's mode)
    while debug.log was 0644."""
    with umask(mask):
        run = run_store.run_dir(tmp_path, "r1")
        case = put_record(run, cluster="c1", suite="functional", case_id="FUNC-001", status="PASS")
        paths = build.build(run)
        with command_log.debug_log(run / "debug.log"):
            pass
    files = [case / "result.json", paths.html, paths.markdown, paths.junit, paths.case_summary, run / "debug.log"]
    assert {p.name: oct(_mode(p)) for p in files} == {p.name: oct(file_mode) for p in files}
    assert oct(_mode(case)) == oct(dir_mode)


# --------------------------------------------------------------------------------------------- put and get


def _local_hosts() -> list[Any]:
    return list(local_cluster().hosts)


def test_get_refuses_a_link_at_host_file_and_a_linked_host_folder(tmp_path: Path) -> None:
    """Issue 36: ``invoke get`` into a folder where ``<host>/<file>`` is a symlink wrote through it."""
    remote = tmp_path / "remote.log"
    remote.write_text("from the host\n", encoding="utf-8")
    victim = tmp_path / "victim"
    victim.write_text("precious\n", encoding="utf-8")
    dest = tmp_path / "dest"
    (dest / "localhost").mkdir(parents=True)
    (dest / "localhost" / "remote.log").symlink_to(victim)
    out = io.StringIO()
    assert adhoc.get_files(_local_hosts(), str(remote), str(dest), forks=1, out=out) == 1
    assert "localhost: ERROR: " in out.getvalue() and "symbolic link" in out.getvalue()
    assert victim.read_text(encoding="utf-8") == "precious\n"

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    dest2 = tmp_path / "dest2"
    dest2.mkdir()
    (dest2 / "localhost").symlink_to(elsewhere)
    out = io.StringIO()
    assert adhoc.get_files(_local_hosts(), str(remote), str(dest2), forks=1, out=out) == 1
    assert "symbolic link" in out.getvalue() and list(elsewhere.iterdir()) == []


def test_get_says_which_files_it_replaced_and_refuses_a_directory(tmp_path: Path) -> None:
    remote = tmp_path / "remote.log"
    remote.write_text("v2\n", encoding="utf-8")
    dest = tmp_path / "dest"
    out = io.StringIO()
    assert adhoc.get_files(_local_hosts(), str(remote), str(dest), forks=1, out=out) == 0
    assert "replaced" not in out.getvalue()
    (dest / "localhost" / "remote.log").write_text("v1\n", encoding="utf-8")
    out = io.StringIO()
    assert adhoc.get_files(_local_hosts(), str(remote), str(dest), forks=1, out=out) == 0
    assert out.getvalue().strip() == f"localhost: ok  {dest / 'localhost' / 'remote.log'}  (replaced the file there)"
    assert (dest / "localhost" / "remote.log").read_text() == "v2\n"
    (dest / "localhost" / "remote.log").unlink()
    (dest / "localhost" / "remote.log").mkdir()
    out = io.StringIO()
    assert adhoc.get_files(_local_hosts(), str(remote), str(dest), forks=1, out=out) == 1
    assert "directory" in out.getvalue() and (dest / "localhost" / "remote.log").is_dir()


def test_put_into_an_existing_directory_and_over_a_file_says_so(tmp_path: Path) -> None:
    src = tmp_path / "w.py"
    src.write_text("print(1)\n", encoding="utf-8")
    into = tmp_path / "bin"
    into.mkdir()
    out = io.StringIO()
    assert adhoc.put_files(_local_hosts(), str(src), str(into), forks=1, out=out) == 0  # scp: into the folder
    assert (into / "w.py").read_text() == "print(1)\n"
    assert out.getvalue().strip() == f"localhost: ok  {into / 'w.py'}"
    out = io.StringIO()
    assert adhoc.put_files(_local_hosts(), str(src), str(into / "w.py"), forks=1, out=out) == 0
    assert out.getvalue().strip() == f"localhost: ok  {into / 'w.py'}  (replaced the file there)"


class _FakeSftpConnection:
    """Stands in for fabric's Connection: ``get`` writes the remote bytes into the handle it is given."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def get(self, remote: str, local: Any) -> None:
        if isinstance(local, (str, os.PathLike)):  # the old way: fabric opens the path itself, following links
            Path(local).write_bytes(self.data)
        else:
            local.write(self.data)


@pytest.mark.parametrize("sftp", [True, False], ids=["sftp", "cat"])
def test_ssh_get_never_writes_through_a_link(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sftp: bool) -> None:
    host = SshHost.__new__(SshHost)  # no connection: the stand-in serves the bytes
    host.name, host.sftp = "gpu1", sftp
    monkeypatch.setattr(host, "connection", lambda: _FakeSftpConnection(b"from gpu1\n"), raising=False)
    monkeypatch.setattr(exec_copy, "exec_get_into", lambda transport, remote, fh, **kw: fh.write(b"from gpu1\n"))
    monkeypatch.setattr(exec_copy, "exec_get", lambda transport, remote, local, **kw: Path(local).write_bytes(
        b"from gpu1\n"))
    monkeypatch.setattr(_FakeSftpConnection, "client", type("C", (), {"get_transport": lambda self: None})(),
                        raising=False)
    victim = tmp_path / "victim"
    victim.write_text("precious\n", encoding="utf-8")
    dest = tmp_path / "gpu1"
    dest.mkdir()
    (dest / "x.log").symlink_to(victim)
    with pytest.raises(Exception, match="symbolic link"):
        host.get("/var/log/x.log", dest / "x.log")
    assert victim.read_text(encoding="utf-8") == "precious\n"
    fresh = dest / "y.log"
    copied = host.get("/var/log/y.log", fresh)
    assert fresh.read_bytes() == b"from gpu1\n" and not copied.replaced
    assert host.get("/var/log/y.log", fresh).replaced
    assert _leftovers(dest) == []


def test_tempfile_mkstemp_is_why_reports_were_0600() -> None:
    """The control: what the writers used before makes 0600 whatever the umask (so the mode test can fail)."""
    with umask(0o022):
        fd, name = tempfile.mkstemp()
    os.close(fd)
    try:
        assert _mode(Path(name)) == 0o600
    finally:
        os.unlink(name)
