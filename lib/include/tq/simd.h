// Hot loops of the CPU reference with a runtime-dispatched AVX2 path. Every
// path performs the same IEEE operations on each element in the same order as
// the scalar code, so results are bit-identical on every CPU (tested).
#pragma once

#include <cstdint>

namespace tq {

// In-place unnormalized Walsh–Hadamard transform, Sylvester order, stages
// h = 1, 2, 4, … (n a power of two).
void fwht(float* x, int n);
// idx[j] = #{i < nm : y[j] ≥ mids[i]} (mids ascending).
void bucketize(const float* y, int n, const float* mids, int nm, uint8_t* idx);
// x[j] *= s for j < n.
void scale_inplace(float* x, int n, float s);

// "avx2" or "scalar": the path the process uses (TQ_SIMD=scalar forces scalar).
const char* simd_path();

namespace detail {
void fwht_scalar(float* x, int n);
void bucketize_scalar(const float* y, int n, const float* mids, int nm, uint8_t* idx);
}  // namespace detail

}  // namespace tq
