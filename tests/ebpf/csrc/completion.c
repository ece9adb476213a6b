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
 *   completion stream_query N  N loops of q_kernel on stream A, polled with
 *                            cudaStreamQuery until idle
 *
 * Prints "ready", waits for a line on stdin (with --wait), runs, prints "done". */
#include "cuda_fake.h"
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KERNEL_MS 20ULL /* above 2^24 ns (16.8 ms), a bucket bound */
#define LONG_MS 200ULL  /* above 2^26 ns (67.1 ms) */
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

static void per_thread(int n) {
  for (int i = 0; i < n; i++) {
    pthread_t a, b;
    pthread_create(&a, NULL, per_thread_loop, (void *)t_short);
    pthread_create(&b, NULL, per_thread_loop, (void *)t_long);
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

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: completion issue|per_thread|stream_query N [--wait]\n");
    return 2;
  }
  void (*all[])(int) = {k_polled, k_front, k_timed, k_late, k_waiter, t_short, q_kernel};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    fake_kernel_duration((const void *)all[i], KERNEL_MS * MS);
  fake_kernel_duration((const void *)t_long, LONG_MS * MS);
  int n = atoi(argv[2]);
  printf("ready\n");
  fflush(stdout);
  if (argc > 3 && strcmp(argv[3], "--wait") == 0) {
    char line[16];
    if (!fgets(line, sizeof line, stdin)) return 4;
  }
  if (strcmp(argv[1], "issue") == 0) issue(n);
  else if (strcmp(argv[1], "per_thread") == 0) per_thread(n);
  else if (strcmp(argv[1], "stream_query") == 0) stream_query(n);
  else return 2;
  printf("done\n");
  return 0;
}
