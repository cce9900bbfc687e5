"""Mirrors of the legacy ``tests/remote-test-*.sh`` scripts (docs/sut/legacy-scripts.md) as Invoke tasks.

* :mod:`xpushare.legacy.tables` -- the tables the scripts print (per-pod result rows, the scheduler's
  GPU distribution, Min/Max/Avg statistics), pure text formatting from stored evidence;
* :mod:`xpushare.legacy.scenarios` -- one scenario per script (``cross-gpu``, ``small``, ``idle-small``,
  ``baseline``, ``memlimit``, ``dynamic-limit``, ``compute-limit``, ``complex``, ``complex2``,
  ``smoke``), run through the engine's case lifecycle into a normal run directory
  (``.tmplog/<run-id>/xpushare/<cluster>/legacy/<scenario>/``); their acts in :mod:`xpushare.legacy.acts`,
  the pods' backend in :mod:`xpushare.legacy.backend`, the per-scenario report in
  :mod:`xpushare.legacy.case_report`; each runs as a run of the engine (:mod:`xpushare.engine.run`) with the
  legacy hooks of :mod:`xpushare.legacy.run` (setup, the script's lines and tables), holding the cluster's lease;
* :mod:`xpushare.legacy.judgments` -- their verdicts, pure functions of the stored evidence;
* :mod:`xpushare.deploy.k8s_pipeline` -- the setup pipeline of ``remote-test.sh`` (commit, sync, build,
  render, redeploy, verify the scheduling mode), with its steps in :mod:`xpushare.deploy.source_sync` (sync,
  git) and :mod:`xpushare.deploy.k8s_render` (manifests);
* :mod:`xpushare.legacy.compare` -- a run against stored baselines, the way seed 004's analysis does.

The Invoke tasks are in :mod:`xpushare.cli.legacy_tasks`; ``docs/legacy.md`` has the script -> task table.
"""
