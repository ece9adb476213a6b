/* Prints the layout facts the BPF program decodes, from structs declared as the CUDA
 * headers declare them; tests/ebpf/test_abi.py compares them with gpu_exporter/model/ebpf_abi.py. */
#include "cuda_fake.h"
#include <stddef.h>
#include <stdio.h>
void print_registers(void);
int main(void) {
  print_registers();
  printf("LCFG_GRID_OFF %zu\n", offsetof(cudaLaunchConfig_t, gridDim));
  printf("LCFG_BLOCK_OFF %zu\n", offsetof(cudaLaunchConfig_t, blockDim));
  printf("LCFG_SMEM_OFF %zu\n", offsetof(cudaLaunchConfig_t, dynamicSmemBytes));
  printf("LCFG_STREAM_OFF %zu\n", offsetof(cudaLaunchConfig_t, stream));
  printf("CULCFG_GRID_OFF %zu\n", offsetof(CUlaunchConfig, gridDimX));
  printf("CULCFG_BLOCK_OFF %zu\n", offsetof(CUlaunchConfig, blockDimX));
  printf("CULCFG_SMEM_OFF %zu\n", offsetof(CUlaunchConfig, sharedMemBytes));
  printf("CULCFG_STREAM_OFF %zu\n", offsetof(CUlaunchConfig, hStream));
  printf("DIM3_SIZE %zu\n", sizeof(dim3));
  printf("RT3D_SRC_ARRAY_OFF %zu\n", offsetof(struct cudaMemcpy3DParms, srcArray));
  printf("RT3D_DST_ARRAY_OFF %zu\n", offsetof(struct cudaMemcpy3DParms, dstArray));
  printf("RT3D_EXTENT_OFF %zu\n", offsetof(struct cudaMemcpy3DParms, extent));
  printf("RT3D_KIND_OFF %zu\n", offsetof(struct cudaMemcpy3DParms, kind));
  printf("RT3D_SIZE %zu\n", sizeof(struct cudaMemcpy3DParms));
  printf("RT3DPEER_SRC_ARRAY_OFF %zu\n", offsetof(struct cudaMemcpy3DPeerParms, srcArray));
  printf("RT3DPEER_DST_ARRAY_OFF %zu\n", offsetof(struct cudaMemcpy3DPeerParms, dstArray));
  printf("RT3DPEER_EXTENT_OFF %zu\n", offsetof(struct cudaMemcpy3DPeerParms, extent));
  printf("RT3DPEER_SIZE %zu\n", sizeof(struct cudaMemcpy3DPeerParms));
  printf("CU2D_SRC_TYPE_OFF %zu\n", offsetof(CUDA_MEMCPY2D, srcMemoryType));
  printf("CU2D_DST_TYPE_OFF %zu\n", offsetof(CUDA_MEMCPY2D, dstMemoryType));
  printf("CU2D_WIDTH_OFF %zu %zu\n", offsetof(CUDA_MEMCPY2D, WidthInBytes),
         offsetof(CUDA_MEMCPY2D, Height));
  printf("CU2D_SIZE %zu\n", sizeof(CUDA_MEMCPY2D));
  printf("CU3D_SRC_TYPE_OFF %zu %zu\n", offsetof(CUDA_MEMCPY3D, srcMemoryType),
         offsetof(CUDA_MEMCPY3D_PEER, srcMemoryType));
  printf("CU3D_DST_TYPE_OFF %zu %zu\n", offsetof(CUDA_MEMCPY3D, dstMemoryType),
         offsetof(CUDA_MEMCPY3D_PEER, dstMemoryType));
  printf("CU3D_WIDTH_OFF %zu %zu %zu %zu %zu %zu\n", offsetof(CUDA_MEMCPY3D, WidthInBytes),
         offsetof(CUDA_MEMCPY3D, Height), offsetof(CUDA_MEMCPY3D, Depth),
         offsetof(CUDA_MEMCPY3D_PEER, WidthInBytes), offsetof(CUDA_MEMCPY3D_PEER, Height),
         offsetof(CUDA_MEMCPY3D_PEER, Depth));
  printf("CU3D_SIZE %zu %zu\n", sizeof(CUDA_MEMCPY3D), sizeof(CUDA_MEMCPY3D_PEER));
  printf("KNODE_FUNC_OFF %zu %zu\n", offsetof(cudaKernelNodeParams, func),
         offsetof(CUDA_KERNEL_NODE_PARAMS, func));
  printf("KNODE_KERN_OFF %zu\n", offsetof(CUDA_KERNEL_NODE_PARAMS, kern));
  printf("NODE_PARAMS_KERNEL_OFF %zu %zu %zu %zu\n", offsetof(cudaGraphNodeParams, kernel),
         offsetof(cudaGraphNodeParams, graph), offsetof(CUgraphNodeParams, kernel),
         offsetof(CUgraphNodeParams, graph));
  printf("CU_MEMORYTYPE %d %d %d %d\n", CU_MEMORYTYPE_HOST, CU_MEMORYTYPE_DEVICE,
         CU_MEMORYTYPE_ARRAY, CU_MEMORYTYPE_UNIFIED);
  return 0;
}

