"""A fuzzer over the whole command line: hypothesis builds arguments for every task of the Invoke collection
(:data:`xpushare.cli.collection.namespace`, each task's own flags and positional arguments, walked from the
collection, so a new task or flag is fuzzed without a change here) and runs them in-process through the installed
command's program (:data:`xpushare.cli.program.program`), and asserts, for every generated command line:

- the exit status is one the README's "Exit statuses" documents (0, 1, 2, 3; 130/143/129 only for a signal,
  which the fuzzer never sends);
- no traceback: no exception escapes the program, and stderr holds no ``Traceback``;
- a usage error (2) says so in an ``error:`` line on stderr;
- nothing is written outside ``--root`` (the working directory when it is not given) and ``get``'s destination:
  every other file of the sandbox (the inventories, playbooks and stored runs it names, ``$HOME``) is as it was.

The values are the hostile ones a user types: wrong types, empty strings, unicode, huge numbers, NaN, paths that
are files, folders, links (also dangling), devices and missing, damaged stored runs (truncated, a list, a foreign
JSON document, binary, a link to ``/dev/zero``), ``--set`` names of every parameter with values of every type.

Never a real workload: a task that can print its plan instead gets ``--dry-run``; any other task that acts on a
cluster gets a ``--cluster`` no inventory defines (the fuzzer checks its own command line before running it), so
it stops at the edge; ``lab.*`` (it starts and stops the local test lab) is left out, named in :data:`LEFT_OUT`.
URLs name 127.0.0.1 only.

Time budget: 90 s on 2 cores for the module. In-process, an example costs about 0.09 s of CPU (the module's 500
took 46 s of CPU, user and system); a subprocess per example costs about 1.9 s of CPU (the interpreter and the
imports), 500 of them about 16 minutes, so the fuzzer runs in-process. ``XPUSHARE_FUZZ_EXAMPLES`` sets the number of
examples (default 500, derandomized: CI runs the same ones every time); raise it for a longer search.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from invoke import Argument

from xpushare.cases import REGISTRY, SUITE_ALIASES, SUITES
from xpushare.cli.collection import namespace
from xpushare.cli.program import program
from xpushare.data import playbooks_dir
from xpushare.engine.plan import parameter_defaults
from xpushare.report import run_store

EXAMPLES = int(os.environ.get("XPUSHARE_FUZZ_EXAMPLES", "500"))
#: The exit statuses a task may end with when no signal arrives (README "Exit statuses").
DOCUMENTED = {0, 1, 2, 3}

#: Tasks the fuzzer never runs, and why.
LEFT_OUT = {
    "lab.up": "starts the local test lab (sshd daemons, an API server): no input of it reaches a cluster",
    "lab.down": "stops the local test lab that other tests may be using",
}
TASKS = sorted(name for name in namespace.task_names if name not in LEFT_OUT)

#: Cluster names that no inventory of the sandbox defines: what a task that would act on a cluster is given.
NO_CLUSTER = "nosuch"

STORED = {
    "good": None,
    "truncated": b'{"run_id": "truncated", "required": [',
    "a-list": b"[1, 2]",
    "foreign": b'{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}}',
    "required-a-number": b'{"required": 5, "started": 7}',
    "binary": bytes(range(256)),
    "empty": b"",
    "deep": b"[" * 5000,
    "counts-of-text": b'{"run_id": "counts-of-text", "counts": "many", "exit_status": "zero", "clusters": {"a": 1}}',
}


def _write_stored_runs(root: Path, *, every: bool = True) -> None:
    """The runs of :data:`STORED` under ``root``, and with ``every`` a run.json linked to ``/dev/zero`` (each read
    of it reads 64 MiB before it is refused: one root has it) and a ``.tmplog`` entry that is a file."""
    for run_id, meta in STORED.items():
        if not every and run_id not in ("good", "truncated", "foreign"):
            continue
        run_dir = run_store.run_dir(root, run_id)
        case = run_dir / "local" / "functional" / "FUNC-001"
        case.mkdir(parents=True)
        if meta is None:
            run_store.write_run_meta(run_dir, {
                "run_id": run_id, "clusters": ["local"], "required": ["FUNC-001"],
                "started": "2026-01-01T00:00:00+00:00",
                "selected": [{"cluster": "local", "suite": "functional", "case_id": "FUNC-001", "title": "t"}]})
        else:
            (run_dir / "run.json").write_bytes(meta)
        (case / "result.json").write_text(json.dumps({
            "case_id": "FUNC-001", "cluster": "local", "suite": "functional", "status": "PASS", "mode": "host",
            "summary": "ok", "params": {}, "thresholds": {}, "metrics": {}, "evidence": []}))
    if not every:
        return
    link = run_store.run_dir(root, "zero-link")
    link.mkdir(parents=True)
    (link / "run.json").symlink_to("/dev/zero")
    (root / ".tmplog" / "not-a-dir").parent.mkdir(exist_ok=True)
    (root / ".tmplog" / "not-a-dir").write_text("x")


_LOCAL_HOST = "    hosts:\n      h1: {connection: local, roles: [master, gpu]}\n"
INVENTORIES = {
    "inv-good.yaml": "clusters:\n  c1:\n    mode: host\n" + _LOCAL_HOST,
    "inv-bad-params.yaml": "clusters:\n  c1:\n    mode: host\n" + _LOCAL_HOST
                           + "    params: {pod_timeout_s: abc, lease_renew_s: [1], metrics_port: 99999999}\n",
    "inv-k8s.yaml": "clusters:\n  k1:\n    mode: k8s\n    hosts:\n"
                    "      m: {address: 127.0.0.1, port: 9, roles: [master]}\n"
                    "      g: {address: 127.0.0.1, port: 9, roles: [gpu]}\n",
    "inv-garbage.yaml": "clusters: [\n",
    "inv-list.yaml": "- a\n- b\n",
    "pb-bad.yaml": "cases: [FUNC-001]\nparams: {pod_timeout_s: abc, func003_pods: 0}\n",
    "pb-good.yaml": "cases: [FUNC-001, FUNC-009]\n",
}


#: (inventory, cluster) pairs that name a cluster the inventory defines (None: the built-in inventory).
PAIRS = [(None, "local"), (None, "local"), ("inv-good.yaml", "c1"), ("inv-k8s.yaml", "k1"), ("inv-good.yaml", "local"),
         ("inv-good.yaml", "c1,local")]


class Sandbox:
    """Where every generated command runs: ``cwd`` (the working directory, the default ``--root``), ``home``
    (``$HOME``), and beside them the files the arguments name (inventories, playbooks, a file, a folder, links,
    a stored-run root of healthy and damaged runs)."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.cwd = base / "cwd"
        self.home = base / "home"
        self.files = base / "files"
        self.root = base / "files" / "root"
        for path in (self.cwd, self.home, self.files, self.root):
            path.mkdir(parents=True)
        _write_stored_runs(self.root)
        _write_stored_runs(self.cwd, every=False)
        for name, text in INVENTORIES.items():
            (self.files / name).write_text(text)
        (self.files / "afile.txt").write_text("just text\n")
        (self.files / "binary.bin").write_bytes(bytes(range(256)))
        (self.files / "adir").mkdir()
        (self.files / "alink").symlink_to(self.files / "afile.txt")
        (self.files / "dirlink").symlink_to(self.files / "adir")
        (self.files / "dangling").symlink_to(self.files / "gone")
        (self.files / "hosts.txt").write_text("h1\nnosuch-host\n")

    def paths(self) -> list[str]:
        f = self.files
        named = ["afile.txt", "binary.bin", "adir", "alink", "dirlink", "dangling", "missing", "root", *INVENTORIES]
        return [*(str(f / n) for n in named), "/dev/null", "/dev/zero", "", ".", "..", "adir/", "~",
                str(f / ("x" * 300)), str(f / "adir" / "new"), "ünï cødé", "a\nb"]

    def snapshot(self) -> dict[str, tuple[Any, ...]]:
        out: dict[str, tuple[Any, ...]] = {}
        for top in (self.base,):
            for dirpath, dirnames, filenames in os.walk(top):
                for name in dirnames + filenames:
                    path = os.path.join(dirpath, name)
                    st_ = os.lstat(path)
                    out[path] = (st_.st_mode, st_.st_size, st_.st_mtime_ns)
        return out


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Sandbox:
    return Sandbox(tmp_path_factory.mktemp("fuzz"))


