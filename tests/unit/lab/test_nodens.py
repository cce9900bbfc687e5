"""The lab node namespace's holder pid file: read only once it is whole (CI once read it empty, mid-write)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.lab.nodens import NamespaceError, NodeNamespace


def test_an_empty_or_partial_pid_file_is_not_a_started_namespace(tmp_path: Path) -> None:
    ns = NodeNamespace("n1", tmp_path, die_with_parent=False)
    assert ns.written_pid() is None
    ns.pid_file.write_text("")  # what the starter saw when the holder's redirect had created the file
    assert ns.written_pid() is None
    with pytest.raises(NamespaceError, match="not started"):
        _ = ns.pid
    ns.pid_file.write_text("12")
    assert ns.written_pid() == 12
