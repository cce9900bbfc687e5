"""The model every layer shares: :mod:`~xpushare.model.verdict` (``Verdict``, ``Status``, ``Check``, ``combine``),
:mod:`~xpushare.model.exit_status` (``ExitStatus``, the process exit codes of README "Exit statuses") and
:mod:`~xpushare.model.errors` (the ``XpushareError`` hierarchy). Imports nothing else of xpushare.

Nothing is imported here: callers import the submodule (as for every layer package).
"""
