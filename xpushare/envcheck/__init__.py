"""Node acceptance at scale (``invoke envcheck``): software-stack alignment, NCCL all-reduce, cuBLAS bf16.

Modules: :mod:`~xpushare.envcheck.checks` (pure parsers and judgments), :mod:`~xpushare.envcheck.fleet`
(majority/deviation, Markdown and JSON report), :mod:`~xpushare.envcheck.runner` (:func:`envcheck_task`),
:mod:`~xpushare.envcheck.params` (the ``envcheck_*`` parameters), :mod:`~xpushare.envcheck.context` (one run's state,
judging, fleet report), :mod:`~xpushare.envcheck.ssh_mode` (SSH fan-out), :mod:`~xpushare.envcheck.k8s_mode`
(in-cluster), :mod:`~xpushare.envcheck.manifests` (Kubernetes objects from
``manifests/envcheck/``), :mod:`~xpushare.envcheck.nominal` (nominal figures per GPU model).
``docs/envcheck.md`` is the user guide.
"""

from __future__ import annotations

from xpushare.envcheck.params import EnvcheckParams, resolve_params
from xpushare.envcheck.runner import envcheck_task

__all__ = ["EnvcheckParams", "envcheck_task", "resolve_params"]
