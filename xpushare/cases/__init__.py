"""The case matrix: importing this package registers every case of the seed (seed 000 sections 7-11)."""

from xpushare.cases import catalog, functional  # noqa: F401  (registration side effects)
from xpushare.cases.base import REGISTRY, SUITE_ALIASES, SUITES, CaseDef

__all__ = ["REGISTRY", "SUITES", "SUITE_ALIASES", "CaseDef"]
