// GGUF metadata: value types (gguf_type_name), GgufValue's conversions and the
// typed GgufFile accessors (get_string, get_u32, ... and their array forms).
#include "tq/gguf.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "gguf_internal.h"
#include "tq/error.h"
#include "tq/float_formats.h"

namespace tq {

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

using detail::load_le;
using detail::scalar_size;

bool is_integer(GgufType t) { return scalar_size(t) != 0 && t != GgufType::F32 && t != GgufType::F64; }
bool is_signed(GgufType t) {
  return t == GgufType::I8 || t == GgufType::I16 || t == GgufType::I32 || t == GgufType::I64;
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

}  // namespace tq
