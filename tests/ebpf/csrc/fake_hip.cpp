/* A fake libamdhip64.so.5 (AMD's HIP runtime): the entry points that hipcc's output and
 * the workloads call, declared by the real HIP headers (Debian's ROCm 5.2.3, so the
 * compiler checks every signature against them), exported under the version nodes of
 * the real library (the build writes the version script from
 * tests/fixtures/hip/). Calls newer than 5.2 (hipLaunchKernelExC, hipDrvLaunchKernelEx,
 * hipModuleLaunchCooperativeKernel) are declared here as ROCm 6.5 / 5.5 declare them.
 * No entry point calls another exported one: one probe never stands in for another.
 * Calls fail on demand: FAKE_HIP_FAIL="hipMalloc=2x1,hipLaunchKernel=100" (fake_fail.h).
 * FAKE_HIP_EXIT_IN=hipLaunchKernel: the process exits inside its first hipLaunchKernel
 * (a process killed mid-launch: the call never returns).
 * A simulated GPU clock, as the fake CUDA libraries' (issue #27):
 * FAKE_HIP_KERNEL_NS="k_polled=20000000,k_first=2000000000" gives each launch of a kernel
 * whose registered (or module-looked-up) name contains the key that much GPU time; a
 * stream runs its work in order; an event completes when the work recorded on its stream
 * before it does; hipEventQuery / hipStreamQuery answer hipErrorNotReady until then, the
 * synchronising calls wait for it, hipEventElapsedTime gives the simulated time, and a
 * stream that waits on an event runs its later work after the event completes. */
#define FAKE_FAIL_ENV "FAKE_HIP_FAIL"
#include <hip/hip_runtime_api.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <mutex>
#include "fake_fail.h"
#undef FAIL_IF
#define FAIL_IF(name)                                      \
  do {                                                     \
    int fake_rc_ = fake_fail(name);                        \
    if (fake_rc_) return static_cast<hipError_t>(fake_rc_); \
  } while (0)

#define EXPORT extern "C" __attribute__((visibility("default")))

