"""``invoke deploy``: the setup pipeline of ``remote-test.sh`` (sut-interfaces.md §10.2), step by step.

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

import copy
import fnmatch
import json
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

import yaml

from xpushare.collect.scheduler_log import parse_text
from xpushare.data import manifests_dir
from xpushare.inventory import schema
from xpushare.inventory.schema import ClusterSpec, HostSpec
from xpushare.inventory.sut import SutNames, sut_names
from xpushare.model.errors import HostUnreachable, UsageError, XpushareError
from xpushare.model.exit_status import ExitStatus
from xpushare.model.overrides import parse_overrides
from xpushare.report import artifacts
from xpushare.transport.base import Host
from xpushare.transport.hosts import connect
from xpushare.transport.kubectl import Kubectl, KubeError
from xpushare.transport.manifest_yaml import dump_manifests

TEMPLATES = manifests_dir() / "legacy"
MODES = ("auto", "serial", "concurrent")

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


class StepFailed(XpushareError):
    """A pipeline step failed; the message is its one-line outcome."""


class StepSkipped(Exception):
    """A step had nothing to do; the message says why."""


# ------------------------------------------------------------------------------------------- rendering


def load_template(name: str) -> dict[str, Any]:
    """One template of ``manifests/legacy/`` parsed (``scheduler.yaml`` / ``device-plugin.yaml``)."""
    return yaml.safe_load((TEMPLATES / name).read_text(encoding="utf-8"))


def rename_generation(obj: Any, names: SutNames) -> Any:
    """A copy of ``obj`` with ``xpushare``/``XPUSHARE_`` replaced by the generation's names in every string
    key and value (the templates are written for the xpushare generation; nvshare is a rename)."""
    if names.generation == "xpushare":
        return copy.deepcopy(obj)

    def text(s: str) -> str:
        return s.replace("XPUSHARE_", names.env_prefix).replace("xpushare", names.generation)

    if isinstance(obj, dict):
        return {text(k) if isinstance(k, str) else k: rename_generation(v, names) for k, v in obj.items()}
    if isinstance(obj, list):
        return [rename_generation(v, names) for v in obj]
    return text(obj) if isinstance(obj, str) else obj


def set_env(container: dict[str, Any], name: str, value: str) -> None:
    """Set ``name`` in a container's env list: every existing entry of that name is replaced by one
    ``{name, value}`` at the first one's place (appended when absent). Never leaves a duplicate."""
    env = container.setdefault("env", [])
    if not isinstance(env, list):
        raise ValueError("container env must be a list")
    first = next((i for i, e in enumerate(env) if isinstance(e, dict) and e.get("name") == name), None)
    kept = [e for e in env if not (isinstance(e, dict) and e.get("name") == name)]
    entry = {"name": name, "value": str(value)}
    if first is None:
        kept.append(entry)
    else:
        kept.insert(first, entry)
    container["env"] = kept


def _container(doc: Mapping[str, Any], name: str) -> dict[str, Any]:
    containers = doc["spec"]["template"]["spec"]["containers"]
    found = next((c for c in containers if c.get("name") == name), None)
    if found is None:
        raise ValueError(f"template {doc['metadata']['name']}: no container {name!r}")
    return found


def image_names(names: SutNames, registry: str, tag: str, overrides: Mapping[str, str] | None = None) -> dict[str, str]:
    """``{scheduler, device_plugin, lib}`` images: ``<registry>/<gen>-<component>:<tag>`` (§1.5) or overrides."""
    g = names.generation
    images = {
        "scheduler": f"{registry}/{g}-scheduler:{tag}",
        "device_plugin": f"{registry}/{g}-device-plugin:{tag}",
        "lib": f"{registry}/{g}-lib:{tag}",
    }
    images.update({k: str(v) for k, v in (overrides or {}).items() if k in images})
    return images


