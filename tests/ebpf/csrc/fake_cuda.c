/* A fake libcuda.so.1: the real driver entry points with real signatures. Launches and
 * copies do nothing; handles are filled so callers can go on; synchronising calls block
 * for a short, known time so measured durations have a floor. Entry points share static
 * helpers, never call one another's exported symbols (nor does the fake runtime call the
 * driver's where the real one would not reach them): the probe of a callee would stand in
 * for a caller's missing probe. */
#include "cuda_fake.h"
#include "fake_fail.h"
#include <pthread.h>
int fake_captured(CUstream s);
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SYNC_SLEEP_NS 2000000L /* 2 ms */

static void block_a_while(void) {
  struct timespec t = {0, SYNC_SLEEP_NS};
  nanosleep(&t, NULL);
}


/* A simulated GPU clock (issue #27): each launch of a kernel runs for the GPU time set by
 * fake_kernel_duration (0 by default: done at once); a stream runs its work in order; an
 * event completes when the work recorded on its stream before it does; a stream that
 * waits on an event runs its later work after that event completes. The legacy stream
 * (NULL, 0x1) is one stream; the per-thread default stream (0x2) is one per thread.
 * Times are CLOCK_MONOTONIC, bpf_ktime_get_ns's clock. */
#define SIM_MAX 4096
static struct { const void *fn; unsigned long long ns; } sim_kernels[SIM_MAX];
static struct { CUstream s; unsigned long long busy; } sim_streams[SIM_MAX];
static struct { CUevent e; unsigned long long done; } sim_events[SIM_MAX];
static __thread unsigned long long sim_per_thread_busy;
/* Work of destroyed streams runs on: the latest time it is done at (cuCtxSynchronize
 * waits for it). */
static unsigned long long sim_retired_busy;
static pthread_mutex_t sim_lock = PTHREAD_MUTEX_INITIALIZER;
#define CUDA_ERROR_NOT_READY 600

static unsigned long long sim_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (unsigned long long)t.tv_sec * 1000000000ULL + (unsigned long long)t.tv_nsec;
}
static void sim_sleep_until(unsigned long long when) {
  for (unsigned long long now = sim_now(); now < when; now = sim_now()) {
    struct timespec t = {(time_t)((when - now) / 1000000000ULL),
                         (long)((when - now) % 1000000000ULL)};
    nanosleep(&t, NULL);
  }
}
void fake_kernel_duration(const void *function, unsigned long long ns) {
  pthread_mutex_lock(&sim_lock);
  int i = 0;
  while (i < SIM_MAX - 1 && sim_kernels[i].fn && sim_kernels[i].fn != function) i++;
  sim_kernels[i].fn = function;
  sim_kernels[i].ns = ns;
  pthread_mutex_unlock(&sim_lock);
}
/* The stream's "busy until" (under sim_lock). */
static unsigned long long *sim_busy(CUstream s) {
  if (s == (CUstream)0x2) return &sim_per_thread_busy;
  if (s == NULL) s = (CUstream)0x1; /* the legacy stream */
  int i = 0;
  while (i < SIM_MAX - 1 && sim_streams[i].s && sim_streams[i].s != s) i++;
  sim_streams[i].s = s;
  return &sim_streams[i].busy;
}
static unsigned long long *sim_event(CUevent e) {
  int i = 0;
  while (i < SIM_MAX - 1 && sim_events[i].e && sim_events[i].e != e) i++;
  sim_events[i].e = e;
  return &sim_events[i].done;
}
static void sim_launch(CUstream s, const void *f) {
  pthread_mutex_lock(&sim_lock);
  unsigned long long ns = 0;
  for (int i = 0; i < SIM_MAX && sim_kernels[i].fn; i++)
    if (sim_kernels[i].fn == f) ns = sim_kernels[i].ns;
  unsigned long long *busy = sim_busy(s), now = sim_now();
  *busy = (*busy > now ? *busy : now) + ns;
  pthread_mutex_unlock(&sim_lock);
}
static unsigned long long sim_stream_done(CUstream s) {
  pthread_mutex_lock(&sim_lock);
  unsigned long long done = *sim_busy(s);
  pthread_mutex_unlock(&sim_lock);
  return done;
}
static unsigned long long sim_all_done(void) {
  pthread_mutex_lock(&sim_lock);
  unsigned long long done = sim_per_thread_busy;
  if (sim_retired_busy > done) done = sim_retired_busy;
  for (int i = 0; i < SIM_MAX && sim_streams[i].s; i++)
    if (sim_streams[i].busy > done) done = sim_streams[i].busy;
  pthread_mutex_unlock(&sim_lock);
  return done;
}
CUresult cuEventCreate(CUevent *e, unsigned int flags) {
  FAIL_IF("cuEventCreate"); (void)flags; *e = (CUevent)malloc(8); return 0; }
