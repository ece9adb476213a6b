/* A fake libcudart.so.12: the real runtime entry points with real signatures, calling
 * the (fake) driver the way the real runtime does, so a runtime call that goes through
 * the driver can be checked to count once. */
#include "cuda_fake.h"
#include "fake_fail.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

cudaError_t cudaLaunchKernel(const void *func, dim3 g, dim3 b, void **args, size_t smem,
                             cudaStream_t s) {
  FAIL_IF("cudaLaunchKernel");
  return cuLaunchKernel((CUfunction)func, g.x, g.y, g.z, b.x, b.y, b.z, (unsigned)smem,
                        (CUstream)s, args, NULL);
}
cudaError_t cudaLaunchCooperativeKernel(const void *func, dim3 g, dim3 b, void **args,
                                        size_t smem, cudaStream_t s) {
  FAIL_IF("cudaLaunchCooperativeKernel");
  return cuLaunchCooperativeKernel((CUfunction)func, g.x, g.y, g.z, b.x, b.y, b.z,
                                   (unsigned)smem, (CUstream)s, args);
}
cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *c, const void *func, void **args) {
  FAIL_IF("cudaLaunchKernelExC");
  CUlaunchConfig cu = {c->gridDim.x, c->gridDim.y, c->gridDim.z, c->blockDim.x,
                       c->blockDim.y, c->blockDim.z, (unsigned)c->dynamicSmemBytes,
                       (CUstream)c->stream, NULL, 0};
  return cuLaunchKernelEx(&cu, (CUfunction)func, args, NULL);
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s) {
  FAIL_IF("cudaGraphLaunch");
  return cuGraphLaunch((CUgraphExec)e, (CUstream)s);
}
cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *hostFun) {
  FAIL_IF("__cudaGetKernel");
  /* An opaque handle that is not the host function's address. */
  *kernel = (cudaKernel_t)((uintptr_t)malloc(32) | 1u);
  (void)hostFun;
  return 0;
}
cudaError_t cudaMalloc(void **p, size_t n) {
  FAIL_IF("cudaMalloc"); return cuMemAlloc_v2((CUdeviceptr *)p, n); }
cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t s) {
  FAIL_IF("cudaMallocAsync");
  return cuMemAllocAsync((CUdeviceptr *)p, n, (CUstream)s);
}
cudaError_t cudaMallocManaged(void **p, size_t n, unsigned int flags) {
  FAIL_IF("cudaMallocManaged");
  return cuMemAllocManaged((CUdeviceptr *)p, n, flags);
}
cudaError_t cudaFree(void *p) {
  FAIL_IF("cudaFree"); return cuMemFree_v2((CUdeviceptr)p); }

static CUresult copy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind) {
  switch (kind) {
  case cudaMemcpyHostToDevice: return cuMemcpyHtoD_v2((CUdeviceptr)dst, src, n);
  case cudaMemcpyDeviceToHost: return cuMemcpyDtoH_v2(dst, (CUdeviceptr)src, n);
  case cudaMemcpyDeviceToDevice: return cuMemcpyDtoD_v2((CUdeviceptr)dst, (CUdeviceptr)src, n);
  default: return cuMemcpy((CUdeviceptr)dst, (CUdeviceptr)src, n);
  }
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind) {
  FAIL_IF("cudaMemcpy");
  return copy(dst, src, n, kind);
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                            cudaStream_t s) {
  FAIL_IF("cudaMemcpyAsync");
  if (kind == cudaMemcpyHostToDevice)
    return cuMemcpyHtoDAsync_v2((CUdeviceptr)dst, src, n, (CUstream)s);
  return copy(dst, src, n, kind);
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  FAIL_IF("cudaStreamSynchronize"); return cuStreamSynchronize((CUstream)s); }
cudaError_t cudaDeviceSynchronize(void) {
  FAIL_IF("cudaDeviceSynchronize"); return cuCtxSynchronize(); }
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  FAIL_IF("cudaEventSynchronize"); return cuEventSynchronize(e); }

/* The runtime's devices are the driver's (CUDA_VISIBLE_DEVICES applied there). */
#define cudaErrorInvalidDevice 101
cudaError_t cudaGetDeviceCount(int *count) {
  FAIL_IF("cudaGetDeviceCount"); return cuDeviceGetCount(count); }
cudaError_t cudaSetDevice(int device) {
  FAIL_IF("cudaSetDevice");
  int n = 0;
  cuDeviceGetCount(&n);
  return device >= 0 && device < n ? 0 : cudaErrorInvalidDevice;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device) {
  FAIL_IF("cudaGetDeviceProperties");
  memset(prop, 0, sizeof *prop);
  snprintf(prop->name, sizeof prop->name, "Fake GPU %d", device);
  CUuuid u;
  if (cuDeviceGetUuid(&u, device) != 0) return cudaErrorInvalidDevice;
  memcpy(&prop->uuid, &u, sizeof u);
  return 0;
}
cudaError_t cudaDeviceGetPCIBusId(char *pciBusId, int len, int device) {
  FAIL_IF("cudaDeviceGetPCIBusId");
  return cuDeviceGetPCIBusId(pciBusId, len, device) == 0 ? 0 : cudaErrorInvalidDevice;
}
