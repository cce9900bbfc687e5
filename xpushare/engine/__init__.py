"""The run engine: :mod:`~xpushare.engine.plan` (suites, playbooks, selection, ``-p`` overrides, parameters),
:mod:`~xpushare.engine.lifecycle` (one case: prepare -> act -> harvest -> clean up -> judge -> result),
:mod:`~xpushare.engine.run` (one run of any kind: run id, directory, leases, run.json, signals, resume, exit status,
reports; :class:`~xpushare.engine.run.RunHooks` for what a kind adds), :mod:`~xpushare.engine.suite_run` (the suites'
run and hooks, the backend of a cluster; re-judging). The Ctrl-C/SIGTERM/SIGHUP handler a run installs lives lower,
in :mod:`xpushare.transport.interrupt`.

Nothing is imported here: callers import the submodule (the driver pulls in every case module).
"""
