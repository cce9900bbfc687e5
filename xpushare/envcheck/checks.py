"""Pure parsers and judgments of envcheck: node documents in, :class:`~xpushare.model.verdict.Verdict` out.

The node-side scripts (``workloads/envcheck/``) print one JSON document per step between marker lines
(``@@xpushare-envcheck-begin <step>`` / ``@@xpushare-envcheck-end <step>``); ``node_steps.py`` adds
``@@xpushare-envcheck-exit <step> <code> <seconds>`` lines. :func:`extract_block` and
:func:`exit_codes` read them from SSH stdout or a pod log alike. Nothing here touches a host.

Units: TFLOP/s = 1e12 FLOP/s; bandwidths in GB/s = 1e9 bytes/s (nccl-tests' convention); memory in MiB;
sizes in bytes. Verdicts use :func:`xpushare.model.verdict.combine`: any failed check is FAIL, any check that
could not be evaluated is ERROR, and an empty list is never a PASS.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from xpushare.model.verdict import Check, Status, Verdict, combine

BEGIN = "@@xpushare-envcheck-begin"
END = "@@xpushare-envcheck-end"
EXIT = "@@xpushare-envcheck-exit"
MIB = 1 << 20

#: Keys compared across the fleet (:func:`stack_values`), in report order.
ALIGN_KEYS: tuple[str, ...] = (
    "os",
    "kernel",
    "driver_version",
    "cuda_driver_version",
    "gpu_model",
    "gpu_count",
    "gpu_memory_mib",
    "cuda_available",
    "python_version",
    "torch_version",
    "torch_cuda",
    "nccl_version",
    "sglang_version",
    "pip_freeze_sha256",
    "nccl_env",
)
ABSENT = "(absent)"


class BlockError(ValueError):
    """A step's JSON block is missing, unterminated or not a JSON object."""


