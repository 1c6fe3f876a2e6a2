// Our stand-in for cuda-samples' Common/helper_cuda.h: only the command-line helpers that
// p2pBandwidthLatencyTest.cu uses (checkCmdLineFlag, getCmdLineArgumentInt), with the same
// "--name" / "--name=value" syntax. Nothing here is timed.
#ifndef FIDELITY_HELPER_CUDA_H
#define FIDELITY_HELPER_CUDA_H
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>

static inline const char* fidelity_arg_value(int argc, const char** argv, const char* name) {
  size_t n = strlen(name);
  for (int i = 1; i < argc; i++) {
    const char* a = argv[i];
    while (*a == '-') a++;
    if (strncmp(a, name, n) == 0 && (a[n] == '\0' || a[n] == '=')) return a + n;
  }
  return NULL;
}
static inline bool checkCmdLineFlag(int argc, const char** argv, const char* name) {
  return fidelity_arg_value(argc, argv, name) != NULL;
}
static inline int getCmdLineArgumentInt(int argc, const char** argv, const char* name) {
  const char* v = fidelity_arg_value(argc, argv, name);
  return (v && *v == '=') ? atoi(v + 1) : 0;
}
#endif
