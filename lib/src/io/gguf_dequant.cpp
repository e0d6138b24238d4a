// ggml tensor types: the block layouts, the type table (ggml_type_info) and
// dequantization to float32 (dequantize_row).
#include "tq/gguf.h"

#include <algorithm>
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

// ---- integer codes --------------------------------------------------------------
// Each quantized type unpacks a block into codes c (u8) and, per 16 values, a
// scale s and an offset o, so that value = s·float(c − zero) (+ o for the types
// with a min): exactly the float32 arithmetic of ggml's dequantization, which
// dequantize_row replays. (The int8 GEMM reads the same codes.)
struct Codes {
  uint8_t* c;
  float* s;
  float* o;
  void group(int64_t g, float scale, float offset) const { s[g] = scale, o[g] = offset; }
};

void unpack_q4_0(const uint8_t* src, int64_t nb, Codes k) {
  for (int64_t i = 0; i < nb; ++i, k.c += QK) {
    const auto b = load_block<BlockQ4_0>(src + i * sizeof(BlockQ4_0));
    const float d = half_to_float(b.d);
    for (int j = 0; j < QK / 2; ++j) k.c[j] = b.qs[j] & 15, k.c[j + QK / 2] = b.qs[j] >> 4;
    k.group(2 * i, d, 0), k.group(2 * i + 1, d, 0);
  }
}

void unpack_q4_1(const uint8_t* src, int64_t nb, Codes k) {
  for (int64_t i = 0; i < nb; ++i, k.c += QK) {
    const auto b = load_block<BlockQ4_1>(src + i * sizeof(BlockQ4_1));
    const float d = half_to_float(b.d), m = half_to_float(b.m);
    for (int j = 0; j < QK / 2; ++j) k.c[j] = b.qs[j] & 15, k.c[j + QK / 2] = b.qs[j] >> 4;
    k.group(2 * i, d, m), k.group(2 * i + 1, d, m);
  }
}

// Q5_0 / Q5_1: four low bits in qs, the fifth in qh.
template <class Block>
void unpack_q5(const Block& b, uint8_t* c) {
  uint32_t h;
  std::memcpy(&h, b.qh, 4);
  for (int j = 0; j < QK / 2; ++j) {
    c[j] = uint8_t((b.qs[j] & 15) | (((h >> j) & 1u) << 4));
    c[j + QK / 2] = uint8_t((b.qs[j] >> 4) | (((h >> (j + 16)) & 1u) << 4));
  }
}

void unpack_q5_0(const uint8_t* src, int64_t nb, Codes k) {
  for (int64_t i = 0; i < nb; ++i, k.c += QK) {
    const auto b = load_block<BlockQ5_0>(src + i * sizeof(BlockQ5_0));
    const float d = half_to_float(b.d);
    unpack_q5(b, k.c);
    k.group(2 * i, d, 0), k.group(2 * i + 1, d, 0);
  }
}

void unpack_q5_1(const uint8_t* src, int64_t nb, Codes k) {
  for (int64_t i = 0; i < nb; ++i, k.c += QK) {
    const auto b = load_block<BlockQ5_1>(src + i * sizeof(BlockQ5_1));
    const float d = half_to_float(b.d), m = half_to_float(b.m);
    unpack_q5(b, k.c);
    k.group(2 * i, d, m), k.group(2 * i + 1, d, m);
  }
}

