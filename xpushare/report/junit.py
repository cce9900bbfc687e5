"""The run's ``junit.xml``: one ``<testsuite name="<cluster>.<suite>">`` per (cluster, suite) pair
(the convention of Ansible's junit callback), one ``<testcase>`` per case; text made safe for XML 1.0."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from typing import Any

from xpushare.model.case_record import CaseRecord
from xpushare.model.verdict import Status
from xpushare.report import run_store
from xpushare.report.summaries import counts, failure_text, record_duration, record_status, suite_groups

# --------------------------------------------------------------------------------------------- JUnit

_XML_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _xml_text(value: Any) -> str:
    """Text safe for XML 1.0: characters it cannot hold (ANSI ESC, NUL, lone surrogates) become ``\\xNN``."""
    return _XML_ILLEGAL.sub(lambda m: run_store.escape_char(m.group(0)), "" if value is None else str(value))




def _set_counts(elem: ET.Element, group: Sequence[CaseRecord]) -> None:
    c = counts(group)
    elem.set("tests", str(len(group)))
    elem.set("failures", str(c["FAIL"] + c["INTERMITTENT"]))
    elem.set("errors", str(c["ERROR"] + c["INTERRUPTED"]))
    elem.set("skipped", str(c["SKIP"]))
    elem.set("time", f"{sum(record_duration(r) for r in group):.3f}")


def junit_tree(results: Sequence[CaseRecord], run_id: str) -> ET.Element:
    """JUnit XML root: ``<testsuites>`` holding one ``<testsuite name="cluster.suite">`` per pair, from the case
    records (model/case_record.py; those the run never reached too, :func:`~xpushare.report.summaries.never_run`).

    FAIL -> ``<failure message=summary>``, INTERMITTENT (``--repeat``: attempts disagreed) -> ``<failure
    message=summary type="INTERMITTENT">`` (its text names each failing attempt's directory), ERROR -> ``<error
    message=summary>``, INTERRUPTED ->
    ``<error message="interrupted" type="interrupted">``, SKIP -> ``<skipped message=summary>``; the element
    text lists the failed/unevaluated checks, the error text and the evidence paths (relative to the run
    directory). ``failures`` counts FAIL and INTERMITTENT, ``errors`` ERROR and INTERRUPTED. ``time`` is in seconds.
    """
    root = ET.Element("testsuites", name=f"xpushare {run_id}")
    _set_counts(root, results)
    for (cluster, suite), group in suite_groups(results).items():
        ts = ET.SubElement(root, "testsuite", name=f"{cluster}.{suite}")
        _set_counts(ts, group)
        started = [str(r.started) for r in group if r.started]
        if started:
            ts.set("timestamp", min(started))
        props = ET.SubElement(ts, "properties")
        for name, value in (("run_id", run_id), ("cluster", cluster), ("suite", suite)):
            ET.SubElement(props, "property", name=name, value=_xml_text(value))
        for r in group:
            name = f"{r.case_id} {r.title or ''}".strip()
            tc = ET.SubElement(
                ts, "testcase", classname=f"{cluster}.{suite}", name=_xml_text(name), time=f"{record_duration(r):.3f}"
            )
            status, summary = record_status(r), _xml_text(r.summary)
            if status in (Status.FAIL, Status.INTERMITTENT):
                ET.SubElement(tc, "failure", message=summary, type=status.value).text = _xml_text(failure_text(r))
            elif status is Status.ERROR:
                ET.SubElement(tc, "error", message=summary, type="ERROR").text = _xml_text(failure_text(r))
            elif status is Status.INTERRUPTED:
                el = ET.SubElement(tc, "error", message="interrupted", type="interrupted")
                el.text = _xml_text(f"{r.summary or ''}\n{failure_text(r)}".strip())
            elif status is Status.SKIP:
                ET.SubElement(tc, "skipped", message=summary)
            ET.SubElement(tc, "system-out").text = _xml_text(f"case dir: {r.case_log_dir}")
    ET.indent(root)
    return root




