/*
 * simgpu: a stub CUDA driver (libcuda.so.1) for the CPU-only test lab.
 *
 * Devices come from the simgpu config (simgpu.h). Memory is host memory (anonymous mmap with
 * MAP_NORESERVE); device pointers are host pointers. Kernels do no work: each known kernel has a
 * duration that is queued on the device's one timeline shared by all processes (start =
 * max(now, busy_until)), and synchronising sleeps until the context's latest kernel ends. So
 * processes on one device contend and processes on different devices do not, and no time
 * depends on the CPU's speed or load.
 *
 * Kernels (any module image loads; cuModuleGetFunction knows these names):
 *   simgpu_work(unsigned long long flops, unsigned long long bytes):
 *       duration = max(flops / flops_per_s, bytes / bytes_per_s) seconds
 *   simgpu_sleep(unsigned long long ns): duration = ns nanoseconds
 *   simgpu_spin(unsigned long long ns): as simgpu_sleep, but the thread that synchronises burns
 *       the kernel's interval on the CPU instead of sleeping through it
 *
 * Copies: synchronous cuMemcpy* forms first wait for the current context's queued kernels (as the
 * legacy default stream would), then copy at once; the Async forms copy at once.
 *
 * Exported functions never call each other (the client library interposes several of them);
 * the library is also linked with -Bsymbolic.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>

#include "simgpu.h"

/* ---- CUDA driver API types (ABI-compatible subset of cuda.h) ---- */

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef uint64_t cuuint64_t;
typedef struct CUctx_st* CUcontext;
typedef struct CUstream_st* CUstream;
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;
typedef struct CUevent_st* CUevent;
typedef struct CUuuid_st {
  char bytes[16];
} CUuuid;

enum {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_DEINITIALIZED = 4,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_ECC_UNCORRECTABLE = 214,
  CUDA_ERROR_ILLEGAL_ADDRESS = 700,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_IMAGE = 200,
  CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_CONTEXT_ALREADY_CURRENT = 202,
  CUDA_ERROR_FILE_NOT_FOUND = 301,
  CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_NOT_FOUND = 500,
  CUDA_ERROR_NOT_READY = 600,
  CUDA_ERROR_LAUNCH_FAILED = 719,
  CUDA_ERROR_CONTEXT_IS_DESTROYED = 709,
  CUDA_ERROR_NOT_SUPPORTED = 801,
  CUDA_ERROR_UNKNOWN = 999
};

#define SIMGPU_DRIVER_VERSION 12040
#define CU_STREAM_LEGACY ((CUstream)0x1)
#define CU_STREAM_PER_THREAD ((CUstream)0x2)
#define CU_LAUNCH_PARAM_END ((void*)0x00)
#define CU_LAUNCH_PARAM_BUFFER_POINTER ((void*)0x01)
#define CU_LAUNCH_PARAM_BUFFER_SIZE ((void*)0x02)

#define CTX_MAGIC 0x58544347u    /* live context */
#define DEAD_MAGIC 0x44414544u   /* destroyed object (structs are never freed) */
#define STREAM_MAGIC 0x4d525453u
#define MODULE_MAGIC 0x444f4d53u
#define EVENT_MAGIC 0x544e5645u
#define POOL_MAGIC 0x4c4f4f50u

enum kernel_kind { KERNEL_WORK = 1, KERNEL_SLEEP = 2, KERNEL_SPIN = 3 };

#define MAX_SPIN_INTERVALS 64
#define MAX_CTX_STACK 32

struct CUctx_st {
  uint32_t magic;
  int dev;             /* visible device index */
  int primary;         /* the device's primary context */
  int active;          /* primary: retained at least once and not released to 0 */
  unsigned int flags;
  uint64_t latest_end; /* ns: end of this context's latest kernel */
  int nspin;
  struct simgpu_interval spin[MAX_SPIN_INTERVALS]; /* simgpu_spin intervals not yet burned */
};

struct CUstream_st {
  uint32_t magic;
  struct CUctx_st* ctx;
  uint64_t latest_end;
};

struct CUmod_st {
  uint32_t magic;
};

struct CUfunc_st {
  int kind;
  const char* name;
};

struct CUevent_st {
  uint32_t magic;
  int recorded;
  uint64_t when; /* ns: completion time of the work before it */
};

struct allocation {
  void* ptr;
  size_t size;
  int dev;
  struct CUctx_st* ctx;
  int fd; /* cuMemCreate: the memfd backing the physical allocation (ptr = its host view); else -1 */
  struct allocation* next;
};

static struct CUfunc_st g_kernels[] = {
    {KERNEL_WORK, "simgpu_work"},
    {KERNEL_SLEEP, "simgpu_sleep"},
    {KERNEL_SPIN, "simgpu_spin"},
};

static pthread_mutex_t g_mutex = PTHREAD_MUTEX_INITIALIZER;
static volatile int g_initialized = 0;
static struct CUctx_st g_primary[SIMGPU_MAX_DEVICES];
static int g_primary_refs[SIMGPU_MAX_DEVICES];
static struct allocation* g_allocations = NULL;

static __thread struct CUctx_st* t_stack[MAX_CTX_STACK];
static __thread int t_depth = 0;

/* ---- helpers ---- */

#define REQUIRE_INIT() \
  do {                 \
    if (!g_initialized) return CUDA_ERROR_NOT_INITIALIZED; \
  } while (0)

static int valid_dev(CUdevice dev) { return dev >= 0 && dev < simgpu_count(); }

/* Every handle struct but CUfunc_st starts with its uint32_t magic. */
static int live(const void* handle, uint32_t magic) {
  return handle != NULL && *(const uint32_t*)handle == magic;
}

/* A zeroed handle of size bytes with its magic set; NULL when out of memory. */
static void* new_handle(size_t size, uint32_t magic) {
  uint32_t* h = calloc(1, size);
  if (h != NULL) *h = magic;
  return h;
}

/* Destroy a handle: it stays readable (structs are never freed) and detectably dead. */
static CUresult retire(void* handle, uint32_t magic) {
  REQUIRE_INIT();
  if (!live(handle, magic)) return CUDA_ERROR_INVALID_HANDLE;
  *(uint32_t*)handle = DEAD_MAGIC;
  return CUDA_SUCCESS;
}

static struct CUctx_st* current_ctx(void) { return t_depth > 0 ? t_stack[t_depth - 1] : NULL; }

static int ctx_usable(const struct CUctx_st* c) {
  return c != NULL && c->magic == CTX_MAGIC && (!c->primary || c->active);
}

static struct CUctx_st* usable_current(void) {
  struct CUctx_st* c = current_ctx();
  return ctx_usable(c) ? c : NULL;
}

