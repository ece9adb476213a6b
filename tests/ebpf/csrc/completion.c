/* Workloads of known answers for kernel durations bounded by completion points (issue
 * #27, tests/ebpf/test_completion.py), on the fake libraries' simulated GPU clock: every
 * kernel runs KERNEL_MS of simulated GPU time.
 *
 *   completion issue N       N loops of: k_polled on stream A, event e1 recorded and
 *                            polled with cudaEventQuery until ready; k_front, k_timed on
 *                            A, event e2 recorded and cudaEventSynchronize'd; k_late on
 *                            the legacy stream, k_waiter on stream B; cudaDeviceSynchronize
 *   completion per_thread N  two threads, each N loops of one kernel on its per-thread
 *                            default stream (cudaStreamPerThread) and a
 *                            cudaStreamSynchronize of it: t_short (KERNEL_MS) and t_long
 *                            (LONG_MS)
 *   completion ptsz N        as per_thread, through cudaLaunchKernel_ptsz and
 *                            cudaStreamSynchronize_ptsz with a NULL stream
 *   completion stream_query N  N loops of q_kernel on stream A, polled with
 *                            cudaStreamQuery until idle
 *   completion lower N       N loops of: k_first (FIRST_MS) on A, e1 recorded; k_second
 *                            on A, e2 recorded; e1 polled (not ready while k_first
 *                            runs); cudaEventSynchronize(e2)
 *   completion odd           one of each: an event queried before any record (k_odd1
 *                            stays to the device synchronise); an event recorded twice
 *                            (k_re1, k_re2) polled ready from another thread, then
 *                            destroyed and queried; a graph launch, an event recorded
 *                            and synchronised; an allocator-style event recorded on
 *                            stream B after k_use and queried only after a while
 *   completion waits N       N loops of: k_first (FIRST_MS) on A, eA recorded; B waits
 *                            on eA (cudaStreamWaitEvent), k_after on B, eB recorded; eA
 *                            polled (not ready while k_first runs); eB synchronised
 *   completion elapsed N     N loops of: s recorded on A, k_el, e recorded,
 *                            cudaEventSynchronize(e), cudaEventElapsedTime(s, e); then
 *                            s, k_el2a, k_el2b, e (two kernels in the span) likewise
 *   completion many N        N launches of k_many on stream A, each followed by a
 *                            record of its own new event; then cudaDeviceSynchronize
 *   completion reuse N       N loops of: k_gone (FIRST_MS) on a new stream A, A
 *                            destroyed with it pending; a new stream B, given A's handle
 *                            again; k_new on B, e recorded and cudaEventSynchronize'd
 *                            (k_gone still runs); cudaDeviceSynchronize (waits for it)
 *
 * Prints "ready", waits for a line on stdin (with --wait), runs, prints "done". */
#include "cuda_fake.h"
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KERNEL_MS 20ULL /* above 2^24 ns (16.8 ms), a bucket bound */
#define LONG_MS 200ULL  /* above 2^26 ns (67.1 ms) */
#define FIRST_MS 2000ULL
#define MS 1000000ULL

static volatile int sink;
__attribute__((noinline)) void k_polled(int n) { sink += n; }
__attribute__((noinline)) void k_front(int n) { sink += n; }
__attribute__((noinline)) void k_timed(int n) { sink += n; }
__attribute__((noinline)) void k_late(int n) { sink += n; }
__attribute__((noinline)) void k_waiter(int n) { sink += n; }
__attribute__((noinline)) void t_short(int n) { sink += n; }
__attribute__((noinline)) void t_long(int n) { sink += n; }
__attribute__((noinline)) void q_kernel(int n) { sink += n; }
__attribute__((noinline)) void k_first(int n) { sink += n; }
__attribute__((noinline)) void k_second(int n) { sink += n; }
__attribute__((noinline)) void k_odd1(int n) { sink += n; }
__attribute__((noinline)) void k_re1(int n) { sink += n; }
__attribute__((noinline)) void k_re2(int n) { sink += n; }
__attribute__((noinline)) void k_use(int n) { sink += n; }
__attribute__((noinline)) void k_many(int n) { sink += n; }
__attribute__((noinline)) void k_after(int n) { sink += n; }
__attribute__((noinline)) void k_el(int n) { sink += n; }
__attribute__((noinline)) void k_el2a(int n) { sink += n; }
__attribute__((noinline)) void k_el2b(int n) { sink += n; }
__attribute__((noinline)) void k_gone(int n) { sink += n; }
__attribute__((noinline)) void k_new(int n) { sink += n; }