namespace {
struct CallConfig {
  dim3 grid, block;
  size_t shared;
  hipStream_t stream;
};
thread_local CallConfig configs[8];
thread_local int config_depth;
int current_device;
void *fresh(size_t n) { return calloc(1, n ? n : 1); }

/* --- the simulated GPU clock (CLOCK_MONOTONIC, bpf_ktime_get_ns's clock) ---------- */
constexpr int SIM_MAX = 4096;
struct { const void *fn; unsigned long long ns; } sim_kernels[SIM_MAX];
struct { hipStream_t s; unsigned long long busy; } sim_streams[SIM_MAX];
struct { hipEvent_t e; unsigned long long done; } sim_events[SIM_MAX];
thread_local unsigned long long sim_per_thread_busy;
std::mutex sim_lock;
unsigned long long sim_now() {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (unsigned long long)t.tv_sec * 1000000000ULL + (unsigned long long)t.tv_nsec;
}
void sim_sleep_until(unsigned long long when) {
  for (unsigned long long now = sim_now(); now < when; now = sim_now()) {
    struct timespec t = {(time_t)((when - now) / 1000000000ULL),
                         (long)((when - now) % 1000000000ULL)};
    nanosleep(&t, nullptr);
  }
}
/* A kernel handle's GPU time, from FAKE_HIP_KERNEL_NS and its name (at registration). */
void sim_named(const void *fn, const char *name) {
  const char *spec = getenv("FAKE_HIP_KERNEL_NS");
  if (!spec || !fn || !name) return;
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", spec);
  for (char *save = nullptr, *item = strtok_r(buf, ",", &save); item;
       item = strtok_r(nullptr, ",", &save)) {
    char *eq = strchr(item, '=');
    if (!eq) continue;
    *eq = 0;
    if (!strstr(name, item)) continue;
    std::lock_guard<std::mutex> g(sim_lock);
    int i = 0;
    while (i < SIM_MAX - 1 && sim_kernels[i].fn && sim_kernels[i].fn != fn) i++;
    sim_kernels[i].fn = fn;
    sim_kernels[i].ns = strtoull(eq + 1, nullptr, 10);
    return;
  }
}
/* The stream's "busy until" (under sim_lock): NULL is the null stream, hipStreamPerThread
 * (2) the calling thread's own. */
unsigned long long *sim_busy(hipStream_t s) {
  if (s == hipStreamPerThread) return &sim_per_thread_busy;
  if (s == nullptr) s = (hipStream_t)1;  // (a key: the null stream)
  int i = 0;
  while (i < SIM_MAX - 1 && sim_streams[i].s && sim_streams[i].s != s) i++;
  sim_streams[i].s = s;
  return &sim_streams[i].busy;
}
unsigned long long *sim_event(hipEvent_t e) {
  int i = 0;
  while (i < SIM_MAX - 1 && sim_events[i].e && sim_events[i].e != e) i++;
  sim_events[i].e = e;
  return &sim_events[i].done;
}
void sim_launch(hipStream_t s, const void *f) {
  std::lock_guard<std::mutex> g(sim_lock);
  unsigned long long ns = 0;
  for (int i = 0; i < SIM_MAX && sim_kernels[i].fn; i++)
    if (sim_kernels[i].fn == f) ns = sim_kernels[i].ns;
  unsigned long long *busy = sim_busy(s), now = sim_now();
  *busy = (*busy > now ? *busy : now) + ns;
}
unsigned long long sim_stream_done(hipStream_t s) {
  std::lock_guard<std::mutex> g(sim_lock);
  return *sim_busy(s);
}
/* Work left on destroyed streams runs on (a device synchronise waits for it); the first
 * stream destroyed is kept, and handed out again by the next hipStreamCreate (the real
 * runtime may give a freed handle again). */
unsigned long long sim_retired_busy;
hipStream_t sim_freed_stream;
unsigned long long sim_all_done() {
  std::lock_guard<std::mutex> g(sim_lock);
  unsigned long long done = sim_per_thread_busy > sim_retired_busy ? sim_per_thread_busy
                                                                   : sim_retired_busy;
  for (int i = 0; i < SIM_MAX && sim_streams[i].s; i++)
    if (sim_streams[i].busy > done) done = sim_streams[i].busy;
  return done;
}
unsigned long long sim_event_done(hipEvent_t e) {
  std::lock_guard<std::mutex> g(sim_lock);
  return *sim_event(e);
}

hipError_t launched(const void *f, dim3 grid, dim3 block, hipStream_t s = nullptr) {
  /* Nothing runs: a kernel of the fake is a handle, a shape and a simulated time. */
  if (!(f && grid.x && grid.y && grid.z && block.x)) return hipErrorInvalidValue;
  sim_launch(s, f);
  return hipSuccess;
}
}  // namespace

/* --- what hipcc's output calls: registration and <<<>>> -------------------------- */
EXPORT void **__hipRegisterFatBinary(const void *data) {
  static void *module = nullptr;
  (void)data;
  return &module;
}
EXPORT void __hipRegisterFunction(void **modules, const void *hostFunction, char *deviceFunction,
                                  const char *deviceName, unsigned int threadLimit, uint3 *tid,
                                  uint3 *bid, dim3 *blockDim, dim3 *gridDim, int *wSize) {
  /* The real runtime keeps a copy of the name (reading it, so its page is in memory). */
  static volatile size_t names_seen;
  names_seen += strlen(deviceName);
  sim_named(hostFunction, deviceName);
  (void)modules; (void)deviceFunction;
  (void)threadLimit; (void)tid; (void)bid; (void)blockDim; (void)gridDim; (void)wSize;
}
EXPORT void __hipUnregisterFatBinary(void **modules) { (void)modules; }
/* A __device__ variable: its host shadow is what hipMemcpyToSymbol is given. */
EXPORT void __hipRegisterVar(void **modules, void *var, char *hostVar, char *deviceVar, int ext,
                             size_t size, int constant, int global) {
  (void)modules; (void)var; (void)hostVar; (void)deviceVar; (void)ext; (void)size;
  (void)constant; (void)global;
}
EXPORT hipError_t __hipPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
                                             hipStream_t stream) {
  if (config_depth >= 8) return hipErrorInvalidConfiguration;
  configs[config_depth++] = CallConfig{gridDim, blockDim, sharedMem, stream};
  return hipSuccess;
}
EXPORT hipError_t __hipPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem,
                                            hipStream_t *stream) {
  if (config_depth <= 0) return hipErrorMissingConfiguration;
  CallConfig c = configs[--config_depth];
  *gridDim = c.grid; *blockDim = c.block; *sharedMem = c.shared; *stream = c.stream;
  return hipSuccess;
}

