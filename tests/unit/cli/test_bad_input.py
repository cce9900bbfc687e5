"""The bad-input corpus: every invocation is a user mistake that must end in exactly one ``error:`` line on
stderr and exit status 2 (USAGE), never a traceback, and must leave a stored run exactly as it was.

Each case runs the ``xpushare`` program in the test's process (:mod:`tests.inprocess`: the mistake is found before
anything connects or runs, so a new interpreter per case would only add its start-up); ``ENTRY_POINT_SAMPLE``, one
case of each kind, also runs as ``python -m invoke ...`` from the repository root, the entry point whose parse
errors ``tasks.py`` adopts. A stored run (one real FUNC-002 on this machine) sits under the ``--root`` given to
every task that takes one; its files are compared byte for byte before and after each invocation.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.inprocess import run_xpushare
from tests.paths import REPO_ROOT
from tests.toolrun import run_tool

ROOT = REPO_ROOT
FAST = ["--set", 'workload_args={w2_medium_add: [--n, "64", --iters, "50"]}']
RUN = f"stored-{os.getpid()}"  # local workload names carry the run id: one per test process
STORED_CLUSTER = "gpu1"
ONE_GPU = f"""\
clusters:
  {STORED_CLUSTER}:
    mode: host
    hosts:
      me: {{connection: local, roles: [gpu], gpus: 1}}
