"""Invoke tasks of xpushare. Run ``invoke --list``; ``invoke --help <task>`` documents every flag.

Tasks stay thin: they parse flags and call the library (xpushare/); exit statuses are in the README.
"""

from __future__ import annotations

import sys
from pathlib import Path

from invoke import Collection, task

from xpushare import adhoc, engine, inventory
from xpushare.cli import guarded, remainder_argv, run_suite
from xpushare.errors import UsageError, XpushareError
from xpushare.fanout import DEFAULT_FORKS
from xpushare.selection import select_hosts

INVENTORY_HELP = "inventory YAML (default: $XPUSHARE_INVENTORY, else inventory/inventory.yaml)"


@task(help={"cluster": "show one cluster only (default: all)", "inventory": INVENTORY_HELP})
def hosts(c, cluster=None, inventory_=None):
    """Print the resolved inventory: clusters, hosts, roles, addresses and SSH settings."""

    def body():
        inv = inventory.load(inventory_)
        clusters = [inv.cluster(cluster)] if cluster else list(inv.clusters.values())
        print(adhoc.hosts_table(clusters))

    guarded(body)


@task(
    name="run",
    help={
        "cluster": "cluster name from the inventory (required)",
        "role": "master | gpu | all (default: all)",
        "limit": "comma-separated host globs; '!' excludes, e.g. 'c1-gpu*,!c1-gpu3'",
        "forks": f"hosts at once (default {DEFAULT_FORKS})",
        "timeout": "seconds per command (default 60)",
        "inventory": INVENTORY_HELP,
    },
)
def run_(c, cluster, role="all", limit=None, forks=DEFAULT_FORKS, timeout=60, inventory_=None):
    """Run a command on the selected hosts in parallel: invoke run --cluster c1 --role gpu -- nvidia-smi -L"""

    def body():
        argv = remainder_argv()
        if not argv:
            raise UsageError("no command given: put it after '--', e.g. invoke run --cluster c1 -- uptime")
        spec = inventory.load(inventory_).cluster(cluster)
        selected = select_hosts(spec, role=role, limit=limit)
        return adhoc.run_adhoc(selected, argv, forks=int(forks), timeout=float(timeout), out=sys.stdout)

    guarded(body)


@task(
    help={
        "cluster": "cluster name from the inventory (required)",
        "role": "master | gpu | all (default: all)",
        "limit": "comma-separated host globs; '!' excludes",
        "forks": f"hosts at once (default {DEFAULT_FORKS})",
        "inventory": INVENTORY_HELP,
    }
)
def ping(c, cluster, role="all", limit=None, forks=DEFAULT_FORKS, inventory_=None):
    """Check reachability and latency; report hostname, kernel, GPUs, driver and kubectl versions."""

    def body():
        spec = inventory.load(inventory_).cluster(cluster)
        selected = select_hosts(spec, role=role, limit=limit)
        return adhoc.ping(spec, selected, forks=int(forks), out=sys.stdout)

    guarded(body)


RUN_HELP = {
    "cluster": "cluster name from the inventory (required), e.g. local, c1, lab",
    "case": "run only this case id (repeatable), e.g. --case FUNC-001 --case FUNC-002",
    "playbook": "preset from playbooks/ (smoke, release, all) or a YAML path",
    "run_id": "run id (default: YYYYmmdd-HHMMSS now); with --resume, the run to continue",
    "resume": "re-run only the cases whose latest verdict is not PASS, in the same run dir",
    "set": "override a parameter/threshold: --set name=value (repeatable)",
    "root": "directory that holds .tmplog/ (default: the current one)",
    "inventory": INVENTORY_HELP,
}


@task(help=RUN_HELP, iterable=["case", "set_"])
def func(c, cluster, case=None, playbook=None, run_id=None, resume=False, set_=None, root=".", inventory_=None):
    """Run the functional suite FUNC-001..012 (seed 000 section 7) and judge each case."""
    run_suite("functional", cluster, case, playbook, run_id, resume, set_, root, inventory_)