/* --- launches -------------------------------------------------------------------- */
EXPORT hipError_t hipLaunchKernel(const void *f, dim3 g, dim3 b, void **args, size_t shared,
                                  hipStream_t s) {
  const char *exit_in = getenv("FAKE_HIP_EXIT_IN");
  if (exit_in && strcmp(exit_in, "hipLaunchKernel") == 0) _exit(7);
  FAIL_IF("hipLaunchKernel"); (void)args; (void)shared; return launched(f, g, b, s); }
EXPORT hipError_t hipLaunchKernel_spt(const void *f, dim3 g, dim3 b, void **args,
                                      size_t shared, hipStream_t s) {
  FAIL_IF("hipLaunchKernel_spt"); (void)args; (void)shared;
  return launched(f, g, b, s ? s : hipStreamPerThread); }
EXPORT hipError_t hipExtLaunchKernel(const void *f, dim3 g, dim3 b, void **args, size_t shared,
                                     hipStream_t s, hipEvent_t start, hipEvent_t stop,
                                     int flags) {
  FAIL_IF("hipExtLaunchKernel");
  (void)args; (void)shared; (void)start; (void)stop; (void)flags;
  return launched(f, g, b, s);
}
EXPORT hipError_t hipLaunchCooperativeKernel(const void *f, dim3 g, dim3 b, void **args,
                                             unsigned int shared, hipStream_t s) {
  FAIL_IF("hipLaunchCooperativeKernel"); (void)args; (void)shared;
  return launched(f, g, b, s);
}
/* ROCm 6.5's hipLaunchKernelExC(const hipLaunchConfig_t *config, const void *fPtr,
 * void **args) and hipDrvLaunchKernelEx(const HIP_LAUNCH_CONFIG *config, hipFunction_t f,
 * void **params, void **extra), with their structs as hip_runtime_api.h 6.5 lays them out. */
struct FakeLaunchConfig {  // hipLaunchConfig_t
  dim3 gridDim, blockDim;
  size_t dynamicSmemBytes;
  hipStream_t stream;
  void *attrs;
  unsigned int numAttrs;
};
struct FakeDrvLaunchConfig {  // HIP_LAUNCH_CONFIG
  unsigned int gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
  hipStream_t hStream;
  void *attrs;
  unsigned int numAttrs;
};
EXPORT hipError_t hipLaunchKernelExC(const FakeLaunchConfig *c, const void *f, void **args) {
  FAIL_IF("hipLaunchKernelExC"); (void)args;
  return launched(f, c->gridDim, c->blockDim, c->stream); }
EXPORT hipError_t hipDrvLaunchKernelEx(const FakeDrvLaunchConfig *c, hipFunction_t f,
                                       void **params, void **extra) {
  FAIL_IF("hipDrvLaunchKernelEx"); (void)params; (void)extra;
  return launched(f, dim3(c->gridDimX, c->gridDimY, c->gridDimZ),
                  dim3(c->blockDimX, c->blockDimY, c->blockDimZ));
}
EXPORT hipError_t hipModuleLoad(hipModule_t *module, const char *fname) {
  FAIL_IF("hipModuleLoad"); (void)fname;
  *module = (hipModule_t)fresh(64);
  return hipSuccess;
}
EXPORT hipError_t hipModuleGetFunction(hipFunction_t *function, hipModule_t module,
                                       const char *kname) {
  FAIL_IF("hipModuleGetFunction"); (void)module;
  *function = (hipFunction_t)fresh(64);  // an opaque handle, not the name's address
  sim_named(*function, kname);
  return hipSuccess;
}
EXPORT hipError_t hipModuleLaunchKernel(hipFunction_t f, unsigned int gx, unsigned int gy,
                                        unsigned int gz, unsigned int bx, unsigned int by,
                                        unsigned int bz, unsigned int shared, hipStream_t s,
                                        void **params, void **extra) {
  FAIL_IF("hipModuleLaunchKernel"); (void)shared; (void)params; (void)extra;
  return launched(f, dim3(gx, gy, gz), dim3(bx, by, bz), s);
}
EXPORT hipError_t hipModuleLaunchCooperativeKernel(hipFunction_t f, unsigned int gx,
                                                   unsigned int gy, unsigned int gz,
                                                   unsigned int bx, unsigned int by,
                                                   unsigned int bz, unsigned int shared,
                                                   hipStream_t s, void **params) {
  FAIL_IF("hipModuleLaunchCooperativeKernel"); (void)shared; (void)s; (void)params;
  return launched(f, dim3(gx, gy, gz), dim3(bx, by, bz));
}
/* C++ names only, as hip_ext.h declares them (its templates need hipcc): the grid in
 * threads (global work size). The mangled names are the real library's only if these
 * signatures are hip_ext.h's. */
