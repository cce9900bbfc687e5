"""Lab stand-in for the SUT scheduler (one process per lab node).

Started by the lab kubelet as the container of the ``<gen>-scheduler`` DaemonSet's pod on a node
(``python tests/lab/labscheduler.py``; the interpreter is reached through a symlink named
``<gen>-scheduler`` so ``/proc/<pid>/comm`` and ``pgrep -f <gen>-scheduler`` look like the real one).
It runs as a plain script with the standard library only (plus :mod:`xpushare.sut`).

What it does, per sut-interfaces.md:

* writes the SUT's log lines on stderr (the kubelet turns them into the pod log): the start-up block
  (§4.1, with ``Scheduling mode: …`` from ``<PREFIX>SCHEDULING_MODE``), registration (§4.2),
  dynamic limits (§4.3), lock traffic of limited clients (§4.4) and ``Removing client <id16>`` (§4.5);
* learns about clients from the node's registry directory, where the lab kubelet registers every
  container that requests the SUT's extended resource (``<id16>.json``: pid, pod, namespace, GPU key);
* reads each client's pod annotations from the lab API server at registration and then every
  ``annotation_poll_s`` (2 s by default; the real watcher polls every 5 s);
* enforces a core limit ``< 100`` by duty-cycling the client's process group with SIGSTOP/SIGCONT in a
  window of ``<PREFIX>COMPUTE_WINDOW_MS`` (lab default 1000 ms): run ``window × effective% / 100``, stop
  for the rest (time billed: the client's on-CPU time, as the SUT bills kernel time, so other load on
  the machine does not eat the budget); limits on one GPU that sum over 100 % are scaled by
  ``100 / sum`` (§5.2). Enforcement starts at the client's first allocation (its first ``<id16>.mem``
  report), as the SUT's starts at the first kernel launch: start-up (``import torch``) is not GPU work.
  Limited clients of one GPU take turns (one holds the lock, the others wait stopped; the lock goes to
  the client with the smallest used share of its budget, and rotates when the holder is 10 % ahead);
* paces every client of a GPU, unlimited ones too and without SUT log lines, when the lab's ``gpu_speed``
  (``lab.json``: the share of one CPU core that one lab GPU delivers) is below 1;
* passes a memory limit to the client through ``<id16>.limit`` (bytes), which the lab memory hook
  (:mod:`tests.lab.memhook`) enforces inside the workload; reads ``<id16>.mem`` (the hook's
  allocation reports, the lab's MEM_UPDATE);
* serves ``/healthz`` and ``/metrics`` (36 families, names/labels/order of §6.2-6.3) on
  ``<pod IP>:9402``; everything else, HEAD included, is 404.

Broken-lab switches (``faults.json`` of the lab, per node, checked every 0.1 s and acknowledged):
``ignore_annotations``,
``no_enforcement``, ``skew`` (factor on the enforced run time), ``metrics_missing`` (``true`` or a list
of family suffixes to leave out), ``scheduler_down`` (exit at once, FATAL line, so the pod crash-loops),
``leak_bytes_per_s`` (grow the process's RSS).

Test infrastructure only: it never stands in for a real cluster's verdict.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import re
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_REPO = Path(__file__).resolve().parents[2]
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

from xpushare.sut import SutNames, sut_names  # noqa: E402

MESSAGE_TYPES = ("REGISTER", "SCHED_ON", "SCHED_OFF", "REQ_LOCK", "LOCK_OK", "DROP_LOCK", "LOCK_RELEASED", "SET_TQ",
                 "MEM_UPDATE", "WAIT_FOR_MEM", "MEM_AVAILABLE", "PREPARE_SWAP_OUT", "UPDATE_LIMIT",
                 "UPDATE_CORE_LIMIT")
DEFAULT_MISSING = ("client_info", "gpu_utilization_ratio", "scheduler_messages_total")
CONTEXT_OVERHEAD_BYTES = 256 * 2**20  # what NVML would show per process beyond its allocations
MIB = 2**20
#: Lead in used budget share (used / limit) at which a lock holder rotates to the least-served waiting client.
ROTATION_SHARE = 0.1


def atoi(text: str | None) -> int:
    m = re.match(r"\s*([+-]?\d+)", text or "")
    return int(m.group(1)) if m else 0


def parse_memory_size(text: str | None) -> int:
    """The scheduler's ``parse_memory_size`` (§5.1): strtod, spaces, ``Gi``/``Mi``/``Ki`` (+``B``), or bytes."""
    m = re.match(r"\s*([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)\s*(.*)$", text or "")
    if not m:
        return 0
    value, suffix = float(m.group(1)), m.group(2).strip().lower()
    scale = {"gi": 2**30, "gib": 2**30, "mi": 2**20, "mib": 2**20, "ki": 2**10, "kib": 2**10, "": 1, "b": 1}
    return int(value * scale[suffix]) if suffix in scale and value > 0 else 0


