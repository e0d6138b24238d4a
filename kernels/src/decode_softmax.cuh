// The quantized decode's online softmax (decode_kernel.cuh): per warp and 32-token sub-tile, in
// the exp2 domain (ex2.approx.ftz). While no logit of a sub-tile exceeds its column's running
// maximum (all but a few sub-tiles once the maxima settle), m stays and the cross-lane max, α
// and the rescales are skipped (fits/keep, try_keep_half). The value accumulators are rescaled only when a
// running max moved (rescale_acc, after a warp vote). Each warp's state is one part of the
// log-sum-exp merge that follows the kernel (decode.cu).
//
// A new maximum sets m to that maximum plus kHeadroom (any m ≥ the logits gives the same softmax), so that
// later sub-tiles keep to the fast path unless a logit exceeds the maximum by more than kHeadroom. The weights
// stay ≤ 1 (P' cannot overflow fp16, whatever the value scale) and ≥ 2^-kHeadroom times their value under
// m = the maximum: fp16 P' reaches its subnormal range kHeadroom bits closer to the maximum. With it, 2.9% of
// the sub-tiles take the slow path at 16 columns per warp on tq-bench's Gaussian inputs (q_len 4 at 32/8;
// experiments/softmax_votes.py replays the vote in float64, on those inputs or a tq-dump file).
#pragma once

#include <cmath>

#include "decode_common.cuh"

namespace tq::cuda {

namespace {

// The online softmax over 32 tokens (two 16-token halves) for the lane's two
// query columns: x[h][0..1] token r, x[h][2..3] token r+8 of half h (log2-domain
// logits, −inf = masked). Returns α per column; x becomes p.
struct Softmax32 {
  static constexpr float kHeadroom = 2.f;  // log2 units (the header)
  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.f, 0.f};  // per-lane partial sums (reduced over the 8 token lanes at the end)
  // kSum = false: l is only rescaled; the caller adds the weights it actually uses (hi-only P').
  // kGuard (causal kernels): a column may have no valid token yet (dev::exp_base)
  template <bool kSum = true, bool kGuard = false>
  __device__ __forceinline__ void update(float (&x)[2][4], float (&alpha)[2]) {
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      float mx = fmaxf(fmaxf(x[0][c], x[0][c + 2]), fmaxf(x[1][c], x[1][c + 2]));
      mx = fmaxf(mx, __shfl_xor_sync(dev::kFull, mx, 4));
      mx = fmaxf(mx, __shfl_xor_sync(dev::kFull, mx, 8));
      mx = fmaxf(mx, __shfl_xor_sync(dev::kFull, mx, 16));
      const float mn = fmaxf(m[c], mx + kHeadroom);  // finite: the sub-tile has ≥ 1 valid token (but kGuard)
      const float me = dev::exp_base(mn, kGuard);
      alpha[c] = dev::ex2_fast(m[c] - me);  // m = −inf → 0
      m[c] = mn;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        x[h][c] = dev::ex2_fast(x[h][c] - me);
        x[h][c + 2] = dev::ex2_fast(x[h][c + 2] - me);
      }
      l[c] = kSum ? l[c] * alpha[c] + ((x[0][c] + x[0][c + 2]) + (x[1][c] + x[1][c + 2])) : l[c] * alpha[c];
    }
  }
  // The common case once the maxima have settled: no logit of the sub-tile exceeds its column's
  // running maximum anywhere in the warp (fits on every lane, one vote: column_weights). Then m stays,
  // α = 1 and x becomes p without the cross-lane max (keep); otherwise (the first sub-tile, a new
  // maximum, or a NaN) update.
  __device__ __forceinline__ bool fits(const float (&x)[2][4]) const {
    bool fit = true;
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int i = 0; i < 4; ++i) fit = fit && x[h][i] <= m[i & 1];
    return fit;
  }
  template <bool kSum = true, bool kGuard = false>
  __device__ __forceinline__ void keep(float (&x)[2][4]) {
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const float me = dev::exp_base(m[c], kGuard);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        x[h][c] = dev::ex2_fast(x[h][c] - me);
        x[h][c + 2] = dev::ex2_fast(x[h][c + 2] - me);
      }
      if constexpr (kSum) l[c] += (x[0][c] + x[0][c + 2]) + (x[1][c] + x[1][c + 2]);
    }
  }
  template <bool kSum = true, bool kGuard = false>
  __device__ __forceinline__ bool try_keep_half(float (&x)[4]) {
    const bool keep = x[0] <= m[0] && x[2] <= m[0] && x[1] <= m[1] && x[3] <= m[1];
    if (!__all_sync(dev::kFull, keep)) return false;
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const float me = dev::exp_base(m[c], kGuard);
      x[c] = dev::ex2_fast(x[c] - me);
      x[c + 2] = dev::ex2_fast(x[c + 2] - me);
      if constexpr (kSum) l[c] += x[c] + x[c + 2];
    }
    return true;
  }
  // Packed kernels: the lane holds one half (tokens r, r+8); lane p ^ 2 the other.
  template <bool kSum = true, bool kGuard = false>
  __device__ __forceinline__ void update_half(float (&x)[4], float (&alpha)[2]) {
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      float mx = fmaxf(x[c], x[c + 2]);
      mx = fmaxf(mx, __shfl_xor_sync(dev::kFull, mx, 2));
      mx = fmaxf(mx, __shfl_xor_sync(dev::kFull, mx, 4));
      mx = fmaxf(mx, __shfl_xor_sync(dev::kFull, mx, 8));
      mx = fmaxf(mx, __shfl_xor_sync(dev::kFull, mx, 16));
      const float mn = fmaxf(m[c], mx + kHeadroom), me = dev::exp_base(mn, kGuard);
      alpha[c] = dev::ex2_fast(m[c] - me);
      m[c] = mn;
      x[c] = dev::ex2_fast(x[c] - me);
      x[c + 2] = dev::ex2_fast(x[c + 2] - me);
      l[c] = kSum ? l[c] * alpha[c] + (x[c] + x[c + 2]) : l[c] * alpha[c];
    }
  }
  // The part's log2-domain log-sum-exp of column c, given its total l = Σp (−inf: no token).
  __device__ __forceinline__ float lse(int c, float l) const { return l > 0.f ? m[c] + __log2f(l) : -INFINITY; }
  static __device__ __forceinline__ float inv_sum(float l) { return l > 0.f ? 1.f / l : 0.f; }
};

// acc = acc · α per column (accumulator register j holds column j & 1)
template <int N>
__device__ __forceinline__ void rescale_acc(float (&acc)[N][4], const float (&alpha)[2]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] *= alpha[j & 1];
}

}  // namespace

}  // namespace tq::cuda
