"""Names of the system under test, per naming generation (``nvshare`` → ``xpushare``).

The two generations run the same design under different identifiers (docs/sut/README.md §naming): the
system namespace, DaemonSet names and pod labels, the extended resource, annotation keys, environment
variable names, the metric prefix, the socket and preload-library paths and the log prefix. The
inventory names the generation per cluster; everything else asks :func:`sut_names` instead of
spelling a name.

Example::

    names = sut_names("nvshare")
    names.resource                  # "nvshare.com/gpu"
    names.metric("client_info")     # "nvshare_client_info"
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SutNames:
    """Every identifier of one SUT generation (all plain strings; paths are container/host paths).

    ``register_has_gpu`` tells whether the scheduler's registration line carries ``on GPU <uuid>``
    (the current xpushare code does; upstream nvshare does not, docs/sut/README.md §naming).
    """

    generation: str
    namespace: str
    scheduler_daemonset: str
    scheduler_label: str
    device_plugin_daemonset: str
    device_plugin_label: str
    resource: str
    annotation_core_limit: str
    annotation_memory_limit: str
    env_prefix: str
    env_debug: str
    env_oversub: str
    env_memory_limit: str
    env_virtual_devices: str
    env_scheduling_mode: str
    env_metrics_enable: str
    metric_prefix: str
    socket_dir: str
    socket_path: str
    preload_lib: str
    host_preload_lib: str
    log_prefix: str
    scheduler_binary: str
    ctl_binary: str
    register_has_gpu: bool

    @property
    def scheduler_selector(self) -> str:
        """Label selector of the scheduler pods, e.g. ``name=xpushare-scheduler``."""
        return self.scheduler_label

    def metric(self, suffix: str) -> str:
        """Full metric family name for a catalogue suffix: ``metric("nvml_up")`` → ``xpushare_nvml_up``."""
        return f"{self.metric_prefix}{suffix}"

    def log_tag(self, level: str) -> str:
        """Line prefix for one level (``INFO``, ``WARN``, ``DEBUG``, ``FATAL``): ``[XPUSHARE][INFO]: ``."""
        return f"{self.log_prefix}[{level}]: "

    def env(self, suffix: str) -> str:
        """Environment variable name for a suffix: ``env("COMPUTE_WINDOW_MS")`` → ``XPUSHARE_COMPUTE_WINDOW_MS``."""
        return f"{self.env_prefix}{suffix}"


def _generation(word: str, *, register_has_gpu: bool) -> SutNames:
    upper = word.upper()
    return SutNames(
        generation=word,
        namespace=f"{word}-system",
        scheduler_daemonset=f"{word}-scheduler",
        scheduler_label=f"name={word}-scheduler",
        device_plugin_daemonset=f"{word}-device-plugin",
        device_plugin_label=f"name={word}-device-plugin",
        resource=f"{word}.com/gpu",
        annotation_core_limit=f"{word}.com/gpu-core-limit",
        annotation_memory_limit=f"{word}.com/gpu-memory-limit",
        env_prefix=f"{upper}_",
        env_debug=f"{upper}_DEBUG",
        env_oversub=f"{upper}_ENABLE_SINGLE_OVERSUB",
        env_memory_limit=f"{upper}_GPU_MEMORY_LIMIT",
        env_virtual_devices=f"{upper}_VIRTUAL_DEVICES",
        env_scheduling_mode=f"{upper}_SCHEDULING_MODE",
        env_metrics_enable=f"{upper}_METRICS_ENABLE",
        metric_prefix=f"{word}_",
        socket_dir=f"/var/run/{word}",
        socket_path=f"/var/run/{word}/scheduler.sock",
        preload_lib=f"/usr/lib/{word}/lib{word}.so",
        host_preload_lib=f"/var/run/{word}/lib{word}.so",
        log_prefix=f"[{upper}]",
        scheduler_binary=f"{word}-scheduler",
        ctl_binary=f"{word}ctl",
        register_has_gpu=register_has_gpu,
    )


#: The naming table, keyed by the generation name an inventory uses.
GENERATIONS: dict[str, SutNames] = {
    "nvshare": _generation("nvshare", register_has_gpu=False),
    "xpushare": _generation("xpushare", register_has_gpu=True),
}


def sut_names(generation: str) -> SutNames:
    """The names of one generation.

    Raises:
        ValueError: ``generation`` is not a key of :data:`GENERATIONS`.
    """
    try:
        return GENERATIONS[generation]
    except KeyError:
        known = ", ".join(sorted(GENERATIONS))
        raise ValueError(f"unknown SUT generation {generation!r} (known: {known})") from None
