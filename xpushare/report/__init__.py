"""What a run leaves behind: :mod:`~xpushare.report.run_store` (run/case directories, ``result.json``,
``analysis.txt``, atomic writes), :mod:`~xpushare.report.summaries` (counts, TSV summaries, release decision),
:mod:`~xpushare.report.junit`, :mod:`~xpushare.report.markdown`, :mod:`~xpushare.report.build` (all four report
files of a run from its stored records) and :mod:`~xpushare.report.plots`. Imports only :mod:`xpushare.model`.

Nothing is imported here: callers import the submodule.
"""