CUresult cuEventDestroy_v2(CUevent e) {
  FAIL_IF("cuEventDestroy_v2");
  pthread_mutex_lock(&sim_lock);
  *sim_event(e) = 0;
  pthread_mutex_unlock(&sim_lock);
  return 0;
}
CUresult cuEventQuery(CUevent e) {
  FAIL_IF("cuEventQuery");
  pthread_mutex_lock(&sim_lock);
  unsigned long long done = *sim_event(e);
  pthread_mutex_unlock(&sim_lock);
  return sim_now() >= done ? 0 : CUDA_ERROR_NOT_READY;
}
CUresult cuEventElapsedTime(float *ms, CUevent start, CUevent end) {
  FAIL_IF("cuEventElapsedTime");
  pthread_mutex_lock(&sim_lock);
  unsigned long long a = *sim_event(start), b = *sim_event(end);
  pthread_mutex_unlock(&sim_lock);
  if (sim_now() < a || sim_now() < b) return CUDA_ERROR_NOT_READY;
  *ms = (float)((double)((long long)b - (long long)a) / 1e6);
  return 0;
}
/* A destroyed stream's handle is given to the next stream created, as a real driver may
 * do (its handle is the address of a freed object): one kept for reuse at a time. */
static CUstream sim_freed_stream;
CUresult cuStreamCreate(CUstream *s, unsigned int flags) {
  FAIL_IF("cuStreamCreate");
  (void)flags;
  pthread_mutex_lock(&sim_lock);
  *s = sim_freed_stream ? sim_freed_stream : (CUstream)malloc(8);
  sim_freed_stream = NULL;
  pthread_mutex_unlock(&sim_lock);
  return 0;
}
/* Its pending work runs on (counted in sim_all_done); the handle starts idle. */
CUresult cuStreamDestroy_v2(CUstream s) {
  FAIL_IF("cuStreamDestroy_v2");
  if (s == NULL || s == (CUstream)0x1 || s == (CUstream)0x2) return 400; /* invalid handle */
  pthread_mutex_lock(&sim_lock);
  unsigned long long *busy = sim_busy(s);
  if (*busy > sim_retired_busy) sim_retired_busy = *busy;
  *busy = 0;
  if (!sim_freed_stream) sim_freed_stream = s;
  else free(s);
  pthread_mutex_unlock(&sim_lock);
  return 0;
}
CUresult cuStreamQuery(CUstream s) {
  FAIL_IF("cuStreamQuery");
  return sim_now() >= sim_stream_done(s) ? 0 : CUDA_ERROR_NOT_READY;
}
CUresult cuInit(unsigned int flags) {
  FAIL_IF("cuInit"); (void)flags; return 0; }
CUresult cuModuleLoad(CUmodule *module, const char *fname) {
  FAIL_IF("cuModuleLoad");
  *module = (CUmodule)strdup(fname);
  return 0;
}
CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name) {
  FAIL_IF("cuModuleGetFunction");
  (void)hmod;
  *hfunc = (CUfunction)strdup(name);
  return 0;
}
CUresult cuLibraryLoadFromFile(CUlibrary *library, const char *fileName, void *a, void *b,
                               unsigned int c, void *d, void *e, unsigned int f) {
  FAIL_IF("cuLibraryLoadFromFile");
  (void)a; (void)b; (void)c; (void)d; (void)e; (void)f;
  *library = (CUlibrary)strdup(fileName);
  return 0;
}
CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name) {
  FAIL_IF("cuLibraryGetKernel");
  (void)library;
  *pKernel = (CUkernel)strdup(name);
  return 0;
}
CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel) {
  FAIL_IF("cuKernelGetFunction");
  (void)kernel;
  *pFunc = (CUfunction)malloc(16);
  return 0;
}
CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                        unsigned int bx, unsigned int by, unsigned int bz, unsigned int smem,
                        CUstream s, void **params, void **extra) {
  FAIL_IF("cuLaunchKernel");
  if (fake_captured(s)) return 0;
  sim_launch(s, f);
  (void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)smem; (void)s;
  (void)params; (void)extra;
  __asm__ volatile("" ::: "memory");
  return 0;
}
CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy,
                                   unsigned int gz, unsigned int bx, unsigned int by,
                                   unsigned int bz, unsigned int smem, CUstream s,
                                   void **params) {
  FAIL_IF("cuLaunchCooperativeKernel");
  (void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)smem;
  (void)params;
  if (fake_captured(s)) return 0;
  sim_launch(s, f);
  __asm__ volatile("" ::: "memory");
  return 0;
}
CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                          void **extra) {
  FAIL_IF("cuLaunchKernelEx");
  if (fake_captured(config->hStream)) return 0;
  sim_launch(config->hStream, f);
  (void)config; (void)f; (void)kernelParams; (void)extra;
  __asm__ volatile("" ::: "memory");
  return 0;
}
CUresult cuGraphLaunch(CUgraphExec e, CUstream s) {
  FAIL_IF("cuGraphLaunch"); (void)e; (void)s; return 0; }
