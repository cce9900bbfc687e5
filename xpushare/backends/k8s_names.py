"""Names of the Kubernetes objects the k8s backend creates: DNS-1123 object names, label values and the label
every object of the tool carries (:data:`MANAGED_BY`).

Pure functions (no kubectl); the case modules use :func:`dns1123` to name the pods they look for.
"""

from __future__ import annotations

import hashlib
import re

__all__ = ["ATTEMPT_LABEL", "MANAGED_BY", "RUN_ID_LABEL", "RUN_KEY_LABEL", "dns1123", "label_value", "run_key",
           "run_labels", "run_namespace", "tenant_namespace"]

#: The label selector of every object the tool creates (leftovers of any run are found by it).
MANAGED_BY = "app.kubernetes.io/managed-by=xpushare"
#: The label naming the run that created an object (its value: :func:`label_value` of the run id).
RUN_ID_LABEL = "xpushare/run-id"
#: The label that names the run exactly (:func:`run_key`): :func:`label_value` of two run ids may be equal
#: (``abc`` and ``abc-``; 64-character ids cut to 63), so ``invoke clean --run-id`` selects by this one.
RUN_KEY_LABEL = "xpushare/run-key"
#: The label naming the attempt of the case that created a pod (:attr:`xpushare.backends.base.CaseContext.attempt`).
ATTEMPT_LABEL = "xpushare/attempt"


def dns1123(text: str, limit: int = 63) -> str:
    """A DNS-1123 label: lower case alphanumerics and '-', at most ``limit`` characters."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return name[:limit].rstrip("-") or "x"


def label_value(text: str) -> str:
    """A valid label value (alphanumerics, '-', '_', '.', at most 63, alphanumeric at both ends)."""
    value = re.sub(r"[^A-Za-z0-9_.-]+", "-", text)[:63]
    return value.strip("-_.") or "x"


def run_key(run_id: str) -> str:
    """The value of :data:`RUN_KEY_LABEL` for ``run_id``: the first 40 hex digits of its SHA-256, one-to-one
    in practice where :func:`label_value` is not."""
    return hashlib.sha256(run_id.encode("utf-8")).hexdigest()[:40]


def run_labels(run_id: str) -> dict[str, str]:
    """The labels that name run ``run_id`` on every object it creates: :data:`RUN_ID_LABEL` (readable) and
    :data:`RUN_KEY_LABEL` (exact)."""
    return {RUN_ID_LABEL: label_value(run_id), RUN_KEY_LABEL: run_key(run_id)}


def run_namespace(run_id: str) -> str:
    """The namespace of a run's own (``xpushare-<run id>`` as a DNS-1123 label, at most 63 characters)."""
    return dns1123(f"xpushare-{run_id}")


def tenant_namespace(base: str, tenant: str) -> str:
    """The namespace of ``tenant`` beside the run namespace ``base``: ``<base>-<tenant>``, ``base`` shortened so
    that the tenant's part is never cut off (two tenants never share a namespace)."""
    part = dns1123(tenant, 20)
    return dns1123(f"{base[:62 - len(part)].rstrip('-')}-{part}")
