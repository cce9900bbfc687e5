"""The GPU-sharing system a cluster runs, as a profile apart from the mode: how it sets a memory quota and a
core (compute) quota on a workload, what proves it is in a workload's path, how host mode installs, starts
and stops it.

The inventory's ``sut:`` names the profile. ``xpushare`` and ``nvshare`` are the two naming generations of the
project's SUT (:mod:`xpushare.inventory.sut`); ``hami-core`` is HAMi-core's ``libvgpu.so`` preloaded into the
workload; ``mps`` is NVIDIA's Multi-Process Service (its control daemon per GPU host, the CUDA driver its
client). Sources: docs/isolation.md §cross-SUT; HAMi-core's README and ``src/multiprocess/
multiprocess_memory_limit.c`` (``get_limit_from_env``: a number with an optional ``k``/``m``/``g`` suffix), its
``src/include/log_utils.h`` (``[HAMI-core Msg(pid:...)]``) and ``src/libvgpu.c`` (``preInit``: ``Initializing.....``);
NVIDIA's MPS documentation (``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``, ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``,
``server.log``'s ``New client <pid> connected``).

Example::

    p = profile("hami-core")
    p.memory_env(1 << 30)            # {"CUDA_DEVICE_MEMORY_LIMIT": "1024m"}
    p.core_env(50)                   # {"CUDA_DEVICE_SM_LIMIT": "50"}
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from xpushare.model.premises import SUT

__all__ = ["HAMI_CORE", "MPS", "MPS_DEFAULT_ROOT", "PROFILES", "SutProfile", "mps_dirs", "profile"]

HAMI_CORE = "hami-core"
MPS = "mps"
MPS_DEFAULT_ROOT = "/tmp/xpushare-mps"
"""Host mode: where the MPS daemon's pipe (``<root>/pipe``) and logs (``<root>/log``) go when the inventory's
``scheduler.state_dir`` does not say."""

_MIB = 1 << 20


def _xpushare_memory(word: str) -> Callable[[int], dict[str, str]]:
    def env(quota_bytes: int) -> dict[str, str]:
        # the SUT's memory-limit variable takes Kubernetes quantities (docs/sut/README.md §naming)
        mib = quota_bytes // _MIB
        return {f"{word.upper()}_GPU_MEMORY_LIMIT": f"{mib}Mi" if mib * _MIB == quota_bytes else str(quota_bytes)}

    return env


def _hami_memory(quota_bytes: int) -> dict[str, str]:
    mib = quota_bytes // _MIB
    return {"CUDA_DEVICE_MEMORY_LIMIT": f"{mib}m" if mib * _MIB == quota_bytes else str(quota_bytes)}


def _mps_memory(quota_bytes: int) -> dict[str, str]:
    # ordinal 0: the client sees only its own GPU (CUDA_VISIBLE_DEVICES); MPS takes a K/M/G suffix
    mib = quota_bytes // _MIB
    return {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={mib}M" if mib * _MIB == quota_bytes else f"0={quota_bytes}"}


@dataclass(frozen=True)
class SutProfile:
    """One GPU-sharing system.

    ``name``: the inventory's ``sut`` value; ``generation``: the naming generation of the project's SUT whose
    identifiers the tool's own conventions use (the other systems borrow ``xpushare``'s, which they ignore);
    ``memory_quota_var`` / ``core_quota_var``: the variable that sets the quota on a workload in host mode (None:
    no such variable, e.g. xpushare's core quota is a pod annotation); ``needs_preload``: the workload loads the
    system's library (``LD_PRELOAD`` of the inventory's ``sut_lib``); ``debug_env``: variables set on every
    workload so its evidence lines are printed; ``proof``: what shows the system was in a workload's path, judged
    as premise ``proof_premise``; ``kubernetes``: None when the tool drives it in Kubernetes mode, else why not
    (the inventory refuses the pair); ``install``: how ``invoke deploy`` installs, starts and stops it in host mode;
    ``oversub_env``: the variables that let a workload allocate more GPU memory than the card has (None: the
    system has no such switch, e.g. MPS); ``gpu_processes``: the system's own processes that hold a GPU context
    while it serves workloads (``nvidia-smi --query-compute-apps`` lists them: MPS's server), never another
    tenant's load on the GPU.
    """

    name: str
    generation: str
    title: str
    memory_quota_var: str
    core_quota_var: str | None
    needs_preload: bool
    memory_env_of: Callable[[int], dict[str, str]]
    proof: str
    install: str
    kubernetes: str | None = None
    proof_premise: str = SUT
    debug_env: Mapping[str, str] = field(default_factory=dict)
    oversub_env: Mapping[str, str] | None = None
    gpu_processes: tuple[str, ...] = ()

    def memory_env(self, quota_bytes: int) -> dict[str, str]:
        """The workload's environment for a memory quota of ``quota_bytes`` bytes (> 0)."""
        return self.memory_env_of(int(quota_bytes))

    def core_env(self, percent: int) -> dict[str, str]:
        """The workload's environment for a core quota of ``percent`` % (1..100).

        Raises:
            ValueError: the system sets no core quota through the environment (:attr:`core_quota_var` is None).
        """
        if self.core_quota_var is None:
            raise ValueError(f"sut {self.name} sets no core quota through the environment")
        return {self.core_quota_var: str(int(percent))}

    def client_env(self, state_dir: str | None, workload: str) -> dict[str, str]:
        """What the host-mode workload ``workload`` (its spawn name, unique in the run) of this system gets besides
        its quotas: :attr:`debug_env`; for MPS the daemon's pipe and log directories under ``state_dir`` (the
        inventory's ``scheduler.state_dir``; None: :data:`MPS_DEFAULT_ROOT`); for HAMi-core a shared region of
        its own, ``<workload>.cudevshr.cache`` in the workload's working directory (the host's spawn directory).

        HAMi-core keeps the limits in that region (``CUDA_DEVICE_MEMORY_SHARED_CACHE``, default
        ``/tmp/cudevshr.cache``) and a region that exists keeps the limits of the process that created it over the
        environment of later ones: one region for the whole host let a case's ``CUDA_DEVICE_SM_LIMIT`` lose to an
        earlier case's region made without it (docs/findings.md, HAMi-core). Under HAMi's device plugin each
        container has its own region; here each workload does, and a child process shares its parent's."""
        env = dict(self.debug_env)
        if self.name == MPS:
            pipe, log = mps_dirs(state_dir)
            env.update(CUDA_MPS_PIPE_DIRECTORY=pipe, CUDA_MPS_LOG_DIRECTORY=log)
        if self.name == HAMI_CORE:
            env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] = f"{workload}.cudevshr.cache"
        return env

    @property
    def no_oversubscription(self) -> str | None:
        """Why a workload of this system cannot be switched to oversubscribe GPU memory (None: it can, by
        :attr:`oversub_env`)."""
        return None if self.oversub_env is not None else f"sut {self.name} has no switch to oversubscribe GPU memory"

    @property
    def host_core_quota(self) -> str | None:
        """Why a core quota cannot be set on a host-mode workload (None: it can, by :attr:`core_quota_var`)."""
        if self.core_quota_var is not None:
            return None
        return f"sut {self.name} sets a core quota only as a pod annotation (Kubernetes mode)"

    @property
    def host_quota_change(self) -> str:
        """Why a host-mode workload's quota cannot change while it runs: each system reads it from the workload's
        environment at start (the project's SUT changes a running pod's quota only by its annotation)."""
        variables = ", ".join(v for v in (self.memory_quota_var, self.core_quota_var) if v)
        return (f"sut {self.name} takes a workload's quotas from its environment at start ({variables}): a running "
                "workload's quota cannot be changed, so there is no change to time")


