"""The run engine: :mod:`~xpushare.engine.plan` (suites, playbooks, selection, ``-p`` overrides, parameters),
:mod:`~xpushare.engine.lifecycle` (one case: prepare -> act -> harvest -> clean up -> judge -> result),
:mod:`~xpushare.engine.driver` (a run: backend, progress, run ids, resume, exit status; re-judging). The
Ctrl-C/SIGTERM/SIGHUP handler the driver installs lives lower, in :mod:`xpushare.transport.interrupt`.

Nothing is imported here: callers import the submodule (the driver pulls in every case module).
"""
