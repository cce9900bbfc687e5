"""Node acceptance at scale (``invoke envcheck``): software-stack alignment, NCCL all-reduce, cuBLAS bf16.

Modules: :mod:`~xpushare.envcheck.checks` (pure parsers and judgments), :mod:`~xpushare.envcheck.fleet`
(majority/deviation, Markdown and JSON report), :mod:`~xpushare.envcheck.runner` (SSH fan-out and
in-cluster modes, :func:`envcheck_task`), :mod:`~xpushare.envcheck.manifests` (Kubernetes objects from
``manifests/envcheck/``), :mod:`~xpushare.envcheck.nominal` (nominal figures per GPU model).
``docs/envcheck.md`` is the user guide.
"""

from __future__ import annotations

from xpushare.envcheck.runner import EnvcheckParams, envcheck_task, resolve_params

__all__ = ["EnvcheckParams", "envcheck_task", "resolve_params"]
