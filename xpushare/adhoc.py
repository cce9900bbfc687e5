"""Ad-hoc tasks on inventory hosts: ``invoke hosts``, ``invoke run``, ``invoke ping``, ``invoke put``/``get``.

Each function prints to the given stream and returns the :class:`~xpushare.model.exit_status.ExitStatus` of the task:
0 all ok, 1 some command failed, 3 some host unreachable (takes precedence: that host was not tested).
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path, PurePosixPath
from typing import Any, TextIO

from tabulate import tabulate

from xpushare.evidence.facts import HostFacts, facts_argv, parse_facts
from xpushare.inventory.schema import ROLES, ClusterSpec, HostSpec
from xpushare.inventory.selection import fold
from xpushare.model import atomic_file
from xpushare.model.errors import CommandTimeout, ConnectionLost, UsageError
from xpushare.model.exit_status import ExitStatus, decide_exit_status
from xpushare.report import output
from xpushare.transport import interrupt
from xpushare.transport.base import CommandResult, Copied, Host
from xpushare.transport.fanout import HostOutcome, fan_out
from xpushare.transport.hosts import connect
from xpushare.transport.ssh import SshHost
from xpushare.transport.stream import PrefixedLines


def hosts_records(clusters: Sequence[ClusterSpec]) -> list[dict[str, Any]]:
    """The resolved inventory, one record per host: ``cluster, mode, sut, host, roles`` (list), ``address``
    (None for this machine), ``port``, ``user``, ``host_key_policy`` (None for this machine)."""
    return [
        {"cluster": cluster.name, "mode": cluster.mode, "sut": cluster.sut, "host": h.name, "roles": list(h.roles),
         "address": None if h.local else h.target, "port": None if h.local else (h.ssh.port or 22),
         "user": None if h.local else h.ssh.user, "host_key_policy": None if h.local else h.ssh.host_key_policy}
        for cluster in clusters
        for h in cluster.hosts
    ]


def hosts_table(clusters: Sequence[ClusterSpec], fmt: str = "table") -> str:
    """The resolved inventory in ``fmt`` (:mod:`xpushare.report.output`); the table: cluster, host, roles,
    target, port, user, key policy."""
    records = hosts_records(clusters)
    rows = [[r["cluster"], r["mode"], r["sut"], r["host"], ",".join(r["roles"]),
             "(this machine)" if r["address"] is None else r["address"], r["port"] or "", r["user"] or "",
             r["host_key_policy"] or ""] for r in records]
    headers = ["cluster", "mode", "sut", "host", "roles", "address", "port", "user", "host keys"]
    return output.render(records, fmt, text=tabulate(rows, headers=headers))


def hosts_folded(clusters: Sequence[ClusterSpec]) -> str:
    """One line per cluster with its hosts folded per role, in the node-set syntax ``--limit`` takes:
    ``c1: all=c1-gpu[1-4],c1-master master=c1-master gpu=c1-gpu[1-4]``."""
    lines = []
    for cluster in clusters:
        roles = " ".join(f"{role}={fold(h.name for h in cluster.by_role(role))}" for role in ROLES
                         if cluster.by_role(role))
        lines.append(f"{cluster.name}: all={fold(h.name for h in cluster.hosts)} {roles}".rstrip())
    return "\n".join(lines)


def _status_word(outcome: HostOutcome[CommandResult]) -> str:
    if outcome.unreachable:
        return "UNREACHABLE"
    if isinstance(outcome.error, CommandTimeout):
        return "TIMEOUT"
    if isinstance(outcome.error, ConnectionLost):
        return "LOST"
    if outcome.error is not None:
        return "ERROR"
    assert outcome.value is not None
    return "ok" if outcome.value.ok else "FAILED"


def exit_status_of(outcomes: Sequence[HostOutcome[Any]], failed: Sequence[bool]) -> ExitStatus:
    """3 when a host was unreachable, else 1 when any command failed or errored, else 0."""
    return decide_exit_status(failed=any(failed) or any(o.error is not None for o in outcomes),
                              unreachable=any(o.unreachable for o in outcomes))


def partial_output(error: BaseException | None) -> tuple[str, str]:
    """What a command that timed out wrote before its deadline (stdout, stderr); empty for any other error."""
    if isinstance(error, CommandTimeout):
        return error.stdout, error.stderr
    return "", ""


def render_folded(outcomes: Sequence[HostOutcome[CommandResult]]) -> str:
    """Group hosts with identical output and exit code: ``c1-gpu[1-8]: 580.159.04``; each group's hosts are
    one ClusterShell node set, which ``--limit`` takes back. A command that timed out shows the output it wrote
    before its deadline, then why it has no exit status."""
    groups: dict[tuple[str, str, int | None, str], list[str]] = {}
    for o in outcomes:
        key: tuple[str, str, int | None, str]
        if o.value is not None:
            key = (o.value.stdout.rstrip("\n"), o.value.stderr.rstrip("\n"), o.value.exit_code, "")
        else:
            out, err = partial_output(o.error)
            key = (out.rstrip("\n"), err.rstrip("\n"), None, str(o.error))
        groups.setdefault(key, []).append(o.host)
    blocks = []
    for (out, err, code, error), names in groups.items():
        label = fold(names)
        if error:
            kept = out if not err else (f"{out}\n{err}" if out else err)
            if kept:
                indented = "\n".join(f"  {line}" for line in kept.splitlines())
                blocks.append(f"{label}: {_status_of_error(error)}; its output until then:\n{indented}")
            else:
                blocks.append(f"{label}: {_status_of_error(error)}")
            continue
        suffix = "" if code == 0 else f" (exit {code})"
        body = out if not err else (f"{out}\n{err}" if out else err)
        if "\n" not in body:
            blocks.append(f"{label}{suffix}: {body}")
        else:
            indented = "\n".join(f"  {line}" for line in body.splitlines())
            blocks.append(f"{label}{suffix}:\n{indented}")
    return "\n".join(blocks)


def _status_of_error(message: str) -> str:
    return message.split(": ", 1)[1] if ": " in message else message


def run_adhoc(
    hosts: Sequence[HostSpec],
    argv: Sequence[str],
    *,
    forks: int,
    timeout: float | None,
    out: TextIO,
    fmt: str = "table",
    stream: bool = False,
    err: TextIO | None = None,
) -> ExitStatus:
    """Run ``argv`` on every host in parallel; print folded output then a summary table, or (``fmt`` json/yaml)
    one record per host: ``host, status, exit`` (None without one), ``duration_s``, ``stdout``, ``stderr``,
    ``error`` (None, or why there is no exit status).

    ``stream``: instead of the folded output, print each host's lines as they come, ``host: line`` (stdout to
    ``out``, stderr to ``err``, default ``sys.stderr``), like pdsh; with ``fmt`` json/yaml every streamed line goes
    to ``err``, so that ``out`` holds the records alone.

    ``timeout``: a deadline per host; the call returns within ``timeout`` +
    :data:`~xpushare.transport.deadline.GRACE_S` after the commands started, also when a command left a child
    holding its output open (here its process group is ended; over SSH its channel is closed and the command's
    session ended on the host). That host's status is ``TIMEOUT``, its ``stdout``/``stderr`` what it wrote before
    the deadline, its exit ``None``, or the command's own exit status when the command had ended and only a process
    it left in the background held its output (its ``error`` says so).

    Ctrl-C, SIGTERM or SIGHUP end the commands (here and on the hosts) and raise ``KeyboardInterrupt``.
    """
    conns = [connect(h, interruptible=True) for h in hosts]
    lock = threading.Lock()
    lines_err = err or sys.stderr
    lines_out = out if fmt == "table" else lines_err  # json/yaml: stdout is the records' alone

    def one(host: Host) -> CommandResult:
        if not stream:
            return host.run(argv, timeout=timeout)
        o = PrefixedLines(lines_out, host.name, lock)
        e = PrefixedLines(lines_err, host.name, lock)
        try:
            return host.run(argv, timeout=timeout, out_stream=o, err_stream=e)
        finally:
            o.close()
            e.close()

    try:
        outcomes = fan_out(conns, one, forks=forks, close_each=True)
    finally:
        for c in conns:
            c.close()
    interrupt.check()  # a command ended by Ctrl-C/SIGTERM/SIGHUP: the task ends as interrupted (128 + the signal)
    failed = [o.value is not None and not o.value.ok for o in outcomes]
    if fmt != "table":
        records = [_run_record(o) for o in outcomes]
        print(output.render(records, fmt), file=out)
        return exit_status_of(outcomes, failed)
    if stream:
        for o in outcomes:
            if o.error is not None:
                print(f"{o.host}: {_status_word(o)}: {_status_of_error(str(o.error))}", file=err or sys.stderr)
    else:
        print(render_folded(outcomes), file=out)
    rows = []
    for o in outcomes:
        v = o.value
        took = v.duration_s if v else _timed_out_after(o.error)
        code = v.exit_code if v else _ended_with(o.error)
        rows.append([o.host, _status_word(o), "" if code is None else code, "" if took is None else f"{took:.2f}"])
    print(file=out)
    print(tabulate(rows, headers=["host", "status", "exit", "seconds"]), file=out)
    return exit_status_of(outcomes, failed)


def _timed_out_after(error: BaseException | None) -> float | None:
    return error.duration_s if isinstance(error, CommandTimeout) else None


def _ended_with(error: BaseException | None) -> int | None:
    """The exit status of a command that ended before its deadline while a process it left behind held its output
    (:attr:`CommandTimeout.exit_code`); None otherwise."""
    return error.exit_code if isinstance(error, CommandTimeout) else None


def _run_record(o: HostOutcome[CommandResult]) -> dict[str, Any]:
    """One host's record of ``invoke run -o json|yaml`` (fields: :func:`run_adhoc`)."""
    if o.value is not None:
        v = o.value
        return {"host": o.host, "status": _status_word(o), "exit": v.exit_code, "duration_s": round(v.duration_s, 3),
                "stdout": v.stdout, "stderr": v.stderr, "error": None}
    out, err = partial_output(o.error)
    took = _timed_out_after(o.error)
    return {"host": o.host, "status": _status_word(o), "exit": _ended_with(o.error),
            "duration_s": None if took is None else round(took, 3), "stdout": out, "stderr": err,
            "error": None if o.error is None else str(o.error)}


