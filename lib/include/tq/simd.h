// Hot loops of the CPU reference with runtime-dispatched AVX-512 and AVX2
// paths (the best the CPU has; TQ_SIMD=avx2 or TQ_SIMD=scalar caps it). Every
// path performs the same IEEE operations on each element in the same order as
// the scalar code, so results are bit-identical on every CPU (tested: ctest
// runs the unit tests once per path).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tq {

// In-place unnormalized Walsh–Hadamard transform, Sylvester order, stages
// h = 1, 2, 4, … (n a power of two).
void fwht(float* x, int n);
// y = (H x · a) · b, two roundings after the transform: fwht then
// scale2_inplace in one pass. y may be x, otherwise they must not overlap.
void fwht_scale2(const float* x, float* y, int n, float a, float b);
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
  // lut_[l][c] = table_[l][c >> (l+1)]: the level-l candidate indexed by the
  // count so far (16 lanes, one permute per level on the AVX-512 path).
  float lut_[4][16] = {};
};

// Packs 4-bit codes (even j low nibble, codes taken mod 16); n even.
void pack_nibbles(const uint8_t* codes, size_t n, uint8_t* out);
// x[j] = (x[j] · a) · b, two roundings per element (the rotation scale then 1/norm).
void scale2_inplace(float* x, int n, float a, float b);
// The halving-tree sum of squares of tq/bitpack.h for power-of-two n (SIMD for
// 16 ≤ n ≤ 4096; identical bits to the scalar tree).
float tree_sum_squares_pow2(const float* x, int n);

// True when every |x_i| ≤ limit (false for NaN).
bool all_within(const float* x, size_t n, float limit);

// "avx512", "avx2" or "scalar": the path the process uses. By default the best
// the CPU supports (AVX-512 needs F, BW, DQ and VL); TQ_SIMD=avx2 caps it at
// AVX2, TQ_SIMD=scalar forces the portable code. Read once per process.
const char* simd_path();

namespace detail {
void fwht_scalar(float* x, int n);
void bucketize_scalar(const float* y, int n, const float* mids, int nm, uint8_t* idx);
void pack_nibbles_scalar(const uint8_t* codes, size_t n, uint8_t* out);
}  // namespace detail

}  // namespace tq
