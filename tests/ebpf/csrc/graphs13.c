/* CUDA 13's runtime (libcudart.so.13, the fake built with FAKE_CUDART_13), whose
 * cudaGraphAddNode takes the edge data before the count: a graph of two kernel nodes, a
 * memcpy node and a child graph, all added by cudaGraphAddNode, launched 3 times; then
 * n13_last's graph (added by cudaGraphAddKernelNode) once. Counts asserted by tests/ebpf/test_graphs.py (ADDED_13).
 * With --wait: prints "ready" and waits for a line before the work. */
#include "cuda_fake.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile int sink;
__attribute__((noinline)) void n13_a(int n) { sink += n; }
__attribute__((noinline)) void n13_b(int n) { sink += n + 1; }
__attribute__((noinline)) void n13_ch(int n) { sink += n + 2; }
__attribute__((noinline)) void n13_last(int n) { sink += n + 3; }

static void check(int rc, const char *what) {
  if (rc != 0) {
    fprintf(stderr, "%s: %d\n", what, rc);
    exit(11);
  }
}

static void add(cudaGraph_t g, cudaGraphNodeParams *np, const char *what) {
  cudaGraphNode_t node;
  check(cudaGraphAddNode(&node, g, NULL, NULL, 0, np), what);
}

static cudaGraph_t kernels(void (*f)(int), void (*g)(int)) {
  cudaGraph_t graph;
  check(cudaGraphCreate(&graph, 0), "create");
  cudaGraphNodeParams np;
  for (int i = 0; i < 2; i++) {
    void (*k)(int) = i == 0 ? f : g;
    if (!k) continue;
    memset(&np, 0, sizeof np);
    np.type = 0;
    np.kernel.func = (void *)k;
    np.kernel.gridDim = (dim3){1, 1, 1};
    np.kernel.blockDim = (dim3){32, 1, 1};
    add(graph, &np, "kernel");
  }
  return graph;
}

static void run(cudaGraph_t g, int times) {
  cudaGraphExec_t x;
  check(cudaGraphInstantiate(&x, g, 0), "instantiate");
  for (int i = 0; i < times; i++) check(cudaGraphLaunch(x, NULL), "launch");
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--wait") == 0) {
    printf("ready\n");
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin)) return 3;
  }
  cudaGraph_t g = kernels(n13_a, n13_b);
  cudaGraphNodeParams np;
  memset(&np, 0, sizeof np);
  np.type = 1; /* a memcpy node: no kernel */
  add(g, &np, "memcpy");
  memset(&np, 0, sizeof np);
  np.type = 4; /* a child graph */
  np.graph.graph = kernels(n13_ch, NULL);
  add(g, &np, "child");
  run(g, 3);
  /* The last graph, added by cudaGraphAddKernelNode: counted whatever came before. */
  cudaGraph_t last;
  cudaGraphNode_t node;
  cudaKernelNodeParams kp = {(void *)n13_last, {1, 1, 1}, {32, 1, 1}, 0, NULL, NULL};
  check(cudaGraphCreate(&last, 0), "create last");
  check(cudaGraphAddKernelNode(&node, last, NULL, 0, &kp), "add last");
  run(last, 1);
  check(cudaDeviceSynchronize(), "sync");
  printf("done\n");
  return 0;
}
