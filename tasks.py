"""Invoke tasks of xpushare. Run ``invoke --list``; ``invoke --help <task>`` documents every flag.

The tasks live in the package (:mod:`xpushare.cli`); this file only hands Invoke their collection, and gives
``invoke``'s own program the parse-error policy of the installed ``xpushare`` command (one ``error:`` line,
exit status 2: :func:`xpushare.cli.program.adopt`), which also checks the project's ``invoke.yaml`` beside this file
and the ``-f`` file before Invoke reads them.
"""

from pathlib import Path

from invoke import main as _invoke_main

from xpushare.cli.collection import namespace
from xpushare.cli.program import adopt

adopt(_invoke_main.program, project=Path(__file__).resolve().parent)

__all__ = ["namespace"]
