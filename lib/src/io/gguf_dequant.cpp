// ggml tensor types: the block layouts, the type table (ggml_type_info) and
// dequantization to float32 (dequantize_row).
#include "tq/gguf.h"

#include <cstring>

#include <fmt/format.h>

#include "tq/error.h"
#include "tq/float_formats.h"

namespace tq {

// ---- block types (ggml-common.h layouts; the struct is the spec) -------------
namespace {

constexpr int QK = 32;     // values per legacy block
constexpr int QK_K = 256;  // values per k-quant super-block

struct BlockQ4_0 { uint16_t d; uint8_t qs[QK / 2]; };                       // 4.5 bits/value
struct BlockQ4_1 { uint16_t d, m; uint8_t qs[QK / 2]; };                    // 5.0
struct BlockQ5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[QK / 2]; };        // 5.5
struct BlockQ5_1 { uint16_t d, m; uint8_t qh[4]; uint8_t qs[QK / 2]; };     // 6.0
struct BlockQ8_0 { uint16_t d; int8_t qs[QK]; };                            // 8.5
struct BlockQ4_K { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[QK_K / 2]; };                   // 4.5
struct BlockQ5_K { uint16_t d, dmin; uint8_t scales[12]; uint8_t qh[QK_K / 8]; uint8_t qs[QK_K / 2]; };  // 5.5
struct BlockQ6_K { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; uint16_t d; };  // 6.5625
static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22 &&
              sizeof(BlockQ5_1) == 24 && sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ4_K) == 144 && sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210);

// Blocks are read with memcpy: tensor data is only guaranteed 1-byte aligned
// relative to these structs (their fp16 fields want 2).
template <class B>
B load_block(const uint8_t* p) {
  B b;
  std::memcpy(&b, p, sizeof(B));
  return b;
}

uint16_t le16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }

void deq_q4_0(const uint8_t* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += QK) {
    const auto b = load_block<BlockQ4_0>(src + i * sizeof(BlockQ4_0));
    const float d = half_to_float(b.d);
    for (int j = 0; j < QK / 2; ++j) {
      y[j] = d * float((b.qs[j] & 15) - 8);
      y[j + QK / 2] = d * float((b.qs[j] >> 4) - 8);
    }
  }
}

void deq_q4_1(const uint8_t* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += QK) {
    const auto b = load_block<BlockQ4_1>(src + i * sizeof(BlockQ4_1));
    const float d = half_to_float(b.d), m = half_to_float(b.m);
    for (int j = 0; j < QK / 2; ++j) {
      y[j] = d * float(b.qs[j] & 15) + m;
      y[j + QK / 2] = d * float(b.qs[j] >> 4) + m;
    }
  }
}

void deq_q5_0(const uint8_t* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += QK) {
    const auto b = load_block<BlockQ5_0>(src + i * sizeof(BlockQ5_0));
    const float d = half_to_float(b.d);
    uint32_t h;
    std::memcpy(&h, b.qh, 4);
    for (int j = 0; j < QK / 2; ++j) {
      const int lo = (b.qs[j] & 15) | int(((h >> j) & 1u) << 4);
      const int hi = (b.qs[j] >> 4) | int(((h >> (j + 16)) & 1u) << 4);
      y[j] = d * float(lo - 16);
      y[j + QK / 2] = d * float(hi - 16);
    }
  }
}

void deq_q5_1(const uint8_t* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += QK) {
    const auto b = load_block<BlockQ5_1>(src + i * sizeof(BlockQ5_1));
    const float d = half_to_float(b.d), m = half_to_float(b.m);
    uint32_t h;
    std::memcpy(&h, b.qh, 4);
    for (int j = 0; j < QK / 2; ++j) {
      const int lo = (b.qs[j] & 15) | int(((h >> j) & 1u) << 4);
      const int hi = (b.qs[j] >> 4) | int(((h >> (j + 16)) & 1u) << 4);
      y[j] = d * float(lo) + m;
      y[j + QK / 2] = d * float(hi) + m;
    }
  }
}

void deq_q8_0(const uint8_t* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += QK) {
    const auto b = load_block<BlockQ8_0>(src + i * sizeof(BlockQ8_0));
    const float d = half_to_float(b.d);
    for (int j = 0; j < QK; ++j) y[j] = d * float(b.qs[j]);
  }
}

