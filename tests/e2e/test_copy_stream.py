"""``invoke put``/``get`` and ``invoke run --stream`` on the SSH lab (real sshd on 127.0.0.0/8) and on ``local``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.lab.sshd import SshLab
from tests.paths import REPO_ROOT

ROOT = REPO_ROOT
pytestmark = pytest.mark.lab


def write_inventory(lab: SshLab, path: Path) -> Path:
    hosts = {h.name: {"address": h.address, "port": h.port, "roles": ["master" if "master" in h.name else "gpu"]}
             for h in lab.hosts.values()}
    some = next(iter(lab.hosts.values()))
    data = {"clusters": {"lab": {"mode": "host", "ssh": {
        "user": some.user, "identity": str(lab.identity), "known_hosts": str(lab.known_hosts_path),
        "host_key_policy": "strict", "connect_timeout": 5, "connect_retries": 1}, "hosts": hosts}}}
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def invoke(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "invoke", "-r", str(ROOT), *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_put_then_get_per_host_names(ssh_lab: SshLab, tmp_path: Path) -> None:
    inv = str(write_inventory(ssh_lab, tmp_path / "inv.yaml"))
    (tmp_path / "payload.txt").write_text("payload\n")
    remote = tmp_path / "remote"
    put = invoke("put", "--cluster", "lab", "--inventory", inv, "--limit", "lab-node[1-2]", "payload.txt",
                 f"{remote}/", cwd=tmp_path)
    assert put.returncode == 0, put.stdout + put.stderr
    # The lab's nodes share this machine's file system: the later copy may say it replaced the earlier one.
    lines = [line.removesuffix("  (replaced the file there)") for line in sorted(put.stdout.splitlines())]
    assert lines == [f"lab-node{i}: ok  {remote}/payload.txt" for i in (1, 2)]
    assert (remote / "payload.txt").read_text() == "payload\n"

    got = invoke("get", "--cluster", "lab", "--inventory", inv, f"{remote}/payload.txt", "out", cwd=tmp_path)
    assert got.returncode == 0, got.stdout + got.stderr
    for name in ("lab-master", "lab-node1", "lab-node2"):
        assert (tmp_path / "out" / name / "payload.txt").read_text() == "payload\n"
    placeholder = invoke("get", "--cluster", "lab", "--inventory", inv, "--role", "gpu", f"{remote}/payload.txt",
                         "flat/{host}.txt", cwd=tmp_path)
    assert placeholder.returncode == 0
    assert sorted(p.name for p in (tmp_path / "flat").iterdir()) == ["lab-node1.txt", "lab-node2.txt"]

    missing = invoke("get", "--cluster", "lab", "--inventory", inv, f"{remote}/nope.txt", "miss", cwd=tmp_path)
    assert missing.returncode == 1
    assert len([line for line in missing.stdout.splitlines() if ": ERROR: " in line]) == 3
    assert not list((tmp_path / "miss").rglob("*.txt")), "a failed get leaves no partial file"


def test_put_to_an_unreachable_host_is_exit_3(fresh_ssh_lab: SshLab, tmp_path: Path) -> None:
    inv = str(write_inventory(fresh_ssh_lab, tmp_path / "inv.yaml"))
    (tmp_path / "f").write_text("x")
    fresh_ssh_lab.stop_host("lab-node2")
    proc = invoke("put", "--cluster", "lab", "--inventory", inv, "--role", "gpu", "f", str(tmp_path / "r/f"),
                  cwd=tmp_path)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "lab-node1: ok" in proc.stdout and "lab-node2: UNREACHABLE" in proc.stdout


def test_run_stream_prints_lines_before_the_hosts_finish(ssh_lab: SshLab, tmp_path: Path) -> None:
    inv = str(write_inventory(ssh_lab, tmp_path / "inv.yaml"))
    flag = tmp_path / "go"
    script = f"echo start; while [ ! -e {flag} ]; do sleep 0.05; done; echo end; echo oops >&2"
    cmd = [sys.executable, "-m", "invoke", "-r", str(ROOT), "run", "--cluster", "lab", "--inventory", inv,
           "--stream", "--", "sh", "-c", script]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout is not None and proc.stderr is not None
    starts = []
    try:
        # Each host's first line arrives while every host still waits for the flag: output is live.
        while len(starts) < 3:
            line = proc.stdout.readline()
            assert line, "output ended before every host printed its first line"
            starts.append(line.rstrip("\n"))
    finally:
        flag.touch()
    rest, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, rest + err
    assert sorted(starts) == ["lab-master: start", "lab-node1: start", "lab-node2: start"]
    assert {"lab-master: end", "lab-node1: end", "lab-node2: end"} <= set(rest.splitlines())
    assert sorted(line for line in err.splitlines() if "oops" in line) == [
        "lab-master: oops", "lab-node1: oops", "lab-node2: oops"]


def test_run_folds_hosts_into_a_pasteable_limit(ssh_lab: SshLab, tmp_path: Path) -> None:
    inv = str(write_inventory(ssh_lab, tmp_path / "inv.yaml"))
    proc = invoke("run", "--cluster", "lab", "--inventory", inv, "--limit", "lab-node*", "--", "echo", "same",
                  cwd=tmp_path)
    assert proc.returncode == 0 and "lab-node[1-2]: same" in proc.stdout
    again = invoke("run", "--cluster", "lab", "--inventory", inv, "--limit", "lab-node[1-2]&lab-node2",
                   "--", "echo", "x", cwd=tmp_path)
    assert again.returncode == 0 and "lab-node2: x" in again.stdout and "lab-node1" not in again.stdout
    bad = invoke("run", "--cluster", "lab", "--inventory", inv, "--limit", "lab-node[2-1]", "--", "true",
                 cwd=tmp_path)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.stderr


def test_put_get_and_stream_on_local(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("a\n")
    assert invoke("put", "--cluster", "local", "a.txt", "copied/", cwd=tmp_path).returncode == 0
    assert (tmp_path / "copied" / "a.txt").read_text() == "a\n"
    got = invoke("get", "--cluster", "local", "copied/a.txt", "back", cwd=tmp_path)
    assert got.returncode == 0 and (tmp_path / "back" / "localhost" / "a.txt").read_text() == "a\n"
    assert invoke("put", "--cluster", "local", "nothing.txt", "x/", cwd=tmp_path).returncode == 2
    streamed = invoke("run", "--cluster", "local", "--stream", "--", "printf", "l1\\nl2", cwd=tmp_path)
    assert streamed.returncode == 0 and streamed.stdout.splitlines()[:2] == ["localhost: l1", "localhost: l2"]
