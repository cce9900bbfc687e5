"""Each case's GPU health before and after, per node: the capture and its files (docs/faults.md).

Both backends call :func:`capture` for every GPU node of the case at :meth:`Backend.begin_case` (``before``) and
in :meth:`Backend.harvest` (``after``). One SSH command per node runs :data:`SCRIPT`, which writes the capture
format that :func:`xpushare.parsers.gpu_health.parse_capture` reads:

* ``nvidia-smi --query-gpu=<HEALTH_FIELDS> --format=csv,noheader,nounits`` (ECC counters, retired pages, row
  remapping, clock throttle reasons, and by its rows whether each GPU is still visible); asked again with
  ``clocks_event_reasons.active`` when the driver refuses the older ``clocks_throttle_reasons.active`` name;
* the kernel log's ``NVRM: Xid`` lines: ``dmesg --time-format=iso``, else ``journalctl -k -b -o short-iso``;
  when neither can be read (``kernel.dmesg_restrict``, no journal access) the section says ``source=none``:
  not observable, never healthy.

File: ``gpu_health/<node>-<tag>.txt`` (``node``: the pod records' node name, the inventory host in host mode,
the Kubernetes node in k8s mode; ``tag``: ``before`` or ``after``). The judgment is
:mod:`xpushare.judge.gpu_faults`; envcheck reads the same capture (:mod:`xpushare.envcheck.node_health`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from xpushare.model.atomic_file import atomic_write_text
from xpushare.parsers.gpu_health import HEALTH_FIELDS
from xpushare.transport.base import Host

__all__ = ["SCRIPT", "TAGS", "capture", "capture_argv", "file_name"]

TAGS = ("before", "after")
DIRECTORY = "gpu_health"

#: ``sh -c SCRIPT sh <fields> <nvidia-smi argv...>``: the health query, then the kernel log's Xid lines.
SCRIPT = r"""
q="$1"; shift
echo "# xpushare gpu health"
if command -v "$1" >/dev/null 2>&1; then
  out=$("$@" --query-gpu="$q" --format=csv,noheader,nounits 2>&1); rc=$?
  case "$out" in *"is not a valid field"*)  # a driver that knows the throttle reasons by their r535+ name only
    q=$(printf '%s' "$q" | sed 's/clocks_throttle_reasons/clocks_event_reasons/')
    out=$("$@" --query-gpu="$q" --format=csv,noheader,nounits 2>&1); rc=$? ;;
  esac
  echo "## nvidia-smi exit=$rc"; printf '%s\n' "$out"
else
  echo "## nvidia-smi exit=127"; echo "$1: not found"
fi
src=none
if log=$(dmesg --time-format=iso 2>&1) && [ -n "$log" ]; then
  src=dmesg
else
  why="dmesg: $(printf '%s' "${log:-no output}" | tail -n 1)"
  if ! command -v journalctl >/dev/null 2>&1; then
    why="$why; journalctl: not found"
  elif log=$(journalctl -k -b -o short-iso --no-pager -q 2>&1) && [ -n "$log" ] && [ "$log" != "-- No entries --" ]
  then
    src=journalctl
  else
    why="$why; journalctl: $(printf '%s' "${log:-no output}" | tail -n 1)"
  fi
fi
if [ "$src" = none ]; then
  echo "## kernel-log source=none lines=0"; printf '%s\n' "$why"
else
  n=$(printf '%s\n' "$log" | wc -l)
  echo "## kernel-log source=$src lines=$n"; printf '%s\n' "$log" | grep -F 'NVRM: Xid' || true
fi
"""


def file_name(node: str, tag: str) -> str:
    """``gpu_health/<node>-<tag>.txt`` (relative to the case dir)."""
    return f"{DIRECTORY}/{node}-{tag}.txt"


def capture_argv(smi: Sequence[str] = ("nvidia-smi",), env: Mapping[str, str] | None = None) -> list[str]:
    """argv of the capture on a node: :data:`SCRIPT` with ``smi`` as the nvidia-smi command, under ``env``
    (``env K=V ...``; e.g. a driver installation the node's SSH sessions do not see)."""
    prefix = ["env", *(f"{k}={v}" for k, v in sorted(env.items()))] if env else []
    return [*prefix, "sh", "-c", SCRIPT, "sh", ",".join(HEALTH_FIELDS), *smi]


def capture(host: Host, case_dir: Path, node: str, tag: str, *, smi: Sequence[str] = ("nvidia-smi",),
            env: Mapping[str, str] | None = None, timeout_s: float = 60.0) -> str:
    """Run the capture on ``host`` (the GPU host of ``node``) and write ``gpu_health/<node>-<tag>.txt``;
    return its relative path. Raises :class:`~xpushare.model.errors.TransportError` when the host cannot be
    reached (nothing is written then)."""
    res = host.run(capture_argv(smi, env), timeout=timeout_s)
    rel = file_name(node, tag)
    tail = "" if res.ok else f"\n# capture exit {res.exit_code}: {res.stderr.strip()[:300]}\n"
    atomic_write_text(case_dir / rel, res.stdout + tail)
    return rel