@contextlib.contextmanager
def inside(box: Sandbox, argv: list[str]) -> Iterator[None]:
    """The process as a user's shell would start it in the sandbox: its working directory, ``$HOME``, no
    ``XPUSHARE_*`` defaults, ``sys.argv`` the command line (the words after ``--`` are read from it)."""
    saved_cwd, saved_argv = os.getcwd(), sys.argv
    saved_env = {k: os.environ.get(k) for k in ("HOME", "XPUSHARE_CLUSTER", "XPUSHARE_INVENTORY")}
    os.chdir(box.cwd)
    os.environ["HOME"] = str(box.home)
    os.environ.pop("XPUSHARE_CLUSTER", None)
    os.environ.pop("XPUSHARE_INVENTORY", None)
    sys.argv = argv
    try:
        yield
    finally:
        os.chdir(saved_cwd)
        sys.argv = saved_argv
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def run_in_process(box: Sandbox, words: list[str]) -> tuple[int, str, str]:
    """``xpushare WORDS`` in this process: (exit status, stdout, stderr). An exception other than the program's
    own exit propagates: that is the traceback a user would see."""
    argv = ["xpushare", *words]
    out, err = io.StringIO(), io.StringIO()
    with inside(box, argv), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            program.run(argv)
            code: Any = 0
        except SystemExit as exc:
            code = exc.code
    if code is None:
        code = 0
    assert isinstance(code, int), f"exit with {code!r} (not a status) for {words}: {err.getvalue()[-500:]}"
    return code, out.getvalue(), err.getvalue()


