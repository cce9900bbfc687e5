"""``python -m xpushare``: the ``xpushare`` command (:mod:`xpushare.cli.program`)."""

from xpushare.cli.program import main

main()
