"""Benchmark: ``invoke envcheck`` over N lab sshd hosts with simulated GPUs, against pdsh running the same probes.

Run on demand (not part of pytest): ``python tests/bench/bench_envcheck.py [--hosts 1000] [--forks 32]``.
It starts N lab hosts on 127.0.1.1.. (tests/lab/sshd.py) whose sessions see the simulated GPU's ``nvidia-smi``
and ``dmesg`` (tests/lab/simgpu.py) and a ``torch`` look-alike (:data:`STUB_TORCH`), and times, each as a fresh
process under GNU ``time -v`` (wall time and peak RSS):

* ``invoke envcheck --skip-gpu`` (the stack probe, and the health capture, per node; the scripts
  copied first), with ``--forks`` nodes at once;
* ``pdcp`` of the same four scripts, then ``pdsh -R ssh -f <forks>`` running the same two probe command lines
  on every host (``stack_probe.py`` and the health capture, :func:`xpushare.evidence.gpu_health.capture_argv`).

So that the fleet report has something to group, a few hosts are made to fail as real nodes do: every
``--no-smi-every``-th host has no ``nvidia-smi`` (a missing prerequisite, and a driver that deviates from the
fleet's), every ``--two-gpu-every``-th host has two GPUs where the others have one (a deviation), and
``--unreachable`` inventory hosts have nothing listening. Results: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.bench.benchlab import ROOT, load_average, measured, stop_on_signals, write_inventory
from tests.lab.simgpu import SimDevice, build_simgpu, make_uuid, start_kmsg, write_config
from tests.lab.sshd import lab_down, lab_up
from xpushare.envcheck.manifests import SCRIPT_NAMES, SCRIPTS_DIR
from xpushare.evidence.gpu_health import capture_argv

#: A ``torch`` look-alike for the lab hosts: what ``stack_probe.py`` reads, from the simulated GPU's device file
#: (``SIMGPU_CONFIG``), so that a healthy host passes ``cuda_usable`` as a real GPU node does.
STUB_TORCH = """
import os
from types import SimpleNamespace as _NS

__version__ = "2.5.1+cu124"
version = _NS(cuda="12.4")
backends = _NS(cudnn=_NS(version=lambda: 90100))


def _devices():
    path = os.environ.get("SIMGPU_CONFIG")
    if not path:
        return []
    with open(path) as fh:
        return [line.rstrip("\\n").split("\\t") for line in fh if line.strip() and not line.startswith("#")]


def _props(i):
    fields = _devices()[i]
    return _NS(name=fields[1], total_memory=int(fields[2]), major=8, minor=0)


cuda = _NS(is_available=lambda: bool(_devices()), device_count=lambda: len(_devices()),
           get_device_properties=_props, nccl=_NS(version=lambda: (2, 21, 5)))
