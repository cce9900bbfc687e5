"""The inventory's ``params`` of a cluster, checked the way ``--set`` is, with the one parameter schema
(:mod:`xpushare.cases.param_schema`): a name no case or owner of cluster settings knows is a typo, and a value must
keep its parameter's rules (a misspelt or mistyped parameter would otherwise be ignored, or make a case ERROR with a
``ValueError`` halfway through a run)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from xpushare.model.errors import InventoryError

if TYPE_CHECKING:
    from xpushare.inventory.schema import ClusterSpec

__all__ = ["check_cluster_params"]


def check_cluster_params(cluster: ClusterSpec) -> None:
    """Check every ``params`` entry of ``cluster`` (``defaults.params`` included).

    Raises:
        InventoryError: a name that is no case parameter, no cluster setting
        (:func:`~xpushare.cases.param_schema.cluster_setting_defaults`: ``pod_image``, ``lease_renew_s`` ...) and
        not under an owner's prefix (:data:`~xpushare.cases.param_schema.OWNED_PREFIXES`), a name under an owner's
        prefix that its owner does not have (``envcheck_cublas_itres``), or a value that breaks its parameter's rules
        (``pod_timeout_s: abc``, a negative or infinite quantity, ``metrics_port: 0``, ``legacy_pods: -1``;
        :func:`~xpushare.cases.param_schema.owned_problem`).
    """
    # imported here: the case registry is most of the command line's start-up, and a usage error or --help needs none
    from xpushare.cases import REGISTRY
    from xpushare.cases.param_schema import OWNED_PREFIXES, cluster_setting_defaults, owned_refusal
    from xpushare.engine.plan import parameter_defaults, value_problem

    defaults = parameter_defaults(list(REGISTRY.values()))
    for name, values in cluster_setting_defaults().items():
        defaults.setdefault(name, []).extend(values)
    for name, value in cluster.params.items():
        where = f"inventory cluster {cluster.name!r}: params.{name}"
        if name in defaults:
            problem = value_problem(name, defaults[name], value)
            if problem:
                raise InventoryError(f"{where}: bad value {value!r}: {problem}")
        elif str(name).startswith(OWNED_PREFIXES):
            refusal = owned_refusal(str(name), value)
            if refusal:
                raise InventoryError(f"{where}: {refusal}")
        else:
            raise InventoryError(f"{where}: unknown parameter (no case and no cluster setting has it)")
