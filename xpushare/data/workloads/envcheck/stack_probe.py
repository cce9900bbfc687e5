#!/usr/bin/env python3
"""Software-stack probe of one node: prints one JSON document between marker lines on stdout.

Runs on a GPU node over SSH or in a pod of the envcheck DaemonSet (``docs/envcheck.md``); standard
library only, plus ``torch`` when it can be imported (``--no-torch`` skips it). Nothing is judged here:
the controller compares the documents of all nodes (``xpushare.envcheck.fleet``).

Output (stdout)::

    @@xpushare-envcheck-begin stack
    { ...JSON, schema "xpushare.envcheck.stack/1"... }
    @@xpushare-envcheck-end stack

Keys: ``node`` (``$XPUSHARE_ENVCHECK_NODE`` or the hostname), ``hostname``, ``kernel``, ``os``,
``python`` {version, executable}, ``nvidia_smi`` {path, driver_version, cuda_driver_version, gpus
[{index, name, uuid, memory_mib, pci_bus_id}], topology (``nvidia-smi topo -m`` text)}, ``torch``
{version, cuda, cudnn, nccl, cuda_available, device_count, devices [{index, name, memory_mib,
capability}]}, ``packages`` (version or null of a fixed list, e.g. sglang), ``pip_freeze`` {source
(``pip`` or ``metadata``), count, sha256 (of the sorted lines joined by newlines), lines}, ``nccl_env``
(NCCL_*, TORCH_NCCL_*, NVSHMEM_*, TORCH_SYMM_MEM_* variables), ``visible_devices``
(CUDA_VISIBLE_DEVICES / NVIDIA_VISIBLE_DEVICES), ``errors`` (what could not be read, one line each).
Memory is MiB (nvidia-smi's unit). Exit status 0 unless the probe itself crashed.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from typing import Any

SCHEMA = "xpushare.envcheck.stack/1"
BEGIN = "@@xpushare-envcheck-begin"
END = "@@xpushare-envcheck-end"

#: Packages whose versions are reported one by one (distribution names; missing ones are null).
PACKAGES = ("torch", "sglang", "sgl-kernel", "flashinfer-python", "vllm", "transformers", "triton", "xformers",
            "nvidia-nccl-cu12", "nvidia-nccl-cu13", "nvidia-ml-py", "numpy")
#: Environment variables that steer NCCL and PyTorch's collectives (compared across the fleet).
NCCL_ENV_PREFIXES = ("NCCL_", "TORCH_NCCL_", "NVSHMEM_", "TORCH_SYMM_MEM_")
VISIBLE_ENV = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")
GPU_QUERY = "index,name,uuid,memory.total,driver_version,pci.bus_id"


def _run(argv: list[str], timeout: float) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``argv``; 127 when it cannot be started, 124 on timeout."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError as exc:
        return 127, "", str(exc)
    except subprocess.TimeoutExpired:
        return 124, "", f"timed out after {timeout:g} s"
    return proc.returncode, proc.stdout, proc.stderr


def os_release() -> str | None:
    """PRETTY_NAME of /etc/os-release, or None."""
    try:
        with open("/etc/os-release", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("PRETTY_NAME="):
                    return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        return None
    return None


def probe_nvidia_smi(errors: list[str]) -> dict[str, Any]:
    """Driver, GPUs and topology from ``nvidia-smi`` (path None when it is not installed)."""
    path = shutil.which("nvidia-smi")
    out: dict[str, Any] = {"path": path, "driver_version": None, "cuda_driver_version": None, "gpus": [],
                           "topology": None}
    if path is None:
        return out
    code, text, err = _run([path, f"--query-gpu={GPU_QUERY}", "--format=csv,noheader,nounits"], 60)
    if code != 0:
        errors.append(f"nvidia-smi --query-gpu exited {code}: {(err or text).strip()[:200]}")
        return out
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 6 or not parts[0].isdigit():
            continue
        try:
            memory: int | None = int(float(parts[3]))
        except ValueError:
            memory = None
        out["gpus"].append({"index": int(parts[0]), "name": parts[1], "uuid": parts[2], "memory_mib": memory,
                            "pci_bus_id": parts[5]})
        out["driver_version"] = out["driver_version"] or parts[4]
    code, text, _ = _run([path], 60)
    m = re.search(r"CUDA Version:\s*([0-9.]+)", text) if code == 0 else None
    out["cuda_driver_version"] = m.group(1) if m else None
    if len(out["gpus"]) > 1:
        code, text, err = _run([path, "topo", "-m"], 60)
        if code == 0:
            out["topology"] = text
        else:
            errors.append(f"nvidia-smi topo -m exited {code}: {(err or text).strip()[:200]}")
    return out


def probe_torch(errors: list[str]) -> dict[str, Any]:
    """What PyTorch sees: versions, CUDA availability and devices (memory in MiB)."""
    out: dict[str, Any] = {"version": None, "cuda": None, "cudnn": None, "nccl": None, "cuda_available": False,
                           "device_count": 0, "devices": []}
    try:
        import torch
    except Exception as exc:  # any import failure is a finding, not a crash
        errors.append(f"import torch failed: {type(exc).__name__}: {exc}")
        return out
    out["version"] = str(torch.__version__)
    out["cuda"] = torch.version.cuda
    try:
        out["cuda_available"] = bool(torch.cuda.is_available())
        if out["cuda_available"]:
            out["device_count"] = int(torch.cuda.device_count())
            out["cudnn"] = torch.backends.cudnn.version()
            nccl = torch.cuda.nccl.version()
            out["nccl"] = ".".join(str(p) for p in nccl) if isinstance(nccl, tuple) else str(nccl)
            for i in range(out["device_count"]):
                props = torch.cuda.get_device_properties(i)
                out["devices"].append({"index": i, "name": props.name, "memory_mib": props.total_memory // (1 << 20),
                                       "capability": f"{props.major}.{props.minor}"})
    except Exception as exc:
        errors.append(f"torch.cuda query failed: {type(exc).__name__}: {exc}")
    return out


def package_versions() -> dict[str, str | None]:
    """Installed version of each distribution in :data:`PACKAGES` (None when absent)."""
    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def freeze_lines(source: str, errors: list[str]) -> tuple[str, list[str]]:
    """``pip freeze --all`` lines of this interpreter; falls back to importlib.metadata (``name==version``)."""
    if source == "pip":
        code, text, err = _run([sys.executable, "-m", "pip", "freeze", "--all", "--disable-pip-version-check"], 120)
        if code == 0:
            return "pip", [line.strip() for line in text.splitlines() if line.strip()]
        errors.append(f"pip freeze exited {code}: {(err or text).strip()[:200]}; used importlib.metadata")
    lines = {f"{d.metadata['Name']}=={d.version}" for d in importlib.metadata.distributions() if d.metadata["Name"]}
    return "metadata", sorted(lines)


def freeze_digest(lines: list[str]) -> str:
    """sha256 (hex) of the freeze lines sorted case-insensitively and joined with newlines."""
    text = "\n".join(sorted(lines, key=lambda s: (s.lower(), s)))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def probe(*, with_torch: bool, freeze_source: str) -> dict[str, Any]:
    """The whole stack document (see the module docstring)."""
    errors: list[str] = []
    hostname = socket.gethostname()
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "node": os.environ.get("XPUSHARE_ENVCHECK_NODE") or hostname,
        "hostname": hostname,
        "kernel": platform.release(),
        "os": os_release(),
        "python": {"version": platform.python_version(), "executable": sys.executable},
    }
    doc["nvidia_smi"] = probe_nvidia_smi(errors)
    doc["torch"] = probe_torch(errors) if with_torch else None
    doc["packages"] = package_versions()
    source, lines = freeze_lines(freeze_source, errors)
    doc["pip_freeze"] = {"source": source, "count": len(lines), "sha256": freeze_digest(lines), "lines": lines}
    doc["nccl_env"] = {k: v for k, v in sorted(os.environ.items()) if k.startswith(NCCL_ENV_PREFIXES)}
    doc["visible_devices"] = {k: os.environ[k] for k in VISIBLE_ENV if k in os.environ}
    doc["errors"] = errors
    return doc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-torch", action="store_true", help="do not import torch (faster; torch is then null)")
    parser.add_argument("--freeze-source", choices=("pip", "metadata"), default="pip",
                        help="pip freeze --all (default) or importlib.metadata")
    args = parser.parse_args(argv)
    doc = probe(with_torch=not args.no_torch, freeze_source=args.freeze_source)
    sys.stdout.write(f"{BEGIN} stack\n{json.dumps(doc, indent=1, sort_keys=True)}\n{END} stack\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