__attribute__((visibility("default"))) hipError_t hipExtModuleLaunchKernel(
    hipFunction_t f, uint32_t gwx, uint32_t gwy, uint32_t gwz, uint32_t lwx, uint32_t lwy,
    uint32_t lwz, size_t shared, hipStream_t s, void **params, void **extra,
    hipEvent_t start, hipEvent_t stop, uint32_t flags) {
  FAIL_IF("hipExtModuleLaunchKernel");
  (void)shared; (void)s; (void)params; (void)extra; (void)start; (void)stop; (void)flags;
  return launched(f, dim3(gwx, gwy, gwz), dim3(lwx, lwy, lwz));
}
__attribute__((visibility("default"))) hipError_t hipHccModuleLaunchKernel(
    hipFunction_t f, uint32_t gwx, uint32_t gwy, uint32_t gwz, uint32_t lwx, uint32_t lwy,
    uint32_t lwz, size_t shared, hipStream_t s, void **params, void **extra,
    hipEvent_t start, hipEvent_t stop) {
  FAIL_IF("hipHccModuleLaunchKernel");
  (void)shared; (void)s; (void)params; (void)extra; (void)start; (void)stop;
  return launched(f, dim3(gwx, gwy, gwz), dim3(lwx, lwy, lwz));
}

/* --- streams, events, graphs (stream capture) ------------------------------------ */
EXPORT hipError_t hipStreamCreate(hipStream_t *s) {
  FAIL_IF("hipStreamCreate");
  std::lock_guard<std::mutex> g(sim_lock);
  *s = sim_freed_stream ? sim_freed_stream : (hipStream_t)fresh(64);
  sim_freed_stream = nullptr;
  return hipSuccess;
}
EXPORT hipError_t hipStreamDestroy(hipStream_t s) {
  FAIL_IF("hipStreamDestroy");
  if (s == nullptr || s == hipStreamPerThread) return hipErrorInvalidHandle;
  std::lock_guard<std::mutex> g(sim_lock);
  unsigned long long *busy = sim_busy(s);
  if (*busy > sim_retired_busy) sim_retired_busy = *busy;
  *busy = 0;
  if (!sim_freed_stream) sim_freed_stream = s;
  else free(s);
  return hipSuccess;
}
EXPORT hipError_t hipEventCreate(hipEvent_t *e) {
  FAIL_IF("hipEventCreate"); *e = (hipEvent_t)fresh(64); return hipSuccess; }
EXPORT hipError_t hipEventDestroy(hipEvent_t e) {
  FAIL_IF("hipEventDestroy");
  {
    std::lock_guard<std::mutex> g(sim_lock);
    *sim_event(e) = 0;
  }
  return hipSuccess;  // (not freed: a handle is not reused, so the simulation stays exact)
}
static hipError_t recorded(hipEvent_t e, hipStream_t s) {
  std::lock_guard<std::mutex> g(sim_lock);
  unsigned long long busy = *sim_busy(s), now = sim_now();
  *sim_event(e) = busy > now ? busy : now;
  return hipSuccess;
}
EXPORT hipError_t hipEventRecord(hipEvent_t e, hipStream_t s) {
  FAIL_IF("hipEventRecord"); return recorded(e, s); }
