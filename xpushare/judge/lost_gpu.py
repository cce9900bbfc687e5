"""FAIL-006's ``lost_gpu_reported`` check: a GPU that NVML reports lost is not exported by ``/metrics`` as a healthy
GPU (seed 003 "a lost GPU"; docs/faults.md; docs/findings.md finding 22).

Two independent sources, named in the check:

* **NVML** (the node's GPU health captures, :mod:`xpushare.evidence.gpu_health`, parsed by
  :mod:`xpushare.parsers.gpu_health`): before the fault the lost GPU's row gives its index and PCI bus id; after it
  ``nvidia-smi`` names that bus id "GPU is lost" (or lists the GPU no longer). Without that the loss is not
  established and nothing is judged (``ok`` None);
* **/metrics** after the load (``plan.metrics_after`` pages, parsed by
  :func:`xpushare.parsers.metrics.parse_exposition`): the sampler's per-GPU series (families ``<prefix>_gpu_*``,
  docs/sut/metrics.md) labelled with the lost GPU's UUID or its index (``gpu_index``; the UUID label may be NVML's
  placeholder ``GPU-<index>``).

Correct: the lost GPU has no per-GPU sampler series any more, or it is marked: a series of it whose family name ends
in ``_up``, ``_healthy`` or ``_available`` is 0, one ending in ``_lost`` is 1, a label ``state``/``health``/``status``
says ``lost``/``unavailable``/``unhealthy``, or ``<prefix>_nvml_up`` is 0. Wrong (``ok`` False): its series are there
and nothing marks it; the detail quotes the series. Values record both sides and the scheduler's per-GPU series of
that index (``running_clients`` etc., whether its clients are gone).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from xpushare.evidence import gpu_health as health_files
from xpushare.evidence.store import Evidence
from xpushare.model.verdict import Check
from xpushare.parsers.gpu_health import parse_capture
from xpushare.parsers.metrics import Exposition, Sample, parse_exposition

__all__ = ["EXPRESSION", "check_lost_gpu_reported"]

EXPRESSION = ("NVML reports the GPU lost (nvidia-smi 'GPU is lost' / GPU gone) => /metrics has no per-GPU series of "
              "it, or marks it lost/unavailable")
_DOWN_SUFFIXES = ("_up", "_healthy", "_available")
_LOST_WORDS = ("lost", "unavailable", "unhealthy")


def _text(s: Sample) -> str:
    labels = ",".join(f'{k}="{v}"' for k, v in s.labels)
    value = int(s.value) if s.value.is_integer() else s.value
    return f"{s.name}{{{labels}}} {value}"


def _gpu_series(page: Exposition, uuid: str, index: str) -> list[Sample]:
    prefix = f"{page.prefix}_gpu_" if page.prefix else "_gpu_"
    return [s for fam in page.families if fam.name.startswith(prefix) or (not page.prefix and "_gpu_" in fam.name)
            for s in fam.samples if s.label("gpu_uuid") == uuid or s.label("gpu_index") == index]


def _marked(page: Exposition, series: Sequence[Sample]) -> list[str]:
    marks = [_text(s) for s in series
             if (s.family.endswith(_DOWN_SUFFIXES) and s.value == 0) or (s.family.endswith("_lost") and s.value == 1)
             or any((s.label(k) or "").lower() in _LOST_WORDS for k in ("state", "health", "status"))]
    up = page.value("nvml_up")
    if up is not None and up == 0:
        marks.append(f"{page.prefix or ''}_nvml_up 0".lstrip("_"))
    return marks


def _nvml_side(ev: Evidence, node: str, uuid: str) -> tuple[dict[str, Any], str | None]:
    """(what NVML said about ``uuid`` on ``node`` before and after, why the loss is not established or None)."""
    before_text = ev.text(health_files.file_name(node, "before"))
    after_text = ev.text(health_files.file_name(node, "after"))
    side: dict[str, Any] = {"node": node, "uuid": uuid, "files": [health_files.file_name(node, t)
                                                                   for t in health_files.TAGS]}
    if before_text is None or after_text is None:
        return side, f"no GPU health capture of {node} before and after the case: the loss is not established"
    row = parse_capture(before_text).gpu(uuid)
    if row is None:
        return side, f"GPU {uuid} is not in {node}'s health capture before the case"
    after = parse_capture(after_text)
    side.update(index=row.index, bus=row.bus, nvidia_smi_exit=after.smi_exit, lost_bus_ids=after.lost,
                visible_after=[g.label for g in after.gpus],
                xid_after=sorted({e.xid for e in after.xids if e.bus == row.bus}))
    if after.smi_exit not in (0, 15):
        return side, f"nvidia-smi failed after the fault ({after.smi_error}): the loss is not established"
    gone = after.gpu(uuid) is None
    side["nvml_says_lost"] = (row.bus in after.lost) or gone
    if not side["nvml_says_lost"]:
        return side, f"NVML still lists GPU {uuid} after the fault: it was not lost"
    return side, None


def check_lost_gpu_reported(ev: Evidence, plan: Mapping[str, Any], lost: Sequence[str]) -> Check:
    """``lost_gpu_reported`` for the GPUs ``lost`` (UUIDs) of FAIL-006 (see the module). ``plan``: FAIL-006's
    ``plan.json`` (``fault.victims_ended`` gives each lost GPU's node, ``metrics_after`` the pages)."""
    nodes = {str(v.get("gpu")): str(v.get("node")) for v in (plan.get("fault") or {}).get("victims_ended", {}).values()
             if v.get("gpu") and v.get("node")}
    pages = {n: p for n, p in (plan.get("metrics_after") or {}).items() if p.get("ok") and p.get("file")}
    values: dict[str, Any] = {"nvml": [], "metrics": {}}
    if not lost:
        return Check("lost_gpu_reported", EXPRESSION, values, None, "no GPU of a victim is known: nothing was lost")
    problems: list[str] = []
    wrong: list[str] = []
    for uuid in lost:
        node = nodes.get(uuid)
        if node is None:
            problems.append(f"the node of lost GPU {uuid} is not recorded")
            continue
        side, why = _nvml_side(ev, node, uuid)
        values["nvml"].append(side)
        if why is not None:
            problems.append(why)
            continue
        page_info = pages.get(node) or (next(iter(pages.values())) if len(pages) == 1 else None)
        text = ev.text(str(page_info["file"])) if page_info else None
        if text is None:
            problems.append(f"no parseable /metrics page of {node} after the loss")
            continue
        page = parse_exposition(text)
        series = _gpu_series(page, uuid, str(side["index"]))
        marks = _marked(page, series)
        sched = [_text(s) for fam in page.families if "_scheduler_" in fam.name for s in fam.samples
                 if s.label("gpu_index") == str(side["index"])]
        values["metrics"][uuid] = {"file": page_info["file"] if page_info else None,
                                   "gpu_series": [_text(s) for s in series][:20], "marked_lost": marks,
                                   "scheduler_series": sched[:20]}
        if series and not marks:
            shown = next((s for s in series if s.family.endswith("gpu_info")), series[0])
            up = page.value("nvml_up")
            wrong.append(f"NVML (nvidia-smi after the fault) says GPU {side['bus']} ({uuid}, index {side['index']}) "
                         f"is lost; /metrics still exports it as a present GPU ({_text(shown)}, "
                         f"{len(series)} series, nvml_up {'absent' if up is None else f'{up:g}'}) with nothing "
                         "marking it lost")
    if wrong:
        return Check("lost_gpu_reported", EXPRESSION, values, False, "; ".join(wrong))
    if problems:
        return Check("lost_gpu_reported", EXPRESSION, values, None, "; ".join(problems))
    return Check("lost_gpu_reported", EXPRESSION, values, True)
