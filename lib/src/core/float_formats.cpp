#include "tq/float_formats.h"

#include <cmath>

namespace tq {
namespace {

// Rounds a finite, non-negative float (bits `ax`, sign cleared) to a binary
// format with M mantissa bits and exponent bias B, round-to-nearest-even,
// subnormals kept. Returns the unsigned code (exponent field << M | mantissa)
// without any overflow handling: a code beyond the format's largest finite
// value is returned as is and the caller saturates or maps it to infinity.
uint32_t round_magnitude(uint32_t ax, int M, int B) {
  if ((ax >> 23) == 0) return 0;  // float subnormal or zero: below every target's half-ulp
  const int e = int(ax >> 23) - 127;
  const uint32_t sig = (ax & 0x7fffffu) | 0x800000u;  // value = sig · 2^(e-23)
  const int emin = 1 - B;
  int shift;           // bits of sig to drop
  uint32_t base;       // exponent field already placed
  if (e >= emin) {     // normal in the target
    shift = 23 - M;
    base = uint32_t(e + B) << M;
  } else {             // subnormal in the target: value = m · 2^(emin-M)
    shift = (emin - M) - (e - 23);
    base = 0;
    if (shift > 25) return 0;  // below half of the smallest subnormal
  }
  // For normals the implicit bit is part of base, so drop it from sig.
  const uint32_t s = (e >= emin) ? (sig & 0x7fffffu) : sig;
  uint32_t q = s >> shift;
  const uint32_t rem = s & ((1u << shift) - 1u);
  const uint32_t halfway = 1u << (shift - 1);
  if (rem > halfway || (rem == halfway && (q & 1u))) ++q;  // carry may bump the exponent: correct
  return base + q;
}

float decode_magnitude(uint32_t code, int M, int B) {
  const uint32_t ef = code >> M, mf = code & ((1u << M) - 1u);
  if (ef == 0) return std::ldexp(float(mf), 1 - B - M);
  return std::ldexp(float((1u << M) | mf), int(ef) - B - M);
}

}  // namespace

uint16_t float_to_half(float f) {
  const uint32_t x = float_bits(f);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return uint16_t(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));  // quiet NaN
  if (ax == 0x7f800000u) return uint16_t(sign | 0x7c00u);
  const uint32_t c = round_magnitude(ax, 10, 15);
  return uint16_t(sign | (c >= 0x7c00u ? 0x7c00u : c));  // overflow → inf
}

float half_to_float(uint16_t h) {
  const bool neg = h & 0x8000u;
  const uint32_t a = h & 0x7fffu;
  if (a >= 0x7c00u) {  // inf / NaN: widen the payload
    return bits_float((neg ? 0x80000000u : 0u) | 0x7f800000u | ((a & 0x3ffu) << 13));
  }
  const float v = decode_magnitude(a, 10, 15);
  return neg ? -v : v;
}

uint16_t float_to_bf16(float f) {
  const uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);  // quiet NaN
  const uint32_t r = x + 0x7fffu + ((x >> 16) & 1u);  // RNE; overflow carries into inf
  return uint16_t(r >> 16);
}

uint8_t float_to_fp8_e4m3(float f) {
  const uint32_t x = float_bits(f);
  const uint8_t sign = uint8_t((x >> 24) & 0x80u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return uint8_t(sign | 0x7fu);  // NaN
  if (ax == 0x7f800000u) return uint8_t(sign | 0x7eu);  // satfinite: inf → max
  const uint32_t c = round_magnitude(ax, 3, 7);
  return uint8_t(sign | (c > 0x7eu ? 0x7eu : c));
}

float fp8_e4m3_to_float(uint8_t v) {
  const bool neg = v & 0x80u;
  const uint32_t a = v & 0x7fu;
  if (a == 0x7fu) return bits_float((neg ? 0x80000000u : 0u) | 0x7fc00000u);
  const float m = decode_magnitude(a, 3, 7);
  return neg ? -m : m;
}

// Triton's software conversion (python/triton/language/extra/cuda/utils.py,
// convert_custom_float8): fp32 → fp16 (RNE), |h| clamped to 1.75 (min.f16x2,
// so NaN and inf become 1.75), then byte = (2·bits(|h|) + 0x80) >> 8, which
// rounds the fp16 mantissa to 3 bits half away from zero. fp16 and e4b15 share
// the exponent bias (15), so subnormals map field to field.
uint8_t float_to_fp8_e4b15(float f) {
  const uint16_t h = float_to_half(f);
  const uint8_t sign = uint8_t((h >> 8) & 0x80u);
  uint32_t a = h & 0x7fffu;
  if (a > 0x3f00u) a = 0x3f00u;  // 1.75; NaN (a > 0x7c00) too
  return uint8_t(sign | (((2u * a + 0x80u) >> 8) & 0x7fu));
}

float fp8_e4b15_to_float(uint8_t v) {
  const float m = decode_magnitude(v & 0x7fu, 3, 15);
  return (v & 0x80u) ? -m : m;
}

}  // namespace tq
