// GGUF value helpers shared by the metadata accessors (gguf_metadata.cpp) and the
// parser (gguf.cpp) (internal).
#pragma once

#include <cstddef>
#include <cstdint>

#include "tq/gguf.h"

namespace tq::detail {

// Bytes of one scalar of type t; 0 for string/array/unknown.
inline size_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::BOOL: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
    case GgufType::U64: case GgufType::I64: case GgufType::F64: return 8;
    default: return 0;
  }
}

inline uint64_t load_le(const uint8_t* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= uint64_t(p[i]) << (8 * i);
  return v;
}

}  // namespace tq::detail
