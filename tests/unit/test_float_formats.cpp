// Narrow float conversions against independent oracles: the defining formula
// in float64 for every code, ties between every pair of neighbours, and GCC's
// own _Float16 soft-float conversion on random floats.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>

#include "tq/float_formats.h"
#include "tq/rng.h"

using namespace tq;

namespace {
// Value of a code of a binary format with E exponent bits, M mantissa bits,
// bias B, given whether the all-ones exponent is inf/NaN (IEEE style).
double formula(uint32_t code, int E, int M, int B) {
  const bool neg = code >> (E + M);
  const uint32_t e = (code >> M) & ((1u << E) - 1), m = code & ((1u << M) - 1);
  double v = e == 0 ? std::ldexp(double(m), 1 - B - M) : std::ldexp(double((1u << M) + m), int(e) - B - M);
  return neg ? -v : v;
}
bool same(float a, double b) { return (std::isnan(a) && std::isnan(b)) || double(a) == b; }
}  // namespace

TEST_CASE("half: every code decodes to its defining value", "[float]") {
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint32_t e = (h >> 10) & 31, m = h & 1023;
    double expect;
    if (e == 31) expect = m ? std::numeric_limits<double>::quiet_NaN() : ((h & 0x8000) ? -INFINITY : INFINITY);
    else expect = formula(h, 5, 10, 15);
    INFO("code " << h);
    REQUIRE(same(half_to_float(uint16_t(h)), expect));
  }
}

TEST_CASE("half: encode round-trips every finite code and rounds ties to even", "[float]") {
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const float v = half_to_float(uint16_t(h));
    REQUIRE(float_to_half(v) == h);
    REQUIRE(float_to_half(-v) == (h | 0x8000u));
    // Midpoint to the next code (0x7bff's next is +inf = 0x7c00: the overflow threshold 65520).
    const double next = h + 1 < 0x7c00 ? double(half_to_float(uint16_t(h + 1))) : 65536.0;
    const float mid = float((double(v) + next) / 2);  // exact: ≤ 12 significant bits
    REQUIRE(double(mid) == (double(v) + next) / 2);
    const uint32_t even = (h & 1) ? h + 1 : h;
    INFO("code " << h);
    REQUIRE(float_to_half(mid) == even);
    REQUIRE(float_to_half(std::nextafter(mid, INFINITY)) == h + 1);
    REQUIRE(float_to_half(std::nextafter(mid, -INFINITY)) == h);
  }
  REQUIRE(float_to_half(INFINITY) == 0x7c00);
  REQUIRE(float_to_half(-INFINITY) == 0xfc00);
  REQUIRE(float_to_half(1e10f) == 0x7c00);
  REQUIRE(std::isnan(half_to_float(float_to_half(NAN))));
  REQUIRE((float_to_half(NAN) & 0x7e00) == 0x7e00);  // quiet
  REQUIRE(float_to_half(1e-30f) == 0);
  REQUIRE(float_to_half(-1e-30f) == 0x8000);
}

TEST_CASE("half: agrees with the compiler's _Float16 conversion on random floats", "[float]") {
  Rng rng(7);
  for (int i = 0; i < 2000000; ++i) {
    uint32_t bits = uint32_t(rng.next_u64());
    float f;
    std::memcpy(&f, &bits, 4);
    if (std::isnan(f)) continue;
    // Bias towards the half range: rescale the exponent into [-30, 20].
    int ex;
    f = std::ldexp(std::frexp(f, &ex), int(rng.below(51)) - 30);
    const _Float16 ref = (_Float16)f;
    uint16_t rb;
    std::memcpy(&rb, &ref, 2);
    INFO("float " << f);
    REQUIRE(float_to_half(f) == rb);
  }
}

TEST_CASE("bf16: every code, ties to even, NaN stays NaN", "[float]") {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float v = bf16_to_float(uint16_t(b));
    const uint32_t e = (b >> 7) & 255, m = b & 127;
    double expect = e == 255 ? (m ? NAN : ((b & 0x8000) ? -INFINITY : INFINITY)) : formula(b, 8, 7, 127);
    REQUIRE(same(v, expect));
    if (e == 255) continue;
    REQUIRE(float_to_bf16(v) == b);
    if ((b & 0x7fff) == 0x7f7f) continue;  // next is inf
    if ((b & 0x7fff) == 0x7fff) continue;
    const float nb = bf16_to_float(uint16_t(b + 1));
    const double mid = (double(v) + double(nb)) / 2;
    const float midf = float(mid);
    if (double(midf) != mid) continue;  // not representable (only across sign boundaries)
    REQUIRE(float_to_bf16(midf) == ((b & 1) ? b + 1 : b));
  }
  REQUIRE(float_to_bf16(3.4e38f) == 0x7f80);  // rounds past max → inf
  REQUIRE(std::isnan(bf16_to_float(float_to_bf16(NAN))));
}

