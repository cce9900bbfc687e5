"""Evidence formats, each with one owner (capture argv, file format, parser together):
:mod:`~xpushare.evidence.store` (the read-only view of a case directory that judgments get, GPU assignment),
:mod:`~xpushare.evidence.client_match` (scheduler registrations matched to pods and metrics clients),
:mod:`~xpushare.evidence.metrics_target` (where MET scrapes come from),
:mod:`~xpushare.evidence.scrape_capture` (the scraper: every scrape of the scheduler's exporter, from its URL and
curl's argv to the capture and scrape-series file formats and a page's facts),
:mod:`~xpushare.evidence.http_fetch` (one GET of the exporter from this machine, urllib),
:mod:`~xpushare.evidence.soak_series` (the soak's append-only series files) and
:mod:`~xpushare.evidence.facts` (the host facts of ``invoke ping``).

Nothing is imported here: callers import the submodule.
"""