// The 6-bit scale and min of sub-block j (0..7) packed in 12 bytes (Q4_K, Q5_K).
void scale_min_k4(int j, const uint8_t* s, int& sc, int& mn) {
  if (j < 4) {
    sc = s[j] & 63;
    mn = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
    mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Q4_K/Q5_K: scale and min of the sub-blocks 2c and 2c + 1, as d·scale and dmin·min.
template <class Block>
void k4_scales(const Block& b, int c, float& d0, float& n0, float& d1, float& n1) {
  const float d = half_to_float(b.d), dmin = half_to_float(b.dmin);
  int s0, m0, s1, m1;
  scale_min_k4(2 * c, b.scales, s0, m0);
  scale_min_k4(2 * c + 1, b.scales, s1, m1);
  d0 = d * float(s0), n0 = dmin * float(m0), d1 = d * float(s1), n1 = dmin * float(m1);
}

void deq_q4_k(const uint8_t* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += QK_K) {
    const auto b = load_block<BlockQ4_K>(src + i * sizeof(BlockQ4_K));
    for (int c = 0; c < 4; ++c) {
      float d0, n0, d1, n1;
      k4_scales(b, c, d0, n0, d1, n1);
      const uint8_t* q = b.qs + 32 * c;
      for (int l = 0; l < 32; ++l) {
        y[64 * c + l] = d0 * float(q[l] & 15) - n0;
        y[64 * c + 32 + l] = d1 * float(q[l] >> 4) - n1;
      }
    }
  }
}

void deq_q5_k(const uint8_t* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += QK_K) {
    const auto b = load_block<BlockQ5_K>(src + i * sizeof(BlockQ5_K));
    for (int c = 0; c < 4; ++c) {
      float d0, n0, d1, n1;
      k4_scales(b, c, d0, n0, d1, n1);
      const uint8_t* q = b.qs + 32 * c;
      for (int l = 0; l < 32; ++l) {
        const int lo = (q[l] & 15) + (((b.qh[l] >> (2 * c)) & 1) << 4);
        const int hi = (q[l] >> 4) + (((b.qh[l] >> (2 * c + 1)) & 1) << 4);
        y[64 * c + l] = d0 * float(lo) - n0;
        y[64 * c + 32 + l] = d1 * float(hi) - n1;
      }
    }
  }
}

void deq_q6_k(const uint8_t* src, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += QK_K) {
    const auto b = load_block<BlockQ6_K>(src + i * sizeof(BlockQ6_K));
    const float d = half_to_float(b.d);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* L = b.ql + 64 * h;
      const uint8_t* H = b.qh + 32 * h;
      const int8_t* S = b.scales + 8 * h;
      float* o = y + 128 * h;
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((L[l] & 15) | ((H[l] & 3) << 4)) - 32;
        const int q2 = ((L[l + 32] & 15) | (((H[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((L[l] >> 4) | (((H[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((L[l + 32] >> 4) | (((H[l] >> 6) & 3) << 4)) - 32;
        o[l] = d * float(S[is]) * float(q1);
        o[l + 32] = d * float(S[is + 2]) * float(q2);
        o[l + 64] = d * float(S[is + 4]) * float(q3);
        o[l + 96] = d * float(S[is + 6]) * float(q4);
      }
    }
  }
}

const GgmlTypeInfo kF32{"f32", 1, 4}, kF16{"f16", 1, 2}, kBF16{"bf16", 1, 2}, kQ4_0{"q4_0", QK, 18},
    kQ4_1{"q4_1", QK, 20}, kQ5_0{"q5_0", QK, 22}, kQ5_1{"q5_1", QK, 24}, kQ8_0{"q8_0", QK, 34},
    kQ4_K{"q4_k", QK_K, 144}, kQ5_K{"q5_k", QK_K, 176}, kQ6_K{"q6_k", QK_K, 210};

}  // namespace

const GgmlTypeInfo* ggml_type_info(uint32_t type) {
  switch (GgmlType(type)) {
    case GgmlType::F32: return &kF32;
    case GgmlType::F16: return &kF16;
    case GgmlType::BF16: return &kBF16;
    case GgmlType::Q4_0: return &kQ4_0;
    case GgmlType::Q4_1: return &kQ4_1;
    case GgmlType::Q5_0: return &kQ5_0;
    case GgmlType::Q5_1: return &kQ5_1;
    case GgmlType::Q8_0: return &kQ8_0;
    case GgmlType::Q4_K: return &kQ4_K;
    case GgmlType::Q5_K: return &kQ5_K;
    case GgmlType::Q6_K: return &kQ6_K;
  }
  return nullptr;
}

std::string ggml_type_name(uint32_t type) {
  const GgmlTypeInfo* t = ggml_type_info(type);
  return t ? t->name : fmt::format("type {}", type);
}

void dequantize_row(uint32_t type, const void* src_v, float* y, int64_t n) {
  const GgmlTypeInfo* info = ggml_type_info(type);
  TQ_CHECK(info, "dequantize_row: ggml type {} is not supported", type);
  TQ_CHECK(n >= 0 && n % info->block_size == 0, "dequantize_row: {} values is not a multiple of the {} block size {}",
           n, info->name, info->block_size);
  const auto* src = static_cast<const uint8_t*>(src_v);
  const int64_t nb = n / info->block_size;
  switch (GgmlType(type)) {
    case GgmlType::F32: std::memcpy(y, src, size_t(n) * 4); return;
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) y[i] = half_to_float(le16(src + 2 * i));
      return;
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_float(le16(src + 2 * i));
      return;
    case GgmlType::Q4_0: deq_q4_0(src, y, nb); return;
    case GgmlType::Q4_1: deq_q4_1(src, y, nb); return;
    case GgmlType::Q5_0: deq_q5_0(src, y, nb); return;
    case GgmlType::Q5_1: deq_q5_1(src, y, nb); return;
    case GgmlType::Q8_0: deq_q8_0(src, y, nb); return;
    case GgmlType::Q4_K: deq_q4_k(src, y, nb); return;
    case GgmlType::Q5_K: deq_q5_k(src, y, nb); return;
    case GgmlType::Q6_K: deq_q6_k(src, y, nb); return;
  }
  TQ_ASSERT(false);
}

}  // namespace tq
