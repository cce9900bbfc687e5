"""kubectl wrapper: argv building, typed errors, and the typed views of :mod:`~xpushare.transport.kube_objects`.

Every call runs the real ``kubectl`` on the cluster's master host through a transport ``host``
(:mod:`xpushare.transport.base`: ``host.run(argv, timeout=, stdin=)`` returning a ``CommandResult``). The
argv always starts with the cluster's connection flags, so nothing depends on the remote shell's
``KUBECONFIG`` or current context::

    [kubectl, "--kubeconfig", <path>, "--context", <ctx>, "--request-timeout", "30s", "-n", <ns>, <verb> ...]

(``--kubeconfig``/``--context`` only when the inventory names them). Every call counts in
:attr:`Kubectl.calls` (reported per case as "kubectl calls"); a read that failed transiently (a 5xx or 429 of the
API server, a lost connection) is repeated with backoff (:mod:`~xpushare.transport.kube_retry`), each attempt a
call, the retries of reads that returned also
counted in :attr:`Kubectl.retries`, and each retry logged.

Views (:class:`~xpushare.transport.kube_objects.Pod`, ``Node``, ``DaemonSetStatus``) are parsed from
``kubectl -o json`` by :mod:`~xpushare.transport.kube_objects`.

Errors: a non-zero exit becomes a :class:`~xpushare.transport.kube_errors.KubeError` (with the argv, stderr and
exit code) or the subclass :func:`~xpushare.transport.kube_errors.classify` picks from kubectl's stderr
(not found, already exists, conflict, API server unavailable, request timeout, ``timed out waiting``);
:meth:`Kubectl.wait_pods` raises ``KubeTimeout`` with the last pods seen, or ``KubePodStuck`` when a waited-for
pod can never start (image pull / container creation errors).
Transport failures (:class:`~xpushare.model.errors.TransportError`) pass through unchanged.

Pitfalls handled here (docs/sut/README.md §pitfalls, docs/sut/bash-harness.md §kubectl):
``kubectl logs -l`` prints only 10 lines per pod unless ``--tail=-1``; ``--since-time`` is sent with
whole seconds; ``--request-timeout`` also cuts streams and waits, so long waits raise it; a label
selector matching nothing is not an error (``No resources found`` on stderr, exit 0).
"""

from __future__ import annotations

import json
import re
import shlex
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol

from xpushare.transport import activity
from xpushare.transport.base import CommandResult
from xpushare.transport.kube_errors import KubeError, KubePodStuck, KubeTimeout, classify
from xpushare.transport.kube_objects import (
    STUCK_REASONS,
    DaemonSetStatus,
    Node,
    Pod,
    duration,
    format_time,
    parse_daemonset,
    parse_node,
    parse_pod,
    split_prefixed_logs,
)
from xpushare.transport.kube_retry import RetryPolicy, run_read