static CUresult alloc(CUdeviceptr *dptr, size_t n) {
  *dptr = (CUdeviceptr)malloc(n ? n : 1);
  return *dptr ? 0 : 2;
}
CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t n) {
  FAIL_IF("cuMemAlloc_v2");
  return alloc(dptr, n);
}
CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t n, unsigned int flags) {
  FAIL_IF("cuMemAllocManaged");
  (void)flags;
  return alloc(dptr, n);
}
CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t n, CUstream s) {
  FAIL_IF("cuMemAllocAsync");
  (void)s;
  return alloc(dptr, n);
}
CUresult cuMemFree_v2(CUdeviceptr p) {
  FAIL_IF("cuMemFree_v2"); free((void *)p); return 0; }
CUresult cuMemcpy(CUdeviceptr d, CUdeviceptr s, size_t n) {
  FAIL_IF("cuMemcpy"); (void)d; (void)s; (void)n; return 0; }
CUresult cuMemcpyAsync(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) {
  FAIL_IF("cuMemcpyAsync");
  (void)d; (void)s; (void)n; (void)st; return 0;
}
CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n) {
  FAIL_IF("cuMemcpyHtoD_v2");
  (void)d; (void)s; (void)n; return 0;
}
CUresult cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n) {
  FAIL_IF("cuMemcpyDtoH_v2"); (void)d; (void)s; (void)n; return 0; }
CUresult cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n) {
  FAIL_IF("cuMemcpyDtoD_v2");
  (void)d; (void)s; (void)n; return 0;
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *s, size_t n, CUstream st) {
  FAIL_IF("cuMemcpyHtoDAsync_v2");
  (void)d; (void)s; (void)n; (void)st; return 0;
}
CUresult cuMemcpyDtoHAsync_v2(void *d, CUdeviceptr s, size_t n, CUstream st) {
  FAIL_IF("cuMemcpyDtoHAsync_v2");
  (void)d; (void)s; (void)n; (void)st; return 0;
}
/* (the simulated work done, then the floor) */
CUresult cuStreamSynchronize(CUstream s) {
  FAIL_IF("cuStreamSynchronize"); sim_sleep_until(sim_stream_done(s)); block_a_while();
  return 0;
}
CUresult cuCtxSynchronize(void) {
  FAIL_IF("cuCtxSynchronize"); sim_sleep_until(sim_all_done()); block_a_while(); return 0; }
CUresult cuCtxSynchronize_v2(CUcontext ctx) {
  FAIL_IF("cuCtxSynchronize_v2"); (void)ctx; sim_sleep_until(sim_all_done());
  block_a_while();
  return 0;
}
CUresult cuEventSynchronize(void *e) {
  FAIL_IF("cuEventSynchronize");
  pthread_mutex_lock(&sim_lock);
  unsigned long long done = *sim_event((CUevent)e);
  pthread_mutex_unlock(&sim_lock);
  sim_sleep_until(done);
  block_a_while();
  return 0;
}

/* Devices. FAKE_CUDA_DEVICES="GPU-<uuid>@<pci bus id>;..." lists the GPUs the driver
 * sees, in CUDA's enumeration order (fastest first by default: not NVML's order).
 * CUDA_VISIBLE_DEVICES (indices into that order, or UUIDs) is read when the devices
 * are first asked for, as the real driver reads it at cuInit: a program may set it at
 * run time. Device ordinals are CUdevice values, as in the real driver. */
