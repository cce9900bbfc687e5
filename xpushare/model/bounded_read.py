"""Reading a file the user points at without trusting its size: ``/dev/zero``, a symlink to a device or a huge
file are refused after a bounded read instead of exhausting memory."""

from __future__ import annotations

from pathlib import Path


def read_text(path: Path, *, limit: int) -> str:
    """The UTF-8 text of ``path``, reading at most ``limit`` bytes.

    Raises:
        OSError: it cannot be read (missing, a directory, no permission). UnicodeDecodeError: it is not UTF-8.
        ValueError: it is larger than ``limit`` bytes (the message says ``larger than N KiB``).
    """
    with path.open("rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"larger than {limit // 1024} KiB")
    return data.decode("utf-8")