def _ping_one(host: Host, kubectl: str | None, kubeconfig: str | None = None) -> tuple[float, float, HostFacts]:
    start = time.monotonic()
    if isinstance(host, SshHost):
        host.connection()
    connect_s = time.monotonic() - start
    start = time.monotonic()
    host.run(["true"], timeout=30, check=True)
    rtt_s = time.monotonic() - start
    facts = parse_facts(host.run(facts_argv(kubectl, kubeconfig), timeout=60).stdout)
    return connect_s, rtt_s, facts


def ping(cluster: ClusterSpec, hosts: Sequence[HostSpec], *, forks: int, out: TextIO,
         fmt: str = "table") -> ExitStatus:
    """Report reachability, latency and facts (hostname, kernel, GPUs, driver, kubectl) per host: a table, or
    (``fmt`` json/yaml) one record per host: ``host, status`` (ok | UNREACHABLE | ERROR), ``error``,
    ``connect_ms``, ``rtt_ms``, ``hostname``, ``kernel``, ``gpus`` (list of models), ``driver``,
    ``kubectl_client``, ``kubectl_server`` (None where unknown or not a master)."""
    conns = [connect(h) for h in hosts]
    masters = {h.name for h in hosts if "master" in h.roles}

    def op(host: Host) -> tuple[float, float, HostFacts]:
        if host.name in masters:
            return _ping_one(host, cluster.kubectl, cluster.kubeconfig)
        return _ping_one(host, None)

    try:
        outcomes = fan_out(conns, op, forks=forks, close_each=True)
    finally:
        for c in conns:
            c.close()
    if fmt != "table":
        print(output.render([_ping_record(o, o.host in masters) for o in outcomes], fmt), file=out)
        return exit_status_of(outcomes, [False] * len(outcomes))
    rows = []
    for o in outcomes:
        if o.value is None:
            rows.append([o.host, "UNREACHABLE" if o.unreachable else "ERROR", "", "", "", "", "", "",
                         error_text(o.error)])
            continue
        connect_s, rtt_s, f = o.value
        gpus = f"{len(f.gpus)} x {f.gpus[0][1]}" if f.gpus else "-"
        kube = ""
        if o.host in masters:
            kube = f"{f.kubectl_client or '?'} / {f.kubectl_server or 'no server'}"
        rows.append(
            [
                o.host,
                "ok",
                f"{connect_s * 1000:.0f}",
                f"{rtt_s * 1000:.1f}",
                f.hostname or "?",
                f.kernel or "?",
                f"{gpus}" + (f" ({f.driver})" if f.driver else ""),
                kube,
                "",
            ]
        )
    headers = ["host", "status", "connect ms", "rtt ms", "hostname", "kernel", "GPUs (driver)", "kubectl", "error"]
    if not any(row[-1] for row in rows):  # the error column only when some host failed
        headers, rows = headers[:-1], [row[:-1] for row in rows]
    print(tabulate(rows, headers=headers), file=out)
    return exit_status_of(outcomes, [False] * len(outcomes))


