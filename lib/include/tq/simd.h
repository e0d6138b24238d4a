// Hot loops of the CPU reference with a runtime-dispatched AVX2 path. Every
// path performs the same IEEE operations on each element in the same order as
// the scalar code, so results are bit-identical on every CPU (tested).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tq {

// In-place unnormalized Walsh–Hadamard transform, Sylvester order, stages
// h = 1, 2, 4, … (n a power of two).
void fwht(float* x, int n);
// idx[j] = #{i < nm : y[j] ≥ mids[i]} (mids ascending).
void bucketize(const float* y, int n, const float* mids, int nm, uint8_t* idx);

// The same count with search tables built once (codebooks reuse them).
class Bucketizer {
 public:
  Bucketizer() = default;
  Bucketizer(const float* mids, int nm);
  void operator()(const float* y, int n, uint8_t* idx) const;

 private:
  std::vector<float> mids_;
  int levels_ = 0;  // binary-search levels when nm = 2^levels − 1 ≤ 15, else 0
  alignas(32) float table_[4][8] = {};
};

// Packs 4-bit codes (even j low nibble); n even.
void pack_nibbles(const uint8_t* codes, size_t n, uint8_t* out);
// x[j] = (x[j] · a) · b, two roundings per element (the rotation scale then 1/norm).
void scale2_inplace(float* x, int n, float a, float b);
// The halving-tree sum of squares of tq/bitpack.h for power-of-two n ≥ 16 (AVX2
// when available; identical bits to the scalar tree).
float tree_sum_squares_pow2(const float* x, int n);

// True when every |x_i| ≤ limit (false for NaN).
bool all_within(const float* x, size_t n, float limit);
// x[j] *= s for j < n.
void scale_inplace(float* x, int n, float s);

// "avx2" or "scalar": the path the process uses (TQ_SIMD=scalar forces scalar).
const char* simd_path();

namespace detail {
void fwht_scalar(float* x, int n);
void bucketize_scalar(const float* y, int n, const float* mids, int nm, uint8_t* idx);
}  // namespace detail

}  // namespace tq
