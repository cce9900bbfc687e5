"""The one Invoke collection of every xpushare task: ``namespace``.

``tasks.py`` at the repository root exposes it to ``invoke``; the installed ``xpushare`` command
(:mod:`xpushare.cli.program`) runs it from any directory. ``invoke --list`` shows the tasks.
"""

from __future__ import annotations

from invoke import Collection

from xpushare.cli.adhoc_tasks import envcheck, hosts, metrics_check, ping, run_
from xpushare.cli.clean_tasks import clean
from xpushare.cli.copy_tasks import get, put
from xpushare.cli.lab_tasks import lab
from xpushare.cli.legacy_tasks import baseline_compare, deploy, legacy
from xpushare.cli.report_tasks import compare, diff, runs
from xpushare.cli.run_tasks import cases_, judge, report, soak
from xpushare.cli.suites import SUITE_TASKS
from xpushare.cli.sut_tasks import sut, undeploy

__all__ = ["namespace"]

namespace = Collection(hosts, run_, ping, metrics_check, envcheck, *SUITE_TASKS, soak, judge, report, cases_,
                       deploy, undeploy, sut, baseline_compare, lab, legacy,
                       clean, runs, diff, compare, put, get)
