"""A minimal Kubernetes API server that the real ``kubectl`` accepts, for the test lab only.

It serves exactly what ``kubectl`` sends for the verbs xpushare uses (checked with ``kubectl -v=8``):

* legacy discovery (``/api``, ``/api/v1``, ``/apis``, ``/apis/apps/v1``, ``/apis/policy/v1``); the
  aggregated-discovery ``Accept`` is answered with plain ``application/json``, which kubectl takes as
  "no aggregated discovery" and falls back on; ``/version``; ``/openapi/*`` is 404 (kubectl tolerates
  it for the verbs used);
* pods: create (``kubectl apply`` / ``create``), get, list and watch with label selectors (``=``,
  ``==``, ``!=``, ``in``, ``notin``, exists, ``!key``) and field selectors (``metadata.name``,
  ``metadata.namespace``, ``spec.nodeName``, ``status.phase``), patch (merge, strategic merge, JSON
  patch), delete (graceful with ``gracePeriodSeconds``; ``0`` removes at once), ``pods/<n>/log``
  (``follow``, ``timestamps``, ``sinceTime``, ``sinceSeconds``, ``tailLines``, ``previous``,
  ``container``), ``pods/<n>/eviction`` (policy/v1) and ``pods/<n>:<port>/proxy/<path>``;
* daemonsets (apps/v1): create, get, list, watch, patch (a spec change bumps ``metadata.generation``);
* nodes: create, get, list, watch, patch (cordon is ``spec.unschedulable``);
* namespaces: create, get, list, patch, delete (deleting one deletes its pods and every other object in it);
  a namespaced object is created only in an existing namespace (404 ``namespaces "x" not found``), and each
  namespace gets its ``default`` ServiceAccount at once (the controller's job on a real cluster);
* serviceaccounts: get, list (only the ``default`` ones);
* configmaps (v1) and leases (coordination.k8s.io/v1): create, get, list, watch, patch, delete and
  replace (``PUT``, ``kubectl replace``: a ``metadata.resourceVersion`` that is not the stored one is 409
  Conflict, as optimistic concurrency on a real server).

The server only stores objects. Controllers that give them life (scheduling pods to nodes, running
containers, DaemonSet rollouts) live in :mod:`tests.lab.kubelet` and act on the same :class:`Store`.

Errors are ``Status`` objects with kubectl's usual ``code``/``reason`` (NotFound 404, AlreadyExists
409, Invalid 422, BadRequest 400, MethodNotAllowed 405, Gone 410) so kubectl prints its normal
``Error from server (NotFound): pods "x" not found``.

Container logs are read from files in the layout of :func:`pod_log_path` (one CRI-style line per
output line: ``<RFC3339Nano> stdout F <text>``), written by the lab kubelet.
"""

from __future__ import annotations

import builtins
import hashlib
import http.server
import json
import os
import pickle
import re
import socketserver
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

Obj = dict[str, Any]

# -------------------------------------------------------------------------------------- objects


def clone(obj: Any) -> Any:
    """A deep copy of ``obj``, a JSON-like API object (dicts, lists, strings, numbers): pickle's round trip, about
    four times faster than ``copy.deepcopy``, which the control plane's 50 ms reconcile loop would spend most of its
    time in (every step lists the pods of both nodes)."""
    return pickle.loads(pickle.dumps(obj, pickle.HIGHEST_PROTOCOL))


# ----------------------------------------------------------------------------------------- time


def now_rfc3339() -> str:
    """Current UTC time with second resolution, as Kubernetes writes ``metav1.Time``."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339nano(t: float) -> str:
    """``t`` (epoch seconds) as Go's RFC3339Nano: trailing zeros of the fraction trimmed."""
    dt = datetime.fromtimestamp(t, timezone.utc)
    frac = f"{dt.microsecond * 1000:09d}".rstrip("0")
    return dt.strftime("%Y-%m-%dT%H:%M:%S") + (f".{frac}" if frac else "") + "Z"


def parse_rfc3339(text: str) -> float:
    """Epoch seconds of an RFC3339 time with optional fraction (any number of digits) and ``Z``/offset."""
    m = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)", text.strip())
    if not m:
        raise ValueError(f"not an RFC3339 time: {text!r}")
    base = datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S")
    tz = timezone.utc if m.group(3) == "Z" else datetime.strptime(m.group(3), "%z").tzinfo
    frac = float("0." + m.group(2)) if m.group(2) else 0.0
    return base.replace(tzinfo=tz).timestamp() + frac


# ------------------------------------------------------------------------------------- errors


class ApiError(Exception):
    """An API failure, rendered as a ``Status`` object."""

    def __init__(self, code: int, reason: str, message: str, details: Obj | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details or {}

    def status(self) -> Obj:
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "details": self.details,
            "code": self.code,
        }


def not_found(resource: str, name: str, group: str = "") -> ApiError:
    qualified = f"{resource}.{group}" if group else resource
    return ApiError(404, "NotFound", f'{qualified} "{name}" not found', {"name": name, "kind": resource})


# ----------------------------------------------------------------------------------- resources


