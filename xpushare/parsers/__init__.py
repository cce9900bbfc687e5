"""Evidence parsers: for each kind of evidence a pure parser and, for the commands whose output it parses
(``nvidia-smi``, ``nvidia-smi dmon``, ``/proc/<pid>/status``), the argv that produces that output.

Every module here follows the same pattern (pyinfra-style "facts", docs/architecture.md "Parsers are pure and
fixture-tested"):

* pure parsers: text (or an iterable of lines) in, frozen dataclasses out; no exceptions on malformed input
  (malformed parts are reported in the result instead), and
* where a command's output is the format, a ``command(...)``-style function returning its argv as ``list[str]``
  (run, and quoted once with ``shlex.join``, by the caller's transport): the command line and the parser of its
  output change together.

No I/O: no module here opens a file, runs a process or reaches the network (``tests/unit/test_layering.py``
checks it); the one read is :mod:`xpushare.parsers.xid`'s of the Xid catalogue the tool ships
(``xpushare/data/xid.yaml``). Reading a stored file is :mod:`xpushare.evidence`'s.

Modules (interfaces: docs/sut/README.md):

* :mod:`xpushare.parsers.pod_log` -- workload pod output (docs/sut/client.md §memory-quota,
docs/sut/workloads.md §output, docs/sut/log.md §regex): runtime, ``PASS``, OOM
  markers, quota probes, tqdm progress.
* :mod:`xpushare.parsers.client_lines` -- the client library's lines in it (docs/sut/client.md §memory-quota,
docs/sut/log.md §regex): client id, limit updates.
* :mod:`xpushare.parsers.scheduler_log` -- streaming scheduler-log summary (docs/sut/log.md, §regex): registrations,
  limit changes, lock/drop traffic, levels, the GPU distribution table.
* :mod:`xpushare.parsers.metrics` -- Prometheus exposition (docs/sut/metrics.md) via ``prometheus_client.parser``;
  HELP/TYPE presence, prefix check, lookups (the scrape itself is :mod:`xpushare.evidence.scrape_capture`'s).
* :mod:`xpushare.parsers.dmon` -- ``nvidia-smi dmon`` of any column layout (docs/sut/workloads.md §dmon).
* :mod:`xpushare.parsers.nvidia_smi` -- ``nvidia-smi -L`` and ``--query-gpu`` /
  ``--query-compute-apps`` CSV.
* :mod:`xpushare.parsers.procstat` -- ``/proc/<pid>/status`` plus an FD count (seed 000 §10.2,
  LEAK-001/002).

The submodules are not imported here, so importing one parser does not pull in the others'
dependencies (``prometheus_client``, ``tabulate``).
"""

from __future__ import annotations