"""
STD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PYTHON = "/usr/bin/python3"
PROBE_SETTINGS = ("envcheck_freeze_source=metadata",)
#: The remote command lines envcheck runs per node with PROBE_SETTINGS and --skip-gpu (ssh_mode._SshNode.run):
#: the scripts directory is ``$HOME/.xpushare/envcheck``, which envcheck resolves per host first.
PROBES = (f'{PYTHON} "$HOME"/.xpushare/envcheck/stack_probe.py --freeze-source metadata; '
          + shlex.join(capture_argv()))


def summary_lines(output: str) -> int:
    """Lines of envcheck's closing summary: after the progress lines (one per node) and a blank line, up to
    ``report:``."""
    tail = output.rsplit("\n\n", 1)[-1].splitlines()
    return next((i for i, line in enumerate(tail) if line.startswith("report: ")), len(tail))


def main() -> int:
    stop_on_signals()
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--forks", type=int, default=32)
    parser.add_argument("--base", default="127.0.1.1")
    parser.add_argument("--no-smi-every", type=int, default=100, help="every Nth host has no nvidia-smi (0: none)")
    parser.add_argument("--two-gpu-every", type=int, default=250, help="every Nth host has two GPUs (0: none)")
    parser.add_argument("--unreachable", type=int, default=2, help="inventory hosts with nothing listening")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (reports, logs)")
    parser.add_argument("--only", help="comma-separated: xpushare, pdsh (default: both)")
    args = parser.parse_args()
    only = set((args.only or "xpushare,pdsh").split(","))
    work = Path(tempfile.mkdtemp(prefix="xpushare-bench-envcheck-"))
    try:
        sim = build_simgpu()
        one = write_config(work / "gpus" / "one", [SimDevice(make_uuid(0))])
        two = write_config(work / "gpus" / "two", [SimDevice(make_uuid(0)), SimDevice(make_uuid(1))])
        kmsg = start_kmsg(work / "gpus" / "kmsg", "bench")
        (work / "stubs" / "torch").mkdir(parents=True)
        (work / "stubs" / "torch" / "__init__.py").write_text(STUB_TORCH)

        def session_env(name: str) -> dict[str, str]:
            i = int(name.removeprefix("bench"))
            if args.no_smi_every and i % args.no_smi_every == args.no_smi_every // 2:
                return {"PATH": STD_PATH, "PYTHONPATH": str(work / "stubs")}
            config = two if args.two_gpu_every and i % args.two_gpu_every == args.two_gpu_every // 2 + 1 else one
            return {"PATH": f"{sim.directory}:{STD_PATH}", "LD_LIBRARY_PATH": str(sim.directory),
                    "SIMGPU_CONFIG": str(config), "SIMGPU_KMSG": str(kmsg),
                    "PYTHONPATH": str(work / "stubs")}

        lab = lab_up(work / "ssh", args.hosts, args.base, prefix="bench", session_env=session_env)
        hosts = list(lab.hosts.values())
        known, ssh_config = work / "ssh" / "known_hosts", work / "ssh" / "ssh_config"
        inventory = write_inventory(work / "inventory.yaml", "bench", hosts, known, {"python": PYTHON})
        inv = json.loads(inventory.read_text())
        names = [h.name for h in hosts]
        for k in range(args.unreachable):  # nothing listens there: both tools meet a refused connection
            name, address = f"gone{k + 1:02d}", f"127.0.99.{k + 1}"
            port = lab.closed_port(address)
            inv["clusters"]["bench"]["hosts"][name] = {"address": address, "port": port, "roles": ["gpu"]}
            with ssh_config.open("a") as fh:
                fh.write(f"\nHost {name}\n    HostName {address}\n    Port {port}\n    BatchMode yes\n")
            names.append(name)
        inventory.write_text(json.dumps(inv))
        (work / "hostfile").write_text("".join(f"{n}\n" for n in names))
        print(f"{len(names)} hosts ({args.hosts} up), forks {args.forks}, load {load_average():.1f}", flush=True)
        rows: list[dict[str, object]] = []
        env = dict(os.environ)
        if "xpushare" in only:
            root = work / "root"
            argv = [sys.executable, "-m", "invoke", "envcheck", "--cluster", "bench", "--inventory", str(inventory),
                    "--root", str(root), "--run-id", "bench", "--forks", str(args.forks), "--skip-gpu",
                    *(a for s in PROBE_SETTINGS for a in ("--set", s))]
            load = load_average()
            m = measured(argv, env, ok=(0, 1, 3))
            (work / "envcheck.out").write_text(m.stdout)  # its terminal summary (kept with --keep)
            fleet = json.loads((root / ".tmplog" / "bench" / "envcheck" / "fleet.json").read_text())
            report = (root / ".tmplog" / "bench" / "envcheck" / "fleet-report.md").read_text()
            rows.append({"tool": "xpushare invoke envcheck", "wall_s": round(m.wall_s, 2),
                         "peak_rss_kib": m.peak_rss_kib, "load": load, "counts": fleet["counts"],
                         "report_lines": report.count("\n"),
                         "output_lines": m.stdout.count("\n"), "summary_lines": summary_lines(m.stdout)})
            print(json.dumps(rows[-1]), flush=True)
        if "pdsh" in only and shutil.which("pdsh") and shutil.which("pdcp"):
            pdsh_env = {**env, "PDSH_SSH_ARGS_APPEND": f"-F {ssh_config}", "PDSH_RCMD_TYPE": "ssh"}
            fan = ["-R", "ssh", "-f", str(args.forks), "-w", f"^{work / 'hostfile'}"]
            load = load_average()
            copy = measured(["pdcp", *fan, *(str(SCRIPTS_DIR / n) for n in SCRIPT_NAMES), ".xpushare/envcheck/"],
                            pdsh_env, ok=range(256))
            run = measured(["pdsh", *fan, PROBES], pdsh_env, ok=range(256))
            rows.append({"tool": "pdcp + pdsh -R ssh", "wall_s": round(copy.wall_s + run.wall_s, 2),
                         "copy_s": round(copy.wall_s, 2), "probes_s": round(run.wall_s, 2),
                         "peak_rss_kib": max(copy.peak_rss_kib or 0, run.peak_rss_kib or 0), "load": load,
                         "stack_documents": run.stdout.count(": @@xpushare-envcheck-end stack"),
                         "health_captures": run.stdout.count(": ## kernel-log source=")})
            print(json.dumps(rows[-1]), flush=True)
        elif "pdsh" in only:
            print("pdsh/pdcp not installed: measured xpushare alone", flush=True)
        print(json.dumps({"hosts": len(names), "forks": args.forks, "results": rows}))
    finally:
        lab_down(work / "ssh")
        if args.keep:
            print(f"kept {work}", flush=True)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    os.chdir(ROOT)
    raise SystemExit(main())
