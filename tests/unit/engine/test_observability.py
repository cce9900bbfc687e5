"""Machine-readable output (``--output``), the event stream (``events.jsonl``), the command log (``-v``/``-vv``,
``debug.log``) and ``--dry-run``: the units, then the tasks on the built-in ``local`` cluster."""

from __future__ import annotations

import dataclasses
import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.paths import REPO_ROOT
from tests.toolrun import run_tool
from xpushare.cases import REGISTRY
from xpushare.engine import dry_run
from xpushare.engine.plan import Selection, resolved_params, select
from xpushare.evidence import events
from xpushare.inventory import schema
from xpushare.model.errors import UsageError
from xpushare.report import output
from xpushare.transport import activity, command_log
from xpushare.transport.local import LocalHost

ROOT = REPO_ROOT
FAST = ["--set", 'workload_args={w2_medium_add: [--n, "64", --iters, "50"]}']


def invoke(*args: str, cwd: Path = ROOT, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return run_tool([sys.executable, "-m", "invoke", "-r", str(ROOT), *args], cwd=cwd, timeout=timeout)


def invoke_waived(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """:func:`invoke` with the premises this machine cannot meet waived (:mod:`tests.premise_free`): a real run."""
    return run_tool([sys.executable, "-m", "tests.premise_free", *args], cwd=ROOT, timeout=timeout)


# ------------------------------------------------------------------------------------------------ output


def test_output_format_accepts_the_three_and_refuses_others() -> None:
    assert output.output_format(None) == "table"
    assert output.output_format(" JSON ") == "json"
    with pytest.raises(UsageError, match="--output takes one of table, json, yaml, not 'xml'"):
        output.output_format("xml")


def test_render_json_yaml_table() -> None:
    records = [{"host": "a", "roles": ["gpu", "master"], "port": None}, {"host": "b", "roles": [], "port": 22}]
    assert json.loads(output.render(records, "json")) == records
    assert yaml.safe_load(output.render(records, "yaml")) == records
    table = output.render(records, "table")
    assert "gpu,master" in table.splitlines()[2] and table.splitlines()[0].split() == ["host", "roles", "port"]
    assert output.render({"x": (1, 2)}, "yaml") == "x:\n- 1\n- 2"
    assert output.render(records, "table", text="mine") == "mine"
    with pytest.raises(ValueError):
        output.render(records, "xml")


def test_cases_json_is_only_json() -> None:
    proc = invoke("cases", "--output", "json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert {r["case"] for r in data} == set(REGISTRY)
    func9 = next(r for r in data if r["case"] == "FUNC-009")
    assert func9["suite"] == "functional" and "kubernetes" in func9["premises"]
    assert yaml.safe_load(invoke("cases", "--suite", "perf", "--output", "yaml").stdout)[0]["case"] == "PERF-001"


def test_bad_output_value_is_one_line_exit_2() -> None:
    for task in (["cases"], ["hosts"], ["ping", "--cluster", "local"], ["run", "--cluster", "local"],
                 ["func", "--cluster", "local", "--dry-run"]):
        proc = invoke(*task, "--output", "csv", "--", "true")
        assert proc.returncode == 2, (task, proc.stderr)
        assert proc.stderr.strip() == "error: --output takes one of table, json, yaml, not 'csv'", task
        assert proc.stdout == ""


def test_hosts_json(tmp_path: Path) -> None:
    inventory = ROOT / "inventory" / "inventory.yaml"
    data = json.loads(invoke("hosts", "--inventory", str(inventory), "--cluster", "c1", "--output", "json").stdout)
    assert [r["host"] for r in data] == ["c1-master", "c1-gpu1", "c1-gpu2"]
    assert data[0]["roles"] == ["master"] and data[0]["address"] == "10.0.0.10" and data[0]["port"] == 22
    local = json.loads(invoke("hosts", "--cluster", "local", "--output", "json", cwd=tmp_path).stdout)
    assert local[0]["address"] is None and local[0]["mode"] == "host"


def test_run_json_per_host_stdout_stderr_exit_duration() -> None:
    proc = invoke("run", "--cluster", "local", "--output", "json", "--", "sh", "-c", "echo out; echo err >&2; exit 3")
    assert proc.returncode == 1
    [record] = json.loads(proc.stdout)
    assert record["host"] == "localhost" and record["status"] == "FAILED" and record["exit"] == 3
    assert record["stdout"] == "out\n" and record["stderr"] == "err\n" and record["error"] is None
    assert isinstance(record["duration_s"], float) and record["duration_s"] >= 0
    ok = invoke("run", "--cluster", "local", "--output", "yaml", "--", "true")
    assert ok.returncode == 0 and yaml.safe_load(ok.stdout)[0]["exit"] == 0


def test_ping_json() -> None:
    proc = invoke("ping", "--cluster", "local", "--output", "json")
    assert proc.returncode == 0, proc.stderr
    [record] = json.loads(proc.stdout)
    assert record["status"] == "ok" and record["hostname"] and isinstance(record["gpus"], list)


def test_ping_errors_read_as_one_line_in_their_own_column() -> None:
    from xpushare.adhoc import error_text

    assert error_text(OSError(None, "Unable to connect to port 22 on 10.0.0.10")) == (
        "Unable to connect to port 22 on 10.0.0.10")
    assert error_text(None) == ""


# ------------------------------------------------------------------------------------------------ events


def test_events_written_line_by_line_and_read_back(tmp_path: Path) -> None:
    events.emit("run_started", run_id="outside")  # no run in progress: nothing written anywhere
    with events.recording(tmp_path):
        events.emit("run_started", run_id="r1", cases=["FUNC-001"])
        # flushed at once: a reader sees the line while the run goes on
        assert [e["event"] for e in events.read(tmp_path)] == ["run_started"]
        with events.case("FUNC-001"):
            events.emit("case_started", suite="functional")
            events.emit("error", case_id=None, step="run", message="boom")
        events.emit("case_ended", case_id="FUNC-001", status="PASS")
    got = events.read(tmp_path / events.FILE_NAME)
    assert [e["event"] for e in got] == ["run_started", "case_started", "error", "case_ended"]
    assert got[1]["case_id"] == "FUNC-001" and got[2]["case_id"] is None and got[3]["status"] == "PASS"
    assert all(e["ts"].endswith("+00:00") for e in got)
    events.emit("run_ended")  # the stream is closed: nothing more is written
    assert len(events.read(tmp_path)) == 4
    with pytest.raises(ValueError, match="unknown event"):
        events.EventWriter(tmp_path / "x.jsonl").emit("case_done")


def test_events_reader_skips_a_cut_last_line_only(tmp_path: Path) -> None:
    path = tmp_path / events.FILE_NAME
    path.write_text('{"ts": "t", "event": "run_started"}\n{"ts": "t", "ev')
    assert len(events.read(path)) == 1
    path.write_text('{"ts": "t", "ev\n{"ts": "t", "event": "run_started"}\n')
    with pytest.raises(ValueError, match=":1: not a JSON line"):
        events.read(path)
    assert events.read(tmp_path / "none") == []


# ------------------------------------------------------------------------------------------------ command log


def test_redact_hides_secret_values_only() -> None:
    line = command_log.redact(["env", "API_TOKEN=abc", "DB_PASSWORD=x y", "MODE=fast", "kubectl", "--token=t0k",
                               "get", "pods"])
    assert "abc" not in line and "x y" not in line and "t0k" not in line
    assert "API_TOKEN=***" in line and "MODE=fast" in line and "--token=***" in line and "get pods" in line


def test_verbosity_levels_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    host = LocalHost()
    try:
        command_log.set_verbosity(1)  # -v: logical actions, no command line
        host.run(["sh", "-c", "exit 4"])
        with activity.tracked("FUNC-003"):
            activity.note(phase="act")
            activity.pods(["Running"], count=1, until="terminal")
            activity.pods(["Running"], count=1, until="terminal")  # a poll that saw nothing new: no line
        err = capsys.readouterr().err
        assert "exit 4" not in err
        assert err.splitlines() == ["~ FUNC-003: act", "~ FUNC-003: act: waiting for 1 pod(s) to finish: 1 Running"]
        command_log.set_verbosity(2)  # -vv: command lines, cut short, a repeated poll once
        long = ["sh", "-c", "true " + "x" * 400]
        for _ in range(3):
            host.run(long)
        host.run(["true"])
        err = capsys.readouterr().err
        assert err.count("+ localhost$ sh -c") == 1 and "chars)..." in err and max(map(len, err.splitlines())) < 260
        assert "(the command before ran 2 more time(s))\n+ localhost$ true\n" in err and "-> exit" not in err
        command_log.set_verbosity(3)  # -vvv: everything
        host.run(["true"])
        err = capsys.readouterr().err
        assert "+ localhost$ true\n" in err and "+ localhost$ true -> exit 0 in" in err
        command_log.set_verbosity(0)
        host.run(["true"])
        assert capsys.readouterr().err == ""
    finally:
        command_log.set_verbosity(0)


def test_debug_log_has_commands_and_library_records_not_the_terminal(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "debug.log"
    with command_log.debug_log(log):
        LocalHost().run(["echo", "SECRET_KEY=hunter2"], env={"AUTH_TOKEN": "s3cr3t"})
        logging.getLogger("paramiko.transport").warning("handshake noise")
    logging.getLogger("paramiko.transport").warning("after the run")
    text = log.read_text()
    assert "localhost$ env 'AUTH_TOKEN=***' echo 'SECRET_KEY=***'" in text
    assert "-> exit 0 in" in text and "handshake noise" in text and "after the run" not in text
    assert "s3cr3t" not in text and "hunter2" not in text
    captured = capsys.readouterr()
    assert "noise" not in captured.err and "after the run" not in captured.err


# ------------------------------------------------------------------------------------------------ dry run


def test_resolved_params_name_each_layer() -> None:
    local = schema.local_cluster()
    cluster = dataclasses.replace(local, params={"pod_timeout_s": 60, "func002_min_overlap_ratio": 0.7})
    selection = select(case_ids=["FUNC-002"])
    selection.params = {"func002_min_overlap_ratio": 0.6, "func002_memory_limit": "2Gi"}
    selection.cluster_params = {"local": {"func002_memory_limit": "3Gi"}}
    got = resolved_params(REGISTRY["FUNC-002"], cluster, selection, {"pod_timeout_s": 90})
    assert got["pod_timeout_s"] == (90, "--set")
    assert got["func002_min_overlap_ratio"] == (0.7, "inventory")
    assert got["func002_memory_limit"] == ("3Gi", "playbook (cluster local)")
    assert got["workload_args"] == ({}, "default")


def test_plan_run_tells_which_cases_skip() -> None:
    local = schema.local_cluster()
    selection = Selection(cases=[REGISTRY[c] for c in ("FUNC-001", "FUNC-004", "FUNC-009", "FAIL-001")],
                          required=set())
    plan = dry_run.plan_run(selection.cases, local, selection, {}, frozenset())
    by_id = {c["case_id"]: c for c in plan["cases"]}
    # local has no SUT (no sut_lib): FUNC-001 SKIPs naming the premise (issue 35: it used to PASS)
    assert by_id["FUNC-001"]["plan"] == "SKIP" and by_id["FUNC-001"]["skip_reason"].startswith("premise unmet: sut: ")
    assert by_id["FUNC-001"]["premises_unmet"] == ["sut"]
    assert "client library" in by_id["FUNC-004"]["skip_reason"]
    assert "needs Kubernetes" in by_id["FUNC-009"]["skip_reason"]
    # a case that will SKIP takes no time; every case that runs has an expected duration (issue 39: only the
    # cases that will SKIP had one)
    assert by_id["FUNC-001"]["expected_duration_s"] == 0.0 and "will SKIP" in by_id["FUNC-001"][
        "expected_duration_basis"]
    with_sut = dataclasses.replace(local, sut_lib="/opt/xpushare/libxpushare.so")
    runs = dry_run.plan_run([REGISTRY["FUNC-001"]], with_sut, selection, {}, frozenset({"client-library"}))
    assert runs["cases"][0]["plan"] == "RUN" and runs["cases"][0]["skip_reason"] is None
    assert runs["cases"][0]["expected_duration_s"] > 0 and "static estimate" in runs["cases"][0][
        "expected_duration_basis"]
    k8s = dataclasses.replace(local, mode="k8s")
    caps = frozenset({"kubernetes", "annotations", "client-library", "scheduler-process"})
    fail = dry_run.plan_run([REGISTRY["FAIL-001"]], k8s, selection, {}, caps)["cases"][0]
    assert fail["plan"] == "SKIP" and fail["skip_reason"] == dry_run.DISRUPTIVE_SKIP
    allowed = dry_run.plan_run([REGISTRY["FAIL-001"]], k8s, selection, {"allow_disruptive": True}, caps)["cases"][0]
    assert allowed["plan"] == "RUN" and allowed["params"]["allow_disruptive"] == {"value": True, "source": "--set"}


def test_dry_run_contacts_no_host_and_stores_nothing(tmp_path: Path) -> None:
    # c1's addresses (10.0.0.x) are placeholders: a run would fail to connect, a dry run never tries.
    inventory = str(ROOT / "inventory" / "inventory.yaml")
    proc = invoke("fail", "--cluster", "c1", "--inventory", inventory, "--dry-run", "--output", "json",
                  "--root", str(tmp_path), "--set", "fail_pods=2", "-vv", timeout=60)
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert [c["plan"] for c in plan["cases"]] == ["SKIP"] * 7 and plan["mode"] == "k8s"  # FAIL-001..007
    assert plan["cases"][0]["params"]["fail_pods"] == {"value": 2, "source": "--set"}
    assert proc.stderr == "" and not (tmp_path / ".tmplog").exists()  # no command ran, no run dir
    allowed = invoke("fail", "--allow-disruptive", "--cluster", "c1", "--inventory", inventory, "--dry-run",
                     "--root", str(tmp_path))
    assert allowed.returncode == 0 and "7 case(s), 0 will SKIP; no host contacted" in allowed.stdout
    assert "allow_disruptive" in allowed.stdout and "--set" in allowed.stdout
    bad = invoke("func", "--cluster", "local", "--dry-run", "--set", "nope=1", "--root", str(tmp_path))
    assert bad.returncode == 2 and "unknown parameter(s) for --set: nope" in bad.stderr


# ------------------------------------------------------------------------------------------------ a real run


def test_local_run_writes_events_and_debug_log(tmp_path: Path) -> None:
    proc = invoke_waived("func", "--cluster", "local", "--run-id", "obs", "--case", "FUNC-001", "--case", "FUNC-009",
                         "--root", str(tmp_path), "-v", *FAST)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "+ localhost$ " not in proc.stderr and "~ FUNC-001: start 1 pod(s)" in proc.stderr  # -v: actions
    run_dir = tmp_path / ".tmplog" / "obs" / "xpushare"
    got = events.read(run_dir)
    names = [e["event"] for e in got]
    assert names[0] == "run_started" and names[-1] == "run_ended" and got[-1]["exit_status"] == 0
    assert got[0]["cases"] == ["FUNC-001", "FUNC-009"]
    for case in ("FUNC-001", "FUNC-009"):
        stored = json.loads((run_dir / "local" / "functional" / case / "result.json").read_text())
        [ended] = [e for e in got if e["event"] == "case_ended" and e["case_id"] == case]
        assert ended["status"] == stored["status"] and ended["summary"] == stored["summary"]
    assert names.index("case_started") < names.index("pod_phase") < names.index("harvest_started")
    phases = [e for e in got if e["event"] == "pod_phase"]
    assert phases and phases[-1]["case_id"] == "FUNC-001" and phases[-1]["phase"] == "Succeeded"
    log = (run_dir / "debug.log").read_text()
    assert "xpushare.commands" in log and "localhost$ " in log and " -> exit 0 in " in log
