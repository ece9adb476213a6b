// Workloads of known answers for HIP kernel durations bounded by completion points
// (issue #27 for HIP, tests/ebpf/test_hip_completion.py), built by the real hipcc and run
// on the fake libamdhip64's simulated GPU clock (FAKE_HIP_KERNEL_NS, set by the test:
// every kernel here 20 ms, k_first and k_stale 2 s).
//
//   hip_completion issue N        N loops of: k_polled on stream A, e1 recorded and polled
//                                 with hipEventQuery until ready; k_front, k_timed on A, e2
//                                 recorded and hipEventSynchronize'd; k_late on the null
//                                 stream, k_waiter on B; hipDeviceSynchronize
//   hip_completion stream_query N N loops of q_kernel on A, polled with hipStreamQuery
//   hip_completion per_thread N   N loops of t_spt launched by hipLaunchKernel_spt on a NULL
//                                 stream (the thread's default stream), polled with
//                                 hipStreamQuery(hipStreamPerThread); then k_null on the
//                                 null stream, hipStreamQuery_spt(NULL) polled (the
//                                 thread's stream: not k_null's), hipDeviceSynchronize
//   hip_completion waits N        N loops of: k_first on A, eA recorded; B waits on eA
//                                 (hipStreamWaitEvent), k_after on B, eB recorded; eA
//                                 polled (not ready while k_first runs); eB synchronised
//   hip_completion elapsed N      N loops of: s recorded on A, k_el, e recorded,
//                                 hipEventSynchronize(e), hipEventElapsedTime(s, e)
//   hip_completion module N       N loops of: the module function m_poll launched on A
//                                 (hipModuleLaunchKernel), e1 recorded, polled
//   hip_completion reuse N        N loops of: k_stale (2 s) on A, A destroyed
//                                 (hipStreamDestroy) with it pending; B created (the same
//                                 handle), k_fresh on B, e recorded and synchronised;
//                                 hipDeviceSynchronize
//   hip_completion destroyed      k_gone on A, e recorded, destroyed, then queried: no
//                                 completion point (k_gone waits for the device sync)
//
// Exits 3 on a call that fails (hipErrorNotReady from the queries is an answer).
#include <hip/hip_runtime.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__global__ void k_polled(int *x) { x[0] = 1; }
__global__ void k_front(int *x) { x[0] = 1; }
__global__ void k_timed(int *x) { x[0] = 1; }
__global__ void k_late(int *x) { x[0] = 1; }
__global__ void k_waiter(int *x) { x[0] = 1; }
__global__ void q_kernel(int *x) { x[0] = 1; }
__global__ void t_spt(int *x) { x[0] = 1; }
__global__ void k_first(int *x) { x[0] = 1; }
__global__ void k_after(int *x) { x[0] = 1; }
__global__ void k_el(int *x) { x[0] = 1; }
__global__ void k_gone(int *x) { x[0] = 1; }
__global__ void k_null(int *x) { x[0] = 1; }
__global__ void k_stale(int *x) { x[0] = 1; }
__global__ void k_fresh(int *x) { x[0] = 1; }

