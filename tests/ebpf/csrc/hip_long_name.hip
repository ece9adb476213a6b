// A kernel whose name is 64 KiB (2^16 characters, made by the preprocessor): its launches
// are counted under cuda_kernel_name="other" and the name in the drops, the exporter goes
// on. Also a kernel of a plain name, counted by name.
//   hip_long_name [--wait]
#include <hip/hip_runtime.h>
#include <stdio.h>
#include <string.h>

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define D(x) CAT(x, x)
#define LONG_NAME D(D(D(D(D(D(D(D(D(D(D(D(D(D(D(D(k))))))))))))))))

__global__ void LONG_NAME(int *x) { x[0] = 1; }
__global__ void short_one(int *x) { x[0] = 2; }

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--wait") == 0) {
    printf("ready\n");
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin)) return 2;
  }
  for (int i = 0; i < 3; i++) LONG_NAME<<<1, 1>>>(nullptr);
  for (int i = 0; i < 2; i++) short_one<<<1, 1>>>(nullptr);
  printf("done\n");
  return (int)hipGetLastError();
}
