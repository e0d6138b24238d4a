// Narrow floating-point formats: IEEE binary16 (half), bfloat16, and the two
// 8-bit floats KV caches use: OCP FP8 E4M3 ("e4m3fn", bias 7, max 448) and
// Triton's fp8e4b15 (bias 15, max 1.875; what vLLM stores before sm_89).
//
// Every float→narrow conversion rounds to nearest, ties to even, and keeps
// subnormals (e4b15: see below). Documented special cases:
//   half, bf16 : overflow → ±inf (IEEE); NaN → quiet NaN of the same sign.
//   fp8 e4m3   : "satfinite" as PTX cvt.rn.satfinite.e4m3x2.f32: |x| ≥ 448
//                after rounding (±inf included) → ±448; NaN → 0x7F (sign kept).
//                E4M3 has no infinity; S.1111.111 is NaN.
//   fp8 e4b15  : no inf and no NaN encodings (all 256 codes are finite, the
//                largest 0x7F = 1.875). Encoding is Triton's software path, bit
//                for bit: round to fp16 (RNE), clamp |h| to 1.75 (±inf and NaN
//                too, sign kept), round the mantissa to 3 bits half AWAY from
//                zero. So 0x7F is never produced. Quantizers reject NaN/Inf
//                input before this.
// Narrow→float conversions are exact (every narrow value is a float).
#pragma once

#include <cstdint>
#include <cstring>

namespace tq {

inline uint32_t float_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bits_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

uint16_t float_to_half(float f);
float half_to_float(uint16_t h);

uint16_t float_to_bf16(float f);
inline float bf16_to_float(uint16_t b) { return bits_float(uint32_t(b) << 16); }

uint8_t float_to_fp8_e4m3(float f);
float fp8_e4m3_to_float(uint8_t v);

uint8_t float_to_fp8_e4b15(float f);
float fp8_e4b15_to_float(uint8_t v);

// Round-trip through half precision (what storing a value in an fp16 field does).
inline float round_half(float f) { return half_to_float(float_to_half(f)); }

}  // namespace tq
