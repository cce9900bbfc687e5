/*
 * simgpu: a stub NVML (libnvidia-ml.so.1) for the CPU-only test lab.
 *
 * Sees the devices of the simgpu config (simgpu.h) filtered by NVIDIA_VISIBLE_DEVICES and
 * renumbered from 0. Memory used = live processes' allocations + their context overhead;
 * utilisation = busy share of the device timeline over the last second (gpu and memory alike);
 * running compute processes = live processes with a context or memory on the device.
 * Health (docs/faults.md): ECC counters, retired pages, row remapping and the lost state come from the
 * device's shared state (struct simgpu_health, raised by the fault injector); a lost device answers
 * NVML_ERROR_GPU_IS_LOST to every call on it, as after Xid 79. Clock throttle reasons: idle or none.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "simgpu.h"

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st* nvmlDevice_t;

enum {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NO_PERMISSION = 4,
  NVML_ERROR_ALREADY_INITIALIZED = 5,
  NVML_ERROR_NOT_FOUND = 6,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_DRIVER_NOT_LOADED = 9,
  NVML_ERROR_TIMEOUT = 10,
  NVML_ERROR_GPU_IS_LOST = 15,
  NVML_ERROR_UNKNOWN = 999
};

#define SIMGPU_NVML_DRIVER_VERSION "550.54.15"
#define SIMGPU_NVML_VERSION "12.550.54.15"
#define SIMGPU_CUDA_VERSION 12040
#define UTIL_WINDOW_NS 1000000000ULL /* utilisation window: 1 s */
#define NO_INSTANCE 0xFFFFFFFFu      /* gpuInstanceId/computeInstanceId outside MIG */
#define DEV_MAGIC 0x4c4d564eu

typedef struct {
  unsigned long long total; /* bytes */
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_t;

typedef struct {
  unsigned int version;
  unsigned long long total; /* bytes */
  unsigned long long reserved;
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_v2_t;

typedef struct {
  unsigned int gpu;    /* percent */
  unsigned int memory; /* percent */
} nvmlUtilization_t;

typedef struct {
  unsigned int pid;
  unsigned long long usedGpuMemory; /* bytes */
} nvmlProcessInfo_v1_t;

typedef struct {
  unsigned int pid;
  unsigned long long usedGpuMemory; /* bytes */
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} nvmlProcessInfo_v2_t;

struct nvmlDevice_st {
  uint32_t magic;
  int index; /* visible index */
};

static pthread_mutex_t g_mutex = PTHREAD_MUTEX_INITIALIZER;
static int g_refs = 0;
static struct nvmlDevice_st g_devs[SIMGPU_MAX_DEVICES];

#define REQUIRE_INIT()                                     \
  do {                                                     \
    if (!initialized()) return NVML_ERROR_UNINITIALIZED;   \
  } while (0)

static int initialized(void) {
  int r;
  pthread_mutex_lock(&g_mutex);
  r = g_refs > 0;
  pthread_mutex_unlock(&g_mutex);
  return r;
}

static int dev_index(nvmlDevice_t d) {
  if (d == NULL || d->magic != DEV_MAGIC || d->index < 0 || d->index >= simgpu_count()) return -1;
  return d->index;
}

/* Whether the device at visible index i has fallen off the bus (its health's lost flag). */
static int dev_lost(int i) {
  struct simgpu_health h;
  return simgpu_health_read(i, &h) == 0 && h.lost != 0;
}

/* The checks of a call on a device handle: initialised, a valid handle (*i: its index), arguments,
 * the device not lost. */
static nvmlReturn_t check_device(nvmlDevice_t device, int args_ok, int* i) {
  REQUIRE_INIT();
  *i = dev_index(device);
  if (*i < 0 || !args_ok) return NVML_ERROR_INVALID_ARGUMENT;
  return dev_lost(*i) ? NVML_ERROR_GPU_IS_LOST : NVML_SUCCESS;
}

static nvmlReturn_t copy_string(char* out, unsigned int length, const char* s) {
  if (out == NULL) return NVML_ERROR_INVALID_ARGUMENT;
  if (strlen(s) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
  memcpy(out, s, strlen(s) + 1);
  return NVML_SUCCESS;
}

static nvmlReturn_t do_init(void) {
  if (simgpu_load(0) != 0) return NVML_ERROR_DRIVER_NOT_LOADED;
  pthread_mutex_lock(&g_mutex);
  for (int i = 0; i < SIMGPU_MAX_DEVICES; i++) {
    g_devs[i].magic = DEV_MAGIC;
    g_devs[i].index = i;
  }
  g_refs++;
  pthread_mutex_unlock(&g_mutex);
  return NVML_SUCCESS;
}

SIMGPU_API nvmlReturn_t nvmlInit_v2(void) { return do_init(); }
SIMGPU_API nvmlReturn_t nvmlInit(void) { return do_init(); }
SIMGPU_API nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
  (void)flags;
  return do_init();
}

SIMGPU_API nvmlReturn_t nvmlShutdown(void) {
  nvmlReturn_t r = NVML_SUCCESS;
  pthread_mutex_lock(&g_mutex);
  if (g_refs == 0)
    r = NVML_ERROR_UNINITIALIZED;
  else
    g_refs--;
  pthread_mutex_unlock(&g_mutex);
  return r;
}

SIMGPU_API const char* nvmlErrorString(nvmlReturn_t result) {
  switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    default: return "Unknown Error";
  }
}

SIMGPU_API nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  REQUIRE_INIT();
  return copy_string(version, length, SIMGPU_NVML_DRIVER_VERSION);
}

