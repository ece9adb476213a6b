/* Kernel launches on demand, for tests/ebpf/test_device_learned.py: prints "ready", then
 * for each line N on stdin launches step_kernel N times through the runtime and prints
 * "done N"; exits 0 when stdin closes. Several copies of this one program run at once
 * (one executable name), NVML listing only some of them. */
#include "cuda_fake.h"
#include <stdio.h>
#include <stdlib.h>

static volatile int sink;
__attribute__((noinline)) void step_kernel(int n) { sink += n; }

int main(void) {
  char line[32];
  void *args[1] = {NULL};
  printf("ready\n");
  fflush(stdout);
  while (fgets(line, sizeof line, stdin)) {
    long n = atol(line);
    for (long i = 0; i < n; i++)
      if (cudaLaunchKernel((const void *)step_kernel, (dim3){1, 1, 1}, (dim3){32, 1, 1}, args,
                           0, NULL) != 0)
        return 10;
    printf("done %ld\n", n);
    fflush(stdout);
  }
  return 0;
}
