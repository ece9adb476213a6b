// The benchmark's HIP workload (built by hipcc, run over the fake libamdhip64.so.5): N
// launches in a loop, timed here; prints the mean nanoseconds per call. "hip" calls
// hipLaunchKernel with a kernel handle (what <<<>>> ends in), "hip_module"
// hipModuleLaunchKernel with a function looked up by name.
//   hip_launch_loop hip|hip_module N
#include <hip/hip_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

__global__ void bench_kernel() {}

int main(int argc, char **argv) {
  if (argc < 3) return 2;
  long n = atol(argv[2]);
  int module = strcmp(argv[1], "hip_module") == 0;
  char line[16];
  printf("ready\n");
  fflush(stdout);
  if (!fgets(line, sizeof line, stdin)) return 3;
  hipModule_t mod;
  hipFunction_t f;
  if (hipModuleLoad(&mod, "bench.hsaco") != hipSuccess ||
      hipModuleGetFunction(&f, mod, "_Z12bench_kernelv") != hipSuccess)
    return 4;
  const void *handle = reinterpret_cast<const void *>(bench_kernel);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (long i = 0; i < n; i++) {
    if (module)
      hipModuleLaunchKernel(f, 3, 5, 7, 32, 4, 2, 0, nullptr, nullptr, nullptr);
    else
      hipLaunchKernel(handle, dim3(3, 5, 7), dim3(32, 4, 2), nullptr, 0, nullptr);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double ns = (t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec);
  printf("%.1f\n", ns / n);
  return 0;
}
