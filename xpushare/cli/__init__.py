"""The command line of xpushare: Invoke tasks over the library.

- :mod:`~xpushare.cli.collection`: the one task collection (``invoke`` in the repository via ``tasks.py``,
  and the installed ``xpushare`` command of :mod:`~xpushare.cli.program`);
- :mod:`~xpushare.cli.suites`: the suite tasks, built by one factory (:func:`~xpushare.cli.suites.suite_task`);
- :mod:`~xpushare.cli.run_tasks`, :mod:`~xpushare.cli.adhoc_tasks`, :mod:`~xpushare.cli.legacy_tasks`,
  :mod:`~xpushare.cli.lab_tasks`: the other tasks, by area;
- :mod:`~xpushare.cli.guard`: errors to exit statuses (README "Exit statuses"); :mod:`~xpushare.cli.flags`:
  shared help strings.
"""
