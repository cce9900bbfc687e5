/*
 * faultshim: a CUDA error-injection shim for real GPUs (workloads/faultshim/README.md, docs/faults.md).
 *
 * Built as a library named libcuda.so.1 (soname libcuda.so.1) whose one dependency, libcuda-real.so.1 (found
 * beside it through RUNPATH $ORIGIN), is a link to the real driver. Loaded with LD_PRELOAD *after* the client
 * library, LD_PRELOAD="libxpushare.so <dir>/libcuda.so.1":
 *   - the client library's dlopen("libcuda.so.1") (and the CUDA runtime's) finds this already loaded object by its
 *     soname, so the client library's dlsym(handle, "cuLaunchKernel") resolves to the wrapper here, and every
 *     other driver function to the real driver (the handle's scope is this library and its dependency);
 *   - the application's own calls still reach the client library first (it comes first in the global scope), so
 *     the SUT keeps gating every launch: the order is application -> libxpushare.so -> faultshim -> driver.
 * The shim resolves the real functions with glibc's own dlsym (dlvsym), since libxpushare.so replaces dlsym for
 * cu* names.
 *
 * CUDA_FAULT_INJECT=<kind>:after_calls=N|after_s=S[:gpu=UUID|index] (the simulated GPU's SIMGPU_FAULT syntax).
 * Counted calls: cuLaunchKernel(Ex)(_ptsz), cuCtxSynchronize, cuStreamSynchronize(_ptsz), cuMemcpy and the
 * synchronous cuMemcpy{HtoD,DtoH,DtoD}_v2, directly or through cuGetProcAddress(_v2). The failing call returns
 * the kind's error without calling the driver; so does every later counted call of the process (sticky, as the
 * context would be). Nothing reaches the GPU: no Xid, no ECC counter, and device-lost is lost for this process
 * only. One "[FAULTSHIM]" line on stderr says what was injected, when.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define API __attribute__((visibility("default")))
typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef void* CUstream;
typedef void* CUfunction;

enum { KIND_NONE, KIND_ILLEGAL_ADDRESS, KIND_ECC, KIND_LAUNCH, KIND_LOST };
static const int kind_error[] = {0, 700, 214, 719, 999};
static const char* const kind_name[] = {"", "illegal-address", "ecc-uncorrectable", "launch-failure",
                                        "device-lost"};

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t g_mutex = PTHREAD_MUTEX_INITIALIZER;
static int g_kind = KIND_NONE, g_by_calls = 0, g_sticky = 0, g_fired = 0;
static unsigned long long g_after_calls = 0, g_count = 0;
static double g_after_s = 0.0, g_t0 = -1.0;
static char g_gpu[128] = "";
static void* g_real = NULL;
typedef void*(dlsym_fn)(void*, const char*);
static dlsym_fn* g_dlsym = NULL;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void warn_spec(const char* what, const char* v) {
  fprintf(stderr, "[FAULTSHIM] CUDA_FAULT_INJECT: %s '%s': no fault injected\n", what, v);
}

static void parse(const char* env) {
  char buf[512], *save = NULL, *tok;
  int kind = KIND_NONE, by_calls = 0, have = 0;
  unsigned long long calls = 0;
  double secs = 0;
  char gpu[128] = "";
  snprintf(buf, sizeof(buf), "%s", env);
  tok = strtok_r(buf, ":", &save);
  if (tok == NULL) return;
  for (int k = 1; k <= KIND_LOST; k++)
    if (strcmp(tok, kind_name[k]) == 0) kind = k;
  if (kind == KIND_NONE) return warn_spec("unknown kind", tok);
  while ((tok = strtok_r(NULL, ":", &save)) != NULL) {
    char *eq = strchr(tok, '='), *end = NULL;
    if (eq == NULL) return warn_spec("expected key=value, got", tok);
    *eq++ = '\0';
    if (strcmp(tok, "after_calls") == 0) {
      calls = strtoull(eq, &end, 10);
      if (end == eq || *end != '\0') return warn_spec("bad after_calls", eq);
      by_calls = have = 1;
    } else if (strcmp(tok, "after_s") == 0) {
      secs = strtod(eq, &end);
      if (end == eq || *end != '\0' || !(secs >= 0)) return warn_spec("bad after_s", eq);
      by_calls = 0;
      have = 1;
    } else if (strcmp(tok, "gpu") == 0) {
      snprintf(gpu, sizeof(gpu), "%s", eq);
    } else {
      return warn_spec("unknown key", tok);
    }
  }
  if (!have) return warn_spec("needs after_calls=N or after_s=S", env);
  g_kind = kind;
  g_by_calls = by_calls;
  g_after_calls = calls;
  g_after_s = secs;
  snprintf(g_gpu, sizeof(g_gpu), "%s", gpu);
}

static void init_once(void) {
  static const char* versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"};
  const char* env = getenv("CUDA_FAULT_INJECT");
  for (size_t i = 0; i < sizeof(versions) / sizeof(versions[0]) && g_dlsym == NULL; i++)
    g_dlsym = (dlsym_fn*)dlvsym(RTLD_NEXT, "dlsym", versions[i]);
  g_real = dlopen("libcuda-real.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (g_real == NULL) g_real = dlopen("libcuda-real.so.1", RTLD_LAZY);
  if (g_dlsym == NULL || g_real == NULL)
    fprintf(stderr, "[FAULTSHIM] cannot reach the real driver (libcuda-real.so.1): %s\n", dlerror());
  if (env != NULL && env[0] != '\0') parse(env);
  g_t0 = now_s();
}

static void* real(const char* name) {
  pthread_once(&g_once, init_once);
  return (g_dlsym != NULL && g_real != NULL) ? g_dlsym(g_real, name) : NULL;
}

/* Whether the current context's device is the one gpu= names (always, without gpu=). */
static int on_named_gpu(void) {
  CUdevice dev = -1;
  char uuid[16], text[64];
  CUresult (*get_device)(CUdevice*) = (CUresult(*)(CUdevice*))real("cuCtxGetDevice");
  CUresult (*get_uuid)(char*, CUdevice) = (CUresult(*)(char*, CUdevice))real("cuDeviceGetUuid");
  char* end = NULL;
  long index;
  if (g_gpu[0] == '\0') return 1;
  if (get_device == NULL || get_device(&dev) != 0) return 0;
  index = strtol(g_gpu, &end, 10);
  if (end != g_gpu && *end == '\0') return index == dev;
  if (get_uuid == NULL || get_uuid(uuid, dev) != 0) return 0;
  snprintf(text, sizeof(text), "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
           uuid[0] & 255, uuid[1] & 255, uuid[2] & 255, uuid[3] & 255, uuid[4] & 255, uuid[5] & 255,
           uuid[6] & 255, uuid[7] & 255, uuid[8] & 255, uuid[9] & 255, uuid[10] & 255, uuid[11] & 255,
           uuid[12] & 255, uuid[13] & 255, uuid[14] & 255, uuid[15] & 255);
  return strcmp(text, g_gpu) == 0;
}