# ------------------------------------------------------------------------------------------------ values

_NUMBERS = ["0", "-1", "1", "2", "0.5", "nan", "inf", "-inf", "1e308", "1e309", "9" * 400, "0x10", "1_000",
            "٣", "1,5", " 3", "abc", "", "-0", "1e-400", "true", "[1]", "{}"]
_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=20)
_JUNK = st.sampled_from(["", " ", "-", "--", "-x", "--help", "=", "ü", "日本", "a\nb", "\t", "💥", "..", "/",
                         "x" * 300, "$HOME", "${NOPE}", "'", '"', "\\", "%s", "{}", "[", "*"]) | _TEXT
_GOOD_YAML = ["1", "2", "0.5", "60", "true", "null", "[25, 50]", "'2Gi'", "2Gi", "{}", "scrape"]
_YAML_VALUES = ["0", "-1", "1.5", "1e309", ".nan", ".inf", "-.inf", "9" * 40, "~", "abc", "", "[]", "[1, 2]", "[a]",
                "{a: 1}", "10Gi", "0Gi", "-1Gi", "4G", "[", "!!python/object:os.system", "&a [*a]", "[0]", "[101]",
                "150", "0.0", "1e9", "100000000000", "[{core: 140, memory: x}]"]
_PARAMS = sorted(parameter_defaults(list(REGISTRY.values())))


def _set_items(*, hostile: bool) -> st.SearchStrategy[str]:
    if not hostile:
        return st.builds(lambda n, v: f"{n}={v}", st.sampled_from(_PARAMS), st.sampled_from(_GOOD_YAML))
    names = [*_PARAMS, "envcheck_cublas_n", "lease_renew_s", "nope", "", " ", "a=b"]
    return st.builds(lambda n, v: f"{n}={v}", st.sampled_from(names), st.sampled_from(_YAML_VALUES) | _TEXT)


_CASE_IDS = sorted(REGISTRY)
_ODD_CASES = ["FUNC-00*", "func-001", "FUNC-999", "*", "[", ",", "FUNC-001,", "STAB-*"]