SIMGPU_API nvmlReturn_t nvmlSystemGetNVMLVersion(char* version, unsigned int length) {
  return copy_string(version, length, SIMGPU_NVML_VERSION);
}

static nvmlReturn_t cuda_driver_version(int* version) {
  if (version == NULL) return NVML_ERROR_INVALID_ARGUMENT;
  *version = SIMGPU_CUDA_VERSION;
  return NVML_SUCCESS;
}

SIMGPU_API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int* version) {
  return cuda_driver_version(version);
}
SIMGPU_API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* version) {
  return cuda_driver_version(version);
}

static nvmlReturn_t get_count(unsigned int* count) {
  REQUIRE_INIT();
  if (count == NULL) return NVML_ERROR_INVALID_ARGUMENT;
  *count = (unsigned int)simgpu_count();
  return NVML_SUCCESS;
}

SIMGPU_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) { return get_count(count); }
SIMGPU_API nvmlReturn_t nvmlDeviceGetCount(unsigned int* count) { return get_count(count); }

static nvmlReturn_t handle_by_index(unsigned int index, nvmlDevice_t* device) {
  REQUIRE_INIT();
  if (device == NULL || index >= (unsigned int)simgpu_count()) return NVML_ERROR_INVALID_ARGUMENT;
  if (dev_lost((int)index)) return NVML_ERROR_GPU_IS_LOST;
  *device = &g_devs[index];
  return NVML_SUCCESS;
}

SIMGPU_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  return handle_by_index(index, device);
}
SIMGPU_API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t* device) {
  return handle_by_index(index, device);
}

SIMGPU_API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device) {
  REQUIRE_INIT();
  if (uuid == NULL || device == NULL) return NVML_ERROR_INVALID_ARGUMENT;
  for (int i = 0; i < simgpu_count(); i++) {
    if (strcmp(simgpu_device_at(i)->uuid, uuid) == 0) {
      if (dev_lost(i)) return NVML_ERROR_GPU_IS_LOST;
      *device = &g_devs[i];
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

SIMGPU_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length) {
  int i;
  SIMGPU_TRY(check_device(device, 1, &i));
  return copy_string(name, length, simgpu_device_at(i)->name);
}

SIMGPU_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
  int i;
  SIMGPU_TRY(check_device(device, 1, &i));
  return copy_string(uuid, length, simgpu_device_at(i)->uuid);
}

SIMGPU_API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int* index) {
  int i;
  SIMGPU_TRY(check_device(device, index != NULL, &i));
  *index = (unsigned int)i;
  return NVML_SUCCESS;
}

SIMGPU_API nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int* minor) {
  int i;
  SIMGPU_TRY(check_device(device, minor != NULL, &i));
  *minor = (unsigned int)simgpu_device_at(i)->config_index;
  return NVML_SUCCESS;
}

static nvmlReturn_t memory(nvmlDevice_t device, unsigned long long* total,
                           unsigned long long* free_bytes, unsigned long long* used) {
  int i;
  uint64_t u = 0, t;
  SIMGPU_TRY(check_device(device, 1, &i));
  if (simgpu_mem_used(i, &u) != 0) return NVML_ERROR_UNKNOWN;
  t = simgpu_device_at(i)->total_bytes;
  *total = t;
  *used = u;
  *free_bytes = (u >= t) ? 0 : t - u;
  return NVML_SUCCESS;
}