TEST_CASE("fp8 e4m3: every code, ties to even, satfinite", "[float]") {
  for (uint32_t c = 0; c < 256; ++c) {
    const float v = fp8_e4m3_to_float(uint8_t(c));
    if ((c & 0x7f) == 0x7f) { REQUIRE(std::isnan(v)); continue; }
    REQUIRE(double(v) == formula(c, 4, 3, 7));
    REQUIRE(float_to_fp8_e4m3(v) == c);
    if ((c & 0x7f) >= 0x7e) continue;
    const double next = fp8_e4m3_to_float(uint8_t(c + 1));
    const float mid = float((double(v) + next) / 2);
    INFO("code " << c);
    REQUIRE(float_to_fp8_e4m3(mid) == ((c & 1) ? c + 1 : c));
    REQUIRE(float_to_fp8_e4m3(std::nextafter(mid, (c & 0x80) ? -INFINITY : INFINITY)) == c + 1);
  }
  REQUIRE(fp8_e4m3_to_float(0x7e) == 448.0f);
  REQUIRE(fp8_e4m3_to_float(0x01) == std::ldexp(1.0f, -9));
  REQUIRE(float_to_fp8_e4m3(464.0f) == 0x7e);   // tie above max: saturates, never NaN
  REQUIRE(float_to_fp8_e4m3(1e6f) == 0x7e);
  REQUIRE(float_to_fp8_e4m3(-1e6f) == 0xfe);
  REQUIRE(float_to_fp8_e4m3(INFINITY) == 0x7e);
  REQUIRE((float_to_fp8_e4m3(NAN) & 0x7f) == 0x7f);
  REQUIRE(float_to_fp8_e4m3(std::ldexp(1.0f, -10)) == 0);        // half of min subnormal: tie to even (0)
  REQUIRE(float_to_fp8_e4m3(std::ldexp(1.5f, -10)) == 0x01);
}

TEST_CASE("fp8 e4b15: every code decodes by its formula; Triton's encoder", "[float]") {
  for (uint32_t c = 0; c < 256; ++c) {
    const float v = fp8_e4b15_to_float(uint8_t(c));
    REQUIRE(double(v) == formula(c, 4, 3, 15));  // no NaN/inf codes
    if ((c & 0x7f) <= 0x7e) REQUIRE(float_to_fp8_e4b15(v) == c);
  }
  REQUIRE(fp8_e4b15_to_float(0x7f) == 1.875f);
  REQUIRE(float_to_fp8_e4b15(1.875f) == 0x7e);  // clamped to 1.75 as Triton does
  REQUIRE(float_to_fp8_e4b15(100.f) == 0x7e);
  REQUIRE(float_to_fp8_e4b15(-INFINITY) == 0xfe);
  REQUIRE((float_to_fp8_e4b15(NAN) & 0x7f) == 0x7e);
  // Ties round away from zero (unlike RNE): midpoint of codes 2 and 3, and of 1 and 2.
  const float m23 = (fp8_e4b15_to_float(2) + fp8_e4b15_to_float(3)) / 2;
  const float m12 = (fp8_e4b15_to_float(1) + fp8_e4b15_to_float(2)) / 2;
  REQUIRE(float_to_fp8_e4b15(m23) == 3);
  REQUIRE(float_to_fp8_e4b15(m12) == 2);
  REQUIRE(float_to_fp8_e4b15(-m23) == 0x83);
  // Away from ties it is the nearest code: every fp16 value, nearest by formula.
  for (uint32_t h = 0; h < 0x3f00; ++h) {
    const double x = half_to_float(uint16_t(h));
    const uint8_t c = float_to_fp8_e4b15(float(x));
    const double err = std::fabs(double(fp8_e4b15_to_float(c)) - x);
    for (uint32_t k = 0; k <= 0x7e; ++k) REQUIRE(err <= std::fabs(formula(k, 4, 3, 15) - x));
  }
}
