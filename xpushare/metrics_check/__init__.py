"""``invoke metrics-check``: the seed 002 checklist of the scheduler's ``/metrics`` endpoint as PASS/FAIL lines.

Three layers, kept apart, one module each (the package imports none of them: callers import the module they use):

1. **Fetching** (:mod:`~xpushare.metrics_check.endpoint`, :func:`~.endpoint.fetch_endpoint`): ``GET /healthz``,
   ``GET /metrics`` and ``GET /notexist`` through an injectable ``fetch(url) -> (status_code, content_type,
   body)``: ``urllib_fetcher`` of :mod:`xpushare.evidence.http_fetch` from this machine (``--url``, the ``local``
   cluster), the scraper's ``curl_fetcher`` (:mod:`xpushare.evidence.scrape_capture`) on a GPU node through the
   transport (a Kubernetes cluster: the scheduler pod IP is only reachable from the nodes). ``fetch`` raises
   ``FetchError`` when no HTTP response came back.
2. **Judging** (pure, :mod:`~xpushare.metrics_check.checklist`): ``idle_checks`` on an ``EndpointEvidence``,
   ``load_checks`` on an :class:`~xpushare.parsers.metrics.Exposition` with probe clients registered; each
   returns ``CheckLine`` rows ``(item, expected, observed, status)`` with status PASS or FAIL.
3. **Under load** (:mod:`~xpushare.metrics_check.probes`, ``run_load_checks``): start probe workloads through
   a ``ProbeLoad`` (one, then two), poll ``/metrics`` until the load lines pass or the settle time runs out,
   stop the probes. ``KubeProbeLoad`` runs probe pods with kubectl; ``BackendProbeLoad`` runs them through any
   :class:`~xpushare.backends.base.Backend` (host mode). The probes' clients are found by the key
   :func:`xpushare.evidence.client_match.client_match` picks for the mode: the ``pod`` label in Kubernetes, the
   ``host_pid`` (and ``client_id``) of the probe process in host mode, where every client's pod and
   namespace are ``none``; the ``client_info per client`` line says which key matched.

:mod:`~xpushare.metrics_check.task`: ``run_metrics_check`` prints the table and returns the exit status (0 all
PASS, 1 any FAIL, 3 the endpoint did not answer at all); ``metrics_check_task`` is the task body behind
``invoke metrics-check --url URL`` / ``--cluster C``. Line by line: ``docs/metrics-check.md``.

Sources: seed 002 (the checklist), docs/sut/metrics.md §http (HTTP: routes, content type, HEAD is 404),
docs/sut/metrics.md §families (36 families with a sampler, 28 without; HELP/TYPE always printed), §catalogue
(catalogue, label sets,
counters), docs/sut/metrics.md §samples (expected samples), docs/sut/README.md §naming (``nvshare_``/``xpushare_``
prefixes).
"""