SIMGPU_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* mem) {
  if (mem == NULL) return NVML_ERROR_INVALID_ARGUMENT;
  return memory(device, &mem->total, &mem->free, &mem->used);
}

SIMGPU_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* mem) {
  if (mem == NULL) return NVML_ERROR_INVALID_ARGUMENT;
  mem->reserved = 0;
  return memory(device, &mem->total, &mem->free, &mem->used);
}

SIMGPU_API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device,
                                                      nvmlUtilization_t* util) {
  int i;
  unsigned int pct = 0;
  SIMGPU_TRY(check_device(device, util != NULL, &i));
  if (simgpu_utilization(i, UTIL_WINDOW_NS, &pct) != 0) return NVML_ERROR_UNKNOWN;
  util->gpu = pct;
  util->memory = pct;
  return NVML_SUCCESS;
}

/* Running processes in v1 (16-byte) or v2/v3 (24-byte) records, with NVML's size protocol; no
 * graphics processes exist here. */
static nvmlReturn_t running(nvmlDevice_t device, unsigned int* count, void* infos, int v1,
                            int graphics) {
  struct simgpu_proc_usage procs[SIMGPU_MAX_PROCS];
  int i, n = 0;
  SIMGPU_TRY(check_device(device, count != NULL, &i));
  if (!graphics) {
    n = simgpu_processes(i, procs, SIMGPU_MAX_PROCS);
    if (n < 0) return NVML_ERROR_UNKNOWN;
    if (n > SIMGPU_MAX_PROCS) n = SIMGPU_MAX_PROCS;
  }
  if ((unsigned int)n > *count || (n > 0 && infos == NULL)) {
    *count = (unsigned int)n;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  for (int k = 0; k < n; k++) {
    if (v1) {
      nvmlProcessInfo_v1_t* p = (nvmlProcessInfo_v1_t*)infos + k;
      p->pid = procs[k].pid;
      p->usedGpuMemory = procs[k].bytes;
    } else {
      nvmlProcessInfo_v2_t* p = (nvmlProcessInfo_v2_t*)infos + k;
      p->pid = procs[k].pid;
      p->usedGpuMemory = procs[k].bytes;
      p->gpuInstanceId = NO_INSTANCE;
      p->computeInstanceId = NO_INSTANCE;
    }
  }
  *count = (unsigned int)n;
  return NVML_SUCCESS;
}

/* One exported running-processes entry point: fn takes info_t records (v1: the 16-byte ones). */
#define RUNNING_PROCESSES(fn, info_t, v1, graphics)                                     \
  SIMGPU_API nvmlReturn_t fn(nvmlDevice_t device, unsigned int* count, info_t* infos) { \
    return running(device, count, infos, v1, graphics);                                 \
  }

RUNNING_PROCESSES(nvmlDeviceGetComputeRunningProcesses, nvmlProcessInfo_v1_t, 1, 0)
RUNNING_PROCESSES(nvmlDeviceGetComputeRunningProcesses_v2, nvmlProcessInfo_v2_t, 0, 0)
RUNNING_PROCESSES(nvmlDeviceGetComputeRunningProcesses_v3, nvmlProcessInfo_v2_t, 0, 0)
RUNNING_PROCESSES(nvmlDeviceGetGraphicsRunningProcesses, nvmlProcessInfo_v1_t, 1, 1)
RUNNING_PROCESSES(nvmlDeviceGetGraphicsRunningProcesses_v3, nvmlProcessInfo_v2_t, 0, 1)

/* ---- health (docs/faults.md): PCI identity, ECC, retired pages, row remapping, throttle reasons ---- */

typedef struct {
  char busIdLegacy[16]; /* "0000:01:00.0" */
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[32]; /* "00000000:01:00.0": the id cuDeviceGetPCIBusId and the kernel log's Xid lines use */
} nvmlPciInfo_t;

enum { ECC_CORRECTED = 0, ECC_UNCORRECTED = 1 };       /* nvmlMemoryErrorType_t */
enum { ECC_VOLATILE = 0, ECC_AGGREGATE = 1 };          /* nvmlEccCounterType_t */
enum { RETIRED_MULTIPLE_SBE = 0, RETIRED_DBE = 1 };    /* nvmlPageRetirementCause_t */
#define THROTTLE_GPU_IDLE 0x1ULL                       /* nvmlClocksThrottleReasonGpuIdle */

static nvmlReturn_t health_of(nvmlDevice_t device, int args_ok, struct simgpu_health* h) {
  int i;
  SIMGPU_TRY(check_device(device, args_ok, &i));
  return simgpu_health_read(i, h) == 0 ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}

static nvmlReturn_t pci_info(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  int i;
  unsigned int bus;
  SIMGPU_TRY(check_device(device, pci != NULL, &i));
  bus = (unsigned int)simgpu_device_at(i)->config_index + 1;
  memset(pci, 0, sizeof(*pci));
  pci->bus = bus;
  pci->pciDeviceId = 0x20b210deu;
  snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "0000:%02X:00.0", bus);
  snprintf(pci->busId, sizeof(pci->busId), "00000000:%02X:00.0", bus);
  return NVML_SUCCESS;
}

