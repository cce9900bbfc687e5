"""Long-running stability runs: the soak loop, its series files, checkpoint, report and task.

Modules: :mod:`~xpushare.soak.series` (append-only files), :mod:`~xpushare.soak.checkpoint`,
:mod:`~xpushare.soak.ops` (cluster operations), :mod:`~xpushare.soak.loop` (the loop, its parts in ``loop_*``),
:mod:`~xpushare.soak.act` (case glue),
:mod:`~xpushare.soak.report` (plots), :mod:`~xpushare.soak.task` (``invoke soak`` with resume: a run with the
soak's hooks).
Nothing is imported here, so importing one module never pulls in the others.
"""
