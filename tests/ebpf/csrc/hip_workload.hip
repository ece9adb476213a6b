// A HIP program as hipcc builds it (the real compiler, --offload-arch=gfx90a): kernels
// registered by the module constructor hipcc emits (__hipRegisterFunction), launched with
// <<<>>> (__hipPushCallConfiguration / __hipPopCallConfiguration / hipLaunchKernel, as
// hipcc emits it), hipLaunchKernelGGL, the cooperative and extended launches, module
// launches, a captured graph, copies, allocations and synchronising calls. Run against the
// fake libamdhip64.so.5 (its $ORIGIN rpath) every call succeeds unless FAKE_HIP_FAIL says
// otherwise; against the real one (no GPU) every call fails.
//
//   hip_workload [COUNT] [--wait]   COUNT: how many times the <<<>>> launch of vecAdd runs
#include <hip/hip_runtime.h>
#include <hip/hip_ext.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

namespace ml {
template <typename T, int N>
__global__ void gemm(T *a, int n) { a[threadIdx.x % N] += n; }
}  // namespace ml
namespace {
__global__ void helper(int *x) { x[0] = 1; }
}  // namespace
__global__ void vecAdd(float *a, const float *b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) a[i] += b[i];
}
__global__ void cooperative_kernel(int *x) { x[threadIdx.x] = 0; }
__global__ void graph_step(float *a) { a[threadIdx.x] *= 2; }
__global__ void newer_launch(int *x) { x[0] = 2; }
__global__ void explicit_node(int *x) { x[0] = 3; }
__device__ float table[16];
__global__ void added_node(int *x) { x[0] = 4; }

// ROCm 6.5's launch configuration structs (this program is built against 5.2's headers
// and finds the 6.5 calls at run time, as an application built for several releases does).
struct LaunchConfig { dim3 grid, block; size_t smem; hipStream_t stream; void *attrs; unsigned n; };
struct DrvLaunchConfig {
  unsigned gx, gy, gz, bx, by, bz, smem; hipStream_t stream; void *attrs; unsigned n;
};

static int failures;
static void check(hipError_t e, const char *what) {
  if (e != hipSuccess) {
    failures++;
    fprintf(stderr, "%s: %d\n", what, (int)e);
  }
}

