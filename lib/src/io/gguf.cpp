#include "tq/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

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

// ---- metadata values ----------------------------------------------------------
const char* gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::U8: return "u8";
    case GgufType::I8: return "i8";
    case GgufType::U16: return "u16";
    case GgufType::I16: return "i16";
    case GgufType::U32: return "u32";
    case GgufType::I32: return "i32";
    case GgufType::F32: return "f32";
    case GgufType::BOOL: return "bool";
    case GgufType::STRING: return "string";
    case GgufType::ARRAY: return "array";
    case GgufType::U64: return "u64";
    case GgufType::I64: return "i64";
    case GgufType::F64: return "f64";
  }
  return "unknown";
}

namespace {

// Bytes of one scalar of type t; 0 for string/array/unknown.
size_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::BOOL: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
    case GgufType::U64: case GgufType::I64: case GgufType::F64: return 8;
    default: return 0;
  }
}
bool is_integer(GgufType t) { return scalar_size(t) != 0 && t != GgufType::F32 && t != GgufType::F64; }
bool is_signed(GgufType t) {
  return t == GgufType::I8 || t == GgufType::I16 || t == GgufType::I32 || t == GgufType::I64;
}

uint64_t load_le(const uint8_t* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= uint64_t(p[i]) << (8 * i);
  return v;
}

// The element at i as raw bits, sign-extended for signed integer types.
int64_t elem_signed(const GgufValue& v, GgufType t, uint64_t i) {
  const size_t sz = scalar_size(t);
  const uint64_t u = load_le(v.raw.data() + i * sz, sz);
  switch (t) {
    case GgufType::I8: return int8_t(u);
    case GgufType::I16: return int16_t(u);
    case GgufType::I32: return int32_t(u);
    case GgufType::I64: return int64_t(u);
    default: return int64_t(u);
  }
}

GgufType value_elem_type(const GgufValue& v) { return v.is_array() ? v.elem_type : v.type; }

void check_index(const GgufValue& v, uint64_t i) {
  TQ_CHECK(i < v.count, "GGUF value: index {} out of range (count {})", i, v.count);
  const GgufType t = value_elem_type(v);
  TQ_CHECK(scalar_size(t) != 0, "GGUF value of type {} is not numeric", gguf_type_name(t));
}

}  // namespace

double GgufValue::as_double(uint64_t i) const {
  check_index(*this, i);
  const GgufType t = value_elem_type(*this);
  const size_t sz = scalar_size(t);
  if (t == GgufType::F32) {
    const uint32_t u = uint32_t(load_le(raw.data() + i * sz, 4));
    return double(bits_float(u));
  }
  if (t == GgufType::F64) {
    const uint64_t u = load_le(raw.data() + i * sz, 8);
    double d;
    std::memcpy(&d, &u, 8);
    return d;
  }
  if (t == GgufType::U64) return double(load_le(raw.data() + i * sz, 8));
  return double(elem_signed(*this, t, i));
}

int64_t GgufValue::as_int(uint64_t i) const {
  check_index(*this, i);
  const GgufType t = value_elem_type(*this);
  TQ_CHECK(is_integer(t), "GGUF value of type {} is not an integer", gguf_type_name(t));
  if (t == GgufType::U64) {
    const uint64_t u = load_le(raw.data() + i * 8, 8);
    TQ_CHECK(u <= uint64_t(std::numeric_limits<int64_t>::max()), "GGUF u64 value {} does not fit in i64", u);
    return int64_t(u);
  }
  return elem_signed(*this, t, i);
}

uint64_t GgufValue::as_uint(uint64_t i) const {
  check_index(*this, i);
  const GgufType t = value_elem_type(*this);
  TQ_CHECK(is_integer(t), "GGUF value of type {} is not an integer", gguf_type_name(t));
  if (t == GgufType::U64) return load_le(raw.data() + i * 8, 8);
  const int64_t s = elem_signed(*this, t, i);
  TQ_CHECK(s >= 0, "GGUF value {} is negative", s);
  return uint64_t(s);
}

