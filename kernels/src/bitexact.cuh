// Warp-level float32 routines that reproduce the CPU reference bit for bit
// (internal). Element j of a D-vector lives in lane j % 32, register j / 32.
// Every operation is an explicit __f*_rn intrinsic so nvcc can neither contract
// into FMA nor substitute approximate division/sqrt.
#pragma once

#include "common.cuh"

namespace tq::cuda::dev {

// Layouts: a D-vector spread over 2^LANE lanes (xor partners) and E = D / 2^LANE registers
// per lane, element j = (hi << (LOW + LANE)) | (lane bits << LOW) | lo in register
// k = (hi << LOW) | lo. The warp kernels use LOW = 0, LANE = 5 (j = lane + 32k); the quad
// store LOW = 3, LANE = 2 (j = 32i + 8q + e). The routines below follow the CPU's order of
// operations level by level; where a pair lives (register or lane) does not change a result.

// butterflies (a + b, a − b) on register pairs (k, k + H), bit H of k clear
template <int H, int E>
__device__ __forceinline__ void reg_stage(float (&x)[E]) {
#pragma unroll
  for (int k = 0; k < E; ++k)
    if (!(k & H)) {
      const float a = x[k], b = x[k + H];
      x[k] = __fadd_rn(a, b);
      x[k + H] = __fsub_rn(a, b);
    }
}
// butterflies across lanes (partner lane ^ M): the lower lane a + b, the upper a − b, as
// RN(partner + sgn·own) with sgn = ±1 in one FFMA (sgn·own is exact, so this is the rounded
// sum or difference itself, zero signs included)
template <int M, int E>
__device__ __forceinline__ void xor_stage(float (&x)[E], int lane) {
  const float sgn = (lane & M) ? -1.f : 1.f;
#pragma unroll
  for (int k = 0; k < E; ++k) x[k] = __fmaf_rn(sgn, x[k], __shfl_xor_sync(kFull, x[k], M));
}

// tq::fwht (Sylvester order: stages h = 1, 2, 4, …; x_j ← a + b, x_{j+h} ← a − b)
template <int LOW, int LANE, int H = 1, int E>
__device__ __forceinline__ void fwht(float (&x)[E], int lane) {
  if constexpr (H < (E << LANE)) {
    if constexpr (H < (1 << LOW)) reg_stage<H>(x);
    else if constexpr (H < (1 << (LOW + LANE))) xor_stage<(H >> LOW)>(x, lane);
    else reg_stage<(H >> LANE)>(x);
    fwht<LOW, LANE, 2 * H>(x, lane);
  }
}

// levels s_j += s_{j+h} of the CPU tree, h = H … 1 (element offsets)
template <int LOW, int LANE, int H, int N>
__device__ __forceinline__ void tree_levels(float (&s)[N]) {
  if constexpr (H >= 1) {
    if constexpr (H >= (1 << (LOW + LANE))) {
#pragma unroll
      for (int k = 0; k < (H >> LANE); ++k) s[k] = __fadd_rn(s[k], s[k + (H >> LANE)]);
    } else if constexpr (H >= (1 << LOW)) {
#pragma unroll
      for (int k = 0; k < (1 << LOW); ++k) s[k] = __fadd_rn(s[k], __shfl_xor_sync(kFull, s[k], H >> LOW));
    } else {
#pragma unroll
      for (int k = 0; k < H; ++k) s[k] = __fadd_rn(s[k], s[k + H]);
    }
    tree_levels<LOW, LANE, H / 2>(s);
  }
}

// tq::tree_sum_squares (lib/src/quant/bitpack.cpp): s_j = x_j² + x_{j+D/2}², then
// s_j += s_{j+h} for h = D/4 … 1. The top bit of j is a register bit, so the first
// level pairs registers k and k + E/2. Float + is commutative, so the mirrored lane of
// each cross-lane pair computes the same value and every lane ends with s_0.
template <int LOW, int LANE, int E>
__device__ __forceinline__ float tree_sum_squares(const float (&x)[E]) {
  static_assert(E > (1 << LOW) && (E & (E - 1)) == 0, "E a power of two above the in-lane low bits");
  float s[E / 2];
#pragma unroll
  for (int k = 0; k < E / 2; ++k) s[k] = __fadd_rn(__fmul_rn(x[k], x[k]), __fmul_rn(x[k + E / 2], x[k + E / 2]));
  tree_levels<LOW, LANE, (E << LANE) / 4>(s);
  return s[0];
}

// The warp layout (element j in lane j % 32, register j / 32).
template <int E>
__device__ __forceinline__ float warp_tree_sum_squares(const float (&x)[E]) {
  return tree_sum_squares<0, 5>(x);
}
template <int E>
__device__ __forceinline__ void warp_fwht(float (&x)[E], int lane) {
  fwht<0, 5>(x, lane);
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
