"""Names of the Kubernetes objects the k8s backend creates: DNS-1123 object names, label values and the label
every object of the tool carries (:data:`MANAGED_BY`).

Pure functions (no kubectl); the case modules use :func:`dns1123` to name the pods they look for.
"""

from __future__ import annotations

import re

__all__ = ["MANAGED_BY", "RUN_ID_LABEL", "dns1123", "label_value", "run_namespace", "tenant_namespace"]

#: The label selector of every object the tool creates (leftovers of any run are found by it).
MANAGED_BY = "app.kubernetes.io/managed-by=xpushare"
#: The label naming the run that created an object (its value: :func:`label_value` of the run id).
RUN_ID_LABEL = "xpushare/run-id"


def dns1123(text: str, limit: int = 63) -> str:
    """A DNS-1123 label: lower case alphanumerics and '-', at most ``limit`` characters."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return name[:limit].rstrip("-") or "x"


def label_value(text: str) -> str:
    """A valid label value (alphanumerics, '-', '_', '.', at most 63, alphanumeric at both ends)."""
    value = re.sub(r"[^A-Za-z0-9_.-]+", "-", text)[:63]
    return value.strip("-_.") or "x"


def run_namespace(run_id: str) -> str:
    """The namespace of a run's own (``xpushare-<run id>`` as a DNS-1123 label, at most 63 characters)."""
    return dns1123(f"xpushare-{run_id}")


def tenant_namespace(base: str, tenant: str) -> str:
    """The namespace of ``tenant`` beside the run namespace ``base``: ``<base>-<tenant>``, ``base`` shortened so
    that the tenant's part is never cut off (two tenants never share a namespace)."""
    part = dns1123(tenant, 20)
    return dns1123(f"{base[:62 - len(part)].rstrip('-')}-{part}")
