/* Prints the layout facts the BPF program decodes, from structs declared as the CUDA
 * headers declare them; tests/ebpf/test_abi.py compares them with gpu_exporter/ebpf/abi.py. */
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
}