/* The error a counted call returns instead of reaching the driver; 0: forward it. */
static CUresult gate(const char* fn) {
  int fire = 0;
  CUresult err;
  pthread_once(&g_once, init_once);
  if (g_kind == KIND_NONE) return 0;
  pthread_mutex_lock(&g_mutex);
  err = g_sticky;
  pthread_mutex_unlock(&g_mutex);
  if (err != 0 || g_fired || !on_named_gpu()) return err;
  pthread_mutex_lock(&g_mutex);
  if (!g_fired) {
    ++g_count;
    fire = g_by_calls ? g_count > g_after_calls : now_s() - g_t0 >= g_after_s;
    if (fire) {
      g_fired = 1;
      g_sticky = kind_error[g_kind];
    }
  }
  err = g_sticky;
  pthread_mutex_unlock(&g_mutex);
  if (fire)
    fprintf(stderr, "[FAULTSHIM] injected %s (CUDA error %d) into %s after %llu calls, %.3f s after the first\n",
            kind_name[g_kind], kind_error[g_kind], fn, g_count - 1, now_s() - g_t0);
  return err;
}

/* A wrapper: gate, then the real function (looked up once by name). */
#define WRAP(name, params, args)                                         \
  API CUresult name params {                                             \
    static CUresult(*fn) params = NULL;                                  \
    CUresult err = gate(#name);                                          \
    if (err != 0) return err;                                            \
    if (fn == NULL) fn = (CUresult(*) params)real(#name);                \
    return fn != NULL ? fn args : 999;                                   \
  }

#define LAUNCH_PARAMS                                                                            \
  (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, \
   unsigned sh, CUstream s, void** p, void** e)
#define LAUNCH_ARGS (f, gx, gy, gz, bx, by, bz, sh, s, p, e)

WRAP(cuLaunchKernel, LAUNCH_PARAMS, LAUNCH_ARGS)
WRAP(cuLaunchKernel_ptsz, LAUNCH_PARAMS, LAUNCH_ARGS)
WRAP(cuLaunchKernelEx, (const void* c, CUfunction f, void** p, void** e), (c, f, p, e))
WRAP(cuLaunchKernelEx_ptsz, (const void* c, CUfunction f, void** p, void** e), (c, f, p, e))
WRAP(cuCtxSynchronize, (void), ())
WRAP(cuCtxSynchronize_v2, (void* ctx), (ctx))
WRAP(cuStreamSynchronize, (CUstream s), (s))
WRAP(cuStreamSynchronize_ptsz, (CUstream s), (s))
WRAP(cuMemcpy, (CUdeviceptr d, CUdeviceptr s, size_t n), (d, s, n))
WRAP(cuMemcpyHtoD_v2, (CUdeviceptr d, const void* s, size_t n), (d, s, n))
WRAP(cuMemcpyDtoH_v2, (void* d, CUdeviceptr s, size_t n), (d, s, n))
WRAP(cuMemcpyDtoD_v2, (CUdeviceptr d, CUdeviceptr s, size_t n), (d, s, n))

/* cuGetProcAddress hands out the driver's pointer for a name and version; for a wrapped name the shim keeps that
 * pointer in a slot and returns the slot's wrapper instead. One slot per (name, per-thread-stream flag). */
#define SLOT(name, idx, params, args)                                    \
  static CUresult(*slot_##name##_##idx) params = NULL;                   \
  static CUresult slotw_##name##_##idx params {                          \
    CUresult err = gate(#name);                                          \
    if (err != 0) return err;                                            \
    return slot_##name##_##idx != NULL ? slot_##name##_##idx args : 999; \
  }
#define SLOTS(name, params, args) SLOT(name, 0, params, args) SLOT(name, 1, params, args)

SLOTS(cuLaunchKernel, LAUNCH_PARAMS, LAUNCH_ARGS)
SLOTS(cuLaunchKernelEx, (const void* c, CUfunction f, void** p, void** e), (c, f, p, e))
SLOTS(cuCtxSynchronize, (void), ())
SLOTS(cuCtxSynchronize_v2, (void* ctx), (ctx))
SLOTS(cuStreamSynchronize, (CUstream s), (s))
SLOTS(cuMemcpy, (CUdeviceptr d, CUdeviceptr s, size_t n), (d, s, n))
SLOTS(cuMemcpyHtoD, (CUdeviceptr d, const void* s, size_t n), (d, s, n))
SLOTS(cuMemcpyDtoH, (void* d, CUdeviceptr s, size_t n), (d, s, n))
SLOTS(cuMemcpyDtoD, (CUdeviceptr d, CUdeviceptr s, size_t n), (d, s, n))

#define TAKE(name)                                                                       \
  if (strcmp(symbol, #name) == 0 || strcmp(symbol, #name "_v2") == 0) {                  \
    if (ptds) {                                                                          \
      *(void**)&slot_##name##_1 = *pfn;                                                  \
      *pfn = (void*)&slotw_##name##_1;                                                   \
    } else {                                                                             \
      *(void**)&slot_##name##_0 = *pfn;                                                  \
      *pfn = (void*)&slotw_##name##_0;                                                   \
    }                                                                                    \
    break;                                                                               \
  }

static void substitute(const char* symbol, void** pfn, unsigned long long flags) {
  int ptds = (flags & 2ULL) != 0; /* CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM */
  if (symbol == NULL || pfn == NULL || *pfn == NULL) return;
  pthread_mutex_lock(&g_mutex);
  if (strcmp(symbol, "cuCtxSynchronize") == 0 && *pfn == real("cuCtxSynchronize_v2"))
    symbol = "cuCtxSynchronize_v2"; /* a newer runtime gets the one-argument form under the base name */
  do {
    TAKE(cuCtxSynchronize_v2)
    TAKE(cuLaunchKernel)
    TAKE(cuLaunchKernelEx)
    TAKE(cuCtxSynchronize)
    TAKE(cuStreamSynchronize)
    TAKE(cuMemcpy)
    TAKE(cuMemcpyHtoD)
    TAKE(cuMemcpyDtoH)
    TAKE(cuMemcpyDtoD)
  } while (0);
  pthread_mutex_unlock(&g_mutex);
}

API CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, unsigned long long flags) {
  CUresult (*fn)(const char*, void**, int, unsigned long long) =
      (CUresult(*)(const char*, void**, int, unsigned long long))real("cuGetProcAddress");
  CUresult err = fn != NULL ? fn(symbol, pfn, version, flags) : 500;
  if (err == 0) substitute(symbol, pfn, flags);
  return err;
}

API CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, unsigned long long flags,
                                 void* status) {
  CUresult (*fn)(const char*, void**, int, unsigned long long, void*) =
      (CUresult(*)(const char*, void**, int, unsigned long long, void*))real("cuGetProcAddress_v2");
  CUresult err = fn != NULL ? fn(symbol, pfn, version, flags, status) : 500;
  if (err == 0) substitute(symbol, pfn, flags);
  return err;
}

/* Workloads and tests tell the shim is loaded: returns 1. */
API int faultshimVersion(void) { return 1; }