EXPORT hipError_t hipEventQuery(hipEvent_t e) {
  FAIL_IF("hipEventQuery");
  return sim_now() >= sim_event_done(e) ? hipSuccess : hipErrorNotReady;
}
EXPORT hipError_t hipEventElapsedTime(float *ms, hipEvent_t start, hipEvent_t stop) {
  FAIL_IF("hipEventElapsedTime");
  unsigned long long a = sim_event_done(start), b = sim_event_done(stop);
  if (sim_now() < a || sim_now() < b) return hipErrorNotReady;
  *ms = (float)((double)((long long)b - (long long)a) / 1e6);
  return hipSuccess;
}
EXPORT hipError_t hipStreamQuery(hipStream_t s) {
  FAIL_IF("hipStreamQuery");
  return sim_now() >= sim_stream_done(s) ? hipSuccess : hipErrorNotReady;
}
EXPORT hipError_t hipStreamQuery_spt(hipStream_t s) {
  FAIL_IF("hipStreamQuery_spt");
  return sim_now() >= sim_stream_done(s ? s : hipStreamPerThread) ? hipSuccess
                                                                   : hipErrorNotReady;
}
EXPORT hipError_t hipStreamWaitEvent(hipStream_t s, hipEvent_t e, unsigned int flags) {
  FAIL_IF("hipStreamWaitEvent"); (void)flags;
  std::lock_guard<std::mutex> g(sim_lock);  // the stream holds until the event completes
  unsigned long long done = *sim_event(e), *busy = sim_busy(s);
  if (done > *busy) *busy = done;
  return hipSuccess;
}
EXPORT hipError_t hipStreamBeginCapture(hipStream_t s, hipStreamCaptureMode mode) {
  FAIL_IF("hipStreamBeginCapture"); (void)s; (void)mode; return hipSuccess; }
EXPORT hipError_t hipStreamEndCapture(hipStream_t s, hipGraph_t *g) {
  FAIL_IF("hipStreamEndCapture"); (void)s; *g = (hipGraph_t)fresh(64); return hipSuccess; }
EXPORT hipError_t hipGraphInstantiate(hipGraphExec_t *e, hipGraph_t g, hipGraphNode_t *err,
                                      char *log, size_t logSize) {
  FAIL_IF("hipGraphInstantiate"); (void)g; (void)err; (void)log; (void)logSize;
  *e = (hipGraphExec_t)fresh(64);
  return hipSuccess;
}
EXPORT hipError_t hipGraphCreate(hipGraph_t *g, unsigned int flags) {
  FAIL_IF("hipGraphCreate"); (void)flags; *g = (hipGraph_t)fresh(64); return hipSuccess; }
EXPORT hipError_t hipGraphAddKernelNode(hipGraphNode_t *node, hipGraph_t g,
                                        const hipGraphNode_t *deps, size_t n,
                                        const hipKernelNodeParams *params) {
  FAIL_IF("hipGraphAddKernelNode"); (void)g; (void)deps; (void)n;
  if (!params->func) return hipErrorInvalidDeviceFunction;
  *node = (hipGraphNode_t)fresh(64);
  return hipSuccess;
}
/* ROCm 6.2's hipGraphAddNode(hipGraphNode_t *, hipGraph_t, const hipGraphNode_t *, size_t,
 * hipGraphNodeParams *): { hipGraphNodeType type; int reserved0[3]; union { long long
 * reserved1[29]; hipKernelNodeParams kernel; ... }; long long reserved2; } (6.2's header:
 * hipGraphNodeTypeKernel is 0 there). */
struct FakeGraphNodeParams {
  int type;
  int reserved0[3];
  union {
    long long reserved1[29];
    hipKernelNodeParams kernel;
  };
  long long reserved2;
};
static_assert(offsetof(hipKernelNodeParams, func) == 24, "hipKernelNodeParams.func");
static_assert(offsetof(FakeGraphNodeParams, kernel) == 16, "hipGraphNodeParams.kernel");
EXPORT hipError_t hipGraphAddNode(hipGraphNode_t *node, hipGraph_t g, const hipGraphNode_t *deps,
                                  size_t n, FakeGraphNodeParams *params) {
  FAIL_IF("hipGraphAddNode"); (void)g; (void)deps; (void)n;
  if (params->type == 0 && !params->kernel.func) return hipErrorInvalidDeviceFunction;
  *node = (hipGraphNode_t)fresh(64);
  return hipSuccess;
}
EXPORT hipError_t hipGraphLaunch(hipGraphExec_t e, hipStream_t s) {
  FAIL_IF("hipGraphLaunch"); (void)e; (void)s; return hipSuccess; }