void unpack_q8_0(const uint8_t* src, int64_t nb, Codes k) {
  for (int64_t i = 0; i < nb; ++i, k.c += QK) {
    const auto b = load_block<BlockQ8_0>(src + i * sizeof(BlockQ8_0));
    const float d = half_to_float(b.d);
    for (int j = 0; j < QK; ++j) k.c[j] = uint8_t(b.qs[j] + 128);
    k.group(2 * i, d, 0), k.group(2 * i + 1, d, 0);
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

// Q4_K/Q5_K: sub-block j of 32 values has scale d·sc_j and offset −dmin·m_j.
template <class Block>
void k4_groups(const Block& b, int64_t i, Codes k) {
  const float d = half_to_float(b.d), dmin = half_to_float(b.dmin);
  for (int j = 0; j < 8; ++j) {
    int sc, mn;
    scale_min_k4(j, b.scales, sc, mn);
    const float s = d * float(sc), o = -(dmin * float(mn));
    k.group(16 * i + 2 * j, s, o), k.group(16 * i + 2 * j + 1, s, o);
  }
}

void unpack_q4_k(const uint8_t* src, int64_t nb, Codes k) {
  for (int64_t i = 0; i < nb; ++i, k.c += QK_K) {
    const auto b = load_block<BlockQ4_K>(src + i * sizeof(BlockQ4_K));
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l) k.c[64 * c + l] = b.qs[32 * c + l] & 15, k.c[64 * c + 32 + l] = b.qs[32 * c + l] >> 4;
    k4_groups(b, i, k);
  }
}

void unpack_q5_k(const uint8_t* src, int64_t nb, Codes k) {
  for (int64_t i = 0; i < nb; ++i, k.c += QK_K) {
    const auto b = load_block<BlockQ5_K>(src + i * sizeof(BlockQ5_K));
    for (int c = 0; c < 4; ++c) {
      const uint8_t* q = b.qs + 32 * c;
      for (int l = 0; l < 32; ++l) {
        k.c[64 * c + l] = uint8_t((q[l] & 15) + (((b.qh[l] >> (2 * c)) & 1) << 4));
        k.c[64 * c + 32 + l] = uint8_t((q[l] >> 4) + (((b.qh[l] >> (2 * c + 1)) & 1) << 4));
      }
    }
    k4_groups(b, i, k);
  }
}

// Q6_K: value = (d·sc)·float(q − 32), sc a signed scale per 16 values.
void unpack_q6_k(const uint8_t* src, int64_t nb, Codes k) {
  for (int64_t i = 0; i < nb; ++i, k.c += QK_K) {
    const auto b = load_block<BlockQ6_K>(src + i * sizeof(BlockQ6_K));
    const float d = half_to_float(b.d);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* L = b.ql + 64 * h;
      const uint8_t* H = b.qh + 32 * h;
      uint8_t* c = k.c + 128 * h;
      for (int l = 0; l < 32; ++l) {
        c[l] = uint8_t((L[l] & 15) | ((H[l] & 3) << 4));
        c[l + 32] = uint8_t((L[l + 32] & 15) | (((H[l] >> 2) & 3) << 4));
        c[l + 64] = uint8_t((L[l] >> 4) | (((H[l] >> 4) & 3) << 4));
        c[l + 96] = uint8_t((L[l + 32] >> 4) | (((H[l] >> 6) & 3) << 4));
      }
    }
    for (int g = 0; g < 16; ++g) k.group(16 * i + g, d * float(b.scales[g]), 0);
  }
}

// The type table (ggml's type_traits): name and sizes, and for the quantized
// types their unpacker, zero point and whether they have an offset.
struct TypeRow {
  GgmlTypeInfo info;
  void (*unpack)(const uint8_t*, int64_t, Codes) = nullptr;  // nullptr: f32, f16, bf16
  int zero = 0;
  bool has_offset = false;
};

