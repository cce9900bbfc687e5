#!/usr/bin/env python3
"""Run envcheck steps one after the other inside a pod and print their output for ``kubectl logs``.

A pod's log merges stdout and stderr, so this driver captures each step's streams separately and
prints, per step: the step's stdout as it came (holding its ``@@xpushare-envcheck-begin <step>`` ...
``@@xpushare-envcheck-end <step>`` JSON block), then ``@@xpushare-envcheck-exit <step> <exit code>
<seconds>``, then the last ``--stderr-lines`` lines of its stderr prefixed with ``[<step>] ``. Steps
(each flag takes the step's own arguments as one shell-quoted string, ``''`` for the defaults)::

    --stack ARGS                    stack_probe.py ARGS
    --cublas ARGS                   cublas_bf16.py ARGS
    --nccl ARGS --torchrun TRARGS   python -m torch.distributed.run TRARGS nccl_allreduce.py ARGS
    --health ARGV                   the node health capture: ARGV is the whole command (xpushare's
                                    evidence/gpu_health.py capture_argv), ``{node}`` in it replaced by
                                    $XPUSHARE_ENVCHECK_NODE; its stdout is printed as the JSON block
                                    ``{"capture": <stdout>}`` of step ``health``

``--hold`` then sleeps until the pod is deleted (a DaemonSet's container must not exit). The scripts are
found next to this file; the interpreter is this one. Exit status: the first failing step's, else 0.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
EXIT = "@@xpushare-envcheck-exit"
BEGIN = "@@xpushare-envcheck-begin"
END = "@@xpushare-envcheck-end"


def run_step(step: str, argv: list[str], stderr_lines: int, timeout: float | None) -> int:
    """Run one step, print its stdout, the exit line and its stderr tail; return its exit code."""
    start = time.monotonic()
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        code, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        code = 124
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = f"timed out after {timeout:g} s"
    except OSError as exc:
        code, out, err = 127, "", str(exc)
    sys.stdout.write(out if out.endswith("\n") or not out else out + "\n")
    sys.stdout.write(f"{EXIT} {step} {code} {time.monotonic() - start:.3f}\n")
    for line in err.splitlines()[-stderr_lines:]:
        sys.stdout.write(f"[{step}] {line}\n")
    sys.stdout.flush()
    return code


def run_health(argv: list[str], stderr_lines: int, timeout: float | None) -> int:
    """The health capture ``argv``: its stdout as the ``health`` JSON block, then the exit line and stderr tail."""
    node = os.environ.get("XPUSHARE_ENVCHECK_NODE", "")
    argv = [a.replace("{node}", node) for a in argv]
    start = time.monotonic()
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        code, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired:
        code, out, err = 124, "", f"timed out after {timeout:g} s"
    except OSError as exc:
        code, out, err = 127, "", str(exc)
    if out:
        sys.stdout.write(f"{BEGIN} health\n{json.dumps({'capture': out})}\n{END} health\n")
    sys.stdout.write(f"{EXIT} health {code} {time.monotonic() - start:.3f}\n")
    for line in err.splitlines()[-stderr_lines:]:
        sys.stdout.write(f"[health] {line}\n")
    sys.stdout.flush()
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", default=None, help="run stack_probe.py with these arguments")
    parser.add_argument("--cublas", default=None, help="run cublas_bf16.py with these arguments")
    parser.add_argument("--nccl", default=None, help="run nccl_allreduce.py under torchrun with these arguments")
    parser.add_argument("--torchrun", default="--standalone --nproc-per-node 1", help="torchrun's arguments")
    parser.add_argument("--health", default=None, help="run this health capture command (one shell-quoted string)")
    parser.add_argument("--timeout-s", type=float, default=None, help="limit per step (default: none)")
    parser.add_argument("--stderr-lines", type=int, default=40)
    parser.add_argument("--hold", action="store_true", help="sleep until killed after the steps")
    args = parser.parse_args(argv)
    py = sys.executable
    steps: list[tuple[str, list[str]]] = []
    if args.stack is not None:
        steps.append(("stack", [py, os.path.join(HERE, "stack_probe.py"), *shlex.split(args.stack)]))
    if args.cublas is not None:
        steps.append(("cublas", [py, os.path.join(HERE, "cublas_bf16.py"), *shlex.split(args.cublas)]))
    if args.nccl is not None:
        steps.append(("nccl", [py, "-m", "torch.distributed.run", *shlex.split(args.torchrun),
                               os.path.join(HERE, "nccl_allreduce.py"), *shlex.split(args.nccl)]))
    status = 0
    for step, step_argv in steps:
        code = run_step(step, step_argv, args.stderr_lines, args.timeout_s)
        status = status or code
    if args.health is not None:  # the node's state, not a GPU step: its failure is judged, not the pod's status
        run_health(shlex.split(args.health), args.stderr_lines, args.timeout_s)
    if args.hold:
        sys.stdout.write("@@xpushare-envcheck-hold\n")
        sys.stdout.flush()
        while True:
            time.sleep(3600)
    return status


if __name__ == "__main__":
    sys.exit(main())
