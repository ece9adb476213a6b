// What a multi-GPU HIP process is told of its device ordinals, each a way HIP tells it:
// ordinal 0 by hipGetDevicePropertiesR0600 (ROCm 6.x's hipGetDeviceProperties, found at
// run time here), 1 by hipGetDeviceProperties (5.x's layout), 2 by hipDeviceGetPCIBusId.
//   hip_devices [--wait]
#include <hip/hip_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--wait") == 0) {
    printf("ready\n");
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin)) return 2;
  }
  static char r0600[1472];
  typedef hipError_t (*R0600)(void *, int);
  R0600 props6 = (R0600)dlsym(RTLD_DEFAULT, "hipGetDevicePropertiesR0600");
  hipDeviceProp_t props;
  char bus[64];
  if (!props6 || props6(r0600, 0) != hipSuccess || hipGetDeviceProperties(&props, 1) != hipSuccess ||
      hipDeviceGetPCIBusId(bus, sizeof bus, 2) != hipSuccess)
    return 3;
  printf("done\n");
  return 0;
}