"""

HOST = "clusters:\n  c9:\n    mode: {mode}\n    hosts:\n      c9-gpu1: {{address: 127.0.0.1, roles: [{roles}"

# Files the corpus writes once (module fixture) and names with {files}/... in the argv below.
FILES: dict[str, bytes] = {
    "inv-not-yaml.yaml": b"clusters: [unclosed\n",
    "inv-binary.yaml": bytes(range(256)) * 4,
    "inv-list.yaml": b"- just\n- a list\n",
    "inv-truncated.yaml": HOST.format(mode="host", roles="gp").encode(),
    "inv-bad-mode.yaml": HOST.format(mode="warp", roles="gpu]}\n").encode(),
    "inv-bad-role.yaml": HOST.format(mode="host", roles="chef]}\n").encode(),
    "inv-empty.yaml": b"",
    "inv-duplicate-host.yaml": (HOST.format(mode="host", roles="gpu]}\n")
                                + "      c9-gpu1: {address: 127.0.0.2, roles: [gpu]}\n").encode(),
    "inv-params-bad-type.yaml": (HOST.format(mode="host", roles="gpu, master]}\n")
                                 + "    params: {pod_timeout_s: abc}\n").encode(),
    "inv-params-unknown.yaml": (HOST.format(mode="host", roles="gpu, master]}\n")
                                + "    params: {pod_timout_s: 60}\n").encode(),
    "inv-gpus-huge.yaml": HOST.format(mode="host", roles="gpu]}, gpus: 1000000000}\n").encode(),
    "inv-range-huge.yaml": b"clusters:\n  c9:\n    mode: host\n    hosts:\n      x[1-1000000000]: {roles: [gpu]}\n",
    "book-not-yaml.yaml": b"cases: [FUNC-001\n",
    "book-duplicate-key.yaml": b"cases: [FUNC-001]\ncases: [FUNC-002]\n",
    "book-binary.yaml": b"\x00\xff\xfe garbage \x00" * 50,
    "book-list.yaml": b"- FUNC-001\n",
    "book-unknown-key.yaml": b"cases: [FUNC-001]\nfavourite_colour: blue\n",
    "book-unknown-case.yaml": b"cases: [FUNC-777]\n",
    "book-empty.yaml": b"description: nothing selected\n",
}

F = "{files}"
R = "{root}"
FUNC = ["func", "--cluster", "local", "--root", R]
J = ["judge", "--root", R]

CORPUS: dict[str, list[str]] = {
    # --- typed flags: counts and seconds
    "run-forks-text": ["run", "--cluster", "local", "--forks", "x", "--", "true"],
    "run-forks-zero": ["run", "--cluster", "local", "--forks", "0", "--", "true"],
    "run-forks-negative": ["run", "--cluster", "local", "--forks=-3", "--", "true"],
    "run-forks-fraction": ["run", "--cluster", "local", "--forks", "1.5", "--", "true"],
    "run-timeout-negative": ["run", "--cluster", "local", "--timeout", "-1", "--", "true"],
    "run-timeout-zero": ["run", "--cluster", "local", "--timeout", "0", "--", "true"],
    "run-timeout-text": ["run", "--cluster", "local", "--timeout", "soon", "--", "true"],
    "run-timeout-nan": ["run", "--cluster", "local", "--timeout", "nan", "--", "true"],
    "run-timeout-inf": ["run", "--cluster", "local", "--timeout", "inf", "--", "true"],
    "run-no-command": ["run", "--cluster", "local"],
    "ping-forks-text": ["ping", "--cluster", "local", "--forks", "many"],
    "ping-forks-zero": ["ping", "--cluster", "local", "--forks", "0"],
    "envcheck-forks-text": ["envcheck", "--cluster", "local", "--forks", "x", "--root", R],
    "soak-hours-text": ["soak", "--cluster", "local", "--hours", "long", "--root", R],
    "metrics-min-families-text": ["metrics-check", "--url", "http://127.0.0.1:9", "--min-families", "x"],
    "metrics-min-families-negative": ["metrics-check", "--url", "http://127.0.0.1:9", "--min-families=-1"],
    "legacy-count-text": ["legacy.small", "x", "--cluster", "c1", "--root", R],
    "legacy-count-zero": ["legacy.small", "0", "--cluster", "c1", "--root", R],
    # --- the parser: unknown and missing flags, unknown tasks
    "func-unknown-flag": [*FUNC, "--bogus"],
    "run-unknown-flag": ["run", "--cluster", "local", "--bogus", "--", "true"],
    "judge-unknown-flag": [*J, "--run-id", RUN, "--bogus"],
    "cases-unknown-flag": ["cases", "--bogus"],
    "hosts-unknown-short-flag": ["hosts", "-z"],
    "func-missing-cluster": ["func", "--root", R],
    "run-missing-cluster": ["run", "--", "true"],
    "ping-missing-cluster": ["ping"],
    "soak-missing-cluster": ["soak", "--root", R],
    "judge-missing-run-id": [*J],
    "report-missing-run-id": ["report", "--root", R],
    "flag-without-value": ["func", "--root", R, "--cluster"],
    "unknown-task": ["no-such-task"],
    "legacy-missing-cluster": ["legacy.smoke", "--root", R],
    "baseline-compare-missing-run-id": ["baseline-compare", "--root", R],
    # --- URLs
    "metrics-url-not-a-url": ["metrics-check", "--url", "notaurl"],
    "metrics-url-ftp": ["metrics-check", "--url", "ftp://127.0.0.1:9402"],
    "metrics-url-no-host": ["metrics-check", "--url", "http://"],
    "metrics-url-bad-port": ["metrics-check", "--url", "http://127.0.0.1:99999"],
    "metrics-url-text-port": ["metrics-check", "--url", "http://127.0.0.1:port"],
    "metrics-neither": ["metrics-check"],
    "metrics-url-unclosed-ipv6": ["metrics-check", "--url", "http://[::1"],
    "run-timeout-huge": ["run", "--cluster", "local", "--timeout", "1e10", "--", "true"],
    "run-timeout-1e308": ["run", "--cluster", "local", "--timeout", "1e308", "--", "true"],
    "soak-hours-nan": ["soak", "--cluster", "local", "--hours", "nan", "--root", R],
    "soak-hours-negative": ["soak", "--cluster", "local", "--hours=-1", "--root", R],
    "set-negative-timeout": [*FUNC, "--case", "FUNC-001", "--set", "pod_timeout_s=-5"],
    "set-nan-ratio": [*FUNC, "--case", "FUNC-002", "--set", "func002_min_overlap_ratio=.nan"],
    "set-negative-ratio": [*FUNC, "--case", "FUNC-002", "--set", "func002_min_overlap_ratio=-3"],
    "inventory-dev-zero": ["hosts", "--inventory", "/dev/zero"],
    "playbook-dev-zero": [*FUNC, "--playbook", "/dev/zero"],
    "playbook-duplicate-key": [*FUNC, "--playbook", F + "/book-duplicate-key.yaml"],
    "limit-dev-zero": ["run", "--cluster", "local", "--limit", "@/dev/zero", "--", "true"],
    "limit-huge-range": ["run", "--cluster", "local", "--limit", "x[1-1000000000]", "--", "true"],
    "inventory-duplicate-key": ["hosts", "--inventory", F + "/inv-duplicate-host.yaml"],
    "inventory-params-bad-type": ["func", "--cluster", "c9", "--case", "FUNC-001", "--inventory",
                                  F + "/inv-params-bad-type.yaml", "--root", R],
    "inventory-params-unknown": ["func", "--cluster", "c9", "--case", "FUNC-001", "--inventory",
                                 F + "/inv-params-unknown.yaml", "--root", R],
    "inventory-gpus-huge": ["hosts", "--inventory", F + "/inv-gpus-huge.yaml"],
    "inventory-range-huge": ["hosts", "--inventory", F + "/inv-range-huge.yaml"],
    "get-dot-dot": ["get", "--cluster", "local", "/..", F + "/got"],
    "metrics-url-and-load": ["metrics-check", "--url", "http://127.0.0.1:9", "--load"],
    # --- inventories
    "inventory-missing": ["hosts", "--inventory", F + "/nope.yaml"],
    "inventory-not-yaml": ["hosts", "--inventory", F + "/inv-not-yaml.yaml"],
    "inventory-binary": ["hosts", "--inventory", F + "/inv-binary.yaml"],
    "inventory-list": ["hosts", "--inventory", F + "/inv-list.yaml"],
    "inventory-truncated": ["ping", "--cluster", "c9", "--inventory", F + "/inv-truncated.yaml"],
    "inventory-bad-mode": ["ping", "--cluster", "c9", "--inventory", F + "/inv-bad-mode.yaml"],
    "inventory-bad-role": ["ping", "--cluster", "c9", "--inventory", F + "/inv-bad-role.yaml"],
    "inventory-empty-unknown-cluster": ["ping", "--cluster", "c9", "--inventory", F + "/inv-empty.yaml"],
    "inventory-is-a-directory": ["hosts", "--inventory", F],
    "unknown-cluster": ["func", "--cluster", "c99", "--root", R],
    "run-unknown-role": ["run", "--cluster", "local", "--role", "chef", "--", "true"],
    # --- playbooks and selection
    "playbook-unknown": [*FUNC, "--playbook", "no-such-book"],
    "playbook-not-yaml": [*FUNC, "--playbook", F + "/book-not-yaml.yaml"],
    "playbook-binary": [*FUNC, "--playbook", F + "/book-binary.yaml"],
    "playbook-list": [*FUNC, "--playbook", F + "/book-list.yaml"],
    "playbook-unknown-key": [*FUNC, "--playbook", F + "/book-unknown-key.yaml"],
    "playbook-unknown-case": [*FUNC, "--playbook", F + "/book-unknown-case.yaml"],
    "playbook-selects-nothing": [*FUNC, "--playbook", F + "/book-empty.yaml"],
    "case-unknown": [*FUNC, "--case", "FUNC-999"],
    "matrix-suite-unknown": ["matrix", "--cluster", "local", "--suite", "warp", "--root", R],
    "matrix-nothing-selected": ["matrix", "--cluster", "local", "--root", R],
    "cases-suite-unknown": ["cases", "--suite", "warp"],
    # --- --set values
    "set-no-equals": [*FUNC, "--case", "FUNC-001", "--set", "pod_timeout_s"],
    "set-no-name": [*FUNC, "--case", "FUNC-001", "--set", "=5"],
    "set-unknown-name": [*FUNC, "--case", "FUNC-001", "--set", "no_such_threshold=1"],
    "set-int-gets-text": [*FUNC, "--case", "FUNC-001", "--set", "pod_timeout_s=abc"],
    "set-count-gets-fraction": ["perf", "--cluster", "local", "--case", "PERF-001", "--set", "perf001_repeats=1.5",
                                "--root", R],
    "set-float-gets-text": [*FUNC, "--case", "FUNC-002", "--set", "func002_min_overlap_ratio=abc"],
    "set-float-gets-bool": [*FUNC, "--case", "FUNC-002", "--set", "func002_min_overlap_ratio=true"],
    "set-list-gets-number": [*FUNC, "--case", "FUNC-008", "--set", "func008_quotas=5"],
    "set-mapping-gets-text": [*FUNC, "--case", "FUNC-001", "--set", "workload_args=fast"],
    "set-bad-yaml": [*FUNC, "--case", "FUNC-001", "--set", "workload_args={a: [1"],
    "judge-set-float-gets-text": [*J, "--run-id", RUN, "--set", "func002_min_overlap_ratio=abc"],
    "judge-set-float-gets-list": [*J, "--run-id", RUN, "--set", "func002_min_overlap_ratio=[1]"],
    "judge-set-unknown-name": [*J, "--run-id", RUN, "--set", "no_such_threshold=1"],
    # --- run ids
    "run-id-traversal": [*FUNC, "--case", "FUNC-001", "--run-id", "../escape"],
    "run-id-slash": [*FUNC, "--case", "FUNC-001", "--run-id", "a/b"],
    "run-id-dot": [*FUNC, "--case", "FUNC-001", "--run-id", "."],
    "resume-without-run-id": [*FUNC, "--case", "FUNC-001", "--resume"],
    "resume-unknown-run": [*FUNC, "--case", "FUNC-001", "--resume", "--run-id", "never-ran"],
    "judge-unknown-run": [*J, "--run-id", "never-ran"],
    "judge-run-id-traversal": [*J, "--run-id", "../.."],
    "report-unknown-run": ["report", "--root", R, "--run-id", "never-ran"],
    "report-run-id-traversal": ["report", "--root", R, "--run-id", "../x"],
    "root-is-a-file": ["func", "--cluster", "local", "--case", "FUNC-001", "--root", F + "/inv-empty.yaml"],
}


#: One case of each kind of mistake (typed flag, the parser, URL, inventory, playbook, --set, run id), also run
#: through ``python -m invoke``: the same one line and exit status 2 there.
ENTRY_POINT_SAMPLE = ("run-timeout-nan", "func-unknown-flag", "unknown-task", "flag-without-value", "metrics-url-ftp",
                      "inventory-not-yaml", "playbook-unknown-case", "set-int-gets-text", "run-id-traversal",
                      "judge-set-float-gets-text")


def invoke(args: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(root holding one finished run, folder of the corpus' files)."""
    root = tmp_path_factory.mktemp("root")
    # A cluster of this machine that lists one GPU, with the premises this machine cannot meet waived
    # (tests/premise_free.py), so that FUNC-002 acts and is judged: a stored PASS to re-judge.
    inventory = tmp_path_factory.mktemp("inv") / "inventory.yaml"
    inventory.write_text(ONE_GPU, encoding="utf-8")
    proc = run_tool([sys.executable, "-m", "tests.premise_free", "func", "--cluster", STORED_CLUSTER,
                     "--inventory", str(inventory), "--run-id", RUN, "--case", "FUNC-002", *FAST,
                     "--root", str(root)], cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    files = tmp_path_factory.mktemp("files")
    for name, body in FILES.items():
        (files / name).write_bytes(body)
    return root, files


def test_the_corpus_is_large_enough() -> None:
    assert len(CORPUS) >= 50


def assert_one_usage_line(args: list[str], code: int, out: str, err: str) -> None:
    lines = err.strip().splitlines()
    shown = f"{' '.join(args)}\nexit {code}\nstderr:\n{err}\nstdout:\n{out[-2000:]}"
    assert "Traceback" not in err and "No idea what" not in err, shown
    assert len(lines) == 1 and lines[0].startswith("error: "), shown
    assert code == 2, shown


def corpus_args(name: str, stored: tuple[Path, Path]) -> list[str]:
    root, files = stored
    return [a.replace(R, str(root)).replace(F, str(files)) for a in CORPUS[name]]


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_bad_input_is_one_line_and_usage(name: str, stored: tuple[Path, Path]) -> None:
    args = corpus_args(name, stored)
    before = snapshot(stored[0])
    ran = run_xpushare(args, cwd=ROOT)
    assert_one_usage_line(args, ran.code, ran.out, ran.err)
    assert snapshot(stored[0]) == before, "a bad invocation changed the stored run"


@pytest.mark.parametrize("name", ENTRY_POINT_SAMPLE)
def test_bad_input_through_python_m_invoke(name: str, stored: tuple[Path, Path]) -> None:
    args = corpus_args(name, stored)
    before = snapshot(stored[0])
    proc = invoke(args)
    assert_one_usage_line(args, proc.returncode, proc.stdout, proc.stderr)
    assert snapshot(stored[0]) == before, "a bad invocation changed the stored run"


def test_the_entry_point_sample_names_corpus_cases() -> None:
    assert set(ENTRY_POINT_SAMPLE) <= set(CORPUS)


def test_judge_with_a_bad_threshold_keeps_the_stored_thresholds_and_verdict(stored: tuple[Path, Path]) -> None:
    root, _ = stored
    result = root / ".tmplog" / RUN / "xpushare" / STORED_CLUSTER / "functional" / "FUNC-002" / "result.json"
    assert '"status": "PASS"' in result.read_text()
    proc = invoke(["judge", "--root", str(root), "--run-id", RUN, "--set", "func002_min_overlap_ratio=abc"])
    assert proc.returncode == 2 and "expected a number" in proc.stderr
    assert invoke(["judge", "--root", str(root), "--run-id", RUN]).returncode == 0  # still PASS, still 0.5


def test_a_fractional_timeout_is_seconds(tmp_path: Path) -> None:
    proc = invoke(["run", "--cluster", "local", "--timeout", "0.5", "--", "sleep", "2"])
    assert proc.returncode == 1 and "timed out after 0.5 s" in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr


def test_an_unreachable_host_is_exit_3_without_library_tracebacks(tmp_path: Path) -> None:
    """An SSH port that answers garbage: paramiko logs each failed handshake as a traceback; none shows."""
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    stop = threading.Event()

    def answer_garbage() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            conn.sendall(b"not ssh\r\n")
            conn.close()

    thread = threading.Thread(target=answer_garbage, daemon=True)
    thread.start()
    port = server.getsockname()[1]
    inventory = tmp_path / "inv.yaml"
    inventory.write_text("clusters:\n  dead:\n    mode: host\n    hosts:\n"
                         f"      dead-gpu1: {{address: 127.0.0.1, port: {port}, roles: [gpu, master], gpus: 1}}\n")
    try:
        proc = invoke(["run", "--cluster", "dead", "--inventory", str(inventory), "--", "true"])
    finally:
        stop.set()
        thread.join()
        server.close()
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "paramiko" not in proc.stderr, proc.stderr
    assert "UNREACHABLE" in proc.stdout


def test_the_installed_command_reports_parse_errors_the_same_way() -> None:
    code = "from xpushare.cli.program import main; main(['xpushare', 'func', '--cluster', 'local', '--bogus'])"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: func: unknown flag '--bogus' (see: xpushare --help func)"