SIMGPU_API nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  return pci_info(device, pci);
}
SIMGPU_API nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  return pci_info(device, pci);
}
SIMGPU_API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
  return pci_info(device, pci);
}

SIMGPU_API nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, unsigned int* current,
                                             unsigned int* pending) {
  int i;
  SIMGPU_TRY(check_device(device, current != NULL && pending != NULL, &i));
  *current = 1; /* NVML_FEATURE_ENABLED */
  *pending = 1;
  return NVML_SUCCESS;
}

SIMGPU_API nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, int error_type, int counter_type,
                                                    unsigned long long* count) {
  struct simgpu_health h;
  int known = (error_type == ECC_CORRECTED || error_type == ECC_UNCORRECTED) &&
              (counter_type == ECC_VOLATILE || counter_type == ECC_AGGREGATE);
  SIMGPU_TRY(health_of(device, count != NULL && known, &h));
  if (counter_type == ECC_VOLATILE)
    *count = error_type == ECC_CORRECTED ? h.ecc_volatile_corrected : h.ecc_volatile_uncorrected;
  else
    *count = error_type == ECC_CORRECTED ? h.ecc_aggregate_corrected : h.ecc_aggregate_uncorrected;
  return NVML_SUCCESS;
}

/* Retired pages: only double-bit retirements exist here; addresses are made up (page numbers). */
SIMGPU_API nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t device, int cause, unsigned int* page_count,
                                                  unsigned long long* addresses) {
  struct simgpu_health h;
  unsigned int n;
  SIMGPU_TRY(health_of(device, page_count != NULL && (cause == RETIRED_MULTIPLE_SBE || cause == RETIRED_DBE),
                       &h));
  n = cause == RETIRED_DBE ? h.retired_pages_dbe : 0;
  if (*page_count < n || (n > 0 && addresses == NULL)) {
    *page_count = n;
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  for (unsigned int k = 0; k < n; k++) addresses[k] = 0x1000ULL * (k + 1);
  *page_count = n;
  return NVML_SUCCESS;
}

SIMGPU_API nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, unsigned int* pending) {
  struct simgpu_health h;
  SIMGPU_TRY(health_of(device, pending != NULL, &h));
  *pending = 0; /* NVML_FEATURE_DISABLED: a retirement takes effect at once here */
  return NVML_SUCCESS;
}

/* Row remapping: an uncorrectable remapped row per retired page; a failed remap as NVML reports it. */
SIMGPU_API nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int* corr_rows,
                                                  unsigned int* unc_rows, unsigned int* is_pending,
                                                  unsigned int* failure_occurred) {
  struct simgpu_health h;
  SIMGPU_TRY(health_of(device,
                       corr_rows != NULL && unc_rows != NULL && is_pending != NULL && failure_occurred != NULL,
                       &h));
  *corr_rows = 0;
  *unc_rows = h.retired_pages_dbe;
  *is_pending = 0;
  *failure_occurred = h.remap_failure != 0;
  return NVML_SUCCESS;
}

static nvmlReturn_t throttle_reasons(nvmlDevice_t device, unsigned long long* reasons) {
  unsigned int percent = 0;
  int i;
  SIMGPU_TRY(check_device(device, reasons != NULL, &i));
  if (simgpu_utilization(i, UTIL_WINDOW_NS, &percent) != 0) return NVML_ERROR_UNKNOWN;
  *reasons = percent == 0 ? THROTTLE_GPU_IDLE : 0ULL;
  return NVML_SUCCESS;
}

SIMGPU_API nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device,
                                                                  unsigned long long* reasons) {
  return throttle_reasons(device, reasons);
}
SIMGPU_API nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device,
                                                               unsigned long long* reasons) {
  return throttle_reasons(device, reasons);
}