std::string GgufValue::to_string(size_t max_elems) const {
  auto one = [&](GgufType t, uint64_t i) -> std::string {
    if (t == GgufType::STRING) return fmt::format("\"{}\"", is_array() ? strings[i] : str);
    if (t == GgufType::BOOL) return raw[i] ? "true" : "false";
    if (t == GgufType::F32 || t == GgufType::F64) return fmt::format("{}", as_double(i));
    if (t == GgufType::U64) return fmt::format("{}", as_uint(i));
    return fmt::format("{}", elem_signed(*this, t, i));
  };
  if (!is_array()) return one(type, 0);
  std::string s = fmt::format("[{} × {}: ", count, gguf_type_name(elem_type));
  for (uint64_t i = 0; i < count && i < max_elems; ++i) s += (i ? ", " : "") + one(elem_type, i);
  if (count > max_elems) s += ", …";
  return s + "]";
}

// ---- parsing --------------------------------------------------------------------
namespace {

// A bounds-checked little-endian reader over the file image.
class Cursor {
 public:
  Cursor(const uint8_t* p, uint64_t n, const std::string& file) : p_(p), n_(n), file_(file) {}
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return n_ - pos_; }

  [[noreturn]] void fail(uint64_t at, const std::string& field, const std::string& what) const {
    TQ_THROW("{}: byte {}: {}: {}", file_, at, field, what);
  }
  void need(uint64_t bytes, const std::string& field) const {
    if (bytes > left())
      fail(pos_, field, fmt::format("needs {} bytes but only {} remain (file truncated?)", bytes, left()));
  }
  uint64_t uint(size_t bytes, const std::string& field) {
    need(bytes, field);
    const uint64_t v = load_le(p_ + pos_, bytes);
    pos_ += bytes;
    return v;
  }
  uint32_t u32(const std::string& field) { return uint32_t(uint(4, field)); }
  uint64_t u64(const std::string& field) { return uint(8, field); }
  std::string str(const std::string& field) {
    const uint64_t at = pos_;
    const uint64_t len = u64(field + " length");
    if (len > left()) fail(at, field, fmt::format("string length {} exceeds the {} bytes left", len, left()));
    std::string s(reinterpret_cast<const char*>(p_ + pos_), size_t(len));
    pos_ += len;
    return s;
  }
  void bytes(std::vector<uint8_t>& out, uint64_t n, const std::string& field) {
    need(n, field);
    out.assign(p_ + pos_, p_ + pos_ + n);
    pos_ += n;
  }

 private:
  const uint8_t* p_;
  uint64_t n_, pos_ = 0;
  const std::string& file_;
};

bool valid_type(uint32_t t) { return t <= uint32_t(GgufType::F64); }

GgufValue read_value(Cursor& c, GgufType type, const std::string& field) {
  GgufValue v;
  v.type = type;
  if (type == GgufType::STRING) {
    v.str = c.str(field);
    return v;
  }
  if (type != GgufType::ARRAY) {
    c.bytes(v.raw, scalar_size(type), field);
    if (type == GgufType::BOOL && v.raw[0] > 1)
      c.fail(c.pos() - 1, field, fmt::format("bool value {} is not 0 or 1", v.raw[0]));
    return v;
  }
  const uint64_t at = c.pos();
  const uint32_t et = c.u32(field + " array type");
  if (!valid_type(et)) c.fail(at, field, fmt::format("array element type {} unknown", et));
  if (GgufType(et) == GgufType::ARRAY) c.fail(at, field, "nested arrays are not supported");
  v.elem_type = GgufType(et);
  const uint64_t count_at = c.pos();
  v.count = c.u64(field + " array count");
  // Every element takes at least min_size bytes: cap the count before allocating.
  const uint64_t min_size = v.elem_type == GgufType::STRING ? 8 : scalar_size(v.elem_type);
  if (v.count > c.left() / min_size)
    c.fail(count_at, field, fmt::format("array of {} {} elements cannot fit in the {} bytes left", v.count,
                                        gguf_type_name(v.elem_type), c.left()));
  if (v.elem_type == GgufType::STRING) {
    v.strings.reserve(size_t(v.count));
    for (uint64_t i = 0; i < v.count; ++i) v.strings.push_back(c.str(fmt::format("{}[{}]", field, i)));
  } else {
    c.bytes(v.raw, v.count * min_size, field);
    if (v.elem_type == GgufType::BOOL)
      for (uint64_t i = 0; i < v.count; ++i)
        if (v.raw[i] > 1) c.fail(c.pos() - v.count + i, field, fmt::format("bool element {} is {}", i, v.raw[i]));
  }
  return v;
}