@dataclass(frozen=True)
class Resource:
    """One served resource type."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ("create", "delete", "get", "list", "patch", "watch")

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


RESOURCES: dict[str, Resource] = {
    "pods": Resource("", "v1", "pods", "Pod", True, ("po",)),
    "nodes": Resource("", "v1", "nodes", "Node", False, ("no",)),
    "namespaces": Resource("", "v1", "namespaces", "Namespace", False, ("ns",)),
    "serviceaccounts": Resource("", "v1", "serviceaccounts", "ServiceAccount", True, ("sa",), ("get", "list", "watch")),
    "daemonsets": Resource("apps", "v1", "daemonsets", "DaemonSet", True, ("ds",)),
    "poddisruptionbudgets": Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, ("pdb",)),
    "configmaps": Resource("", "v1", "configmaps", "ConfigMap", True, ("cm",),
                           ("create", "delete", "get", "list", "patch", "update", "watch")),
    "leases": Resource("coordination.k8s.io", "v1", "leases", "Lease", True, (),
                       ("create", "delete", "get", "list", "patch", "update", "watch")),
}
#: The API groups served besides the core group (each in version v1).
GROUPS = ("apps", "policy", "coordination.k8s.io")


def openapi_v3(gv_path: str) -> Obj:
    """A minimal OpenAPI v3 document for one group-version (``api/v1``, ``apis/apps/v1``).

    It carries no schemas, only the PATCH operations with their ``x-kubernetes-group-version-kind``
    and the ``fieldValidation`` query parameter: that is how kubectl learns that the server validates
    fields itself (``kubectl apply``'s default ``--validate=strict``), so it needs no schema.
    """
    group, version = ("", "v1") if gv_path == "api/v1" else tuple(gv_path.split("/")[1:3])
    paths: Obj = {}
    for r in RESOURCES.values():
        if (r.group, r.version) != (group, version):
            continue
        base = f"/{gv_path}/" + ("namespaces/{namespace}/" if r.namespaced else "") + r.plural + "/{name}"
        params = [{"name": n, "in": "query", "schema": {"type": "string"}}
                  for n in ("dryRun", "fieldManager", "fieldValidation", "force", "pretty")]
        gvk = {"group": r.group, "version": r.version, "kind": r.kind}
        paths[base] = {"patch": {"operationId": f"patch{r.kind}", "parameters": params,
                                 "responses": {"200": {"description": "OK"}},
                                 "x-kubernetes-action": "patch", "x-kubernetes-group-version-kind": gvk}}
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes (lab)", "version": "v1.37.1-lab"}, "paths": paths,
            "components": {"schemas": {}}}


def _discovery_resources(group: str, version: str) -> list[Obj]:
    out: list[Obj] = []
    for r in RESOURCES.values():
        if (r.group, r.version) != (group, version):
            continue
        out.append(
            {
                "name": r.plural,
                "singularName": r.kind.lower(),
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": list(r.verbs),
                "shortNames": list(r.short_names),
                **({"categories": ["all"]} if r.plural in ("pods", "daemonsets") else {}),
            }
        )
        out.append({"name": f"{r.plural}/status", "singularName": "", "namespaced": r.namespaced,
                    "kind": r.kind, "verbs": ["get", "patch"]})
        if r.plural == "pods":
            out.append({"name": "pods/log", "singularName": "", "namespaced": True, "kind": "Pod",
                        "verbs": ["get"]})
            out.append({"name": "pods/eviction", "singularName": "", "namespaced": True, "group": "policy",
                        "version": "v1", "kind": "Eviction", "verbs": ["create"]})
            out.append({"name": "pods/proxy", "singularName": "", "namespaced": True, "kind": "PodProxyOptions",
                        "verbs": ["get"]})
    return out


# ----------------------------------------------------------------------------------- selectors


_LABEL_KEY = r"[A-Za-z0-9][-A-Za-z0-9_./]*"


def _split_top(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts if p.strip()]


def parse_label_selector(text: str | None) -> Callable[[dict[str, str]], bool]:
    """A predicate over a label map for a Kubernetes label selector string.

    Raises:
        ApiError: 400 BadRequest for a requirement it cannot parse.
    """
    reqs: list[tuple[str, str, frozenset[str]]] = []  # (key, op, values); op in in/notin/exists/absent
    for part in _split_top(text or ""):
        m = re.fullmatch(rf"({_LABEL_KEY})\s+(in|notin)\s+\(([^)]*)\)", part)
        if m:
            reqs.append((m.group(1), m.group(2), frozenset(v.strip() for v in m.group(3).split(",") if v.strip())))
            continue
        m = re.fullmatch(rf"({_LABEL_KEY})\s*(==|=|!=)\s*([-A-Za-z0-9_.]*)", part)
        if m:
            reqs.append((m.group(1), "notin" if m.group(2) == "!=" else "in", frozenset([m.group(3)])))
            continue
        m = re.fullmatch(rf"!\s*({_LABEL_KEY})", part)
        if m:
            reqs.append((m.group(1), "absent", frozenset()))
            continue
        m = re.fullmatch(rf"({_LABEL_KEY})", part)
        if m:
            reqs.append((m.group(1), "exists", frozenset()))
            continue
        raise ApiError(400, "BadRequest", f"unable to parse requirement: {part!r}")

    def matches(labels: dict[str, str]) -> bool:
        for key, op, values in reqs:
            value = labels.get(key)
            ok = {"in": value in values, "notin": value not in values, "exists": key in labels,
                  "absent": key not in labels}[op]
            if not ok:
                return False
        return True

    return matches


def _field_value(obj: Obj, path: str) -> str:
    cur: Any = obj
    for key in path.split("."):
        cur = cur.get(key) if isinstance(cur, dict) else None
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return "" if cur is None else str(cur)


def parse_field_selector(text: str | None) -> Callable[[Obj], bool]:
    """A predicate over an object for a field selector (``a.b=c``, ``a.b==c``, ``a.b!=c``, comma-joined)."""
    reqs: list[tuple[str, bool, str]] = []  # (path, equal, value)
    for part in _split_top(text or ""):
        m = re.fullmatch(r"([A-Za-z.]+)\s*(==|=|!=)\s*(.*)", part)
        if not m:
            raise ApiError(400, "BadRequest", f"invalid field selector: {part!r}")
        reqs.append((m.group(1), m.group(2) != "!=", m.group(3).strip()))

    def matches(obj: Obj) -> bool:
        return all((_field_value(obj, path) == value) == equal for path, equal, value in reqs)

    return matches


# ------------------------------------------------------------------------------------- patches


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return clone(patch)
    result = clone(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Strategic merge patch, reduced to what the lab needs.

    Maps merge like a JSON merge patch; lists whose items are maps with a ``name`` (containers, env,
    ports, volumes) merge by name; other lists are replaced; ``$patch``/``$setElementOrder``/
    ``$retainKeys``/``$deleteFromPrimitiveList`` directives are dropped.
    """
    if not isinstance(patch, dict):
        return clone(patch)
    result = clone(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        if value is None:
            result.pop(key, None)
        elif (
            isinstance(value, list)
            and isinstance(result.get(key), list)
            and value
            and all(isinstance(v, dict) and "name" in v for v in value)
            and all(isinstance(v, dict) and "name" in v for v in result[key])
        ):
            merged = {item["name"]: item for item in clone(result[key])}
            for item in value:
                if item.get("$patch") == "delete":
                    merged.pop(item["name"], None)
                else:
                    merged[item["name"]] = strategic_merge_patch(merged.get(item["name"]), item)
            result[key] = list(merged.values())
        else:
            result[key] = strategic_merge_patch(result.get(key), value)
    return result


def _pointer(path: str) -> list[str]:
    if not path.startswith("/"):
        raise ApiError(422, "Invalid", f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def json_patch(target: Obj, ops: list[Obj]) -> Obj:
    """RFC 6902 JSON patch: ``add``, ``replace``, ``remove``, ``test``."""
    doc = clone(target)
    for op in ops:
        parts = _pointer(op.get("path", ""))
        parent: Any = doc
        for p in parts[:-1]:
            parent = parent[int(p)] if isinstance(parent, list) else parent.setdefault(p, {})
        last = parts[-1]
        kind = op.get("op")
        try:
            if kind in ("add", "replace"):
                if isinstance(parent, list):
                    idx = len(parent) if last == "-" else int(last)
                    if kind == "add":
                        parent.insert(idx, op.get("value"))
                    else:
                        parent[idx] = op.get("value")
                else:
                    if kind == "replace" and last not in parent:
                        raise KeyError(last)
                    parent[last] = op.get("value")
            elif kind == "remove":
                if isinstance(parent, list):
                    del parent[int(last)]
                else:
                    del parent[last]
            elif kind == "test":
                cur = parent[int(last)] if isinstance(parent, list) else parent[last]
                if cur != op.get("value"):
                    raise ApiError(422, "Invalid", f"test operation failed at {op.get('path')}")
            else:
                raise ApiError(422, "Invalid", f"unsupported JSON patch op {kind!r}")
        except (KeyError, IndexError, ValueError) as exc:
            raise ApiError(422, "Invalid", f"JSON patch {kind} {op.get('path')}: {exc}") from None
    return doc


# --------------------------------------------------------------------------------------- store


@dataclass
class Event:
    rv: int
    resource: str
    type: str
    obj: Obj


_NAME_RE = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


class Store:
    """All API objects, a global ``resourceVersion`` counter and a bounded event log for watches.

    Objects are plain dicts keyed by ``(plural, namespace or "", name)``. Every mutation bumps the
    counter, stamps ``metadata.resourceVersion`` and appends a watch event. Thread-safe.

    The control plane's reconcile loop sleeps in :meth:`wait_change` until a write or a :meth:`kick` (a pod
    process ended) instead of polling: :meth:`version` names the state it last acted on.
    """

    def __init__(self, *, event_log: int = 20000) -> None:
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)  # watches: a new event
        self.changed = threading.Condition(self.lock)  # the reconcile loop: a write or a kick
        self.rv = 1
        self.kicks = 0
        self.objects: dict[tuple[str, str, str], Obj] = {}
        self.events: deque[Event] = deque(maxlen=event_log)
        self.closed = False

    # -- helpers

    def _emit(self, resource: str, type_: str, obj: Obj) -> None:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.events.append(Event(self.rv, resource, type_, clone(obj)))
        self.cond.notify_all()
        self.changed.notify_all()

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()
            self.changed.notify_all()

    # -- change notification (the reconcile loop)

    def version(self) -> tuple[int, int]:
        """The state's stamp: (resourceVersion, kicks); it differs after any write or :meth:`kick`."""
        with self.lock:
            return self.rv, self.kicks

    def kick(self) -> None:
        """Wake :meth:`wait_change` without a write (something outside the store changed: a process ended)."""
        with self.changed:
            self.kicks += 1
            self.changed.notify_all()

    def wait_change(self, seen: tuple[int, int], timeout: float) -> tuple[int, int]:
        """Wait up to ``timeout`` seconds until :meth:`version` differs from ``seen`` (or the store is closed);
        returns the version now."""
        with self.changed:
            if (self.rv, self.kicks) == seen and not self.closed and timeout > 0:
                self.changed.wait(timeout)
            return self.rv, self.kicks

    # -- CRUD

    def create(self, resource: str, namespace: str, obj: Obj) -> Obj:
        """Store a new object (``metadata.name`` or ``generateName`` required); returns a copy.

        Raises:
            ApiError: 409 AlreadyExists, 422 Invalid.
        """
        res = RESOURCES[resource]
        obj = clone(obj)
        meta = obj.setdefault("metadata", {})
        with self.lock:
            if not meta.get("name") and meta.get("generateName"):
                while True:
                    suffix = uuid.uuid4().hex[:5]
                    meta["name"] = f"{meta['generateName']}{suffix}"
                    if (resource, namespace, meta["name"]) not in self.objects:
                        break
            name = meta.get("name") or ""
            if not _NAME_RE.fullmatch(name):
                raise ApiError(422, "Invalid", f'{res.kind} "{name}" is invalid: metadata.name: Invalid value: '
                               f'"{name}": a lowercase RFC 1123 subdomain must consist of lower case '
                               "alphanumeric characters, '-' or '.'",
                               {"name": name, "kind": res.kind})
            key = (resource, namespace if res.namespaced else "", name)
            if key in self.objects:
                raise ApiError(409, "AlreadyExists", f'{resource} "{name}" already exists',
                               {"name": name, "kind": resource})
            obj["kind"] = res.kind
            obj["apiVersion"] = res.api_version
            if res.namespaced:
                meta["namespace"] = namespace
            else:
                meta.pop("namespace", None)
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now_rfc3339()
            meta.setdefault("generation", 1)
            self.objects[key] = obj
            self._emit(resource, "ADDED", obj)
            if resource == "namespaces":  # the service-account controller's part: pods need it to be admitted
                self.create("serviceaccounts", name, {"metadata": {"name": "default"}})
            return clone(obj)

    def get(self, resource: str, namespace: str, name: str) -> Obj:
        """A copy of one object. Raises ApiError 404."""
        res = RESOURCES[resource]
        with self.lock:
            obj = self.objects.get((resource, namespace if res.namespaced else "", name))
            if obj is None:
                raise not_found(resource, name, res.group)
            return clone(obj)

    def find(self, resource: str, namespace: str, name: str) -> Obj | None:
        """Like :meth:`get`, ``None`` when absent."""
        try:
            return self.get(resource, namespace, name)
        except ApiError:
            return None

    def list(
        self,
        resource: str,
        namespace: str | None = None,
        labels: Callable[[dict[str, str]], bool] | None = None,
        fields: Callable[[Obj], bool] | None = None,
    ) -> tuple[list[Obj], int]:
        """Copies of the matching objects (sorted by namespace, name) and the current resourceVersion."""
        with self.lock:
            items = [
                clone(o)
                for (r, ns, _), o in sorted(self.objects.items(), key=lambda kv: kv[0])
                if r == resource
                and (namespace is None or ns == namespace)
                and (labels is None or labels(o["metadata"].get("labels") or {}))
                and (fields is None or fields(o))
            ]
            return items, self.rv

    def mutate(self, resource: str, namespace: str, name: str, fn: Callable[[Obj], Obj | None]) -> Obj:
        """Apply ``fn`` to a copy of the object and store the result when it differs; returns a copy.

        ``fn`` may modify its argument in place (return ``None``) or return a new dict. Identity fields
        (kind, apiVersion, name, namespace, uid, creationTimestamp) are kept. A change of ``spec`` bumps
        ``metadata.generation``. Raises ApiError 404.
        """
        res = RESOURCES[resource]
        key = (resource, namespace if res.namespaced else "", name)
        with self.lock:
            cur = self.objects.get(key)
            if cur is None:
                raise not_found(resource, name, res.group)
            work = clone(cur)
            new = fn(work)
            new = work if new is None else new
            meta = new.setdefault("metadata", {})
            for k in ("name", "namespace", "uid", "creationTimestamp", "resourceVersion", "deletionTimestamp",
                      "deletionGracePeriodSeconds"):
                if k in cur["metadata"] and k not in meta:
                    meta[k] = cur["metadata"][k]
            meta["name"], meta["uid"] = cur["metadata"]["name"], cur["metadata"]["uid"]
            new["kind"], new["apiVersion"] = cur["kind"], cur["apiVersion"]
            if new.get("spec") != cur.get("spec"):
                meta["generation"] = int(cur["metadata"].get("generation", 1)) + 1
            if new == cur:
                return clone(cur)
            self.objects[key] = new
            self._emit(resource, "MODIFIED", new)
            return clone(new)

    def remove(self, resource: str, namespace: str, name: str, uid: str | None = None) -> Obj | None:
        """Remove an object at once (a ``DELETED`` event); ``uid`` guards against a same-named successor."""
        res = RESOURCES[resource]
        key = (resource, namespace if res.namespaced else "", name)
        with self.lock:
            cur = self.objects.get(key)
            if cur is None or (uid is not None and cur["metadata"]["uid"] != uid):
                return None
            del self.objects[key]
            self._emit(resource, "DELETED", cur)
            return clone(cur)

    def events_after(self, rv: int, timeout: float) -> tuple[builtins.list[Event], bool]:
        """Events with ``rv`` greater than the argument, waiting up to ``timeout`` for one.

        Returns (events, expired): ``expired`` when ``rv`` is older than the event log holds (410 Gone).
        """
        with self.cond:
            if self.events and rv < self.events[0].rv - 1:
                return [], True
            if not (self.events and self.events[-1].rv > rv) and not self.closed:
                self.cond.wait(timeout)
            return [e for e in self.events if e.rv > rv], False


# ---------------------------------------------------------------------------------------- pods


def default_pod(obj: Obj) -> Obj:
    """Fill the defaults the real API server adds to a new pod and an initial ``Pending`` status."""
    spec = obj.setdefault("spec", {})
    containers = spec.get("containers")
    name = obj.get("metadata", {}).get("name", "")
    if not containers:
        raise ApiError(422, "Invalid", f'Pod "{name}" is invalid: spec.containers: Required value',
                       {"name": name, "kind": "Pod"})
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("priority", 0)
    for c in containers:
        if not c.get("name"):
            raise ApiError(422, "Invalid", f'Pod "{name}" is invalid: spec.containers[0].name: Required value',
                           {"name": name, "kind": "Pod"})
        image = c.get("image", "")
        c.setdefault("imagePullPolicy", "Always" if image.endswith(":latest") or ":" not in image else "IfNotPresent")
        c.setdefault("terminationMessagePath", "/dev/termination-log")
        c.setdefault("terminationMessagePolicy", "File")
        res = c.setdefault("resources", {})
        limits = res.get("limits") or {}
        if limits:
            requests = res.setdefault("requests", {})
            for k, v in limits.items():
                requests.setdefault(k, v)
    obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
    return obj


def default_daemonset(obj: Obj) -> Obj:
    """Defaults of a new DaemonSet: RollingUpdate strategy and a zero status."""
    spec = obj.setdefault("spec", {})
    spec.setdefault("updateStrategy", {"type": "RollingUpdate",
                                       "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}})
    spec.setdefault("revisionHistoryLimit", 10)
    obj["status"] = {"currentNumberScheduled": 0, "numberMisscheduled": 0, "desiredNumberScheduled": 0,
                     "numberReady": 0, "observedGeneration": 0}
    return obj


# ---------------------------------------------------------------------------------------- logs


def pod_log_dir(logs_dir: Path, namespace: str, name: str, uid: str) -> Path:
    """Directory of one pod's container logs: ``<logs_dir>/<ns>_<name>_<uid>``."""
    return logs_dir / f"{namespace}_{name}_{uid}"


def pod_log_path(logs_dir: Path, namespace: str, name: str, uid: str, container: str, attempt: int) -> Path:
    """File of one container run: ``<pod_log_dir>/<container>/<attempt>.log`` (attempt = restartCount)."""
    return pod_log_dir(logs_dir, namespace, name, uid) / container / f"{attempt}.log"


def _log_line(raw: str) -> tuple[float, str, str] | None:
    """Split one CRI log line into (epoch, rfc3339nano, text)."""
    parts = raw.rstrip("\n").split(" ", 3)
    if len(parts) < 4:
        return None
    try:
        return parse_rfc3339(parts[0]), parts[0], parts[3]
    except ValueError:
        return None


# ---------------------------------------------------------------------------------------- HTTP


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64


class ApiServer:
    """The HTTP front of a :class:`Store` on ``http://<address>:<port>``.

    ``hooks`` lets the control plane act on requests: ``delete_pod(pod, grace_s) -> Obj | None`` decides
    how a pod is deleted (the default removes at once), ``delete_namespace(name)`` cascades.
    """

    def __init__(self, store: Store, address: str, port: int, *, logs_dir: Path,
                 delete_pod: Callable[[Obj, int | None], Obj] | None = None) -> None:
        self.store = store
        self.logs_dir = logs_dir
        self.delete_pod = delete_pod or (lambda pod, grace: self._remove_pod(pod))
        handler = type("Handler", (_Handler,), {"api": self})
        self.httpd = _Server((address, port), handler)
        host, port = self.httpd.server_address[:2]
        self.address: str = host.decode() if isinstance(host, bytes) else str(host)
        self.port: int = int(port)
        self._thread: threading.Thread | None = None
        self.tls: _Server | None = None
        self.tls_token = ""
        self.deny_pod_reads: Callable[[], bool] = lambda: False
        #: Faults of the plain-HTTP front: () -> (seconds to delay each request, answer 500 InternalError).
        self.request_fault: Callable[[], tuple[float, bool]] = lambda: (0.0, False)
        self._tls_thread: threading.Thread | None = None

    def serve_tls(self, port: int, cert: Path, key: Path, token: str,
                  deny_pod_reads: Callable[[], bool] | None = None) -> int:
        """Also serve the API over HTTPS on ``port`` (0: a free one) for in-cluster clients; returns the port.

        This is the front the real SUT scheduler reads pod annotations from: requests need
        ``Authorization: Bearer <token>`` (else 401); while ``deny_pod_reads()`` is true, pod reads are
        refused with 403 (the "annotations not served" fault).
        """
        self.tls_token = token
        if deny_pod_reads is not None:
            self.deny_pod_reads = deny_pod_reads
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(cert), str(key))
        handler = type("TlsHandler", (_TlsHandler,), {"api": self})
        self.tls = _Server((self.address, port), handler)
        self.tls.socket = ctx.wrap_socket(self.tls.socket, server_side=True)
        self._tls_thread = threading.Thread(target=self.tls.serve_forever, name="kubeapi-tls", daemon=True)
        self._tls_thread.start()
        return int(self.tls.server_address[1])

    def _remove_pod(self, pod: Obj) -> Obj:
        meta = pod["metadata"]
        return self.store.remove("pods", meta["namespace"], meta["name"], meta["uid"]) or pod

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}"

    def start(self) -> None:
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="kubeapi", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.store.close()
        self.httpd.shutdown()
        self.httpd.server_close()
        if self.tls is not None:
            self.tls.shutdown()
            self.tls.server_close()


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    api: ApiServer
    server_version = "lab-kube-apiserver/0.1"

    def log_message(self, format: str, *args: Any) -> None:
        if os.environ.get("XPUSHARE_LAB_API_DEBUG"):
            super().log_message(format, *args)

    # -- plumbing

    def _send(self, code: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, code: int, obj: Any) -> None:
        self._send(code, json.dumps(obj).encode())

    def _error(self, err: ApiError) -> None:
        self._json(err.code, err.status())

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not raw:
            return {}
        try:
            return json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ApiError(400, "BadRequest", f"the body of the request was in an unknown format: {exc}") from None

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _start_stream(self, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def _dispatch(self, method: str) -> None:
        if self.server is self.api.httpd and self._faulted():
            return
        url = urllib.parse.urlsplit(self.path)
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query, keep_blank_values=True).items()}
        try:
            self._route(method, url.path.rstrip("/") or "/", query)
        except ApiError as err:
            self._error(err)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # a bug in the lab: answer 500 rather than hang kubectl
            self._error(ApiError(500, "InternalError", f"lab API server: {type(exc).__name__}: {exc}"))

    def _faulted(self) -> bool:
        """Act on the plain front's faults (kubectl's side; the in-cluster HTTPS front is spared); True when
        the request was answered with the 500 fault."""
        delay, fail = self.api.request_fault()
        if delay > 0:
            time.sleep(delay)  # kubectl's --request-timeout fires first: it drops the connection
        if fail:
            self.close_connection = True  # the request body (if any) stays unread
            self._error(ApiError(500, "InternalError", "lab fault api_error_500: the server is failing"))
            return True
        return False

    # -- routing

    def _route(self, method: str, path: str, query: dict[str, str]) -> None:
        api = self.api
        if path in ("/healthz", "/livez", "/readyz"):
            return self._send(200, b"ok", "text/plain; charset=utf-8")
        if path == "/version":
            return self._json(200, {"major": "1", "minor": "37", "gitVersion": "v1.37.1-lab",
                                    "gitCommit": "lab", "gitTreeState": "clean",
                                    "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.25",
                                    "compiler": "gc", "platform": "linux/amd64"})
        if path == "/api":
            return self._json(200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": f"{api.address}:{api.port}"}]})
        if path == "/apis":
            groups = []
            for g in GROUPS:
                entry = {"groupVersion": f"{g}/v1", "version": "v1"}
                groups.append({"name": g, "versions": [entry], "preferredVersion": entry})
            return self._json(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
        if path == "/openapi/v3":
            return self._json(200, {"paths": {gv: {"serverRelativeURL": f"/openapi/v3/{gv}?hash=lab0"}
                                              for gv in ("api/v1", *(f"apis/{g}/v1" for g in GROUPS))}})
        if path.startswith("/openapi/v3/"):
            return self._json(200, openapi_v3(path[len("/openapi/v3/"):]))
        if path == "/api/v1" or path in {f"/apis/{g}/v1" for g in GROUPS}:
            group, version = ("", "v1") if path == "/api/v1" else tuple(path.split("/")[2:4])
            gv = f"{group}/{version}" if group else version
            return self._json(200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv,
                                    "resources": _discovery_resources(group, version)})
        parts = path.strip("/").split("/")
        if parts[0] == "api" and len(parts) >= 3 and parts[1] == "v1":
            group, rest = "", parts[2:]
        elif parts[0] == "apis" and len(parts) >= 4 and parts[2] == "v1" and parts[1] in GROUPS:
            group, rest = parts[1], parts[3:]
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        namespace: str | None = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        resource = rest[0]
        res = RESOURCES.get(resource)
        if res is None or res.group != group:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        name = rest[1] if len(rest) > 1 else None
        sub = "/".join(rest[2:]) if len(rest) > 2 else None
        if res.namespaced and name is not None and namespace is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        ns = namespace or ""
        if name is None:
            if method == "GET":
                if query.get("watch") in ("true", "1"):
                    return self._watch(resource, namespace, query)
                return self._list(resource, namespace, query)
            if method == "POST":
                return self._create(resource, ns, self._body(), query)
            raise ApiError(405, "MethodNotAllowed", f"the server does not allow this method on {resource}")
        if resource == "pods" and sub is not None:
            return self._pod_sub(method, ns, name, sub, query)
        if sub not in (None, "status"):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if method == "GET":
            obj = api.store.get(resource, ns, name)
            return self._json(200, self._maybe_table(resource, [obj], str(api.store.rv), single=True))
        if method == "PATCH":
            return self._patch(resource, ns, name, self._body())
        if method == "PUT" and sub is None and "update" in res.verbs:
            return self._replace(resource, ns, name, self._body())
        if method == "DELETE":
            return self._delete(resource, ns, name, self._body(), query)
        raise ApiError(405, "MethodNotAllowed", f"the server does not allow this method on {resource}")

    # -- verbs

    def _create(self, resource: str, ns: str, body: Any, query: dict[str, str]) -> None:
        res = RESOURCES[resource]
        if not isinstance(body, dict) or body.get("kind") not in (None, res.kind):
            raise ApiError(400, "BadRequest", f"the API version in the data ({body.get('apiVersion')}) does not "
                           f"match the expected API version ({res.api_version})")
        meta_ns = (body.get("metadata") or {}).get("namespace")
        if res.namespaced and meta_ns and meta_ns != ns:
            raise ApiError(400, "BadRequest", "the namespace of the provided object does not match the "
                           "namespace sent on the request")
        if res.namespaced and self.api.store.find("namespaces", "", ns) is None:
            raise ApiError(404, "NotFound", f'namespaces "{ns}" not found', {"name": ns, "kind": "namespaces"})
        if resource == "pods":
            body = default_pod(clone(body))
        elif resource == "daemonsets":
            body = default_daemonset(clone(body))
        if query.get("dryRun"):
            return self._json(201, body)
        obj = self.api.store.create(resource, ns, body)
        self._json(201, obj)

    def _patch(self, resource: str, ns: str, name: str, body: Any) -> None:
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        if ctype == "application/merge-patch+json":
            fn: Callable[[Obj], Obj] = lambda cur: merge_patch(cur, body)  # noqa: E731
        elif ctype == "application/strategic-merge-patch+json":
            fn = lambda cur: strategic_merge_patch(cur, body)  # noqa: E731
        elif ctype == "application/json-patch+json":
            if not isinstance(body, list):
                raise ApiError(400, "BadRequest", "a JSON patch must be a list of operations")
            fn = lambda cur: json_patch(cur, body)  # noqa: E731
        else:
            raise ApiError(415, "UnsupportedMediaType", f"the body of the request was in an unknown format "
                           f"- accepted media types include: application/json-patch+json, "
                           f"application/merge-patch+json, application/strategic-merge-patch+json ({ctype})")
        want_rv = (body.get("metadata") or {}).get("resourceVersion") if isinstance(body, dict) else None
        cur = self.api.store.get(resource, ns, name)
        if want_rv and want_rv != cur["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {resource} "{name}": the object '
                           "has been modified; please apply your changes to the latest version and try again")
        obj = self.api.store.mutate(resource, ns, name, fn)
        self._json(200, obj)

    def _replace(self, resource: str, ns: str, name: str, body: Any) -> None:
        """``PUT``: the whole object anew; a stale ``resourceVersion`` is 409 Conflict (none: unconditional)."""
        res = RESOURCES[resource]
        meta = (body.get("metadata") or {}) if isinstance(body, dict) else {}
        if not isinstance(body, dict) or body.get("kind") not in (None, res.kind) or meta.get("name") != name:
            raise ApiError(400, "BadRequest", f"the body of a {res.kind} update must be that {res.kind}, named {name}")
        want_rv = meta.get("resourceVersion")
        with self.api.store.lock:  # check and write as one step, as etcd's compare-and-swap
            cur = self.api.store.get(resource, ns, name)
            if want_rv and want_rv != cur["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {res.plural}'
                               f'{"." + res.group if res.group else ""} "{name}": the object has been modified; '
                               "please apply your changes to the latest version and try again")
            obj = self.api.store.mutate(resource, ns, name, lambda _cur: clone(body))
        self._json(200, obj)

    def _delete(self, resource: str, ns: str, name: str, body: Any, query: dict[str, str]) -> None:
        store = self.api.store
        grace: int | None = None
        if isinstance(body, dict) and body.get("gracePeriodSeconds") is not None:
            grace = int(body["gracePeriodSeconds"])
        if query.get("gracePeriodSeconds"):
            grace = int(query["gracePeriodSeconds"])
        obj = store.get(resource, ns, name)
        if resource == "pods":
            return self._json(200, self.api.delete_pod(obj, grace))
        if resource == "namespaces":  # at once (no Terminating phase): its pods killed, then everything else in it
            pods, _ = store.list("pods", name)
            for pod in pods:
                self.api.delete_pod(pod, 0)
            for other, r in RESOURCES.items():
                if r.namespaced and other != "pods":
                    for o in store.list(other, name)[0]:
                        store.remove(other, name, o["metadata"]["name"])
        store.remove(resource, ns, name)
        self._json(200, obj)

    def _list(self, resource: str, namespace: str | None, query: dict[str, str]) -> None:
        res = RESOURCES[resource]
        items, rv = self.api.store.list(resource, namespace, parse_label_selector(query.get("labelSelector")),
                                        parse_field_selector(query.get("fieldSelector")))
        body = self._maybe_table(resource, items, str(rv), single=False)
        if body.get("kind") != "Table":
            body = {"kind": f"{res.kind}List", "apiVersion": res.api_version,
                    "metadata": {"resourceVersion": str(rv)}, "items": items}
        self._json(200, body)

    def _watch(self, resource: str, namespace: str | None, query: dict[str, str]) -> None:
        store = self.api.store
        labels = parse_label_selector(query.get("labelSelector"))
        fields = parse_field_selector(query.get("fieldSelector"))
        timeout = float(query.get("timeoutSeconds") or 1800)
        deadline = time.monotonic() + timeout

        def matches(obj: Obj) -> bool:
            return ((namespace is None or obj["metadata"].get("namespace") == namespace)
                    and labels(obj["metadata"].get("labels") or {}) and fields(obj))

        rv_text = query.get("resourceVersion") or ""
        initial = query.get("sendInitialEvents") == "true"
        self._start_stream("application/json")
        if rv_text in ("", "0") or initial:
            items, rv = store.list(resource, namespace, labels, fields)
            for obj in items:
                self._chunk(json.dumps({"type": "ADDED", "object": obj}).encode() + b"\n")
            if initial:  # the watch-list protocol: a bookmark marks the end of the initial state
                res = RESOURCES[resource]
                mark = {"kind": res.kind, "apiVersion": res.api_version, "metadata": {
                    "resourceVersion": str(rv), "annotations": {"k8s.io/initial-events-end": "true"}}}
                self._chunk(json.dumps({"type": "BOOKMARK", "object": mark}).encode() + b"\n")
        else:
            rv = int(rv_text)
        while time.monotonic() < deadline and not store.closed:
            events, expired = store.events_after(rv, min(1.0, max(0.0, deadline - time.monotonic())))
            if expired:
                gone = ApiError(410, "Expired", f"too old resource version: {rv}").status()
                self._chunk(json.dumps({"type": "ERROR", "object": gone}).encode() + b"\n")
                break
            for ev in events:
                rv = ev.rv
                if ev.resource == resource and matches(ev.obj):
                    self._chunk(json.dumps({"type": ev.type, "object": ev.obj}).encode() + b"\n")
        self._end_stream()

    # -- pod subresources

    def _pod_sub(self, method: str, ns: str, name: str, sub: str, query: dict[str, str]) -> None:
        store = self.api.store
        if sub == "log" and method == "GET":
            return self._logs(ns, name, query)
        if sub == "eviction" and method == "POST":
            pod = store.get("pods", ns, name)
            body = self._body()
            opts = (body or {}).get("deleteOptions") or {}
            grace = opts.get("gracePeriodSeconds")
            self.api.delete_pod(pod, None if grace is None else int(grace))
            return self._json(201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                                    "code": 201})
        if sub == "status":
            if method == "GET":
                return self._json(200, store.get("pods", ns, name))
            if method == "PATCH":
                return self._patch("pods", ns, name, self._body())
        if name.count(":") == 1 and sub.startswith("proxy") and method == "GET":
            return self._proxy(ns, name, sub[len("proxy"):] or "/")
        raise ApiError(404, "NotFound", "the server could not find the requested resource")

    def _proxy(self, ns: str, name_port: str, path: str) -> None:
        name, port = name_port.split(":")
        pod = self.api.store.get("pods", ns, name)
        ip = (pod.get("status") or {}).get("podIP")
        if not ip:
            raise ApiError(503, "ServiceUnavailable", f'pod "{name}" has no IP')
        try:
            with urllib.request.urlopen(f"http://{ip}:{port}{path}", timeout=10) as resp:
                self._send(resp.status, resp.read(), resp.headers.get("Content-Type", "text/plain"))
        except urllib.error.HTTPError as exc:
            self._send(exc.code, exc.read(), exc.headers.get("Content-Type", "text/plain"))
        except OSError as exc:
            raise ApiError(503, "ServiceUnavailable", f"error trying to reach service: {exc}") from None

    def _logs(self, ns: str, name: str, query: dict[str, str]) -> None:
        store = self.api.store
        pod = store.get("pods", ns, name)
        meta, spec = pod["metadata"], pod["spec"]
        names = [c["name"] for c in spec.get("containers", [])]
        container = query.get("container") or names[0]
        if container not in names:
            raise ApiError(400, "BadRequest", f"container {container} is not valid for pod {name}")
        statuses = {s["name"]: s for s in (pod.get("status") or {}).get("containerStatuses") or []}
        cstat = statuses.get(container) or {}
        attempt = int(cstat.get("restartCount", 0))
        previous = query.get("previous") in ("true", "1")
        if previous:
            if attempt == 0:
                raise ApiError(400, "BadRequest", f'previous terminated container "{container}" in pod "{name}" '
                               "not found")
            attempt -= 1
        path = pod_log_path(self.api.logs_dir, ns, name, meta["uid"], container, attempt)
        if not path.exists():
            reason = ((cstat.get("state") or {}).get("waiting") or {}).get("reason", "ContainerCreating")
            raise ApiError(400, "BadRequest", f'container "{container}" in pod "{name}" is waiting to start: '
                           f"{reason}")
        since = None
        if query.get("sinceTime"):
            since = parse_rfc3339(query["sinceTime"])
        elif query.get("sinceSeconds"):
            since = time.time() - float(query["sinceSeconds"])
        tail = int(query["tailLines"]) if query.get("tailLines") not in (None, "") else None
        stamps = query.get("timestamps") in ("true", "1")
        follow = query.get("follow") in ("true", "1") and not previous

        def render(line: str) -> bytes | None:
            parsed = _log_line(line)
            if parsed is None or (since is not None and parsed[0] < since):
                return None
            return ((parsed[1] + " " if stamps else "") + parsed[2] + "\n").encode()

        with open(path, encoding="utf-8", errors="replace", newline="") as fh:
            # Lines end at "\n" only (as the CRI log and the follow path): readlines() would also split at
            # a "\r" inside a line (a progress bar's refreshes) and drop both halves.
            *complete, _partial = fh.read().split("\n")
            lines = [b for b in (render(raw) for raw in complete) if b is not None]
            pos = fh.tell()
        if tail is not None:
            lines = lines[-tail:] if tail > 0 else []
        if not follow:
            return self._send(200, b"".join(lines), "text/plain")
        self._start_stream("text/plain")
        if lines:
            self._chunk(b"".join(lines))
        for chunk in self._follow(path, pos, ns, name, meta["uid"], container, attempt, render):
            self._chunk(chunk)
        self._end_stream()

    def _follow(self, path: Path, pos: int, ns: str, name: str, uid: str, container: str, attempt: int,
                render: Callable[[str], bytes | None]) -> Iterator[bytes]:
        """New complete lines of ``path`` until the container run ends (or the pod goes away)."""
        store = self.api.store
        buf = ""
        while not store.closed:
            with open(path, encoding="utf-8", errors="replace", newline="") as fh:
                fh.seek(pos)
                data = fh.read()
                pos = fh.tell()
            buf += data
            *complete, buf = buf.split("\n")
            out = b"".join(b for b in (render(line) for line in complete) if b is not None)
            if out:
                yield out
            if data:
                continue
            pod = store.find("pods", ns, name)
            if pod is None or pod["metadata"]["uid"] != uid:
                return
            st = {s["name"]: s for s in (pod.get("status") or {}).get("containerStatuses") or []}.get(container, {})
            ended = "terminated" in (st.get("state") or {}) or int(st.get("restartCount", 0)) != attempt
            if ended and path.stat().st_size == pos:
                return
            time.sleep(0.1)

    # -- tables (human `kubectl get`)

    def _maybe_table(self, resource: str, items: list[Obj], rv: str, *, single: bool) -> Obj:
        accept = self.headers.get("Accept") or ""
        if "as=Table" not in accept:
            return items[0] if single else {}
        cols, rows = table_rows(resource, items)
        return {
            "kind": "Table",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": {"resourceVersion": rv},
            "columnDefinitions": [{"name": c, "type": "string", "format": "name" if c == "Name" else "",
                                   "description": "", "priority": 0} for c in cols],
            "rows": [{"cells": cells, "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                                 "metadata": obj["metadata"]}}
                     for cells, obj in zip(rows, items, strict=True)],
        }


def _age(obj: Obj) -> str:
    try:
        secs = int(time.time() - parse_rfc3339(obj["metadata"]["creationTimestamp"]))
    except (KeyError, ValueError):
        return "<unknown>"
    if secs < 120:
        return f"{secs}s"
    if secs < 7200:
        return f"{secs // 60}m"
    return f"{secs // 3600}h"


def table_rows(resource: str, items: list[Obj]) -> tuple[list[str], list[list[Any]]]:
    """Column names and cells for the human-readable ``kubectl get`` output."""
    if resource == "pods":
        rows = []
        for p in items:
            st = p.get("status") or {}
            cs = st.get("containerStatuses") or []
            ready = sum(1 for c in cs if c.get("ready"))
            status = st.get("phase", "Unknown")
            for c in cs:
                state = c.get("state") or {}
                if "waiting" in state:
                    status = state["waiting"].get("reason", status)
                elif "terminated" in state:
                    status = state["terminated"].get("reason", status)
            if p["metadata"].get("deletionTimestamp"):
                status = "Terminating"
            rows.append([p["metadata"]["name"], f"{ready}/{len(p['spec'].get('containers', []))}", status,
                         sum(int(c.get("restartCount", 0)) for c in cs), _age(p), st.get("podIP", "<none>"),
                         p["spec"].get("nodeName", "<none>")])
        return ["Name", "Ready", "Status", "Restarts", "Age", "IP", "Node"], rows
    if resource == "nodes":
        rows = []
        for n in items:
            ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                        for c in (n.get("status") or {}).get("conditions") or [])
            status = "Ready" if ready else "NotReady"
            if (n.get("spec") or {}).get("unschedulable"):
                status += ",SchedulingDisabled"
            rows.append([n["metadata"]["name"], status, "<none>", _age(n),
                         ((n.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion", "")])
        return ["Name", "Status", "Roles", "Age", "Version"], rows
    if resource == "daemonsets":
        rows = []
        for d in items:
            s = d.get("status") or {}
            rows.append([d["metadata"]["name"], s.get("desiredNumberScheduled", 0), s.get("currentNumberScheduled", 0),
                         s.get("numberReady", 0), s.get("updatedNumberScheduled", 0), s.get("numberAvailable", 0),
                         _age(d)])
        return ["Name", "Desired", "Current", "Ready", "Up-to-date", "Available", "Age"], rows
    return ["Name", "Status", "Age"], [[o["metadata"]["name"], (o.get("status") or {}).get("phase", "Active"), _age(o)]
                                       for o in items]


def template_hash(template: Obj) -> str:
    """A short stable hash of a pod template (the DaemonSet's ``controller-revision-hash``)."""
    return hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]


class _TlsHandler(_Handler):
    """The in-cluster HTTPS front: bearer-token authentication and the pod-read denial fault."""

    def handle(self) -> None:
        try:
            super().handle()
        except (ssl.SSLError, OSError):  # a client that drops the TLS session mid-way
            self.close_connection = True

    def _dispatch(self, method: str) -> None:
        if self.headers.get("Authorization", "") != f"Bearer {self.api.tls_token}":
            return self._error(ApiError(401, "Unauthorized", "Unauthorized"))
        if method == "GET" and "/pods/" in self.path and self.api.deny_pod_reads():
            return self._error(ApiError(403, "Forbidden", "pods is forbidden: lab fault annotations_denied"))
        return super()._dispatch(method)