def extract_block(text: str, step: str) -> dict[str, Any]:
    """The JSON object printed between the ``step`` markers in ``text`` (the last one if several).

    Raises:
        BlockError: no begin marker, no end marker after it, or the content is not a JSON object.
    """
    lines = text.splitlines()
    begin = f"{BEGIN} {step}"
    starts = [i for i, line in enumerate(lines) if line.strip() == begin]
    if not starts:
        raise BlockError(f"no {step!r} result in the output")
    start = starts[-1]
    end = next((i for i in range(start + 1, len(lines)) if lines[i].strip() == f"{END} {step}"), None)
    if end is None:
        raise BlockError(f"the {step!r} result is cut off (no end marker)")
    try:
        doc = json.loads("\n".join(lines[start + 1 : end]))
    except json.JSONDecodeError as exc:
        raise BlockError(f"the {step!r} result is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise BlockError(f"the {step!r} result is not a JSON object")
    return doc


def try_block(text: str, step: str) -> tuple[dict[str, Any] | None, str | None]:
    """(:func:`extract_block`'s document, None) or (None, the reason it could not be read)."""
    try:
        return extract_block(text, step), None
    except BlockError as exc:
        return None, str(exc)


def exit_codes(text: str) -> dict[str, int]:
    """``{step: exit code}`` from ``node_steps.py``'s ``@@xpushare-envcheck-exit`` lines (last one wins)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0] == EXIT and re.fullmatch(r"-?\d+", parts[2]):
            out[parts[1]] = int(parts[2])
    return out


# ---------------------------------------------------------------------------------------------- stack


def _gpus(doc: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list((doc.get("nvidia_smi") or {}).get("gpus") or [])


def _torch(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    return doc.get("torch") or {}


def _joined(values: Sequence[Any]) -> str:
    distinct = sorted({str(v) for v in values if v is not None})
    return "; ".join(distinct) if distinct else ABSENT


def stack_values(doc: Mapping[str, Any]) -> dict[str, str]:
    """The :data:`ALIGN_KEYS` of one stack document as strings (:data:`ABSENT` when unknown).

    GPU model and memory come from nvidia-smi, else from torch; several distinct values on one node are
    joined with ``; `` (a mixed node then deviates from a uniform fleet). ``nccl_env`` is ``K=V`` pairs
    sorted and joined by spaces, ``(none)`` when no such variable is set.
    """
    smi = doc.get("nvidia_smi") or {}
    torch = _torch(doc)
    gpus = _gpus(doc) or list(torch.get("devices") or [])
    env = doc.get("nccl_env") or {}
    packages = doc.get("packages") or {}
    values: dict[str, Any] = {
        "os": doc.get("os"),
        "kernel": doc.get("kernel"),
        "driver_version": smi.get("driver_version"),
        "cuda_driver_version": smi.get("cuda_driver_version"),
        "gpu_model": _joined([g.get("name") for g in gpus]) if gpus else "(no GPU)",
        "gpu_count": str(len(gpus)),
        "gpu_memory_mib": _joined([g.get("memory_mib") for g in gpus]) if gpus else "(no GPU)",
        "cuda_available": str(bool(torch.get("cuda_available"))).lower() if torch else None,
        "python_version": (doc.get("python") or {}).get("version"),
        "torch_version": torch.get("version") or packages.get("torch"),
        "torch_cuda": torch.get("cuda"),
        "nccl_version": torch.get("nccl"),
        "sglang_version": packages.get("sglang"),
        "pip_freeze_sha256": (doc.get("pip_freeze") or {}).get("sha256"),
        "nccl_env": " ".join(f"{k}={v}" for k, v in sorted(env.items())) or "(none)",
    }
    return {k: ABSENT if values[k] is None else str(values[k]) for k in ALIGN_KEYS}


def gpu_count(doc: Mapping[str, Any] | None) -> int:
    """GPUs of a node: nvidia-smi's list, else what torch sees."""
    if not doc:
        return 0
    return len(_gpus(doc)) or int(_torch(doc).get("device_count") or 0)


def gpu_name(doc: Mapping[str, Any] | None) -> str | None:
    """The first GPU's name (nvidia-smi, else torch), or None."""
    if not doc:
        return None
    gpus = _gpus(doc) or list(_torch(doc).get("devices") or [])
    return str(gpus[0].get("name")) if gpus else None


NVIDIA_SMI_MISSING = "missing prerequisite: nvidia-smi not found on the node"


def judge_stack(doc: Mapping[str, Any] | None, deviations: Mapping[str, tuple[str, str]],
                *, error: str | None = None, require_nvidia_smi: bool = True) -> Verdict:
    """The stack verdict of one node.

    Checks: ``nvidia_smi`` (``require_nvidia_smi``: the node has ``nvidia-smi``; without it the node misses a
    prerequisite, ERROR :data:`NVIDIA_SMI_MISSING`, never a PASS; the CPU smoke test requires none),
    ``cuda_usable`` (when nvidia-smi lists GPUs: torch imports, ``torch.cuda.is_available()`` and
    torch sees as many GPUs as nvidia-smi unless CUDA_VISIBLE_DEVICES narrows them) and ``aligned`` (no
    key deviates from the fleet's majority; ``deviations`` maps key -> (this node's value, majority)).
    ``doc`` None is ERROR with ``error`` as the reason.
    """
    if doc is None:
        return Verdict(Status.ERROR, f"stack probe gave no result: {error or 'unknown reason'}")
    checks: list[Check] = []
    smi_gpus = len(_gpus(doc))
    torch = _torch(doc)
    if require_nvidia_smi:
        path = (doc.get("nvidia_smi") or {}).get("path")
        checks.append(Check("nvidia_smi", "nvidia-smi is on the node (a GPU node's prerequisite)", {"path": path},
                            True if path else None, "" if path else NVIDIA_SMI_MISSING))
    if smi_gpus:
        seen = int(torch.get("device_count") or 0)
        narrowed = "CUDA_VISIBLE_DEVICES" in (doc.get("visible_devices") or {})
        ok = bool(torch.get("cuda_available")) and (seen == smi_gpus or (narrowed and seen > 0))
        detail = "" if ok else (
            "torch is not importable" if not torch.get("version") else
            f"torch {torch.get('version')} sees cuda_available={bool(torch.get('cuda_available'))}, "
            f"{seen} device(s); nvidia-smi lists {smi_gpus}")
        checks.append(Check("cuda_usable", "torch.cuda.is_available() and torch device count == nvidia-smi GPUs",
                            {"nvidia_smi_gpus": smi_gpus, "torch_devices": seen,
                             "cuda_available": bool(torch.get("cuda_available"))}, ok, detail))
    detail = "; ".join(f"{k}: {v!r} (majority {m!r})" for k, (v, m) in sorted(deviations.items()))
    checks.append(Check("aligned", "every key equals the fleet majority",
                        {k: v for k, (v, _) in deviations.items()}, not deviations, detail))
    status, summary = combine(checks, pass_summary="stack aligned with the fleet")
    if doc.get("errors") and status is Status.PASS:
        summary += f" (probe notes: {'; '.join(map(str, doc['errors']))})"
    return Verdict(status, summary, checks, metrics={"values": stack_values(doc)})


@dataclass(frozen=True)
class GpuPlan:
    """Whether the GPU steps run on a node, with how many processes, and why not when they don't."""

    run: bool
    gpus: int
    device: str  # "cuda" or "cpu" (CPU smoke test)
    status: Status | None = None  # the steps' status when they do not run
    reason: str = ""


def gpu_plan(doc: Mapping[str, Any] | None, *, skip_gpu: bool, cpu_smoke: bool, smoke_procs: int = 2) -> GpuPlan:
    """Decide the GPU steps of one node from its stack document.

    SKIP with the reason for ``--skip-gpu`` and for a node without NVIDIA GPU (no nvidia-smi or no GPU
    listed, and torch sees no CUDA device); FAIL when nvidia-smi lists GPUs that torch cannot use; ERROR
    without a stack document. ``cpu_smoke`` runs the steps on the CPU with ``smoke_procs`` processes.
    """
    if skip_gpu:
        return GpuPlan(False, 0, "cuda", Status.SKIP, "--skip-gpu given")
    if doc is None:
        return GpuPlan(False, 0, "cuda", Status.ERROR, "not run: the stack probe gave no result")
    if cpu_smoke:
        return GpuPlan(True, smoke_procs, "cpu")
    smi = doc.get("nvidia_smi") or {}
    torch = _torch(doc)
    smi_gpus = len(_gpus(doc))
    if torch.get("cuda_available") and int(torch.get("device_count") or 0) > 0:
        return GpuPlan(True, int(torch["device_count"]), "cuda")
    if smi_gpus:
        return GpuPlan(False, smi_gpus, "cuda", Status.FAIL,
                       f"nvidia-smi lists {smi_gpus} GPU(s) but torch cannot use CUDA")
    where = "nvidia-smi not found" if not smi.get("path") else "nvidia-smi lists no GPU"
    torch_note = "torch not importable" if not torch.get("version") else "torch.cuda.is_available() is False"
    return GpuPlan(False, 0, "cuda", Status.SKIP, f"no NVIDIA GPU on this node ({where}; {torch_note})")


def topology_links(text: str | None) -> list[str]:
    """Distinct GPU-to-GPU link types of ``nvidia-smi topo -m`` (``NV18``, ``PIX``, ``SYS`` ...), sorted.

    Empty for no text or fewer than two GPUs. ANSI escapes are ignored.
    """
    if not text:
        return []
    clean = re.sub(r"\x1b\[[0-9;]*m", "", text)
    lines = [line for line in clean.splitlines() if line.strip()]
    header = next((line for line in lines if re.search(r"\bGPU0\b", line) and not line.split("\t")[0].strip()), None)
    if header is None:
        return []
    cols = [c.strip() for c in header.split("\t")]
    gpu_cols = {i: c for i, c in enumerate(cols) if re.fullmatch(r"GPU\d+", c)}
    links: set[str] = set()
    for line in lines:
        cells = [c.strip() for c in line.split("\t")]
        if not cells or not re.fullmatch(r"GPU\d+", cells[0]):
            continue
        for i, name in gpu_cols.items():
            if name != cells[0] and i < len(cells) and cells[i] and cells[i] != "X":
                links.add(cells[i])
    return sorted(links)


# ---------------------------------------------------------------------------------------------- cuBLAS


def judge_cublas(doc: Mapping[str, Any] | None, *, exit_code: int | None, nominal_tflops: float | None,
                 nominal_source: str, min_pct: float, error: str | None = None) -> Verdict:
    """The cuBLAS verdict of one node from ``cublas_bf16.py``'s document.

    Per GPU: ``gpu<i>_correct`` (product matches the fp32 reference, no error) and, on CUDA with a nominal
    figure, ``gpu<i>_tflops``: measured >= ``min_pct`` % of ``nominal_tflops``. Metrics: ``tflops`` and
    ``pct_of_nominal`` per GPU index, ``min_tflops``. SKIP when the script reported ``skipped``; ERROR
    without a document. A GPU other processes used just before or after its measurement (``others_before`` /
    ``others_after``) gets ``gpu<i>_idle``, unevaluable: the node is ERROR ("GPU busy: ..."), never FAIL, since
    a figure from a shared GPU says nothing about the hardware.
    """
    thresholds = {"min_pct": min_pct, "nominal_tflops": nominal_tflops, "nominal_source": nominal_source}
    if doc is None:
        return Verdict(Status.ERROR, f"no cuBLAS result: {error or 'unknown reason'}", thresholds=thresholds)
    if doc.get("skipped"):
        return Verdict(Status.SKIP, str(doc["skipped"]), thresholds=thresholds)
    checks: list[Check] = []
    metrics: dict[str, Any] = {"dtype": doc.get("dtype"), "n": doc.get("n"), "device": doc.get("device"),
                               "tflops": {}, "pct_of_nominal": {}}
    cuda = doc.get("device") == "cuda"
    for err in doc.get("errors") or []:
        checks.append(Check("script", "no error", {"error": err}, False, str(err)))
    for row in doc.get("gpus") or []:
        i = row.get("index")
        tflops = row.get("tflops")
        detail = row.get("error") or (f"max relative error {row.get('max_rel_err')}" if not row.get("ok") else "")
        checks.append(Check(f"gpu{i}_correct", "C[:64,:64] == fp32 reference (rel err < 0.02)",
                            {"max_rel_err": row.get("max_rel_err")}, bool(row.get("ok")), detail))
        others = [p for key in ("others_before", "others_after") for p in (row.get(key) or [])]
        if others:
            busy = ", ".join(sorted({f"pid {p.get('pid')} {p.get('name')} ({p.get('used_mib')} MiB)" for p in others}))
            checks.append(Check(f"gpu{i}_idle", "no other compute process on the GPU while it was measured",
                                {"others_before": row.get("others_before"), "others_after": row.get("others_after")},
                                None, f"GPU busy: {busy}"))
        if tflops is None:
            continue
        metrics["tflops"][str(i)] = round(float(tflops), 1)
        if cuda and nominal_tflops and not others:
            pct = 100.0 * float(tflops) / nominal_tflops
            metrics["pct_of_nominal"][str(i)] = round(pct, 1)
            checks.append(Check(f"gpu{i}_tflops", f"tflops >= {min_pct:g}% of {nominal_tflops:g}",
                                {"tflops": round(float(tflops), 1), "pct": round(pct, 1)}, pct >= min_pct,
                                f"{tflops:.1f} TFLOP/s = {pct:.1f}% of nominal {nominal_tflops:g} < {min_pct:g}%"))
    if exit_code not in (None, 0) and all(c.ok for c in checks):
        checks.append(Check("exit_code", "exit code == 0", {"exit_code": exit_code}, False, f"exit code {exit_code}"))
    values = list(metrics["tflops"].values())
    metrics["min_tflops"] = min(values) if values else None
    if values and cuda and nominal_tflops:
        worst = min(metrics["pct_of_nominal"].values())
        summary = (f"{len(values)} GPU(s) {min(values):.1f}..{max(values):.1f} TFLOP/s "
                   f"(min {worst:.1f}% of nominal {nominal_tflops:g})")
    elif values:
        note = "CPU smoke test, not judged" if not cuda else "no nominal figure for this model, not judged"
        summary = f"{len(values)} device(s) {min(values):.1f}..{max(values):.1f} TFLOP/s ({note})"
    else:
        summary = "no device measured"
    status, why = combine(checks, pass_summary=summary)
    return Verdict(status, why if status is not Status.PASS else summary, checks, thresholds, metrics)


# ---------------------------------------------------------------------------------------------- NCCL


def expected_sizes(min_bytes: int, max_bytes: int, factor: int = 2) -> list[int]:
    """The sizes ``nccl_allreduce.py`` measures: min, min*factor, ... <= max (bytes)."""
    out, size = [], min_bytes
    while size <= max_bytes:
        out.append(size)
        size *= factor
    return out


def size_label(nbytes: int) -> str:
    """``1 GiB``, ``8 MiB``, ``64 KiB`` or ``100 B``: the largest binary unit that divides ``nbytes``."""
    for unit, name in ((1 << 30, "GiB"), (MIB, "MiB"), (1 << 10, "KiB")):
        if nbytes >= unit and nbytes % unit == 0:
            return f"{nbytes // unit} {name}"
    return f"{nbytes} B"


def judge_nccl(doc: Mapping[str, Any] | None, *, exit_code: int | None, sizes: Sequence[int],
               nominal_busbw: float | None, min_pct: float, links: Sequence[str] = (),
               error: str | None = None, what: str = "all-reduce") -> Verdict:
    """The all-reduce verdict from ``nccl_allreduce.py``'s document (rank 0's).

    Checks: ``sizes`` (every expected size measured), ``correct`` (every size summed right on every rank),
    ``busbw`` (on NCCL with a nominal figure: the peak busbw >= ``min_pct`` % of ``nominal_busbw``; when
    ``links`` shows the GPUs are not NVLink-connected the detail says so). Metrics: ``busbw_gbps`` and
    ``algbw_gbps`` per size label, ``peak_busbw_gbps``, ``world_size``, ``links``.
    """
    thresholds = {"min_busbw_pct": min_pct, "nominal_busbw_gbps": nominal_busbw, "sizes": list(sizes)}
    if doc is None:
        return Verdict(Status.ERROR, f"no {what} result: {error or 'unknown reason'}", thresholds=thresholds)
    rows = list(doc.get("sizes") or [])
    metrics: dict[str, Any] = {
        "backend": doc.get("backend"), "world_size": doc.get("world_size"), "nnodes": doc.get("nnodes"),
        "busbw_gbps": {size_label(int(r["bytes"])): round(float(r["busbw_gbps"]), 2) for r in rows},
        "algbw_gbps": {size_label(int(r["bytes"])): round(float(r["algbw_gbps"]), 2) for r in rows},
        "links": list(links),
    }
    peak = max((float(r["busbw_gbps"]) for r in rows), default=None)
    metrics["peak_busbw_gbps"] = round(peak, 2) if peak is not None else None
    checks: list[Check] = []
    for err in doc.get("errors") or []:
        checks.append(Check("script", "no error", {"error": err}, False, str(err)))
    measured = {int(r["bytes"]) for r in rows}
    missing = [s for s in sizes if s not in measured]
    checks.append(Check("sizes", "every size measured", {"missing": [size_label(s) for s in missing]},
                        not missing, f"not measured: {', '.join(size_label(s) for s in missing)}"))
    wrong = [size_label(int(r["bytes"])) for r in rows if not r.get("ok")]
    checks.append(Check("correct", "sum == n(n+1)/2 on every rank and element", {"wrong": wrong},
                        bool(rows) and not wrong, f"wrong sums at {', '.join(wrong)}" if wrong else "no size measured"))
    nccl = doc.get("backend") == "nccl"
    if nccl and nominal_busbw and peak is not None:
        pct = 100.0 * peak / nominal_busbw
        nv = not links or all(t.startswith("NV") for t in links)
        detail = (f"peak busbw {peak:.1f} GB/s = {pct:.1f}% of nominal {nominal_busbw:g} < {min_pct:g}%"
                  + ("" if nv else f"; GPUs are not NVLink-connected (topology: {', '.join(links)})"))
        checks.append(Check("busbw", f"peak busbw >= {min_pct:g}% of {nominal_busbw:g} GB/s",
                            {"peak_busbw_gbps": round(peak, 2), "pct": round(pct, 1)}, pct >= min_pct, detail))
    if exit_code not in (None, 0) and all(c.ok for c in checks):
        checks.append(Check("exit_code", "exit code == 0", {"exit_code": exit_code}, False, f"exit code {exit_code}"))
    world = doc.get("world_size")
    if peak is None:
        summary = f"{what}: nothing measured"
    elif not nccl:
        summary = f"{what} over {world} rank(s), {doc.get('backend')}: peak busbw {peak:.2f} GB/s (CPU smoke test)"
    elif nominal_busbw:
        summary = (f"{what} over {world} GPU(s): peak busbw {peak:.1f} GB/s "
                   f"({100.0 * peak / nominal_busbw:.1f}% of nominal {nominal_busbw:g})")
    else:
        summary = f"{what} over {world} GPU(s): peak busbw {peak:.1f} GB/s (no nominal figure, not judged)"
    status, why = combine(checks, pass_summary=summary)
    return Verdict(status, why if status is not Status.PASS else summary, checks, thresholds, metrics)
