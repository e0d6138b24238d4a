// CPU reference of decode attention over packed KV slots (what the GPU paged
// decode kernel computes), used by tq-bench --cpu.
//
// One kv head: n tokens of slots (format f, f.slot_bytes() each, key | value),
// g query rows of head_dim floats. out[i] = Σ_t softmax_t(scale · q_i·k̂_t) · v̂_t,
// scores via the key codec's prepare_query + score (rotated domain, keys never
// materialised), softmax in double, values decoded row by row.
#pragma once

#include <cstdint>

#include "tq/format.h"

namespace tq {

void decode_attention(const KvFormat& f, const float* q, int g, const uint8_t* slots, int64_t n, float scale,
                      float* out);

}  // namespace tq
