/*
 * simgpu: config loading, visible-device filtering and the shared per-device state file.
 * See simgpu.h for the formats; linked (hidden) into both libcuda.so.1 and libnvidia-ml.so.1.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "simgpu.h"

/* ---- config ---- */

static pthread_once_t g_load_once = PTHREAD_ONCE_INIT;
static int g_load_for_cuda = 0;
static int g_load_result = -1;
static char g_config_path[4096];

static struct simgpu_device g_all[SIMGPU_MAX_DEVICES]; /* config order */
static int g_all_count = 0;
static int g_visible[SIMGPU_MAX_DEVICES]; /* visible index -> config index */
static int g_visible_count = 0;

/* ---- per-device shared state (indexed by config index) ---- */

struct dev_handle {
  pthread_mutex_t mutex;
  int fd;
  pid_t fd_pid; /* process that opened fd: a forked child must not share the flock */
  struct simgpu_state* map;
};

static struct dev_handle g_handles[SIMGPU_MAX_DEVICES];
static pid_t g_self_pid = 0;
static uint64_t g_self_starttime = 0;

static void warn_once(const char* fmt, const char* a, const char* b) {
  static int warned = 0;
  if (warned) return;
  warned = 1;
  fprintf(stderr, "[SIMGPU] ");
  fprintf(stderr, fmt, a, b);
  fputc('\n', stderr);
}