def render_scheduler(names: SutNames, image: str, mode: str,
                     template: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The scheduler DaemonSet: the template renamed for the generation, its image set and
    ``<PREFIX>SCHEDULING_MODE=<mode>`` in the container's env list. Raises ValueError for a bad mode."""
    if mode not in MODES:
        raise ValueError(f"scheduling mode must be one of {', '.join(MODES)}, not {mode!r}")
    doc = rename_generation(template if template is not None else load_template("scheduler.yaml"), names)
    container = _container(doc, names.scheduler_daemonset)
    container["image"] = image
    set_env(container, names.env_scheduling_mode, mode)
    return doc


def render_device_plugin(names: SutNames, images: Mapping[str, str], *, virtual_devices: int, plugin_gpus: int,
                         template: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The device-plugin DaemonSet (CUDA form): both images, ``<PREFIX>VIRTUAL_DEVICES`` and the
    ``nvidia.com/gpu`` request of the plugin container (left out when ``plugin_gpus`` is 0)."""
    doc = rename_generation(template if template is not None else load_template("device-plugin.yaml"), names)
    _container(doc, f"{names.generation}-lib")["image"] = images["lib"]
    plugin = _container(doc, names.device_plugin_daemonset)
    plugin["image"] = images["device_plugin"]
    set_env(plugin, names.env_virtual_devices, str(int(virtual_devices)))
    limits = plugin.setdefault("resources", {}).setdefault("limits", {})
    if plugin_gpus > 0:
        limits["nvidia.com/gpu"] = int(plugin_gpus)
    else:
        limits.pop("nvidia.com/gpu", None)
    return doc


# --------------------------------------------------------------------------------------------- syncing


def ssh_command(spec: HostSpec) -> list[str]:
    """The ``ssh`` argv rsync uses (``-e``) for an inventory host: port, user, key, known_hosts and the
    host-key policy of the inventory (strict -> yes, accept-new, ignore -> no), batch mode (no password)."""
    opts = spec.ssh
    argv = ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={max(1, int(opts.connect_timeout))}"]
    if opts.ssh_config:
        argv += ["-F", str(Path(opts.ssh_config).expanduser())]
    if opts.port:
        argv += ["-p", str(opts.port)]
    if opts.user:
        argv += ["-l", opts.user]
    if opts.identity:
        argv += ["-i", str(Path(opts.identity).expanduser()), "-o", "IdentitiesOnly=yes"]
    if opts.host_key_policy == "ignore":
        argv += ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"]
    else:
        policy = "yes" if opts.host_key_policy == "strict" else "accept-new"
        argv += ["-o", f"StrictHostKeyChecking={policy}", "-o",
                 f"UserKnownHostsFile={Path(opts.known_hosts).expanduser()}"]
    return argv


def rsync_argv(rsync: str, source: Path, spec: HostSpec, remote_dir: str, excludes: Sequence[str]) -> list[str]:
    """``rsync -az --exclude ... -e '<ssh>' <source>/ <target>:<dir>/`` (a local path for a local host)."""
    argv = [rsync, "-az"]
    for pattern in excludes:
        argv += ["--exclude", pattern]
    if spec.local:
        return [*argv, f"{source}/", f"{remote_dir.rstrip('/')}/"]
    return [*argv, "-e", shlex.join(ssh_command(spec)), f"{source}/", f"{spec.target}:{remote_dir.rstrip('/')}/"]


def _excluded(name: str, excludes: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in excludes)


def make_archive(source: Path, archive: Path, excludes: Sequence[str]) -> int:
    """A gzip tar of ``source``'s contents (``./...``; excluded names left out at any depth); file count."""
    count = 0

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        nonlocal count
        if info.name != "." and _excluded(Path(info.name).name, excludes):
            return None
        if info.isfile():
            count += 1
        return info

    with tarfile.open(archive, "w:gz") as tar:
        tar.add(str(source), arcname=".", filter=keep)
    return count


def sync_source(source: Path, host: Host, spec: HostSpec, remote_dir: str, *, rsync: str,
                excludes: Sequence[str], log: Callable[[str], None]) -> str:
    """Copy the source tree to ``remote_dir`` on the build host; return how (one line).

    rsync when it is installed here and on the host (and succeeds); otherwise one tar archive over SFTP
    (``Host.put``) extracted with ``tar -xzf`` there. Raises :class:`StepFailed` when both fail.
    """
    local_rsync = shutil.which(rsync)
    reason = f"{rsync!r} not installed here"
    if local_rsync is not None:
        remote_ok = spec.local or host.run(["sh", "-c", "command -v rsync"], timeout=30).ok
        if not remote_ok:
            reason = "rsync not installed on the build host"
        else:
            host.run(["mkdir", "-p", remote_dir], timeout=30, check=True)
            argv = rsync_argv(local_rsync, source, spec, remote_dir, excludes)
            t0 = time.monotonic()
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=3600, stdin=subprocess.DEVNULL)
            if proc.returncode == 0:
                return f"rsync to {remote_dir} in {time.monotonic() - t0:.1f} s"
            reason = f"rsync exited {proc.returncode}: {(proc.stderr.strip().splitlines() or [''])[-1]}"
    log(f"  {reason}; falling back to a tar archive over SFTP")
    with tempfile.TemporaryDirectory(prefix="xpushare-sync-") as tmp:
        archive = Path(tmp) / "source.tar.gz"
        t0 = time.monotonic()
        files = make_archive(source, archive, excludes)
        remote_archive = f"{remote_dir.rstrip('/')}.xpushare-sync.tar.gz"
        host.put(archive, remote_archive)
        res = host.run(["sh", "-c", 'mkdir -p "$1" && tar -xzf "$2" -C "$1"; rc=$?; rm -f "$2"; exit $rc',
                        "sh", remote_dir, remote_archive], timeout=600)
        if not res.ok:
            raise StepFailed(f"extracting the archive on {host.name} failed (exit {res.exit_code}): "
                             f"{res.stderr.strip()[-300:]}")
        return (f"sftp: {files} files ({archive.stat().st_size / 1e6:.1f} MB archive) to {remote_dir} "
                f"in {time.monotonic() - t0:.1f} s ({reason})")


# ------------------------------------------------------------------------------------------------- git


def _git(source: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(source), *args], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


def git_tag(source: Path) -> str:
    """First 8 characters of ``git rev-parse HEAD`` in ``source`` (the image tag ``make all`` pushes)."""
    res = _git(source, "rev-parse", "HEAD")
    if res.returncode != 0 or len(res.stdout.strip()) < 8:
        raise StepFailed(f"cannot read the image tag from {source} (git rev-parse HEAD: "
                         f"{res.stderr.strip() or 'no commit'}); set deploy_tag")
    return res.stdout.strip()[:8]


def auto_commit(source: Path, label: str) -> str:
    """``git add -A`` and commit ``wip: auto-commit by <label> [HH:MM:SS]`` when the tree is dirty."""
    status = _git(source, "status", "--porcelain")
    if status.returncode != 0:
        raise StepFailed(f"git status in {source}: {status.stderr.strip()}")
    if not status.stdout.strip():
        raise StepSkipped("nothing to commit")
    for args in (("add", "-A"), ("commit", "-q", "-m", f"wip: auto-commit by {label} [{datetime.now():%H:%M:%S}]")):
        res = _git(source, *args)
        if res.returncode != 0:
            raise StepFailed(f"git {args[0]}: {(res.stderr or res.stdout).strip()}")
    return f"committed {len(status.stdout.splitlines())} change(s) as {git_tag(source)}"


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

    Raises :class:`UsageError` for an unknown ``--set`` name (unless ``lenient``: other names are ignored).
    """
    values = parse_overrides(overrides)
    unknown = sorted(k for k in values if k not in DEPLOY_DEFAULTS)
    if unknown and not lenient:
        raise UsageError(f"unknown deploy parameter(s) for --set: {', '.join(unknown)} "
                         f"(known: {', '.join(DEPLOY_DEFAULTS)})")
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
    masters = cluster.by_role("master")
    if not masters:
        raise UsageError(f"cluster {cluster.name!r} has no master to build on; set deploy_build_host")
    return masters[0]


def cleanup_labels(names: SutNames) -> list[str]:
    """The ``app=`` labels of every legacy test pod (sut-interfaces.md §10.2-10.10)."""
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
    if cluster.mode != "k8s":
        raise UsageError(f"cluster {cluster.name!r} runs in {cluster.mode} mode; deploy needs Kubernetes")
    params = deploy_params(cluster, req.overrides, lenient=req.lenient)
    names = sut_names(cluster.sut)
    source_text = req.source or params["deploy_source"]
    source = Path(str(source_text)).expanduser().resolve() if source_text else None
    if source is not None and not source.is_dir():
        raise UsageError(f"--source {source}: not a directory")
    if source is None and (not req.skip_setup or not params["deploy_tag"]):
        raise UsageError("give --source PATH (the SUT checkout to sync and build) or set deploy_source"
                         + ("" if not req.skip_setup else "; with --skip-setup, deploy_tag is enough"))
    make = _make_argv(params["deploy_make"])
    build_spec = _build_host(cluster, params["deploy_build_host"])
    run_id = req.run_id or artifacts.new_run_id(datetime.now())
    try:
        artifacts.validate_run_id(run_id)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    out_dir = artifacts.run_dir(req.root, run_id) / cluster.name / "deploy"
    out_dir.mkdir(parents=True, exist_ok=True)
    remote_dir = str(params["deploy_remote_dir"])
    excludes = [str(e) for e in params["deploy_excludes"] or ()]
    pipe = Pipeline(out)
    pipe.log(f"deploy {cluster.name} ({names.generation}, mode {req.mode}) -> {out_dir}")
    build_host: Host | None = None
    master = connect(cluster.by_role("master")[0])
    kubectl = Kubectl(master, kubectl=cluster.kubectl, kubeconfig=cluster.kubeconfig,
                      context=cluster.context, namespace=cluster.namespace)
    state: dict[str, Any] = {}

    def host() -> Host:
        nonlocal build_host
        if build_host is None:
            build_host = master if build_spec.name == cluster.by_role("master")[0].name else connect(build_spec)
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
        (out_dir / "build.log").write_text(f"$ cd {remote_dir} && {shlex.join(make)}\n{res.stdout}{res.stderr}"
                                           f"\nexit {res.exit_code}\n", encoding="utf-8")
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
            (out_dir / name).write_text(dump_manifests(doc), encoding="utf-8")
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
                (out_dir / "scheduler-mode.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
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
        (out_dir / "deploy.json").write_text(json.dumps(
            {"cluster": cluster.name, "mode": req.mode, "skip_setup": req.skip_setup, "steps": pipe.steps,
             "exit_status": int(status)}, indent=2) + "\n", encoding="utf-8")
    pipe.log(f"deploy {'succeeded' if status == ExitStatus.OK else 'FAILED'} ({out_dir / 'deploy.json'})")
    return status


def _indent(text: str) -> str:
    return "\n".join(f"    {line}" for line in text.splitlines())
