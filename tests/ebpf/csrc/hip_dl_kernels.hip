// HIP kernels in a shared library that a program dlopens after it started (a PyTorch
// extension, a JIT-built module): hipcc's constructor registers them then
// (__hipRegisterFunction), long after the exporter attached. Built with hidden symbols
// and stripped, so the registration is the only place their names are.
#include <hip/hip_runtime.h>

namespace ext {
__global__ void late_kernel(int *x) { x[threadIdx.x] = 1; }
}  // namespace ext

extern "C" __attribute__((visibility("default"))) int launch_late(int n) {
  for (int i = 0; i < n; i++) ext::late_kernel<<<dim3(2), dim3(8)>>>(nullptr);
  return (int)hipGetLastError();
}
