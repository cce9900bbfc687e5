"""The inventory's ``params`` of a cluster, checked the way ``--set`` is: a name no case or owner of cluster settings
knows is a typo, and a value must be of its parameter's type (a misspelt or mistyped parameter would otherwise be
ignored, or make a case ERROR with a ``ValueError`` halfway through a run)."""

from __future__ import annotations

from xpushare.backends.k8s import K8S_DEFAULTS
from xpushare.cases import REGISTRY
from xpushare.engine.plan import parameter_defaults, value_problem
from xpushare.inventory.schema import ClusterSpec
from xpushare.model.errors import InventoryError

#: Cluster settings read by their owners rather than by cases: the lease (``lease_*``), ``invoke envcheck``
#: (``envcheck_*``), ``invoke legacy.deploy`` (``deploy_*``), the legacy scenarios (``legacy_*``) and ``invoke
#: metrics-check``.
OWNED_PREFIXES = ("lease_", "envcheck_", "deploy_", "legacy_", "metrics_check_")
OWNED_NAMES = frozenset({"probe_image"})


def check_cluster_params(cluster: ClusterSpec) -> None:
    """Check every ``params`` entry of ``cluster`` (``defaults.params`` included).

    Raises:
        InventoryError: a name that is no case parameter, no Kubernetes-backend setting (``pod_image`` ...) and
        no owned setting (:data:`OWNED_PREFIXES`, :data:`OWNED_NAMES`), or a value not of its parameter's type
        (``pod_timeout_s: abc``, a negative or infinite quantity).
    """
    defaults = parameter_defaults(list(REGISTRY.values()))
    for name, default in K8S_DEFAULTS.items():
        defaults.setdefault(name, []).append(default)
    for name, value in cluster.params.items():
        where = f"inventory cluster {cluster.name!r}: params.{name}"
        if name in defaults:
            problem = value_problem(name, defaults[name], value)
            if problem:
                raise InventoryError(f"{where}: bad value {value!r}: {problem}")
        elif not name.startswith(OWNED_PREFIXES) and name not in OWNED_NAMES:
            raise InventoryError(f"{where}: unknown parameter (no case and no cluster setting has it)")
