"""Host mode's harvest under transport faults, on this machine (``local``, no SSH): a read that fails with a
transport fault loses only its own piece, is noted in ``harvest-errors.txt``, and makes the harvest raise
``HarvestIncomplete`` (so the case is ERROR, :mod:`xpushare.engine.lifecycle`), as in Kubernetes mode; a file
that is simply absent is noted but is no fault. The healthy control: the same case harvested with nothing
failing stores every piece and notes nothing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from xpushare.backends.host import HostBackend
from xpushare.backends.host_scheduler import HostScheduler
from xpushare.inventory.schema import SchedulerSpec, local_cluster
from xpushare.model.errors import CommandTimeout, ConnectionLost, HarvestIncomplete, RemoteNotFound
from xpushare.model.workload import WorkloadSpec
from xpushare.transport.base import CommandResult
from xpushare.transport.local import LocalHost

POD = "w2"


class FlakyHost(LocalHost):
    """This machine, except that the commands and copies named in ``fail_run`` / ``fail_get`` (substrings of
    the command line / remote path) raise the given transport error."""

    def __init__(self) -> None:
        super().__init__("localhost")
        self.fail_run: dict[str, Exception] = {}
        self.fail_get: dict[str, Exception] = {}

    def run(self, argv: Sequence[str], **kw: Any) -> CommandResult:
        line = " ".join(argv)
        for needle, exc in self.fail_run.items():
            if needle in line:
                raise exc
        return super().run(argv, **kw)

    def get(self, remote: str, local: str | os.PathLike[str]) -> None:
        for needle, exc in self.fail_get.items():
            if needle in remote:
                raise exc
        super().get(remote, local)


@pytest.fixture
def case(tmp_path: Path) -> Iterator[tuple[HostBackend, FlakyHost, Path]]:
    """A host backend on ``local`` (with a scheduler log to harvest) whose one case has run one short pod."""
    log = tmp_path / "scheduler.log"
    log.write_text("scheduler line before the case\n", encoding="utf-8")
    cluster = replace(local_cluster(), scheduler=SchedulerSpec(log_file=str(log)))
    backend = HostBackend(cluster, poll_s=0.05)
    host = FlakyHost()
    backend.hosts = {"localhost": host}
    backend.scheduler = HostScheduler("localhost", host, cluster.scheduler)
    case_dir = tmp_path / "case"
    case_dir.mkdir()
    backend.prepare_run(f"harvest-{os.getpid()}")
    backend.begin_case(case_dir, "c1")
    with log.open("a", encoding="utf-8") as fh:
        fh.write("scheduler line of the case\n")
    backend.start_pods([WorkloadSpec(POD, "w2_medium_add", ("--help",))])
    [record] = backend.wait_terminal([POD], 60)
    assert record.phase in ("Succeeded", "Failed"), record
    try:
        yield backend, host, case_dir
    finally:
        host.fail_run.clear()
        host.fail_get.clear()
        backend.cleanup()


def test_healthy_harvest_stores_every_piece_and_notes_nothing(case: tuple[HostBackend, FlakyHost, Path]) -> None:
    backend, _host, case_dir = case
    files = backend.harvest()
    assert {"pods.json", f"pods/{POD}.log", "remote_localhost_nvidia_smi.txt", "scheduler.log",
            "scheduler_node.txt"} <= set(files), files
    assert any(f.startswith("sampler/localhost_") for f in files), files
    assert (case_dir / "scheduler.log").read_text() == "scheduler line of the case\n"
    assert not (case_dir / "harvest-errors.txt").exists(), (case_dir / "harvest-errors.txt").read_text()


def test_lost_reads_are_noted_and_make_the_harvest_incomplete(case: tuple[HostBackend, FlakyHost, Path]) -> None:
    backend, host, case_dir = case
    host.fail_get[f"{POD}.log"] = ConnectionLost("localhost", "connection lost during get (test)")
    host.fail_run["nvidia-smi: not found"] = CommandTimeout("localhost", "'sh' timed out after 60 s")
    host.fail_run["tail -c"] = ConnectionLost("localhost", "connection lost during 'tail' (test)")
    with pytest.raises(HarvestIncomplete) as info:
        backend.harvest()
    faults = info.value.faults
    assert len(faults) == 3, faults
    assert faults[0].startswith(f"pod {POD} log: localhost: connection lost"), faults
    assert faults[1].startswith("node localhost: nvidia-smi: localhost: 'sh' timed out"), faults
    assert faults[2].startswith("scheduler log: localhost: connection lost"), faults
    # the harvest went on past each lost read: the rest is stored and listed
    files = set(info.value.files)
    assert {"pods.json"} <= files and any(f.startswith("sampler/localhost_") for f in files), files
    assert not {f"pods/{POD}.log", "remote_localhost_nvidia_smi.txt", "scheduler.log"} & files, files
    noted = (case_dir / "harvest-errors.txt").read_text().splitlines()
    assert noted == faults


def test_a_lost_poll_loses_only_pods_json(case: tuple[HostBackend, FlakyHost, Path]) -> None:
    """The pods' last poll fails (the earlier pods.json stays as written); the logs and the rest are read."""
    backend, _host, _case_dir = case
    poll = backend._poll
    calls = [0]

    def lost_poll() -> Any:
        calls[0] += 1
        raise ConnectionLost("localhost", "connection lost during 'sh' (test)")

    backend._poll = lost_poll  # type: ignore[method-assign]
    try:
        with pytest.raises(HarvestIncomplete) as info:
            backend.harvest()
    finally:
        backend._poll = poll  # type: ignore[method-assign]
    assert calls == [1]
    assert info.value.faults == ["pods: localhost: connection lost during 'sh' (test)"]
    assert f"pods/{POD}.log" in info.value.files and "scheduler.log" in info.value.files


def test_an_absent_file_is_noted_but_is_no_fault(case: tuple[HostBackend, FlakyHost, Path]) -> None:
    """The pod's output file is gone from the host (not a transport fault): noted, the harvest is complete."""
    backend, host, case_dir = case
    host.fail_get[f"{POD}.log"] = RemoteNotFound("localhost", f"get {POD}.log: No such file or directory")
    files = backend.harvest()
    assert f"pods/{POD}.log" not in files and "scheduler.log" in files
    assert (case_dir / "harvest-errors.txt").read_text() == (
        f"pod {POD} log: localhost: get {POD}.log: No such file or directory\n")


def test_local_get_and_stop_of_what_is_not_there_raise_remote_not_found(tmp_path: Path) -> None:
    host = LocalHost("localhost")
    with pytest.raises(RemoteNotFound):
        host.get(str(tmp_path / "missing"), tmp_path / "copy")
    with pytest.raises(RemoteNotFound):
        host.stop(f"never-spawned-{os.getpid()}")
