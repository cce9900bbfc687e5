/*
 * simgpu: a simulated GPU for the CPU-only test lab.
 *
 * Shared between the stub CUDA driver (simcuda.c -> libcuda.so.1) and the stub NVML
 * (simnvml.c -> libnvidia-ml.so.1). Each library links its own copy of simgpu_state.c with
 * hidden visibility, so the two never see each other's internal symbols.
 *
 * Config: $SIMGPU_CONFIG, else /run/simgpu/devices. One device per line, tab-separated:
 *   uuid <TAB> name <TAB> total_bytes <TAB> flops_per_s <TAB> bytes_per_s
 * '#' comment lines and blank lines are ignored; the device index is the line order.
 *
 * Shared state: one file per device, <config path>.d/<uuid>.state, mmap'd MAP_SHARED and changed
 * only under flock(2) (plus a process-local mutex, since flock does not exclude threads sharing one
 * open file description). A process that dies releases its flock; its bytes stop counting as soon
 * as kill(pid, 0) fails with ESRCH (or /proc shows it a zombie or a different process).
 *
 * Times are CLOCK_MONOTONIC nanoseconds (one clock for every process on the host).
 */
#ifndef SIMGPU_H
#define SIMGPU_H

#include <stddef.h>
#include <stdint.h>

#define SIMGPU_HIDDEN __attribute__((visibility("hidden")))
#define SIMGPU_API __attribute__((visibility("default")))

/* Return from the calling entry point with expr's error code unless it is 0 (CUDA_SUCCESS and
 * NVML_SUCCESS alike). */
#define SIMGPU_TRY(expr)           \
  do {                             \
    int err_ = (expr);             \
    if (err_ != 0) return err_;    \
  } while (0)

#define SIMGPU_DEFAULT_CONFIG "/run/simgpu/devices"
#define SIMGPU_MAX_DEVICES 64
#define SIMGPU_UUID_LEN 96
#define SIMGPU_NAME_LEN 96
#define SIMGPU_DEFAULT_CONTEXT_BYTES (256ULL << 20) /* bytes, per process and device */

/* State file layout (fixed size, little-endian host order). */
#define SIMGPU_STATE_MAGIC 0x3130555047304953ULL /* "SI0GPU01" */
#define SIMGPU_STATE_VERSION 3u
#define SIMGPU_MAX_PROCS 256
#define SIMGPU_MAX_INTERVALS 4096

struct simgpu_proc {
  int32_t pid;        /* 0: free slot */
  int32_t ctx_count;  /* live contexts of this process on the device */
  uint64_t starttime; /* /proc/<pid>/stat field 22 (clock ticks since boot), tells pid reuse */
  uint64_t bytes;     /* allocated bytes (cuMemAlloc_v2 + cuMemAllocManaged) */
  uint64_t ctx_bytes; /* context overhead, counted while ctx_count > 0 */
};

struct simgpu_interval {
  uint64_t start_ns; /* CLOCK_MONOTONIC ns */
  uint64_t end_ns;
};

/* GPU health (docs/faults.md): raised by the fault injector (simcuda.c), reported by NVML and nvidia-smi. */
struct simgpu_health {
  uint64_t ecc_volatile_corrected;
  uint64_t ecc_volatile_uncorrected;
  uint64_t ecc_aggregate_corrected;
  uint64_t ecc_aggregate_uncorrected;
  uint32_t retired_pages_dbe; /* pages retired for double-bit errors */
  uint32_t remap_failure;     /* 1: a row remap failed */
  uint32_t lost;              /* 1: fallen off the bus (Xid 79): cuInit and NVML fail for the device */
  uint32_t reserved1;
};

struct simgpu_state {
  uint64_t magic;
  uint32_t version;
  uint32_t reserved0;
  uint64_t busy_until_ns;  /* end of the last kernel queued on the device's one timeline */
  uint32_t interval_head;  /* ring index of the next interval to write */
  uint32_t interval_count; /* valid intervals in the ring (<= SIMGPU_MAX_INTERVALS) */
  struct simgpu_interval intervals[SIMGPU_MAX_INTERVALS]; /* busy intervals, contiguous ones merged */
  struct simgpu_proc procs[SIMGPU_MAX_PROCS];
  struct simgpu_health health;
};

struct simgpu_device {
  char uuid[SIMGPU_UUID_LEN];
  char name[SIMGPU_NAME_LEN];
  uint64_t total_bytes;
  double flops_per_s; /* FLOP/s */
  double bytes_per_s; /* bytes/s */
  int config_index;   /* line order in the config file */
};

struct simgpu_proc_usage {
  uint32_t pid;
  uint64_t bytes; /* allocations + context overhead */
};

/*
 * Load the config once per process. With for_cuda != 0 the CUDA view is returned
 * (NVIDIA_VISIBLE_DEVICES, then CUDA_VISIBLE_DEVICES on top); else the NVML view
 * (NVIDIA_VISIBLE_DEVICES only). Returns 0, or -1 when the config file cannot be read.
 */
SIMGPU_HIDDEN int simgpu_load(int for_cuda);
SIMGPU_HIDDEN int simgpu_count(void);
SIMGPU_HIDDEN const struct simgpu_device* simgpu_device_at(int visible_index);

SIMGPU_HIDDEN uint64_t simgpu_now_ns(void);
SIMGPU_HIDDEN void simgpu_sleep_until(uint64_t deadline_ns);
SIMGPU_HIDDEN void simgpu_spin_until(uint64_t deadline_ns);
SIMGPU_HIDDEN uint64_t simgpu_context_bytes(void);

/* Shared-state operations; each takes the device's locks. Return -1 when the state is unusable. */
/* Add size bytes to this process on the device; with check != 0 fail (return 1) when the device's
 * used bytes + size would exceed its total. */
SIMGPU_HIDDEN int simgpu_mem_add(int dev, uint64_t size, int check);
SIMGPU_HIDDEN int simgpu_mem_sub(int dev, uint64_t size);
/* Context count of this process on the device += delta (context overhead counted while > 0). */
SIMGPU_HIDDEN int simgpu_ctx_add(int dev, int delta);
/* Used bytes on the device: live processes' allocations + their context overhead. */
SIMGPU_HIDDEN int simgpu_mem_used(int dev, uint64_t* used);
/* Queue a kernel of duration_ns on the device's timeline; *start and *end get its interval. */
SIMGPU_HIDDEN int simgpu_timeline_append(int dev, uint64_t duration_ns, uint64_t* start,
                                         uint64_t* end);
/* Busy share of [now - window_ns, now] in percent (0..100, rounded). */
SIMGPU_HIDDEN int simgpu_utilization(int dev, uint64_t window_ns, unsigned int* percent);
/* Live processes with a context or memory on the device; returns how many exist (may be > max). */
SIMGPU_HIDDEN int simgpu_processes(int dev, struct simgpu_proc_usage* out, int max);

/* ---- fault injection (simcuda.c; README-simgpu.md "Injected faults") ---- */
/* Add delta's counters to the device's health (lost and remap_failure are set when delta's are non-zero). */
SIMGPU_HIDDEN int simgpu_health_raise(int dev, const struct simgpu_health* delta);
/* The device's health now (*out; zeros, and no state file created, when it has none); -1 when unusable. */
SIMGPU_HIDDEN int simgpu_health_read(int dev, struct simgpu_health* out);

#endif /* SIMGPU_H */
