// llama.cpp KV-cache block types (ggml/src/ggml-common.h, ggml-quants.c
// quantize_row_*_ref), 32 values per block, blocks laid end to end along d.
//
//   q8_0: { fp16 d; int8 qs[32]; }  34 B / 32 values = 8.5 bits/value
//         amax = max|x|, d = amax/127, id = d ? 1/d : 0, qs = roundf(x·id)
//         (half away from zero), value = qs·fp16(d)
//   q4_0: { fp16 d; uint8 qs[16]; } 18 B / 32 values = 4.5 bits/value
//         max = the x with the largest |x| (first on ties), d = max/−8,
//         id = d ? 1/d : 0, q = min(15, (int8)(x·id + 8.5f));
//         x[j] → low nibble of qs[j], x[j+16] → high nibble; value = (q−8)·fp16(d)
// Quantization uses the fp32 d/id; fp16(d) is stored (RNE). head_dim % 32 == 0.
#pragma once

#include <cstdint>

#include "tq/codec.h"

namespace tq {

struct BlockQ8_0 {
  uint16_t d;      // fp16 scale
  int8_t qs[32];   // quants
};
static_assert(sizeof(BlockQ8_0) == 34, "q8_0 block is 34 bytes");

struct BlockQ4_0 {
  uint16_t d;      // fp16 scale
  uint8_t qs[16];  // nibbles: x[j] low, x[j+16] high
};
static_assert(sizeof(BlockQ4_0) == 18, "q4_0 block is 18 bytes");

class LlamaBlockCodec final : public Codec {
 public:
  enum Kind { q8_0, q4_0 };
  LlamaBlockCodec(Kind kind, int d);
  size_t row_bytes() const override;
  void encode(const float* x, int64_t n, uint8_t* out) const override;
  void decode(const uint8_t* in, int64_t n, float* out) const override;
  // Rounding error ≤ step/2 with step = amax/127 (q8_0) or |max|/8 (q4_0),
  // amax ≤ a_32: NMSE ≤ 1.2·step²/12.
  double gaussian_nmse_bound() const override;

 private:
  Kind kind_;
};

}  // namespace tq
