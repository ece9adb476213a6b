/* A fake libcuda.so.1: the real driver entry points with real signatures. Launches and
 * copies do nothing; handles are filled so callers can go on; synchronising calls block
 * for a short, known time so measured durations have a floor. */
#include "cuda_fake.h"
#include "fake_fail.h"
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SYNC_SLEEP_NS 2000000L /* 2 ms */

static void block_a_while(void) {
  struct timespec t = {0, SYNC_SLEEP_NS};
  nanosleep(&t, NULL);
}

CUresult cuInit(unsigned int flags) {
  FAIL_IF("cuInit"); (void)flags; return 0; }
CUresult cuModuleLoad(CUmodule *module, const char *fname) {
  FAIL_IF("cuModuleLoad");
  *module = (CUmodule)strdup(fname);
  return 0;
}
CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name) {
  FAIL_IF("cuModuleGetFunction");
  (void)hmod;
  *hfunc = (CUfunction)strdup(name);
  return 0;
}
CUresult cuLibraryLoadFromFile(CUlibrary *library, const char *fileName, void *a, void *b,
                               unsigned int c, void *d, void *e, unsigned int f) {
  FAIL_IF("cuLibraryLoadFromFile");
  (void)a; (void)b; (void)c; (void)d; (void)e; (void)f;
  *library = (CUlibrary)strdup(fileName);
  return 0;
}
CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name) {
  FAIL_IF("cuLibraryGetKernel");
  (void)library;
  *pKernel = (CUkernel)strdup(name);
  return 0;
}
CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel) {
  FAIL_IF("cuKernelGetFunction");
  (void)kernel;
  *pFunc = (CUfunction)malloc(16);
  return 0;
}
CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                        unsigned int bx, unsigned int by, unsigned int bz, unsigned int smem,
                        CUstream s, void **params, void **extra) {
  FAIL_IF("cuLaunchKernel");
  (void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)smem; (void)s;
  (void)params; (void)extra;
  __asm__ volatile("" ::: "memory");
  return 0;
}
CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy,
                                   unsigned int gz, unsigned int bx, unsigned int by,
                                   unsigned int bz, unsigned int smem, CUstream s,
                                   void **params) {
  FAIL_IF("cuLaunchCooperativeKernel");
  return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, smem, s, params, NULL);
}
CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                          void **extra) {
  FAIL_IF("cuLaunchKernelEx");
  (void)config; (void)f; (void)kernelParams; (void)extra;
  __asm__ volatile("" ::: "memory");
  return 0;
}
CUresult cuGraphLaunch(CUgraphExec e, CUstream s) {
  FAIL_IF("cuGraphLaunch"); (void)e; (void)s; return 0; }
CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t n) {
  FAIL_IF("cuMemAlloc_v2");
  *dptr = (CUdeviceptr)malloc(n ? n : 1);
  return *dptr ? 0 : 2;
}
CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t n, unsigned int flags) {
  FAIL_IF("cuMemAllocManaged");
  (void)flags;
  return cuMemAlloc_v2(dptr, n);
}
CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t n, CUstream s) {
  FAIL_IF("cuMemAllocAsync");
  (void)s;
  return cuMemAlloc_v2(dptr, n);
}
CUresult cuMemFree_v2(CUdeviceptr p) {
  FAIL_IF("cuMemFree_v2"); free((void *)p); return 0; }
CUresult cuMemcpy(CUdeviceptr d, CUdeviceptr s, size_t n) {
  FAIL_IF("cuMemcpy"); (void)d; (void)s; (void)n; return 0; }
CUresult cuMemcpyAsync(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) {
  FAIL_IF("cuMemcpyAsync");
  (void)d; (void)s; (void)n; (void)st; return 0;
}
CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n) {
  FAIL_IF("cuMemcpyHtoD_v2");
  (void)d; (void)s; (void)n; return 0;
}
CUresult cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n) {
  FAIL_IF("cuMemcpyDtoH_v2"); (void)d; (void)s; (void)n; return 0; }
CUresult cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n) {
  FAIL_IF("cuMemcpyDtoD_v2");
  (void)d; (void)s; (void)n; return 0;
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *s, size_t n, CUstream st) {
  FAIL_IF("cuMemcpyHtoDAsync_v2");
  (void)d; (void)s; (void)n; (void)st; return 0;
}
CUresult cuMemcpyDtoHAsync_v2(void *d, CUdeviceptr s, size_t n, CUstream st) {
  FAIL_IF("cuMemcpyDtoHAsync_v2");
  (void)d; (void)s; (void)n; (void)st; return 0;
}
CUresult cuStreamSynchronize(CUstream s) {
  FAIL_IF("cuStreamSynchronize"); (void)s; block_a_while(); return 0; }
CUresult cuCtxSynchronize(void) {
  FAIL_IF("cuCtxSynchronize"); block_a_while(); return 0; }
CUresult cuEventSynchronize(void *e) {
  FAIL_IF("cuEventSynchronize"); (void)e; block_a_while(); return 0; }
