"""A workload's effective environment as evidence: ``pods/<pod>.environ.txt``.

In host mode the backend reads each running workload's ``/proc/<pid>/environ`` (what the process really got,
whatever the tool meant to give it) and stores it here, one ``NAME=value`` a line, sorted, the value of every
secret-looking variable replaced by ``***``. The variables that decide a workload's GPU and identity
(:data:`GPU_VARS`) are what judgments and people read first: the client library takes its GPU key from
``NVIDIA_VISIBLE_DEVICES`` before ``CUDA_VISIBLE_DEVICES`` (the SUT's ``client.c: read_visible_device``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["GPU_VARS", "environ_file", "gpu_view", "parse", "render"]

GPU_VARS = ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "LD_PRELOAD")
"""The variables that place a workload on a GPU and put the client library in its path."""

_SECRET_NAME = re.compile(r"(?i)(pass(word|wd)?|token|secret|credential|auth|private|(^|_)key($|_))")


def environ_file(pod: str) -> str:
    """Path, relative to the case directory, of ``pod``'s environment: ``pods/<pod>.environ.txt``."""
    return f"pods/{pod}.environ.txt"


def render(raw: bytes) -> str:
    """``/proc/<pid>/environ`` content (NUL-separated ``NAME=value``) as the stored text: sorted lines, secrets
    redacted (a name with ``PASSWORD``, ``TOKEN``, ``SECRET``, ``CREDENTIAL``, ``AUTH``, ``PRIVATE`` or a ``KEY``
    word); entries without ``=`` and undecodable bytes are kept as text (``\\ufffd``)."""
    lines = []
    for entry in raw.decode("utf-8", errors="replace").split("\0"):
        if not entry:
            continue
        name, sep, value = entry.partition("=")
        if sep and _SECRET_NAME.search(name):
            value = "***"
        lines.append(f"{name}{sep}{value}".replace("\n", "\\n"))
    return "".join(f"{line}\n" for line in sorted(lines))


def parse(text: str) -> dict[str, str]:
    """The stored text back as ``{name: value}`` (lines without ``=`` are skipped)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep and name:
            out[name] = value
    return out


def gpu_view(env: Mapping[str, str]) -> str:
    """The GPU variables of ``env`` in one line: ``NVIDIA_VISIBLE_DEVICES=GPU-1 CUDA_VISIBLE_DEVICES=GPU-1``
    (``(unset)`` for a missing one; ``LD_PRELOAD`` left out)."""
    return " ".join(f"{v}={env.get(v, '(unset)')}" for v in GPU_VARS[:2])
