// Loads libhip_dl_kernels.so (beside it) once told to go, and launches its kernel N times.
//   hip_dlopen [N] [--wait]
#include <hip/hip_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__global__ void before_load(int *x) { x[0] = 0; }

int main(int argc, char **argv) {
  int wait = 0, n = 4;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--wait") == 0) wait = 1;
    else n = atoi(argv[i]);
  }
  if (wait) {
    printf("ready\n");
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin)) return 2;
  }
  before_load<<<1, 1>>>(nullptr);
  char path[4096];
  snprintf(path, sizeof path, "%s", argv[0]);
  char *slash = strrchr(path, '/');
  snprintf(slash ? slash + 1 : path, sizeof path - (slash ? slash + 1 - path : 0),
           "libhip_dl_kernels.so");
  void *lib = dlopen(path, RTLD_NOW);
  if (!lib) {
    fprintf(stderr, "%s\n", dlerror());
    return 3;
  }
  int (*launch)(int) = (int (*)(int))dlsym(lib, "launch_late");
  if (!launch || launch(n) != 0) return 4;
  printf("done\n");
  return 0;
}
