// Our stand-in for nccl-tests' verifiable.cu: small whole numbers, so sums are exact in every type.
#include "verifiable.h"
#include <nccl.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cstdio>

namespace {
__host__ __device__ inline int base(intptr_t k, uint64_t seed) { return (int)((k * 7 + (intptr_t)seed) % 13); }

template<typename T> __device__ T from_int(int v) { return T(v); }
template<> __device__ half from_int<half>(int v) { return __int2half_rn(v); }
template<> __device__ __nv_bfloat16 from_int<__nv_bfloat16>(int v) { return __int2bfloat16_rn(v); }
template<typename T> __device__ float to_float(T v) { return float(v); }
template<> __device__ float to_float<half>(half v) { return __half2float(v); }
template<> __device__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template<typename T>
__global__ void prepare(T* elts, intptr_t n, int mult, uint64_t seed, intptr_t ix0) {
  for (intptr_t i = blockIdx.x * (intptr_t)blockDim.x + threadIdx.x; i < n; i += (intptr_t)gridDim.x * blockDim.x)
    elts[i] = from_int<T>(base(i + ix0, seed) * mult);
}
template<typename T>
__global__ void verify(T const* got, T const* want, intptr_t n, unsigned long long* bad) {
  for (intptr_t i = blockIdx.x * (intptr_t)blockDim.x + threadIdx.x; i < n; i += (intptr_t)gridDim.x * blockDim.x)
    if (to_float<T>(got[i]) != to_float<T>(want[i])) atomicAdd(bad, 1ull);
}

template<typename T>
cudaError_t launch_prepare(void* elts, intptr_t n, int mult, uint64_t seed, intptr_t ix0, cudaStream_t s) {
  if (n > 0) prepare<T><<<1024, 256, 0, s>>>((T*)elts, n, mult, seed, ix0);
  return cudaGetLastError();
}
cudaError_t dispatch_prepare(void* elts, intptr_t n, int ty, int mult, uint64_t seed, intptr_t ix0, cudaStream_t s) {
  switch (ty) {
    case ncclInt8: return launch_prepare<int8_t>(elts, n, mult, seed, ix0, s);
    case ncclUint8: return launch_prepare<uint8_t>(elts, n, mult, seed, ix0, s);
    case ncclInt32: return launch_prepare<int32_t>(elts, n, mult, seed, ix0, s);
    case ncclUint32: return launch_prepare<uint32_t>(elts, n, mult, seed, ix0, s);
    case ncclInt64: return launch_prepare<int64_t>(elts, n, mult, seed, ix0, s);
    case ncclUint64: return launch_prepare<uint64_t>(elts, n, mult, seed, ix0, s);
    case ncclFloat16: return launch_prepare<half>(elts, n, mult, seed, ix0, s);
    case ncclFloat32: return launch_prepare<float>(elts, n, mult, seed, ix0, s);
    case ncclFloat64: return launch_prepare<double>(elts, n, mult, seed, ix0, s);
    case ncclBfloat16: return launch_prepare<__nv_bfloat16>(elts, n, mult, seed, ix0, s);
    default: return cudaErrorInvalidValue;
  }
}
}  // namespace

cudaError_t ncclVerifiablePrepareInput(void* elts, intptr_t n, int ty, int op, int rank_n, int rank_me,
                                       uint64_t seed, intptr_t ix0, cudaStream_t s) {
  return dispatch_prepare(elts, n, ty, rank_me + 1, seed, ix0, s);
}

cudaError_t ncclVerifiablePrepareExpected(void* elts, intptr_t n, int ty, int op, int rank_n,
                                          uint64_t seed, intptr_t ix0, cudaStream_t s) {
  if (op != ncclSum) {
    fprintf(stderr, "verifiable shim: only op sum is checked (got op %d)\n", op);
  }
  return dispatch_prepare(elts, n, ty, rank_n * (rank_n + 1) / 2, seed, ix0, s);
}

cudaError_t ncclVerifiableVerify(void const* results, void const* expected, intptr_t n, int ty, int op,
                                 int rank_n, uint64_t seed, intptr_t ix0, int64_t* bad_elt_n, cudaStream_t s) {
  unsigned long long* bad;
  cudaError_t e = cudaMalloc(&bad, sizeof(*bad));
  if (e != cudaSuccess) return e;
  cudaMemsetAsync(bad, 0, sizeof(*bad), s);
  if (n > 0) switch (ty) {
    case ncclInt8: verify<int8_t><<<1024, 256, 0, s>>>((int8_t const*)results, (int8_t const*)expected, n, bad); break;
    case ncclUint8: verify<uint8_t><<<1024, 256, 0, s>>>((uint8_t const*)results, (uint8_t const*)expected, n, bad); break;
    case ncclInt32: verify<int32_t><<<1024, 256, 0, s>>>((int32_t const*)results, (int32_t const*)expected, n, bad); break;
    case ncclUint32: verify<uint32_t><<<1024, 256, 0, s>>>((uint32_t const*)results, (uint32_t const*)expected, n, bad); break;
    case ncclInt64: verify<int64_t><<<1024, 256, 0, s>>>((int64_t const*)results, (int64_t const*)expected, n, bad); break;
    case ncclUint64: verify<uint64_t><<<1024, 256, 0, s>>>((uint64_t const*)results, (uint64_t const*)expected, n, bad); break;
    case ncclFloat16: verify<half><<<1024, 256, 0, s>>>((half const*)results, (half const*)expected, n, bad); break;
    case ncclFloat32: verify<float><<<1024, 256, 0, s>>>((float const*)results, (float const*)expected, n, bad); break;
    case ncclFloat64: verify<double><<<1024, 256, 0, s>>>((double const*)results, (double const*)expected, n, bad); break;
    case ncclBfloat16: verify<__nv_bfloat16><<<1024, 256, 0, s>>>((__nv_bfloat16 const*)results, (__nv_bfloat16 const*)expected, n, bad); break;
    default: cudaFree(bad); return cudaErrorInvalidValue;
  }
  unsigned long long h = 0;
  e = cudaMemcpyAsync(&h, bad, sizeof(h), cudaMemcpyDeviceToHost, s);
  cudaStreamSynchronize(s);
  cudaFree(bad);
  *bad_elt_n = (int64_t)h;
  return e;
}