EXPORT hipError_t hipGraphExecDestroy(hipGraphExec_t e) { free(e); return hipSuccess; }
EXPORT hipError_t hipGraphDestroy(hipGraph_t g) { free(g); return hipSuccess; }

/* --- copies: host memory on both sides here ---------------------------------------- */
#define COPY(name, dst, src, n) FAIL_IF(name); memmove((void *)(dst), (const void *)(src), n); \
  return hipSuccess;
EXPORT hipError_t hipMemcpy(void *d, const void *s, size_t n, hipMemcpyKind k) {
  (void)k; COPY("hipMemcpy", d, s, n) }
EXPORT hipError_t hipMemcpy_spt(void *d, const void *s, size_t n, hipMemcpyKind k) {
  (void)k; COPY("hipMemcpy_spt", d, s, n) }
EXPORT hipError_t hipMemcpyAsync(void *d, const void *s, size_t n, hipMemcpyKind k,
                                 hipStream_t st) {
  (void)k; (void)st; COPY("hipMemcpyAsync", d, s, n) }
EXPORT hipError_t hipMemcpyWithStream(void *d, const void *s, size_t n, hipMemcpyKind k,
                                      hipStream_t st) {
  (void)k; (void)st; COPY("hipMemcpyWithStream", d, s, n) }
EXPORT hipError_t hipMemcpyHtoD(hipDeviceptr_t d, void *s, size_t n) {
  COPY("hipMemcpyHtoD", d, s, n) }
EXPORT hipError_t hipMemcpyDtoH(void *d, hipDeviceptr_t s, size_t n) {
  COPY("hipMemcpyDtoH", d, s, n) }
EXPORT hipError_t hipMemcpyDtoD(hipDeviceptr_t d, hipDeviceptr_t s, size_t n) {
  COPY("hipMemcpyDtoD", d, s, n) }
EXPORT hipError_t hipMemcpyDtoHAsync(void *d, hipDeviceptr_t s, size_t n, hipStream_t st) {
  (void)st; COPY("hipMemcpyDtoHAsync", d, s, n) }
EXPORT hipError_t hipMemcpyPeer(void *d, int dd, const void *s, int sd, size_t n) {
  (void)dd; (void)sd; COPY("hipMemcpyPeer", d, s, n) }
EXPORT hipError_t hipMemcpyToSymbol(const void *sym, const void *s, size_t n, size_t off,
                                    hipMemcpyKind k) {
  (void)k; COPY("hipMemcpyToSymbol", (char *)sym + off, s, n) }
EXPORT hipError_t hipMemcpyToSymbolAsync(const void *sym, const void *s, size_t n, size_t off,
                                         hipMemcpyKind k, hipStream_t st) {
  (void)k; (void)st; COPY("hipMemcpyToSymbolAsync", (char *)sym + off, s, n) }
EXPORT hipError_t hipMemcpyFromSymbol(void *d, const void *sym, size_t n, size_t off,
                                      hipMemcpyKind k) {
  (void)k; COPY("hipMemcpyFromSymbol", d, (const char *)sym + off, n) }
EXPORT hipError_t hipMemcpy2D(void *d, size_t dp, const void *s, size_t sp, size_t w, size_t h,
                              hipMemcpyKind k) {
  FAIL_IF("hipMemcpy2D"); (void)k;
  for (size_t r = 0; r < h; r++) memmove((char *)d + r * dp, (const char *)s + r * sp, w);
  return hipSuccess;
}
EXPORT hipError_t hipMemcpy3D(const hipMemcpy3DParms *p) {
  FAIL_IF("hipMemcpy3D"); (void)p; return hipSuccess; }