static void trim(char* s) {
  size_t n = strlen(s);
  size_t i = 0;
  while (n > 0 && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
  while (s[i] != '\0' && isspace((unsigned char)s[i])) i++;
  if (i > 0) memmove(s, s + i, n - i + 1);
}

static int parse_number(const char* s, long double* out) {
  char* end = NULL;
  long double v;
  errno = 0;
  v = strtold(s, &end);
  if (errno != 0 || end == s || v < 0) return -1;
  while (*end != '\0' && isspace((unsigned char)*end)) end++;
  if (*end != '\0') return -1;
  *out = v;
  return 0;
}

static void parse_config_line(char* line, int lineno) {
  char* fields[5];
  int n = 0;
  char* p = line;
  long double total, flops, bw;
  struct simgpu_device* d;
  char where[64];

  while (n < 5) {
    fields[n++] = p;
    p = strchr(p, '\t');
    if (p == NULL) break;
    *p++ = '\0';
  }
  snprintf(where, sizeof(where), "line %d", lineno);
  if (n < 5 || p != NULL) {
    fprintf(stderr, "[SIMGPU] %s %s: expected 5 tab-separated fields, line ignored\n",
            g_config_path, where);
    return;
  }
  for (int i = 0; i < 5; i++) trim(fields[i]);
  if (fields[0][0] == '\0' || parse_number(fields[2], &total) != 0 ||
      parse_number(fields[3], &flops) != 0 || parse_number(fields[4], &bw) != 0) {
    fprintf(stderr, "[SIMGPU] %s %s: bad uuid or number, line ignored\n", g_config_path, where);
    return;
  }
  if (g_all_count >= SIMGPU_MAX_DEVICES) return;
  d = &g_all[g_all_count];
  memset(d, 0, sizeof(*d));
  snprintf(d->uuid, sizeof(d->uuid), "%s", fields[0]);
  snprintf(d->name, sizeof(d->name), "%s", fields[1]);
  d->total_bytes = (uint64_t)total;
  d->flops_per_s = (double)flops;
  d->bytes_per_s = (double)bw;
  d->config_index = g_all_count;
  g_all_count++;
}

static int read_config(void) {
  const char* env = getenv("SIMGPU_CONFIG");
  FILE* f;
  char* line = NULL;
  size_t cap = 0;
  ssize_t len;
  int lineno = 0;

  const char* path = (env != NULL && env[0] != '\0') ? env : SIMGPU_DEFAULT_CONFIG;
  char cwd[2048];

  /* a relative path is taken from the working directory now, so that every process of one
   * config finds the same state directory */
  if (path[0] != '/' && getcwd(cwd, sizeof(cwd)) != NULL)
    snprintf(g_config_path, sizeof(g_config_path), "%s/%s", cwd, path);
  else
    snprintf(g_config_path, sizeof(g_config_path), "%s", path);
  f = fopen(g_config_path, "re");
  if (f == NULL) {
    warn_once("cannot read device config %s: %s", g_config_path, strerror(errno));
    return -1;
  }
  while ((len = getline(&line, &cap, f)) >= 0) {
    char* s = line;
    lineno++;
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
    while (*s == ' ' || *s == '\t') s++;
    if (*s == '\0' || *s == '#') continue;
    parse_config_line(line, lineno);
  }
  free(line);
  fclose(f);
  return 0;
}

static int is_decimal(const char* s) {
  if (*s == '\0') return 0;
  for (; *s; s++)
    if (!isdigit((unsigned char)*s)) return 0;
  return 1;
}

static int already_listed(const int* list, int n, int idx) {
  for (int i = 0; i < n; i++)
    if (list[i] == idx) return 1;
  return 0;
}

/* The config index that a visible-devices token names among list[0..n) (config indices): a decimal
 * position in the list, else a UUID (by_prefix: a prefix matching exactly one); -1 for none. */
static int resolve_token(const char* tok, const int* list, int n, int by_prefix) {
  int idx = -1;
  int matches = 0;
  if (is_decimal(tok)) {
    long v = strtol(tok, NULL, 10);
    return (v >= 0 && v < n) ? list[v] : -1;
  }
  if (tok[0] == '\0') return -1;
  for (int i = 0; i < n; i++) {
    const char* uuid = g_all[list[i]].uuid;
    if (by_prefix ? strncmp(uuid, tok, strlen(tok)) == 0 : strcmp(uuid, tok) == 0) {
      idx = list[i];
      matches++;
    }
  }
  return (by_prefix && matches != 1) ? -1 : idx;
}

/* NVIDIA_VISIBLE_DEVICES: unset/empty/all -> all; none/void -> none; else UUIDs or indices. */
static void apply_nvidia_visible(void) {
  const char* env = getenv("NVIDIA_VISIBLE_DEVICES");
  int all[SIMGPU_MAX_DEVICES];
  char buf[4096];
  char* save = NULL;

  for (int i = 0; i < g_all_count; i++) all[i] = i;
  g_visible_count = 0;
  if (env == NULL || env[0] == '\0' || strcmp(env, "all") == 0) {
    memcpy(g_visible, all, sizeof(int) * (size_t)g_all_count);
    g_visible_count = g_all_count;
    return;
  }
  if (strcmp(env, "none") == 0 || strcmp(env, "void") == 0) return;
  snprintf(buf, sizeof(buf), "%s", env);
  for (char* tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
    int idx;
    trim(tok);
    idx = resolve_token(tok, all, g_all_count, 0);
    if (idx >= 0 && !already_listed(g_visible, g_visible_count, idx))
      g_visible[g_visible_count++] = idx;
  }
}

/* CUDA_VISIBLE_DEVICES (CUDA only, on top of the container's set): indices into that set or UUID
 * prefixes; like the real driver, parsing stops at the first token that names no device. */
static void apply_cuda_visible(void) {
  const char* env = getenv("CUDA_VISIBLE_DEVICES");
  char buf[4096];
  char* save = NULL;
  int out[SIMGPU_MAX_DEVICES];
  int n = 0;

  if (env == NULL) return;
  snprintf(buf, sizeof(buf), "%s", env);
  for (char* tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
    int idx;
    trim(tok);
    idx = resolve_token(tok, g_visible, g_visible_count, 1);
    if (idx < 0) break;
    if (!already_listed(out, n, idx)) out[n++] = idx;
  }
  memcpy(g_visible, out, sizeof(int) * (size_t)n);
  g_visible_count = n;
}

static void atfork_child(void) {
  for (int i = 0; i < SIMGPU_MAX_DEVICES; i++) pthread_mutex_init(&g_handles[i].mutex, NULL);
  g_self_pid = 0;
}

static void load_once(void) {
  for (int i = 0; i < SIMGPU_MAX_DEVICES; i++) {
    pthread_mutex_init(&g_handles[i].mutex, NULL);
    g_handles[i].fd = -1;
    g_handles[i].fd_pid = 0;
    g_handles[i].map = NULL;
  }
  pthread_atfork(NULL, NULL, atfork_child);
  g_load_result = read_config();
  apply_nvidia_visible();
  if (g_load_for_cuda) apply_cuda_visible();
}

int simgpu_load(int for_cuda) {
  g_load_for_cuda = for_cuda;
  pthread_once(&g_load_once, load_once);
  return g_load_result;
}

int simgpu_count(void) { return g_visible_count; }

const struct simgpu_device* simgpu_device_at(int visible_index) {
  if (visible_index < 0 || visible_index >= g_visible_count) return NULL;
  return &g_all[g_visible[visible_index]];
}

/* ---- time ---- */

uint64_t simgpu_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

void simgpu_sleep_until(uint64_t deadline_ns) {
  struct timespec ts;
  ts.tv_sec = (time_t)(deadline_ns / 1000000000ULL);
  ts.tv_nsec = (long)(deadline_ns % 1000000000ULL);
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
  }
}

