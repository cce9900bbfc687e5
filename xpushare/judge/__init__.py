"""Judgments: pure functions from a case's stored evidence (and thresholds) to a Verdict.

One module per suite: :mod:`~xpushare.judge.functional`, :mod:`~xpushare.judge.combination`,
:mod:`~xpushare.judge.performance`, :mod:`~xpushare.judge.metrics`, :mod:`~xpushare.judge.stability`
(each the public face of its suite; larger suites keep their parts in ``<suite>_*`` modules).
Shared: :mod:`~xpushare.judge.checks` (pods succeeded/terminal, rejection, overlap, scheduler alive),
:mod:`~xpushare.judge.quota` (quota checks of the functional, combination and performance suites),
:mod:`~xpushare.judge.quantity` (the SUT's memory/core quantity grammars), :mod:`~xpushare.judge.thresholds`
(the seed's default thresholds), :mod:`~xpushare.judge.stats` and :mod:`~xpushare.judge.trend`.
No judgment reads live state, so ``invoke judge`` re-judges a stored run offline. Nothing is imported
here, so importing one module never pulls in the others.
"""