@task(help=RUN_HELP, iterable=["case", "set_"])
def combo(c, cluster, case=None, playbook=None, run_id=None, resume=False, set_=None, root=".", inventory_=None):
    """Run the combination suite COMBO-001..008 (seed 000 section 8)."""
    run_suite("combination", cluster, case, playbook, run_id, resume, set_, root, inventory_)


@task(
    name="matrix",
    help={**RUN_HELP, "suite": "suite to run (repeatable): functional|func, combination|combo, performance|perf, "
          "metrics|met, stability|stab"},
    iterable=["suite", "case", "set_"],
)
def matrix(c, cluster, suite=None, case=None, playbook=None, run_id=None, resume=False, set_=None, root=".",
           inventory_=None):
    """Run any selection of the case matrix: --suite, --case and --playbook combined."""

    def body():
        request = engine.RunRequest(
            cluster=cluster, suites=suite or (), case_ids=case or (), playbook=playbook, run_id=run_id,
            resume=resume, overrides=set_ or (), inventory_path=inventory_, root=Path(root),
        )
        return engine.run(request)

    guarded(body)


@task(
    help={
        "run_id": "the stored run to re-judge (required)",
        "set": "threshold override name=value (repeatable), e.g. --set func002_min_overlap_ratio=0.8",
        "root": "directory that holds .tmplog/ (default: the current one)",
    },
    iterable=["set_"],
)
def judge(c, run_id, set_=None, root="."):
    """Re-judge a stored run's evidence with other thresholds, offline, and rebuild its reports."""
    guarded(lambda: engine.rejudge(run_id, set_ or (), root=Path(root)))


@task(help={"run_id": "the stored run (required)", "root": "directory that holds .tmplog/ (default: the current one)"})
def report(c, run_id, root="."):
    """Rebuild case-summary.tsv, run-summary.tsv, run.json, junit.xml and run-report.md of a stored run."""

    def body():
        from xpushare import artifacts
        from xpushare import report as report_mod
        from xpushare.errors import UsageError as _Usage

        try:
            artifacts.validate_run_id(run_id)
        except ValueError as exc:
            raise _Usage(str(exc)) from None
        run_dir = artifacts.run_dir(Path(root), run_id)
        if not run_dir.exists():
            raise _Usage(f"no run {run_id!r} under {root}")
        meta = artifacts.read_run_meta(run_dir) or {}
        paths = report_mod.build(run_dir, required=set(meta.get("required") or []) or None)
        print(paths.markdown)

    guarded(body)


@task(name="cases", help={"suite": "only this suite"})
def cases_(c, suite=None):
    """List every case id of the matrix with its suite, title and where it applies."""
    from tabulate import tabulate

    from xpushare.cases import REGISTRY

    def body():
        wanted = engine.normalise_suite(suite) if suite else None
        rows = [
            [cd.case_id, cd.suite, cd.title, ",".join(sorted(cd.requires)) or "-",
             "yes" if cd.act else f"no ({cd.implemented_by})"]
            for cd in REGISTRY.values()
            if wanted in (None, cd.suite)
        ]
        print(tabulate(rows, headers=["case", "suite", "title", "requires", "implemented"]))

    guarded(body)


@task(
    name="metrics-check",
    help={
        "url": "exporter base URL, e.g. http://HOST:9402 (fetched from this machine; no probe pods)",
        "cluster": "cluster from the inventory (k8s: scheduler pod via kubectl, curl from its node)",
        "load": "run the under-load part (default: on for --cluster; refused with --url)",
        "no_load": "idle part only (--cluster)",
        "min_families": "minimum number of families with # HELP and # TYPE (default 25)",
        "inventory": INVENTORY_HELP,
    },
)
def metrics_check(c, url=None, cluster=None, load=False, no_load=False, min_families=25, inventory_=None):
    """The seed 002 checklist of a scheduler's /metrics endpoint as PASS/FAIL lines (1: a FAIL, 3: unreachable)."""
    from xpushare import metrics_check as checklist

    def body():
        if not url and not cluster:
            raise UsageError("give --url http://HOST:PORT or --cluster NAME")
        spec = inventory.load(inventory_).cluster(cluster) if cluster else None
        want = True if load else (False if no_load else None)
        return checklist.metrics_check_task(url, spec, load=want, min_families=int(min_families), out=sys.stdout)

    guarded(body)


