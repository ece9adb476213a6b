/* CUDA graphs: kernels captured from streams (one joined through an event), added as
 * nodes, captured into an existing graph; executable graphs launched through the runtime
 * and the driver. Counts are asserted by tests/ebpf/test_graphs.py: change both
 * together. Run with FAKE_CUDA_FAIL=cuStreamEndCapture=901x1: the first capture fails.
 *
 * With --wait: prints "ready" and waits for a line before the work.
 * With --flood N: N graphs of one k_d node each, instantiated and launched once (the
 * caps of tests/drills/test_ebpf_drills.py). --flood N --wait: k_d launched once (not in
 * a graph), "ready", then the flood after a line on stdin.
 * With --follow (after --wait, if any): graphs cloned, executable graphs updated, child
 * graphs, cudaGraphAddNode_v2 (follow(), with its own kernels). Run with
 * FAKE_CUDA_FAIL=cudaGraphClone=2x1: the first clone fails.
 * With --updates CHUNKS STEPS: a serving loop's pattern (llama.cpp's): each step captures
 * a graph and destroys it after use: on odd steps (u_new) one executable graph is updated
 * to it and launched once, on even steps (u_old) the executable graph is destroyed and
 * instantiated again instead, then launched once. CHUNKS times STEPS steps, each chunk
 * after a line on stdin ("ready" first, "chunk" after each). */
#include "cuda_fake.h"
#include "module_function.h"
#define FN(name) module_function("graphs.cubin", name)
#include <stdarg.h>
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
/* follow(): one set of kernels per part */
__attribute__((noinline)) void c_a(int n) { sink += n + 7; }
__attribute__((noinline)) void c_b(int n) { sink += n + 8; }
__attribute__((noinline)) void c_kept(int n) { sink += n + 9; }
__attribute__((noinline)) void u_old(int n) { sink += n + 10; }
__attribute__((noinline)) void u_new(int n) { sink += n + 11; }
__attribute__((noinline)) void p_own(int n) { sink += n + 12; }
__attribute__((noinline)) void ch_a(int n) { sink += n + 13; }
__attribute__((noinline)) void ch_b(int n) { sink += n + 14; }
__attribute__((noinline)) void ch_c(int n) { sink += n + 15; }
__attribute__((noinline)) void ch_d(int n) { sink += n + 16; }
__attribute__((noinline)) void ch_late(int n) { sink += n + 17; }
__attribute__((noinline)) void v_a(int n) { sink += n + 18; }
__attribute__((noinline)) void v_ch(int n) { sink += n + 19; }
__attribute__((noinline)) void v_ch2(int n) { sink += n + 20; }
__attribute__((noinline)) void f_last(int n) { sink += n + 21; }

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

static void add_kernel(cudaGraph_t g, void (*f)(int)) {
  cudaGraphNode_t node;
  cudaKernelNodeParams kp = {(void *)f, {1, 1, 1}, {32, 1, 1}, 0, NULL, NULL};
  check(cudaGraphAddKernelNode(&node, g, NULL, 0, &kp), "add");
}

/* A graph of the kernel nodes given (runtime host functions; NULL ends the list). */
static cudaGraph_t graph_of(void (*first)(int), ...) {
  cudaGraph_t g;
  check(cudaGraphCreate(&g, 0), "create");
  va_list ap;
  va_start(ap, first);
  for (void (*f)(int) = first; f; f = va_arg(ap, void (*)(int))) add_kernel(g, f);
  va_end(ap);
  return g;
}

static void run(cudaGraph_t g, int times) {
  cudaGraphExec_t x;
  check(cudaGraphInstantiate(&x, g, 0), "instantiate");
  for (int i = 0; i < times; i++) check(cudaGraphLaunch(x, S3), "launch");
}

static void add_driver_kernel(cudaGraph_t g, const char *name) {
  CUDA_KERNEL_NODE_PARAMS cp;
  memset(&cp, 0, sizeof cp);
  cp.func = FN(name);
  CUgraphNode node;
  check(cuGraphAddKernelNode(&node, (CUgraph)g, NULL, 0, &cp), name);
}

