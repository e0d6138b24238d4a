// KIVI (Liu et al. 2024, jy-yuan/KIVI): asymmetric 2/4-bit KV quantization —
// keys per channel over groups of G tokens, values per token in groups of G
// channels; G = 32 (the reference implementation's example setting).
//
// Keys (KiviKeyCodec), one record per group of G tokens × d channels:
//   scale   d × fp16 LE   per channel: (max − min)/(2^b − 1) over the G tokens
//   min     d × fp16 LE
//   codes   ceil(G·d·b/8) bytes, LSB-first, code of (token t, channel c) at
//           index c·G + t (packed along tokens, as KIVI does)
//   q = round-half-even(clamp((x − min)/scale, 0, 2^b − 1)) in fp32 (0 where
//   scale = 0); value = q·scale16 + min16.
//   The last n mod G tokens (KIVI's full-precision residual, not yet a whole
//   group) are stored as fp16 rows after the groups.
//   Bytes per token in steady state: (4d + G·d·b/8)/G (d=128, b=2: 48 B).
// Values (KiviValueCodec), per token, d/G groups of G channels:
//   per group: fp16 scale, fp16 min, then ceil(G·b/8) bytes of codes
//   (same rounding); d % G == 0.
#pragma once

#include "tq/codec.h"

namespace tq {

class KiviKeyCodec final : public Codec {
 public:
  KiviKeyCodec(int bits, int d, int group = 32);
  size_t row_bytes() const override { return group_bytes_ / size_t(group_); }
  int group_rows() const override { return group_; }
  size_t encoded_bytes(int64_t n) const override;
  void encode(const float* x, int64_t n, uint8_t* out) const override;
  void decode(const uint8_t* in, int64_t n, float* out) const override;
  // step = range/(2^b − 1) over G samples, range ≤ 2·a_G: NMSE ≤ 1.2·step²/12.
  double gaussian_nmse_bound() const override;

 private:
  int bits_, group_;
  size_t group_bytes_;
};

class KiviValueCodec final : public Codec {
 public:
  KiviValueCodec(int bits, int d, int group = 32);
  size_t row_bytes() const override;
  void encode(const float* x, int64_t n, uint8_t* out) const override;
  void decode(const uint8_t* in, int64_t n, float* out) const override;
  double gaussian_nmse_bound() const override;  // as for keys

 private:
  int bits_, group_;
};

}  // namespace tq
