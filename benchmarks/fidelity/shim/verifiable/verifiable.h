// Our stand-in for nccl-tests' verifiable/ (data preparation and checking only; it runs outside the
// timed region, so it does not change what nccl-tests times). Same function names and signatures as
// nccl-tests' verifiable.h; only the reduction op `sum` is checked (the fidelity run uses -o sum).
#ifndef FIDELITY_VERIFIABLE_SHIM_H
#define FIDELITY_VERIFIABLE_SHIM_H
#include <cuda_runtime.h>
#include <stdint.h>

template<typename T>
__host__ __device__ T ncclVerifiablePremulScalar(int rank_me) {
  return T(rank_me % 2 == 0 ? 1.0f : 2.0f);
}

cudaError_t ncclVerifiablePrepareInput(void *elts, intptr_t elt_n, int elt_ty, int red_op, int rank_n,
                                       int rank_me, uint64_t seed, intptr_t elt_ix0, cudaStream_t stream);
cudaError_t ncclVerifiablePrepareExpected(void *elts, intptr_t elt_n, int elt_ty, int red_op, int rank_n,
                                          uint64_t seed, intptr_t elt_ix0, cudaStream_t stream);
cudaError_t ncclVerifiableVerify(void const *results, void const *expected, intptr_t elt_n, int elt_ty,
                                 int red_op, int rank_n, uint64_t seed, intptr_t elt_ix0,
                                 int64_t *bad_elt_n, cudaStream_t stream);
#endif
