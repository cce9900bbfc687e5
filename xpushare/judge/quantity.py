"""The quantities the system under test reads from annotations and env variables (docs/sut/annotations.md).

One grammar for memory quantities, the scheduler's ``parse_memory_size``: a number (decimals allowed),
optional spaces, then a case-insensitive suffix ``Gi``/``GiB`` (x2^30), ``Mi``/``MiB`` (x2^20),
``Ki``/``KiB`` (x2^10), ``B`` or none (bytes). ``G``, ``GB``, ``M``, ``Ti`` ... are not quantities:
the scheduler ignores them (0). :func:`parse_quantity` raises on them, :func:`annotation_bytes` gives 0
like the scheduler. The client library reads ``<PREFIX>GPU_MEMORY_LIMIT`` with a wider grammar
(:func:`env_bytes`), and the core limit is an ``atoi`` (:func:`core_limit_value`).
"""

from __future__ import annotations

import math
import re

__all__ = ["GIB", "MIB", "annotation_bytes", "core_limit_value", "env_bytes", "parse_quantity"]

GIB = 2**30
MIB = 2**20

_NUMBER_RE = re.compile(r"^\s*(?P<num>[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)\s*(?P<suffix>[A-Za-z]*)\s*$")
#: Suffixes of ``parse_memory_size`` (lower case) -> bytes per unit.
_MEMORY_UNITS = {"": 1, "b": 1, "ki": 2**10, "kib": 2**10, "mi": MIB, "mib": MIB, "gi": GIB, "gib": GIB}
#: The client library also reads decimal ``K``/``M``/``G`` (``KB``...) and treats any other suffix as bytes.
_ENV_UNITS = {**_MEMORY_UNITS, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9}


def parse_quantity(text: str) -> int:
    """Bytes (int, truncated like the scheduler's cast) of a memory quantity: ``4Gi``, ``1.5Gi``, ``2 GiB``,
    ``512mi``, ``4096`` (bytes).

    Raises ValueError for a value the scheduler ignores: no number, a suffix other than
    ``Gi``/``GiB``/``Mi``/``MiB``/``Ki``/``KiB``/``B`` (``4G`` and ``4GB`` are not quantities), a negative
    or a non-finite number.
    """
    m = _NUMBER_RE.match(text)
    if m is None:
        raise ValueError(f"not a memory quantity: {text!r}")
    unit = _MEMORY_UNITS.get(m.group("suffix").lower())
    value = float(m.group("num"))
    if unit is None:
        raise ValueError(f"not a memory quantity the SUT accepts (suffix {m.group('suffix')!r}): {text!r}")
    if value < 0 or not math.isfinite(value):
        raise ValueError(f"not a memory quantity (negative or not finite): {text!r}")
    return int(value * unit)


def annotation_bytes(text: str | None) -> int:
    """Bytes of a ``<gen>.com/gpu-memory-limit`` annotation as the scheduler applies it: :func:`parse_quantity`,
    with 0 (the scheduler ignores the annotation) for an absent value or one it raises on."""
    if text is None:
        return 0
    try:
        return parse_quantity(text)
    except ValueError:
        return 0


def env_bytes(text: str | None) -> int | None:
    """Bytes of ``<PREFIX>GPU_MEMORY_LIMIT`` as the client library parses it; ``None`` if unparsable.

    Per the probe table of docs/sut/annotations.md §memory-limit: binary ``Ki``/``Mi``/``Gi`` (and ``KiB``...),
    decimal ``K``/``M``/``G`` (and ``KB``...), bytes without a suffix or with ``B``; any other suffix
    is ignored (``2Ti`` is 2 bytes).
    """
    if text is None:
        return None
    m = _NUMBER_RE.match(text)
    if m is None:
        return None
    value = float(m.group("num"))
    if not math.isfinite(value) or value < 0:
        return None
    return int(value * _ENV_UNITS.get(m.group("suffix").lower(), 1))


def core_limit_value(text: str | int | None) -> int:
    """The core limit the scheduler applies for an annotation value: ``atoi`` in 1..100, else 100.

    docs/sut/annotations.md §core-limit: ``"50%"`` is 50, ``"0.5"`` is 0 (invalid, so 100); absent is 100.
    """
    if text is None:
        return 100
    if isinstance(text, int):
        value = text
    else:
        m = re.match(r"\s*([+-]?\d+)", text)
        value = int(m.group(1)) if m else 0
    return value if 1 <= value <= 100 else 100
