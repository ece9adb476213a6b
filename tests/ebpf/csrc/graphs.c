/* CUDA graphs: kernels captured from streams (one joined through an event), added as
 * nodes, captured into an existing graph; executable graphs launched through the runtime
 * and the driver. Counts are asserted by tests/ebpf/test_graphs.py: change both
 * together. Run with FAKE_CUDA_FAIL=cuStreamEndCapture=901x1: the first capture fails.
 *
 * With --wait: prints "ready" and waits for a line before the work.
 * With --flood N: N graphs of one k_d node each, instantiated and launched once (the
 * caps of tests/drills/test_ebpf_drills.py). */
#include "cuda_fake.h"
#include "module_function.h"
#define FN(name) module_function("graphs.cubin", name)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile int sink;
__attribute__((noinline)) void k_a(int n) { sink += n; }
__attribute__((noinline)) void k_b(int n) { sink += n + 1; }
__attribute__((noinline)) void k_c(int n) { sink += n + 2; }
__attribute__((noinline)) void k_d(int n) { sink += n + 3; }
__attribute__((noinline)) void k_e(int n) { sink += n + 4; }
__attribute__((noinline)) void k_f(int n) { sink += n + 5; }
__attribute__((noinline)) void k_lost(int n) { sink += n + 6; }

#define S1 ((cudaStream_t)0x1001)
#define S2 ((cudaStream_t)0x1002)
#define S3 ((cudaStream_t)0x1003)
#define E1 ((cudaEvent_t)0x2001)
#define E2 ((cudaEvent_t)0x2002)

static void launch(void (*f)(int), cudaStream_t s, int times) {
  void *args[1] = {NULL};
  for (int i = 0; i < times; i++)
    if (cudaLaunchKernel((const void *)f, (dim3){2, 1, 1}, (dim3){64, 1, 1}, args, 0, s) != 0)
      exit(10);
}

static void check(int rc, const char *what) {
  if (rc != 0) {
    fprintf(stderr, "%s: %d\n", what, rc);
    exit(11);
  }
}

static int flood(long n) {
  for (long i = 0; i < n; i++) {
    cudaGraph_t g;
    cudaGraphNode_t node;
    cudaGraphExec_t x;
    cudaKernelNodeParams kp = {(void *)k_d, {1, 1, 1}, {32, 1, 1}, 0, NULL, NULL};
    check(cudaGraphCreate(&g, 0), "flood create");
    check(cudaGraphAddKernelNode(&node, g, NULL, 0, &kp), "flood add");
    check(cudaGraphInstantiate(&x, g, 0), "flood instantiate");
    check(cudaGraphLaunch(x, S1), "flood launch");
  }
  printf("done\n");
  return 0;
}

int main(int argc, char **argv) {
  char line[16];
  if (argc > 2 && strcmp(argv[1], "--flood") == 0) return flood(atol(argv[2]));
  if (argc > 1 && strcmp(argv[1], "--wait") == 0) {
    printf("ready\n");
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin)) return 3;
  }
  cudaGraph_t g;
  cudaGraphExec_t x;

  /* A capture that fails to end (FAKE_CUDA_FAIL): its kernel is neither run nor a node. */
  check(cudaStreamBeginCapture(S1, cudaStreamCaptureModeGlobal), "begin 0");
  launch(k_lost, S1, 1);
  if (cudaStreamEndCapture(S1, &g) == 0) return 12;

  /* Capture on S1; S2 joins through E1 and rejoins S1 through E2. */
  check(cudaStreamBeginCapture(S1, cudaStreamCaptureModeGlobal), "begin 1");
  launch(k_a, S1, 2);
  launch(k_b, S1, 1);
  check(cudaEventRecord(E1, S1), "record E1");
  check(cudaStreamWaitEvent(S2, E1, 0), "wait E1");
  launch(k_c, S2, 1);
  check(cuLaunchKernel(FN("drv_g"), 1, 1, 1, 32, 1, 1, 0, (CUstream)S1, NULL, NULL),
        "drv_g");
  check(cudaEventRecord(E2, S2), "record E2");
  check(cudaStreamWaitEvent(S1, E2, 0), "wait E2");
  cudaGraph_t g1;
  check(cudaStreamEndCapture(S1, &g1), "end 1");
  cudaGraphExec_t x1;
  check(cudaGraphInstantiate(&x1, g1, 0), "instantiate 1");
  for (int i = 0; i < 5; i++) check(cudaGraphLaunch(x1, S1), "launch x1");
  for (int i = 0; i < 2; i++) check(cuGraphLaunch((CUgraphExec)x1, (CUstream)S1), "cu x1");
  /* After the capture: run, on both streams. */
  launch(k_a, S1, 1);
  launch(k_c, S2, 1);

  /* Nodes added one by one: runtime, generic (a kernel and a memcpy), driver. */
  cudaGraph_t g2;
  cudaGraphNode_t node;
  check(cudaGraphCreate(&g2, 0), "create 2");
  cudaKernelNodeParams kp = {(void *)k_d, {1, 1, 1}, {32, 1, 1}, 0, NULL, NULL};
  check(cudaGraphAddKernelNode(&node, g2, NULL, 0, &kp), "add k_d");
  cudaGraphNodeParams np;
  memset(&np, 0, sizeof np);
  np.type = 0;
  np.kernel.func = (void *)k_e;
  check(cudaGraphAddNode(&node, g2, NULL, 0, &np), "add k_e");
  np.type = 1; /* a memcpy node */
  check(cudaGraphAddNode(&node, g2, NULL, 0, &np), "add memcpy");
  CUDA_KERNEL_NODE_PARAMS cp;
  memset(&cp, 0, sizeof cp);
  cp.func = FN("drv_h");
  CUgraphNode cnode;
  check(cuGraphAddKernelNode(&cnode, (CUgraph)g2, NULL, 0, &cp), "add drv_h");
  cudaGraphExec_t x2;
  check(cudaGraphInstantiate(&x2, g2, 0), "instantiate 2");
  for (int i = 0; i < 3; i++) check(cudaGraphLaunch(x2, S3), "launch x2");

  /* Captured into g2 (k_f added to its three kernels); x2 keeps what it had. */
  check(cudaStreamBeginCaptureToGraph(S3, g2, NULL, NULL, 0, cudaStreamCaptureModeGlobal),
        "begin 3");
  launch(k_f, S3, 1);
  check(cudaStreamEndCapture(S3, &g), "end 3");
  if (g != g2) return 13;
  check(cudaGraphInstantiate(&x, g2, 0), "instantiate 3");
  check(cudaGraphLaunch(x, S3), "launch x3");
  check(cudaGraphLaunch(x2, S3), "launch x2 again");

  /* An executable graph instantiated where no probe saw it. */
  for (int i = 0; i < 4; i++)
    check(cudaGraphLaunch((cudaGraphExec_t)0x77, S3), "launch unknown");
  printf("done\n");
  return 0;
}
