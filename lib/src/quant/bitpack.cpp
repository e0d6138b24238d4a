#include "tq/bitpack.h"

#include <cstring>
#include <vector>

#include "tq/simd.h"

namespace tq {

void pack_bits(const uint8_t* codes, size_t n, int bits, uint8_t* out) {
  const size_t nb = packed_bytes(n, bits);
  if (bits == 8) { std::memcpy(out, codes, n); return; }
  if (bits == 4) {
    pack_nibbles(codes, n & ~size_t(1), out);
    if (n & 1) out[n >> 1] = uint8_t(codes[n - 1] & 15);
    return;
  }
  if (bits == 3 && n % 8 == 0) {  // 8 codes → 3 bytes
    for (size_t g = 0; g < n / 8; ++g) {
      const uint8_t* c = codes + 8 * g;
      uint32_t w = 0;
      for (int k = 0; k < 8; ++k) w |= uint32_t(c[k] & 7u) << (3 * k);
      out[3 * g] = uint8_t(w);
      out[3 * g + 1] = uint8_t(w >> 8);
      out[3 * g + 2] = uint8_t(w >> 16);
    }
    return;
  }
  std::memset(out, 0, nb);
  const uint32_t mask = (1u << bits) - 1u;
  size_t bit = 0;
  for (size_t i = 0; i < n; ++i, bit += size_t(bits)) {
    const uint32_t v = (codes[i] & mask) << (bit & 7);
    out[bit >> 3] = uint8_t(out[bit >> 3] | (v & 0xff));
    if ((bit & 7) + size_t(bits) > 8) out[(bit >> 3) + 1] = uint8_t(out[(bit >> 3) + 1] | (v >> 8));
  }
}

void unpack_bits(const uint8_t* in, size_t n, int bits, uint8_t* codes) {
  if (bits == 8) { std::memcpy(codes, in, n); return; }
  if (bits == 4) {
    for (size_t j = 0; j < n; ++j) codes[j] = uint8_t((in[j >> 1] >> ((j & 1) * 4)) & 15);
    return;
  }
  if (bits == 3 && n % 8 == 0) {
    for (size_t g = 0; g < n / 8; ++g) {
      const uint32_t w = uint32_t(in[3 * g]) | uint32_t(in[3 * g + 1]) << 8 | uint32_t(in[3 * g + 2]) << 16;
      for (int k = 0; k < 8; ++k) codes[8 * g + size_t(k)] = uint8_t((w >> (3 * k)) & 7u);
    }
    return;
  }
  const uint32_t mask = (1u << bits) - 1u;
  const size_t nb = packed_bytes(n, bits);
  size_t bit = 0;
  for (size_t i = 0; i < n; ++i, bit += size_t(bits)) {
    const size_t byte = bit >> 3;
    uint32_t w = in[byte];
    if (byte + 1 < nb) w |= uint32_t(in[byte + 1]) << 8;
    codes[i] = uint8_t((w >> (bit & 7)) & mask);
  }
}

namespace {
// The halving tree with the first level fused into the load; AVX2 clone where
// available (element-wise adds: identical results on every path).
template <bool kSquare>
__attribute__((target_clones("avx2", "default"))) float tree_reduce(const float* x, int n) {
  int p = 1;
  while (p < n) p <<= 1;
  if (p == 1) return n ? (kSquare ? x[0] * x[0] : x[0]) : 0.0f;
  float buf[2048];
  std::vector<float> big;
  float* s = buf;
  int h = p >> 1;
  if (h > 2048) { big.resize(size_t(h)); s = big.data(); }
  if (n == p) {  // power of two: no padding, vectorizable
    for (int i = 0; i < h; ++i) s[i] = kSquare ? x[i] * x[i] + x[i + h] * x[i + h] : x[i] + x[i + h];
  } else {
    for (int i = 0; i < h; ++i) {
      const float a = i < n ? (kSquare ? x[i] * x[i] : x[i]) : 0.0f;
      const float b = i + h < n ? (kSquare ? x[i + h] * x[i + h] : x[i + h]) : 0.0f;
      s[i] = a + b;
    }
  }
  for (h >>= 1; h >= 1; h >>= 1)
    for (int i = 0; i < h; ++i) s[i] += s[i + h];
  return s[0];
}
}  // namespace

float tree_sum_squares(const float* x, int n) { return tree_reduce<true>(x, n); }
float tree_sum(const float* x, int n) { return tree_reduce<false>(x, n); }

}  // namespace tq
