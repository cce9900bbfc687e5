"""Envcheck parameters: :class:`EnvcheckParams` (the ``envcheck_<name>`` knobs, with units) and
:func:`resolve_params` (inventory ``params`` < ``--set``, typed and checked). Split out of
:mod:`xpushare.envcheck.runner`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from xpushare.envcheck.manifests import K8sSettings
from xpushare.model import param_owners
from xpushare.model.errors import UsageError

MIB = 1 << 20
_POD_DEFAULTS = K8sSettings()

# ---------------------------------------------------------------------------------------------- parameters


@dataclass(frozen=True)
class EnvcheckParams:
    """Thresholds and knobs; each is set as ``envcheck_<name>`` in the inventory ``params`` or with ``--set``.

    Sizes in bytes, times in seconds, bandwidths in GB/s (1e9 B/s), TFLOP/s = 1e12 FLOP/s.
    """

    cublas: bool = True
    """Run the cuBLAS step (false: SKIP it, e.g. to test only a sample of the fleet with ``--limit``)."""
    cublas_n: int = 8192
    cublas_warmup: int = 5
    cublas_iters: int = 50
    cublas_min_pct: float = 70.0
    """A GPU passes with at least this % of its model's nominal dense bf16 TFLOP/s."""
    nominal_bf16_tflops: float | None = None
    """Overrides the nominal table (xpushare/envcheck/nominal.py) for this cluster's GPUs."""
    nccl_min_bytes: int = 8 * MIB
    nccl_max_bytes: int = 1024 * MIB
    nccl_warmup: int = 5
    nccl_iters: int = 20
    nccl_min_busbw_pct: float = 60.0
    """A node passes with a peak single-node busbw of at least this % of its model's NVLink figure."""
    nominal_busbw_gbps: float | None = None
    cross_node: bool = True
    cross_min_busbw_gbps: float | None = None
    """Cross-node floor for the peak busbw (None: correctness only, figures reported)."""
    master_addr: str | None = None
    master_port: int | None = None
    """None: a free port found on the first node (SSH); 29512 in Kubernetes mode."""
    step_timeout_s: float = 900.0
    pod_timeout_s: float = 1200.0
    probe_torch: bool = True
    freeze_source: str = "pip"
    ignore_keys: tuple[str, ...] = ()
    """Stack keys left out of the alignment comparison (e.g. ``[kernel]``)."""
    cpu_smoke: bool = False
    smoke_procs: int = 2
    python: str | None = None
    """Interpreter on the nodes (default: the inventory's ``python``; ``python3`` in pods)."""
    health: bool = True
    """Run the node health step (Xids, ECC, row remapping, throttling; envcheck/node_health.py): over SSH in SSH
    mode, in the stack DaemonSet's pod in Kubernetes mode."""
    health_env: dict[str, str] = field(default_factory=dict)
    """Environment of the health capture (``{node}`` in a value is replaced by the node's name): where the node's
    driver or kernel log is not what an SSH session or the stack pod sees by default (e.g. ``PATH``)."""
    xid_window_h: float = 2.0
    """Hours back from now in which a warning/critical Xid in the kernel log flags the node."""
    ecc_uncorrected_max: int = 0
    """Volatile uncorrected ECC errors a GPU may have before its node is flagged."""
    # The pods' look in Kubernetes mode: K8sSettings' fields, with its defaults.
    image: str = _POD_DEFAULTS.image
    scripts: str = _POD_DEFAULTS.scripts
    workdir: str = _POD_DEFAULTS.workdir
    gpu_resource: str = _POD_DEFAULTS.gpu_resource
    node_selector: dict[str, str] = field(default_factory=dict)
    host_network: bool = _POD_DEFAULTS.host_network
    workload_kind: str = _POD_DEFAULTS.workload_kind
    runtime_class: str | None = _POD_DEFAULTS.runtime_class

    def k8s_settings(self) -> K8sSettings:
        """The :class:`~xpushare.envcheck.manifests.K8sSettings` of these parameters (``python``: ``python3``
        when unset)."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(K8sSettings) if f.name != "python"}
        return K8sSettings(python=self.python or _POD_DEFAULTS.python, **values)

    def to_dict(self) -> dict[str, Any]:
        return {f"envcheck_{k}": (list(v) if isinstance(v, tuple) else v)
                for k, v in dataclasses.asdict(self).items()}


_CHOICES = {"freeze_source": ("pip", "metadata"), "scripts": ("configmap", "image"), "workload_kind": ("pod", "job")}
#: Smaller defaults under ``envcheck_cpu_smoke`` (unless set explicitly).
SMOKE_DEFAULTS = {"cublas_n": 256, "cublas_warmup": 1, "cublas_iters": 3, "nccl_min_bytes": 64 * 1024,
                  "nccl_max_bytes": 256 * 1024, "nccl_warmup": 1, "nccl_iters": 3}


#: The least value of each count, size and window (a value below it measures nothing, or never ends: 0 iterations,
#: a 0-byte message); percentages are 0..100.
AT_LEAST: dict[str, int] = {"cublas_n": 1, "cublas_warmup": 0, "cublas_iters": 1, "nccl_min_bytes": 4,
                            "nccl_max_bytes": 4, "nccl_warmup": 0, "nccl_iters": 1, "smoke_procs": 1,
                            "ecc_uncorrected_max": 0}
_ABOVE_ZERO = ("nominal_bf16_tflops", "nominal_busbw_gbps", "xid_window_h", "step_timeout_s", "pod_timeout_s")
_PERCENT = ("cublas_min_pct", "nccl_min_busbw_pct")


def _range_problem(name: str, value: Any) -> str | None:
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if not math.isfinite(value):
        return f"expected a finite number, got {value!r}"
    if name in AT_LEAST and value < AT_LEAST[name]:
        return f"at least {AT_LEAST[name]} (got {value!r})"
    if name in _ABOVE_ZERO and value <= 0:
        return f"more than 0 (got {value!r})"
    if name in _PERCENT and not 0 <= value <= 100:
        return f"a percentage 0..100 (got {value!r})"
    if name == "cross_min_busbw_gbps" and value < 0:
        return f"0 or more (got {value!r})"
    return None


def _coerce(name: str, value: Any) -> Any:
    """``value`` converted to the type of parameter ``name`` and within its range.
    Raises :class:`UsageError` naming ``envcheck_<name>``."""
    converted = _converted(name, value)
    problem = _range_problem(name, converted)
    if problem:
        raise UsageError(f"envcheck_{name}: bad value {value!r}: {problem}")
    return converted


def value_problem(key: str, value: Any) -> str | None:
    """Why ``value`` cannot be the envcheck parameter ``key`` (``envcheck_<name>``): its type (as
    :func:`resolve_params` converts it) or its range (:data:`AT_LEAST`, above 0, a percentage); None when it can or
    ``key`` is no envcheck parameter. The envcheck rules the parameter schema applies at the edge
    (:func:`xpushare.cases.param_schema.owned_problem`)."""
    name = key.removeprefix("envcheck_")
    if name not in _FIELDS:
        return None
    try:
        _coerce(name, value)
    except UsageError as exc:
        why = str(exc).removeprefix(f"{key}: ").removeprefix(f"bad value {value!r}").removeprefix(": ").strip()
        if why.startswith("(") and why.endswith(")"):
            why = why[1:-1]
        return why or str(exc)
    return None


def _converted(name: str, value: Any) -> Any:
    """``value`` converted to the type of parameter ``name``."""
    ftype = {f.name: str(f.type) for f in dataclasses.fields(EnvcheckParams)}[name]
    where = f"envcheck_{name}"
    if value is None:
        if "None" in ftype:
            return None
        raise UsageError(f"{where}: a value is required")
    try:
        if ftype.startswith("bool"):
            if isinstance(value, bool):
                return value
            if str(value).lower() in ("true", "yes", "1", "on", "false", "no", "0", "off"):
                return str(value).lower() in ("true", "yes", "1", "on")
            raise ValueError(value)
        if ftype.startswith("int"):
            if isinstance(value, bool) or float(value) != int(float(value)):
                raise ValueError(value)
            return int(float(value))
        if ftype.startswith("float"):
            if isinstance(value, bool):
                raise ValueError(value)
            return float(value)
        if ftype.startswith("tuple"):
            items = [value] if isinstance(value, str) else list(value)
            return tuple(str(v) for v in items)
        if ftype.startswith("dict"):
            if not isinstance(value, Mapping):
                raise ValueError(value)
            return {str(k): str(v) for k, v in value.items()}
        text = str(value)
        if name in _CHOICES and text not in _CHOICES[name]:
            raise UsageError(f"{where}: {text!r} is not one of {', '.join(_CHOICES[name])}")
        return text
    except (TypeError, ValueError, OverflowError):
        raise UsageError(f"{where}: bad value {value!r} (expected {ftype.replace(' | None', ' or null')})") from None


def resolve_params(cluster_params: Mapping[str, Any], overrides: Mapping[str, Any]) -> EnvcheckParams:
    """Parameters from the cluster's inventory ``params`` (keys ``envcheck_*``) then ``--set`` overrides.

    Raises:
        UsageError: an unknown ``envcheck_*`` name (inventory or ``--set``), any other ``--set`` name, or a
            value of the wrong type.
    """
    defaults = EnvcheckParams()
    known = {f.name for f in dataclasses.fields(EnvcheckParams)}
    values: dict[str, Any] = {}
    for source, layer, only_prefixed in (("inventory params", cluster_params, True), ("--set", overrides, False)):
        for key, value in layer.items():
            if not key.startswith("envcheck_"):
                if only_prefixed:
                    continue
                raise UsageError(f"unknown parameter {key!r} for --set (envcheck parameters start with envcheck_)")
            name = key[len("envcheck_"):]
            if name not in known:
                raise UsageError(f"{source}: unknown envcheck parameter {key!r} "
                                 f"(known: {', '.join(sorted('envcheck_' + k for k in known))})")
            values[name] = _coerce(name, value)
    if values.get("cpu_smoke"):
        for name, small in SMOKE_DEFAULTS.items():
            values.setdefault(name, small)
    params = dataclasses.replace(defaults, **values)
    if params.nccl_min_bytes < 4 or params.nccl_max_bytes < params.nccl_min_bytes:
        raise UsageError("envcheck_nccl_min_bytes must be >= 4 and <= envcheck_nccl_max_bytes")
    return params


_FIELDS = {f.name: f for f in dataclasses.fields(EnvcheckParams)}
_DEFAULTS = EnvcheckParams()


def _kinds(name: str) -> tuple[Any, ...]:
    """The kinds a value of ``name`` may take at the edge, as the parameter schema reads them: its default; for a
    default of ``None`` (``null`` is its "choose for me") also a sample of its type; a text for a list (one item)."""
    default = getattr(_DEFAULTS, name)
    if isinstance(default, tuple):
        return (list(default), "")
    if default is not None:
        return (default,)
    ftype = str(_FIELDS[name].type)
    sample = next((s for word, s in (("int", 0), ("float", 0.0), ("str", "")) if ftype.startswith(word)), None)
    return (None, sample)


param_owners.declare("envcheck_", {f"envcheck_{name}": _kinds(name) for name in _FIELDS},
                     check=value_problem)