def error_text(error: BaseException | None) -> str:
    """A host's error as one readable line: the socket layer's ``[Errno None]`` prefix (an error without an errno)
    left out."""
    return re.sub(r"\[Errno None\] ?", "", str(error) if error is not None else "").strip()


def _ping_record(o: HostOutcome[tuple[float, float, HostFacts]], master: bool) -> dict[str, Any]:
    record: dict[str, Any] = {"host": o.host, "status": "ok", "error": None}
    if o.value is None:
        return {**record, "status": "UNREACHABLE" if o.unreachable else "ERROR", "error": error_text(o.error)}
    connect_s, rtt_s, f = o.value
    return {**record, "connect_ms": round(connect_s * 1000, 1), "rtt_ms": round(rtt_s * 1000, 2),
            "hostname": f.hostname, "kernel": f.kernel, "gpus": [g[1] for g in f.gpus], "driver": f.driver,
            "kubectl_client": f.kubectl_client if master else None,
            "kubectl_server": f.kubectl_server if master else None}


def copy_records(outcomes: Sequence[HostOutcome[Copied]]) -> list[dict[str, Any]]:
    """One record per host of a ``put``/``get``: ``{"host", "status": ok | UNREACHABLE | ERROR, "path" (the copy's
    path, remote for put, local for get; null on failure), "replaced" (true when a file was there and was replaced;
    null on failure), "error" (why, one line; null when ok)}``."""
    return [{"host": o.host, "status": "ok" if o.error is None else "UNREACHABLE" if o.unreachable else "ERROR",
             "path": o.value.path if o.error is None and o.value is not None else None,
             "replaced": bool(o.value.replaced) if o.error is None and o.value is not None else None,
             "error": None if o.error is None else _status_of_error(str(o.error))} for o in outcomes]


