"""``invoke deploy``: the setup pipeline of ``remote-test.sh`` (docs/sut/legacy-scripts.md §setup-pipeline), step by
step.

====  ======================================  ============================================================
step  banner                                  what it does
====  ======================================  ============================================================
0     ``0. Local Auto-Commit``                only with ``--autocommit``: ``git add -A`` + ``git commit`` in
                                              the source tree when ``git status --porcelain`` is not empty
1     ``1. Syncing Code to <host>:<dir>``     the source tree (``.git`` included, so the remote tag is the
                                              same; ``deploy_excludes`` left out) to the build host: rsync
                                              over SSH, else one tar archive over SFTP (``Host.put``)
2     ``2. Remote Build``                     ``cd <dir> && <deploy_make>`` (default ``make all``) there
3     ``3. Rendering Manifests``              ``manifests/legacy/*.yaml`` filled in structurally (PyYAML):
                                              images ``<registry>/<gen>-<component>:<git8>``, the
                                              ``<PREFIX>SCHEDULING_MODE`` entry of the scheduler
                                              container's env list (set once, never a duplicate key)
4     ``4. Cleaning Cluster``                 the legacy test pods (``app=`` labels), both DaemonSets,
                                              then waits until their pods are gone
5     ``5. Deploying New System``             ``kubectl apply`` of both, ``rollout status`` with a timeout
6     ``6. Verifying Scheduling Mode``        every scheduler pod logged ``Scheduling mode: <MODE>``
====  ======================================  ============================================================

``--skip-setup`` skips steps 0-2 (the images must exist). Each step prints its banner and
``  -> ok|skipped|FAILED: <detail>``; the first failure stops the pipeline with exit status 1 (3 when
the build host is unreachable). Files go to ``.tmplog/<run-id>/xpushare/<cluster>/deploy/``:
``deploy.json`` (steps and outcomes), ``build.log``, the rendered ``scheduler.yaml`` and
``device-plugin.yaml``, ``scheduler-mode.log``.

Parameters (inventory ``params`` of the cluster, or ``--set``), see :data:`DEPLOY_DEFAULTS`. The RBAC,
namespace and quota manifests are not applied (``remote-test.sh`` does not either).
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from xpushare.cases.param_schema import owned_problem
from xpushare.deploy.k8s_render import (
    MODES,
    image_names,
    render_device_plugin,
    render_scheduler,
)
from xpushare.deploy.source_sync import StepFailed, StepSkipped, auto_commit, git_tag, sync_source
from xpushare.engine.cluster_params import check_cluster_params
from xpushare.inventory import schema
from xpushare.inventory.schema import ClusterSpec, HostSpec
from xpushare.inventory.sut import SutNames, sut_names
from xpushare.model import param_owners
from xpushare.model.atomic_file import atomic_write_text, claim_tree, make_dirs
from xpushare.model.errors import HostUnreachable, UsageError, XpushareError
from xpushare.model.exit_status import ExitStatus
from xpushare.model.overrides import parse_overrides
from xpushare.parsers.scheduler_log import parse_text
from xpushare.report import run_store
from xpushare.transport.base import Host
from xpushare.transport.cluster_kubectl import kubectl_for, master_spec
from xpushare.transport.hosts import connect
from xpushare.transport.kube_errors import KubeError
from xpushare.transport.manifest_yaml import dump_manifests

#: Deploy parameters and their defaults (a cluster's inventory ``params`` and ``--set`` override them).
DEPLOY_DEFAULTS: dict[str, Any] = {
    "deploy_source": None,  # the SUT checkout to sync and build (``--source`` wins)
    "deploy_build_host": None,  # inventory host name; default: the cluster's first master
    "deploy_remote_dir": "code/xpushare",  # on the build host, relative to the login's home unless absolute
    "deploy_make": ["make", "all"],  # argv (or one string, split like a shell would) run in the remote dir
    "deploy_make_timeout_s": 3600,
    "deploy_rsync": "rsync",  # local rsync executable; missing (here or on the host) -> tar over SFTP
    "deploy_excludes": [".idea", ".DS_Store", ".tmplog"],  # names (globs) left out at any depth
    "deploy_registry": "registry.cn-hangzhou.aliyuncs.com/xpushare",
    "deploy_tag": None,  # image tag; default: the first 8 characters of the source's HEAD
    "deploy_images": {},  # full image overrides: {scheduler: ..., device_plugin: ..., lib: ...}
    "deploy_virtual_devices": 10,  # <PREFIX>VIRTUAL_DEVICES of the device plugin
    "deploy_plugin_gpus": 2,  # nvidia.com/gpu requested by the plugin container (CUDA form); 0: none
    "deploy_rollout_timeout_s": 120,
    "deploy_mode_timeout_s": 60,
}

#: What each deploy parameter may be besides its default's kind: a ``None`` default is a text or ``null``;
#: ``deploy_make`` is an argv or one string (split like a shell would).
_KINDS: dict[str, tuple[Any, ...]] = {
    **{name: (None, "") for name, value in DEPLOY_DEFAULTS.items() if value is None},
    "deploy_make": (["make", "all"], "make all"),
}
#: The least whole number of each count (the device plugin's virtual devices; its GPUs, 0: none).
_AT_LEAST = {"deploy_virtual_devices": 1, "deploy_plugin_gpus": 0}


def deploy_value_problem(name: str, value: Any) -> str | None:
    """The deploy rules beyond the parameter schema's: counts (:data:`_AT_LEAST`), a non-empty ``deploy_make``,
    ``deploy_images`` a mapping of texts; None when ``value`` keeps them (or ``name`` has none)."""
    if name in _AT_LEAST and isinstance(value, int) and not isinstance(value, bool) and value < _AT_LEAST[name]:
        return f"at least {_AT_LEAST[name]} (got {value!r})"
    if name == "deploy_make":
        if not isinstance(value, (str, list)):
            return f"an argv list or one command line, got {value!r}"
        try:
            if not (shlex.split(value) if isinstance(value, str) else value):
                return "an empty command"
        except ValueError as exc:  # an unbalanced quote
            return f"not a command line: {exc}"
    if name == "deploy_images" and isinstance(value, dict) and not all(isinstance(v, str) for v in value.values()):
        return "a mapping of image names, e.g. {scheduler: registry/name:tag}"
    return None


param_owners.declare("deploy_", {name: _KINDS.get(name, (value,)) for name, value in DEPLOY_DEFAULTS.items()},
                     check=deploy_value_problem)


@dataclass
class DeployRequest:
    """What ``invoke deploy`` (or a legacy task without ``--skip-setup``) asks for.

    ``overrides`` are ``--set name=value`` items; names that are not deploy parameters are refused unless
    ``lenient`` (a legacy task passes its own ``--set`` through). ``label`` names the caller in the
    auto-commit message.
    """

    cluster: str
    mode: str = "auto"
    skip_setup: bool = False
    autocommit: bool = False
    source: str | None = None
    run_id: str | None = None
    overrides: Sequence[str] = ()
    inventory_path: str | None = None
    root: Path = Path(".")
    label: str = "invoke deploy"
    lenient: bool = False



# -------------------------------------------------------------------------------------------- pipeline


@dataclass
class Pipeline:
    """Prints each step's banner and outcome and records them (``deploy.json``)."""

    out: TextIO
    steps: list[dict[str, Any]] = field(default_factory=list)

    def log(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def step(self, number: int, title: str, fn: Callable[[], str]) -> None:
        """Run one step. Raises :class:`StepFailed` (after printing) when it fails."""
        self.log(f"===== {number}. {title} =====")
        t0 = time.monotonic()
        outcome, detail = "ok", ""
        try:
            detail = fn()
        except StepSkipped as exc:
            outcome, detail = "skipped", str(exc)
        except (StepFailed, KubeError) as exc:
            outcome, detail = "FAILED", str(exc)
        except HostUnreachable as exc:
            self._record(number, title, "FAILED", str(exc), t0)
            self.log(f"  -> FAILED: {exc}")
            raise
        except XpushareError as exc:
            outcome, detail = "FAILED", str(exc)
        self._record(number, title, outcome, detail, t0)
        self.log(f"  -> {outcome}: {detail}")
        if outcome == "FAILED":
            raise StepFailed(f"step {number} ({title}) failed: {detail}")

    def _record(self, number: int, title: str, outcome: str, detail: str, t0: float) -> None:
        self.steps.append({"step": number, "title": title, "outcome": outcome, "detail": detail,
                           "duration_s": round(time.monotonic() - t0, 3)})


def deploy_params(cluster: ClusterSpec, overrides: Sequence[str], *, lenient: bool) -> dict[str, Any]:
    """Deploy parameters: :data:`DEPLOY_DEFAULTS` < inventory ``params`` < ``--set``.

    Raises :class:`UsageError` for an unknown ``--set`` name (unless ``lenient``: names outside ``deploy_*`` are
    ignored, a legacy task passes its own ``--set`` through; an unknown ``deploy_*`` name is refused either way),
    and for a value that breaks its parameter's rules (the parameter schema,
    :func:`~xpushare.cases.param_schema.owned_problem`).
    """
    values = parse_overrides(overrides)
    unknown = sorted(k for k in values if k not in DEPLOY_DEFAULTS and (not lenient or k.startswith("deploy_")))
    if unknown:
        raise UsageError(f"unknown deploy parameter(s) for --set: {', '.join(unknown)} "
                         f"(known: {', '.join(DEPLOY_DEFAULTS)})")
    for name, value in values.items():
        problem = owned_problem(name, value) if name in DEPLOY_DEFAULTS else None
        if problem:
            raise UsageError(f"bad --set {name}={value!r}: {problem}")
    params = dict(DEPLOY_DEFAULTS)
    params.update({k: v for k, v in cluster.params.items() if k in DEPLOY_DEFAULTS})
    params.update({k: v for k, v in values.items() if k in DEPLOY_DEFAULTS})
    return params


def _make_argv(value: Any) -> list[str]:
    argv = shlex.split(value) if isinstance(value, str) else [str(a) for a in value or ()]
    if not argv:
        raise UsageError("deploy_make is empty")
    return argv


def _build_host(cluster: ClusterSpec, name: str | None) -> HostSpec:
    if name:
        spec = next((h for h in cluster.hosts if h.name == name), None)
        if spec is None:
            raise UsageError(f"deploy_build_host {name!r} is not a host of cluster {cluster.name!r}")
        return spec
    return master_spec(cluster, "build on; set deploy_build_host")


def cleanup_labels(names: SutNames) -> list[str]:
    """The ``app=`` labels of every legacy test pod (docs/sut/legacy-scripts.md)."""
    g = names.generation
    apps = ("cross-gpu", "small-workload", "idle-small-workload", "memlimit-test", "manual-test", "complex-test",
            "remote-smoke")
    return [f"app={g}-{a}" for a in apps] + ["app=baseline-test"]


def run_deploy(req: DeployRequest, out: TextIO | None = None) -> ExitStatus:
    """Run the pipeline on one k8s cluster. Returns 0, 1 (a step failed) or 3 (build host unreachable).

    Raises :class:`UsageError` / :class:`~xpushare.model.errors.InventoryError` for bad input before any step.
    """
    out = out or sys.stdout
    if req.mode not in MODES:
        raise UsageError(f"--mode must be one of {', '.join(MODES)}, not {req.mode!r}")
    cluster = schema.load(req.inventory_path).cluster(req.cluster)
    check_cluster_params(cluster)  # the inventory's params, as every run checks them (deploy_* too)
    if not cluster.is_kubernetes:
        raise UsageError(f"cluster {cluster.name!r} runs in {cluster.mode} mode; deploy needs Kubernetes")
    params = deploy_params(cluster, req.overrides, lenient=req.lenient)
    names = sut_names(cluster.generation)
    source_text = req.source or params["deploy_source"]
    source = Path(str(source_text)).expanduser().resolve() if source_text else None
    if source is not None and not source.is_dir():
        raise UsageError(f"--source {source}: not a directory")
    if source is None and (not req.skip_setup or not params["deploy_tag"]):
        raise UsageError("give --source PATH (the SUT checkout to sync and build) or set deploy_source"
                         + ("" if not req.skip_setup else "; with --skip-setup, deploy_tag is enough"))
    make = _make_argv(params["deploy_make"])
    build_spec = _build_host(cluster, params["deploy_build_host"])
    run_id = req.run_id or run_store.new_run_id(datetime.now())
    try:
        run_store.validate_run_id(run_id)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    out_dir = run_store.run_dir(req.root, run_id) / cluster.name / "deploy"
    claim_tree(run_store.run_dir(req.root, run_id))
    make_dirs(out_dir)
    remote_dir = str(params["deploy_remote_dir"])
    excludes = [str(e) for e in params["deploy_excludes"] or ()]
    pipe = Pipeline(out)
    pipe.log(f"deploy {cluster.name} ({names.generation}, mode {req.mode}) -> {out_dir}")
    build_host: Host | None = None
    master = connect(master_spec(cluster))
    kubectl = kubectl_for(cluster, master)
    state: dict[str, Any] = {}

    def host() -> Host:
        nonlocal build_host
        if build_host is None:
            build_host = master if build_spec.name == master_spec(cluster).name else connect(build_spec)
        return build_host

    def commit() -> str:
        if req.skip_setup:
            raise StepSkipped("--skip-setup")
        if not req.autocommit:
            raise StepSkipped("no --autocommit")
        assert source is not None
        return auto_commit(source, req.label)

    def sync() -> str:
        if req.skip_setup:
            raise StepSkipped("--skip-setup")
        assert source is not None
        return sync_source(source, host(), build_spec, remote_dir, rsync=str(params["deploy_rsync"]),
                           excludes=excludes, log=pipe.log)

    def build() -> str:
        if req.skip_setup:
            raise StepSkipped("--skip-setup")
        t0 = time.monotonic()
        res = host().run(["sh", "-c", 'cd "$1" && shift && exec "$@"', "sh", remote_dir, *make],
                         timeout=float(params["deploy_make_timeout_s"]))
        atomic_write_text(out_dir / "build.log", f"$ cd {remote_dir} && {shlex.join(make)}\n{res.stdout}{res.stderr}"
                                                 f"\nexit {res.exit_code}\n")
        if not res.ok:
            tail = "\n".join((res.stdout + res.stderr).strip().splitlines()[-20:])
            pipe.log(_indent(tail))
            raise StepFailed(f"{shlex.join(make)} exited {res.exit_code} (build.log)")
        return f"{shlex.join(make)} in {remote_dir}: exit 0 in {time.monotonic() - t0:.1f} s"

    def render() -> str:
        tag = str(params["deploy_tag"]) if params["deploy_tag"] else git_tag(source)  # type: ignore[arg-type]
        images = image_names(names, str(params["deploy_registry"]), tag, params["deploy_images"])
        state["scheduler"] = render_scheduler(names, images["scheduler"], req.mode)
        state["plugin"] = render_device_plugin(names, images, virtual_devices=int(params["deploy_virtual_devices"]),
                                               plugin_gpus=int(params["deploy_plugin_gpus"]))
        for name, doc in (("scheduler.yaml", state["scheduler"]), ("device-plugin.yaml", state["plugin"])):
            atomic_write_text(out_dir / name, dump_manifests(doc))
        return f"tag {tag}: {images['scheduler']}, {names.env_scheduling_mode}={req.mode}"

    def clean() -> str:
        for label in cleanup_labels(names):
            kubectl.delete(label, wait=False)
        kubectl.run(["delete", "daemonset", names.device_plugin_daemonset, names.scheduler_daemonset,
                     "--ignore-not-found", "--wait=true", "--timeout=60s"], namespace=names.namespace, wait_s=60)
        deadline = time.monotonic() + 60
        while True:
            left = [p.name for sel in (names.scheduler_label, names.device_plugin_label)
                    for p in kubectl.list_pods(sel, namespace=names.namespace)]
            if not left:
                return "legacy test pods and both DaemonSets deleted"
            if time.monotonic() > deadline:
                raise StepFailed(f"pods still there after 60 s: {', '.join(left)}")
            time.sleep(1.0)

    def apply() -> str:
        timeout = float(params["deploy_rollout_timeout_s"])
        for doc in (state["scheduler"], state["plugin"]):
            kubectl.apply(dump_manifests(doc), namespace=names.namespace)
        for ds in (names.scheduler_daemonset, names.device_plugin_daemonset):
            kubectl.rollout_status("daemonset", ds, namespace=names.namespace, timeout_s=timeout)
        return f"applied; rollout of {names.scheduler_daemonset} and {names.device_plugin_daemonset} complete"

    def verify() -> str:
        want = req.mode.upper()
        deadline = time.monotonic() + float(params["deploy_mode_timeout_s"])
        while True:
            desired = kubectl.get_daemonset(names.scheduler_daemonset, namespace=names.namespace).desired
            logs = kubectl.logs_by_pod(names.scheduler_label, timestamps=False, namespace=names.namespace)
            seen = {pod: parse_text(text) for pod, text in logs.items()}
            modes = {pod: s.scheduling_mode for pod, s in seen.items()}
            if len(modes) >= max(1, desired) and all(m == want for m in modes.values()):
                lines = [f"{pod}: {s.scheduling_mode_line}" for pod, s in seen.items()]
                atomic_write_text(out_dir / "scheduler-mode.log", "\n".join(lines) + "\n")
                return "; ".join(lines)
            if time.monotonic() > deadline:
                shown = ", ".join(f"{p}: {m or '(no Scheduling mode line)'}" for p, m in modes.items()) or "no pods"
                raise StepFailed(f"expected Scheduling mode: {want} from {desired} scheduler pod(s); seen {shown}")
            time.sleep(1.0)

    status = ExitStatus.OK
    try:
        for number, title, fn in (
            (0, "Local Auto-Commit", commit),
            (1, f"Syncing Code to {build_spec.name}:{remote_dir}", sync),
            (2, "Remote Build", build),
            (3, "Rendering Manifests", render),
            (4, "Cleaning Cluster", clean),
            (5, "Deploying New System", apply),
            (6, "Verifying Scheduling Mode", verify),
        ):
            pipe.step(number, title, fn)
    except StepFailed:
        status = ExitStatus.FAILED
    except HostUnreachable:
        status = ExitStatus.UNREACHABLE
    finally:
        for h in {id(h): h for h in (master, build_host) if h is not None}.values():
            h.close()
        atomic_write_text(out_dir / "deploy.json", json.dumps(
            {"cluster": cluster.name, "mode": req.mode, "skip_setup": req.skip_setup, "steps": pipe.steps,
             "exit_status": int(status)}, indent=2) + "\n")
    pipe.log(f"deploy {'succeeded' if status == ExitStatus.OK else 'FAILED'} ({out_dir / 'deploy.json'})")
    return status


def _indent(text: str) -> str:
    return "\n".join(f"    {line}" for line in text.splitlines())
