/* Loads a CUDA driver library with dlopen (as the runtime and the frameworks do), waits,
 * then launches: `dlopen_driver LIB N SLEEP_MS`. The first call comes SLEEP_MS after
 * the library is mapped. Counts are asserted by tests/ebpf/test_lifecycle.py. */
#include "cuda_fake.h"
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef CUresult (*get_fn)(CUfunction *, CUmodule, const char *);
typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, unsigned, CUstream, void **, void **);

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: dlopen_driver LIB N SLEEP_MS\n");
    return 2;
  }
  void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "%s\n", dlerror());
    return 3;
  }
  long ms = atol(argv[3]);
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
  get_fn get = (get_fn)dlsym(lib, "cuModuleGetFunction");
  launch_fn launch = (launch_fn)dlsym(lib, "cuLaunchKernel");
  CUfunction f;
  get(&f, NULL, "_Z13late_loaded_kv"); /* late_loaded_k */
  for (int i = 0; i < atoi(argv[2]); i++) launch(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL);
  printf("done\n");
  return 0;
}