int main(int argc, char **argv) {
  int wait = 0, count = 3;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--wait") == 0) wait = 1;
    else count = atoi(argv[i]);
  }
  if (wait) {
    printf("ready\n");
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin)) return 2;
  }
  float *a = nullptr, *b = nullptr;
  void *managed = nullptr, *host = nullptr, *ext = nullptr;
  static float spare_a[1 << 18], spare_b[1024];  // where an allocation failed
  check(hipMalloc((void **)&a, 1 << 20), "hipMalloc");
  check(hipMalloc((void **)&b, 4096), "hipMalloc");
  if (!a) a = spare_a;
  if (!b) b = spare_b;
  check(hipMallocManaged(&managed, 12345), "hipMallocManaged");
  check(hipHostMalloc(&host, 4096, 0), "hipHostMalloc");
  check(hipExtMallocWithFlags(&ext, 777, 0), "hipExtMallocWithFlags");
  static char src[8192], dst[8192];
  check(hipMemcpy(a, src, 1000, hipMemcpyHostToDevice), "hipMemcpy");
  check(hipMemcpy(a, src, 1000, hipMemcpyHostToDevice), "hipMemcpy");
  check(hipMemcpy(dst, a, 500, hipMemcpyDeviceToHost), "hipMemcpy");
  check(hipMemcpyHtoD((hipDeviceptr_t)a, src, 300), "hipMemcpyHtoD");
  check(hipMemcpyDtoD((hipDeviceptr_t)b, (hipDeviceptr_t)a, 64), "hipMemcpyDtoD");
  check(hipMemcpy2D(b, 32, a, 32, 16, 4, hipMemcpyDeviceToDevice), "hipMemcpy2D");
  check(hipMemcpyAsync(a, src, 200, hipMemcpyHostToDevice, 0), "hipMemcpyAsync");
  // To and from a __device__ variable: the kind their 5th argument (DeviceToDevice given).
  check(hipMemcpyToSymbol(HIP_SYMBOL(table), src, 16, 0, hipMemcpyHostToDevice),
        "hipMemcpyToSymbol");
  check(hipMemcpyFromSymbol(dst, HIP_SYMBOL(table), 8, 4, hipMemcpyDeviceToHost),
        "hipMemcpyFromSymbol");
  check(hipMemcpyToSymbolAsync(HIP_SYMBOL(table), a, 32, 0, hipMemcpyDeviceToDevice, 0),
        "hipMemcpyToSymbolAsync");

  for (int i = 0; i < count; i++) vecAdd<<<dim3(4, 2, 1), dim3(64, 1, 1)>>>(a, b, 10);
  check(hipGetLastError(), "vecAdd<<<>>>");
  hipLaunchKernelGGL(HIP_KERNEL_NAME(ml::gemm<float, 4>), dim3(3), dim3(32), 0, 0, a, 5);
  hipLaunchKernelGGL(HIP_KERNEL_NAME(ml::gemm<float, 4>), dim3(3), dim3(32), 0, 0, a, 5);
  helper<<<1, 1>>>((int *)b);
  int *arg = (int *)b;
  void *args[] = {&arg};
  check(hipLaunchCooperativeKernel(reinterpret_cast<const void *>(cooperative_kernel),
                                   dim3(2), dim3(16), args, 0, 0),
        "hipLaunchCooperativeKernel");
  check(hipExtLaunchKernel(reinterpret_cast<const void *>(cooperative_kernel), dim3(5),
                           dim3(8), args, 0, 0, nullptr, nullptr, 0),
        "hipExtLaunchKernel");

  // Module launches: the names they were looked up by.
  hipModule_t mod;
  hipFunction_t poi, matmul;
  check(hipModuleLoad(&mod, "kernels.hsaco"), "hipModuleLoad");
  check(hipModuleGetFunction(&poi, mod, "triton_poi_fused_add_0"), "hipModuleGetFunction");
  check(hipModuleGetFunction(&matmul, mod, "_ZN6triton6matmulILi2EEEvPf"),
        "hipModuleGetFunction");
  for (int i = 0; i < 2; i++)
    check(hipModuleLaunchKernel(poi, 7, 1, 1, 128, 1, 1, 0, 0, args, nullptr),
          "hipModuleLaunchKernel");
  check(hipExtModuleLaunchKernel(matmul, 256, 1, 1, 64, 1, 1, 0, 0, args, nullptr),
        "hipExtModuleLaunchKernel");
  check(hipHccModuleLaunchKernel(matmul, 130, 1, 1, 64, 1, 1, 0, 0, args, nullptr),
        "hipHccModuleLaunchKernel");

  // ROCm 6.5's launches, where the library has them.
  typedef hipError_t (*ExC)(const LaunchConfig *, const void *, void **);
  typedef hipError_t (*DrvEx)(const DrvLaunchConfig *, hipFunction_t, void **, void **);
  ExC exc = (ExC)dlsym(RTLD_DEFAULT, "hipLaunchKernelExC");
  DrvEx drvex = (DrvEx)dlsym(RTLD_DEFAULT, "hipDrvLaunchKernelEx");
  if (exc && drvex) {
    LaunchConfig c = {dim3(6), dim3(10), 0, 0, nullptr, 0};
    check(exc(&c, reinterpret_cast<const void *>(newer_launch), args), "hipLaunchKernelExC");
    DrvLaunchConfig d = {9, 1, 1, 4, 1, 1, 0, 0, nullptr, 0};
    check(drvex(&d, poi, args, nullptr), "hipDrvLaunchKernelEx");
  }

  // A graph captured from a stream, launched twice.
  hipStream_t s;
  hipGraph_t graph;
  hipGraphExec_t exec;
  check(hipStreamCreate(&s), "hipStreamCreate");
  check(hipStreamBeginCapture(s, hipStreamCaptureModeGlobal), "hipStreamBeginCapture");
  graph_step<<<1, 64, 0, s>>>(a);
  graph_step<<<1, 64, 0, s>>>(a);
  check(hipStreamEndCapture(s, &graph), "hipStreamEndCapture");
  check(hipGraphInstantiate(&exec, graph, nullptr, nullptr, 0), "hipGraphInstantiate");
  check(hipGraphLaunch(exec, s), "hipGraphLaunch");
  check(hipGraphLaunch(exec, s), "hipGraphLaunch");

  // A graph built node by node: hipGraphAddKernelNode, and ROCm 6.2's hipGraphAddNode
  // where the library has it (its struct as 6.2's header lays it out).
  struct NodeParams {
    int type;  // hipGraphNodeTypeKernel: 0 from ROCm 6.0 on
    int reserved0[3];
    union { long long reserved1[29]; hipKernelNodeParams kernel; };
    long long reserved2;
  };
  typedef hipError_t (*AddNode)(hipGraphNode_t *, hipGraph_t, const hipGraphNode_t *, size_t,
                                NodeParams *);
  hipGraph_t built;
  hipGraphExec_t built_exec;
  hipGraphNode_t node;
  hipKernelNodeParams kp = {};
  kp.blockDim = dim3(32);
  kp.gridDim = dim3(2);
  kp.func = reinterpret_cast<void *>(explicit_node);
  kp.kernelParams = args;
  check(hipGraphCreate(&built, 0), "hipGraphCreate");
  check(hipGraphAddKernelNode(&node, built, nullptr, 0, &kp), "hipGraphAddKernelNode");
  AddNode add_node = (AddNode)dlsym(RTLD_DEFAULT, "hipGraphAddNode");
  if (add_node) {
    NodeParams np = {};
    np.type = 0;
    np.kernel = kp;
    np.kernel.func = reinterpret_cast<void *>(added_node);
    check(add_node(&node, built, nullptr, 0, &np), "hipGraphAddNode");
  }
  check(hipGraphInstantiate(&built_exec, built, nullptr, nullptr, 0), "hipGraphInstantiate");
  check(hipGraphLaunch(built_exec, s), "hipGraphLaunch");

  hipEvent_t ev;
  check(hipEventCreate(&ev), "hipEventCreate");
  check(hipEventRecord(ev, s), "hipEventRecord");
  check(hipStreamSynchronize(s), "hipStreamSynchronize");
  check(hipStreamSynchronize(s), "hipStreamSynchronize");
  check(hipEventSynchronize(ev), "hipEventSynchronize");
  // Completion points: done by now (ready, idle), so no hipErrorNotReady here.
  float ms = 0;
  check(hipEventQuery(ev), "hipEventQuery");
  check(hipStreamQuery(s), "hipStreamQuery");
  check(hipEventElapsedTime(&ms, ev, ev), "hipEventElapsedTime");
  check(hipEventDestroy(ev), "hipEventDestroy");
  check(hipDeviceSynchronize(), "hipDeviceSynchronize");
  printf("failures %d\ndone\n", failures);
  return 0;
}