def value_for(box: Sandbox, task: str, arg: Argument, *, hostile: bool) -> st.SearchStrategy[str]:
    """A strategy of the text a user may give ``arg`` of ``task``: with ``hostile`` false a value the task takes
    (most examples then reach the task's deeper readers), else a hostile one: a path that is a folder, a link or a
    device, a damaged stored run, a number out of range, junk of any kind."""
    name = arg.names[0]
    paths = st.sampled_from(box.paths())
    good_runs = st.sampled_from(["good", "last"])
    odd_runs = st.sampled_from([*STORED, "zero-link", "not-a-dir", "LAST", "nope", "../x", "a/b", "."])
    inventories = [str(box.files / n) for n in ("inv-good.yaml", "inv-k8s.yaml")]
    playbooks = [p.stem for p in playbooks_dir().glob("*.yaml")] + [str(box.files / "pb-good.yaml")]
    good: dict[str, st.SearchStrategy[str]] = {
        "cluster": st.sampled_from(["local", NO_CLUSTER]),
        "inventory": st.sampled_from(inventories),
        "root": st.sampled_from([str(box.root), "."]),
        "run-id": good_runs, "run-a": good_runs, "run-b": good_runs, "baseline": good_runs,
        "output": st.sampled_from(["table", "json", "yaml"]),
        "set": _set_items(hostile=False),
        "case": st.sampled_from([c for c in _CASE_IDS if c.startswith("STAB")] if task == "soak" else _CASE_IDS),
        "suite": st.sampled_from([*SUITES, *SUITE_ALIASES]),
        "playbook": st.sampled_from(playbooks),
        "url": st.sampled_from(["http://127.0.0.1:9/metrics"]),
        "role": st.sampled_from(["all", "gpu", "master"]),
        "mode": st.sampled_from(["auto", "ssh", "k8s", "host"]),
        "limit": st.sampled_from(["h1", "h[1-3]", "@" + str(box.files / "hosts.txt"), "localhost"]),
        "src": paths, "dest": paths, "source": paths, "sut-src": paths,
    }
    odd: dict[str, st.SearchStrategy[str]] = {
        "cluster": st.sampled_from(["c1", "k1", "local,c1", "c1,c1", "LOCAL", ",", "local,"]),
        "inventory": st.sampled_from([str(box.files / n) for n in INVENTORIES]) | paths,
        "root": paths, "run-id": odd_runs, "run-a": odd_runs, "run-b": odd_runs, "baseline": odd_runs | paths,
        "output": st.sampled_from(["JSON", "xml", ""]),
        "set": _set_items(hostile=True),
        "case": st.sampled_from(_ODD_CASES),
        "suite": st.sampled_from(["FUNC", "nope"]),
        "playbook": st.sampled_from([str(box.files / "pb-bad.yaml")]) | paths,
        "url": st.sampled_from(["http://127.0.0.1:9", "ftp://127.0.0.1/", "http://[::1", "127.0.0.1:9", "",
                                "http://", "http://127.0.0.1:99999/", "file:///etc/passwd"]),
        "role": st.sampled_from(["GPU", "", "nodes"]),
        "mode": st.sampled_from(["kubernetes", ""]),
        "limit": st.sampled_from(["x[1-1000000000]", "@" + str(box.files / "adir"), "@/dev/zero", "@missing", "!h1",
                                  "~h.*", "", ","]),
    }
    numeric = {"timeout", "forks", "maxfail", "repeat", "hours", "minutes", "min-families", "count", "gpus-per-node"}
    if not hostile:
        if name in good:
            return good[name]
        return st.sampled_from(["1", "2", "3", "10"]) if name in numeric else st.just("x")
    return st.one_of(odd.get(name, _JUNK), paths if name in good and name in ("src", "dest") else _JUNK,
                     st.sampled_from(_NUMBERS))


#: Tasks whose ``--cluster`` only filters what they read here (the inventory, a stored run): they contact no host.
OFFLINE = {"hosts", "baseline-compare"}


def acts_on_a_cluster(task: str) -> bool:
    """A task that, given a cluster it knows, contacts its hosts and has no ``--dry-run`` to stop it."""
    names = {a.names[0] for a in namespace[task].get_arguments()}
    return "cluster" in names and "dry-run" not in names and task not in OFFLINE


@st.composite
def command_lines(draw: st.DrawFn, box: Sandbox) -> list[str]:
    """A command line of one task: its flags each given or not, at most two of them (or none) given junk, so that
    most examples get past the first check and reach the task's deeper readers."""
    task = draw(st.sampled_from(TASKS))
    arguments = namespace[task].get_arguments()
    hostile = set(draw(st.lists(st.sampled_from([a.names[0] for a in arguments]), max_size=2)))
    words = [task]
    names = {a.names[0] for a in arguments}
    if {"cluster", "inventory"} <= names and not acts_on_a_cluster(task) and not hostile & {"cluster", "inventory"}:
        inventory, cluster = draw(st.sampled_from(PAIRS))  # a cluster its inventory defines: the task goes on
        words += [f"--cluster={cluster}"] + ([f"--inventory={box.files / inventory}"] if inventory else [])
        names -= {"cluster", "inventory"}
    for arg in arguments:
        name = arg.names[0]
        if name not in names:
            continue
        if name == "dry-run":
            words.append("--dry-run")
            continue
        if name == "cluster" and acts_on_a_cluster(task):
            words += ["--cluster", draw(st.sampled_from([NO_CLUSTER, f"{NO_CLUSTER}-2", f"{NO_CLUSTER},{NO_CLUSTER}"]))]
            continue
        values = value_for(box, task, arg, hostile=name in hostile)
        if arg.positional:
            if draw(st.integers(0, 19)):  # now and then left out: a missing positional is a usage error
                words.append(draw(values))
            continue
        if arg.kind is bool or name == "verbose":
            if draw(st.integers(0, 3)) == 0:
                words.append(f"--{name}")
            continue
        wanted = name in hostile or name == "cluster" or draw(st.integers(0, 2)) == 0
        count = (draw(st.integers(1, 2)) if arg.kind is list else 1) if wanted else 0
        for _ in range(count):
            value = draw(values)
            if draw(st.booleans()):
                words.append(f"--{name}={value}")
            else:
                words += [f"--{name}", value]
    if draw(st.integers(0, 19)) == 0:
        words.append(draw(_JUNK))  # a stray word: an unknown task, argument or flag
    return words


