#include "tq/formats/llama_blocks.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "bytes.h"
#include "tq/error.h"

namespace tq {

LlamaBlockCodec::LlamaBlockCodec(Kind kind, int d) : Codec(kind == q8_0 ? "q8_0" : "q4_0", d), kind_(kind) {
  TQ_CHECK(d >= 32 && d % 32 == 0, "{}: head_dim {} not supported: blocks of 32 need head_dim % 32 == 0", name(), d);
}

size_t LlamaBlockCodec::row_bytes() const {
  return size_t(dim() / 32) * (kind_ == q8_0 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0));
}

double LlamaBlockCodec::gaussian_nmse_bound() const {
  const double step = gaussian_max_envelope(32) / (kind_ == q8_0 ? 127.0 : 8.0);
  return 1.2 * step * step / 12;
}

void LlamaBlockCodec::encode(const float* x, int64_t n, uint8_t* out) const {
  check_rows(x, n);
  const int64_t nb = int64_t(n) * (dim() / 32);
  for (int64_t b = 0; b < nb; ++b) {
    const float* v = x + b * 32;
    if (kind_ == q8_0) {
      uint8_t* blk = out + b * 34;
      float amax = 0.f;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(v[j]));
      const float d = amax / 127.f, id = d != 0.f ? 1.0f / d : 0.0f;
      detail::put_f16(blk, d);
      for (int j = 0; j < 32; ++j) blk[2 + j] = uint8_t(int8_t(std::round(v[j] * id)));
    } else {
      uint8_t* blk = out + b * 18;
      float amax = 0.f, max = 0.f;
      for (int j = 0; j < 32; ++j)
        if (amax < std::fabs(v[j])) { amax = std::fabs(v[j]); max = v[j]; }
      const float d = max / -8.f, id = d != 0.f ? 1.0f / d : 0.0f;
      detail::put_f16(blk, d);
      for (int j = 0; j < 16; ++j) {
        const int x0 = std::min(15, int(int8_t(v[j] * id + 8.5f)));
        const int x1 = std::min(15, int(int8_t(v[j + 16] * id + 8.5f)));
        blk[2 + j] = uint8_t(x0 | (x1 << 4));
      }
    }
  }
}

void LlamaBlockCodec::decode(const uint8_t* in, int64_t n, float* out) const {
  const int64_t nb = int64_t(n) * (dim() / 32);
  for (int64_t b = 0; b < nb; ++b) {
    float* o = out + b * 32;
    if (kind_ == q8_0) {
      const uint8_t* blk = in + b * 34;
      const float d = detail::get_f16(blk);
      for (int j = 0; j < 32; ++j) o[j] = float(int8_t(blk[2 + j])) * d;
    } else {
      const uint8_t* blk = in + b * 18;
      const float d = detail::get_f16(blk);
      for (int j = 0; j < 16; ++j) {
        o[j] = float(int(blk[2 + j] & 15) - 8) * d;
        o[j + 16] = float(int(blk[2 + j] >> 4) - 8) * d;
      }
    }
  }
}

}  // namespace tq