#define CHECK(call)                                                          \
  do {                                                                       \
    hipError_t rc_ = (call);                                                 \
    if (rc_ != hipSuccess) {                                                 \
      fprintf(stderr, "%s:%d: %s = %d\n", __FILE__, __LINE__, #call, (int)rc_); \
      exit(3);                                                               \
    }                                                                        \
  } while (0)

static int *buf;

static void poll_event(hipEvent_t e) {
  hipError_t rc;
  while ((rc = hipEventQuery(e)) == hipErrorNotReady) sched_yield();
  CHECK(rc);
}

static void issue(int n) {
  hipStream_t a, b;
  hipEvent_t e1, e2;
  CHECK(hipStreamCreate(&a));
  CHECK(hipStreamCreate(&b));
  CHECK(hipEventCreate(&e1));
  CHECK(hipEventCreate(&e2));
  for (int i = 0; i < n; i++) {
    k_polled<<<1, 32, 0, a>>>(buf);
    CHECK(hipEventRecord(e1, a));
    poll_event(e1);
    k_front<<<1, 32, 0, a>>>(buf);
    k_timed<<<1, 32, 0, a>>>(buf);
    CHECK(hipEventRecord(e2, a));
    CHECK(hipEventSynchronize(e2));
    k_late<<<1, 32>>>(buf);
    k_waiter<<<1, 32, 0, b>>>(buf);
    CHECK(hipDeviceSynchronize());
  }
}

static void stream_query(int n) {
  hipStream_t a;
  CHECK(hipStreamCreate(&a));
  for (int i = 0; i < n; i++) {
    q_kernel<<<1, 32, 0, a>>>(buf);
    hipError_t rc;
    while ((rc = hipStreamQuery(a)) == hipErrorNotReady) sched_yield();
    CHECK(rc);
  }
}


static void per_thread(int n) {
  void *args[] = {&buf};
  for (int i = 0; i < n; i++) {
    // As hipcc -fgpu-default-stream=per-thread makes <<<>>> call it: a NULL stream, the
    // thread's own; polled under its other name, hipStreamPerThread.
    CHECK(hipLaunchKernel_spt(reinterpret_cast<const void *>(t_spt), dim3(1), dim3(32), args,
                              0, nullptr));
    hipError_t rc;
    while ((rc = hipStreamQuery(hipStreamPerThread)) == hipErrorNotReady) sched_yield();
    CHECK(rc);
  }
  // The null stream is another: k_null there is not covered by the thread's stream
  // going idle (hipStreamQuery_spt of NULL), only by the device synchronise.
  k_null<<<1, 32>>>(buf);
  hipError_t rc;
  while ((rc = hipStreamQuery_spt(nullptr)) == hipErrorNotReady) sched_yield();
  CHECK(rc);
  CHECK(hipDeviceSynchronize());
}

static void waits(int n) {
  hipStream_t a, b;
  hipEvent_t ea, eb;
  CHECK(hipStreamCreate(&a));
  CHECK(hipStreamCreate(&b));
  CHECK(hipEventCreate(&ea));
  CHECK(hipEventCreate(&eb));
  for (int i = 0; i < n; i++) {
    k_first<<<1, 32, 0, a>>>(buf);
    CHECK(hipEventRecord(ea, a));
    CHECK(hipStreamWaitEvent(b, ea, 0));
    k_after<<<1, 32, 0, b>>>(buf);
    CHECK(hipEventRecord(eb, b));
    poll_event(ea);
    CHECK(hipEventSynchronize(eb));
  }
}

static void elapsed(int n) {
  hipStream_t a;
  hipEvent_t s, e;
  CHECK(hipStreamCreate(&a));
  CHECK(hipEventCreate(&s));
  CHECK(hipEventCreate(&e));
  for (int i = 0; i < n; i++) {
    CHECK(hipEventRecord(s, a));
    k_el<<<1, 32, 0, a>>>(buf);
    CHECK(hipEventRecord(e, a));
    CHECK(hipEventSynchronize(e));
    float ms = 0;
    CHECK(hipEventElapsedTime(&ms, s, e));
  }
}

static void module(int n) {
  hipStream_t a;
  hipEvent_t e1;
  hipModule_t mod;
  hipFunction_t f;
  CHECK(hipStreamCreate(&a));
  CHECK(hipEventCreate(&e1));
  CHECK(hipModuleLoad(&mod, "kernels.hsaco"));
  CHECK(hipModuleGetFunction(&f, mod, "m_poll"));
  void *args[] = {&buf};
  for (int i = 0; i < n; i++) {
    CHECK(hipModuleLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, a, args, nullptr));
    CHECK(hipEventRecord(e1, a));
    poll_event(e1);
  }
}

static void reuse(int n) {
  hipEvent_t e;
  CHECK(hipEventCreate(&e));
  for (int i = 0; i < n; i++) {
    hipStream_t a, b;
    CHECK(hipStreamCreate(&a));
    k_stale<<<1, 32, 0, a>>>(buf);
    CHECK(hipStreamDestroy(a));  // with k_stale pending: it runs on
    CHECK(hipStreamCreate(&b));
    if (b != a) exit(6);  // the handle given again (what this workload is about)
    k_fresh<<<1, 32, 0, b>>>(buf);
    CHECK(hipEventRecord(e, b));
    CHECK(hipEventSynchronize(e));  // k_fresh done; k_stale not
    CHECK(hipDeviceSynchronize());
    CHECK(hipStreamDestroy(b));
  }
}

static void destroyed() {
  hipStream_t a;
  hipEvent_t e;
  CHECK(hipStreamCreate(&a));
  CHECK(hipEventCreate(&e));
  k_gone<<<1, 32, 0, a>>>(buf);
  CHECK(hipEventRecord(e, a));
  CHECK(hipEventDestroy(e));
  (void)hipEventQuery(e);  // destroyed: no state, no completion point
  CHECK(hipDeviceSynchronize());
}

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  int n = argc > 2 ? atoi(argv[2]) : 1;
  if (argc > 3 && strcmp(argv[3], "--wait") == 0) {
    printf("ready\n");
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin)) return 2;
  }
  CHECK(hipMalloc((void **)&buf, 64));
  const char *mode = argv[1];
  if (!strcmp(mode, "issue")) issue(n);
  else if (!strcmp(mode, "stream_query")) stream_query(n);
  else if (!strcmp(mode, "per_thread")) per_thread(n);
  else if (!strcmp(mode, "waits")) waits(n);
  else if (!strcmp(mode, "elapsed")) elapsed(n);
  else if (!strcmp(mode, "module")) module(n);
  else if (!strcmp(mode, "destroyed")) destroyed();
  else if (!strcmp(mode, "reuse")) reuse(n);
  else return 2;
  printf("done\n");
  return 0;
}