void simgpu_spin_until(uint64_t deadline_ns) {
  volatile uint64_t sink = 0;
  while (simgpu_now_ns() < deadline_ns) {
    for (int i = 0; i < 1000; i++) sink += (uint64_t)i;
  }
  (void)sink;
}

static uint64_t parse_size(const char* s, uint64_t fallback) {
  char* end = NULL;
  long double v;
  if (s == NULL || *s == '\0') return fallback;
  errno = 0;
  v = strtold(s, &end);
  if (errno != 0 || end == s || v < 0) return fallback;
  while (*end == ' ') end++;
  switch (*end) {
    case 'k': case 'K': v *= (end[1] == 'i' || end[1] == 'I') ? 1024.0L : 1000.0L; break;
    case 'm': case 'M': v *= (end[1] == 'i' || end[1] == 'I') ? 1048576.0L : 1e6L; break;
    case 'g': case 'G': v *= (end[1] == 'i' || end[1] == 'I') ? 1073741824.0L : 1e9L; break;
    case '\0': break;
    default: return fallback;
  }
  return (uint64_t)v;
}

uint64_t simgpu_context_bytes(void) {
  return parse_size(getenv("SIMGPU_CONTEXT_BYTES"), SIMGPU_DEFAULT_CONTEXT_BYTES);
}

/* ---- processes ---- */

/* Field 22 (starttime) and the state letter of /proc/<pid>/stat; -1 when unreadable. */
static int read_proc_stat(pid_t pid, uint64_t* starttime, char* state) {
  char path[64];
  char buf[1024];
  ssize_t n;
  int fd;
  char* p;
  unsigned long long st = 0;

  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = '\0';
  p = strrchr(buf, ')');
  if (p == NULL || p[1] == '\0') return -1;
  p += 2; /* field 3: state */
  *state = *p;
  /* skip fields 3..21 (19 fields) to reach field 22 */
  for (int field = 3; field < 22; field++) {
    p = strchr(p, ' ');
    if (p == NULL) return -1;
    p++;
  }
  if (sscanf(p, "%llu", &st) != 1) return -1;
  *starttime = st;
  return 0;
}

static void identify_self(void) {
  pid_t pid = getpid();
  char state = 0;
  uint64_t st = 0;
  if (g_self_pid == pid) return;
  if (read_proc_stat(pid, &st, &state) != 0) st = 0;
  g_self_starttime = st;
  g_self_pid = pid;
}

static int proc_alive(const struct simgpu_proc* p) {
  uint64_t st = 0;
  char state = 0;
  if (p->pid <= 0) return 0;
  if (kill(p->pid, 0) != 0 && errno == ESRCH) return 0;
  if (read_proc_stat(p->pid, &st, &state) == 0) {
    if (state == 'Z' || state == 'X') return 0;        /* exited, not yet reaped */
    if (p->starttime != 0 && st != p->starttime) return 0; /* pid reused */
  }
  return 1;
}

