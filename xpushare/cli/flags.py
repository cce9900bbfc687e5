"""Help strings of the flags many tasks share, and the converters of every typed flag.

:data:`RUN_HELP` is the help of the flags every suite task takes (:func:`xpushare.cli.suites.suite_task`);
a suite task may give its own example for a flag, e.g. its case ids for ``--case``.

Typed flags are declared as strings (``forks: str | None = None``) and converted in the task body by one
of :func:`seconds`, :func:`count`, :func:`http_url` or :func:`required`: Invoke would convert an int-typed flag
itself and turn ``--forks x`` into a traceback. Each converter raises
:class:`~xpushare.model.errors.UsageError` (one line, exit status 2) naming the flag.
"""

from __future__ import annotations

import math
from urllib.parse import urlsplit

from xpushare.model.errors import UsageError

__all__ = ["CLUSTER_HELP", "INVENTORY_HELP", "LIMIT_HELP", "ROOT_HELP", "RUN_HELP", "VERBOSE_HELP", "count",
           "http_url", "required", "seconds"]

CLUSTER_HELP = ("cluster name from the inventory, e.g. c1 (default: $XPUSHARE_CLUSTER, else xpushare.cluster of the "
                "config)")
INVENTORY_HELP = "inventory YAML (default: $XPUSHARE_INVENTORY, else inventory/inventory.yaml)"
ROOT_HELP = "directory that holds .tmplog/ (default: the current one)"
VERBOSE_HELP = ("repeatable, on stderr: -v the logical actions (pods started, phases, waits); -vv also each "
                "SSH/kubectl command line (cut short, repeated polls once); -vvv every line whole with its exit "
                "status and seconds")
LIMIT_HELP = ("hosts as a node set: 'c1-gpu[1-3,5]', globs 'c1-gpu*', '&' intersect, '!' exclude "
              "('c1-gpu*!c1-gpu3'), '@FILE' (names/patterns, one a line)")

RUN_HELP: dict[str, str] = {
    "cluster": "cluster name from the inventory, e.g. local, c1, lab, or a comma list (lab,local) run "
    "concurrently into one run (default: $XPUSHARE_CLUSTER, else xpushare.cluster of the config)",
    "case": "case ids or globs, comma-separated or repeated, e.g. --case FUNC-001,FUNC-002 or --case 'FUNC-00*'",
    "maxfail": "stop after this many FAIL/ERROR cases (counted over every cluster of the run); the rest are "
    "recorded as not run",
    "repeat": "run each selected case N times (default 1): its record says k of N, and attempts that disagree "
    "make it INTERMITTENT, a failure (each attempt's evidence kept under attempts/<n>/)",
    "playbook": "preset from playbooks/ (smoke, release, all) or a YAML path",
    "run_id": "run id (default: YYYYmmdd-HHMMSS now); with --resume, the run to continue (last: the latest)",
    "resume": "re-run only the cases whose latest verdict is not PASS, in the same run dir",
    "set": "override a parameter/threshold: --set name=value (repeatable)",
    "root": ROOT_HELP,
    "inventory": INVENTORY_HELP,
    "wait": "when another run holds the cluster's lease, wait until it is free instead of stopping (exit 2)",
    "dry_run": "print the cases, each parameter's value and its source, and which cases will SKIP and why; "
    "contact no host",
    "output": "table (default) | json | yaml: the plan of --dry-run, or after a run one record of its result "
    "(progress lines then go to stderr)",
    "verbose": VERBOSE_HELP,
}


def required(flag: str, value: str | None) -> str:
    """``value`` when it is given and not blank; raises :class:`UsageError` naming ``flag`` otherwise."""
    if value is None or not str(value).strip():
        raise UsageError(f"{flag} is required")
    return str(value)


#: The longest duration a seconds flag takes (about 115 days): longer ones overflow the timers that wait on them.
MAX_SECONDS = 1e7


def seconds(flag: str, value: object, default: float) -> float:
    """A duration in seconds (float > 0, finite, at most :data:`MAX_SECONDS`) from the flag's text; ``default``
    when not given."""
    if value is None:
        return default
    try:
        number = float(str(value))
    except ValueError:
        raise UsageError(f"{flag} takes a number of seconds, not {value!r}") from None
    if not math.isfinite(number) or number <= 0 or number > MAX_SECONDS:
        raise UsageError(f"{flag} must be a number of seconds > 0 and at most {MAX_SECONDS:g}, not {value!r}")
    return number


def count(flag: str, value: object, default: int, *, minimum: int = 1) -> int:
    """A whole number >= ``minimum`` from the flag's text; ``default`` when not given."""
    if value is None:
        return default
    text = str(value).strip()
    try:
        number = int(text)
    except ValueError:
        raise UsageError(f"{flag} takes a whole number, not {value!r}") from None
    if number < minimum:
        raise UsageError(f"{flag} must be at least {minimum}, not {number}")
    return number


def http_url(flag: str, value: str) -> str:
    """An ``http://`` or ``https://`` URL with a host (``http://HOST:PORT``); a port, when given, in 1..65535."""
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError:  # an unclosed '[' of an IPv6 address, a port out of range or not a number
        raise UsageError(f"{flag} takes an http(s) URL such as http://HOST:9402, not {value!r}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or port in (-1, 0):
        raise UsageError(f"{flag} takes an http(s) URL such as http://HOST:9402, not {value!r}")
    return value.strip()