#define DEV_MAX 16
static struct { CUuuid uuid; char pci[32]; } all_devs[DEV_MAX], vis_devs[DEV_MAX];
static int all_n = -1, vis_n;
static CUcontext primary[DEV_MAX];
static pthread_mutex_t devs_lock = PTHREAD_MUTEX_INITIALIZER;

static int hex_digit(char c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
       : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static void parse_uuid(const char *text, CUuuid *out) {
  int n = 0, hi = -1;
  memset(out, 0, sizeof *out);
  if (strncmp(text, "GPU-", 4) == 0) text += 4;
  for (; *text && *text != '@' && n < 16; text++) {
    int d = hex_digit(*text);
    if (d < 0) continue;
    if (hi < 0) hi = d;
    else { out->bytes[n++] = (char)(hi << 4 | d); hi = -1; }
  }
}

static void devices_init(void) {
  pthread_mutex_lock(&devs_lock);
  if (all_n >= 0) { pthread_mutex_unlock(&devs_lock); return; }
  all_n = 0;
  const char *spec = getenv("FAKE_CUDA_DEVICES");
  while (spec && *spec && all_n < DEV_MAX) {
    const char *end = strchr(spec, ';');
    const char *at = strchr(spec, '@');
    parse_uuid(spec, &all_devs[all_n].uuid);
    if (at && (!end || at < end)) {
      size_t len = end ? (size_t)(end - at - 1) : strlen(at + 1);
      if (len >= sizeof all_devs[0].pci) len = sizeof all_devs[0].pci - 1;
      memcpy(all_devs[all_n].pci, at + 1, len);
    }
    all_n++;
    spec = end ? end + 1 : NULL;
  }
  const char *vis = getenv("CUDA_VISIBLE_DEVICES");
  if (!vis) {
    memcpy(vis_devs, all_devs, sizeof all_devs);
    vis_n = all_n;
  } else {
    while (*vis && vis_n < DEV_MAX) {
      if (strncmp(vis, "GPU-", 4) == 0) {
        CUuuid u;
        parse_uuid(vis, &u);
        for (int i = 0; i < all_n; i++)
          if (memcmp(&u, &all_devs[i].uuid, sizeof u) == 0) vis_devs[vis_n++] = all_devs[i];
      } else {
        int i = atoi(vis);
        if (i < 0 || i >= all_n) break; /* like CUDA: an invalid entry ends the list */
        vis_devs[vis_n++] = all_devs[i];
      }
      vis = strchr(vis, ',');
      if (!vis) break;
      vis++;
    }
  }
  pthread_mutex_unlock(&devs_lock);
}

#define CUDA_ERROR_INVALID_DEVICE 101
#define CUDA_ERROR_INVALID_CONTEXT 201
#define CHECK_DEV(dev) do { devices_init(); \
    if ((dev) < 0 || (dev) >= vis_n) return CUDA_ERROR_INVALID_DEVICE; } while (0)

CUresult cuDeviceGetCount(int *count) {
  FAIL_IF("cuDeviceGetCount"); devices_init(); *count = vis_n; return 0; }
CUresult cuDeviceGet(CUdevice *device, int ordinal) {
  FAIL_IF("cuDeviceGet"); CHECK_DEV(ordinal); *device = ordinal; return 0; }
CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) {
  FAIL_IF("cuDeviceGetUuid"); CHECK_DEV(dev); *uuid = vis_devs[dev].uuid; return 0; }
CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev) {
  FAIL_IF("cuDeviceGetUuid_v2"); CHECK_DEV(dev); *uuid = vis_devs[dev].uuid; return 0; }
CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev) {
  FAIL_IF("cuDeviceGetPCIBusId");
  CHECK_DEV(dev);
  snprintf(pciBusId, (size_t)len, "%s", vis_devs[dev].pci);
  return 0;
}
CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) {
  FAIL_IF("cuDevicePrimaryCtxRetain");
  CHECK_DEV(dev);
  pthread_mutex_lock(&devs_lock);
  if (!primary[dev]) primary[dev] = (CUcontext)malloc(64);
  *pctx = primary[dev];
  pthread_mutex_unlock(&devs_lock);
  return 0;
}