/* ---- state file ---- */

static void sanitize(const char* in, char* out, size_t cap) {
  size_t i = 0;
  for (; in[i] != '\0' && i + 1 < cap; i++) {
    char c = in[i];
    out[i] = (isalnum((unsigned char)c) || c == '-' || c == '_' || c == '.') ? c : '_';
  }
  out[i] = '\0';
}

static int open_state(struct dev_handle* h, const struct simgpu_device* d) {
  char dir[4200];
  char name[SIMGPU_UUID_LEN];
  char path[4400];
  struct stat sb;
  void* map;
  int fd;

  snprintf(dir, sizeof(dir), "%s.d", g_config_path);
  if (mkdir(dir, 0777) == 0) {
    chmod(dir, 01777); /* processes of every user share it, whatever their umask */
  } else if (errno != EEXIST) {
    warn_once("cannot create state directory %s: %s", dir, strerror(errno));
    return -1;
  }
  sanitize(d->uuid, name, sizeof(name));
  snprintf(path, sizeof(path), "%s/%s.state", dir, name);
  fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) {
    warn_once("cannot open state file %s: %s", path, strerror(errno));
    return -1;
  }
  if (fstat(fd, &sb) == 0 && sb.st_size == 0 && sb.st_uid == geteuid()) fchmod(fd, 0666);
  if (fstat(fd, &sb) != 0) {
    close(fd);
    return -1;
  }
  if ((size_t)sb.st_size < sizeof(struct simgpu_state)) {
    /* growing to the full size under flock: a concurrent opener sees zeros or the full file */
    while (flock(fd, LOCK_EX) != 0 && errno == EINTR) {
    }
    if (fstat(fd, &sb) == 0 && (size_t)sb.st_size < sizeof(struct simgpu_state) &&
        ftruncate(fd, (off_t)sizeof(struct simgpu_state)) != 0) {
      flock(fd, LOCK_UN);
      close(fd);
      return -1;
    }
    flock(fd, LOCK_UN);
  }
  if (h->map == NULL) {
    map = mmap(NULL, sizeof(struct simgpu_state), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
      close(fd);
      return -1;
    }
    h->map = (struct simgpu_state*)map;
  }
  h->fd = fd;
  h->fd_pid = getpid();
  return 0;
}

/* Lock the device's state (process mutex + flock); NULL when unusable (nothing held then). */
static struct simgpu_state* lock_state(int dev) {
  const struct simgpu_device* d = simgpu_device_at(dev);
  struct dev_handle* h;
  struct simgpu_state* s;

  if (d == NULL) return NULL;
  h = &g_handles[d->config_index];
  pthread_mutex_lock(&h->mutex);
  identify_self();
  if (h->fd >= 0 && h->fd_pid != g_self_pid) {
    close(h->fd); /* inherited over fork: its open file description (and flock) is the parent's */
    h->fd = -1;
  }
  if (h->fd < 0 && open_state(h, d) != 0) {
    pthread_mutex_unlock(&h->mutex);
    return NULL;
  }
  while (flock(h->fd, LOCK_EX) != 0) {
    if (errno != EINTR) {
      pthread_mutex_unlock(&h->mutex);
      return NULL;
    }
  }
  s = h->map;
  if (s->magic != SIMGPU_STATE_MAGIC || s->version != SIMGPU_STATE_VERSION) {
    memset(s, 0, sizeof(*s));
    s->magic = SIMGPU_STATE_MAGIC;
    s->version = SIMGPU_STATE_VERSION;
  }
  return s;
}

static void unlock_state(int dev) {
  struct dev_handle* h = &g_handles[simgpu_device_at(dev)->config_index];
  flock(h->fd, LOCK_UN);
  pthread_mutex_unlock(&h->mutex);
}

