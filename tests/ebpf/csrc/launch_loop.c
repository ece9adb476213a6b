/* The benchmark's workload: N kernel launches in a loop, timed here; prints the mean
 * nanoseconds per call. "runtime" goes through cudaLaunchKernel (which calls the
 * driver), "driver" calls cuLaunchKernel directly. */
#include "cuda_fake.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void kernel_stub(void) {}

int main(int argc, char **argv) {
  if (argc < 3) return 2;
  long n = atol(argv[2]);
  int runtime = strcmp(argv[1], "runtime") == 0;
  char line[16];
  printf("ready\n");
  fflush(stdout);
  if (!fgets(line, sizeof line, stdin)) return 3;
  dim3 g = {3, 5, 7}, b = {32, 4, 2};
  CUfunction f;
  cuModuleGetFunction(&f, NULL, "_Z11bench_kernelv");
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (long i = 0; i < n; i++) {
    if (runtime)
      cudaLaunchKernel((const void *)kernel_stub, g, b, NULL, 0, NULL);
    else
      cuLaunchKernel(f, 3, 5, 7, 32, 4, 2, 0, NULL, NULL, NULL);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double ns = (t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec);
  printf("%.1f\n", ns / n);
  return 0;
}