#define CTX_STACK_MAX 16
static __thread CUcontext ctx_stack[CTX_STACK_MAX];
static __thread int ctx_depth; /* ctx_stack[ctx_depth - 1] is current */

static CUresult ctx_create(CUcontext *pctx, CUdevice dev) {
  CHECK_DEV(dev);
  if (ctx_depth == CTX_STACK_MAX) return CUDA_ERROR_INVALID_CONTEXT;
  *pctx = (CUcontext)malloc(64);
  ctx_stack[ctx_depth++] = *pctx;
  return 0;
}
CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev) {
  FAIL_IF("cuCtxCreate_v2");
  (void)flags;
  return ctx_create(pctx, dev);
}
CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags,
                        CUdevice dev) {
  FAIL_IF("cuCtxCreate_v4");
  (void)params; (void)flags;
  return ctx_create(pctx, dev);
}
CUresult cuCtxSetCurrent(CUcontext ctx) {
  FAIL_IF("cuCtxSetCurrent");
  if (ctx_depth == 0) ctx_depth = 1;
  ctx_stack[ctx_depth - 1] = ctx;
  return 0;
}
CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  FAIL_IF("cuCtxPushCurrent_v2");
  if (ctx_depth == CTX_STACK_MAX) return CUDA_ERROR_INVALID_CONTEXT;
  ctx_stack[ctx_depth++] = ctx;
  return 0;
}
CUresult cuCtxPopCurrent_v2(CUcontext *pctx) {
  FAIL_IF("cuCtxPopCurrent_v2");
  if (ctx_depth == 0) return CUDA_ERROR_INVALID_CONTEXT;
  ctx_depth--;
  if (pctx) *pctx = ctx_stack[ctx_depth];
  return 0;
}

