"""xpushare.transport.kubectl (argv building, parsing, errors, waits) and xpushare.inventory.sut (naming generations).

Unit tests run against a scripted fake host; the last tests parse what the real kubectl prints for
the lab cluster.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from tests.lab.cluster import LocalHost
from xpushare.inventory.sut import GENERATIONS, sut_names
from xpushare.model.errors import XpushareError
from xpushare.transport.base import CommandResult
from xpushare.transport.kube_errors import (
    KubeAlreadyExists,
    KubeError,
    KubeNotFound,
    KubePodStuck,
    KubeRequestTimeout,
    KubeTimeout,
    KubeUnavailable,
    classify,
)
from xpushare.transport.kube_objects import (
    duration,
    format_time,
    parse_daemonset,
    parse_node,
    parse_pod,
    parse_time,
    split_prefixed_logs,
)
from xpushare.transport.kubectl import Kubectl

pytest_plugins = ["tests.lab.fixtures"]  # lab_cluster, lab_kubectl

# ----------------------------------------------------------------------------------- fake host


class FakeHost:
    """Records argv/stdin/timeout; answers from a script of (stdout, stderr, exit_code) or a function."""

    name = "master"

    def __init__(self, answers: list[tuple[str, str, int]] | Callable[[list[str]], tuple[str, str, int]]
                 | None = None) -> None:
        self.answers = answers if answers is not None else []
        self.calls: list[tuple[list[str], str | None, float | None]] = []

    def run(self, argv: list[str], *, timeout: float | None = None, env: dict[str, str] | None = None,
            check: bool = False, stdin: str | None = None) -> CommandResult:
        self.calls.append((list(argv), stdin, timeout))
        if callable(self.answers):
            out, err, code = self.answers(argv)
        else:
            out, err, code = self.answers.pop(0) if self.answers else ("", "", 0)
        return CommandResult(self.name, tuple(argv), out, err, code, 0.01)


def kubectl(host: FakeHost, **kw: Any) -> Kubectl:
    return Kubectl(host, kubectl="/usr/bin/kubectl", kubeconfig="/etc/k/c.yaml", context="c1", namespace="xp", **kw)


POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "w-1", "namespace": "xp", "uid": "u-1", "creationTimestamp": "2026-11-21T14:00:00Z",
        "labels": {"run": "r1"}, "annotations": {"xpushare.com/gpu-core-limit": "50"},
        "ownerReferences": [{"kind": "Job", "name": "j", "controller": True}],
    },
    "spec": {
        "nodeName": "node-a",
        "containers": [
            {"name": "main", "image": "img", "env": [{"name": "XPUSHARE_DEBUG", "value": "1"},
                                                     {"name": "FROM", "valueFrom": {"fieldRef": {}}}]},
            {"name": "side", "image": "img2", "env": [{"name": "SIDE", "value": "yes"}]},
        ],
    },
    "status": {
        "phase": "Failed",
        "podIP": "10.0.0.7",
        "hostIP": "192.168.1.2",
        "startTime": "2026-11-21T14:00:01Z",
        "conditions": [{"type": "PodScheduled", "status": "True"}],
        "containerStatuses": [
            {"name": "side", "restartCount": 2, "ready": False,
             "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 20s"}},
             "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}},
            {"name": "main", "restartCount": 0, "ready": False,
             "state": {"terminated": {"exitCode": 1, "reason": "Error", "startedAt": "2026-11-21T14:00:02Z",
                                      "finishedAt": "2026-11-21T14:00:09.5Z"}}},
        ],
    },
}


# ----------------------------------------------------------------------------------------- argv


def test_argv_has_connection_flags_timeout_and_namespace() -> None:
    host = FakeHost([(json.dumps(POD), "", 0)])
    k = kubectl(host)
    k.get_pod("w-1")
    argv, stdin, timeout = host.calls[0]
    assert argv == ["/usr/bin/kubectl", "--kubeconfig", "/etc/k/c.yaml", "--context", "c1", "--request-timeout",
                    "30s", "-n", "xp", "get", "pod", "w-1", "-o", "json"]
    assert stdin is None and timeout is not None and timeout >= 30
    assert k.calls == 1
    bare = Kubectl(FakeHost(), namespace="default")
    assert bare.argv(["get", "nodes"], namespace=None) == ["kubectl", "--request-timeout", "30s", "get", "nodes"]


def test_apply_sends_manifest_on_stdin_and_returns_objects() -> None:
    applied = {"kind": "List", "apiVersion": "v1", "items": [POD, {**POD, "metadata": {"name": "w-2"}}]}
    host = FakeHost([(json.dumps(applied), "", 0)])
    objs = kubectl(host).apply("apiVersion: v1\nkind: Pod\n")
    argv, stdin, _ = host.calls[0]
    assert argv[-5:] == ["apply", "-f", "-", "-o", "json"] and stdin == "apiVersion: v1\nkind: Pod\n"
    assert [o["metadata"]["name"] for o in objs] == ["w-1", "w-2"]


def test_logs_argv() -> None:
    host = FakeHost()
    k = kubectl(host)
    since = datetime(2026, 11, 21, 15, 0, 1, 900000, tzinfo=timezone(timedelta(hours=1)))
    k.logs(selector="name=xpushare-scheduler", since_time=since, namespace="xpushare-system")
    argv = host.calls[0][0]
    assert argv[argv.index("-n") + 1] == "xpushare-system"
    assert argv[argv.index("logs"):] == ["logs", "-l", "name=xpushare-scheduler", "--timestamps",
                                         "--since-time=2026-11-21T14:00:01Z", "--tail=-1"]
    assert argv[argv.index("--request-timeout") + 1] == "65s"  # logs may take long: a raised request timeout
    k.logs("w-1", timestamps=False, container="main", previous=True)
    assert host.calls[1][0][-6:] == ["logs", "w-1", "--tail=-1", "-c", "main", "--previous"]
    with pytest.raises(ValueError):
        k.logs()
    with pytest.raises(ValueError):
        k.logs("w-1", since_time=datetime(2026, 1, 1))  # naive


def test_logs_follow_argv_has_no_request_timeout() -> None:
    k = kubectl(FakeHost())
    argv = k.logs_follow_argv("name=xpushare-scheduler", datetime(2026, 11, 21, 14, 0, tzinfo=timezone.utc),
                              namespace="xpushare-system")
    assert argv[argv.index("--request-timeout") + 1] == "0s"
    assert argv[argv.index("logs"):] == ["logs", "-l", "name=xpushare-scheduler", "-f", "--timestamps",
                                         "--since-time=2026-11-21T14:00:00Z", "--tail=-1", "--prefix",
                                         "--max-log-requests=50"]
    assert k.calls == 1


def test_logs_by_pod_splits_prefixes() -> None:
    text = ("[pod/a/main] 2026-11-21T14:00:00.1Z line 1\n[pod/b/main] 2026-11-21T14:00:00.2Z other\n"
            "[pod/a/main] 2026-11-21T14:00:01Z line 2\n")
    host = FakeHost([(text, "", 0)])
    logs = kubectl(host).logs_by_pod("run=r1")
    assert "--prefix" in host.calls[0][0]
    assert logs == {"a": "2026-11-21T14:00:00.1Z line 1\n2026-11-21T14:00:01Z line 2\n",
                    "b": "2026-11-21T14:00:00.2Z other\n"}
    assert split_prefixed_logs("") == {}


def test_annotate_cordon_drain_rollout_argv() -> None:
    host = FakeHost()
    k = kubectl(host)
    k.annotate("w-1", {"xpushare.com/gpu-core-limit": "30", "xpushare.com/gpu-memory-limit": None})
    k.cordon("node-a")
    k.uncordon("node-a")
    k.drain("node-a", timeout_s=90)
    k.rollout_restart("daemonset", "xpushare-scheduler", "xpushare-system")
    k.rollout_status("daemonset", "xpushare-scheduler", "xpushare-system", timeout_s=120)
    tails = [c[0][c[0].index("--request-timeout") + 2:] for c in host.calls]
    assert tails[0] == ["-n", "xp", "annotate", "pod", "w-1", "xpushare.com/gpu-core-limit=30",
                        "xpushare.com/gpu-memory-limit-", "--overwrite"]
    assert tails[1] == ["cordon", "node-a"] and tails[2] == ["uncordon", "node-a"]
    assert tails[3] == ["drain", "node-a", "--ignore-daemonsets", "--delete-emptydir-data", "--force",
                        "--timeout=90s"]
    assert tails[4] == ["-n", "xpushare-system", "rollout", "restart", "daemonset/xpushare-scheduler"]
    assert tails[5] == ["-n", "xpushare-system", "rollout", "status", "daemonset/xpushare-scheduler",
                        "--timeout=120s"]
    drain_argv, _, drain_timeout = host.calls[3]
    assert drain_argv[drain_argv.index("--request-timeout") + 1] == "95s"
    assert drain_timeout is not None and drain_timeout >= 95 + 90
    assert k.calls == 6


def test_delete_waits_then_forces() -> None:
    timeout = ("", "error: timed out waiting for the condition on pods/w-1", 1)
    forced = ('pod "w-1" force deleted from xp namespace\n', "Warning: Immediate deletion ...", 0)
    host = FakeHost([timeout, forced])
    result = kubectl(host).delete("run=r1", timeout_s=20)
    first, second = host.calls[0][0], host.calls[1][0]
    assert first[first.index("delete"):] == ["delete", "pods", "-l", "run=r1", "--ignore-not-found", "--wait=true",
                                             "--timeout=20s"]
    assert second[second.index("delete"):] == ["delete", "pods", "-l", "run=r1", "--ignore-not-found",
                                               "--grace-period=0", "--force", "--wait=false"]
    assert result.forced and result.deleted == ("pod/w-1",)
    host = FakeHost([('pod "a" deleted from xp namespace\npod "b" deleted\n', "", 0)])
    result = kubectl(host).delete(name="a", wait=False)
    assert not result.forced and result.deleted == ("pod/a", "pod/b")
    assert "--timeout" not in " ".join(host.calls[0][0])


# ---------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize(("stderr", "cls"), [
    ('Error from server (NotFound): pods "x" not found', KubeNotFound),
    ('Error from server (AlreadyExists): pods "x" already exists', KubeAlreadyExists),
    ("error: timed out waiting for the condition", KubeTimeout),
    ("The connection to the server 10.0.0.1:6443 was refused - did you specify the right host or port?",
     KubeUnavailable),
    ("Unable to connect to the server: dial tcp: i/o timeout", KubeUnavailable),
    ("error: unknown flag: --bogus", KubeError),
])
def test_errors_are_typed(stderr: str, cls: type) -> None:
    host = FakeHost([("", stderr + "\n", 1)])
    with pytest.raises(cls) as info:
        kubectl(host).get_pod("x")
    err = info.value
    assert type(err) is cls and isinstance(err, XpushareError) and isinstance(err, KubeError)
    assert err.command == host.calls[0][0] and err.stderr.strip() == stderr and err.exit_code == 1
    assert str(err).startswith("kubectl get failed (exit 1): ")


@pytest.mark.parametrize("stderr", [
    "Unable to connect to the server: net/http: request canceled (Client.Timeout exceeded while awaiting headers)",
    "Unable to connect to the server: context deadline exceeded",
])
def test_a_request_timeout_says_kubectl_timed_out(stderr: str) -> None:
    """The API server did not answer within --request-timeout: unavailable, and the message says it timed out."""
    host = FakeHost([("", stderr + "\n", 1)])
    with pytest.raises(KubeRequestTimeout) as info:
        Kubectl(host, request_timeout_s=4).get_pod("x")
    assert isinstance(info.value, KubeUnavailable)
    assert str(info.value).startswith("kubectl get timed out after 4s (--request-timeout")


def test_classify_and_not_json() -> None:
    assert isinstance(classify(["kubectl", "get"], "Error from server (NotFound): x", 1), KubeNotFound)
    host = FakeHost([("this is not json", "", 0)])
    with pytest.raises(KubeError, match="not JSON"):
        kubectl(host).get_pod("x")


# ---------------------------------------------------------------------------------------- views


def test_parse_pod() -> None:
    pod = parse_pod(POD)
    assert (pod.name, pod.namespace, pod.uid, pod.phase, pod.node) == ("w-1", "xp", "u-1", "Failed", "node-a")
    assert (pod.pod_ip, pod.host_ip) == ("10.0.0.7", "192.168.1.2")
    assert pod.labels == {"run": "r1"} and pod.annotations["xpushare.com/gpu-core-limit"] == "50"
    assert [c.name for c in pod.containers] == ["main", "side"]  # spec order
    main, side = pod.containers
    assert (main.state, main.exit_code, main.reason) == ("terminated", 1, "Error")
    assert main.finished_at == datetime(2026, 11, 21, 14, 0, 9, 500000, tzinfo=timezone.utc)
    assert (side.state, side.reason, side.last_exit_code, side.last_reason) == ("waiting", "CrashLoopBackOff", 137,
                                                                                "OOMKilled")
    assert pod.exit_code == 1 and pod.restart_count == 2 and pod.is_terminal
    assert pod.started_at == datetime(2026, 11, 21, 14, 0, 2, tzinfo=timezone.utc)
    assert pod.waiting_reason == "CrashLoopBackOff" and pod.owner_kind == "Job"
    assert pod.env("XPUSHARE_DEBUG") == "1" and pod.env("FROM") is None and pod.env("SIDE") is None
    assert pod.env("SIDE", container="side") == "yes"
    assert pod.unschedulable is None and pod.deletion_timestamp is None
    assert hash(pod) == hash(parse_pod(POD)) and pod == parse_pod(POD)
    pending = parse_pod({"kind": "Pod", "metadata": {"name": "p"}, "spec": {}, "status": {
        "phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                            "message": "0/2 nodes are available: 2 Insufficient xpushare.com/gpu."}]}})
    assert pending.unschedulable and pending.container is None and pending.exit_code is None
    with pytest.raises(ValueError):
        parse_pod({"kind": "Node"})


def test_parse_node_and_daemonset() -> None:
    node = parse_node({"kind": "Node", "metadata": {"name": "n1", "labels": {"a": "b"}},
                       "spec": {"unschedulable": True, "taints": [{"key": "k", "effect": "NoSchedule"}]},
                       "status": {"allocatable": {"xpushare.com/gpu": "20", "cpu": "8"},
                                  "addresses": [{"type": "Hostname", "address": "n1"},
                                                {"type": "InternalIP", "address": "10.1.1.1"}],
                                  "conditions": [{"type": "Ready", "status": "True"}],
                                  "nodeInfo": {"kubeletVersion": "v1.30.1"}}})
    assert node.unschedulable and node.ready and node.internal_ip == "10.1.1.1"
    assert node.allocatable_count("xpushare.com/gpu") == 20 and node.allocatable_count("nvshare.com/gpu") == 0
    assert node.taints == (("k", "", "NoSchedule"),) and node.kubelet_version == "v1.30.1"
    ds = parse_daemonset({"kind": "DaemonSet", "metadata": {"name": "s", "namespace": "x", "generation": 3},
                          "status": {"observedGeneration": 3, "desiredNumberScheduled": 2, "updatedNumberScheduled": 2,
                                     "numberAvailable": 1, "numberReady": 1, "currentNumberScheduled": 2,
                                     "numberUnavailable": 1}})
    assert (ds.generation, ds.desired, ds.available, ds.unavailable) == (3, 2, 1, 1) and not ds.rolled_out


def test_times() -> None:
    assert parse_time("2026-11-21T14:00:00Z") == datetime(2026, 11, 21, 14, tzinfo=timezone.utc)
    assert parse_time("2026-11-21T14:00:00.123456789Z") == datetime(2026, 11, 21, 14, 0, 0, 123456,
                                                                    tzinfo=timezone.utc)
    assert parse_time("2026-11-21T15:00:00+01:00") == datetime(2026, 11, 21, 14, tzinfo=timezone.utc)
    assert parse_time(None) is None
    with pytest.raises(ValueError):
        parse_time("yesterday")
    assert format_time(datetime(2026, 11, 21, 14, 0, 0, 999999, tzinfo=timezone.utc)) == "2026-11-21T14:00:00Z"
    assert duration(29.2) == "30s" and duration(0) == "0s"


# ----------------------------------------------------------------------------------------- waits


def _pod(name: str, phase: str, waiting: str | None = None) -> dict[str, Any]:
    state = {"waiting": {"reason": waiting}} if waiting else {"running": {"startedAt": "2026-11-21T14:00:00Z"}}
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "xp"}, "spec": {"containers": [{"name": "c"}]},
            "status": {"phase": phase, "containerStatuses": [{"name": "c", "state": state}]}}


def _lists(*rounds: list[dict[str, Any]]) -> list[tuple[str, str, int]]:
    return [(json.dumps({"kind": "List", "items": r}), "", 0) for r in rounds]


class Clock:
    def __init__(self) -> None:
        self.t = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.t += s


def test_wait_pods_one_list_per_poll() -> None:
    host = FakeHost(_lists([], [_pod("a", "Pending")], [_pod("a", "Running"), _pod("b", "Pending")],
                           [_pod("a", "Succeeded"), _pod("b", "Running")]))
    clock = Clock()
    k = kubectl(host)
    pods = k.wait_pods("run=r1", until="running", count=2, timeout_s=60, poll_s=2, clock=clock, sleep=clock.sleep)
    assert [p.phase for p in pods] == ["Succeeded", "Running"]
    assert k.calls == 4 == len(clock.sleeps) + 1 and clock.sleeps == [2, 2, 2]
    assert all(c[0][c[0].index("get"):] == ["get", "pods", "-l", "run=r1", "-o", "json"] for c in host.calls)


def test_wait_pods_timeout_carries_last_pods() -> None:
    host = FakeHost(lambda argv: _lists([_pod("a", "Running")])[0])
    clock = Clock()
    with pytest.raises(KubeTimeout) as info:
        kubectl(host).wait_pods("run=r1", until="terminal", count=1, timeout_s=5, poll_s=2, clock=clock,
                                sleep=clock.sleep)
    assert [p.name for p in info.value.pods] == ["a"] and "a=Running" in str(info.value)
    assert clock.sleeps == [2, 2, 1]


def test_wait_pods_backs_off_while_nothing_changes_and_starts_over_on_a_change() -> None:
    running = [_pod("a", "Running")]
    host = FakeHost(_lists(*[running] * 6, [_pod("a", "Succeeded")]))
    clock = Clock()
    k = kubectl(host)
    k.wait_pods("run=r1", until="terminal", count=1, timeout_s=600, poll_s=1, poll_max_s=3, clock=clock,
                sleep=clock.sleep)
    assert clock.sleeps == [1, 1.5, 2.25, 3, 3, 3]  # the first list is a change (nothing seen before)
    host = FakeHost(_lists([_pod("a", "Pending")], [_pod("a", "Pending")], running, running, running,
                           [_pod("a", "Succeeded")]))
    clock = Clock()
    kubectl(host).wait_pods("run=r1", until="terminal", count=1, timeout_s=600, poll_s=1, poll_max_s=3,
                            clock=clock, sleep=clock.sleep)
    assert clock.sleeps == [1, 1.5, 1, 1.5, 2.25]  # Pending -> Running is a change: back to poll_s


def test_wait_pods_fails_fast_on_stuck_pod() -> None:
    host = FakeHost(_lists([_pod("a", "Pending", waiting="ImagePullBackOff")]))
    with pytest.raises(KubePodStuck, match="a: ImagePullBackOff") as info:
        kubectl(host).wait_pods("run=r1", until="running", count=1, timeout_s=60, sleep=lambda s: None)
    assert info.value.pods[0].name == "a"
    with pytest.raises(ValueError):
        kubectl(FakeHost()).wait_pods("x", until="ready", count=1, timeout_s=1)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------ sut


def test_sut_generations() -> None:
    xp, nv = sut_names("xpushare"), sut_names("nvshare")
    assert set(GENERATIONS) == {"xpushare", "nvshare"}
    assert (xp.namespace, xp.scheduler_daemonset, xp.scheduler_label) == ("xpushare-system", "xpushare-scheduler",
                                                                          "name=xpushare-scheduler")
    assert (nv.resource, nv.annotation_core_limit, nv.annotation_memory_limit) == (
        "nvshare.com/gpu", "nvshare.com/gpu-core-limit", "nvshare.com/gpu-memory-limit")
    assert (nv.env_debug, nv.env_oversub, nv.env_memory_limit) == ("NVSHARE_DEBUG", "NVSHARE_ENABLE_SINGLE_OVERSUB",
                                                                   "NVSHARE_GPU_MEMORY_LIMIT")
    assert xp.metric("client_info") == "xpushare_client_info" and nv.metric_prefix == "nvshare_"
    assert (xp.socket_path, nv.socket_path) == ("/var/run/xpushare/scheduler.sock", "/var/run/nvshare/scheduler.sock")
    assert xp.preload_lib == "/usr/lib/xpushare/libxpushare.so" and xp.log_tag("WARN") == "[XPUSHARE][WARN]: "
    assert xp.device_plugin_label == "name=xpushare-device-plugin" and xp.register_has_gpu and not nv.register_has_gpu
    with pytest.raises(ValueError, match="unknown SUT generation 'gpushare'"):
        sut_names("gpushare")


# ----------------------------------------------------------------------------- with the real kubectl


@pytest.mark.lab
def test_real_kubectl_json_parses(lab_kubectl: Kubectl, lab_cluster: Any) -> None:
    names = lab_cluster.names
    k = lab_kubectl
    sched = k.list_pods(names.scheduler_label, namespace=names.namespace)
    assert len(sched) == 2 and all(p.phase == "Running" and p.owner_kind == "DaemonSet" for p in sched)
    assert all(p.container and p.container.state == "running" and p.started_at for p in sched)
    assert {n.name for n in k.list_nodes()} == set(lab_cluster.nodes)
    assert k.list_pods("no-such-label=x") == []
    assert k.calls == 3
    dead = Kubectl(LocalHost(), kubectl=k.kubectl, namespace="default", request_timeout_s=2)
    with pytest.raises(KubeUnavailable):
        dead.run(["--server", "http://127.0.0.1:1", "get", "pods"])
