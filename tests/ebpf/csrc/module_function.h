/* A driver kernel handle by name, as Triton or a cubin loader gets one (the name is what
 * the probes on cuModuleGetFunction read). For the workloads. */
#ifndef MODULE_FUNCTION_H
#define MODULE_FUNCTION_H
#include "cuda_fake.h"

static CUfunction module_function(const char *module, const char *name) {
  CUmodule mod;
  CUfunction f;
  cuModuleLoad(&mod, module);
  cuModuleGetFunction(&f, mod, name);
  return f;
}
#endif