/* Where the x86-64 calling convention puts each launch argument: a stand-in with the
 * launch functions' signatures records the argument registers and the stack slots as
 * they are at the function's first instruction (where a uprobe fires). */
unsigned long long regs[9];
__attribute__((naked)) void capture(void) {
  __asm__ volatile(
      "movq %rdi, regs(%rip)\n\tmovq %rsi, regs+8(%rip)\n\tmovq %rdx, regs+16(%rip)\n\t"
      "movq %rcx, regs+24(%rip)\n\tmovq %r8, regs+32(%rip)\n\tmovq %r9, regs+40(%rip)\n\t"
      "movq 8(%rsp), %rax\n\tmovq %rax, regs+48(%rip)\n\t"
      "movq 16(%rsp), %rax\n\tmovq %rax, regs+56(%rip)\n\t"
      "movq 24(%rsp), %rax\n\tmovq %rax, regs+64(%rip)\n\t"
      "xorl %eax, %eax\n\tret\n");
}

static void show(const char *what) {
  printf("%s", what);
  for (int i = 0; i < 9; i++) printf(" %llu", regs[i]);
  printf("\n");
}

typedef cudaError_t (*launch_fn)(const void *, dim3, dim3, void **, size_t, cudaStream_t);
typedef CUresult (*cu_launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                                 unsigned, unsigned, CUstream, void **, void **);
typedef cudaError_t (*memcpy_fn)(void *, const void *, size_t, enum cudaMemcpyKind);

void print_registers(void) {
  dim3 g = {3, 5, 7}, b = {32, 4, 2};
  ((launch_fn)(void *)capture)((const void *)0x1111, g, b, (void **)0x2222, 4096,
                       (cudaStream_t)0x5000);
  show("cudaLaunchKernel");
  ((cu_launch_fn)(void *)capture)((CUfunction)0x1111, 3, 5, 7, 32, 4, 2, 4096, (CUstream)0x5000,
                          (void **)0x2222, (void **)0x3333);
  show("cuLaunchKernel");
  ((memcpy_fn)(void *)capture)((void *)0x1, (const void *)0x2, 12345, cudaMemcpyDeviceToHost);
  show("cudaMemcpy");
  /* width 111, height 222, kind DeviceToHost, stream 0x5000 */
  ((cudaError_t(*)(void *, size_t, const void *, size_t, size_t, size_t, enum cudaMemcpyKind,
                   cudaStream_t))(void *)capture)((void *)0x1, 64, (const void *)0x2, 64, 111,
                                                  222, cudaMemcpyDeviceToHost,
                                                  (cudaStream_t)0x5000);
  show("cudaMemcpy2DAsync");
  ((cudaError_t(*)(cudaArray_t, size_t, size_t, const void *, size_t, size_t, size_t,
                   enum cudaMemcpyKind, cudaStream_t))(void *)capture)(
      (cudaArray_t)0x1, 1, 2, (const void *)0x2, 64, 111, 222, cudaMemcpyDeviceToHost,
      (cudaStream_t)0x5000);
  show("cudaMemcpy2DToArrayAsync");
  ((cudaError_t(*)(void *, size_t, cudaArray_const_t, size_t, size_t, size_t, size_t,
                   enum cudaMemcpyKind, cudaStream_t))(void *)capture)(
      (void *)0x1, 64, (cudaArray_const_t)0x2, 1, 2, 111, 222, cudaMemcpyDeviceToHost,
      (cudaStream_t)0x5000);
  show("cudaMemcpy2DFromArrayAsync");
  ((cudaError_t(*)(cudaArray_t, size_t, size_t, cudaArray_const_t, size_t, size_t, size_t,
                   size_t, enum cudaMemcpyKind))(void *)capture)(
      (cudaArray_t)0x1, 1, 2, (cudaArray_const_t)0x2, 3, 4, 111, 222, cudaMemcpyDeviceToHost);
  show("cudaMemcpy2DArrayToArray");
  ((cudaError_t(*)(void *, int, const void *, int, size_t, cudaStream_t))(void *)capture)(
      (void *)0x1, 1, (const void *)0x2, 0, 12345, (cudaStream_t)0x5000);
  show("cudaMemcpyPeerAsync");
  ((CUresult(*)(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t, CUstream))(void *)
       capture)(0x1, (CUcontext)0x3, 0x2, (CUcontext)0x4, 12345, (CUstream)0x5000);
  show("cuMemcpyPeerAsync");
}
