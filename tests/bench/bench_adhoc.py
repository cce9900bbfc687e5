"""Benchmark: ``invoke run -- hostname`` across N lab sshd hosts against an ssh loop, pdsh and Ansible.

Run on demand (not part of pytest): ``python tests/bench/bench_adhoc.py [--hosts 32] [--repeat 5]``.
It starts N lab hosts on 127.0.1.1.. (tests/lab/sshd.py), writes an inventory, ssh_config and an
Ansible inventory for them, and times each tool end to end as a fresh process (``cold`` is the first
run after the hosts started, ``warm`` the median of the following runs). Ansible is taken from
``ansible-core`` in the current environment if present (``pip install ansible-core``), else skipped.
Results: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.bench.benchlab import stop_on_signals, timed, write_inventory
from tests.lab.sshd import lab_down, lab_up


def main() -> int:
    stop_on_signals()
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hosts", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--base", default="127.0.1.1")
    parser.add_argument("--only", help="comma-separated substrings of the tool names to run (default: all)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="xpushare-bench-"))
    try:
        lab = lab_up(work / "ssh", args.hosts, args.base, prefix="bench")  # stops what it started when it fails
        hosts = list(lab.hosts.values())
        ssh_config = work / "ssh" / "ssh_config"
        known = work / "ssh" / "known_hosts"
        write_inventory(work / "inventory.yaml", "bench", hosts, known)
        ini = "[all]\n" + "".join(
            f"{h.name} ansible_host={h.address} ansible_port={h.port} ansible_user={h.user} "
            f"ansible_ssh_private_key_file={h.identity} ansible_python_interpreter=/usr/bin/python3\n" for h in hosts
        )
        (work / "ansible.ini").write_text(ini)
        names = [h.name for h in hosts]
        env = dict(os.environ)
        tools: dict[str, Callable[[], float]] = {
            "xpushare (invoke run)": lambda: timed(
                [sys.executable, "-m", "invoke", "run", "--cluster", "bench", "--inventory",
                 str(work / "inventory.yaml"), "--", "hostname"]),
            "ssh loop (sequential)": lambda: sum(
                timed(["ssh", "-F", str(ssh_config), n, "hostname"]) for n in names),
        }
        if shutil.which("pdsh"):
            pdsh_env = {**env, "PDSH_SSH_ARGS_APPEND": f"-F {ssh_config}", "PDSH_RCMD_TYPE": "ssh"}
            tools["pdsh -R ssh"] = lambda: timed(["pdsh", "-R", "ssh", "-f", str(args.hosts), "-w", ",".join(names),
                                                  "hostname"], env=pdsh_env)
        ansible = shutil.which("ansible") or (str(Path(sys.executable).parent / "ansible")
                                              if (Path(sys.executable).parent / "ansible").exists() else None)
        if ansible:
            a_env = {**env, "ANSIBLE_HOST_KEY_CHECKING": "False", "ANSIBLE_SSH_ARGS": f"-F {ssh_config}",
                     "ANSIBLE_TIMEOUT": "60"}
            tools["ansible ad-hoc -f N"] = lambda: timed(
                [ansible, "all", "-i", str(work / "ansible.ini"), "-m", "command", "-a", "hostname",
                 "-f", str(args.hosts)], env=a_env)
        rows = []
        if args.only:
            tools = {k: v for k, v in tools.items() if any(w in k for w in args.only.split(","))}
        for name, fn in tools.items():
            cold = fn()
            warm = [fn() for _ in range(args.repeat)]
            rows.append((name, cold, statistics.median(warm)))
            print(f"{name:28s} cold {cold:7.2f} s   warm median {statistics.median(warm):7.2f} s "
                  f"({args.repeat} runs)", flush=True)
        print(json.dumps({"hosts": args.hosts, "results": rows}))
    finally:
        lab_down(work / "ssh")
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
