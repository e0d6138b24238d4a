// u<b>: per-vector min/max uniform quantizer (vLLM TurboQuant values).
//
// Record (one row of d values), b ∈ {2,3,4,8}:
//   codes   ceil(d·b/8) bytes, LSB-first bit stream, code j at bit b·j
//   scale   fp16 LE   scale = (max − min)/(2^b − 1) in fp32, floored at 1e-8
//   zero    fp16 LE   = min
// Encode (fp32): q_j = clamp(floor((v_j − min)/scale + 0.5), 0, 2^b − 1) with
// the fp32 scale/min; decode uses the stored fp16 copies: v_j = q_j·scale16 + zero16.
// Bytes: ceil(d·b/8) + 4 (d=128, b=4: 68).
#pragma once

#include "tq/codec.h"

namespace tq {

class UniformCodec final : public Codec {
 public:
  UniformCodec(int bits, int d);
  size_t row_bytes() const override;
  void encode(const float* x, int64_t n, uint8_t* out) const override;
  void decode(const uint8_t* in, int64_t n, float* out) const override;
  void score(const float* q, const uint8_t* in, int64_t n, float* out) const override;
  int bits() const { return bits_; }
  // Rounding error ≤ step/2, step = range/(2^b − 1), range ≤ 2·a_d (the
  // Gaussian max envelope): NMSE ≤ 1.1·(2a_d/(2^b − 1))²/12 (+ fp16 fields).
  double gaussian_nmse_bound() const override;

 private:
  int bits_;
  size_t code_bytes_;
};

}  // namespace tq
