"""Invoke tasks of xpushare. Run ``invoke --list``; ``invoke --help <task>`` documents every flag.

The tasks live in the package (:mod:`xpushare.cli`); this file only hands Invoke their collection. The
installed ``xpushare`` command runs the same collection from any directory.
"""

from xpushare.cli.collection import namespace

__all__ = ["namespace"]
