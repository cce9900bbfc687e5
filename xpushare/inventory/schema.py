"""Inventory: clusters, hosts, roles and SSH settings, read from YAML and validated.

Schema (``inventory/inventory.yaml``; README "Inventory" documents every key)::

    defaults:
      ssh: {user: root, port: 22, identity: ~/.ssh/id_ed25519, host_key_policy: accept-new,
            connect_timeout: 10}
    clusters:
      c1:
        mode: k8s            # k8s | host
        sut: nvshare         # nvshare | xpushare | hami-core | mps (the GPU-sharing system; hami-core, mps: host mode)
        backend: cuda        # cuda | npu
        gpu: {model: Tesla T4, memory_gib: 16}
        hosts:
          c1-master: {address: 10.0.0.10, roles: [master]}
          c1-gpu[1:2]: {roles: [gpu]}      # ranges expand to c1-gpu1, c1-gpu2
      bm1:
        mode: host
        hosts:
          gpu-box: {connection: local, roles: [master, gpu]}   # this machine: no SSH

The built-in cluster ``local`` (this machine, no SSH, ``mode: host``) exists without any file.
Every problem is an :class:`~xpushare.model.errors.InventoryError` whose message is one line naming the file
and the offending key.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from xpushare.inventory import nodesets, release, sut_profiles
from xpushare.model import strict_yaml
from xpushare.model.errors import InventoryError

DEFAULT_INVENTORY = Path("inventory/inventory.yaml")
#: Written by ``invoke lab.up``: its cluster ``lab`` is available without naming the file.
LAB_INVENTORY = Path(".lab/inventory.yaml")
INVENTORY_ENV = "XPUSHARE_INVENTORY"
LOCAL_CLUSTER = "local"

MODE_K8S = "k8s"
MODE_HOST = "host"
#: A cluster's ``mode``: how its workloads run. Only this module and the backend factory
#: (:func:`xpushare.engine.backend_factory.make_backend`) test the mode's string; every other module asks
#: :attr:`ClusterSpec.is_kubernetes` / :attr:`ClusterSpec.is_host`, :func:`is_kubernetes_mode` for a recorded
#: mode, or the backend (tests/unit/test_mode_strings.py).
MODES = (MODE_K8S, MODE_HOST)


def is_kubernetes_mode(mode: str) -> bool:
    """Whether a cluster ``mode`` (:data:`MODES`, also as recorded in ``run.json``, ``result.json`` and a
    case's ``plan.json``) runs workloads as Kubernetes pods, rather than as processes on the GPU hosts."""
    return mode == MODE_K8S


def is_host_mode(mode: str) -> bool:
    """Whether a cluster ``mode`` (:data:`MODES`) runs workloads as processes on the GPU hosts (no Kubernetes)."""
    return mode == MODE_HOST
SUTS = tuple(sut_profiles.PROFILES)
"""The inventory's ``sut`` values (:data:`xpushare.inventory.sut_profiles.PROFILES`)."""
BACKENDS = ("cuda", "npu")
ROLES = ("master", "gpu")
HOST_KEY_POLICIES = ("strict", "accept-new", "ignore")

_SSH_KEYS = {
    "user",
    "port",
    "identity",
    "host_key_policy",
    "connect_timeout",
    "known_hosts",
    "ssh_config",
    "keepalive_s",
    "connect_retries",
}
_HOST_KEYS = {"address", "port", "user", "identity", "roles", "ssh", "gpus", "connection"}
#: How a host is reached (Ansible's ``ansible_connection``): over SSH, or it is this machine (no SSH).
CONNECTIONS = ("ssh", "local")
_SSH_ONLY_KEYS = ("address", "port", "user", "identity", "ssh")
_CLUSTER_KEYS = {
    "mode",
    "sut",
    "backend",
    "gpu",
    "hosts",
    "ssh",
    "kubeconfig",
    "context",
    "namespace",
    "kubectl",
    "sut_lib",
    "scheduler",
    "params",
    "python",
    "workdir",
    "visible_devices",
    "release_profile",
}
#: How the host backend sets ``NVIDIA_VISIBLE_DEVICES`` for a workload (``CUDA_VISIBLE_DEVICES`` is always the
#: assigned GPU's index): ``unset`` removes it (a bare-metal user launching with ``CUDA_VISIBLE_DEVICES``), ``uuid``
#: sets it to the assigned GPU's UUID (what the device plugin gives a pod in Kubernetes).
VISIBLE_DEVICES = ("unset", "uuid")
_SCHEDULER_KEYS = {"metrics_url", "log_file", "process_name", "binary", "state_dir", "env"}
_GPU_KEYS = {"model", "memory_gib", "count"}
_TOP_KEYS = {"defaults", "clusters"}
_DEFAULT_KEYS = {"ssh", "params"}

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_HOSTNAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")
#: A cluster name names a directory of every run (at most 64 characters, like a run id).
_CLUSTER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
#: The namespace of a cluster's lasting objects when the inventory names none (:attr:`ClusterSpec.home_namespace`).
DEFAULT_NAMESPACE = "default"
#: A Kubernetes namespace (an RFC 1123 label).
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
#: The most GPUs a host may declare (``gpus``: a count, or indices below it).
MAX_GPUS = 1024
#: The most connection attempts ``connect_retries`` may ask for.
MAX_CONNECT_RETRIES = 100
#: The longest time in seconds an SSH option may give (``connect_timeout``, ``keepalive_s``): one day.
MAX_SSH_SECONDS = 86400.0


@dataclass(frozen=True)
class SshOptions:
    """How to reach a host over SSH. Times are seconds; ``identity`` is a private-key path (never its content)."""

    user: str | None = None
    port: int | None = None
    identity: str | None = None
    host_key_policy: str = "accept-new"
    connect_timeout: float = 10.0
    known_hosts: str = "~/.ssh/known_hosts"
    ssh_config: str | None = None
    keepalive_s: float = 15.0
    connect_retries: int = 3


@dataclass(frozen=True)
class HostSpec:
    """One inventory host: its name, where to reach it and what it is for."""

    name: str
    roles: tuple[str, ...]
    address: str | None = None
    ssh: SshOptions = field(default_factory=SshOptions)
    gpus: tuple[int, ...] | None = None
    local: bool = False
    """True for this machine (no SSH)."""

    @property
    def target(self) -> str:
        """What to connect to: the address, else the name (an ``~/.ssh/config`` alias)."""
        return self.address or self.name


@dataclass(frozen=True)
class SchedulerSpec:
    """Where a host-mode scheduler exposes its evidence (all optional)."""

    metrics_url: str | None = None
    log_file: str | None = None
    process_name: str | None = None
    binary: str | None = None
    """Where ``invoke deploy`` installs the scheduler (host mode)."""
    state_dir: str | None = None
    """Where deploy keeps the source copy, the build and the scheduler's pid files."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Extra scheduler environment deploy starts it with (``XPUSHARE_COMPUTE_WINDOW_MS`` ...)."""


@dataclass(frozen=True)
class ClusterSpec:
    """One cluster of the inventory."""

    name: str
    mode: str
    sut: str
    backend: str
    gpu_model: str | None
    gpu_memory_gib: float | None
    hosts: tuple[HostSpec, ...]
    kubeconfig: str | None = None
    context: str | None = None
    namespace: str | None = None
    """Where the test pods run: None (the default) a namespace of each run's own (``xpushare-<run id>``), which
    the tool creates and removes; a name: that existing namespace, of which the tool deletes only what it
    labelled (docs/config.md §namespaces)."""
    kubectl: str = "kubectl"
    sut_lib: str | None = None
    scheduler: SchedulerSpec = field(default_factory=SchedulerSpec)
    params: Mapping[str, Any] = field(default_factory=dict)
    python: str = "python3"
    workdir: str | None = None
    """Where workloads and samplers live on the hosts (host mode); default: a temp dir per run."""
    visible_devices: str = "unset"
    """Host mode: ``NVIDIA_VISIBLE_DEVICES`` of a workload, one of :data:`VISIBLE_DEVICES` (whatever the tool's
    or the host's own environment holds)."""
    gpu_count: int | None = None
    """The inventory's ``gpu.count`` (None: not given)."""
    release_profile: str | None = None
    """The release profile the inventory names (:mod:`xpushare.inventory.release`); None: the default one."""

    @property
    def release_profile_name(self) -> str:
        """The release profile that decides this cluster's runs: the inventory's ``release_profile``, else
        :func:`xpushare.inventory.release.default_profile_name` of its mode, GPU model and GPU count."""
        if self.release_profile:
            return self.release_profile
        gpus = release.gpu_count(self.gpu_count, [h.gpus for h in self.hosts if "gpu" in h.roles])
        return release.default_profile_name(kubernetes=self.is_kubernetes, gpu_model=self.gpu_model, gpus=gpus)

    @property
    def profile(self) -> sut_profiles.SutProfile:
        """The GPU-sharing system of the cluster (its ``sut``): how it sets quotas, what proves it in a path."""
        return sut_profiles.profile(self.sut)

    @property
    def generation(self) -> str:
        """The naming generation of the project's SUT the tool's own identifiers follow
        (:func:`xpushare.inventory.sut.sut_names`): the ``sut`` itself for ``xpushare``/``nvshare``, ``xpushare``
        for another system, which ignores them."""
        return self.profile.generation

    @property
    def is_kubernetes(self) -> bool:
        """The workloads are Kubernetes pods and the SUT its DaemonSets (``mode: k8s``)."""
        return is_kubernetes_mode(self.mode)

    @property
    def home_namespace(self) -> str:
        """The namespace of the cluster's own objects that outlive a run (the run lease, metrics-check's and
        envcheck's probe pods): the inventory's ``namespace``, else ``default``."""
        return self.namespace or DEFAULT_NAMESPACE

    @property
    def is_host(self) -> bool:
        """The workloads are processes on the GPU hosts and the SUT runs on them (``mode: host``)."""
        return is_host_mode(self.mode)

    def by_role(self, role: str) -> list[HostSpec]:
        """Hosts that carry ``role`` (``master``, ``gpu``) or every host for ``all``."""
        if role == "all":
            return list(self.hosts)
        return [h for h in self.hosts if role in h.roles]

    def host(self, name: str) -> HostSpec:
        for h in self.hosts:
            if h.name == name:
                return h
        raise InventoryError(f"cluster {self.name!r} has no host {name!r}")


@dataclass(frozen=True)
class Inventory:
    """All clusters, by name; ``source`` is the file they came from (None: built-ins only)."""

    clusters: Mapping[str, ClusterSpec]
    source: Path | None

    def cluster(self, name: str) -> ClusterSpec:
        """The cluster called ``name``; raises :class:`InventoryError` listing the known ones."""
        try:
            return self.clusters[name]
        except KeyError:
            known = ", ".join(sorted(self.clusters))
            where = self.source or "built-in inventory"
            raise InventoryError(f"{where}: unknown cluster {name!r} (known: {known})") from None


def local_cluster() -> ClusterSpec:
    """The built-in ``local`` cluster: this machine, no SSH, host mode, xpushare naming."""
    return ClusterSpec(
        name=LOCAL_CLUSTER,
        mode=MODE_HOST,
        sut="xpushare",
        backend="cuda",
        gpu_model=None,
        gpu_memory_gib=None,
        hosts=(HostSpec(name="localhost", roles=("master", "gpu"), local=True),),
    )


def expand_host_pattern(pattern: str) -> list[str]:
    """Expand a host key with ranges into names: ``node[1:3]``, ``node[01-03]`` (zero padding kept), and
    ClusterShell's node sets, ``n[1-3,5]``, ``rack[1:2]-gpu[1:2]`` (``:`` and ``-`` both mark a range).

    Raises :class:`ValueError` for a pattern ClusterShell cannot parse (a descending range included) or one of more
    than :data:`~xpushare.inventory.nodesets.MAX_NODES` hosts.
    """
    if "[" not in pattern and "]" not in pattern:
        return [pattern]
    ranged = re.sub(r"\[[^\]]*\]", lambda m: m.group(0).replace(":", "-"), pattern)
    try:
        return nodesets.expand(ranged)
    except ValueError as exc:
        raise ValueError(f"bad host range {pattern!r}: {exc}") from None


def resolve_path(explicit: str | os.PathLike[str] | None) -> tuple[Path, bool]:
    """The inventory path to read and whether it was asked for explicitly (flag or env)."""
    if explicit:
        return Path(explicit), True
    env = os.environ.get(INVENTORY_ENV)
    if env:
        return Path(env), True
    return DEFAULT_INVENTORY, False


def load(path: str | os.PathLike[str] | None = None) -> Inventory:
    """Load and validate an inventory; ``local`` is always present.

    ``path``: the ``--inventory`` flag value; falls back to ``$XPUSHARE_INVENTORY``, then
    ``inventory/inventory.yaml`` (whose absence is fine: only ``local`` exists then). Clusters of
    ``.lab/inventory.yaml`` (written by ``invoke lab.up``) are added when that file exists.
    Raises :class:`InventoryError` (one line naming the file and the problem).
    """
    file, explicit = resolve_path(path)
    if not file.exists():
        if explicit:
            raise InventoryError(f"{file}: inventory file not found")
        inv = Inventory({LOCAL_CLUSTER: local_cluster()}, None)
    else:
        inv = _read(file)
    if LAB_INVENTORY.exists() and file != LAB_INVENTORY:
        lab = _read(LAB_INVENTORY)
        extra = {k: v for k, v in lab.clusters.items() if k not in inv.clusters}
        inv = Inventory({**inv.clusters, **extra}, inv.source)
    return inv


def _read(file: Path) -> Inventory:
    try:
        text = strict_yaml.read_text(file)
    except OSError as exc:
        raise InventoryError(f"{file}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise InventoryError(f"{file}: not UTF-8 text (an inventory is YAML)") from None
    except ValueError as exc:
        raise InventoryError(f"{file}: {exc} (an inventory is a small YAML file)") from None
    return parse(text, source=file)


def parse(text: str, *, source: Path | str = "<inventory>") -> Inventory:
    """Parse inventory YAML text. Raises :class:`InventoryError` naming ``source`` and the problem."""
    where = str(source)
    try:
        data = strict_yaml.load(text)
    except RecursionError:
        raise InventoryError(f"{where}: bad YAML: nested too deeply") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        pos = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise InventoryError(f"{where}: bad YAML{pos}: {problem}") from None
    if data is None:
        data = {}
    return _Parser(where).inventory(data)


class _Parser:
    def __init__(self, where: str) -> None:
        self.where = where

    def fail(self, key_path: str, problem: str) -> InventoryError:
        shown = "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in key_path)  # one line, whatever keys hold
        return InventoryError(f"{self.where}: {shown}: {problem}")

    def mapping(self, value: Any, key_path: str, allowed: Iterable[str]) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(key_path, f"expected a mapping, got {type(value).__name__}")
        allowed = set(allowed)
        for key in value:
            if key not in allowed:
                raise self.fail(key_path, f"unknown key {key!r} (allowed: {', '.join(sorted(allowed))})")
        return {k: self.expand_env(v, f"{key_path}.{k}") for k, v in value.items()}

    def expand_env(self, value: Any, key_path: str) -> Any:
        if not isinstance(value, str):
            return value

        def sub(m: re.Match[str]) -> str:
            name = m.group(1)
            if name not in os.environ:
                raise self.fail(key_path, f"environment variable ${{{name}}} is not set")
            return os.environ[name]

        return _ENV_REF.sub(sub, value)

    def choice(self, value: Any, key_path: str, choices: tuple[str, ...], default: str) -> str:
        if value is None:
            return default
        if value not in choices:
            raise self.fail(key_path, f"{value!r} is not one of {', '.join(choices)}")
        return str(value)

    def ssh(self, value: Any, key_path: str, base: SshOptions) -> SshOptions:
        raw = self.mapping(value, key_path, _SSH_KEYS)
        if "port" in raw:
            raw["port"] = self.port(raw["port"], f"{key_path}.port")
        if "host_key_policy" in raw:
            raw["host_key_policy"] = self.choice(
                raw["host_key_policy"], f"{key_path}.host_key_policy", HOST_KEY_POLICIES, "accept-new"
            )
        for key in ("connect_timeout", "keepalive_s"):
            if key in raw:
                raw[key] = self.number(raw[key], f"{key_path}.{key}", most=MAX_SSH_SECONDS)
        if "connect_retries" in raw:
            raw["connect_retries"] = self.count(raw["connect_retries"], f"{key_path}.connect_retries",
                                                MAX_CONNECT_RETRIES)
        for key in ("user", "identity", "known_hosts", "ssh_config"):
            if key in raw and raw[key] is not None:
                raw[key] = self.text(raw[key], f"{key_path}.{key}")
        return replace(base, **raw)

    def env_map(self, value: Any, key_path: str) -> dict[str, str]:
        """An environment mapping (NAME: value, values as strings); None is empty."""
        if value is None:
            return {}
        if not isinstance(value, dict) or not all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(k)) for k in value):
            raise self.fail(key_path, "expected a mapping of environment variable names to values")
        return {str(k): str(v) for k, v in value.items()}

    def port(self, value: Any, key_path: str) -> int:
        if not isinstance(value, int) or isinstance(value, bool) or not 0 < value < 65536:
            raise self.fail(key_path, f"port must be an integer 1..65535, got {value!r}")
        return value

    def number(self, value: Any, key_path: str, *, most: float = math.inf) -> float:
        """A finite number 0..``most``."""
        if (not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value)
                or not 0 <= value <= most):
            bound = "" if most == math.inf else f" up to {most:g}"
            raise self.fail(key_path, f"expected a non-negative number{bound}, got {value!r}")
        return float(value)

    def count(self, value: Any, key_path: str, most: int) -> int:
        """A whole number 0..``most``."""
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= most:
            raise self.fail(key_path, f"expected a whole number 0..{most}, got {value!r}")
        return value

    def text(self, value: Any, key_path: str) -> str:
        """A one-line text value (a number is taken as its text; a list, mapping or boolean is refused)."""
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise self.fail(key_path, f"expected a text value, got {type(value).__name__} {value!r}")
        text = str(value)
        if "\n" in text or "\r" in text or "\0" in text:
            raise self.fail(key_path, f"expected one line, got {text!r}")
        return text

    def opt_text(self, value: Any, key_path: str) -> str | None:
        return None if value is None else self.text(value, key_path)

    def roles(self, value: Any, key_path: str) -> list[str]:
        """A host's ``roles``: a list of :data:`ROLES`, or one role as a string (``roles: gpu`` is ``[gpu]``, as
        Ansible-like inventories accept); missing, empty or another type is an error naming the key."""
        if value is None or value == [] or value == "":
            raise self.fail(key_path, f"missing 'roles' (one of {', '.join(ROLES)}, or a list of them)")
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list):
            raise self.fail(f"{key_path}.roles", f"must be one of {', '.join(ROLES)} or a list of them, "
                            f"not {value!r}")
        return value

    def gpus(self, value: Any, key_path: str) -> tuple[int, ...]:
        """``gpus``: a count 0..:data:`MAX_GPUS` or a list of distinct indices below it."""
        if isinstance(value, int) and not isinstance(value, bool):
            return tuple(range(self.count(value, key_path, MAX_GPUS)))
        if (not isinstance(value, list) or len(value) > MAX_GPUS
                or not all(isinstance(g, int) and not isinstance(g, bool) and 0 <= g < MAX_GPUS for g in value)):
            raise self.fail(key_path, f"expected a count 0..{MAX_GPUS} or a list of GPU indices 0..{MAX_GPUS - 1}, "
                                      f"got {value!r}")
        if len(set(value)) != len(value):
            raise self.fail(key_path, f"a GPU index is given twice in {value!r}")
        return tuple(value)

    def inventory(self, data: Any) -> Inventory:
        top = self.mapping(data, "(top level)", _TOP_KEYS)
        defaults = self.mapping(top.get("defaults"), "defaults", _DEFAULT_KEYS)
        base_ssh = self.ssh(defaults.get("ssh"), "defaults.ssh", SshOptions())
        base_params = self.mapping(defaults.get("params"), "defaults.params", _any_keys(defaults.get("params")))
        clusters_raw = top.get("clusters") or {}
        if not isinstance(clusters_raw, dict):
            raise self.fail("clusters", "expected a mapping of cluster names")
        clusters: dict[str, ClusterSpec] = {LOCAL_CLUSTER: local_cluster()}
        for name, body in clusters_raw.items():
            if not isinstance(name, str) or not _CLUSTER_NAME.fullmatch(name):
                raise self.fail("clusters", f"bad cluster name {name!r} (1-64 characters of [A-Za-z0-9._-])")
            if name == LOCAL_CLUSTER:
                raise self.fail("clusters", f"{LOCAL_CLUSTER!r} is the built-in cluster of this machine; give yours "
                                            "another name")
            clusters[name] = self.cluster(name, body, base_ssh, base_params)
        return Inventory(clusters, Path(self.where))

    def cluster(self, name: str, body: Any, base_ssh: SshOptions, base_params: dict[str, Any]) -> ClusterSpec:
        kp = f"clusters.{name}"
        raw = self.mapping(body, kp, _CLUSTER_KEYS)
        if "mode" not in raw:
            raise self.fail(kp, "missing required key 'mode' (k8s | host)")
        mode = self.choice(raw.get("mode"), f"{kp}.mode", MODES, MODE_K8S)
        sut = self.choice(raw.get("sut"), f"{kp}.sut", SUTS, "xpushare")
        why_not = sut_profiles.profile(sut).kubernetes
        if why_not is not None and is_kubernetes_mode(mode):
            raise self.fail(f"{kp}.sut", f"sut {sut} in mode {mode}: {why_not}")
        backend = self.choice(raw.get("backend"), f"{kp}.backend", BACKENDS, "cuda")
        gpu = self.mapping(raw.get("gpu"), f"{kp}.gpu", _GPU_KEYS)
        memory = gpu.get("memory_gib")
        if memory is not None:
            memory = self.number(memory, f"{kp}.gpu.memory_gib", most=1e6)
        gpu_count = None if gpu.get("count") is None else self.count(gpu["count"], f"{kp}.gpu.count", MAX_GPUS)
        profile = self.opt_text(raw.get("release_profile"), f"{kp}.release_profile")
        if profile is not None and profile not in release.profile_names():
            raise self.fail(f"{kp}.release_profile", f"unknown release profile {profile!r} (known: "
                                                     f"{', '.join(release.profile_names())})")
        namespace = self.opt_text(raw.get("namespace"), f"{kp}.namespace") or None
        if namespace is not None and not _NAMESPACE.fullmatch(namespace):
            raise self.fail(f"{kp}.namespace", f"{namespace!r} is not a Kubernetes namespace name "
                                               "(lower-case letters, digits and '-', at most 63)")
        cluster_ssh = self.ssh(raw.get("ssh"), f"{kp}.ssh", base_ssh)
        hosts = self.hosts(raw.get("hosts"), kp, cluster_ssh)
        if is_kubernetes_mode(mode) and not any("master" in h.roles for h in hosts):
            raise self.fail(f"{kp}.hosts", "a k8s cluster needs a host with role 'master'")
        sched = self.mapping(raw.get("scheduler"), f"{kp}.scheduler", _SCHEDULER_KEYS)
        params = dict(base_params)
        params.update(self.mapping(raw.get("params"), f"{kp}.params", _any_keys(raw.get("params"))))
        return ClusterSpec(
            name=name,
            mode=mode,
            sut=sut,
            backend=backend,
            gpu_model=self.opt_text(gpu.get("model"), f"{kp}.gpu.model"),
            gpu_memory_gib=memory,
            hosts=tuple(hosts),
            kubeconfig=self.opt_text(raw.get("kubeconfig"), f"{kp}.kubeconfig"),
            context=self.opt_text(raw.get("context"), f"{kp}.context"),
            namespace=namespace,
            kubectl=self.opt_text(raw.get("kubectl"), f"{kp}.kubectl") or "kubectl",
            sut_lib=self.opt_text(raw.get("sut_lib"), f"{kp}.sut_lib"),
            scheduler=SchedulerSpec(**{k: self.opt_text(v, f"{kp}.scheduler.{k}") for k, v in sched.items()
                                       if k != "env"},
                                    env=self.env_map(sched.get("env"), f"{kp}.scheduler.env")),
            params=params,
            python=self.opt_text(raw.get("python"), f"{kp}.python") or "python3",
            workdir=self.opt_text(raw.get("workdir"), f"{kp}.workdir"),
            visible_devices=self.choice(raw.get("visible_devices"), f"{kp}.visible_devices", VISIBLE_DEVICES,
                                        "unset"),
            gpu_count=gpu_count,
            release_profile=profile,
        )

    def hosts(self, value: Any, kp: str, cluster_ssh: SshOptions) -> list[HostSpec]:
        if not value:
            raise self.fail(f"{kp}.hosts", "missing or empty (each cluster needs at least one host)")
        if not isinstance(value, dict):
            raise self.fail(f"{kp}.hosts", "expected a mapping of host names")
        out: list[HostSpec] = []
        seen: set[str] = set()
        for pattern, body in value.items():
            hp = f"{kp}.hosts.{pattern}"
            try:
                names = expand_host_pattern(str(pattern))
            except ValueError as exc:
                raise self.fail(hp, str(exc)) from None
            raw = self.mapping(body, hp, _HOST_KEYS)
            local = self.choice(raw.get("connection"), f"{hp}.connection", CONNECTIONS, "ssh") == "local"
            if local:
                given = [k for k in _SSH_ONLY_KEYS if k in raw]
                if given:
                    raise self.fail(hp, f"'connection: local' is this machine; it takes no {', '.join(given)}")
                if len(names) > 1:
                    raise self.fail(hp, "'connection: local' is this machine: one host name, not a range")
            roles = self.roles(raw.get("roles"), hp)
            for role in roles:
                if not isinstance(role, str) or role not in ROLES:
                    raise self.fail(f"{hp}.roles", f"bad role {role!r} (allowed: {', '.join(ROLES)})")
            if raw.get("address") is not None and len(names) > 1:
                raise self.fail(hp, "a host range cannot share one 'address'; give hosts one by one")
            ssh = self.ssh(raw.get("ssh"), f"{hp}.ssh", cluster_ssh)
            direct = {k: raw[k] for k in ("port", "user", "identity") if k in raw}
            if direct:
                ssh = self.ssh(direct, hp, ssh)
            gpus = None if raw.get("gpus") is None else self.gpus(raw["gpus"], f"{hp}.gpus")
            address = self.opt_text(raw.get("address"), f"{hp}.address")
            for name in names:
                if not _HOSTNAME.fullmatch(name):
                    raise self.fail(hp, f"bad host name {name!r}")
                if name in seen:
                    raise self.fail(hp, f"duplicate host name {name!r}")
                seen.add(name)
                out.append(
                    HostSpec(
                        name=name,
                        roles=tuple(roles),
                        address=address,
                        ssh=ssh,
                        gpus=gpus,
                        local=local,
                    )
                )
        return out


def _any_keys(value: Any) -> Iterable[str]:
    return value.keys() if isinstance(value, dict) else ()
