"""Step 3 of the legacy deploy pipeline (:mod:`xpushare.deploy.k8s_pipeline`): ``manifests/legacy/*.yaml`` filled in
structurally (generation names, images ``<registry>/<gen>-<component>:<tag>``, the scheduling-mode env entry).
Pure functions; split out of :mod:`xpushare.deploy.k8s_pipeline`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import yaml

from xpushare.data import manifests_dir
from xpushare.inventory.sut import SutNames

TEMPLATES = manifests_dir() / "legacy"
MODES = ("auto", "serial", "concurrent")


# ------------------------------------------------------------------------------------------- rendering


def load_template(name: str) -> dict[str, Any]:
    """One template of ``manifests/legacy/`` parsed (``scheduler.yaml`` / ``device-plugin.yaml``)."""
    return yaml.safe_load((TEMPLATES / name).read_text(encoding="utf-8"))


def rename_generation(obj: Any, names: SutNames) -> Any:
    """A copy of ``obj`` with ``xpushare``/``XPUSHARE_`` replaced by the generation's names in every string
    key and value (the templates are written for the xpushare generation; nvshare is a rename)."""
    if names.generation == "xpushare":
        return copy.deepcopy(obj)

    def text(s: str) -> str:
        return s.replace("XPUSHARE_", names.env_prefix).replace("xpushare", names.generation)

    if isinstance(obj, dict):
        return {text(k) if isinstance(k, str) else k: rename_generation(v, names) for k, v in obj.items()}
    if isinstance(obj, list):
        return [rename_generation(v, names) for v in obj]
    return text(obj) if isinstance(obj, str) else obj


def set_env(container: dict[str, Any], name: str, value: str) -> None:
    """Set ``name`` in a container's env list: every existing entry of that name is replaced by one
    ``{name, value}`` at the first one's place (appended when absent). Never leaves a duplicate."""
    env = container.setdefault("env", [])
    if not isinstance(env, list):
        raise ValueError("container env must be a list")
    first = next((i for i, e in enumerate(env) if isinstance(e, dict) and e.get("name") == name), None)
    kept = [e for e in env if not (isinstance(e, dict) and e.get("name") == name)]
    entry = {"name": name, "value": str(value)}
    if first is None:
        kept.append(entry)
    else:
        kept.insert(first, entry)
    container["env"] = kept


def _container(doc: Mapping[str, Any], name: str) -> dict[str, Any]:
    containers = doc["spec"]["template"]["spec"]["containers"]
    found = next((c for c in containers if c.get("name") == name), None)
    if found is None:
        raise ValueError(f"template {doc['metadata']['name']}: no container {name!r}")
    return found


def image_names(names: SutNames, registry: str, tag: str, overrides: Mapping[str, str] | None = None) -> dict[str, str]:
    """``{scheduler, device_plugin, lib}`` images: ``<registry>/<gen>-<component>:<tag>``
    (docs/sut/kubernetes.md §images) or overrides."""
    g = names.generation
    images = {
        "scheduler": f"{registry}/{g}-scheduler:{tag}",
        "device_plugin": f"{registry}/{g}-device-plugin:{tag}",
        "lib": f"{registry}/{g}-lib:{tag}",
    }
    images.update({k: str(v) for k, v in (overrides or {}).items() if k in images})
    return images


def render_scheduler(names: SutNames, image: str, mode: str,
                     template: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The scheduler DaemonSet: the template renamed for the generation, its image set and
    ``<PREFIX>SCHEDULING_MODE=<mode>`` in the container's env list. Raises ValueError for a bad mode."""
    if mode not in MODES:
        raise ValueError(f"scheduling mode must be one of {', '.join(MODES)}, not {mode!r}")
    doc = rename_generation(template if template is not None else load_template("scheduler.yaml"), names)
    container = _container(doc, names.scheduler_daemonset)
    container["image"] = image
    set_env(container, names.env_scheduling_mode, mode)
    return doc


def render_device_plugin(names: SutNames, images: Mapping[str, str], *, virtual_devices: int, plugin_gpus: int,
                         template: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The device-plugin DaemonSet (CUDA form): both images, ``<PREFIX>VIRTUAL_DEVICES`` and the
    ``nvidia.com/gpu`` request of the plugin container (left out when ``plugin_gpus`` is 0)."""
    doc = rename_generation(template if template is not None else load_template("device-plugin.yaml"), names)
    _container(doc, f"{names.generation}-lib")["image"] = images["lib"]
    plugin = _container(doc, names.device_plugin_daemonset)
    plugin["image"] = images["device_plugin"]
    set_env(plugin, names.env_virtual_devices, str(int(virtual_devices)))
    limits = plugin.setdefault("resources", {}).setdefault("limits", {})
    if plugin_gpus > 0:
        limits["nvidia.com/gpu"] = int(plugin_gpus)
    else:
        limits.pop("nvidia.com/gpu", None)
    return doc
