// Internal: the one matrix product the forward passes need, in "NT" form,
//   Y[i, j] = Σ_p X[i·ldx + p] · W[j·ldw + p]   (i < n, j < m, p < k),
// i.e. Y = X · Wᵀ with both operands row-major (a weight matrix [out, in] as
// stored in GGUF, or K of one head). Overwrites Y.
//
// On x86-64 CPUs with AVX2+FMA a hand-written register-blocked kernel runs
// (runtime dispatch; the project is built for baseline x86-64 where Eigen only
// gets SSE2, about 20 GFLOP/s per core here, against about 60 for this kernel);
// elsewhere Eigen's GEMM. The two paths sum in different orders, so results
// agree to float rounding, not bit for bit; each path is deterministic.
#pragma once

#include <cstdint>

namespace tq::detail {

void gemm_nt(int64_t n, int64_t m, int64_t k, const float* X, int64_t ldx, const float* W, int64_t ldw, float* Y,
             int64_t ldy);

// Which path gemm_nt takes on this CPU ("avx2-fma" or "eigen").
const char* gemm_path();

// Forces the Eigen path (tests compare the two).
void gemm_force_eigen(bool on);

}  // namespace tq::detail