/* This process's slot, created (reusing a free or dead one) when create != 0. */
static struct simgpu_proc* my_slot(struct simgpu_state* s, int create) {
  struct simgpu_proc* free_slot = NULL;
  for (int i = 0; i < SIMGPU_MAX_PROCS; i++) {
    struct simgpu_proc* p = &s->procs[i];
    if (p->pid == g_self_pid && p->starttime == g_self_starttime) return p;
  }
  if (!create) return NULL;
  for (int i = 0; i < SIMGPU_MAX_PROCS && free_slot == NULL; i++)
    if (s->procs[i].pid == 0) free_slot = &s->procs[i];
  for (int i = 0; i < SIMGPU_MAX_PROCS && free_slot == NULL; i++)
    if (!proc_alive(&s->procs[i])) free_slot = &s->procs[i];
  if (free_slot == NULL) return NULL;
  memset(free_slot, 0, sizeof(*free_slot));
  free_slot->pid = g_self_pid;
  free_slot->starttime = g_self_starttime;
  return free_slot;
}

static uint64_t slot_bytes(const struct simgpu_proc* p) {
  return p->bytes + (p->ctx_count > 0 ? p->ctx_bytes : 0);
}

/* Used bytes of live processes; frees the slots of dead ones. */
static uint64_t used_locked(struct simgpu_state* s) {
  uint64_t used = 0;
  for (int i = 0; i < SIMGPU_MAX_PROCS; i++) {
    struct simgpu_proc* p = &s->procs[i];
    if (p->pid == 0) continue;
    if (!proc_alive(p)) {
      memset(p, 0, sizeof(*p));
      continue;
    }
    used += slot_bytes(p);
  }
  return used;
}

int simgpu_mem_add(int dev, uint64_t size, int check) {
  struct simgpu_state* s = lock_state(dev);
  struct simgpu_proc* p;
  int rc = 0;
  if (s == NULL) return -1;
  if (check) {
    uint64_t used = used_locked(s);
    uint64_t total = simgpu_device_at(dev)->total_bytes;
    if (used > total || size > total - used) rc = 1;
  }
  if (rc == 0) {
    p = my_slot(s, 1);
    if (p == NULL)
      rc = -1;
    else
      p->bytes += size;
  }
  unlock_state(dev);
  return rc;
}

int simgpu_mem_sub(int dev, uint64_t size) {
  struct simgpu_state* s = lock_state(dev);
  struct simgpu_proc* p;
  if (s == NULL) return -1;
  p = my_slot(s, 0);
  if (p != NULL) {
    p->bytes = (p->bytes > size) ? p->bytes - size : 0;
    if (p->bytes == 0 && p->ctx_count <= 0) memset(p, 0, sizeof(*p));
  }
  unlock_state(dev);
  return 0;
}

int simgpu_ctx_add(int dev, int delta) {
  struct simgpu_state* s = lock_state(dev);
  struct simgpu_proc* p;
  int rc = 0;
  if (s == NULL) return -1;
  p = my_slot(s, delta > 0);
  if (p == NULL) {
    rc = (delta > 0) ? -1 : 0;
  } else {
    if (p->ctx_count <= 0 && delta > 0) p->ctx_bytes = simgpu_context_bytes();
    p->ctx_count += delta;
    if (p->ctx_count < 0) p->ctx_count = 0;
    if (p->bytes == 0 && p->ctx_count == 0) memset(p, 0, sizeof(*p));
  }
  unlock_state(dev);
  return rc;
}

int simgpu_mem_used(int dev, uint64_t* used) {
  struct simgpu_state* s = lock_state(dev);
  if (s == NULL) return -1;
  *used = used_locked(s);
  unlock_state(dev);
  return 0;
}

int simgpu_timeline_append(int dev, uint64_t duration_ns, uint64_t* start, uint64_t* end) {
  struct simgpu_state* s = lock_state(dev);
  uint64_t now, b, e;
  if (s == NULL) return -1;
  now = simgpu_now_ns();
  b = (s->busy_until_ns > now) ? s->busy_until_ns : now;
  e = b + duration_ns;
  s->busy_until_ns = e;
  if (duration_ns > 0) {
    uint32_t last = (s->interval_head + SIMGPU_MAX_INTERVALS - 1) % SIMGPU_MAX_INTERVALS;
    if (s->interval_count > 0 && s->intervals[last].end_ns == b) {
      s->intervals[last].end_ns = e; /* contiguous: merge */
    } else {
      s->intervals[s->interval_head].start_ns = b;
      s->intervals[s->interval_head].end_ns = e;
      s->interval_head = (s->interval_head + 1) % SIMGPU_MAX_INTERVALS;
      if (s->interval_count < SIMGPU_MAX_INTERVALS) s->interval_count++;
    }
  }
  unlock_state(dev);
  *start = b;
  *end = e;
  return 0;
}

