/* CUDA 13's entry points. The runtime (libcudart.so.13, the fake built with
 * FAKE_CUDART_13), whose cudaGraphAddNode takes the edge data before the count: a graph of
 * two kernel nodes, a memcpy node and a child graph, all added by cudaGraphAddNode,
 * launched 3 times; a kernel node given by its cudaKernel_t (CUDA 13.2's union), launched
 * twice. The driver: a graph built by cuGraphAddNode_v3 (CUDA 13.4; its first call fails
 * under FAKE_CUDA_FAIL=cuGraphAddNode_v3=1x1) of a kernel node, a kernel node given by
 * its CUkernel (func NULL) and a child graph, launched twice; cuCtxSynchronize_v2 (CUDA
 * 13.0) 4 times, the first failing under cuCtxSynchronize_v2=201x1. Recaptures (CUDA
 * 13.3), through the runtime and the driver: a graph captured with one kernel and
 * launched once, captured again into the same graph with another kernel, its executable
 * graph updated and launched twice. Then n13_last's graph (added by
 * cudaGraphAddKernelNode) once. Counts asserted by tests/ebpf/test_graphs.py (ADDED_13,
 * BY_HANDLE_13, ADDED_V3, RECAPTURED, CUDA13_*).
 * With --launches: nvcc 13's kernel launches instead (launches()).
 * With --wait (last): prints "ready" and waits for a line before the work. */
#include "cuda_fake.h"
#include "module_function.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile int sink;
__attribute__((noinline)) void n13_a(int n) { sink += n; }
__attribute__((noinline)) void n13_b(int n) { sink += n + 1; }
__attribute__((noinline)) void n13_ch(int n) { sink += n + 2; }
__attribute__((noinline)) void n13_last(int n) { sink += n + 3; }
__attribute__((noinline)) void n13_kern(int n) { sink += n + 4; }
__attribute__((noinline)) void n13_ch3(int n) { sink += n + 5; }
__attribute__((noinline)) void n13_r1(int n) { sink += n + 6; }
__attribute__((noinline)) void n13_r2(int n) { sink += n + 7; }
__attribute__((noinline)) void n13_nvcc(int n) { sink += n + 8; }

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

static void launch(void (*f)(int), cudaStream_t s) {
  void *args[1] = {NULL};
  check(cudaLaunchKernel((const void *)f, (dim3){1, 1, 1}, (dim3){32, 1, 1}, args, 0, s),
        "launch");
}

static void drv_launch(const char *name, CUstream s) {
  check(cuLaunchKernel(module_function("graphs13.cubin", name), 1, 1, 1, 32, 1, 1, 0, s, NULL,
                       NULL), name);
}

/* A graph captured on `s` with `first`, launched once, recaptured with `second`, its
 * executable graph updated to it and launched twice: the runtime's calls, or (`driver`)
 * the driver's with the kernels named n13_dr1 and n13_dr2. */
static void recaptured(int driver, void (*first)(int), void (*second)(int), cudaStream_t s) {
  cudaGraph_t g, back;
  cudaGraphExec_t x;
  cudaGraphExecUpdateResultInfo info;
  if (driver) {
    check(cuStreamBeginCapture_v2((CUstream)s, 0), "capture drv");
    drv_launch("n13_dr1", (CUstream)s);
    check(cuStreamEndCapture((CUstream)s, (CUgraph *)&g), "end drv");
    check(cuGraphInstantiateWithFlags((CUgraphExec *)&x, (CUgraph)g, 0), "instantiate drv");
    check(cuGraphLaunch((CUgraphExec)x, (CUstream)s), "launch drv");
    check(cuStreamBeginRecaptureToGraph((CUstream)s, 0, (CUgraph)g, NULL, NULL), "recapture");
    drv_launch("n13_dr2", (CUstream)s);
    check(cuStreamEndCapture((CUstream)s, (CUgraph *)&back), "end recapture drv");
    check(cuGraphExecUpdate_v2((CUgraphExec)x, (CUgraph)g, (CUgraphExecUpdateResultInfo *)&info),
          "update drv");
  } else {
    check(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "capture");
    launch(first, s);
    check(cudaStreamEndCapture(s, &g), "end");
    check(cudaGraphInstantiate(&x, g, 0), "instantiate");
    check(cudaGraphLaunch(x, s), "launch");
    check(cudaStreamBeginRecaptureToGraph(s, cudaStreamCaptureModeGlobal, g, NULL),
          "recapture");
    launch(second, s);
    check(cudaStreamEndCapture(s, &back), "end recapture");
    check(cudaGraphExecUpdate(x, g, &info), "update");
  }
  if (back != g) exit(14);
  for (int i = 0; i < 2; i++) check(cudaGraphLaunch(x, s), "launch recaptured");
}

