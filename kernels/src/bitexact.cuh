// Warp-level float32 routines that reproduce the CPU reference bit for bit
// (internal). Element j of a D-vector lives in lane j % 32, register j / 32.
// Every operation is an explicit __f*_rn intrinsic so nvcc can neither contract
// into FMA nor substitute approximate division/sqrt.
#pragma once

#include "common.cuh"

namespace tq::cuda::dev {

// tq::tree_sum_squares (lib/src/quant/bitpack.cpp): s_i = x_i² + x_{i+D/2}², then
// s_i += s_{i+h} for h = D/4 … 1. The levels h ≥ 32 pair registers of one lane;
// h < 32 pair lanes (xor shuffle). Float + is commutative, so the mirrored lane
// of each pair computes the same value and every lane ends with s_0.
template <int E>
__device__ __forceinline__ float warp_tree_sum_squares(const float (&x)[E]) {
  static_assert(E >= 2 && (E & (E - 1)) == 0, "D = 32·E, E a power of two ≥ 2");
  float s[E / 2];
#pragma unroll
  for (int k = 0; k < E / 2; ++k) s[k] = __fadd_rn(__fmul_rn(x[k], x[k]), __fmul_rn(x[k + E / 2], x[k + E / 2]));
#pragma unroll
  for (int h = E / 4; h >= 1; h >>= 1)
#pragma unroll
    for (int k = 0; k < h; ++k) s[k] = __fadd_rn(s[k], s[k + h]);
  float v = s[0];
#pragma unroll
  for (int m = 16; m >= 1; m >>= 1) v = __fadd_rn(v, __shfl_xor_sync(kFull, v, m));
  return v;
}

// tq::fwht (Sylvester order, stages h = 1, 2, 4, …; x_j ← a + b, x_{j+h} ← a − b).
// Lane stages: the lower lane adds, the upper computes partner − own (a − b ≡ a + (−b)).
template <int E>
__device__ __forceinline__ void warp_fwht(float (&x)[E], int lane) {
#pragma unroll
  for (int h = 1; h < 32; h <<= 1) {
    const bool upper = (lane & h) != 0;
#pragma unroll
    for (int k = 0; k < E; ++k) {
      const float o = __shfl_xor_sync(kFull, x[k], h);
      x[k] = __fadd_rn(o, upper ? -x[k] : x[k]);
    }
  }
#pragma unroll
  for (int hk = 1; hk < E; hk <<= 1)
#pragma unroll
    for (int k = 0; k < E; ++k)
      if (!(k & hk)) {
        const float a = x[k], b = x[k + hk];
        x[k] = __fadd_rn(a, b);
        x[k + hk] = __fsub_rn(a, b);
      }
}

// #{i : y ≥ m_i} for LEVELS−1 ascending midpoints (binary search; the predicate
// is monotone in i, so this equals the CPU's count; NaN → 0 as there).
template <int LEVELS>
__device__ __forceinline__ int bucketize(float y, const float* mids) {
  int idx = 0;
#pragma unroll
  for (int step = LEVELS / 2; step >= 1; step >>= 1)
    if (y >= mids[idx + step - 1]) idx += step;
  return idx;
}

// The CPU's std::min/std::max scans keep the FIRST element (index order) equal to
// the extreme; only ±0 tell equal values apart, so a zero extreme takes the sign
// of the first zero (element order: register k, then lane). Branch-free, so the
// shuffles and ballots stay convergent (no collective emulation around them).
template <int E>
__device__ __forceinline__ void warp_min_max(const float (&v)[E], float& mn, float& mx) {
  mn = v[0];
  mx = v[0];
#pragma unroll
  for (int k = 1; k < E; ++k) {
    mn = fminf(mn, v[k]);
    mx = fmaxf(mx, v[k]);
  }
#pragma unroll
  for (int m = 16; m >= 1; m >>= 1) {
    mn = fminf(mn, __shfl_xor_sync(kFull, mn, m));
    mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, m));
  }
  bool neg = false, found = false;
#pragma unroll
  for (int k = 0; k < E; ++k) {
    const unsigned z = __ballot_sync(kFull, v[k] == 0.f);
    const unsigned zn = __ballot_sync(kFull, v[k] == 0.f && signbit(v[k]));
    const unsigned first = z & (0u - z);  // lowest set bit
    if (!found && z) neg = (zn & first) != 0;
    found = found || z;
  }
  const float zero = neg ? -0.f : 0.f;
  if (mn == 0.f) mn = zero;
  if (mx == 0.f) mx = zero;
}

}  // namespace tq::cuda::dev