/* Counts asserted by tests/ebpf/test_graphs.py (FOLLOWED): change both together. */
static int follow(void) {
  cudaGraphNode_t node;
  CUgraphNode cnode;

  /* Clones: c_a and c_drv launched 2 times from a runtime clone, 3 from a driver clone
   * made after c_b was added to the original (the first clone does not have it). */
  cudaGraph_t orig = graph_of(c_a, NULL), clone = graph_of(c_kept, NULL);
  add_driver_kernel(orig, "c_drv");
  if (cudaGraphClone(&clone, orig) == 0) return 14; /* fails: `clone` still holds c_kept */
  run(clone, 1);
  check(cudaGraphClone(&clone, orig), "clone");
  add_kernel(orig, c_b);
  run(clone, 2);
  CUgraph dclone;
  check(cuGraphClone(&dclone, (CUgraph)orig), "cu clone");
  CUgraphExec dx;
  check(cuGraphInstantiateWithFlags(&dx, dclone, 0), "cu instantiate");
  for (int i = 0; i < 3; i++) check(cuGraphLaunch(dx, (CUstream)S3), "cu launch");

  /* Updates: u_old launched 3 times, then u_new 2 times; an update to a graph of
   * another shape fails (u_new once more); u_old again 4 times (driver update), then
   * u_new 5 times (CUDA 11's driver update). */
  cudaGraph_t old_g = graph_of(u_old, NULL), new_g = graph_of(u_new, NULL);
  cudaGraph_t other = graph_of(u_old, u_new, NULL);
  cudaGraphExec_t x;
  cudaGraphExecUpdateResultInfo info;
  check(cudaGraphInstantiate(&x, old_g, 0), "instantiate u");
  for (int i = 0; i < 3; i++) check(cudaGraphLaunch(x, S3), "launch u_old");
  check(cudaGraphExecUpdate(x, new_g, &info), "update");
  for (int i = 0; i < 2; i++) check(cudaGraphLaunch(x, S3), "launch u_new");
  if (cudaGraphExecUpdate(x, other, &info) == 0 || info.result == 0) return 15;
  check(cudaGraphLaunch(x, S3), "launch u_new again");
  check(cuGraphExecUpdate_v2((CUgraphExec)x, (CUgraph)old_g,
                             (CUgraphExecUpdateResultInfo *)&info), "cu update");
  for (int i = 0; i < 4; i++) check(cuGraphLaunch((CUgraphExec)x, (CUstream)S3), "u_old");
  int result;
  check(cuGraphExecUpdate((CUgraphExec)x, (CUgraph)new_g, &cnode, &result), "cu update v1");
  for (int i = 0; i < 5; i++) check(cudaGraphLaunch(x, S3), "launch u_new 3");

  /* Child graphs, one by each call, launched twice with the parent's own p_own;
   * ch_late is added to a child after it was added to the parent: not in the parent. */
  cudaGraph_t parent = graph_of(p_own, NULL), first = graph_of(ch_a, NULL);
  check(cudaGraphAddChildGraphNode(&node, parent, NULL, 0, first), "child a");
  cudaGraph_t late = graph_of(ch_late, NULL);
  check(cudaGraphAddChildGraphNode(&node, first, NULL, 0, late), "late");
  cudaGraphNodeParams np;
  memset(&np, 0, sizeof np);
  np.type = 4; /* cudaGraphNodeTypeGraph */
  np.graph.graph = graph_of(ch_b, NULL);
  check(cudaGraphAddNode(&node, parent, NULL, 0, &np), "child b");
  check(cuGraphAddChildGraphNode(&cnode, (CUgraph)parent, NULL, 0,
                                 (CUgraph)graph_of(ch_c, NULL)), "child c");
  CUgraphNodeParams cnp;
  memset(&cnp, 0, sizeof cnp);
  cnp.type = 4; /* CU_GRAPH_NODE_TYPE_GRAPH */
  cnp.graph.graph = (CUgraph)graph_of(ch_d, NULL);
  check(cuGraphAddNode(&cnode, (CUgraph)parent, NULL, 0, &cnp), "child d");
  run(parent, 2);

  /* cudaGraphAddNode_v2 / cuGraphAddNode_v2 (the parameters in 6th place): kernel nodes,
   * child graphs and a memcpy node (no kernel), launched 3 times. */
  cudaGraph_t v2 = graph_of(NULL);
  memset(&np, 0, sizeof np);
  np.type = 0;
  np.kernel.func = (void *)v_a;
  check(cudaGraphAddNode_v2(&node, v2, NULL, NULL, 0, &np), "v_a");
  np.type = 1; /* a memcpy node */
  check(cudaGraphAddNode_v2(&node, v2, NULL, NULL, 0, &np), "v2 memcpy");
  memset(&np, 0, sizeof np);
  np.type = 4;
  np.graph.graph = graph_of(v_ch, NULL);
  check(cudaGraphAddNode_v2(&node, v2, NULL, NULL, 0, &np), "v_ch");
  memset(&cnp, 0, sizeof cnp);
  cnp.type = 0;
  cnp.kernel.func = FN("v_drv");
  check(cuGraphAddNode_v2(&cnode, (CUgraph)v2, NULL, NULL, 0, &cnp), "v_drv");
  memset(&cnp, 0, sizeof cnp);
  cnp.type = 4;
  cnp.graph.graph = (CUgraph)graph_of(v_ch2, NULL);
  check(cuGraphAddNode_v2(&cnode, (CUgraph)v2, NULL, NULL, 0, &cnp), "v_ch2");
  run(v2, 3);

  /* The last graph launch: once it is counted, every one before is. */
  run(graph_of(f_last, NULL), 1);
  printf("done\n");
  return 0;
}

