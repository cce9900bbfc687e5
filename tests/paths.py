"""Where the tests find the repository and their fixtures, wherever a test module sits under tests/."""
from pathlib import Path

#: the repository's root (pyproject.toml, xpushare/, docs/)
REPO_ROOT = Path(__file__).resolve().parent.parent
#: recorded inputs of the unit tests: tests/fixtures/{collect,evidence,samples}
FIXTURES = REPO_ROOT / "tests" / "fixtures"
