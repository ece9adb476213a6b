/* Strided, 3D and peer copies and pinned host allocations of known sizes, through the
 * runtime (which calls the driver, as the real one does) or the driver alone. Every
 * size here is asserted by tests/ebpf/test_coverage.py: change both together. */
#include "cuda_fake.h"
#include <stdio.h>
#include <string.h>

static char buf[1 << 16];
#define ARRAY ((cudaArray_t)0x4000)
#define STREAM ((cudaStream_t)0x5000)

static void runtime_work(void) {
  for (int i = 0; i < 2; i++)
    cudaMemcpy2D(buf, 64, buf, 64, 40, 3, cudaMemcpyHostToDevice);      /* 120 H2D */
  cudaMemcpy2DAsync(buf, 64, buf, 64, 16, 5, cudaMemcpyDeviceToHost, STREAM); /* 80 D2H */
  cudaMemcpy2DToArray(ARRAY, 1, 2, buf, 64, 10, 7, cudaMemcpyHostToDevice);   /* 70 H2D */
  cudaMemcpy2DToArrayAsync(ARRAY, 0, 0, buf, 64, 3, 3, cudaMemcpyHostToDevice,
                           STREAM);                                            /* 9 H2D */
  cudaMemcpy2DFromArray(buf, 64, ARRAY, 0, 0, 6, 6, cudaMemcpyDeviceToHost);  /* 36 D2H */
  cudaMemcpy2DFromArrayAsync(buf, 64, ARRAY, 0, 0, 2, 50, cudaMemcpyDeviceToHost,
                             STREAM);                                          /* 100 D2H */
  cudaMemcpy2DArrayToArray(ARRAY, 0, 0, ARRAY, 1, 1, 8, 8,
                           cudaMemcpyDeviceToDevice);                          /* 64 D2D */
  struct cudaMemcpy3DParms p;
  memset(&p, 0, sizeof p);
  p.srcPtr.ptr = buf;
  p.dstPtr.ptr = buf;
  p.extent = (struct cudaExtent){10, 20, 3};
  p.kind = cudaMemcpyDeviceToDevice;
  cudaMemcpy3D(&p);                                                            /* 600 D2D */
  p.extent = (struct cudaExtent){4, 4, 4};
  p.kind = cudaMemcpyHostToDevice;
  cudaMemcpy3DAsync(&p, STREAM);                                               /* 64 H2D */
  p.srcArray = ARRAY; /* extent in array elements: size unknown, not observed */
  p.extent = (struct cudaExtent){5, 5, 5};
  cudaMemcpy3D(&p);
  struct cudaMemcpy3DPeerParms q;
  memset(&q, 0, sizeof q);
  q.srcPtr.ptr = buf;
  q.dstPtr.ptr = buf;
  q.dstDevice = 1;
  q.extent = (struct cudaExtent){7, 1, 1};
  cudaMemcpy3DPeer(&q);                                                        /* 7 D2D */
  q.extent = (struct cudaExtent){2, 2, 2};
  cudaMemcpy3DPeerAsync(&q, STREAM);                                           /* 8 D2D */
  cudaMemcpyPeer(buf, 1, buf, 0, 1000);                                        /* 1000 D2D */
  cudaMemcpyPeerAsync(buf, 1, buf, 0, 3000, STREAM);                           /* 3000 D2D */
  void *h;
  cudaMallocHost(&h, 4096);    /* host */
  cudaHostAlloc(&h, 8192, 0);  /* host */
  cudaMallocAsync(&h, 100, STREAM);  /* device; reaches cuMemAllocAsync: counted once */
}

static void driver_work(void) {
  CUDA_MEMCPY2D c2;
  memset(&c2, 0, sizeof c2);
  c2.srcMemoryType = CU_MEMORYTYPE_HOST;
  c2.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c2.WidthInBytes = 100;
  c2.Height = 2;
  cuMemcpy2D_v2(&c2);                          /* 200 H2D */
  c2.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  c2.dstMemoryType = CU_MEMORYTYPE_HOST;
  c2.WidthInBytes = 30;
  c2.Height = 3;
  cuMemcpy2DUnaligned_v2(&c2);                 /* 90 D2H */
  c2.srcMemoryType = CU_MEMORYTYPE_ARRAY;
  c2.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c2.WidthInBytes = 10;
  c2.Height = 10;
  cuMemcpy2DAsync_v2(&c2, (CUstream)STREAM);   /* 100 D2D */
  CUDA_MEMCPY3D c3;
  memset(&c3, 0, sizeof c3);
  c3.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  c3.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c3.WidthInBytes = 4;
  c3.Height = 5;
  c3.Depth = 6;
  cuMemcpy3D_v2(&c3);                          /* 120 D2D */
  c3.srcMemoryType = CU_MEMORYTYPE_UNIFIED;
  c3.WidthInBytes = 8;
  c3.Height = 8;
  c3.Depth = 2;
  cuMemcpy3DAsync_v2(&c3, (CUstream)STREAM);   /* 128 Default */
  CUDA_MEMCPY3D_PEER cp;
  memset(&cp, 0, sizeof cp);
  cp.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  cp.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  cp.WidthInBytes = 3;
  cp.Height = 3;
  cp.Depth = 3;
  cuMemcpy3DPeer(&cp);                         /* 27 D2D */
  cp.srcMemoryType = CU_MEMORYTYPE_HOST;
  cp.dstMemoryType = CU_MEMORYTYPE_HOST;
  cp.WidthInBytes = 2;
  cp.Height = 1;
  cp.Depth = 1;
  cuMemcpy3DPeerAsync(&cp, (CUstream)STREAM);  /* 2 H2H */
  for (int i = 0; i < 2; i++)
    cuMemcpyPeer(0x1000, NULL, 0x2000, NULL, 500);  /* 500 D2D (the test fails one) */
  cuMemcpyPeerAsync(0x1000, NULL, 0x2000, NULL, 50, (CUstream)STREAM); /* 50 D2D */
  void *h;
  cuMemHostAlloc(&h, 1024, 0);                 /* host */
  cuMemAllocHost_v2(&h, 2048);                 /* host */
  CUdeviceptr d;
  cuMemAllocAsync(&d, 256, (CUstream)STREAM);  /* device */
  cuMemAllocManaged(&d, 512, 1);               /* managed */
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: copies runtime | driver [--wait]\n");
    return 2;
  }
  for (int i = 2; i < argc; i++)
    if (strcmp(argv[i], "--wait") == 0) {
      char line[16];
      printf("ready\n");
      fflush(stdout);
      if (!fgets(line, sizeof line, stdin)) return 3;
    }
  if (strcmp(argv[1], "runtime") == 0) runtime_work();
  else if (strcmp(argv[1], "driver") == 0) driver_work();
  else return 2;
  printf("done\n");
  return 0;
}