/* The checks of a call on device dev, in the driver's order: initialised, arguments, ordinal. */
static CUresult check_device(int args_ok, CUdevice dev) {
  REQUIRE_INIT();
  if (!args_ok) return CUDA_ERROR_INVALID_VALUE;
  return valid_dev(dev) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

/* The checks of a call on the current context: initialised, arguments, a usable context (*c). */
static CUresult check_current(int args_ok, struct CUctx_st** c) {
  REQUIRE_INIT();
  if (!args_ok) return CUDA_ERROR_INVALID_VALUE;
  *c = usable_current();
  return *c != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

static uint64_t max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }

/* Wait until target (ns): burn this context's pending spin intervals before it, sleep the rest. */
static void wait_for(struct CUctx_st* c, uint64_t target) {
  struct simgpu_interval todo[MAX_SPIN_INTERVALS];
  int n = 0;

  pthread_mutex_lock(&g_mutex);
  if (c != NULL) {
    int keep = 0;
    for (int i = 0; i < c->nspin; i++) {
      if (c->spin[i].start_ns < target)
        todo[n++] = c->spin[i];
      else
        c->spin[keep++] = c->spin[i];
    }
    c->nspin = keep;
  }
  pthread_mutex_unlock(&g_mutex);
  for (int i = 0; i < n; i++) {
    uint64_t end = todo[i].end_ns < target ? todo[i].end_ns : target;
    if (simgpu_now_ns() >= end) continue;
    simgpu_sleep_until(todo[i].start_ns);
    simgpu_spin_until(end);
  }
  if (simgpu_now_ns() < target) simgpu_sleep_until(target);
}

static uint64_t ctx_latest(struct CUctx_st* c) {
  uint64_t t;
  pthread_mutex_lock(&g_mutex);
  t = c->latest_end;
  pthread_mutex_unlock(&g_mutex);
  return t;
}

/* Free every allocation of context c (the context is going away). */
static void free_ctx_allocations(struct CUctx_st* c) {
  struct allocation** pp;
  pthread_mutex_lock(&g_mutex);
  pp = &g_allocations;
  while (*pp != NULL) {
    struct allocation* a = *pp;
    if (a->ctx == c) {
      *pp = a->next;
      munmap(a->ptr, a->size);
      if (a->fd >= 0) close(a->fd);
      simgpu_mem_sub(a->dev, a->size);
      free(a);
    } else {
      pp = &a->next;
    }
  }
  pthread_mutex_unlock(&g_mutex);
}

static void ctx_teardown(struct CUctx_st* c) {
  free_ctx_allocations(c);
  simgpu_ctx_add(c->dev, -1);
  pthread_mutex_lock(&g_mutex);
  c->nspin = 0;
  pthread_mutex_unlock(&g_mutex);
}

static void forget_in_stack(struct CUctx_st* c) {
  int keep = 0;
  for (int i = 0; i < t_depth; i++)
    if (t_stack[i] != c) t_stack[keep++] = t_stack[i];
  t_depth = keep;
}

/* Where work on stream s goes: its context (NULL stream, legacy and per-thread handles: the current
 * context) and, for a created stream, the stream itself (*real; else NULL). */
static CUresult stream_target(CUstream s, struct CUctx_st** ctx, struct CUstream_st** real) {
  *real = NULL;
  *ctx = NULL;
  if (s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) {
    *ctx = usable_current();
  } else {
    if (!live(s, STREAM_MAGIC)) return CUDA_ERROR_INVALID_HANDLE;
    *real = s;
    if (ctx_usable(s->ctx)) *ctx = s->ctx;
  }
  return *ctx != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

/* ---- fault injection: SIMGPU_FAULT (README-simgpu.md "Injected faults", docs/faults.md) ----
 *
 * SIMGPU_FAULT=<kind>:after_calls=N|after_s=S[:gpu=UUID|index], for the process that has it. Counted calls
 * are the calls that reach a device: kernel launches (every entry point of launch()), cuCtxSynchronize,
 * cuStreamSynchronize, cuEventSynchronize and the synchronous cuMemcpy* forms. With after_calls=N the first N
 * counted calls on the GPU succeed and the next one fails; with after_s=S the first counted call S seconds or more after cuInit fails. gpu= names the
 * device by UUID or config index (default: whichever the first counted call is on).
 * Kinds: illegal-address (700, Xid 31), ecc-uncorrectable (214, Xid 48, ECC counters and a retired page),
 * launch-failure (719, Xid 13): sticky, every later launch, synchronisation, copy and allocation of this
 * process on that GPU returns the same error; device-lost (999, Xid 79): the device's shared health says lost,
 * so every later call on it by any process fails with 999 and cuInit fails for a process that sees it.
 * Each fault appends one `NVRM: Xid` line, dmesg --time-format=iso style, to $SIMGPU_KMSG (when set). */

enum fault_kind { FAULT_NONE = 0, FAULT_ILLEGAL_ADDRESS, FAULT_ECC, FAULT_LAUNCH, FAULT_LOST };

struct fault_plan {
  int kind;
  int by_calls;         /* 1: after_calls, 0: after_s */
  unsigned long long calls;
  double seconds;
  int gpu_config_index; /* -1: any */
};

static pthread_once_t g_fault_once = PTHREAD_ONCE_INIT;
static struct fault_plan g_fault = {FAULT_NONE, 0, 0, 0.0, -1};
static unsigned long long g_fault_count = 0;
static int g_fault_fired = 0;
static uint64_t g_fault_t0 = 0;                   /* ns: cuInit */
static int g_fault_sticky[SIMGPU_MAX_DEVICES];    /* by visible index: the sticky error, 0 none */

static void fault_warn(const char* what, const char* value) {
  fprintf(stderr, "[SIMGPU] SIMGPU_FAULT: %s '%s': no fault injected\n", what, value);
}

static int fault_config_index(const char* v) {
  char* end = NULL;
  long n = strtol(v, &end, 10);
  if (end != v && *end == '\0' && n >= 0) return (int)n;
  for (int i = 0; i < simgpu_count(); i++)
    if (strcmp(simgpu_device_at(i)->uuid, v) == 0) return simgpu_device_at(i)->config_index;
  return -2;
}

static void fault_parse(void) {
  const char* env = getenv("SIMGPU_FAULT");
  char buf[512];
  char* save = NULL;
  char* tok;
  struct fault_plan p = {FAULT_NONE, 0, 0, 0.0, -1};
  int have_when = 0;
  if (env == NULL || env[0] == '\0') return;
  snprintf(buf, sizeof(buf), "%s", env);
  tok = strtok_r(buf, ":", &save);
  if (tok == NULL) return;
  if (strcmp(tok, "illegal-address") == 0) p.kind = FAULT_ILLEGAL_ADDRESS;
  else if (strcmp(tok, "ecc-uncorrectable") == 0) p.kind = FAULT_ECC;
  else if (strcmp(tok, "launch-failure") == 0) p.kind = FAULT_LAUNCH;
  else if (strcmp(tok, "device-lost") == 0) p.kind = FAULT_LOST;
  else return fault_warn("unknown kind", tok);
  while ((tok = strtok_r(NULL, ":", &save)) != NULL) {
    char* eq = strchr(tok, '=');
    char* end = NULL;
    if (eq == NULL) return fault_warn("expected key=value, got", tok);
    *eq++ = '\0';
    if (strcmp(tok, "after_calls") == 0) {
      p.calls = strtoull(eq, &end, 10);
      if (end == eq || *end != '\0') return fault_warn("bad after_calls", eq);
      p.by_calls = 1;
      have_when = 1;
    } else if (strcmp(tok, "after_s") == 0) {
      p.seconds = strtod(eq, &end);
      if (end == eq || *end != '\0' || !(p.seconds >= 0)) return fault_warn("bad after_s", eq);
      p.by_calls = 0;
      have_when = 1;
    } else if (strcmp(tok, "gpu") == 0) {
      p.gpu_config_index = fault_config_index(eq);
      if (p.gpu_config_index == -2) return fault_warn("no such gpu", eq);
    } else {
      return fault_warn("unknown key", tok);
    }
  }
  if (!have_when) return fault_warn("needs after_calls=N or after_s=S", env);
  g_fault = p;
}

/* One dmesg-style kernel log line for an Xid on device dev, appended to $SIMGPU_KMSG. */
static void fault_kmsg(int dev, int xid, const char* text) {
  const char* path = getenv("SIMGPU_KMSG");
  char line[1024], when[64], comm[64] = "?";
  struct timespec ts;
  struct tm tm;
  int fd, n;
  FILE* f;
  if (path == NULL || path[0] == '\0') return;
  clock_gettime(CLOCK_REALTIME, &ts);
  gmtime_r(&ts.tv_sec, &tm);
  strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
  f = fopen("/proc/self/comm", "r");
  if (f != NULL) {
    if (fgets(comm, sizeof(comm), f) != NULL) comm[strcspn(comm, "\n")] = '\0';
    fclose(f);
  }
  n = snprintf(line, sizeof(line), "%s,%06ld+00:00 NVRM: Xid (PCI:0000:%02x:00): %d, pid=%d, name=%s, %s\n",
               when, ts.tv_nsec / 1000, simgpu_device_at(dev)->config_index + 1, xid, (int)getpid(), comm,
               text);
  fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) return;
  if (write(fd, line, (size_t)n) < 0) { /* best effort, as the kernel's ring buffer */
  }
  close(fd);
}

static int fault_fire(int dev) {
  struct simgpu_health delta;
  memset(&delta, 0, sizeof(delta));
  switch (g_fault.kind) {
    case FAULT_ILLEGAL_ADDRESS:
      fault_kmsg(dev, 31, "Ch 00000008, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ "
                          "0x7f00_00000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ");
      return CUDA_ERROR_ILLEGAL_ADDRESS;
    case FAULT_ECC:
      delta.ecc_volatile_uncorrected = 1;
      delta.ecc_aggregate_uncorrected = 1;
      delta.retired_pages_dbe = 1;
      simgpu_health_raise(dev, &delta);
      fault_kmsg(dev, 48, "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer "
                          "at partition 0, subpartition 0.");
      return CUDA_ERROR_ECC_UNCORRECTABLE;
    case FAULT_LAUNCH:
      fault_kmsg(dev, 13, "Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address");
      return CUDA_ERROR_LAUNCH_FAILED;
    default:
      delta.lost = 1;
      simgpu_health_raise(dev, &delta);
      fault_kmsg(dev, 79, "GPU has fallen off the bus.");
      return CUDA_ERROR_UNKNOWN;
  }
}

static int fault_device_lost(int dev) {
  struct simgpu_health h;
  return simgpu_health_read(dev, &h) == 0 && h.lost;
}

/* The error a call on device dev returns instead of running (0: run it). counted: a counted call. */
static CUresult fault_gate(int dev, int counted) {
  int fire = 0;
  CUresult err;
  if (dev < 0 || dev >= SIMGPU_MAX_DEVICES) return CUDA_SUCCESS;
  pthread_once(&g_fault_once, fault_parse);
  if (fault_device_lost(dev)) return CUDA_ERROR_UNKNOWN;
  pthread_mutex_lock(&g_mutex);
  err = g_fault_sticky[dev];
  if (err == 0 && counted && g_fault.kind != FAULT_NONE && !g_fault_fired &&
      (g_fault.gpu_config_index < 0 || g_fault.gpu_config_index == simgpu_device_at(dev)->config_index)) {
    if (g_fault.by_calls)
      fire = ++g_fault_count > g_fault.calls;
    else
      fire = simgpu_now_ns() - g_fault_t0 >= (uint64_t)(g_fault.seconds * 1e9);
    if (fire) g_fault_fired = 1;
  }
  pthread_mutex_unlock(&g_mutex);
  if (!fire) return err;
  err = fault_fire(dev);
  if (g_fault.kind != FAULT_LOST) {
    pthread_mutex_lock(&g_mutex);
    g_fault_sticky[dev] = err;
    pthread_mutex_unlock(&g_mutex);
  }
  return err;
}

/* cuInit: start the after_s clock; fail when a visible device is lost. */
static CUresult fault_init(void) {
  pthread_once(&g_fault_once, fault_parse);
  pthread_mutex_lock(&g_mutex);
  if (g_fault_t0 == 0) g_fault_t0 = simgpu_now_ns();
  pthread_mutex_unlock(&g_mutex);
  for (int i = 0; i < simgpu_count(); i++)
    if (fault_device_lost(i)) return CUDA_ERROR_UNKNOWN;
  return CUDA_SUCCESS;
}

/* The fault gate of a call on the current context (no context: nothing to fail). */
static CUresult fault_gate_current(int counted) {
  struct CUctx_st* c = usable_current();
  return c != NULL ? fault_gate(c->dev, counted) : CUDA_SUCCESS;
}

#define FAULT_TRY(expr) SIMGPU_TRY(expr)

static CUresult do_alloc(CUdeviceptr* dptr, size_t bytesize, int check_total) {
  struct CUctx_st* c;
  struct allocation* a;
  void* p;
  int rc;

  SIMGPU_TRY(check_current(dptr != NULL && bytesize != 0, &c));
  FAULT_TRY(fault_gate(c->dev, 0));
  rc = simgpu_mem_add(c->dev, bytesize, check_total);
  if (rc == 1) return CUDA_ERROR_OUT_OF_MEMORY;
  if (rc != 0) return CUDA_ERROR_UNKNOWN;
  p = mmap(NULL, bytesize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
           -1, 0);
  a = (p == MAP_FAILED) ? NULL : malloc(sizeof(*a));
  if (a == NULL) {
    if (p != MAP_FAILED) munmap(p, bytesize);
    simgpu_mem_sub(c->dev, bytesize);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  a->ptr = p;
  a->size = bytesize;
  a->dev = c->dev;
  a->ctx = c;
  a->fd = -1;
  pthread_mutex_lock(&g_mutex);
  a->next = g_allocations;
  g_allocations = a;
  pthread_mutex_unlock(&g_mutex);
  *dptr = (CUdeviceptr)(uintptr_t)p;
  return CUDA_SUCCESS;
}

/* Synchronous copies and sets run after the current context's queued kernels (legacy stream). */
static void sync_current_for_copy(void) {
  struct CUctx_st* c = usable_current();
  if (c != NULL) wait_for(c, ctx_latest(c));
}

static CUresult do_copy(void* dst, const void* src, size_t n, int sync) {
  REQUIRE_INIT();
  if (n == 0) return CUDA_SUCCESS;
  if (dst == NULL || src == NULL) return CUDA_ERROR_INVALID_VALUE;
  FAULT_TRY(fault_gate_current(sync));
  if (sync) sync_current_for_copy();
  memmove(dst, src, n);
  return CUDA_SUCCESS;
}

static void uuid_bytes(const char* uuid, unsigned char out[16]) {
  /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx": its 32 hex digits; else a hash of the string */
  const char* s = (strncmp(uuid, "GPU-", 4) == 0) ? uuid + 4 : uuid;
  int nibbles = 0;
  int ok = 1;
  memset(out, 0, 16);
  for (const char* p = s; *p != '\0' && ok; p++) {
    int v;
    if (*p == '-') continue;
    if (*p >= '0' && *p <= '9')
      v = *p - '0';
    else if (*p >= 'a' && *p <= 'f')
      v = *p - 'a' + 10;
    else if (*p >= 'A' && *p <= 'F')
      v = *p - 'A' + 10;
    else {
      ok = 0;
      break;
    }
    if (nibbles >= 32) {
      ok = 0;
      break;
    }
    out[nibbles / 2] |= (unsigned char)(v << ((nibbles % 2) ? 0 : 4));
    nibbles++;
  }
  if (ok && nibbles == 32) return;
  {
    uint64_t h1 = 1469598103934665603ULL, h2 = 1099511628211ULL ^ 0x9e3779b97f4a7c15ULL;
    for (const char* p = uuid; *p != '\0'; p++) {
      h1 = (h1 ^ (unsigned char)*p) * 1099511628211ULL;
      h2 = (h2 ^ (unsigned char)*p) * 0x100000001b3ULL + 0x7f4a7c15ULL;
    }
    for (int i = 0; i < 8; i++) {
      out[i] = (unsigned char)(h1 >> (8 * i));
      out[8 + i] = (unsigned char)(h2 >> (8 * i));
    }
  }
}


/* ---- exported API ---- */

SIMGPU_API int simgpuVersion(void) { return 1; }

SIMGPU_API CUresult cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (simgpu_load(1) != 0 || simgpu_count() == 0) return CUDA_ERROR_NO_DEVICE;
  FAULT_TRY(fault_init());
  g_initialized = 1;
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuDriverGetVersion(int* version) {
  if (version == NULL) return CUDA_ERROR_INVALID_VALUE;
  *version = SIMGPU_DRIVER_VERSION;
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuDeviceGetCount(int* count) {
  REQUIRE_INIT();
  if (count == NULL) return CUDA_ERROR_INVALID_VALUE;
  *count = simgpu_count();
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  SIMGPU_TRY(check_device(device != NULL, ordinal));
  *device = ordinal;
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  SIMGPU_TRY(check_device(name != NULL && len > 0, dev));
  snprintf(name, (size_t)len, "%s", simgpu_device_at(dev)->name);
  return CUDA_SUCCESS;
}

static CUresult device_uuid(CUuuid* uuid, CUdevice dev) {
  SIMGPU_TRY(check_device(uuid != NULL, dev));
  uuid_bytes(simgpu_device_at(dev)->uuid, (unsigned char*)uuid->bytes);
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) { return device_uuid(uuid, dev); }
SIMGPU_API CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) { return device_uuid(uuid, dev); }

SIMGPU_API CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  SIMGPU_TRY(check_device(bytes != NULL, dev));
  *bytes = (size_t)simgpu_device_at(dev)->total_bytes;
  return CUDA_SUCCESS;
}

static int attribute_value(int attrib) {
  switch (attrib) {
    case 1: return 1024;        /* MAX_THREADS_PER_BLOCK */
    case 2: return 1024;        /* MAX_BLOCK_DIM_X */
    case 3: return 1024;        /* MAX_BLOCK_DIM_Y */
    case 4: return 64;          /* MAX_BLOCK_DIM_Z */
    case 5: return 2147483647;  /* MAX_GRID_DIM_X */
    case 6: return 65535;       /* MAX_GRID_DIM_Y */
    case 7: return 65535;       /* MAX_GRID_DIM_Z */
    case 8: return 49152;       /* MAX_SHARED_MEMORY_PER_BLOCK */
    case 10: return 32;         /* WARP_SIZE */
    case 16: return 108;        /* MULTIPROCESSOR_COUNT */
    case 41: return 1;          /* UNIFIED_ADDRESSING */
    case 75: return 8;          /* COMPUTE_CAPABILITY_MAJOR */
    case 76: return 0;          /* COMPUTE_CAPABILITY_MINOR */
    case 83: return 1;          /* MANAGED_MEMORY */
    case 89: return 1;          /* CONCURRENT_MANAGED_ACCESS */
    default: return 0;
  }
}

SIMGPU_API CUresult cuDeviceGetAttribute(int* pi, int attrib, CUdevice dev) {
  SIMGPU_TRY(check_device(pi != NULL && attrib > 0, dev));
  *pi = attribute_value(attrib);
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuDeviceComputeCapability(int* major, int* minor, CUdevice dev) {
  SIMGPU_TRY(check_device(major != NULL && minor != NULL, dev));
  *major = 8;
  *minor = 0;
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuDeviceGetPCIBusId(char* busid, int len, CUdevice dev) {
  SIMGPU_TRY(check_device(busid != NULL && len > 0, dev));
  snprintf(busid, (size_t)len, "00000000:%02X:00.0", simgpu_device_at(dev)->config_index + 1);
  return CUDA_SUCCESS;
}

/* -- contexts -- */

static CUresult primary_retain(CUcontext* pctx, CUdevice dev) {
  struct CUctx_st* c;
  int first;
  SIMGPU_TRY(check_device(pctx != NULL, dev));
  FAULT_TRY(fault_gate(dev, 0));
  c = &g_primary[dev];
  pthread_mutex_lock(&g_mutex);
  c->magic = CTX_MAGIC;
  c->dev = dev;
  c->primary = 1;
  first = (g_primary_refs[dev]++ == 0);
  c->active = 1;
  pthread_mutex_unlock(&g_mutex);
  if (first && simgpu_ctx_add(dev, +1) != 0) {
    pthread_mutex_lock(&g_mutex);
    if (--g_primary_refs[dev] == 0) c->active = 0;
    pthread_mutex_unlock(&g_mutex);
    return CUDA_ERROR_UNKNOWN;
  }
  *pctx = c;
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  return primary_retain(pctx, dev);
}

static CUresult primary_release(CUdevice dev, int reset) {
  int last = 0;
  SIMGPU_TRY(check_device(1, dev));
  pthread_mutex_lock(&g_mutex);
  if (g_primary_refs[dev] <= 0) {
    pthread_mutex_unlock(&g_mutex);
    return reset ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
  }
  g_primary_refs[dev] = reset ? 0 : g_primary_refs[dev] - 1;
  if (g_primary_refs[dev] == 0) {
    g_primary[dev].active = 0;
    last = 1;
  }
  pthread_mutex_unlock(&g_mutex);
  if (last) ctx_teardown(&g_primary[dev]);
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { return primary_release(dev, 0); }
SIMGPU_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) { return primary_release(dev, 0); }
SIMGPU_API CUresult cuDevicePrimaryCtxReset(CUdevice dev) { return primary_release(dev, 1); }
SIMGPU_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) { return primary_release(dev, 1); }

SIMGPU_API CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  SIMGPU_TRY(check_device(flags != NULL && active != NULL, dev));
  pthread_mutex_lock(&g_mutex);
  *flags = g_primary[dev].flags;
  *active = g_primary_refs[dev] > 0;
  pthread_mutex_unlock(&g_mutex);
  return CUDA_SUCCESS;
}

static CUresult primary_set_flags(CUdevice dev, unsigned int flags) {
  SIMGPU_TRY(check_device(1, dev));
  pthread_mutex_lock(&g_mutex);
  g_primary[dev].flags = flags;
  pthread_mutex_unlock(&g_mutex);
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags) {
  return primary_set_flags(dev, flags);
}
SIMGPU_API CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
  return primary_set_flags(dev, flags);
}