/* Strided, 3D and peer copies do nothing; pinned host memory is malloc'd. */
#define NOOP_COPY(name, ...)      \
  CUresult name(__VA_ARGS__) {    \
    FAIL_IF(#name);               \
    return 0;                     \
  }
NOOP_COPY(cuMemcpy2D_v2, const CUDA_MEMCPY2D *p)
NOOP_COPY(cuMemcpy2DUnaligned_v2, const CUDA_MEMCPY2D *p)
NOOP_COPY(cuMemcpy2DAsync_v2, const CUDA_MEMCPY2D *p, CUstream s)
NOOP_COPY(cuMemcpy3D_v2, const CUDA_MEMCPY3D *p)
NOOP_COPY(cuMemcpy3DAsync_v2, const CUDA_MEMCPY3D *p, CUstream s)
NOOP_COPY(cuMemcpy3DPeer, const CUDA_MEMCPY3D_PEER *p)
NOOP_COPY(cuMemcpy3DPeerAsync, const CUDA_MEMCPY3D_PEER *p, CUstream s)
NOOP_COPY(cuMemcpyPeer, CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n)
NOOP_COPY(cuMemcpyPeerAsync, CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc,
          size_t n, CUstream st)
CUresult cuMemHostAlloc(void **pp, size_t n, unsigned int flags) {
  FAIL_IF("cuMemHostAlloc");
  (void)flags;
  return alloc((CUdeviceptr *)pp, n);
}
CUresult cuMemAllocHost_v2(void **pp, size_t n) {
  FAIL_IF("cuMemAllocHost_v2");
  return alloc((CUdeviceptr *)pp, n);
}

/* Graphs: a graph counts its kernel nodes; a stream under capture (or joined to one
 * through an event recorded in it) adds the kernels launched on it to the capture's
 * graph instead of running them. Enough state to fail where CUDA fails: ending a
 * capture on a stream that is not capturing, instantiating no graph, updating an
 * executable graph to a graph of another shape (here: another number of kernels). */
#define CUDA_ERROR_ILLEGAL_STATE 401
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE 910
#define CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED 2
struct CUgraph_st { int kernels; };
struct CUgraphExec_st { int kernels; };
#define STREAMS_MAX 64
static struct { CUstream stream; CUgraph graph; } capturing[STREAMS_MAX];
static struct { CUevent event; CUgraph graph; } recorded[STREAMS_MAX];
static pthread_mutex_t graph_lock = PTHREAD_MUTEX_INITIALIZER;

static CUgraph capture_of(CUstream s) {
  for (int i = 0; i < STREAMS_MAX; i++)
    if (capturing[i].graph && capturing[i].stream == s) return capturing[i].graph;
  return NULL;
}
static void set_capture(CUstream s, CUgraph g) {
  for (int i = 0; i < STREAMS_MAX; i++)
    if (capturing[i].graph && capturing[i].stream == s) { capturing[i].graph = g; return; }
  for (int i = 0; i < STREAMS_MAX && g; i++)
    if (!capturing[i].graph) { capturing[i].stream = s; capturing[i].graph = g; return; }
}
/* A launch on `s`: recorded when `s` is under capture (returns 1). */
int fake_captured(CUstream s) {
  pthread_mutex_lock(&graph_lock);
  CUgraph g = capture_of(s);
  if (g) g->kernels++;
  pthread_mutex_unlock(&graph_lock);
  return g != NULL;
}

static CUresult begin_capture(CUstream s, CUgraph g) {
  pthread_mutex_lock(&graph_lock);
  CUresult rc = capture_of(s) ? CUDA_ERROR_ILLEGAL_STATE : 0;
  if (!rc) set_capture(s, g);
  pthread_mutex_unlock(&graph_lock);
  return rc;
}
CUresult cuStreamBeginCapture_v2(CUstream s, int mode) {
  FAIL_IF("cuStreamBeginCapture_v2");
  (void)mode;
  CUgraph g = calloc(1, sizeof *g);
  return begin_capture(s, g);
}
CUresult cuStreamBeginCaptureToGraph(CUstream s, CUgraph g, const CUgraphNode *deps,
                                     const void *data, size_t n, int mode) {
  FAIL_IF("cuStreamBeginCaptureToGraph");
  (void)deps; (void)data; (void)n; (void)mode;
  return g ? begin_capture(s, g) : CUDA_ERROR_INVALID_VALUE;
}
/* For the fake runtime, under a name that is not CUDA's (see the top). */
CUresult fake_recapture(CUstream s, CUgraph g) {
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  g->kernels = 0; /* the capture makes its nodes again */
  return begin_capture(s, g);
}
CUresult cuStreamBeginRecaptureToGraph(CUstream s, int mode, CUgraph g, void *callbackFunc,
                                       void *userData) {
  FAIL_IF("cuStreamBeginRecaptureToGraph");
  (void)mode; (void)callbackFunc; (void)userData;
  return fake_recapture(s, g);
}
CUresult cuStreamEndCapture(CUstream s, CUgraph *out) {
  pthread_mutex_lock(&graph_lock);
  CUgraph g = capture_of(s);
  /* The capture ends, on every stream that joined it. */
  for (int i = 0; i < STREAMS_MAX; i++)
    if (g && capturing[i].graph == g) capturing[i].graph = NULL;
  pthread_mutex_unlock(&graph_lock);
  if (!g) return CUDA_ERROR_ILLEGAL_STATE;
  FAIL_IF("cuStreamEndCapture"); /* a failed capture (invalidated): no graph */
  *out = g;
  return 0;
}
CUresult cuEventRecord(CUevent e, CUstream s) {
  FAIL_IF("cuEventRecord");
  pthread_mutex_lock(&graph_lock);
  CUgraph g = capture_of(s);
  int i = 0;
  while (i < STREAMS_MAX - 1 && recorded[i].event && recorded[i].event != e) i++;
  recorded[i].event = e;
  recorded[i].graph = g;
  pthread_mutex_unlock(&graph_lock);
  if (!g) {
    pthread_mutex_lock(&sim_lock);
    unsigned long long busy = *sim_busy(s), now = sim_now();
    *sim_event(e) = busy > now ? busy : now;
    pthread_mutex_unlock(&sim_lock);
  }
  return 0;
}
CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags) {
  FAIL_IF("cuStreamWaitEvent");
  (void)flags;
  pthread_mutex_lock(&graph_lock);
  for (int i = 0; i < STREAMS_MAX; i++)
    if (recorded[i].event == e && recorded[i].graph && !capture_of(s))
      set_capture(s, recorded[i].graph);
  pthread_mutex_unlock(&graph_lock);
  pthread_mutex_lock(&sim_lock);  /* the stream holds until the event completes */
  unsigned long long done = *sim_event(e), *busy = sim_busy(s);
  if (done > *busy) *busy = done;
  pthread_mutex_unlock(&sim_lock);
  return 0;
}
CUresult cuGraphCreate(CUgraph *out, unsigned int flags) {
  FAIL_IF("cuGraphCreate");
  (void)flags;
  *out = calloc(1, sizeof **out);
  return 0;
}
static CUresult kernel_node(CUgraphNode *node, CUgraph g, const CUDA_KERNEL_NODE_PARAMS *params) {
  if (!g || !params || (!params->func && !params->kern)) return CUDA_ERROR_INVALID_VALUE;
  g->kernels++;
  *node = malloc(8);
  return 0;
}
static CUresult child_node(CUgraphNode *node, CUgraph g, CUgraph child) {
  if (!g || !child) return CUDA_ERROR_INVALID_VALUE;
  g->kernels += child->kernels; /* a copy of the child as it is now */
  *node = malloc(8);
  return 0;
}
CUresult cuGraphAddKernelNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t n,
                              const CUDA_KERNEL_NODE_PARAMS *params) {
  FAIL_IF("cuGraphAddKernelNode");
  (void)deps; (void)n;
  return kernel_node(node, g, params);
}
CUresult cuGraphAddChildGraphNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps,
                                  size_t n, CUgraph child) {
  FAIL_IF("cuGraphAddChildGraphNode");
  (void)deps; (void)n;
  return child_node(node, g, child);
}
static CUresult add_node(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t n,
                         CUgraphNodeParams *p) {
  (void)deps; (void)n;
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  if (p->type == 0) return kernel_node(node, g, &p->kernel);
  if (p->type == 4) return child_node(node, g, p->graph.graph);
  *node = malloc(8); /* another kind of node: nothing to launch */
  return 0;
}
CUresult cuGraphAddNode(CUgraphNode *node, CUgraph g, const CUgraphNode *deps, size_t n,
                        CUgraphNodeParams *p) {
  FAIL_IF("cuGraphAddNode");
  return add_node(node, g, deps, n, p);
}
CUresult cuGraphAddNode_v2(CUgraphNode *node, CUgraph g, const CUgraphNode *deps,
                           const void *edges, size_t n, CUgraphNodeParams *p) {
  FAIL_IF("cuGraphAddNode_v2");
  (void)edges;
  return add_node(node, g, deps, n, p);
}
CUresult cuGraphAddNode_v3(CUgraphNode *node, CUgraph g, const CUgraphNode *deps,
                           const void *edges, size_t n, CUgraphNodeParams *p) {
  FAIL_IF("cuGraphAddNode_v3");
  (void)edges;
  return add_node(node, g, deps, n, p);
}
CUresult cuGraphClone(CUgraph *out, CUgraph g) {
  FAIL_IF("cuGraphClone");
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  *out = malloc(sizeof **out);
  **out = *g;
  return 0;
}
CUresult cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph g, unsigned long long flags) {
  FAIL_IF("cuGraphInstantiateWithFlags");
  (void)flags;
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  *exec = malloc(sizeof **exec);
  (*exec)->kernels = g->kernels;
  return 0;
}
/* The executable graph runs `g` from now on: only a graph of its shape. */
static CUresult exec_update(CUgraphExec e, CUgraph g, int *result) {
  if (!e || !g) return CUDA_ERROR_INVALID_VALUE;
  *result = e->kernels == g->kernels ? 0 : CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
  return *result ? CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE : 0;
}
CUresult cuGraphExecUpdate(CUgraphExec e, CUgraph g, CUgraphNode *error_node, int *result) {
  FAIL_IF("cuGraphExecUpdate");
  if (error_node) *error_node = NULL;
  return exec_update(e, g, result);
}
CUresult cuGraphExecUpdate_v2(CUgraphExec e, CUgraph g, CUgraphExecUpdateResultInfo *info) {
  FAIL_IF("cuGraphExecUpdate_v2");
  info->errorNode = info->errorFromNode = NULL;
  return exec_update(e, g, &info->result);
}
/* Destroyed handles are not freed: no later graph gets one again, so that what is kept
 * of a destroyed one is seen to be let go, not replaced. */
CUresult cuGraphDestroy(CUgraph g) {
  FAIL_IF("cuGraphDestroy");
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  g->kernels = -1;
  return 0;
}
CUresult cuGraphExecDestroy(CUgraphExec e) {
  FAIL_IF("cuGraphExecDestroy");
  if (!e) return CUDA_ERROR_INVALID_VALUE;
  e->kernels = -1;
  return 0;
}