static void run(cudaGraph_t g, int times) {
  cudaGraphExec_t x;
  check(cudaGraphInstantiate(&x, g, 0), "instantiate");
  for (int i = 0; i < times; i++) check(cudaGraphLaunch(x, NULL), "launch");
}

/* --launches: nvcc 13's <<<>>> launch, 5 times (crt/host_runtime.h: the kernel's handle
 * from __cudaGetKernel, once, then __cudaLaunchKernel). */
static int launches(void) {
  cudaKernel_t handle;
  void *args[1] = {NULL};
  check(__cudaGetKernel(&handle, (const void *)n13_nvcc), "get n13_nvcc");
  for (int i = 0; i < 5; i++)
    check(__cudaLaunchKernel(handle, (dim3){4, 1, 1}, (dim3){64, 1, 1}, args, 0, NULL),
          "__cudaLaunchKernel");
  printf("done\n");
  return 0;
}

int main(int argc, char **argv) {
  if (strcmp(argv[argc - 1], "--wait") == 0) {
    printf("ready\n");
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin)) return 3;
  }
  if (argc > 1 && strcmp(argv[1], "--launches") == 0) return launches();
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
  /* A kernel node given as the kernel's handle, not its host function: CUDA 13.2 made
   * cudaKernelNodeParamsV2's func a union of the two (functionType 0: CUDA deduces it). */
  cudaKernel_t handle;
  check(__cudaGetKernel(&handle, (const void *)n13_kern), "get kernel");
  cudaGraph_t by_handle;
  check(cudaGraphCreate(&by_handle, 0), "create by handle");
  memset(&np, 0, sizeof np);
  np.type = 0;
  np.kernel.func = (void *)handle;
  add(by_handle, &np, "by handle");
  run(by_handle, 2);
  /* cuGraphAddNode_v3 (CUDA 13.4): the parameters in 6th place, as _v2's. */
  CUgraph drv;
  CUgraphNode cnode;
  CUgraphNodeParams cnp;
  check(cuGraphCreate(&drv, 0), "create drv");
  memset(&cnp, 0, sizeof cnp);
  cnp.type = 0;
  cnp.kernel.func = module_function("graphs13.cubin", "n13_drv");
  if (cuGraphAddNode_v3(&cnode, drv, NULL, NULL, 0, &cnp) == 0) exit(12); /* fails */
  check(cuGraphAddNode_v3(&cnode, drv, NULL, NULL, 0, &cnp), "v3 kernel");
  /* A kernel node by CUkernel (func NULL, CUDA 12.0's kern), from a library. */
  CUlibrary lib;
  memset(&cnp, 0, sizeof cnp);
  cnp.type = 0;
  check(cuLibraryLoadFromFile(&lib, "graphs13.cubin", NULL, NULL, 0, NULL, NULL, 0), "lib");
  check(cuLibraryGetKernel(&cnp.kernel.kern, lib, "n13_lib"), "get n13_lib");
  check(cuGraphAddNode_v3(&cnode, drv, NULL, NULL, 0, &cnp), "v3 kern");
  memset(&cnp, 0, sizeof cnp);
  cnp.type = 4;
  cnp.graph.graph = (CUgraph)kernels(n13_ch3, NULL);
  check(cuGraphAddNode_v3(&cnode, drv, NULL, NULL, 0, &cnp), "v3 child");
  run((cudaGraph_t)drv, 2);
  /* cuCtxSynchronize_v2 (CUDA 13.0): a context's work; the first call fails. */
  if (cuCtxSynchronize_v2((CUcontext)0x3001) == 0) exit(13);
  for (int i = 0; i < 3; i++) check(cuCtxSynchronize_v2((CUcontext)0x3001), "ctx sync");
  recaptured(0, n13_r1, n13_r2, (cudaStream_t)0x1301);
  recaptured(1, NULL, NULL, (cudaStream_t)0x1302);
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
