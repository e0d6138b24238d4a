// Unquantized and cast-only codecs.
//
//   f32        d float32, little-endian                       32 bits/value
//   f16        d IEEE half (RNE), little-endian               16 bits/value
//   fp8        d FP8 E4M3 bytes (OCP e4m3fn, RNE, satfinite ±448), no scale:
//              vLLM turboquant_k8v4 keys on sm_89+ (`tl.float8e4nv` cast)
//   fp8e4b15   d FP8 E4B15 bytes (Triton's encoder: clamp ±1.75), no scale:
//              the same preset before sm_89                    8 bits/value
// Keys are stored in their own basis (no rotation). score = Σ q_j · value(k_j).
#pragma once

#include "tq/codec.h"

namespace tq {

enum class PlainKind { f32, f16, fp8_e4m3, fp8_e4b15 };

class PlainCodec final : public Codec {
 public:
  PlainCodec(PlainKind kind, int d);
  size_t row_bytes() const override;
  void encode(const float* x, int64_t n, uint8_t* out) const override;
  void decode(const uint8_t* in, int64_t n, float* out) const override;
  void score(const float* q, const uint8_t* in, int64_t n, float* out) const override;
  // f32 ~0; f16 2^-22 (relative rounding ≤ 2^-11); e4m3 2^-8 (≤ 2^-4 relative);
  // e4b15 2^-8 + E[(|X| − 1.75)₊²] = 0.0235 for N(0,1) (the ±1.75 clamp).
  double gaussian_nmse_bound() const override;

 private:
  PlainKind kind_;
};

}  // namespace tq