int simgpu_utilization(int dev, uint64_t window_ns, unsigned int* percent) {
  struct simgpu_state* s = lock_state(dev);
  uint64_t now, lo, busy = 0;
  if (s == NULL) return -1;
  now = simgpu_now_ns();
  lo = (now > window_ns) ? now - window_ns : 0;
  for (uint32_t k = 0; k < s->interval_count; k++) {
    uint32_t i = (s->interval_head + SIMGPU_MAX_INTERVALS - 1 - k) % SIMGPU_MAX_INTERVALS;
    uint64_t b = s->intervals[i].start_ns;
    uint64_t e = s->intervals[i].end_ns;
    if (e <= lo) break; /* intervals are in time order, newest last */
    if (b < lo) b = lo;
    if (e > now) e = now;
    if (e > b) busy += e - b;
  }
  unlock_state(dev);
  if (window_ns == 0) {
    *percent = 0;
  } else {
    uint64_t pct = (busy * 100 + window_ns / 2) / window_ns;
    *percent = (unsigned int)(pct > 100 ? 100 : pct);
  }
  return 0;
}

int simgpu_processes(int dev, struct simgpu_proc_usage* out, int max) {
  struct simgpu_state* s = lock_state(dev);
  int n = 0;
  if (s == NULL) return -1;
  (void)used_locked(s); /* drop dead processes */
  for (int i = 0; i < SIMGPU_MAX_PROCS; i++) {
    struct simgpu_proc* p = &s->procs[i];
    if (p->pid == 0 || (p->bytes == 0 && p->ctx_count <= 0)) continue;
    if (n < max && out != NULL) {
      out[n].pid = (uint32_t)p->pid;
      out[n].bytes = slot_bytes(p);
    }
    n++;
  }
  unlock_state(dev);
  return n;
}

/* ---- GPU health, raised by the fault injector (simcuda.c) ---- */

int simgpu_health_raise(int dev, const struct simgpu_health* delta) {
  struct simgpu_state* s = lock_state(dev);
  struct simgpu_health* h;
  if (s == NULL) return -1;
  h = &s->health;
  h->ecc_volatile_corrected += delta->ecc_volatile_corrected;
  h->ecc_volatile_uncorrected += delta->ecc_volatile_uncorrected;
  h->ecc_aggregate_corrected += delta->ecc_aggregate_corrected;
  h->ecc_aggregate_uncorrected += delta->ecc_aggregate_uncorrected;
  h->retired_pages_dbe += delta->retired_pages_dbe;
  if (delta->remap_failure) h->remap_failure = 1;
  if (delta->lost) h->lost = 1;
  unlock_state(dev);
  return 0;
}

/* Whether the device's state file exists (or is open here): health is read without creating one. */
static int state_exists(int dev) {
  const struct simgpu_device* d = simgpu_device_at(dev);
  char name[SIMGPU_UUID_LEN];
  char path[4400];
  struct stat sb;
  if (d == NULL) return 0;
  if (g_handles[d->config_index].fd >= 0) return 1;
  sanitize(d->uuid, name, sizeof(name));
  snprintf(path, sizeof(path), "%s.d/%s.state", g_config_path, name);
  return stat(path, &sb) == 0;
}

int simgpu_health_read(int dev, struct simgpu_health* out) {
  struct simgpu_state* s;
  if (!state_exists(dev)) {
    memset(out, 0, sizeof(*out)); /* no state yet: nothing was ever raised */
    return 0;
  }
  s = lock_state(dev);
  if (s == NULL) return -1;
  *out = s->health;
  unlock_state(dev);
  return 0;
}
