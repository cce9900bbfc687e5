"""The case matrix: importing this package registers every case of the seed (seed 000 sections 7-11).

Suite modules register their implemented cases first; the catalog then adds placeholder rows (SKIP,
"not implemented") only for ids no suite module registered.
"""

from xpushare.cases import combination, functional, isolation, metrics, performance, noisy_neighbour  # noqa: F401, I001
from xpushare.cases import context_latency, stability, tenancy  # noqa: F401
from xpushare.cases import catalog  # noqa: F401  (must come last)
from xpushare.cases.base import REGISTRY, SUITE_ALIASES, SUITES, CaseDef

__all__ = ["REGISTRY", "SUITES", "SUITE_ALIASES", "CaseDef"]