def _generation_profile(word: str) -> SutProfile:
    return SutProfile(
        name=word, generation=word, title=f"{word} (project SUT, {word} naming)",
        memory_quota_var=f"{word.upper()}_GPU_MEMORY_LIMIT", core_quota_var=None, needs_preload=True,
        memory_env_of=_xpushare_memory(word),
        proof=f"the workload registers with the {word} scheduler (scheduler.log registration lines, sut_in_path)",
        install=("invoke deploy --sut-src DIR: builds lib" + word + ".so and the scheduler with the SUT's Makefile, "
                 "installs them at sut_lib and scheduler.binary, runs the scheduler (systemd unit or supervised "
                 "process); sut.start/stop/status"),
        debug_env={f"{word.upper()}_DEBUG": "1"},
        # presence-based in the SUT: the variable is left out to disable it (docs/sut/README.md §pitfalls item 2)
        oversub_env={f"{word.upper()}_ENABLE_SINGLE_OVERSUB": "1"},
    )


#: Every system the inventory's ``sut:`` may name.
PROFILES: dict[str, SutProfile] = {
    "nvshare": _generation_profile("nvshare"),
    "xpushare": _generation_profile("xpushare"),
    HAMI_CORE: SutProfile(
        name=HAMI_CORE, generation="xpushare", title="HAMi-core (libvgpu.so preloaded)",
        memory_quota_var="CUDA_DEVICE_MEMORY_LIMIT", core_quota_var="CUDA_DEVICE_SM_LIMIT", needs_preload=True,
        memory_env_of=_hami_memory,
        proof="the workload's own log shows '[HAMI-core Msg(<its pid>:...)]: Initializing.....' (libvgpu.c preInit, "
              "printed at the default LIBCUDA_LOG_LEVEL 2)",
        install=("invoke deploy [--sut-src HAMI_CORE_TREE]: builds libvgpu.so from HAMi-core's upstream source with "
                 "its build.sh (cmake, a C compiler, cuda.h and nvml.h under CUDA_HOME) on each GPU host, installs it "
                 "at sut_lib, creates /tmp/vgpulock and removes the shared region cache (/tmp/cudevshr.cache) so new "
                 "limits take; sut.stop removes the cache again"),
        kubernetes=("HAMi-core in Kubernetes runs under HAMi's own device plugin and scheduler, which this tool does "
                    "not drive; use mode: host"),
        debug_env={"LIBCUDA_LOG_LEVEL": "2"},
        # HAMi's device plugin sets it where the node's deviceMemoryScaling is above 1; libvgpu.c postInit reads
        # exactly "true"
        oversub_env={"CUDA_OVERSUBSCRIBE": "true"},
    ),
    MPS: SutProfile(
        name=MPS, generation="xpushare", title="NVIDIA MPS (control daemon per GPU host)",
        memory_quota_var="CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", core_quota_var="CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
        needs_preload=False, memory_env_of=_mps_memory,
        proof="the MPS server's log (scheduler.log_file = <state_dir>/log/server.log) shows 'New client <the "
              "workload's pid> connected'",
        install=("invoke deploy: starts nvidia-cuda-mps-control -d on each GPU host with CUDA_MPS_PIPE_DIRECTORY="
                 "<state_dir>/pipe and CUDA_MPS_LOG_DIRECTORY=<state_dir>/log; sut.stop / undeploy send it 'quit'"),
        kubernetes=("MPS in Kubernetes is the NVIDIA device plugin's sharing mode, which this tool does not drive; "
                    "use mode: host"),
        # the server holds the GPU's context for its clients and stays between them (NVIDIA's MPS guide, §2.3)
        gpu_processes=("nvidia-cuda-mps-server",),
    ),
}


def mps_dirs(state_dir: str | None) -> tuple[str, str]:
    """The MPS daemon's pipe and log directories under ``state_dir`` (None: :data:`MPS_DEFAULT_ROOT`)."""
    root = (state_dir or MPS_DEFAULT_ROOT).rstrip("/") or MPS_DEFAULT_ROOT
    return f"{root}/pipe", f"{root}/log"


def profile(name: str) -> SutProfile:
    """The profile of ``name`` (an inventory ``sut`` value).

    Raises:
        ValueError: no such system (the message lists the known ones).
    """
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown sut {name!r} (known: {', '.join(PROFILES)})") from None