SIMGPU_API CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  struct CUctx_st* c;
  SIMGPU_TRY(check_device(pctx != NULL, dev));
  if (t_depth >= MAX_CTX_STACK) return CUDA_ERROR_UNKNOWN;
  FAULT_TRY(fault_gate(dev, 0));
  c = calloc(1, sizeof(*c)); /* never freed: stale handles stay readable and detectably dead */
  if (c == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  if (simgpu_ctx_add(dev, +1) != 0) {
    free(c);
    return CUDA_ERROR_UNKNOWN;
  }
  c->magic = CTX_MAGIC;
  c->dev = dev;
  c->flags = flags;
  t_stack[t_depth++] = c;
  *pctx = c;
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuCtxDestroy_v2(CUcontext ctx) {
  REQUIRE_INIT();
  if (!live(ctx, CTX_MAGIC) || ctx->primary) return CUDA_ERROR_INVALID_CONTEXT;
  ctx_teardown(ctx);
  ctx->magic = DEAD_MAGIC;
  forget_in_stack(ctx);
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuCtxSetCurrent(CUcontext ctx) {
  REQUIRE_INIT();
  if (ctx == NULL) {
    if (t_depth > 0) t_depth--;
    return CUDA_SUCCESS;
  }
  if (ctx->magic != CTX_MAGIC) return CUDA_ERROR_INVALID_CONTEXT;
  if (t_depth == 0) t_depth = 1;
  t_stack[t_depth - 1] = ctx;
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuCtxGetCurrent(CUcontext* pctx) {
  REQUIRE_INIT();
  if (pctx == NULL) return CUDA_ERROR_INVALID_VALUE;
  *pctx = current_ctx();
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  REQUIRE_INIT();
  if (!live(ctx, CTX_MAGIC)) return CUDA_ERROR_INVALID_CONTEXT;
  if (t_depth >= MAX_CTX_STACK) return CUDA_ERROR_UNKNOWN;
  t_stack[t_depth++] = ctx;
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuCtxPopCurrent_v2(CUcontext* pctx) {
  REQUIRE_INIT();
  if (t_depth == 0) return CUDA_ERROR_INVALID_CONTEXT;
  t_depth--;
  if (pctx != NULL) *pctx = t_stack[t_depth];
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuCtxGetDevice(CUdevice* device) {
  struct CUctx_st* c;
  SIMGPU_TRY(check_current(device != NULL, &c));
  *device = c->dev;
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuCtxSynchronize(void) {
  struct CUctx_st* c;
  SIMGPU_TRY(check_current(1, &c));
  FAULT_TRY(fault_gate(c->dev, 1));
  wait_for(c, ctx_latest(c));
  return CUDA_SUCCESS;
}

/* -- streams and events -- */

static CUresult stream_create(CUstream* ph) {
  struct CUctx_st* c;
  struct CUstream_st* s;
  SIMGPU_TRY(check_current(ph != NULL, &c));
  s = new_handle(sizeof(*s), STREAM_MAGIC);
  if (s == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  s->ctx = c;
  *ph = s;
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuStreamCreate(CUstream* ph, unsigned int flags) {
  (void)flags;
  return stream_create(ph);
}

SIMGPU_API CUresult cuStreamCreateWithPriority(CUstream* ph, unsigned int flags, int priority) {
  (void)flags;
  (void)priority;
  return stream_create(ph);
}

SIMGPU_API CUresult cuStreamDestroy(CUstream s) { return retire(s, STREAM_MAGIC); }
SIMGPU_API CUresult cuStreamDestroy_v2(CUstream s) { return retire(s, STREAM_MAGIC); }

/* Completion time (ns, *t) of the work queued so far on stream s, and the stream's context (*c). */
static CUresult stream_done_at(CUstream s, struct CUctx_st** c, uint64_t* t) {
  struct CUstream_st* real;
  SIMGPU_TRY(stream_target(s, c, &real));
  pthread_mutex_lock(&g_mutex);
  *t = (real != NULL) ? real->latest_end : (*c)->latest_end;
  pthread_mutex_unlock(&g_mutex);
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuStreamSynchronize(CUstream s) {
  struct CUctx_st* c;
  uint64_t t;
  REQUIRE_INIT();
  SIMGPU_TRY(stream_done_at(s, &c, &t));
  FAULT_TRY(fault_gate(c->dev, 1));
  wait_for(c, t);
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuStreamQuery(CUstream s) {
  struct CUctx_st* c;
  uint64_t t;
  REQUIRE_INIT();
  SIMGPU_TRY(stream_done_at(s, &c, &t));
  return simgpu_now_ns() >= t ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

SIMGPU_API CUresult cuStreamWaitEvent(CUstream s, CUevent ev, unsigned int flags) {
  (void)s;
  (void)flags;
  REQUIRE_INIT();
  if (!live(ev, EVENT_MAGIC)) return CUDA_ERROR_INVALID_HANDLE;
  return CUDA_SUCCESS; /* one timeline per device: work is already ordered */
}

SIMGPU_API CUresult cuEventCreate(CUevent* ph, unsigned int flags) {
  struct CUctx_st* c;
  struct CUevent_st* e;
  (void)flags;
  SIMGPU_TRY(check_current(ph != NULL, &c));
  e = new_handle(sizeof(*e), EVENT_MAGIC);
  if (e == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  *ph = e;
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuEventDestroy(CUevent e) { return retire(e, EVENT_MAGIC); }
SIMGPU_API CUresult cuEventDestroy_v2(CUevent e) { return retire(e, EVENT_MAGIC); }

SIMGPU_API CUresult cuEventRecord(CUevent e, CUstream s) {
  struct CUctx_st* c;
  uint64_t t;
  REQUIRE_INIT();
  if (!live(e, EVENT_MAGIC)) return CUDA_ERROR_INVALID_HANDLE;
  SIMGPU_TRY(stream_done_at(s, &c, &t));
  e->when = max_u64(t, simgpu_now_ns());
  e->recorded = 1;
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuEventQuery(CUevent e) {
  REQUIRE_INIT();
  if (!live(e, EVENT_MAGIC)) return CUDA_ERROR_INVALID_HANDLE;
  return (!e->recorded || simgpu_now_ns() >= e->when) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

SIMGPU_API CUresult cuEventSynchronize(CUevent e) {
  REQUIRE_INIT();
  if (!live(e, EVENT_MAGIC)) return CUDA_ERROR_INVALID_HANDLE;
  FAULT_TRY(fault_gate_current(1));
  if (e->recorded) wait_for(usable_current(), e->when);
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuEventElapsedTime(float* ms, CUevent start, CUevent end) {
  REQUIRE_INIT();
  if (ms == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (!live(start, EVENT_MAGIC) || !live(end, EVENT_MAGIC) || !start->recorded || !end->recorded)
    return CUDA_ERROR_INVALID_HANDLE;
  if (simgpu_now_ns() < end->when || simgpu_now_ns() < start->when) return CUDA_ERROR_NOT_READY;
  *ms = (float)(((double)end->when - (double)start->when) / 1e6);
  return CUDA_SUCCESS;
}

/* -- modules and kernels -- */

static CUresult module_new(CUmodule* mod) {
  struct CUctx_st* c;
  struct CUmod_st* m;
  SIMGPU_TRY(check_current(mod != NULL, &c));
  m = new_handle(sizeof(*m), MODULE_MAGIC);
  if (m == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  *mod = m;
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuModuleLoad(CUmodule* mod, const char* fname) {
  (void)fname;
  return module_new(mod);
}

SIMGPU_API CUresult cuModuleLoadData(CUmodule* mod, const void* image) {
  (void)image;
  return module_new(mod);
}

SIMGPU_API CUresult cuModuleLoadDataEx(CUmodule* mod, const void* image, unsigned int n,
                                       int* options, void** values) {
  (void)image;
  (void)n;
  (void)options;
  (void)values;
  return module_new(mod);
}

SIMGPU_API CUresult cuModuleLoadFatBinary(CUmodule* mod, const void* fatbin) {
  (void)fatbin;
  return module_new(mod);
}

SIMGPU_API CUresult cuModuleUnload(CUmodule mod) { return retire(mod, MODULE_MAGIC); }

SIMGPU_API CUresult cuModuleGetFunction(CUfunction* hfunc, CUmodule mod, const char* name) {
  REQUIRE_INIT();
  if (hfunc == NULL || name == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (!live(mod, MODULE_MAGIC)) return CUDA_ERROR_INVALID_HANDLE;
  for (size_t i = 0; i < sizeof(g_kernels) / sizeof(g_kernels[0]); i++) {
    if (strcmp(g_kernels[i].name, name) == 0) {
      *hfunc = &g_kernels[i];
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_NOT_FOUND;
}

static int known_kernel(CUfunction f) {
  for (size_t i = 0; i < sizeof(g_kernels) / sizeof(g_kernels[0]); i++)
    if (f == &g_kernels[i]) return 1;
  return 0;
}

/* The i-th 64-bit argument, from kernelParams or from an `extra` parameter buffer. */
static int kernel_arg(void** params, void** extra, int i, unsigned long long* out) {
  if (params != NULL) {
    if (params[i] == NULL) return -1;
    memcpy(out, params[i], sizeof(*out));
    return 0;
  }
  if (extra != NULL) {
    const char* buf = NULL;
    size_t size = 0;
    for (int k = 0; extra[k] != CU_LAUNCH_PARAM_END; k += 2) {
      if (extra[k] == CU_LAUNCH_PARAM_BUFFER_POINTER) buf = (const char*)extra[k + 1];
      if (extra[k] == CU_LAUNCH_PARAM_BUFFER_SIZE && extra[k + 1] != NULL)
        size = *(const size_t*)extra[k + 1];
    }
    if (buf == NULL || size < (size_t)(i + 1) * sizeof(*out)) return -1;
    memcpy(out, buf + (size_t)i * sizeof(*out), sizeof(*out));
    return 0;
  }
  return -1;
}

static uint64_t seconds_to_ns(double seconds) {
  if (!(seconds > 0)) return 0;
  if (seconds > 1e9) seconds = 1e9; /* ~31 years: keeps the timeline arithmetic in range */
  return (uint64_t)(seconds * 1e9 + 0.5);
}

struct CUgraph_st;
struct graph_node;
static struct CUgraph_st* capturing(CUstream s);
static CUresult graph_add(struct CUgraph_st* g, CUfunction f, void** params, void** extra,
                          struct graph_node** out);

/* Queue one kernel of f with its arguments onto stream hStream's device timeline, or into the graph
 * the stream is capturing (every launch entry point and cuGraphLaunch end here; exported functions
 * never call each other). */
static CUresult launch(CUfunction f, CUstream hStream, void** kernelParams, void** extra) {
  struct CUstream_st* stream = NULL;
  struct CUctx_st* c;
  const struct simgpu_device* d;
  struct CUgraph_st* graph;
  unsigned long long a0 = 0, a1 = 0;
  uint64_t duration, start, end;

  REQUIRE_INIT();
  if (f == NULL || !known_kernel(f)) return CUDA_ERROR_INVALID_HANDLE;
  graph = capturing(hStream);
  if (graph != NULL) return graph_add(graph, f, kernelParams, extra, NULL);
  SIMGPU_TRY(stream_target(hStream, &c, &stream));
  FAULT_TRY(fault_gate(c->dev, 1));
  d = simgpu_device_at(c->dev);
  if (kernel_arg(kernelParams, extra, 0, &a0) != 0) return CUDA_ERROR_INVALID_VALUE;
  if (f->kind == KERNEL_WORK) {
    double t_flops, t_bytes;
    if (kernel_arg(kernelParams, extra, 1, &a1) != 0) return CUDA_ERROR_INVALID_VALUE;
    t_flops = d->flops_per_s > 0 ? (double)a0 / d->flops_per_s : 0.0;
    t_bytes = d->bytes_per_s > 0 ? (double)a1 / d->bytes_per_s : 0.0;
    duration = seconds_to_ns(t_flops > t_bytes ? t_flops : t_bytes);
  } else {
    duration = a0 > 1000000000000000000ULL ? 1000000000000000000ULL : a0; /* <= ~31 years */
  }
  if (simgpu_timeline_append(c->dev, duration, &start, &end) != 0) return CUDA_ERROR_LAUNCH_FAILED;
  pthread_mutex_lock(&g_mutex);
  c->latest_end = max_u64(c->latest_end, end);
  if (stream != NULL) stream->latest_end = max_u64(stream->latest_end, end);
  if (f->kind == KERNEL_SPIN && duration > 0) {
    if (c->nspin < MAX_SPIN_INTERVALS) {
      c->spin[c->nspin].start_ns = start;
      c->spin[c->nspin].end_ns = end;
      c->nspin++;
    } else {
      c->spin[MAX_SPIN_INTERVALS - 1].end_ns = end; /* full: stretch the last one */
    }
  }
  pthread_mutex_unlock(&g_mutex);
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                   unsigned int bx, unsigned int by, unsigned int bz,
                                   unsigned int shared, CUstream hStream, void** kernelParams,
                                   void** extra) {
  (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)shared;
  return launch(f, hStream, kernelParams, extra);
}

/* CUDA 12's launch with a configuration (cuda.h CUlaunchConfig): grid, block, shared memory and stream
 * come from config; attributes (clusters, priorities, ...) are accepted and ignored. */
typedef struct CUlaunchConfig_st {
  unsigned int gridDimX, gridDimY, gridDimZ;
  unsigned int blockDimX, blockDimY, blockDimZ;
  unsigned int sharedMemBytes;
  CUstream hStream;
  void* attrs;
  unsigned int numAttrs;
} CUlaunchConfig;

SIMGPU_API CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** kernelParams,
                                     void** extra) {
  REQUIRE_INIT();
  if (config == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (config->numAttrs > 0 && config->attrs == NULL) return CUDA_ERROR_INVALID_VALUE;
  return launch(f, config->hStream, kernelParams, extra);
}

/* -- graphs: kernel nodes only, built explicitly or captured from a stream -- */

#define GRAPH_MAGIC 0x48505247u
#define GRAPH_EXEC_MAGIC 0x43584547u
#define MAX_GRAPH_NODES 1024
#define MAX_KERNEL_ARGS 2

/* cuda.h CUDA_KERNEL_NODE_PARAMS (v1); the _v2 form appends CUkernel kern and CUcontext ctx, so its
 * prefix is the same. */
typedef struct {
  CUfunction func;
  unsigned int gridDimX, gridDimY, gridDimZ;
  unsigned int blockDimX, blockDimY, blockDimZ;
  unsigned int sharedMemBytes;
  void** kernelParams;
  void** extra;
} CUDA_KERNEL_NODE_PARAMS;

struct graph_node {
  CUfunction func;
  unsigned long long args[MAX_KERNEL_ARGS]; /* copied at node creation, as the driver does */
};

struct CUgraph_st {
  uint32_t magic;
  int n;
  struct graph_node nodes[MAX_GRAPH_NODES];
};

struct CUgraphExec_st {
  uint32_t magic;
  int n;
  struct graph_node nodes[MAX_GRAPH_NODES];
};

typedef struct CUgraph_st* CUgraph;
typedef struct CUgraphExec_st* CUgraphExec;
typedef struct graph_node* CUgraphNode;

/* Capture state per stream handle (the NULL/legacy stream cannot be captured, as in CUDA). */
#define MAX_CAPTURES 16
static struct {
  CUstream stream;
  CUgraph graph;
} g_captures[MAX_CAPTURES];

static struct CUgraph_st* capturing(CUstream s) {
  CUgraph g = NULL;
  if (s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) return NULL;
  pthread_mutex_lock(&g_mutex);
  for (int i = 0; i < MAX_CAPTURES; i++)
    if (g_captures[i].stream == s) g = g_captures[i].graph;
  pthread_mutex_unlock(&g_mutex);
  return g;
}

/* Append a kernel node to g (its arguments copied now). */
static CUresult graph_add(struct CUgraph_st* g, CUfunction f, void** params, void** extra,
                          struct graph_node** out) {
  struct graph_node node;
  if (!live(g, GRAPH_MAGIC)) return CUDA_ERROR_INVALID_HANDLE;
  if (f == NULL || !known_kernel(f)) return CUDA_ERROR_INVALID_HANDLE;
  memset(&node, 0, sizeof(node));
  node.func = f;
  if (kernel_arg(params, extra, 0, &node.args[0]) != 0) return CUDA_ERROR_INVALID_VALUE;
  if (f->kind == KERNEL_WORK && kernel_arg(params, extra, 1, &node.args[1]) != 0) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&g_mutex);
  if (g->n >= MAX_GRAPH_NODES) {
    pthread_mutex_unlock(&g_mutex);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  g->nodes[g->n] = node;
  if (out != NULL) *out = &g->nodes[g->n];
  g->n++;
  pthread_mutex_unlock(&g_mutex);
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuGraphCreate(CUgraph* phGraph, unsigned int flags) {
  CUgraph g;
  REQUIRE_INIT();
  if (phGraph == NULL || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  g = new_handle(sizeof(*g), GRAPH_MAGIC);
  if (g == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  *phGraph = g;
  return CUDA_SUCCESS;
}

static CUresult add_kernel_node(CUgraphNode* phNode, CUgraph g, const CUgraphNode* deps, size_t ndeps,
                                const CUDA_KERNEL_NODE_PARAMS* p) {
  REQUIRE_INIT();
  if (phNode == NULL || p == NULL || (ndeps > 0 && deps == NULL)) return CUDA_ERROR_INVALID_VALUE;
  /* dependencies are accepted as given: nodes run in creation order on the one timeline */
  return graph_add(g, p->func, p->kernelParams, p->extra, phNode);
}

SIMGPU_API CUresult cuGraphAddKernelNode(CUgraphNode* phNode, CUgraph g, const CUgraphNode* deps,
                                         size_t ndeps, const CUDA_KERNEL_NODE_PARAMS* p) {
  return add_kernel_node(phNode, g, deps, ndeps, p);
}

SIMGPU_API CUresult cuGraphAddKernelNode_v2(CUgraphNode* phNode, CUgraph g, const CUgraphNode* deps,
                                            size_t ndeps, const CUDA_KERNEL_NODE_PARAMS* p) {
  return add_kernel_node(phNode, g, deps, ndeps, p);
}

static CUresult instantiate(CUgraphExec* out, CUgraph g) {
  CUgraphExec e;
  REQUIRE_INIT();
  if (out == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (!live(g, GRAPH_MAGIC)) return CUDA_ERROR_INVALID_HANDLE;
  e = new_handle(sizeof(*e), GRAPH_EXEC_MAGIC);
  if (e == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  pthread_mutex_lock(&g_mutex);
  e->n = g->n;
  memcpy(e->nodes, g->nodes, sizeof(e->nodes[0]) * (size_t)g->n);
  pthread_mutex_unlock(&g_mutex);
  *out = e;
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuGraphInstantiateWithFlags(CUgraphExec* phExec, CUgraph g, unsigned long long flags) {
  (void)flags;
  return instantiate(phExec, g);
}

/* The pre-12 form (error node and log buffer), exported as cuGraphInstantiate and _v2 by CUDA 11/12. */
SIMGPU_API CUresult cuGraphInstantiate_v2(CUgraphExec* phExec, CUgraph g, CUgraphNode* errNode, char* log,
                                          size_t logSize) {
  if (errNode != NULL) *errNode = NULL;
  if (log != NULL && logSize > 0) log[0] = '\0';
  return instantiate(phExec, g);
}

SIMGPU_API CUresult cuGraphInstantiate(CUgraphExec* phExec, CUgraph g, CUgraphNode* errNode, char* log,
                                       size_t logSize) {
  if (errNode != NULL) *errNode = NULL;
  if (log != NULL && logSize > 0) log[0] = '\0';
  return instantiate(phExec, g);
}

/* Every node of the executable graph, in order, onto the stream's timeline. */
SIMGPU_API CUresult cuGraphLaunch(CUgraphExec e, CUstream s) {
  REQUIRE_INIT();
  if (!live(e, GRAPH_EXEC_MAGIC)) return CUDA_ERROR_INVALID_HANDLE;
  for (int i = 0; i < e->n; i++) {
    unsigned long long args[MAX_KERNEL_ARGS];
    void* params[MAX_KERNEL_ARGS];
    memcpy(args, e->nodes[i].args, sizeof(args));
    for (int k = 0; k < MAX_KERNEL_ARGS; k++) params[k] = &args[k];
    SIMGPU_TRY(launch(e->nodes[i].func, s, params, NULL));
  }
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuGraphExecDestroy(CUgraphExec e) { return retire(e, GRAPH_EXEC_MAGIC); }
SIMGPU_API CUresult cuGraphDestroy(CUgraph g) { return retire(g, GRAPH_MAGIC); }

/* Stream capture: between cuStreamBeginCapture and cuStreamEndCapture, kernels launched onto the stream
 * (any launch entry point) become nodes of a new graph instead of running. */
static CUresult begin_capture(CUstream s) {
  CUgraph g;
  int slot = -1;
  REQUIRE_INIT();
  if (s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) return CUDA_ERROR_NOT_SUPPORTED;
  if (!live(s, STREAM_MAGIC)) return CUDA_ERROR_INVALID_HANDLE;
  if (capturing(s) != NULL) return CUDA_ERROR_INVALID_VALUE;
  g = new_handle(sizeof(*g), GRAPH_MAGIC);
  if (g == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  pthread_mutex_lock(&g_mutex);
  for (int i = 0; i < MAX_CAPTURES && slot < 0; i++)
    if (g_captures[i].stream == NULL) slot = i;
  if (slot >= 0) {
    g_captures[slot].stream = s;
    g_captures[slot].graph = g;
  }
  pthread_mutex_unlock(&g_mutex);
  return slot >= 0 ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

SIMGPU_API CUresult cuStreamBeginCapture(CUstream s) { return begin_capture(s); }
SIMGPU_API CUresult cuStreamBeginCapture_v2(CUstream s, int mode) {
  (void)mode;
  return begin_capture(s);
}

SIMGPU_API CUresult cuStreamEndCapture(CUstream s, CUgraph* phGraph) {
  CUgraph g = NULL;
  REQUIRE_INIT();
  if (phGraph == NULL) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&g_mutex);
  for (int i = 0; i < MAX_CAPTURES; i++) {
    if (s != NULL && g_captures[i].stream == s) {
      g = g_captures[i].graph;
      g_captures[i].stream = NULL;
      g_captures[i].graph = NULL;
    }
  }
  pthread_mutex_unlock(&g_mutex);
  if (g == NULL) return CUDA_ERROR_INVALID_VALUE; /* not capturing */
  *phGraph = g;
  return CUDA_SUCCESS;
}

/* cuStreamIsCapturing: *status 0 = none, 1 = active (CUstreamCaptureStatus). */
SIMGPU_API CUresult cuStreamIsCapturing(CUstream s, int* status) {
  REQUIRE_INIT();
  if (status == NULL) return CUDA_ERROR_INVALID_VALUE;
  *status = capturing(s) != NULL ? 1 : 0;
  return CUDA_SUCCESS;
}

/* -- memory -- */

SIMGPU_API CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  return do_alloc(dptr, bytesize, 1);
}

SIMGPU_API CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  REQUIRE_INIT();
  if (flags != 1 && flags != 2) return CUDA_ERROR_INVALID_VALUE; /* ATTACH_GLOBAL or _HOST */
  return do_alloc(dptr, bytesize, 0);
}

static CUresult do_free(CUdeviceptr dptr) {
  struct allocation** pp;
  struct allocation* found = NULL;
  REQUIRE_INIT();
  if (dptr == 0) return CUDA_SUCCESS;
  pthread_mutex_lock(&g_mutex);
  for (pp = &g_allocations; *pp != NULL; pp = &(*pp)->next) {
    if ((*pp)->fd < 0 && (CUdeviceptr)(uintptr_t)(*pp)->ptr == dptr) {
      found = *pp;
      *pp = found->next;
      break;
    }
  }
  pthread_mutex_unlock(&g_mutex);
  if (found == NULL) return CUDA_ERROR_INVALID_VALUE;
  munmap(found->ptr, found->size);
  simgpu_mem_sub(found->dev, found->size);
  free(found);
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuMemFree_v2(CUdeviceptr dptr) { return do_free(dptr); }

SIMGPU_API CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total_bytes) {
  struct CUctx_st* c;
  uint64_t used = 0, total;
  SIMGPU_TRY(check_current(free_bytes != NULL && total_bytes != NULL, &c));
  total = simgpu_device_at(c->dev)->total_bytes;
  if (simgpu_mem_used(c->dev, &used) != 0) return CUDA_ERROR_UNKNOWN;
  *total_bytes = (size_t)total;
  *free_bytes = (size_t)(used >= total ? 0 : total - used);
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuMemAdvise(CUdeviceptr ptr, size_t count, int advice, CUdevice device) {
  REQUIRE_INIT();
  (void)count;
  if (ptr == 0 || advice < 1 || advice > 6) return CUDA_ERROR_INVALID_VALUE;
  if (device != -1 && !valid_dev(device)) return CUDA_ERROR_INVALID_DEVICE;
  return CUDA_SUCCESS; /* no paging is simulated */
}

SIMGPU_API CUresult cuMemPrefetchAsync(CUdeviceptr ptr, size_t count, CUdevice device,
                                       CUstream s) {
  (void)count;
  (void)s;
  REQUIRE_INIT();
  if (ptr == 0) return CUDA_ERROR_INVALID_VALUE;
  if (device != -1 && !valid_dev(device)) return CUDA_ERROR_INVALID_DEVICE;
  return CUDA_SUCCESS;
}

/* -- more allocation paths: pitch, stream-ordered (default pool), virtual memory management --
 * Each counts device memory exactly as cuMemAlloc_v2 does (the device total is checked), as the real
 * driver's physical allocations do; only cuMemAllocManaged may oversubscribe. */

#define SIMGPU_PITCH_ALIGN 512
#define SIMGPU_VMM_GRANULARITY ((size_t)2 << 20)

SIMGPU_API CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                                       unsigned int element_size) {
  size_t p;
  REQUIRE_INIT();
  if (pitch == NULL || width == 0 || height == 0) return CUDA_ERROR_INVALID_VALUE;
  if (element_size != 4 && element_size != 8 && element_size != 16) return CUDA_ERROR_INVALID_VALUE;
  p = (width + SIMGPU_PITCH_ALIGN - 1) / SIMGPU_PITCH_ALIGN * SIMGPU_PITCH_ALIGN;
  if (height > SIZE_MAX / p) return CUDA_ERROR_INVALID_VALUE;
  *pitch = p;
  return do_alloc(dptr, p * height, 1);
}

/* Stream-ordered allocation from the device's default pool (release threshold 0: the memory goes back
 * at once; the simulation has no pool reuse). */
SIMGPU_API CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream s) {
  struct CUctx_st* c;
  struct CUstream_st* real;
  REQUIRE_INIT();
  SIMGPU_TRY(stream_target(s, &c, &real));
  return do_alloc(dptr, bytesize, 1);
}

SIMGPU_API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s) {
  struct CUctx_st* c;
  struct CUstream_st* real;
  REQUIRE_INIT();
  SIMGPU_TRY(stream_target(s, &c, &real));
  return do_free(dptr);
}

/* Explicit memory pools: CUmemPoolProps starts with allocType (1 = pinned), handleTypes, location {type
 * (1 = device), id}. Allocations from a pool count on the pool's device like cuMemAlloc_v2 (release threshold
 * 0: a freed block goes back to the device at once). */
struct simgpu_pool_props {
  int alloc_type;
  int handle_types;
  int location_type;
  int location_id;
};

struct CUmemPool_st {
  uint32_t magic;
  int dev;
};

SIMGPU_API CUresult cuMemPoolCreate(struct CUmemPool_st** pool, const struct simgpu_pool_props* props) {
  struct CUmemPool_st* p;
  REQUIRE_INIT();
  if (pool == NULL || props == NULL || props->alloc_type != 1 || props->location_type != 1)
    return CUDA_ERROR_INVALID_VALUE;
  if (!valid_dev(props->location_id)) return CUDA_ERROR_INVALID_DEVICE;
  p = new_handle(sizeof(*p), POOL_MAGIC);
  if (p == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  p->dev = props->location_id;
  *pool = p;
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuMemPoolDestroy(struct CUmemPool_st* pool) { return retire(pool, POOL_MAGIC); }

SIMGPU_API CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize, struct CUmemPool_st* pool,
                                            CUstream s) {
  struct CUctx_st* c;
  struct CUstream_st* real;
  REQUIRE_INIT();
  if (!live(pool, POOL_MAGIC)) return CUDA_ERROR_INVALID_VALUE;
  SIMGPU_TRY(stream_target(s, &c, &real));
  if (c->dev != pool->dev) return CUDA_ERROR_INVALID_VALUE; /* the simulation serves the context's device */
  return do_alloc(dptr, bytesize, 1);
}

/* CUmemAllocationProp: type (1 = pinned), requestedHandleTypes, location {type (1 = device), id}, ... */
struct simgpu_mem_prop {
  int type;
  int requested_handle_types;
  int location_type;
  int location_id;
};

SIMGPU_API CUresult cuMemGetAllocationGranularity(size_t* granularity, const struct simgpu_mem_prop* prop,
                                                  int option) {
  REQUIRE_INIT();
  (void)option;
  if (granularity == NULL || prop == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (prop->type != 1 || prop->location_type != 1) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_dev(prop->location_id)) return CUDA_ERROR_INVALID_DEVICE;
  *granularity = SIMGPU_VMM_GRANULARITY;
  return CUDA_SUCCESS;
}

/* A physical allocation: counted on prop's device; a memfd so that cuMemMap shows its contents. */
SIMGPU_API CUresult cuMemCreate(unsigned long long* handle, size_t size, const struct simgpu_mem_prop* prop,
                                unsigned long long flags) {
  struct CUctx_st* c;
  struct allocation* a;
  void* p;
  int fd, rc;
  SIMGPU_TRY(check_current(handle != NULL && prop != NULL && size != 0 && flags == 0, &c));
  if (prop->type != 1 || prop->location_type != 1) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_dev(prop->location_id)) return CUDA_ERROR_INVALID_DEVICE;
  if (size % SIMGPU_VMM_GRANULARITY != 0) return CUDA_ERROR_INVALID_VALUE;
  rc = simgpu_mem_add(prop->location_id, size, 1);
  if (rc == 1) return CUDA_ERROR_OUT_OF_MEMORY;
  if (rc != 0) return CUDA_ERROR_UNKNOWN;
  fd = memfd_create("simgpu-vmm", MFD_CLOEXEC);
  p = MAP_FAILED;
  if (fd >= 0 && ftruncate(fd, (off_t)size) == 0)
    p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  a = (p == MAP_FAILED) ? NULL : malloc(sizeof(*a));
  if (a == NULL) {
    if (p != MAP_FAILED) munmap(p, size);
    if (fd >= 0) close(fd);
    simgpu_mem_sub(prop->location_id, size);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  a->ptr = p;
  a->size = size;
  a->dev = prop->location_id;
  a->ctx = c;
  a->fd = fd;
  pthread_mutex_lock(&g_mutex);
  a->next = g_allocations;
  g_allocations = a;
  pthread_mutex_unlock(&g_mutex);
  *handle = (unsigned long long)(uintptr_t)p;
  return CUDA_SUCCESS;
}

static struct allocation* find_handle_locked(unsigned long long handle) {
  for (struct allocation* a = g_allocations; a != NULL; a = a->next)
    if (a->fd >= 0 && (unsigned long long)(uintptr_t)a->ptr == handle) return a;
  return NULL;
}

SIMGPU_API CUresult cuMemRelease(unsigned long long handle) {
  struct allocation** pp;
  struct allocation* found = NULL;
  REQUIRE_INIT();
  pthread_mutex_lock(&g_mutex);
  for (pp = &g_allocations; *pp != NULL; pp = &(*pp)->next) {
    if ((*pp)->fd >= 0 && (unsigned long long)(uintptr_t)(*pp)->ptr == handle) {
      found = *pp;
      *pp = found->next;
      break;
    }
  }
  pthread_mutex_unlock(&g_mutex);
  if (found == NULL) return CUDA_ERROR_INVALID_VALUE;
  munmap(found->ptr, found->size); /* mappings made by cuMemMap keep the memfd's pages until unmapped */
  close(found->fd);
  simgpu_mem_sub(found->dev, found->size);
  free(found);
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                       unsigned long long flags) {
  void* p;
  (void)alignment;
  (void)addr;
  REQUIRE_INIT();
  if (ptr == NULL || size == 0 || flags != 0 || size % SIMGPU_VMM_GRANULARITY != 0) return CUDA_ERROR_INVALID_VALUE;
  p = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  *ptr = (CUdeviceptr)(uintptr_t)p;
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  REQUIRE_INIT();
  if (ptr == 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
  return munmap((void*)(uintptr_t)ptr, size) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIMGPU_API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, unsigned long long handle,
                             unsigned long long flags) {
  struct allocation* a;
  int fd = -1;
  REQUIRE_INIT();
  if (ptr == 0 || size == 0 || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&g_mutex);
  a = find_handle_locked(handle);
  if (a != NULL && offset <= a->size && size <= a->size - offset) fd = a->fd;
  pthread_mutex_unlock(&g_mutex);
  if (fd < 0) return CUDA_ERROR_INVALID_VALUE;
  if (mmap((void*)(uintptr_t)ptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED | MAP_NORESERVE, fd,
           (off_t)offset) == MAP_FAILED)
    return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  REQUIRE_INIT();
  if (ptr == 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
  if (mmap((void*)(uintptr_t)ptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) ==
      MAP_FAILED)
    return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

/* Access is always read/write in the simulation; the descriptors are checked for shape only. */
SIMGPU_API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const void* desc, size_t count) {
  REQUIRE_INIT();
  if (ptr == 0 || size == 0 || desc == NULL || count == 0) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

#define PTR(x) ((void*)(uintptr_t)(x))

SIMGPU_API CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return do_copy(PTR(dst), PTR(src), n, 1);
}
SIMGPU_API CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  (void)s;
  return do_copy(PTR(dst), PTR(src), n, 0);
}
SIMGPU_API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
  return do_copy(PTR(dst), src, n, 1);
}
SIMGPU_API CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
  return do_copy(dst, PTR(src), n, 1);
}
SIMGPU_API CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return do_copy(PTR(dst), PTR(src), n, 1);
}
SIMGPU_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  (void)s;
  return do_copy(PTR(dst), src, n, 0);
}
SIMGPU_API CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  (void)s;
  return do_copy(dst, PTR(src), n, 0);
}
SIMGPU_API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  (void)s;
  return do_copy(PTR(dst), PTR(src), n, 0);
}

static CUresult memset_d8(CUdeviceptr dst, unsigned char value, size_t n) {
  REQUIRE_INIT();
  if (dst == 0 && n > 0) return CUDA_ERROR_INVALID_VALUE;
  memset(PTR(dst), value, n);
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t n) {
  return memset_d8(dst, value, n);
}

SIMGPU_API CUresult cuMemsetD32_v2(CUdeviceptr dst, unsigned int value, size_t n) {
  unsigned int* p = (unsigned int*)PTR(dst);
  REQUIRE_INIT();
  if (dst == 0 && n > 0) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < n; i++) p[i] = value;
  return CUDA_SUCCESS;
}

SIMGPU_API CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t n, CUstream s) {
  (void)s;
  return memset_d8(dst, value, n);
}

/* -- errors -- */

struct error_text {
  int code;
  const char* name;
  const char* text;
};

static const struct error_text g_errors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_ECC_UNCORRECTABLE, "CUDA_ERROR_ECC_UNCORRECTABLE", "uncorrectable ECC error encountered"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_CONTEXT_ALREADY_CURRENT, "CUDA_ERROR_CONTEXT_ALREADY_CURRENT",
     "context already current"},
    {CUDA_ERROR_FILE_NOT_FOUND, "CUDA_ERROR_FILE_NOT_FOUND", "file not found"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_CONTEXT_IS_DESTROYED, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
    {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

/* *pStr = the name (want_name) or the description of error; NULL for an unknown code. */
static CUresult describe_error(CUresult error, const char** pStr, int want_name) {
  const struct error_text* t = NULL;
  if (pStr == NULL) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < sizeof(g_errors) / sizeof(g_errors[0]) && t == NULL; i++)
    if (g_errors[i].code == error) t = &g_errors[i];
  *pStr = t == NULL ? NULL : want_name ? t->name : t->text;
  return t ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIMGPU_API CUresult cuGetErrorString(CUresult error, const char** pStr) {
  return describe_error(error, pStr, 0);
}

SIMGPU_API CUresult cuGetErrorName(CUresult error, const char** pStr) {
  return describe_error(error, pStr, 1);
}

/* -- entry points -- */

SIMGPU_API CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion,
                                     cuuint64_t flags);
SIMGPU_API CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion,
                                        cuuint64_t flags, int* symbolStatus);

#define ENSIMGPU_TRY(fn) {#fn, (void*)&fn}
static const struct {
  const char* name;
  void* fn;
} g_entries[] = {
    ENSIMGPU_TRY(cuInit), ENSIMGPU_TRY(cuDriverGetVersion), ENSIMGPU_TRY(cuDeviceGetCount), ENSIMGPU_TRY(cuDeviceGet),
    ENSIMGPU_TRY(cuDeviceGetName), ENSIMGPU_TRY(cuDeviceGetUuid), ENSIMGPU_TRY(cuDeviceGetUuid_v2),
    ENSIMGPU_TRY(cuDeviceTotalMem_v2), ENSIMGPU_TRY(cuDeviceGetAttribute), ENSIMGPU_TRY(cuDeviceComputeCapability),
    ENSIMGPU_TRY(cuDeviceGetPCIBusId), ENSIMGPU_TRY(cuDevicePrimaryCtxRetain),
    ENSIMGPU_TRY(cuDevicePrimaryCtxRelease), ENSIMGPU_TRY(cuDevicePrimaryCtxRelease_v2),
    ENSIMGPU_TRY(cuDevicePrimaryCtxReset), ENSIMGPU_TRY(cuDevicePrimaryCtxReset_v2),
    ENSIMGPU_TRY(cuDevicePrimaryCtxGetState), ENSIMGPU_TRY(cuDevicePrimaryCtxSetFlags),
    ENSIMGPU_TRY(cuDevicePrimaryCtxSetFlags_v2), ENSIMGPU_TRY(cuCtxCreate_v2), ENSIMGPU_TRY(cuCtxDestroy_v2),
    ENSIMGPU_TRY(cuCtxSetCurrent), ENSIMGPU_TRY(cuCtxGetCurrent), ENSIMGPU_TRY(cuCtxPushCurrent_v2),
    ENSIMGPU_TRY(cuCtxPopCurrent_v2), ENSIMGPU_TRY(cuCtxGetDevice), ENSIMGPU_TRY(cuCtxSynchronize),
    ENSIMGPU_TRY(cuStreamCreate), ENSIMGPU_TRY(cuStreamCreateWithPriority), ENSIMGPU_TRY(cuStreamDestroy),
    ENSIMGPU_TRY(cuStreamDestroy_v2), ENSIMGPU_TRY(cuStreamSynchronize), ENSIMGPU_TRY(cuStreamQuery),
    ENSIMGPU_TRY(cuStreamWaitEvent), ENSIMGPU_TRY(cuEventCreate), ENSIMGPU_TRY(cuEventDestroy),
    ENSIMGPU_TRY(cuEventDestroy_v2), ENSIMGPU_TRY(cuEventRecord), ENSIMGPU_TRY(cuEventQuery),
    ENSIMGPU_TRY(cuEventSynchronize), ENSIMGPU_TRY(cuEventElapsedTime), ENSIMGPU_TRY(cuModuleLoad),
    ENSIMGPU_TRY(cuModuleLoadData), ENSIMGPU_TRY(cuModuleLoadDataEx), ENSIMGPU_TRY(cuModuleLoadFatBinary),
    ENSIMGPU_TRY(cuModuleUnload), ENSIMGPU_TRY(cuModuleGetFunction), ENSIMGPU_TRY(cuLaunchKernel),
    ENSIMGPU_TRY(cuLaunchKernelEx), ENSIMGPU_TRY(cuGraphCreate), ENSIMGPU_TRY(cuGraphAddKernelNode),
    ENSIMGPU_TRY(cuGraphAddKernelNode_v2), ENSIMGPU_TRY(cuGraphInstantiateWithFlags), ENSIMGPU_TRY(cuGraphInstantiate),
    ENSIMGPU_TRY(cuGraphInstantiate_v2), ENSIMGPU_TRY(cuGraphLaunch), ENSIMGPU_TRY(cuGraphExecDestroy),
    ENSIMGPU_TRY(cuGraphDestroy), ENSIMGPU_TRY(cuStreamBeginCapture), ENSIMGPU_TRY(cuStreamBeginCapture_v2),
    ENSIMGPU_TRY(cuStreamEndCapture), ENSIMGPU_TRY(cuStreamIsCapturing),
    ENSIMGPU_TRY(cuMemAlloc_v2), ENSIMGPU_TRY(cuMemAllocManaged), ENSIMGPU_TRY(cuMemFree_v2), ENSIMGPU_TRY(cuMemGetInfo_v2),
    ENSIMGPU_TRY(cuMemAllocPitch_v2), ENSIMGPU_TRY(cuMemAllocAsync), ENSIMGPU_TRY(cuMemFreeAsync),
    ENSIMGPU_TRY(cuMemGetAllocationGranularity), ENSIMGPU_TRY(cuMemCreate), ENSIMGPU_TRY(cuMemRelease),
    ENSIMGPU_TRY(cuMemAddressReserve), ENSIMGPU_TRY(cuMemAddressFree), ENSIMGPU_TRY(cuMemMap), ENSIMGPU_TRY(cuMemUnmap),
    ENSIMGPU_TRY(cuMemSetAccess), ENSIMGPU_TRY(cuMemPoolCreate), ENSIMGPU_TRY(cuMemPoolDestroy),
    ENSIMGPU_TRY(cuMemAllocFromPoolAsync),
    ENSIMGPU_TRY(cuMemAdvise), ENSIMGPU_TRY(cuMemPrefetchAsync), ENSIMGPU_TRY(cuMemcpy), ENSIMGPU_TRY(cuMemcpyAsync),
    ENSIMGPU_TRY(cuMemcpyHtoD_v2), ENSIMGPU_TRY(cuMemcpyDtoH_v2), ENSIMGPU_TRY(cuMemcpyDtoD_v2),
    ENSIMGPU_TRY(cuMemcpyHtoDAsync_v2), ENSIMGPU_TRY(cuMemcpyDtoHAsync_v2), ENSIMGPU_TRY(cuMemcpyDtoDAsync_v2),
    ENSIMGPU_TRY(cuMemsetD8_v2), ENSIMGPU_TRY(cuMemsetD32_v2), ENSIMGPU_TRY(cuMemsetD8Async), ENSIMGPU_TRY(cuGetErrorString),
    ENSIMGPU_TRY(cuGetErrorName), ENSIMGPU_TRY(cuGetProcAddress), ENSIMGPU_TRY(cuGetProcAddress_v2),
};

/* This library's own function for symbol: the exact name, else its _v2 form (as the real
 * driver maps "cuMemAlloc" to cuMemAlloc_v2 for a current cudaVersion). */
static void* lookup_entry(const char* symbol) {
  char v2[128];
  if (symbol == NULL) return NULL;
  for (size_t i = 0; i < sizeof(g_entries) / sizeof(g_entries[0]); i++)
    if (strcmp(g_entries[i].name, symbol) == 0) return g_entries[i].fn;
  snprintf(v2, sizeof(v2), "%s_v2", symbol);
  for (size_t i = 0; i < sizeof(g_entries) / sizeof(g_entries[0]); i++)
    if (strcmp(g_entries[i].name, v2) == 0) return g_entries[i].fn;
  return NULL;
}

static CUresult proc_address(const char* symbol, void** pfn) {
  if (symbol == NULL || pfn == NULL) return CUDA_ERROR_INVALID_VALUE;
  *pfn = lookup_entry(symbol);
  return *pfn != NULL ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

SIMGPU_API CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion,
                                     cuuint64_t flags) {
  (void)cudaVersion;
  (void)flags;
  return proc_address(symbol, pfn);
}

SIMGPU_API CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion,
                                        cuuint64_t flags, int* symbolStatus) {
  CUresult err = proc_address(symbol, pfn);
  (void)cudaVersion;
  (void)flags;
  if (symbolStatus != NULL && err != CUDA_ERROR_INVALID_VALUE)
    *symbolStatus = (err == CUDA_SUCCESS) ? 0 : 1;
  return err;
}