@dataclass
class Client:
    cid: str
    pid: int
    pod: str
    namespace: str
    gpu: str
    registered: float
    core: int = 100
    mem_limit: int = 0
    mem_alloc: int = 0
    mem_peak: int = 0
    limited_since: float | None = None
    stopped: bool = False
    used_ms: float = 0.0
    ran_since: float = 0.0
    cpu_ticks: int | None = None
    util: float = 0.0
    active: bool = False  # has used the "GPU": the hook reported its first allocation (``<id16>.mem``)
    cpu_ns: int | None = None  # on-CPU time of its threads at the last enforcement tick
    throttled: bool = False  # used up this window's budget (stopped until the window resets)


class LabScheduler:
    """The scheduler process's state and threads."""

    def __init__(self, cfg: dict[str, Any], node: str, listen: str) -> None:
        self.cfg = cfg
        self.node = node
        self.names: SutNames = sut_names(cfg["generation"])
        self.ncfg = cfg["nodes"][node]
        self.workdir = Path(cfg["workdir"])
        self.clients_dir = self.workdir / "nodes" / node / "clients"
        self.pid_file = self.workdir / "nodes" / node / "run" / "scheduler.pid"
        self.faults_file = self.workdir / "faults.json"
        self.listen = listen
        scfg = cfg.get("scheduler") or {}
        self.port = int(scfg.get("metrics_port", 9402))
        self.poll_s = float(scfg.get("annotation_poll_s", 2.0))
        env = os.environ
        n = self.names
        self.debug = n.env_debug in env
        self.window_ms = max(500, min(20000, atoi(env.get(n.env("COMPUTE_WINDOW_MS"))) or 2000))
        self.gpu_speed = float(scfg.get("gpu_speed", 1.0))  # one lab GPU = this share of one CPU core
        self.api = f"http://{env.get('KUBERNETES_SERVICE_HOST', cfg['api']['address'])}:" \
                   f"{env.get('KUBERNETES_SERVICE_PORT', cfg['api']['port'])}"
        self.lock = threading.RLock()
        self.log_lock = threading.Lock()
        self.clients: dict[str, Client] = {}
        self.contexts: list[str] = []  # GPU keys in creation order
        self.peak_running: dict[str, int] = {}
        self.window_start: dict[str, float] = {}
        self.messages = dict.fromkeys(MESSAGE_TYPES, 0)
        self.drop_lock_total = 0
        self.disconnect_total = 0
        self.wait_for_mem_total = 0
        self.mem_available_total = 0
        self.faults: dict[str, Any] = {}
        self.faults_mtime = -1
        self.leaked: list[bytes] = []
        self.stop = threading.Event()
        self.gpu_util: dict[str, float] = {}

    # -- logging

    def log(self, level: str, msg: str) -> None:
        if level == "DEBUG" and not self.debug:
            return
        with self.log_lock:
            sys.stderr.write(f"{self.names.log_tag(level)}{msg}\n")
            sys.stderr.flush()

    # -- faults

    def reload_faults(self) -> None:
        """Re-read ``faults.json`` when it changed, then acknowledge its ``st_mtime_ns`` in ``run/faults.ack``."""
        try:
            mtime = self.faults_file.stat().st_mtime_ns
        except OSError:
            mtime = 0
        if mtime == self.faults_mtime:
            return
        self.faults_mtime = mtime
        try:
            self.faults = dict(json.loads(self.faults_file.read_text()).get(self.node) or {})
        except (OSError, ValueError):
            self.faults = {}
        if self.faults.get("scheduler_down"):
            self.fatal("Condition failed: lab fault scheduler_down")
        ack = self.pid_file.with_name("faults.ack")
        tmp = ack.with_suffix(".tmp")
        tmp.write_text(f"{mtime}\n")
        tmp.replace(ack)

    def drop_pid_file(self) -> None:
        """Remove the pid file if it is still ours (a successor may have written its own)."""
        try:
            if int(self.pid_file.read_text().strip()) == os.getpid():
                self.pid_file.unlink()
        except (OSError, ValueError):
            pass

    def fatal(self, msg: str) -> None:
        self.log("FATAL", msg)
        self.release_all()
        self.drop_pid_file()
        os._exit(1)

    # -- start-up

    def startup_lines(self) -> None:
        n, env = self.names, os.environ
        self.log("INFO", f"{n.scheduler_binary} started in {'debug' if self.debug else 'normal'} mode")
        self.log("INFO", "Switch time mode: AUTO")
        mode = env.get(n.env_scheduling_mode)
        if mode is None:
            line = "AUTO (default)"
        elif mode.lower() == "serial":
            line = "SERIAL (one task at a time per GPU)"
        elif mode.lower() == "concurrent":
            line = "CONCURRENT (original behavior)"
        else:
            line = "AUTO (smart - concurrent if memory fits)"
        self.log("INFO", f"Scheduling mode: {line}")
        self.log("INFO", "Max runtime per task: 300 seconds (default)")
        self.log("INFO", "Quota sampling interval: 50 ms (default)")
        window_env = n.env("COMPUTE_WINDOW_MS") in env
        self.log("INFO", f"Compute quota window: {self.window_ms} ms{'' if window_env else ' (default)'}")
        carry = env.get(n.env("QUOTA_CARRYOVER_PERCENT"))
        self.log("INFO", f"Quota carryover: {atoi(carry) if carry is not None else 25}%"
                         f"{'' if carry is not None else ' (default)'}")
        self.log("INFO", "Drop-tail billing ratio: 70% (default)")
        self.log("INFO", "K8s API client initialized")
        self.log("INFO", "Annotation watcher enabled for dynamic memory limits")
        self.log("INFO", f"{n.scheduler_binary} listening on {n.socket_path}")

    # -- main loop

    def run(self) -> int:
        self.reload_faults()
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        self.clients_dir.mkdir(parents=True, exist_ok=True)
        self.startup_lines()
        metrics_on = os.environ.get(self.names.env_metrics_enable, "") in ("1", "true")
        if metrics_on:
            self.log("INFO", f"Metrics exporter enabled on {self.listen}:{self.port} (debug_labels=0)")
        self.log("INFO", f"Annotation watcher thread started (interval: {self.poll_s:g} sec)")
        if metrics_on:
            self.log("INFO", f"GPU sampler initialized with NVML: {len(self.ncfg['gpus'])} device(s)")
            self.log("INFO", "GPU sampler thread started")
            self.start_http()
        else:
            self.log("INFO", f"Metrics exporter disabled (set {self.names.env_metrics_enable}=1 to enable)")
        self.pid_file.write_text(f"{os.getpid()}\n")
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.stop.set())
        threading.Thread(target=self.watcher, name="annotations", daemon=True).start()
        last_scan = last_faults = last_sample = 0.0
        last_tick = time.monotonic()
        while not self.stop.is_set():
            now = time.monotonic()
            if now - last_faults >= 0.1:
                self.reload_faults()
                last_faults = now
            if now - last_scan >= 0.1:
                self.scan()
                last_scan = now
            if now - last_sample >= 1.0:
                self.sample(now - last_sample if last_sample else 1.0)
                last_sample = now
            self.enforce(now, now - last_tick)
            last_tick = now
            busy = any(c.core < 100 or (c.active and self.gpu_speed < 1) for c in self.clients.values())
            time.sleep(0.005 if busy else 0.05)
        self.release_all()
        self.drop_pid_file()
        return 0

    def start_http(self) -> None:
        sched = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _reply(self, code: int, body: bytes, ctype: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Connection", "close")
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)
                self.close_connection = True

            def do_GET(self) -> None:
                if self.path.startswith("/metrics"):
                    self._reply(200, sched.render_metrics().encode(), "text/plain; version=0.0.4; charset=utf-8")
                elif self.path.startswith("/healthz"):
                    self._reply(200, b"OK\n", "text/plain")
                else:
                    self._reply(404, b"Not Found\n", "text/plain")

            def do_HEAD(self) -> None:
                self._reply(404, b"Not Found\n", "text/plain")

        try:
            httpd = http.server.HTTPServer((self.listen, self.port), Handler)
        except OSError as exc:
            self.log("WARN", f"Metrics server: bind() failed on port {self.port}: {exc.strerror}")
            return
        self.log("INFO", f"Metrics exporter thread started on port {self.port}")
        self.log("INFO", "GPU sampler thread started (backend=nvml, interval=1000 ms)")
        self.log("INFO", f"Metrics server listening on {self.listen}:{self.port}")
        threading.Thread(target=httpd.serve_forever, name="metrics", daemon=True).start()

    # -- clients

    def pod_annotations(self, namespace: str, pod: str) -> dict[str, str] | None:
        url = f"{self.api}/api/v1/namespaces/{namespace}/pods/{pod}"
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                return dict((json.loads(resp.read()).get("metadata") or {}).get("annotations") or {})
        except (urllib.error.URLError, OSError, ValueError):
            return None

    def scan(self) -> None:
        """Register new clients from the registry, drop gone ones, read their memory reports."""
        seen: set[str] = set()
        for path in sorted(self.clients_dir.glob("*.json")):
            try:
                reg = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            cid, pid = reg.get("client_id", ""), int(reg.get("pid") or 0)
            if not cid or pid <= 0:
                continue
            seen.add(cid)
            if cid not in self.clients and _alive(pid):
                self.register(reg)
        for cid, c in list(self.clients.items()):
            if cid not in seen or not _alive(c.pid):
                self.unregister(c)
                continue
            try:
                alloc = int((self.clients_dir / f"{cid}.mem").read_text().strip() or 0)
            except (OSError, ValueError):
                continue
            c.active = True
            if alloc != c.mem_alloc:
                with self.lock:
                    c.mem_alloc = alloc
                    c.mem_peak = max(c.mem_peak, alloc)
                    self.messages["MEM_UPDATE"] += 1
                self.log("DEBUG", f"Received MEM_UPDATE from {cid}: {alloc // MIB} MB")

    def register(self, reg: dict[str, Any]) -> None:
        n = self.names
        c = Client(reg["client_id"], int(reg["pid"]), reg.get("pod", "none"), reg.get("namespace", "none"),
                   reg.get("gpu_uuid", "default"), time.monotonic())
        self.log("INFO", "Received REGISTER")
        with self.lock:
            self.messages["REGISTER"] += 1
            if c.gpu not in self.contexts:
                self.contexts.append(c.gpu)
                self.window_start[c.gpu] = time.monotonic()
                self.log("INFO", f"Created new GPU context for UUID {c.gpu} "
                                 f"(memory: {int(self.ncfg['gpu_memory_bytes']) // MIB} MB)")
        self.log("DEBUG", f"SO_PEERCRED: client fd={len(self.clients) + 20} pid={c.pid} (client reported pid={c.pid})")
        ann = None if self.faults.get("ignore_annotations") else self.pod_annotations(c.namespace, c.pod)
        ann = ann or {}
        if n.annotation_core_limit in ann:
            value = atoi(ann[n.annotation_core_limit])
            if 1 <= value <= 100:
                c.core = value
                self.log("INFO", f"Applying initial compute limit for {c.namespace}/{c.pod}: {value}%")
                self.send_core_limit(c, value)
            else:
                self.log("WARN", f"Invalid compute limit for {c.namespace}/{c.pod}: {value} (must be 1-100)")
        self.log("INFO", f"Sent SCHED_ON to client {c.cid}")
        mem = parse_memory_size(ann.get(n.annotation_memory_limit))
        if mem > 0:
            self.log("INFO", f"Applying initial memory limit for {c.namespace}/{c.pod}: {mem} bytes")
            self.send_memory_limit(c, mem)
        on_gpu = f" on GPU {c.gpu}" if n.register_has_gpu else ""
        self.log("INFO", f"Registered client {c.cid}{on_gpu} with Pod name = {c.pod}, Pod namespace = {c.namespace}")
        with self.lock:
            self.clients[c.cid] = c

    def send_memory_limit(self, c: Client, mem: int) -> None:
        c.mem_limit = mem
        self.log("INFO", f"Sending UPDATE_LIMIT to client {c.cid}: {mem} bytes ({mem / 2**30:.2f} GiB)")
        tmp = self.clients_dir / f"{c.cid}.limit.tmp"
        tmp.write_text(f"{mem}\n")
        tmp.replace(self.clients_dir / f"{c.cid}.limit")
        self.log("INFO", f"Sent UPDATE_LIMIT to client {c.cid}")

    def send_core_limit(self, c: Client, core: int) -> None:
        """Deliver UPDATE_CORE_LIMIT: the lab client hook reads ``<id16>.core`` and logs the library's line."""
        tmp = self.clients_dir / f"{c.cid}.core.tmp"
        tmp.write_text(f"{core}\n")
        tmp.replace(self.clients_dir / f"{c.cid}.core")

    def unregister(self, c: Client) -> None:
        with self.lock:
            self.clients.pop(c.cid, None)
            self.disconnect_total += 1
        for suffix in (".limit", ".mem", ".core"):
            (self.clients_dir / f"{c.cid}{suffix}").unlink(missing_ok=True)
        self.log("INFO", f"Removing client {c.cid}")

    def watcher(self) -> None:
        """The annotation watcher: every ``poll_s`` one GET per client, log and apply changes (§4.3)."""
        n = self.names
        while not self.stop.wait(self.poll_s):
            if self.faults.get("ignore_annotations"):
                continue
            for c in list(self.clients.values()):
                ann = self.pod_annotations(c.namespace, c.pod)
                if ann is None or c.cid not in self.clients:
                    continue
                value = atoi(ann.get(n.annotation_core_limit))
                core = value if 1 <= value <= 100 else 100
                if core != c.core:
                    self.log("INFO", f"Compute limit changed for pod {c.namespace}/{c.pod}: {c.core}% -> {core}%")
                    self.log("INFO", f"Sending UPDATE_CORE_LIMIT to client {c.cid}: {core}%")
                    with self.lock:
                        c.core = core
                    self.send_core_limit(c, core)
                    self.log("INFO", f"Sent UPDATE_CORE_LIMIT to client {c.cid}")
                mem = parse_memory_size(ann.get(n.annotation_memory_limit))
                if mem > 0 and mem != c.mem_limit:
                    self.log("INFO", f"Memory limit changed for pod {c.namespace}/{c.pod}: "
                                     f"{c.mem_limit} -> {mem} bytes")
                    self.send_memory_limit(c, mem)

    # -- enforcement

    def effective_percent(self, c: Client) -> int:
        """Budget ms × 100 / window after oversubscription scaling (§5.2); 100 when unlimited."""
        if c.core >= 100:
            return 100
        total = sum(o.core for o in self.clients.values() if o.gpu == c.gpu and o.core < 100)
        pct = c.core * 100 / total if total > 100 else c.core
        return int(self.window_ms * pct / 100) * 100 // self.window_ms

    def budget_ms(self, c: Client) -> int:
        return self.window_ms * self.effective_percent(c) // 100

    def enforce(self, now: float, dt: float) -> None:
        """One tick: reset windows, bill the running limited clients, throttle those over budget, and let
        one limited client per GPU hold the lock (the SUT time-slices a GPU: limited clients take turns).

        Time is billed in GPU ms: a client's on-CPU time / ``gpu_speed``. Below speed 1 the unlimited
        clients that use a GPU are billed too and paused, without any SUT log line, once they have used
        a whole window: that is the device's own pace, not a quota."""
        enforcing = not self.faults.get("no_enforcement")
        skew = float(self.faults.get("skew") or 1.0)
        paced = self.gpu_speed < 1
        with self.lock:
            for gpu in self.contexts:
                if now - self.window_start.get(gpu, now) >= self.window_ms / 1000:
                    self.log("DEBUG", f"Reset quota window for GPU {gpu} after "
                                      f"{int((now - self.window_start[gpu]) * 1000)} ms")
                    self.window_start[gpu] = now
                    for c in self.clients.values():
                        if c.gpu == gpu:
                            # Carry what a throttled client ran past its budget into the next window: the
                            # stop lands a tick late (later on a busy machine), and without the carry every
                            # window would grant budget + tick, so quotas would run fast on average.
                            over = c.used_ms - (self.limit_ms(c, skew) if c.limited_since is not None
                                                else self.window_ms)
                            c.used_ms = max(0.0, over) if c.throttled else 0.0
                            c.throttled = False
            limited_by_gpu: dict[str, list[Client]] = {}
            for c in self.clients.values():
                # Like the SUT, whose lock is requested at the first kernel launch: a process that has not
                # touched the "GPU" yet (importing torch, parsing arguments) runs unthrottled.
                limited = c.core < 100 and enforcing and c.active
                if not limited:
                    c.limited_since = None
                    if paced and c.active:
                        self.pace(c, now, dt)
                        continue
                    if c.stopped:
                        self.resume(c, now, promoted=False)
                    c.throttled = False
                    continue
                limited_by_gpu.setdefault(c.gpu, []).append(c)
                if c.limited_since is None:
                    c.limited_since = now
                    self.lock_ok(c, now)
                if c.stopped:
                    continue
                self.bill(c, dt)
                budget = self.budget_ms(c)
                if c.used_ms >= self.limit_ms(c, skew) and (budget < self.window_ms or paced):
                    self.throttle(c, now, budget)
                    c.throttled = True
            for clients in limited_by_gpu.values():
                self.take_turns(sorted(clients, key=lambda o: o.registered), now, skew)

    def take_turns(self, clients: list[Client], now: float, skew: float) -> None:
        """One holder per GPU; the others wait stopped, their budget untouched (two CPU-bound pods side by
        side would also slow each other on shared cores and caches). The lock goes to the waiting client that
        has used the smallest share of its budget, and rotates (the SUT's TQ rotation) once the holder has used
        ``ROTATION_SHARE`` more of its budget than that client: when the machine cannot run every budget within
        a window, each client then falls short by about the same share instead of the last in line alone."""
        running = [o for o in clients if not o.stopped]
        for extra in running[1:]:
            _signal_group(extra.pid, signal.SIGSTOP)
            extra.stopped = True
        waiting = [o for o in clients if o.stopped and not o.throttled]
        if not waiting:
            return

        def share(o: Client) -> float:
            return o.used_ms / max(1.0, self.limit_ms(o, skew))

        nxt = min(waiting, key=share)
        holder = running[0] if running else None
        if holder is not None:
            if share(holder) - share(nxt) < ROTATION_SHARE:
                return
            _signal_group(holder.pid, signal.SIGSTOP)  # TQ rotation: DROP_LOCK without a Throttling line
            holder.stopped = True
            self.drop_lock(holder, now)
        self.resume(nxt, now, promoted=True)

    def bill(self, c: Client, dt: float) -> None:
        """Add the GPU ms ``c`` used since the last tick: its threads' on-CPU time / ``gpu_speed``.

        On-CPU time, not wall time (the SUT bills kernel time on the GPU): a runnable process that another
        process kept off the cores used none of its budget, so the quota holds on a busy machine too. Wall
        time where /proc cannot tell."""
        cpu_ns = _on_cpu_ns(c.pid)
        if cpu_ns is None or c.cpu_ns is None:
            c.used_ms += dt * 1000
        else:
            c.used_ms += max(0, cpu_ns - c.cpu_ns) / 1e6 / self.gpu_speed
        c.cpu_ns = cpu_ns

    def pace(self, c: Client, now: float, dt: float) -> None:
        """The device's pace for an unlimited client on a GPU slower than a core: billed like a limited
        one, stopped silently once it has used a whole window, resumed silently when the window resets."""
        if c.stopped:
            if not c.throttled:
                self.resume(c, now, promoted=False)
            return
        self.bill(c, dt)
        if c.used_ms >= self.window_ms:
            _signal_group(c.pid, signal.SIGSTOP)
            c.stopped = c.throttled = True

    def limit_ms(self, c: Client, skew: float) -> float:
        """GPU ms ``c`` may run in one window (its budget, times the ``skew`` fault)."""
        return min(self.window_ms, self.budget_ms(c) * skew)

    def lock_ok(self, c: Client, now: float) -> None:
        self.messages["REQ_LOCK"] += 1
        self.log("INFO", f"Received REQ_LOCK from {c.cid}")
        self.log("INFO", f"Sent LOCK_OK to client {c.cid}")
        running = sum(o.mem_alloc for o in self.clients.values() if o.gpu == c.gpu and not o.stopped and o.core < 100)
        self.log("INFO", f"Scheduled client {c.cid} (mem: {c.mem_alloc // MIB} MB, total running: {running // MIB} MB)")
        self.peak_running[c.gpu] = max(self.peak_running.get(c.gpu, 0), running)
        c.ran_since = now

    def throttle(self, c: Client, now: float, budget: int) -> None:
        _signal_group(c.pid, signal.SIGSTOP)
        c.stopped = True
        used = int(c.used_ms)
        concurrent = sum(1 for o in self.clients.values() if o.gpu == c.gpu and o.core < 100 and not o.stopped) + 1
        self.log("INFO", f"Throttling client {c.cid} (Used: {used}/{budget} ms, weighted, wall={used}, "
                         f"billed={used}, concurrent={concurrent})")
        self.drop_lock(c, now)

    def drop_lock(self, c: Client, now: float) -> None:
        """§4.4 lines of a lock taken away (after a Throttling line, or alone for a TQ rotation)."""
        self.log("INFO", f"Sent DROP_LOCK to client {c.cid}")
        self.drop_lock_total += 1
        self.messages["LOCK_RELEASED"] += 1
        self.log("INFO", f"Received LOCK_RELEASED from {c.cid}")
        self.log("INFO", f"Client {c.cid} released from running_list (ran for {int((now - c.ran_since) * 1000)} ms). "
                         f"Mem: {c.mem_alloc // MIB} MB")

    def resume(self, c: Client, now: float, *, promoted: bool) -> None:
        _signal_group(c.pid, signal.SIGCONT)
        c.stopped = False
        if promoted:
            self.log("INFO", f"Client {c.cid} promoted from wait queue")
            self.log("INFO", f"Sent MEM_AVAILABLE to client {c.cid}")
            self.mem_available_total += 1
            self.lock_ok(c, now)
        c.ran_since = now

    def release_all(self) -> None:
        for c in list(self.clients.values()):
            if c.stopped:
                _signal_group(c.pid, signal.SIGCONT)
                c.stopped = False

    # -- sampling

    def sample(self, elapsed: float) -> None:
        hz = os.sysconf("SC_CLK_TCK")
        util: dict[str, float] = {}
        for c in list(self.clients.values()):
            ticks = _cpu_ticks(c.pid)
            if ticks is None:
                continue
            if c.cpu_ticks is not None and elapsed > 0:
                c.util = max(0.0, min(1.0, (ticks - c.cpu_ticks) / hz / elapsed / self.gpu_speed))
            c.cpu_ticks = ticks
            util[c.gpu] = min(1.0, util.get(c.gpu, 0.0) + c.util)
        self.gpu_util = util
        leak = int(self.faults.get("leak_bytes_per_s") or 0)
        if leak > 0:
            self.leaked.append(b"\xa5" * int(leak * elapsed))

    # -- metrics

    def render_metrics(self) -> str:
        n = self.names
        missing = self.faults.get("metrics_missing") or ()
        if missing is True:
            missing = DEFAULT_MISSING
        missing = set(missing)
        out: list[str] = []
        with self.lock:
            clients = list(self.clients.values())
            gpus = list(self.ncfg["gpus"])
            total = int(self.ncfg["gpu_memory_bytes"])

            def family(suffix: str, mtype: str, help_: str, rows: list[tuple[str, str]]) -> None:
                if suffix in missing:
                    return
                name = n.metric(suffix)
                out.append(f"# HELP {name} {help_}")
                out.append(f"# TYPE {name} {mtype}")
                out.extend(f"{name}{labels} {value}" for labels, value in rows)

            def lab(**kv: Any) -> str:
                return "{" + ",".join(f'{k}="{v}"' for k, v in kv.items()) + "}"

            def g(i: int, u: str) -> str:
                return lab(gpu_uuid=u, gpu_index=i)

            used = {u: sum(c.mem_alloc + CONTEXT_OVERHEAD_BYTES for c in clients if c.gpu == u) for u in gpus}
            family("gpu_sampler_up", "gauge", "Whether GPU sampler backend is available (1=yes, 0=no)", [("", "1")])
            family("gpu_sampler_backend_info", "gauge", "Active sampler backend", [(lab(backend="nvml"), "1")])
            family("nvml_up", "gauge", "Whether NVML is available (1=yes, 0=no)", [("", "1")])
            family("gpu_info", "gauge", "GPU device information",
                   [(lab(gpu_uuid=u, gpu_index=i, gpu_name="NVIDIA Lab GPU"), "1") for i, u in enumerate(gpus)])
            family("gpu_memory_total_bytes", "gauge", "Total GPU memory in bytes",
                   [(g(i, u), str(total)) for i, u in enumerate(gpus)])
            family("gpu_memory_used_bytes", "gauge", "Used GPU memory in bytes",
                   [(g(i, u), str(used[u])) for i, u in enumerate(gpus)])
            family("gpu_memory_free_bytes", "gauge", "Free GPU memory in bytes",
                   [(g(i, u), str(max(0, total - used[u]))) for i, u in enumerate(gpus)])
            family("gpu_utilization_ratio", "gauge", "GPU utilization (0~1)",
                   [(g(i, u), f"{self.gpu_util.get(u, 0.0):.4f}") for i, u in enumerate(gpus)])
            family("gpu_memory_utilization_ratio", "gauge", "Memory controller utilization (0~1)",
                   [(g(i, u), f"{self.gpu_util.get(u, 0.0) * 0.3:.4f}") for i, u in enumerate(gpus)])
            family("gpu_process_count", "gauge", "Number of compute processes on GPU",
                   [(g(i, u), str(sum(1 for c in clients if c.gpu == u))) for i, u in enumerate(gpus)])

            def base(c: Client) -> str:
                return lab(namespace=c.namespace, pod=c.pod, client_id=c.cid, gpu_uuid=c.gpu)

            family("client_info", "gauge", "Client metadata (value=1)",
                   [(lab(namespace=c.namespace, pod=c.pod, client_id=c.cid, gpu_uuid=c.gpu, gpu_index=-1,
                         host_pid=c.pid), "1") for c in clients])
            family("client_managed_allocated_bytes", "gauge", "Current managed allocation",
                   [(base(c), str(c.mem_alloc)) for c in clients])
            family("client_managed_allocated_peak_bytes", "gauge", "Lifetime peak managed allocation",
                   [(base(c), str(c.mem_peak)) for c in clients])
            family("client_nvml_used_bytes", "gauge", "NVML per-process GPU memory",
                   [(lab(namespace=c.namespace, pod=c.pod, client_id=c.cid, gpu_uuid=c.gpu, host_pid=c.pid),
                     str(c.mem_alloc + CONTEXT_OVERHEAD_BYTES)) for c in clients])
            family("client_memory_quota_bytes", "gauge", "Configured memory quota (0=unlimited)",
                   [(base(c), str(c.mem_limit)) for c in clients])
            family("client_memory_quota_exceeded", "gauge", "Whether allocation exceeds quota (0/1)",
                   [(base(c), "1" if c.mem_limit and c.mem_alloc > c.mem_limit else "0") for c in clients])
            family("client_core_quota_config_percent", "gauge", "Configured compute quota (1-100)",
                   [(base(c), str(c.core)) for c in clients])
            family("client_core_quota_effective_percent", "gauge", "Effective compute quota after scaling",
                   [(base(c), str(self.effective_percent(c))) for c in clients])
            family("client_core_window_usage_ms", "gauge", "Runtime in current window (ms)",
                   [(base(c), str(int(c.used_ms) if c.core < 100 else 0)) for c in clients])
            family("client_core_window_limit_ms", "gauge", "Window limit (ms)",
                   [(base(c), str(self.budget_ms(c))) for c in clients])
            family("client_core_usage_ratio", "gauge", "usage_ms / limit_ms",
                   [(base(c), f"{(c.used_ms / max(1, self.budget_ms(c))) if c.core < 100 else 0.0:.4f}")
                    for c in clients])
            family("client_throttled", "gauge", "Whether client is throttled (0/1)",
                   [(base(c), "1" if c.stopped else "0") for c in clients])
            family("client_pending_drop", "gauge", "Whether DROP sent awaiting release (0/1)",
                   [(base(c), "0") for c in clients])
            family("client_quota_debt_ms", "gauge", "Carryover debt (ms)", [(base(c), "0") for c in clients])

            ctx = list(enumerate(self.contexts))

            def running(u: str) -> list[Client]:
                return [c for c in clients if c.gpu == u and c.core < 100 and not c.stopped]

            family("scheduler_running_clients", "gauge", "Running list length",
                   [(g(i, u), str(len(running(u)))) for i, u in ctx])
            family("scheduler_request_queue_clients", "gauge", "Request queue length", [(g(i, u), "0") for i, u in ctx])
            family("scheduler_wait_queue_clients", "gauge", "Wait queue length",
                   [(g(i, u), str(sum(1 for c in clients if c.gpu == u and c.stopped))) for i, u in ctx])
            family("scheduler_running_memory_bytes", "gauge", "Total running managed memory",
                   [(g(i, u), str(sum(c.mem_alloc for c in running(u)))) for i, u in ctx])
            family("scheduler_peak_running_memory_bytes", "gauge", "Peak running memory",
                   [(g(i, u), str(self.peak_running.get(u, 0))) for i, u in ctx])
            family("scheduler_memory_safe_limit_bytes", "gauge", "Safe memory limit (total*(1-reserve))",
                   [(g(i, u), str(total * 90 // 100)) for i, u in ctx])
            family("scheduler_memory_overloaded", "gauge", "Memory overload state (0/1)",
                   [(g(i, u), "0") for i, u in ctx])
            family("scheduler_messages_total", "counter", "Message counts by type",
                   [(lab(type=t), str(v)) for t, v in self.messages.items()])
            family("scheduler_drop_lock_total", "counter", "DROP_LOCK events sent", [("", str(self.drop_lock_total))])
            family("scheduler_client_disconnect_total", "counter", "Client disconnects",
                   [("", str(self.disconnect_total))])
            family("scheduler_wait_for_mem_total", "counter", "WAIT_FOR_MEM events sent",
                   [("", str(self.wait_for_mem_total))])
            family("scheduler_mem_available_total", "counter", "MEM_AVAILABLE events sent",
                   [("", str(self.mem_available_total))])
        return "\n".join(out) + "\n"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _on_cpu_ns(pid: int) -> int | None:
    """Nanoseconds that all threads of ``pid`` have run on a CPU (``/proc/<pid>/task/*/schedstat``)."""
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
                total += int(fh.read().split()[0])
        except (OSError, IndexError, ValueError):
            continue  # a thread that just ended
    return total


def _cpu_ticks(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime
    except (OSError, IndexError, ValueError):
        return None


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(os.getpgid(pid), sig)


def main(argv: list[str]) -> int:
    cfg = json.loads(Path(os.environ["XPUSHARE_LAB_CONFIG"]).read_text())
    node = os.environ.get("NODE_NAME") or os.environ["XPUSHARE_LAB_NODE"]
    listen = os.environ.get("POD_IP") or cfg["nodes"][node]["scheduler_address"]
    return LabScheduler(cfg, node, listen).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
