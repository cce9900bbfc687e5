"""The run engine: :mod:`~xpushare.engine.plan` (suites, playbooks, selection, ``-p`` overrides, parameters),
:mod:`~xpushare.engine.lifecycle` (one case: prepare -> act -> harvest -> clean up -> judge -> result),
:mod:`~xpushare.engine.driver` (a run: backend, progress, run ids, resume, exit status; re-judging) and
:mod:`~xpushare.engine.interrupt` (Ctrl-C, SIGTERM and SIGHUP as an orderly end of the run).

Nothing is imported here: callers import the submodule (the driver pulls in every case module).
"""
