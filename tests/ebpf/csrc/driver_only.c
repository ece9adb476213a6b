/* A driver-API-only application (the way Triton and torch.compile launch): module ->
 * function handle -> cuLaunchKernel, never touching libcudart. Counts are asserted by
 * tests/ebpf/test_end_to_end.py. */
#include "cuda_fake.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void driver_work(int n) {
  CUmodule mod;
  CUfunction f;
  cuInit(0);
  cuModuleLoad(&mod, "kernels.cubin");
  cuModuleGetFunction(&f, mod, "_ZN6triton9matmul_v2IfLi2EEEvPT_i"); /* triton::matmul_v2 */
  for (int i = 0; i < n; i++)
    cuLaunchKernel(f, 4, 2, 1, 128, 1, 1, 0, NULL, NULL, NULL); /* 8 x 128 */
  CUlibrary lib;
  CUkernel k;
  CUfunction kf;
  cuLibraryLoadFromFile(&lib, "lib.cubin", NULL, NULL, 0, NULL, NULL, 0);
  cuLibraryGetKernel(&k, lib, "_Z12fused_kernelPf"); /* fused_kernel */
  cuKernelGetFunction(&kf, k);
  CUlaunchConfig cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.gridDimX = 8; cfg.gridDimY = 1; cfg.gridDimZ = 1;   /* 8 blocks */
  cfg.blockDimX = 64; cfg.blockDimY = 2; cfg.blockDimZ = 1; /* 128 threads */
  for (int i = 0; i < 2; i++) cuLaunchKernelEx(&cfg, kf, NULL, NULL);
  CUdeviceptr d;
  cuMemAlloc_v2(&d, 4096);
  static char host[1024];
  for (int i = 0; i < 2; i++) cuMemcpyHtoD_v2(d, host, 333);
  cuMemcpyDtoH_v2(host, d, 444);
  cuStreamSynchronize(NULL);
  cuCtxSynchronize();
}

static void names_work(int k) {
  CUmodule mod;
  cuModuleLoad(&mod, "many.cubin");
  for (int i = 0; i < k; i++) {
    char name[32];
    CUfunction f;
    snprintf(name, sizeof name, "kern_%03d", i);
    cuModuleGetFunction(&f, mod, name);
    cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
  }
  cuCtxSynchronize();
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: driver_only driver N | names K [--wait]\n");
    return 2;
  }
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--wait") == 0) {
      char line[16];
      printf("ready\n");
      fflush(stdout);
      if (!fgets(line, sizeof line, stdin)) return 3;
    }
  if (strcmp(argv[1], "driver") == 0) driver_work(atoi(argv[2]));
  else if (strcmp(argv[1], "names") == 0) names_work(atoi(argv[2]));
  else return 2;
  printf("done\n");
  return 0;
}