/* --- allocations ------------------------------------------------------------------ */
#define ALLOC(name, p, n) FAIL_IF(name); *(p) = fresh(n); return hipSuccess;
EXPORT hipError_t hipMalloc(void **p, size_t n) { ALLOC("hipMalloc", p, n) }
EXPORT hipError_t hipMallocManaged(void **p, size_t n, unsigned int flags) {
  (void)flags; ALLOC("hipMallocManaged", p, n) }
EXPORT hipError_t hipHostMalloc(void **p, size_t n, unsigned int flags) {
  (void)flags; ALLOC("hipHostMalloc", p, n) }
EXPORT hipError_t hipExtMallocWithFlags(void **p, size_t n, unsigned int flags) {
  (void)flags; ALLOC("hipExtMallocWithFlags", p, n) }
EXPORT hipError_t hipMallocAsync(void **p, size_t n, hipStream_t s) {
  (void)s; ALLOC("hipMallocAsync", p, n) }
EXPORT hipError_t hipFree(void *p) { free(p); return hipSuccess; }
EXPORT hipError_t hipHostFree(void *p) { free(p); return hipSuccess; }

/* --- synchronising calls, devices --------------------------------------------------- */
EXPORT hipError_t hipDeviceSynchronize(void) {
  FAIL_IF("hipDeviceSynchronize"); sim_sleep_until(sim_all_done()); return hipSuccess; }
EXPORT hipError_t hipStreamSynchronize(hipStream_t s) {
  FAIL_IF("hipStreamSynchronize"); sim_sleep_until(sim_stream_done(s)); return hipSuccess; }
EXPORT hipError_t hipEventSynchronize(hipEvent_t e) {
  FAIL_IF("hipEventSynchronize"); sim_sleep_until(sim_event_done(e)); return hipSuccess; }
EXPORT hipError_t hipGetDeviceCount(int *n) { FAIL_IF("hipGetDeviceCount"); *n = 2; return hipSuccess; }
EXPORT hipError_t hipSetDevice(int d) { FAIL_IF("hipSetDevice"); current_device = d; return hipSuccess; }
EXPORT hipError_t hipGetDevice(int *d) { *d = current_device; return hipSuccess; }
/* Device `d` is at PCI 0000:(c1 + d):00.0, in every layout the runtime answers with. */
EXPORT hipError_t hipDeviceGetPCIBusId(char *id, int len, int d) {
  FAIL_IF("hipDeviceGetPCIBusId");
  snprintf(id, (size_t)len, "0000:%02X:00.0", 0xc1 + d);  // as HIP writes it
  return hipSuccess;
}
static void fill_r0000(hipDeviceProp_t *p, int d) {  // ROCm 5.2's hipDeviceProp_t
  memset(p, 0, sizeof *p);
  strcpy(p->name, "AMD Instinct MI300X (fake)");
  p->pciDomainID = 0;
  p->pciBusID = 0xc1 + d;
  p->pciDeviceID = 0;
}
EXPORT hipError_t hipGetDeviceProperties(hipDeviceProp_t *p, int d) {
  FAIL_IF("hipGetDeviceProperties"); fill_r0000(p, d); return hipSuccess; }
/* ROCm 6.x: hipGetDevicePropertiesR0000 (the 5.x layout, for older binaries) and
 * hipGetDevicePropertiesR0600 (what hipGetDeviceProperties is a #define of): its 1472-byte
 * struct has int pciBusID, pciDeviceID, pciDomainID at 584 (offsetof in 6.0-6.2's header). */
EXPORT hipError_t hipGetDevicePropertiesR0000(hipDeviceProp_t *p, int d) {
  FAIL_IF("hipGetDevicePropertiesR0000"); fill_r0000(p, d); return hipSuccess; }
EXPORT hipError_t hipGetDevicePropertiesR0600(void *p, int d) {
  FAIL_IF("hipGetDevicePropertiesR0600");
  memset(p, 0, 1472);
  int pci[3] = {0xc1 + d, 0, 0};  // bus, device, domain
  memcpy((char *)p + 584, pci, sizeof pci);
  return hipSuccess;
}
EXPORT hipError_t hipGetLastError(void) { return hipSuccess; }
EXPORT const char *hipGetErrorName(hipError_t e) { return e == hipSuccess ? "hipSuccess" : "hipErrorFake"; }
