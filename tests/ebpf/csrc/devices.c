/* Which GPU each call runs on. Counts and devices are asserted by
 * tests/ebpf/test_devices.py: change both together.
 *
 *   devices one      runtime calls on the default device (NVML lists it on one GPU)
 *   devices multi    CUDA_VISIBLE_DEVICES set at run time from $RUN_VISIBLE_DEVICES
 *                    (after exec: /proc/<pid>/environ keeps the old value), then work on
 *                    ordinals 0 and 1 through cudaSetDevice and through contexts
 *   devices unasked  the same devices, but never asks which GPU an ordinal is
 *
 * With --wait: prints "ready" and waits for a line; after the work prints "done" and
 * waits for stdin to close, so the test scrapes while NVML still lists it. */
#include "cuda_fake.h"
#include "module_function.h"
#define FN(name) module_function("devices.cubin", name)
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile int sink;
__attribute__((noinline)) void kern_one(int n) { sink += n; }
__attribute__((noinline)) void kern_a(int n) { sink += n + 1; }
__attribute__((noinline)) void kern_b(int n) { sink += n + 2; }
__attribute__((noinline)) void kern_c(int n) { sink += n + 3; }

static void launch(void (*f)(int), int times) {
  void *args[1] = {NULL};
  for (int i = 0; i < times; i++)
    (void)cudaLaunchKernel((const void *)f, (dim3){1, 1, 1}, (dim3){32, 1, 1}, args, 0, NULL);
}

static void drv_launch(CUfunction f, int times) {
  for (int i = 0; i < times; i++) cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL);
}

static void *contexts(void *unused) {
  (void)unused;
  CUcontext c0, c1;
  cuDevicePrimaryCtxRetain(&c1, 1);
  cuDevicePrimaryCtxRetain(&c0, 0);
  cuCtxSetCurrent(c1);
  drv_launch(FN("drv_b"), 4); /* ordinal 1 */
  cuCtxPushCurrent_v2(c0);
  drv_launch(FN("drv_a"), 5); /* ordinal 0 */
  CUcontext popped;
  cuCtxPopCurrent_v2(&popped);
  drv_launch(FN("drv_b"), 1); /* ordinal 1 again */
  return NULL;
}

static void *created(void *unused) {
  (void)unused;
  CUcontext c;
  cuCtxCreate_v2(&c, 0, 1);
  drv_launch(FN("drv_v2"), 2); /* a context made on ordinal 1, current */
  cuCtxCreate_v4(&c, NULL, 0, 0);
  drv_launch(FN("drv_v4"), 3); /* CUDA 13's cuCtxCreate: one made on ordinal 0 */
  return NULL;
}

static void *no_context(void *unused) {
  (void)unused;
  drv_launch(FN("drv_c"), 1); /* no context made current: unknown */
  cuCtxSetCurrent((CUcontext)0x1234);
  drv_launch(FN("drv_c"), 1); /* a context no probe saw made: unknown */
  return NULL;
}

static void run_thread(void *(*body)(void *)) {
  pthread_t t;
  pthread_create(&t, NULL, body, NULL);
  pthread_join(t, NULL);
}

static void multi(int ask) {
  const char *visible = getenv("RUN_VISIBLE_DEVICES");
  if (visible) setenv("CUDA_VISIBLE_DEVICES", visible, 1);
  if (ask) {
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0); /* ordinal 0 by UUID */
    char bus[32];
    cudaDeviceGetPCIBusId(bus, sizeof bus, 1); /* ordinal 1 by PCI address */
  }
  static char host[4096], dev[4096];
  if (!ask) {
    cudaSetDevice(1);
    launch(kern_c, 2);
    return;
  }
  launch(kern_a, 2); /* no cudaSetDevice: ordinal 0 */
  cudaSetDevice(1);
  launch(kern_b, 3);
  void *p;
  cudaMalloc(&p, 4096);
  cudaSetDevice(5); /* fails (2 devices visible): still ordinal 1 */
  launch(kern_b, 1);
  cudaSetDevice(0);
  cudaMemcpy(dev, host, 100, cudaMemcpyHostToDevice);
  run_thread(contexts);
  run_thread(created);
  run_thread(no_context);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: devices one|multi|unasked [--wait]\n");
    return 2;
  }
  int wait = argc > 2 && strcmp(argv[2], "--wait") == 0;
  char line[16];
  if (wait) {
    printf("ready\n");
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin)) return 3;
  }
  if (strcmp(argv[1], "one") == 0) {
    launch(kern_one, 3);
    void *p;
    cudaMalloc(&p, 1 << 20); /* fails with FAKE_CUDA_FAIL=cudaMalloc=2x1 */
    cudaMalloc(&p, 1 << 20);
  } else if (strcmp(argv[1], "multi") == 0) {
    multi(1);
  } else if (strcmp(argv[1], "unasked") == 0) {
    multi(0);
  } else {
    return 2;
  }
  printf("done\n");
  fflush(stdout);
  if (wait)
    while (fgets(line, sizeof line, stdin)) {
    }
  return 0;
}