def _items(doc: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The objects of a ``-o json`` answer: the items of a List, or the object itself."""
    if doc.get("kind", "").endswith("List") and "items" in doc:
        return list(doc.get("items") or [])
    return [doc]


# ------------------------------------------------------------------------------------ kubectl


class Host(Protocol):
    """What :class:`Kubectl` needs from a transport host."""

    name: str

    def run(self, argv: list[str], *, timeout: float | None = None, env: dict[str, str] | None = None,
            check: bool = False, stdin: str | None = None) -> CommandResult: ...


@dataclass(frozen=True)
class DeleteResult:
    """What :meth:`Kubectl.delete` removed (``kind/name`` as kubectl printed them) and whether it forced."""

    deleted: tuple[str, ...]
    forced: bool


_DELETED_RE = re.compile(r'^(?P<kind>[\w.]+) "(?P<name>[^"]+)" (?:force )?deleted', re.M)
_USE_DEFAULT = object()


class Kubectl:
    """kubectl on one cluster's master host.

    Args:
        host: transport host of the master (``host.run(argv, timeout=, stdin=)``).
        kubectl: the kubectl executable on that host.
        kubeconfig: ``--kubeconfig`` path on that host (None: kubectl's default).
        context: ``--context`` (None: the kubeconfig's current context).
        namespace: default ``-n`` of namespaced calls.
        request_timeout_s: ``--request-timeout`` of ordinary calls; waits and streams raise it.
        retry: how reads are retried after a transient failure (None: 3 retries, 1 s backoff doubling).
    """

    #: Seconds the transport waits beyond kubectl's own limit before it gives up on the command.
    TRANSPORT_MARGIN_S = 15.0

    def __init__(self, host: Host, *, kubectl: str = "kubectl", kubeconfig: str | None = None,
                 context: str | None = None, namespace: str = "default", request_timeout_s: float = 30,
                 retry: RetryPolicy | None = None) -> None:
        self.host = host
        self.kubectl = kubectl
        self.kubeconfig = kubeconfig
        self.context = context
        self.namespace = namespace
        self.request_timeout_s = request_timeout_s
        self.retry = RetryPolicy() if retry is None else retry
        self.calls = 0
        self.retries = 0
        self._lock = threading.Lock()

    # -- argv and running

    def argv(self, args: Sequence[str], *, namespace: Any = _USE_DEFAULT,
             request_timeout_s: float | None = None) -> list[str]:
        """The full argv for kubectl ``args``: connection flags, request timeout, ``-n`` (None: none)."""
        ns = self.namespace if namespace is _USE_DEFAULT else namespace
        out = [self.kubectl]
        if self.kubeconfig:
            out += ["--kubeconfig", self.kubeconfig]
        if self.context:
            out += ["--context", self.context]
        rt = self.request_timeout_s if request_timeout_s is None else request_timeout_s
        out += ["--request-timeout", duration(rt)]
        if ns:
            out += ["-n", str(ns)]
        return out + [str(a) for a in args]

    def run(self, args: Sequence[str], *, namespace: Any = _USE_DEFAULT, stdin: str | None = None,
            wait_s: float | None = None, check: bool = True) -> CommandResult:
        """Run kubectl ``args``; ``wait_s`` is how long kubectl itself may wait (raises the timeouts).

        A read (``get``, ``logs``, ...) that fails transiently is made again (:mod:`~xpushare.transport.kube_retry`).

        Raises:
            KubeError (or a subclass, see :func:`classify`) when ``check`` and kubectl exits non-zero (the message
            says how many attempts were made when there were several); ``ConnectionLost`` of the last attempt.
        """
        request_timeout = self.request_timeout_s if wait_s is None else max(self.request_timeout_s, wait_s + 5)
        argv = self.argv(args, namespace=namespace, request_timeout_s=request_timeout)
        timeout = request_timeout + (wait_s or 0) + self.TRANSPORT_MARGIN_S

        def once() -> CommandResult:
            with self._lock:
                self.calls += 1
            return self.host.run(argv, timeout=timeout, stdin=stdin)

        result, made = run_read(once, argv, host=self.host.name, policy=self.retry)
        with self._lock:
            self.retries += made - 1
        if check and not result.ok:
            raise classify(argv, result.stderr, result.exit_code, attempts=made)
        return result

    def get_json(self, args: Sequence[str], *, namespace: Any = _USE_DEFAULT) -> dict[str, Any]:
        """``kubectl <args> -o json`` parsed.

        Raises:
            KubeError: kubectl failed or printed something that is not JSON.
        """
        result = self.run([*args, "-o", "json"], namespace=namespace)
        try:
            doc = json.loads(result.stdout)
        except json.JSONDecodeError as exc:
            raise KubeError(list(result.argv), result.stderr, result.exit_code,
                            f"kubectl {' '.join(args[:2])}: output is not JSON ({exc})") from None
        if not isinstance(doc, dict):
            raise KubeError(list(result.argv), result.stderr, result.exit_code, "kubectl: JSON is not an object")
        return doc

    # -- objects

    def apply(self, manifest_yaml: str, *, namespace: Any = _USE_DEFAULT) -> list[dict[str, Any]]:
        """``kubectl apply -f -`` with the manifest on stdin; returns the applied objects (``-o json``)."""
        result = self.run(["apply", "-f", "-", "-o", "json"], namespace=namespace, stdin=manifest_yaml)
        try:
            doc = json.loads(result.stdout) if result.stdout.strip() else {"kind": "List", "items": []}
        except json.JSONDecodeError:
            return []
        return [dict(o) for o in _items(doc)]

    def get_pod(self, name: str, *, namespace: Any = _USE_DEFAULT) -> Pod:
        """One pod. Raises KubeNotFound."""
        return parse_pod(self.get_json(["get", "pod", name], namespace=namespace))

    def list_pods(self, selector: str | None = None, *, namespace: Any = _USE_DEFAULT,
                  field_selector: str | None = None, all_namespaces: bool = False) -> list[Pod]:
        """Pods matching a label selector (and field selector), sorted by name; one kubectl call."""
        args = ["get", "pods"]
        if selector:
            args += ["-l", selector]
        if field_selector:
            args += ["--field-selector", field_selector]
        if all_namespaces:
            args.append("-A")
        doc = self.get_json(args, namespace=None if all_namespaces else namespace)
        return sorted((parse_pod(o) for o in _items(doc)), key=lambda p: (p.namespace, p.name))

    def wait_pods(
        self,
        selector: str,
        *,
        until: Literal["running", "terminal"],
        count: int,
        timeout_s: float,
        poll_s: float = 2.0,
        poll_max_s: float | None = None,
        namespace: Any = _USE_DEFAULT,
        all_namespaces: bool = False,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> list[Pod]:
        """Wait until at least ``count`` pods match ``selector`` and all of them got to ``until``.

        ``running``: every pod has left Pending (phase Running, or already Succeeded/Failed);
        ``terminal``: every pod is Succeeded or Failed. One ``get pods -l`` call per poll (``all_namespaces``:
        ``-A``, the pods of every namespace). Polls ``poll_s`` seconds apart; with ``poll_max_s`` above it, each
        poll that sees the pods' phases unchanged waits 1.5 times longer, up to ``poll_max_s``, and a change starts
        again at ``poll_s``: a half-hour pod costs the API server and the master a few hundred calls, not one
        every ``poll_s``, and a pod that moves is seen at most ``poll_max_s`` late. Pod times in the evidence
        come from the kubelet (``startedAt``/``finishedAt``), not from when a poll saw them.

        Returns:
            The pods of the last poll (sorted by name).
        Raises:
            KubeTimeout: not there after ``timeout_s``; ``.pods`` holds the last pods seen.
            KubePodStuck: a pod will never get there (image/creation error, admission failure).
        """
        if until not in ("running", "terminal"):
            raise ValueError(f"until must be 'running' or 'terminal', not {until!r}")
        done = (lambda p: p.phase != "Pending" and p.phase != "Unknown") if until == "running" else (
            lambda p: p.is_terminal)
        deadline = clock() + timeout_s
        command = self.argv(["get", "pods", "-l", selector, "-o", "json", *(["-A"] if all_namespaces else [])],
                            namespace=None if all_namespaces else namespace)
        interval = poll_s
        last: list[tuple[str, str]] | None = None
        while True:
            pods = self.list_pods(selector, namespace=namespace, all_namespaces=all_namespaces)
            activity.pods([p.phase for p in pods], count=count, until=until)
            phases = [(p.name, p.phase) for p in pods]
            interval = poll_s if phases != last else min(interval * 1.5, max(poll_s, poll_max_s or poll_s))
            last = phases
            if len(pods) >= count and all(done(p) for p in pods):
                return pods
            stuck = [p for p in pods if not done(p) and (p.waiting_reason in STUCK_REASONS
                                                         or p.reason == "UnexpectedAdmissionError")]
            if stuck:
                what = ", ".join(f"{p.name}: {p.waiting_reason or p.reason}" for p in stuck)
                raise KubePodStuck(command, f"pods will not become {until}: {what}", pods)
            remaining = deadline - clock()
            if remaining <= 0:
                seen = ", ".join(f"{p.name}={p.phase}" for p in pods) or "none"
                raise KubeTimeout(command, "", -1, f"timed out after {timeout_s:g}s waiting for {count} pod(s) "
                                  f"-l {selector} to be {until}; seen: {seen}", pods=pods)
            sleep(min(interval, remaining))

    # -- logs

    def _log_args(self, pod: str | None, selector: str | None, *, timestamps: bool, since_time: datetime | None,
                  tail: int, container: str | None, previous: bool, all_containers: bool, prefix: bool,
                  follow: bool, max_log_requests: int | None) -> list[str]:
        if (pod is None) == (selector is None):
            raise ValueError("pass exactly one of pod= or selector=")
        args = ["logs", pod] if pod is not None else ["logs", "-l", str(selector)]
        args += [flag for flag, on in (("-f", follow), ("--timestamps", timestamps)) if on]
        if since_time is not None:
            args.append(f"--since-time={format_time(since_time)}")
        args.append(f"--tail={tail}")
        if container:
            args += ["-c", container]
        args += [flag for flag, on in (("--previous", previous), ("--all-containers", all_containers),
                                       ("--prefix", prefix)) if on]
        if max_log_requests is not None:
            args.append(f"--max-log-requests={max_log_requests}")
        return args

    def logs(self, pod: str | None = None, selector: str | None = None, *, timestamps: bool = True,
             since_time: datetime | None = None, tail: int = -1, container: str | None = None,
             previous: bool = False, all_containers: bool = False, prefix: bool = False,
             namespace: Any = _USE_DEFAULT) -> str:
        """Container logs of one pod, or of every pod matching ``selector`` (concatenated).

        ``tail=-1`` (the default) means every line: without it kubectl returns only the last 10 lines
        per pod for a selector. ``since_time`` must be timezone-aware; kubectl sends whole seconds.
        With ``timestamps`` each line starts with the kubelet's RFC3339Nano time and a space.

        Raises:
            KubeNotFound: the pod does not exist. KubeError: e.g. the container has not started.
        """
        args = self._log_args(pod, selector, timestamps=timestamps, since_time=since_time, tail=tail,
                              container=container, previous=previous, all_containers=all_containers,
                              prefix=prefix, follow=False, max_log_requests=None)
        return self.run(args, namespace=namespace, wait_s=max(60.0, self.request_timeout_s)).stdout

    def logs_by_pod(self, selector: str, *, timestamps: bool = True, since_time: datetime | None = None,
                    container: str | None = None, namespace: Any = _USE_DEFAULT) -> dict[str, str]:
        """Full logs of every pod matching ``selector`` in one call (``--prefix``), keyed by pod name."""
        text = self.logs(selector=selector, timestamps=timestamps, since_time=since_time, container=container,
                         prefix=True, namespace=namespace)
        return split_prefixed_logs(text)

    def logs_follow_argv(self, selector: str, since_time: datetime | None = None, *, container: str | None = None,
                         timestamps: bool = True, prefix: bool = True, max_log_requests: int = 50,
                         namespace: Any = _USE_DEFAULT) -> list[str]:
        """argv of ``kubectl logs -f -l <selector>`` for the transport's ``spawn`` (no request timeout).

        ``--request-timeout 0s`` keeps the stream open; ``--max-log-requests`` lifts kubectl's limit of
        5 concurrent streams. The call is counted in :attr:`calls`.
        """
        args = self._log_args(None, selector, timestamps=timestamps, since_time=since_time, tail=-1,
                              container=container, previous=False, all_containers=False, prefix=prefix,
                              follow=True, max_log_requests=max_log_requests)
        with self._lock:
            self.calls += 1
        return self.argv(args, namespace=namespace, request_timeout_s=0)

    # -- metadata

    def annotate(self, pod: str, annotations: Mapping[str, str | None], *, overwrite: bool = True,
                 kind: str = "pod", namespace: Any = _USE_DEFAULT) -> None:
        """Set (or, for a None value, remove) annotations of one object."""
        if not annotations:
            raise ValueError("no annotations given")
        pairs = [f"{k}-" if v is None else f"{k}={v}" for k, v in annotations.items()]
        args = ["annotate", kind, pod, *pairs]
        if overwrite:
            args.append("--overwrite")
        self.run(args, namespace=namespace)

    def label(self, name: str, labels: Mapping[str, str | None], *, overwrite: bool = True, kind: str = "pod",
              namespace: Any = _USE_DEFAULT) -> None:
        """Set (or, for a None value, remove) labels of one object."""
        pairs = [f"{k}-" if v is None else f"{k}={v}" for k, v in labels.items()]
        self.run(["label", kind, name, *pairs, *(["--overwrite"] if overwrite else [])], namespace=namespace)

    # -- deletion

    def delete(self, selector: str | None = None, *, name: str | None = None, kind: str = "pods",
               wait: bool = True, timeout_s: float = 60.0, grace_period_s: int | None = None,
               namespace: Any = _USE_DEFAULT) -> DeleteResult:
        """Delete by label selector (or one object by ``name``); missing objects are not an error.

        With ``wait``, kubectl waits up to ``timeout_s`` for the objects to be gone; if that times out,
        the same objects are deleted again with ``--grace-period=0 --force`` (``forced=True``).
        """
        if (selector is None) == (name is None):
            raise ValueError("pass exactly one of selector or name=")
        target = ["-l", selector] if selector is not None else [str(name)]
        args = ["delete", kind, *target, "--ignore-not-found", f"--wait={'true' if wait else 'false'}"]
        if wait:
            args.append(f"--timeout={duration(timeout_s)}")
        if grace_period_s is not None:
            args.append(f"--grace-period={grace_period_s}")
        try:
            result = self.run(args, namespace=namespace, wait_s=timeout_s if wait else None)
        except KubeTimeout as exc:
            forced = self.run(["delete", kind, *target, "--ignore-not-found", "--grace-period=0", "--force",
                               "--wait=false"], namespace=namespace)
            names = _deleted(exc.stderr) + _deleted(forced.stdout)
            return DeleteResult(tuple(dict.fromkeys(names)), True)
        return DeleteResult(tuple(_deleted(result.stdout)), False)

    # -- rollouts and nodes

    def rollout_restart(self, kind: str, name: str, namespace: Any = _USE_DEFAULT) -> None:
        """``kubectl rollout restart <kind>/<name>`` (stamps ``kubectl.kubernetes.io/restartedAt``)."""
        self.run(["rollout", "restart", f"{kind}/{name}"], namespace=namespace)

    def rollout_status(self, kind: str, name: str, namespace: Any = _USE_DEFAULT, timeout_s: float = 180.0) -> str:
        """Wait with ``kubectl rollout status`` until the rollout is complete; returns its output.

        Raises:
            KubeTimeout: not complete after ``timeout_s``.
        """
        args = ["rollout", "status", f"{kind}/{name}", f"--timeout={duration(timeout_s)}"]
        return self.run(args, namespace=namespace, wait_s=timeout_s).stdout

    def cordon(self, node: str) -> None:
        self.run(["cordon", node], namespace=None)

    def uncordon(self, node: str) -> None:
        self.run(["uncordon", node], namespace=None)

    def drain(self, node: str, *, timeout_s: float = 300.0, grace_period_s: int | None = None,
              pod_selector: str | None = None) -> str:
        """``kubectl drain --ignore-daemonsets --delete-emptydir-data --force``; returns its output.

        The caller uncordons in a ``finally``. Raises KubeTimeout when the evictions do not finish.
        """
        args = ["drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--force",
                f"--timeout={duration(timeout_s)}"]
        if grace_period_s is not None:
            args.append(f"--grace-period={grace_period_s}")
        if pod_selector:
            args.append(f"--pod-selector={pod_selector}")
        result = self.run(args, namespace=None, wait_s=timeout_s)
        return result.stdout + result.stderr

    def get_node(self, name: str) -> Node:
        """One node. Raises KubeNotFound."""
        return parse_node(self.get_json(["get", "node", name], namespace=None))

    def list_nodes(self, selector: str | None = None) -> list[Node]:
        args = ["get", "nodes"] + (["-l", selector] if selector else [])
        return sorted((parse_node(o) for o in _items(self.get_json(args, namespace=None))), key=lambda n: n.name)

    def get_daemonset(self, name: str, namespace: Any = _USE_DEFAULT) -> DaemonSetStatus:
        """One DaemonSet's status. Raises KubeNotFound."""
        return parse_daemonset(self.get_json(["get", "daemonset", name], namespace=namespace))

    def pod_env_value(self, pod: Pod | str, name: str, *, container: str | None = None,
                      namespace: Any = _USE_DEFAULT) -> str | None:
        """Literal value of an env variable in a pod's spec (fetches the pod when given its name)."""
        obj = pod if isinstance(pod, Pod) else self.get_pod(pod, namespace=namespace)
        return obj.env(name, container)

    def server_version(self) -> str:
        """The API server's ``gitVersion`` (``kubectl version -o json``)."""
        doc = self.get_json(["version"], namespace=None)
        return str((doc.get("serverVersion") or {}).get("gitVersion", ""))

    def __repr__(self) -> str:
        return f"Kubectl({self.host.name}: {shlex.join(self.argv([], namespace=None))})"


def _deleted(text: str) -> list[str]:
    return [f"{m.group('kind')}/{m.group('name')}" for m in _DELETED_RE.finditer(text or "")]