def check_safe(words: list[str]) -> None:
    """The fuzzer's own guard: a command line that could start a workload is never run."""
    task = words[0]
    if acts_on_a_cluster(task):
        given = [words[i + 1] for i, w in enumerate(words[:-1]) if w in ("--cluster", "-c")]
        given += [w.split("=", 1)[1] for w in words if w.startswith("--cluster=")]
        assert given and all(g.startswith(NO_CLUSTER) for g in given), words
    elif "dry-run" in {a.names[0] for a in namespace[task].get_arguments()}:
        assert "--dry-run" in words, words
    assert task not in LEFT_OUT


def allowed_places(box: Sandbox, words: list[str]) -> list[str]:
    """Where ``words`` may write: ``--root`` (the working directory without it) and ``get``'s destination."""
    roots = [w.split("=", 1)[1] for w in words if w.startswith("--root=")]
    roots += [words[i + 1] for i, w in enumerate(words[:-1]) if w == "--root"]
    places = [str(box.cwd)] + [os.path.join(box.cwd, os.path.expanduser(r)) for r in roots]
    if words[0] == "get":
        places += [os.path.join(box.cwd, w) for w in words[1:] if not w.startswith("-")]
    return [os.path.realpath(p) for p in places]


def _under(path: str, places: list[str]) -> bool:
    real = os.path.realpath(os.path.dirname(path))
    full = os.path.join(real, os.path.basename(path))
    return any(full == p or full.startswith(p.rstrip("/") + "/") or real == p for p in places)


def exercise(box: Sandbox, words: list[str]) -> int:
    check_safe(words)
    before = box.snapshot()
    try:
        code, _out, err = run_in_process(box, words)
    except BaseException as exc:  # anything but the program's exit is a traceback for the user
        raise AssertionError(f"traceback for {words!r}: {type(exc).__name__}: {exc}") from exc
    assert code in DOCUMENTED, f"exit {code} for {words!r}: {err[-800:]}"
    assert "Traceback" not in err, f"traceback on stderr for {words!r}: {err[-2000:]}"
    if code == 2:
        assert any(line.startswith("error:") for line in err.splitlines()), f"no error line for {words!r}: {err!r}"
    after = box.snapshot()
    places = allowed_places(box, words)
    changed = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p) and not _under(p, places))
    assert not changed, f"{words!r} wrote outside --root and its destination: {changed[:5]}"
    return code


def test_every_task_is_fuzzed_or_left_out_by_name() -> None:
    assert set(LEFT_OUT) <= set(namespace.task_names)
    assert len(TASKS) + len(LEFT_OUT) == len(namespace.task_names) and len(TASKS) > 30


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                 HealthCheck.data_too_large, HealthCheck.filter_too_much])
@given(data=st.data())
def test_any_command_line_ends_with_a_documented_status_and_writes_only_where_asked(sandbox: Sandbox,
                                                                                   data: st.DataObject) -> None:
    words = data.draw(command_lines(sandbox))
    exercise(sandbox, words)


#: What the fuzzer found, kept as explicit examples: (command line with ``ROOT`` for the stored-run root, status).
FOUND = [
    (["report", "foreign", "--root", "ROOT"], 2),  # was 0: a Kubernetes Pod's JSON as run.json was reported
    (["judge", "foreign", "--root", "ROOT"], 2),  # was 1: ... and re-judged
    (["runs", "--root", "ROOT"], 2),  # was 0 over damaged run.json files, which it lists from their results
    (["hosts", "--inventory", "FILES/inv-bad-params.yaml"], 2),  # was 0: params a run refuses were shown resolved
    (["func", "--cluster", "local", "--dry-run", "--set", "func002_min_overlap_ratio=5"], 2),  # was 0
]


@pytest.mark.parametrize(("words", "status"), FOUND)
def test_what_the_fuzzer_found(sandbox: Sandbox, words: list[str], status: int) -> None:
    words = [w.replace("ROOT", str(sandbox.root)).replace("FILES", str(sandbox.files)) for w in words]
    assert exercise(sandbox, words) == status
