// int8 / int4: symmetric per-token-head integer quantization.
//
// Record: codes then one fp16 scale (LE).
//   int8: d int8 codes, scale = amax/127, q = clamp(roundf(x·(1/scale)), −127, 127)
//         d + 2 bytes (d=128: 130 B, 8.125 bits/value)
//   int4: d/2 bytes of nibbles (even j low), nibble = q + 8 with
//         q = clamp(roundf(x·(1/scale)), −7, 7), scale = amax/7
//         d/2 + 2 bytes (d=128: 66 B, 4.125 bits/value)
// value = q·fp16(scale); a zero row stores scale 0 and decodes to zeros.
#pragma once

#include "tq/codec.h"

namespace tq {

class IntCodec final : public Codec {
 public:
  IntCodec(int bits, int d);  // bits 8 or 4
  size_t row_bytes() const override;
  void encode(const float* x, int64_t n, uint8_t* out) const override;
  void decode(const uint8_t* in, int64_t n, float* out) const override;
  // step = amax/127 or amax/7 with amax ≤ a_d: NMSE ≤ 1.2·step²/12.
  double gaussian_nmse_bound() const override;

 private:
  int bits_;
};

}  // namespace tq
