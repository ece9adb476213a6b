/* Calls that fail on demand, in the fake CUDA libraries:
 *   FAKE_CUDA_FAIL="cudaMalloc=2x1,cuLaunchKernel=400"
 * makes the first call of cudaMalloc return 2 and every call of cuLaunchKernel return
 * 400 (without doing anything else). Read once, when the library is loaded. */
#ifndef FAKE_FAIL_H
#define FAKE_FAIL_H
#include <stdlib.h>
#include <string.h>

#define FAKE_FAIL_MAX 32

static struct {
  char name[64];
  int code;
  long left; /* calls still to fail; -1: all */
} fake_fail_table[FAKE_FAIL_MAX];
static int fake_fail_n;

#ifndef FAKE_FAIL_ENV
#define FAKE_FAIL_ENV "FAKE_CUDA_FAIL" /* the fake HIP runtime's: FAKE_HIP_FAIL */
#endif

__attribute__((constructor)) static void fake_fail_init(void) {
  const char *spec = getenv(FAKE_FAIL_ENV);
  while (spec && *spec && fake_fail_n < FAKE_FAIL_MAX) {
    const char *end = strchr(spec, ',');
    size_t len = end ? (size_t)(end - spec) : strlen(spec);
    const char *eq = (const char *)memchr(spec, '=', len);
    if (eq && (size_t)(eq - spec) < sizeof fake_fail_table[0].name) {
      memcpy(fake_fail_table[fake_fail_n].name, spec, (size_t)(eq - spec));
      fake_fail_table[fake_fail_n].name[eq - spec] = 0;
      char *rest;
      fake_fail_table[fake_fail_n].code = (int)strtol(eq + 1, &rest, 10);
      fake_fail_table[fake_fail_n].left = (*rest == 'x') ? strtol(rest + 1, NULL, 10) : -1;
      fake_fail_n++;
    }
    spec = end ? end + 1 : NULL;
  }
}

/* The error this call returns now, or 0 to go on. */
static int fake_fail(const char *name) {
  for (int i = 0; i < fake_fail_n; i++) {
    if (strcmp(fake_fail_table[i].name, name) != 0 || fake_fail_table[i].left == 0) continue;
    if (fake_fail_table[i].left > 0) fake_fail_table[i].left--;
    return fake_fail_table[i].code;
  }
  return 0;
}

#define FAIL_IF(name)                 \
  do {                                \
    int fake_rc_ = fake_fail(name);   \
    if (fake_rc_) return fake_rc_;    \
  } while (0)
#endif