def _copy_report(outcomes: Sequence[HostOutcome[Copied]], out: TextIO, fmt: str = "table") -> ExitStatus:
    """``fmt`` table: one line per host, ``host: ok  PATH``, ``host: ok  PATH (replaced the file there)`` or
    ``host: UNREACHABLE|ERROR: why``; json or yaml: the :func:`copy_records` alone. Returns the exit status of
    :func:`exit_status_of` (3 a host unreachable, 1 a copy failed)."""
    records = copy_records(outcomes)
    if fmt != "table":
        print(output.render(records, fmt), file=out)
    else:
        for r in records:
            done = f"{r['host']}: ok  {r['path']}" + ("  (replaced the file there)" if r["replaced"] else "")
            print(done if r["error"] is None
                  else f"{r['host']}: {r['status']}: {r['error']}", file=out)
    return exit_status_of(outcomes, [False] * len(outcomes))


def _copy_on_each(hosts: Sequence[HostSpec], copy: Callable[[Host], Copied], forks: int) -> list[HostOutcome[Copied]]:
    """Connect to every host, run ``copy`` on each in parallel (:func:`fan_out`), close the connections."""
    conns = [connect(h) for h in hosts]
    try:
        return fan_out(conns, copy, forks=forks, close_each=True)
    finally:
        for c in conns:
            c.close()