const TypeRow* type_row(uint32_t type) {
  static const TypeRow f32{{"f32", 1, 4}}, f16{{"f16", 1, 2}}, bf16{{"bf16", 1, 2}},
      q4_0{{"q4_0", QK, 18}, unpack_q4_0, 8, false}, q4_1{{"q4_1", QK, 20}, unpack_q4_1, 0, true},
      q5_0{{"q5_0", QK, 22}, unpack_q5_0, 16, false}, q5_1{{"q5_1", QK, 24}, unpack_q5_1, 0, true},
      q8_0{{"q8_0", QK, 34}, unpack_q8_0, 128, false}, q4_k{{"q4_k", QK_K, 144}, unpack_q4_k, 0, true},
      q5_k{{"q5_k", QK_K, 176}, unpack_q5_k, 0, true}, q6_k{{"q6_k", QK_K, 210}, unpack_q6_k, 32, false};
  switch (GgmlType(type)) {
    case GgmlType::F32: return &f32;
    case GgmlType::F16: return &f16;
    case GgmlType::BF16: return &bf16;
    case GgmlType::Q4_0: return &q4_0;
    case GgmlType::Q4_1: return &q4_1;
    case GgmlType::Q5_0: return &q5_0;
    case GgmlType::Q5_1: return &q5_1;
    case GgmlType::Q8_0: return &q8_0;
    case GgmlType::Q4_K: return &q4_k;
    case GgmlType::Q5_K: return &q5_k;
    case GgmlType::Q6_K: return &q6_k;
  }
  return nullptr;
}

}  // namespace

const GgmlTypeInfo* ggml_type_info(uint32_t type) {
  const TypeRow* r = type_row(type);
  return r ? &r->info : nullptr;
}

std::string ggml_type_name(uint32_t type) {
  const GgmlTypeInfo* t = ggml_type_info(type);
  return t ? t->name : fmt::format("type {}", type);
}

namespace {

// The row of a supported type whose blocks n values fill exactly.
const TypeRow& checked_row(const char* what, uint32_t type, int64_t n) {
  const TypeRow* r = type_row(type);
  TQ_CHECK(r, "{}: ggml type {} is not supported", what, type);
  TQ_CHECK(n >= 0 && n % r->info.block_size == 0, "{}: {} values is not a multiple of the {} block size {}", what,
           n, r->info.name, r->info.block_size);
  return *r;
}

}  // namespace

bool ggml_type_has_codes(uint32_t type) {
  const TypeRow* r = type_row(type);
  return r && r->unpack;
}

CodeMap unpack_codes(uint32_t type, const void* src, int64_t n, uint8_t* code, float* scale, float* offset) {
  const TypeRow& u = checked_row("unpack_codes", type, n);
  TQ_CHECK(u.unpack, "unpack_codes: ggml type {} has no integer codes", u.info.name);
  u.unpack(static_cast<const uint8_t*>(src), n / u.info.block_size, Codes{code, scale, offset});
  return {u.zero, u.has_offset};
}

void dequantize_row(uint32_t type, const void* src_v, float* y, int64_t n) {
  const TypeRow& u = checked_row("dequantize_row", type, n);
  const auto* src = static_cast<const uint8_t*>(src_v);
  switch (GgmlType(type)) {
    case GgmlType::F32: std::memcpy(y, src, size_t(n) * 4); return;
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) y[i] = half_to_float(le16(src + 2 * i));
      return;
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_float(le16(src + 2 * i));
      return;
    default: break;
  }
  // Quantized: a super-block at a time through its codes.
  TQ_ASSERT(u.unpack);
  const int64_t bs = u.info.block_size, chunk = 256 / bs;  // blocks per 256 values
  uint8_t c[256];
  float s[16], o[16];
  for (int64_t b = 0; b < n / bs; b += chunk, y += 256) {
    const int64_t nb = std::min(chunk, n / bs - b), nv = nb * bs;
    u.unpack(src + b * u.info.type_size, nb, Codes{c, s, o});
    if (u.has_offset)
      for (int64_t i = 0; i < nv; ++i) y[i] = s[i / 16] * float(int(c[i]) - u.zero) + o[i / 16];
    else  // no "+ 0": it would turn −0 into +0
      for (int64_t i = 0; i < nv; ++i) y[i] = s[i / 16] * float(int(c[i]) - u.zero);
  }
}

}  // namespace tq