#define CHECK(call)                                                   \
  do {                                                                \
    int rc_ = (call);                                                 \
    if (rc_ != 0) {                                                   \
      fprintf(stderr, "%s:%d: %s = %d\n", __FILE__, __LINE__, #call, rc_); \
      exit(3);                                                        \
    }                                                                 \
  } while (0)

static void launch(void (*f)(int), cudaStream_t s) {
  void *args[1] = {NULL};
  CHECK(cudaLaunchKernel((const void *)f, (dim3){1, 1, 1}, (dim3){32, 1, 1}, args, 0, s));
}

/* Polls until ready: a tight loop, so the first success is soon after completion. */
static void poll_event(cudaEvent_t e) {
  int rc;
  while ((rc = cudaEventQuery(e)) == cudaErrorNotReady) sched_yield();
  CHECK(rc);
}

static void issue(int n) {
  cudaStream_t a, b;
  cudaEvent_t e1, e2;
  CHECK(cudaStreamCreate(&a));
  CHECK(cudaStreamCreate(&b));
  CHECK(cudaEventCreate(&e1));
  CHECK(cudaEventCreate(&e2));
  for (int i = 0; i < n; i++) {
    launch(k_polled, a);
    CHECK(cudaEventRecord(e1, a));
    poll_event(e1);
    launch(k_front, a);
    launch(k_timed, a);
    CHECK(cudaEventRecord(e2, a));
    CHECK(cudaEventSynchronize(e2));
    launch(k_late, NULL);
    launch(k_waiter, b);
    CHECK(cudaDeviceSynchronize());
  }
}

static void *per_thread_loop(void *arg) {
  void (*f)(int) = (void (*)(int))arg;
  for (int i = 0; i < 3; i++) {
    launch(f, cudaStreamPerThread);
    CHECK(cudaStreamSynchronize(cudaStreamPerThread));
  }
  return NULL;
}

static void *ptsz_loop(void *arg) {
  void (*f)(int) = (void (*)(int))arg;
  void *args[1] = {NULL};
  for (int i = 0; i < 3; i++) {
    CHECK(cudaLaunchKernel_ptsz((const void *)f, (dim3){1, 1, 1}, (dim3){32, 1, 1}, args, 0,
                                NULL));
    CHECK(cudaStreamSynchronize_ptsz(NULL));
  }
  return NULL;
}

static void per_thread(int n, void *(*loop)(void *)) {
  for (int i = 0; i < n; i++) {
    pthread_t a, b;
    pthread_create(&a, NULL, loop, (void *)t_short);
    pthread_create(&b, NULL, loop, (void *)t_long);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
  }
}

static void stream_query(int n) {
  cudaStream_t a;
  CHECK(cudaStreamCreate(&a));
  for (int i = 0; i < n; i++) {
    launch(q_kernel, a);
    int rc;
    while ((rc = cudaStreamQuery(a)) == cudaErrorNotReady) sched_yield();
    CHECK(rc);
  }
}

static void lower(int n) {
  cudaStream_t a;
  cudaEvent_t e1, e2;
  CHECK(cudaStreamCreate(&a));
  CHECK(cudaEventCreate(&e1));
  CHECK(cudaEventCreate(&e2));
  for (int i = 0; i < n; i++) {
    launch(k_first, a);
    CHECK(cudaEventRecord(e1, a));
    launch(k_second, a);
    CHECK(cudaEventRecord(e2, a));
    poll_event(e1);
    CHECK(cudaEventSynchronize(e2));
  }
}

static void *poll_from_here(void *e) {
  poll_event((cudaEvent_t)e);
  return NULL;
}

static void odd(void) {
  cudaStream_t a, b;
  cudaEvent_t never, twice, g, alloc;
  CHECK(cudaStreamCreate(&a));
  CHECK(cudaStreamCreate(&b));
  CHECK(cudaEventCreate(&never));
  CHECK(cudaEventCreate(&twice));
  CHECK(cudaEventCreateWithFlags(&g, 2 /* cudaEventDisableTiming */));
  CHECK(cudaEventCreateWithFlags(&alloc, 2));
  launch(k_odd1, a);
  CHECK(cudaEventQuery(never)); /* never recorded: "ready", and no completion point */
  CHECK(cudaStreamSynchronize(b)); /* another stream's: not k_odd1's */
  launch(k_re1, b);
  CHECK(cudaEventRecord(twice, b));
  launch(k_re2, b);
  CHECK(cudaEventRecord(twice, b)); /* replaces the first record */
  pthread_t t;
  pthread_create(&t, NULL, poll_from_here, twice);
  pthread_join(t, NULL);
  CHECK(cudaEventDestroy(twice));
  (void)cudaEventQuery(twice); /* destroyed: no state */
  CHECK(cudaGraphLaunch((cudaGraphExec_t)0x77, b));
  CHECK(cudaEventRecord(g, b));
  CHECK(cudaEventSynchronize(g));
  /* The caching allocator's pattern: a record per cross-stream use, queried only when
   * the block is wanted again (here after the host did other things for a while). */
  launch(k_use, b);
  CHECK(cudaEventRecord(alloc, b));
  struct timespec later = {0, 100000000}; /* 100 ms */
  nanosleep(&later, NULL);
  poll_event(alloc);
  CHECK(cudaDeviceSynchronize());
}

static void waits(int n) {
  cudaStream_t a, b;
  cudaEvent_t ea, eb;
  CHECK(cudaStreamCreate(&a));
  CHECK(cudaStreamCreate(&b));
  CHECK(cudaEventCreate(&ea));
  CHECK(cudaEventCreate(&eb));
  for (int i = 0; i < n; i++) {
    launch(k_first, a);
    CHECK(cudaEventRecord(ea, a));
    CHECK(cudaStreamWaitEvent(b, ea, 0));
    launch(k_after, b);
    CHECK(cudaEventRecord(eb, b));
    poll_event(ea);
    CHECK(cudaEventSynchronize(eb));
  }
}

static float timed(cudaStream_t a, void (*f)(int), void (*g)(int)) {
  cudaEvent_t s, e;
  float ms = -1;
  CHECK(cudaEventCreate(&s));
  CHECK(cudaEventCreate(&e));
  CHECK(cudaEventRecord(s, a));
  launch(f, a);
  if (g) launch(g, a);
  CHECK(cudaEventRecord(e, a));
  CHECK(cudaEventSynchronize(e));
  CHECK(cudaEventElapsedTime(&ms, s, e));
  CHECK(cudaEventDestroy(s));
  CHECK(cudaEventDestroy(e));
  return ms;
}

static void elapsed(int n) {
  cudaStream_t a;
  CHECK(cudaStreamCreate(&a));
  for (int i = 0; i < n; i++) {
    if (timed(a, k_el, NULL) < KERNEL_MS) exit(5); /* the simulated clock's own answer */
    if (timed(a, k_el2a, k_el2b) < 2 * KERNEL_MS) exit(5);
  }
}

static void many(int n) {
  cudaStream_t a;
  CHECK(cudaStreamCreate(&a));
  for (int i = 0; i < n; i++) {
    cudaEvent_t e;
    launch(k_many, a);
    CHECK(cudaEventCreate(&e));
    CHECK(cudaEventRecord(e, a));
  }
  CHECK(cudaDeviceSynchronize());
}

static void reuse(int n) {
  cudaEvent_t e;
  CHECK(cudaEventCreate(&e));
  for (int i = 0; i < n; i++) {
    cudaStream_t a, b;
    CHECK(cudaStreamCreate(&a));
    launch(k_gone, a);
    CHECK(cudaStreamDestroy(a)); /* with k_gone pending: it runs on */
    CHECK(cudaStreamCreate(&b));
    if (b != a) exit(6); /* the handle given again (what this workload is about) */
    launch(k_new, b);
    CHECK(cudaEventRecord(e, b));
    CHECK(cudaEventSynchronize(e)); /* k_new done; k_gone not */
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaStreamDestroy(b));
  }
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: completion issue|per_thread|stream_query N [--wait]\n");
    return 2;
  }
  void (*all[])(int) = {k_polled, k_front, k_timed, k_late, k_waiter, t_short, q_kernel,
                        k_second, k_odd1, k_re1, k_re2, k_use, k_after, k_el, k_el2a,
                        k_el2b, k_new};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    fake_kernel_duration((const void *)all[i], KERNEL_MS * MS);
  fake_kernel_duration((const void *)t_long, LONG_MS * MS);
  fake_kernel_duration((const void *)k_first, FIRST_MS * MS);
  fake_kernel_duration((const void *)k_gone, FIRST_MS * MS);
  int n = atoi(argv[2]);
  printf("ready\n");
  fflush(stdout);
  if (argc > 3 && strcmp(argv[3], "--wait") == 0) {
    char line[16];
    if (!fgets(line, sizeof line, stdin)) return 4;
  }
  if (strcmp(argv[1], "issue") == 0) issue(n);
  else if (strcmp(argv[1], "per_thread") == 0) per_thread(n, per_thread_loop);
  else if (strcmp(argv[1], "ptsz") == 0) per_thread(n, ptsz_loop);
  else if (strcmp(argv[1], "stream_query") == 0) stream_query(n);
  else if (strcmp(argv[1], "lower") == 0) lower(n);
  else if (strcmp(argv[1], "odd") == 0) odd();
  else if (strcmp(argv[1], "many") == 0) many(n);
  else if (strcmp(argv[1], "waits") == 0) waits(n);
  else if (strcmp(argv[1], "elapsed") == 0) elapsed(n);
  else if (strcmp(argv[1], "reuse") == 0) reuse(n);
  else return 2;
  printf("done\n");
  return 0;
}