def put_files(hosts: Sequence[HostSpec], src: str, dest: str, *, forks: int, out: TextIO,
              fmt: str = "table") -> ExitStatus:
    """Copy the local file ``src`` to ``dest`` on every host in parallel, as ``scp`` does (``dest`` ending in ``/``
    or naming an existing directory: the file keeps its name in it; its directory is created; a file there is
    replaced and the host's line says so; a link at the target is refused: :meth:`Host.put`). Relative remote
    paths start in the login directory.
    ``fmt``: table (a line per host) | json | yaml (:func:`copy_records`), on ``out``.

    Raises :class:`UsageError` when ``src`` is not a readable file (before any host is touched).
    """
    source = Path(src).expanduser()
    if not source.is_file() or not os.access(source, os.R_OK):
        raise UsageError(f"put: {src}: no such readable file (put copies one file)")
    target = dest + source.name if dest.endswith("/") else dest
    def one(host: Host) -> Copied:
        return host.put(source, target)

    return _copy_report(_copy_on_each(hosts, one, forks), out, fmt)


def local_copy_path(local_dir: str, host: str, remote: str) -> Path:
    """Where ``get`` stores ``remote`` of ``host``: ``local_dir`` with ``{host}`` replaced when it holds that
    placeholder (``out/{host}.log``), else ``local_dir/<host>/<basename of remote>``."""
    if "{host}" in local_dir:
        return Path(local_dir.replace("{host}", host)).expanduser()
    return Path(local_dir).expanduser() / host / PurePosixPath(remote).name


def _owned_part(local_dir: str) -> Path:
    """The folder ``get`` fills: ``local_dir``, or its folders before the first part holding ``{host}``."""
    path = Path(local_dir).expanduser()
    if "{host}" not in local_dir:
        return path
    parts = path.parts
    first = next(i for i, part in enumerate(parts) if "{host}" in part)
    return Path(*parts[:first]) if first else Path(".")


def get_files(hosts: Sequence[HostSpec], remote: str, local_dir: str, *, forks: int, out: TextIO,
              fmt: str = "table") -> ExitStatus:
    """Copy ``remote`` from every host in parallel to a per-host local path (:func:`local_copy_path`) through the
    one local write path (:mod:`xpushare.model.atomic_file`): a failed copy leaves no partial file; a file there
    is replaced and the host's line says so; a link at the path, or a linked folder between ``local_dir`` and
    the file (``<host>/``), is refused for that host, never written through. ``fmt``: as for
    :func:`put_files`. Raises :class:`UsageError` for a remote path naming no file."""
    if PurePosixPath(remote).name in ("", ".", "..") or remote.endswith(("/", "/.", "/..")):
        raise UsageError(f"get: {remote!r}: give the remote file's path, not a directory")
    atomic_file.claim_tree(_owned_part(local_dir))

    def one(host: Host) -> Copied:
        return host.get(remote, local_copy_path(local_dir, host.name, remote))

    return _copy_report(_copy_on_each(hosts, one, forks), out, fmt)
