// Little-endian field access for record layouts (internal).
#pragma once

#include <cstdint>
#include <cstring>

#include "tq/float_formats.h"

namespace tq::detail {

inline void put_u16(uint8_t* p, uint16_t v) { p[0] = uint8_t(v); p[1] = uint8_t(v >> 8); }
inline uint16_t get_u16(const uint8_t* p) { return uint16_t(p[0] | (uint16_t(p[1]) << 8)); }
inline void put_f16(uint8_t* p, float v) { put_u16(p, float_to_half(v)); }
inline float get_f16(const uint8_t* p) { return half_to_float(get_u16(p)); }
inline void put_f32(uint8_t* p, float v) { uint32_t u = float_bits(v); for (int i = 0; i < 4; ++i) p[i] = uint8_t(u >> (8 * i)); }
inline float get_f32(const uint8_t* p) { uint32_t u = 0; for (int i = 0; i < 4; ++i) u |= uint32_t(p[i]) << (8 * i); return bits_float(u); }

}  // namespace tq::detail
