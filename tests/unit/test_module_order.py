"""The module order of tests/conftest.py names modules that exist, each once: a renamed or deleted module would
silently drop out of the order and be handed out among the short ones, late."""

from __future__ import annotations

from tests.conftest import LONG_MODULES
from tests.paths import REPO_ROOT


def test_long_modules_exist_and_are_named_once() -> None:
    assert len(set(LONG_MODULES)) == len(LONG_MODULES)
    missing = [m for m in LONG_MODULES if not (REPO_ROOT / "tests" / m).is_file()]
    assert not missing, missing