struct Mapping {
  void* addr = nullptr;
  size_t len = 0;
  ~Mapping() {
    if (addr) ::munmap(addr, len);
  }
};

}  // namespace

GgufFile GgufFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TQ_CHECK(fd >= 0, "{}: cannot open: {}", path, std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const int err = errno;
    ::close(fd);
    TQ_THROW("{}: not a regular file{}", path, err ? std::string(": ") + std::strerror(err) : "");
  }
  GgufFile f;
  f.path_ = path;
  f.size_ = uint64_t(st.st_size);
  if (f.size_ > 0) {
    void* a = ::mmap(nullptr, size_t(f.size_), PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    ::close(fd);
    TQ_CHECK(a != MAP_FAILED, "{}: cannot map {} bytes: {}", path, f.size_, std::strerror(err));
    auto m = std::make_shared<Mapping>();
    m->addr = a;
    m->len = size_t(f.size_);
    f.base_ = static_cast<const uint8_t*>(a);
    f.storage_ = std::shared_ptr<const void>(m, a);
  } else {
    ::close(fd);
    static const uint8_t empty = 0;
    f.base_ = &empty;
  }
  f.parse();
  return f;
}

GgufFile GgufFile::from_memory(std::vector<uint8_t> bytes, const std::string& name) {
  GgufFile f;
  f.path_ = name;
  auto buf = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  static const uint8_t empty = 0;
  f.base_ = buf->empty() ? &empty : buf->data();
  f.size_ = buf->size();
  f.storage_ = buf;
  f.parse();
  return f;
}