static int updates(long chunks, long steps) {
  char line[16];
  cudaGraphExec_t x = NULL;
  cudaGraphExecUpdateResultInfo info;
  printf("ready\n");
  fflush(stdout);
  for (long step = 0; step < chunks * steps; step++) {
    if (step % steps == 0 && !fgets(line, sizeof line, stdin)) return 3;
    cudaGraph_t g;
    check(cudaStreamBeginCapture(S1, cudaStreamCaptureModeGlobal), "begin");
    launch(step % 2 ? u_new : u_old, S1, 1);
    check(cudaStreamEndCapture(S1, &g), "end");
    if (x && step % 2 == 0) {
      check(cudaGraphExecDestroy(x), "exec destroy");
      x = NULL;
    }
    if (x)
      check(cudaGraphExecUpdate(x, g, &info), "update");
    else
      check(cudaGraphInstantiate(&x, g, 0), "instantiate");
    check(cudaGraphLaunch(x, S1), "launch");
    check(cudaGraphDestroy(g), "destroy");
    if (step % steps == steps - 1) {
      printf("chunk\n");
      fflush(stdout);
    }
  }
  return 0;
}

int main(int argc, char **argv) {
  char line[16];
  if (argc > 2 && strcmp(argv[1], "--flood") == 0) {
    if (argc > 3 && strcmp(argv[3], "--wait") == 0) {
      launch(k_d, S1, 1); /* named while the process runs: its kernel is k_d's */
      printf("ready\n");
      fflush(stdout);
      if (!fgets(line, sizeof line, stdin)) return 3;
    }
    return flood(atol(argv[2]));
  }
  if (argc > 3 && strcmp(argv[1], "--updates") == 0)
    return updates(atol(argv[2]), atol(argv[3]));
  if (strcmp(argv[argc - 1], "--wait") == 0) {
    printf("ready\n");
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin)) return 3;
  }
  if (argc > 1 && strcmp(argv[1], "--follow") == 0) return follow();
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
