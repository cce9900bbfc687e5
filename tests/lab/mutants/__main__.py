"""``python -m tests.lab.mutants [NAME...]``: build mutants of the SUT and print their build directories."""

from tests.lab.mutants import main

raise SystemExit(main())
