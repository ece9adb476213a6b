// One of many processes mapping the HIP runtime at once (the drill of 1,000, issue #23's
// bad input): built by hipcc, run over the fake libamdhip64.so.5. It maps the library,
// blocks reading its stdin (a pipe shared by all of them) until the end of the file, then
// makes N hipLaunchKernel launches of `crowd_kernel` and exits 0 (1 if one failed).
//   hip_many N
#include <hip/hip_runtime.h>
#include <stdlib.h>
#include <unistd.h>

__global__ void crowd_kernel() {}

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  int n = atoi(argv[1]);
  char c;
  while (read(0, &c, 1) > 0) {
  }
  const void *handle = reinterpret_cast<const void *>(crowd_kernel);
  for (int i = 0; i < n; i++)
    if (hipLaunchKernel(handle, dim3(1), dim3(32), nullptr, 0, nullptr) != hipSuccess) return 1;
  return 0;
}