@task(
    help={
        "cluster": "cluster name from the inventory (required), e.g. local, c2",
        "limit": "comma-separated node globs; '!' excludes, e.g. 'c2-gpu*,!c2-gpu3'",
        "forks": f"nodes at once over SSH (default {DEFAULT_FORKS})",
        "mode": "ssh (fan-out over SSH, default) | k8s (DaemonSet + pods through kubectl on the master)",
        "run_id": "run id (default: YYYYmmdd-HHMMSS now)",
        "skip_gpu": "stack check only: cuBLAS and the all-reduce are SKIP",
        "set": "envcheck parameter: --set envcheck_<name>=value (repeatable), see docs/envcheck.md",
        "root": "directory that holds .tmplog/ (default: the current one)",
        "inventory": INVENTORY_HELP,
    },
    iterable=["set_"],
)
def envcheck(c, cluster, limit=None, forks=DEFAULT_FORKS, mode="ssh", run_id=None, skip_gpu=False, set_=None,
             root=".", inventory_=None):
    """Node acceptance at scale: stack alignment, cuBLAS bf16, NCCL all-reduce, fleet report (docs/envcheck.md)."""
    from xpushare.envcheck import envcheck_task

    guarded(lambda: envcheck_task(cluster, limit=limit, forks=int(forks), mode=mode, inventory_path=inventory_,
                                  run_id=run_id, skip_gpu=skip_gpu, out=sys.stdout, overrides=set_ or (),
                                  root=root))


LAB_DIR = Path(".lab")


@task(name="up", help={"sut-src": "xpushare source tree to build and run (default: the upstream tree; "
                                   "any patched copy works)"})
def lab_up(c, sut_src=None):
    """Start the test lab (3 sshd hosts, the lab Kubernetes cluster running the real SUT built from source)
    and write .lab/inventory.yaml (cluster 'lab')."""

    def body():
        from tests.lab import env
        from tests.lab.build import BuildError
        from tests.lab.cluster import LabError
        from tests.lab.nodens import NamespaceError

        try:
            inventory = env.up(LAB_DIR.absolute(), sut_src=sut_src)
        except (BuildError, LabError, NamespaceError) as exc:
            raise XpushareError(str(exc).splitlines()[0]) from None
        print(f"lab up; inventory: {inventory}")
        print("try: invoke ping --cluster lab; invoke func --cluster lab; stop with: invoke lab.down")

    guarded(body)


@task(name="down")
def lab_down(c):
    """Stop exactly the lab processes that 'invoke lab.up' started."""

    def body():
        from tests.lab import env

        env.down(LAB_DIR.absolute())
        print("lab down")

    guarded(body)


lab = Collection("lab", lab_up, lab_down)
ns = Collection(hosts, run_, ping, func, combo, matrix, judge, report, cases_, metrics_check, envcheck, lab)

# Suite- and area-specific tasks live beside their code: each module lists its tasks in TASKS and its
# namespaces (e.g. ``legacy``) in COLLECTIONS.
for _module in ("tasks_metrics", "tasks_perf", "tasks_stability", "tasks_legacy"):
    try:
        _mod = __import__(f"xpushare.{_module}", fromlist=["TASKS"])
    except ModuleNotFoundError as _exc:
        if _exc.name != f"xpushare.{_module}":
            raise
        continue
    for _task in getattr(_mod, "TASKS", ()):
        ns.add_task(_task)
    for _collection in getattr(_mod, "COLLECTIONS", ()):
        ns.add_collection(_collection)
