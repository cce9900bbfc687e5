"""GPU processes that are not the case's own: captured before and after a measurement, judged as "GPU busy".

A runtime measured while another process used the GPU says nothing about the SUT or the node, so a
performance verdict taken then is ERROR ("GPU busy: ..."), never FAIL (issue 16 item 5, like envcheck's
``others_before``/``others_after``). This module owns the evidence end to end:

* capture: ``nvidia-smi --query-compute-apps=pid,process_name,used_memory,gpu_uuid --format=csv`` on every GPU
  host of the case (parsers/nvidia_smi.py builds the argv and parses the CSV);
* file: ``gpu_apps/<tag>.json``, ``{"<host>": {"exit": int|null, "output": str}}`` with ``tag`` ``before``
  (the case's first pod not yet started) or ``after`` (every pod of the case ended);
* parser and check: :func:`busy` and :func:`idle_check`.

A host without nvidia-smi (``nvidia-smi: not found``) or one that did not answer is recorded as such and
judged unknown: nothing is concluded from it, and the check then names it, so the verdict does not pretend.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from xpushare.model.atomic_file import atomic_write_text
from xpushare.model.errors import TransportError
from xpushare.model.verdict import Check
from xpushare.parsers.nvidia_smi import compute_apps_command, parse_compute_apps
from xpushare.transport.base import Host

FIELDS = ("pid", "process_name", "used_memory", "gpu_uuid")
NOT_FOUND = "nvidia-smi: not found"
TAGS = ("before", "after")


def file_name(tag: str) -> str:
    """``gpu_apps/<tag>.json`` (relative to the case dir)."""
    return f"gpu_apps/{tag}.json"


def capture(hosts: Mapping[str, Host], case_dir: Path, tag: str, timeout_s: float = 60.0) -> str:
    """Query every host's GPU processes and write ``gpu_apps/<tag>.json``; returns its relative path.

    A host that cannot be reached gets ``{"exit": null, "output": "<the error>"}``; nothing raises.
    """
    argv = ["sh", "-c", f'command -v nvidia-smi >/dev/null || {{ echo "{NOT_FOUND}"; exit 0; }}; exec "$@"', "sh",
            *compute_apps_command(FIELDS)]
    doc: dict[str, dict[str, object]] = {}
    for name, host in sorted(hosts.items()):
        try:
            res = host.run(argv, timeout=timeout_s)
            doc[name] = {"exit": res.exit_code, "output": res.stdout + res.stderr}
        except TransportError as exc:
            doc[name] = {"exit": None, "output": str(exc)}
    path = case_dir / file_name(tag)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(doc, indent=2) + "\n")
    return file_name(tag)


def busy(text_of: Mapping[str, str | None], own: Sequence[str] = ()) -> tuple[list[str], list[str]]:
    """The foreign GPU processes and the hosts whose state is unknown, from the captured files.

    Args:
        text_of: ``file_name(tag)`` -> its content (None when not captured), for the tags of :data:`TAGS`.
        own: process names (their last path component) of the system under test's own GPU processes
            (:attr:`~xpushare.inventory.sut_profiles.SutProfile.gpu_processes`: MPS's server): not foreign.

    Returns:
        ``(processes, unknown)``: ``"<tag> <host>: pid <pid> <name> (<MiB> MiB) on <uuid>"`` per process on a GPU
        before the case's first pod or after its last one ended; ``"<tag> <host>: <why>"`` per host whose
        query failed or has no nvidia-smi, and per tag not captured. Raises nothing.
    """
    processes: list[str] = []
    unknown: list[str] = []
    for tag in TAGS:
        text = text_of.get(file_name(tag))
        if text is None:
            unknown.append(f"{tag}: not captured")
            continue
        try:
            doc = json.loads(text)
        except json.JSONDecodeError:
            unknown.append(f"{tag}: {file_name(tag)} is not JSON")
            continue
        for host, entry in sorted(doc.items()):
            output = str(entry.get("output") or "")
            if entry.get("exit") != 0 or NOT_FOUND in output:
                unknown.append(f"{tag} {host}: {output.strip().splitlines()[-1] if output.strip() else 'no answer'}")
                continue
            for app in parse_compute_apps(output, FIELDS):
                if (app.process_name or "").rsplit("/", 1)[-1] in own:
                    continue
                mem = app.used_memory_bytes
                mib = f"{mem // (1 << 20)} MiB" if mem is not None else "? MiB"
                processes.append(f"{tag} {host}: pid {app.pid} {app.process_name} ({mib}) on {app.gpu_uuid}")
    return processes, unknown


def idle_check(text_of: Mapping[str, str | None], own: Sequence[str] = ()) -> Check:
    """``gpu_idle``: no other compute process on the case's GPUs before its first pod or after its last; the
    system under test's ``own`` processes (see :func:`busy`) do not count.

    ``ok`` True when both snapshots were taken on every host and were empty; None ("GPU busy: ...") when a
    process was there, which makes the verdict ERROR, never FAIL; True with a detail naming what could not be
    seen when a host has no nvidia-smi (the lab's Kubernetes node hosts, a CPU-only host): nothing seen is
    then not evidence of a busy GPU, and the detail says so.
    """
    processes, unknown = busy(text_of, own)
    values = {"processes": processes, "unknown": unknown, "own_processes_ignored": list(own)}
    expression = "no other compute process on the GPUs before the first pod or after the last one ended"
    if processes:
        return Check("gpu_idle", expression, values, None, "GPU busy: " + "; ".join(processes))
    detail = ("not observable: " + "; ".join(unknown)) if unknown else ""
    return Check("gpu_idle", expression, values, True, detail)