void GgufFile::parse() {
  Cursor c(base_, size_, path_);
  {
    const uint64_t magic = c.uint(4, "magic");
    if (magic != 0x46554747u)  // "GGUF"
      c.fail(0, "magic", fmt::format("0x{:08x} is not \"GGUF\" (not a GGUF file)", magic));
  }
  version_ = c.u32("version");
  if (version_ != 2 && version_ != 3)
    c.fail(4, "version", fmt::format("version {} is not supported (expected 2 or 3)", version_));
  const uint64_t n_tensors = c.u64("tensor count");
  const uint64_t n_kv = c.u64("metadata count");
  // Smallest possible entries: KV = key length 8 + 1 key byte + type 4 + 1 value byte;
  // tensor info = name length 8 + n_dims 4 + one ne 8 + type 4 + offset 8.
  if (n_kv > c.left() / 14) c.fail(16, "metadata count", fmt::format("{} entries cannot fit in the file", n_kv));
  if (n_tensors > c.left() / 32) c.fail(8, "tensor count", fmt::format("{} tensors cannot fit in the file", n_tensors));

  kv_.reserve(size_t(n_kv));
  for (uint64_t i = 0; i < n_kv; ++i) {
    const uint64_t at = c.pos();
    std::string key = c.str(fmt::format("metadata key {}", i));
    if (key.empty()) c.fail(at, fmt::format("metadata key {}", i), "empty key");
    if (kv_index_.count(key)) c.fail(at, fmt::format("metadata key '{}'", key), "duplicate key");
    const uint64_t type_at = c.pos();
    const uint32_t t = c.u32(fmt::format("metadata '{}' type", key));
    if (!valid_type(t)) c.fail(type_at, fmt::format("metadata '{}'", key), fmt::format("value type {} unknown", t));
    GgufValue v = read_value(c, GgufType(t), fmt::format("metadata '{}'", key));
    kv_index_[key] = kv_.size();
    kv_.emplace_back(std::move(key), std::move(v));
  }

  if (const GgufValue* a = find("general.alignment")) {
    if (a->type != GgufType::U32)
      TQ_THROW("{}: metadata 'general.alignment': type {} is not u32", path_, gguf_type_name(a->type));
    const uint32_t al = uint32_t(a->as_uint());
    if (al == 0 || (al & (al - 1)) != 0)
      TQ_THROW("{}: metadata 'general.alignment': {} is not a power of two", path_, al);
    alignment_ = al;
  }

  tensors_.reserve(size_t(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    const uint64_t at = c.pos();
    GgufTensor t;
    t.name = c.str(fmt::format("tensor {} name", i));
    const std::string field = fmt::format("tensor '{}'", t.name);
    if (t.name.empty()) c.fail(at, fmt::format("tensor {}", i), "empty name");
    if (t.name.size() >= 64) c.fail(at, field, fmt::format("name is {} bytes (at most 63)", t.name.size()));
    if (tensor_index_.count(t.name)) c.fail(at, field, "duplicate tensor name");
    const uint64_t dims_at = c.pos();
    const uint32_t n_dims = c.u32(field + " n_dims");
    if (n_dims < 1 || n_dims > 4) c.fail(dims_at, field, fmt::format("n_dims {} is not in 1..4", n_dims));
    t.n_dims = int(n_dims);
    uint64_t n_elem = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t ne_at = c.pos();
      const uint64_t ne = c.u64(fmt::format("{} ne[{}]", field, d));
      if (ne == 0 || ne > uint64_t(std::numeric_limits<int64_t>::max()))
        c.fail(ne_at, field, fmt::format("ne[{}] = {} is not a positive size", d, ne));
      if (n_elem > uint64_t(std::numeric_limits<int64_t>::max()) / ne)
        c.fail(ne_at, field, "element count overflows");
      n_elem *= ne;
      t.ne[d] = int64_t(ne);
    }
    const uint64_t type_at = c.pos();
    t.type = c.u32(field + " type");
    const GgmlTypeInfo* info = ggml_type_info(t.type);
    if (!info) c.fail(type_at, field, fmt::format("type {} unknown", t.type));
    if (t.ne[0] % info->block_size != 0)
      c.fail(dims_at, field, fmt::format("ne[0] = {} is not a multiple of the {} block size {}", t.ne[0], info->name,
                                         info->block_size));
    const uint64_t blocks = n_elem / uint64_t(info->block_size);
    if (blocks > std::numeric_limits<uint64_t>::max() / uint64_t(info->type_size))
      c.fail(dims_at, field, "byte size overflows");
    t.n_bytes = blocks * uint64_t(info->type_size);
    const uint64_t off_at = c.pos();
    t.offset = c.u64(field + " offset");
    if (t.offset % alignment_ != 0)
      c.fail(off_at, field, fmt::format("offset {} is not a multiple of the alignment {}", t.offset, alignment_));
    tensor_index_[t.name] = tensors_.size();
    tensors_.push_back(std::move(t));
    (void)at;
  }

  // Data section: aligned position after the tensor infos.
  const uint64_t end_infos = c.pos();
  data_offset_ = end_infos + (alignment_ - end_infos % alignment_) % alignment_;
  for (GgufTensor& t : tensors_) {
    // Relative offset → absolute, overflow-safe, inside the file.
    if (t.offset > size_ || data_offset_ > size_ - t.offset || t.n_bytes > size_ - t.offset - data_offset_)
      TQ_THROW("{}: byte {}: tensor '{}': data [{}, +{}) lies outside the file ({} bytes; data section at {})", path_,
               data_offset_, t.name, t.offset, t.n_bytes, size_, data_offset_);
    t.offset += data_offset_;
  }
  std::vector<const GgufTensor*> by_off;
  by_off.reserve(tensors_.size());
  for (const GgufTensor& t : tensors_) by_off.push_back(&t);
  std::sort(by_off.begin(), by_off.end(), [](const GgufTensor* a, const GgufTensor* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_off.size(); ++i)
    if (by_off[i - 1]->offset + by_off[i - 1]->n_bytes > by_off[i]->offset)
      TQ_THROW("{}: byte {}: tensor '{}': data overlaps tensor '{}'", path_, by_off[i]->offset, by_off[i]->name,
               by_off[i - 1]->name);
}

// ---- accessors ------------------------------------------------------------------
const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

namespace {
[[noreturn]] void wrong_type(const std::string& file, const std::string& key, const GgufValue& v, const char* want) {
  const std::string got = v.is_array() ? fmt::format("array of {}", gguf_type_name(v.elem_type)) : gguf_type_name(v.type);
  TQ_THROW("{}: metadata '{}': expected {}, found {}", file, key, want, got);
}
}  // namespace

#define TQ_GGUF_REQUIRE(key)                                                               \
  const GgufValue* v = find(key);                                                          \
  TQ_CHECK(v, "{}: metadata '{}' is missing", path_, key)

std::string GgufFile::get_string(const std::string& key) const {
  TQ_GGUF_REQUIRE(key);
  if (v->type != GgufType::STRING) wrong_type(path_, key, *v, "string");
  return v->str;
}

uint32_t GgufFile::get_u32(const std::string& key) const {
  TQ_GGUF_REQUIRE(key);
  if (v->is_array() || !is_integer(v->type) || v->type == GgufType::BOOL) wrong_type(path_, key, *v, "an integer");
  if (is_signed(v->type)) {
    const int64_t s = v->as_int();
    TQ_CHECK(s >= 0 && s <= int64_t(UINT32_MAX), "{}: metadata '{}': {} does not fit in u32", path_, key, s);
    return uint32_t(s);
  }
  const uint64_t u = v->as_uint();
  TQ_CHECK(u <= UINT32_MAX, "{}: metadata '{}': {} does not fit in u32", path_, key, u);
  return uint32_t(u);
}

int64_t GgufFile::get_i64(const std::string& key) const {
  TQ_GGUF_REQUIRE(key);
  if (v->is_array() || !is_integer(v->type) || v->type == GgufType::BOOL) wrong_type(path_, key, *v, "an integer");
  if (v->type == GgufType::U64) {
    const uint64_t u = v->as_uint();
    TQ_CHECK(u <= uint64_t(INT64_MAX), "{}: metadata '{}': {} does not fit in i64", path_, key, u);
  }
  return v->as_int();
}

float GgufFile::get_f32(const std::string& key) const {
  TQ_GGUF_REQUIRE(key);
  if (v->is_array() || scalar_size(v->type) == 0 || v->type == GgufType::BOOL) wrong_type(path_, key, *v, "a number");
  return float(v->as_double());
}

bool GgufFile::get_bool(const std::string& key) const {
  TQ_GGUF_REQUIRE(key);
  if (v->type != GgufType::BOOL) wrong_type(path_, key, *v, "bool");
  return v->raw[0] != 0;
}

std::string GgufFile::get_string(const std::string& key, const std::string& def) const {
  return has(key) ? get_string(key) : def;
}
uint32_t GgufFile::get_u32(const std::string& key, uint32_t def) const { return has(key) ? get_u32(key) : def; }
float GgufFile::get_f32(const std::string& key, float def) const { return has(key) ? get_f32(key) : def; }
bool GgufFile::get_bool(const std::string& key, bool def) const { return has(key) ? get_bool(key) : def; }

std::vector<std::string> GgufFile::get_string_array(const std::string& key) const {
  TQ_GGUF_REQUIRE(key);
  if (!v->is_array() || v->elem_type != GgufType::STRING) wrong_type(path_, key, *v, "array of string");
  return v->strings;
}

std::vector<float> GgufFile::get_f32_array(const std::string& key) const {
  TQ_GGUF_REQUIRE(key);
  if (!v->is_array() || scalar_size(v->elem_type) == 0 || v->elem_type == GgufType::BOOL)
    wrong_type(path_, key, *v, "array of numbers");
  std::vector<float> out(size_t(v->count));
  for (uint64_t i = 0; i < v->count; ++i) out[i] = float(v->as_double(i));
  return out;
}

std::vector<int32_t> GgufFile::get_i32_array(const std::string& key) const {
  TQ_GGUF_REQUIRE(key);
  if (!v->is_array() || !is_integer(v->elem_type) || v->elem_type == GgufType::BOOL)
    wrong_type(path_, key, *v, "array of integers");
  std::vector<int32_t> out(size_t(v->count));
  for (uint64_t i = 0; i < v->count; ++i) {
    const int64_t x = v->elem_type == GgufType::U64 ? int64_t(std::min<uint64_t>(v->as_uint(i), uint64_t(INT64_MAX)))
                                                    : v->as_int(i);
    TQ_CHECK(x >= INT32_MIN && x <= INT32_MAX, "{}: metadata '{}'[{}]: {} does not fit in i32", path_, key, i, x);
    out[i] = int32_t(x);
  }
  return out;
}

#undef TQ_GGUF_REQUIRE

// ---- tensors ----------------------------------------------------------------------
int64_t GgufTensor::row_bytes() const {
  const GgmlTypeInfo* info = ggml_type_info(type);
  TQ_ASSERT(info);
  return ne[0] / info->block_size * info->type_size;
}

std::string GgufTensor::shape_string() const {
  std::string s = "[";
  for (int d = 0; d < n_dims; ++d) s += fmt::format("{}{}", d ? ", " : "", ne[d]);
  return s + "]";
}

const GgufTensor* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensor& GgufFile::tensor(const std::string& name) const {
  const GgufTensor* t = find_tensor(name);
  TQ_CHECK(t, "{}: tensor '{}' is missing", path_, name);
  return *t;
}

void GgufFile::dequantize_rows(const GgufTensor& t, int64_t row0, int64_t n_rows, float* out) const {
  TQ_CHECK(row0 >= 0 && n_rows >= 0 && row0 <= t.n_rows() && n_rows <= t.n_rows() - row0,
           "{}: tensor '{}': rows [{}, +{}) out of range ({} rows)", path_, t.name, row0, n_rows, t.n_rows());
  const int64_t rb = t.row_bytes();
  const uint8_t* src = base_ + t.offset + row0 * rb;
  for (int64_t r = 0; r < n_rows; ++r) dequantize_row(t.type, src + r * rb, out + r * t.ne[0], t.ne[0]);
}

std::vector<float> GgufFile::dequantize(const GgufTensor& t) const {
  std::vector<float> out(size_t(t.n_elements()));
  dequantize_rows(t, 0, t.n_rows(), out.data());
  return out;
}

std::map<std::string, GgufFile::TypeCount> GgufFile::type_histogram() const {
  std::map<std::string, TypeCount> h;
  for (const GgufTensor& t : tensors_) {
    TypeCount& c = h[ggml_type_name(t.type)];
    c.tensors += 1;
    c.elements += t.n_elements();
    c.bytes += int64_t(t.n_bytes);
  }
  return h;
}

std::string GgufFile::type_histogram_text() const {
  std::string s;
  for (const auto& [name, c] : type_histogram())
    s += fmt::format("{}{}: {} tensor{}, {:.2f}M values, {:.1f} MB", s.empty() ? "" : "; ", name, c.tensors,
                     c.tensors == 1 ? "" : "s", double(c.elements) / 1e6, double(c.bytes) / 1e6);
  return s.empty() ? "no tensors" : s;
}

}  // namespace tq
