// GGUF reader: files built in memory by an independent little writer, every
// block type against a naive float64 dequantization written from the formulas
// in docs/models.md §2, and corrupted files (every truncation, bad fields,
// huge counts, random byte flips) that must throw tq::Error, never crash.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <string>
#include <vector>

#include "tq/error.h"
#include "tq/gguf.h"
#include "tq/rng.h"

using namespace tq;

namespace {

// ---- a tiny independent GGUF writer -------------------------------------------
struct Writer {
  std::vector<uint8_t> kv;  // encoded metadata entries
  uint64_t n_kv = 0;
  struct T { std::string name; std::vector<uint64_t> ne; uint32_t type; std::vector<uint8_t> data; };
  std::vector<T> tensors;
  mutable std::vector<size_t> offset_pos;  // byte position of each tensor's offset field (after build)

  static void put(std::vector<uint8_t>& b, uint64_t v, int n) {
    for (int i = 0; i < n; ++i) b.push_back(uint8_t(v >> (8 * i)));
  }
  static void put_str(std::vector<uint8_t>& b, const std::string& s) {
    put(b, s.size(), 8);
    b.insert(b.end(), s.begin(), s.end());
  }
  void key(const std::string& k, uint32_t type) {
    put_str(kv, k);
    put(kv, type, 4);
    ++n_kv;
  }
  void u8(const std::string& k, uint8_t v) { key(k, 0); put(kv, v, 1); }
  void i8(const std::string& k, int8_t v) { key(k, 1); put(kv, uint8_t(v), 1); }
  void u16(const std::string& k, uint16_t v) { key(k, 2); put(kv, v, 2); }
  void i16(const std::string& k, int16_t v) { key(k, 3); put(kv, uint16_t(v), 2); }
  void u32(const std::string& k, uint32_t v) { key(k, 4); put(kv, v, 4); }
  void i32(const std::string& k, int32_t v) { key(k, 5); put(kv, uint32_t(v), 4); }
  void f32(const std::string& k, float v) { uint32_t u; std::memcpy(&u, &v, 4); key(k, 6); put(kv, u, 4); }
  void boolean(const std::string& k, bool v) { key(k, 7); put(kv, v, 1); }
  void str(const std::string& k, const std::string& v) { key(k, 8); put_str(kv, v); }
  void u64(const std::string& k, uint64_t v) { key(k, 10); put(kv, v, 8); }
  void i64(const std::string& k, int64_t v) { key(k, 11); put(kv, uint64_t(v), 8); }
  void f64(const std::string& k, double v) { uint64_t u; std::memcpy(&u, &v, 8); key(k, 12); put(kv, u, 8); }
  void arr_str(const std::string& k, const std::vector<std::string>& v) {
    key(k, 9); put(kv, 8, 4); put(kv, v.size(), 8);
    for (auto& s : v) put_str(kv, s);
  }
  void arr_i32(const std::string& k, const std::vector<int32_t>& v) {
    key(k, 9); put(kv, 5, 4); put(kv, v.size(), 8);
    for (int32_t x : v) put(kv, uint32_t(x), 4);
  }
  void arr_f32(const std::string& k, const std::vector<float>& v) {
    key(k, 9); put(kv, 6, 4); put(kv, v.size(), 8);
    for (float x : v) { uint32_t u; std::memcpy(&u, &x, 4); put(kv, u, 4); }
  }
  void tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, std::vector<uint8_t> data) {
    tensors.push_back({name, std::move(ne), type, std::move(data)});
  }
  // Lays tensors out in order, each at an aligned offset; the file ends at the
  // last tensor's last byte (no trailing padding), so every truncation is detectable.
  std::vector<uint8_t> build(uint32_t version = 3, uint32_t alignment = 32) const {
    std::vector<uint8_t> b;
    put(b, 0x46554747u, 4);
    put(b, version, 4);
    put(b, tensors.size(), 8);
    put(b, n_kv, 8);
    b.insert(b.end(), kv.begin(), kv.end());
    uint64_t off = 0;
    std::vector<uint64_t> offs;
    offset_pos.clear();
    for (auto& t : tensors) {
      off = (off + alignment - 1) / alignment * alignment;
      offs.push_back(off);
      put_str(b, t.name);
      put(b, t.ne.size(), 4);
      for (uint64_t n : t.ne) put(b, n, 8);
      put(b, t.type, 4);
      offset_pos.push_back(b.size());
      put(b, off, 8);
      off += t.data.size();
    }
    while (b.size() % alignment) b.push_back(0);
    const size_t base = b.size();
    for (size_t i = 0; i < tensors.size(); ++i) {
      b.resize(base + offs[i], 0);
      b.insert(b.end(), tensors[i].data.begin(), tensors[i].data.end());
    }
    return b;
  }
};

// ---- naive float64 reference dequantization (docs/models.md §2) --------------
double half64(const uint8_t* p) {
  const unsigned h = unsigned(p[0]) | (unsigned(p[1]) << 8);
  const int e = int((h >> 10) & 31), m = int(h & 1023);
  double v;
  if (e == 0) v = std::ldexp(double(m), -24);
  else if (e == 31) v = m ? NAN : INFINITY;
  else v = std::ldexp(double(1024 + m), e - 25);
  return (h & 0x8000) ? -v : v;
}

struct TypeSpec { uint32_t id; int block, bytes; const char* name; };
const TypeSpec kTypes[] = {{0, 1, 4, "f32"},     {1, 1, 2, "f16"},       {30, 1, 2, "bf16"},
                           {2, 32, 18, "q4_0"},  {3, 32, 20, "q4_1"},    {6, 32, 22, "q5_0"},
                           {7, 32, 24, "q5_1"},  {8, 32, 34, "q8_0"},    {12, 256, 144, "q4_k"},
                           {13, 256, 176, "q5_k"}, {14, 256, 210, "q6_k"}};

std::vector<double> naive_block(uint32_t type, const uint8_t* b) {
  std::vector<double> y;
  auto u32le = [](const uint8_t* p) { return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24; };
  switch (type) {
    case 0: { float f; std::memcpy(&f, b, 4); y = {double(f)}; break; }
    case 1: y = {half64(b)}; break;
    case 30: { const uint32_t u = (uint32_t(b[0]) | uint32_t(b[1]) << 8) << 16; float f; std::memcpy(&f, &u, 4); y = {double(f)}; break; }
    case 2: {  // Q4_0: d, qs[16]
      y.resize(32);
      const double d = half64(b);
      for (int j = 0; j < 16; ++j) {
        y[j] = d * ((b[2 + j] & 15) - 8);
        y[j + 16] = d * ((b[2 + j] >> 4) - 8);
      }
      break;
    }
    case 3: {  // Q4_1: d, m, qs[16]
      y.resize(32);
      const double d = half64(b), m = half64(b + 2);
      for (int j = 0; j < 16; ++j) {
        y[j] = d * (b[4 + j] & 15) + m;
        y[j + 16] = d * (b[4 + j] >> 4) + m;
      }
      break;
    }
    case 6: {  // Q5_0: d, qh[4], qs[16]
      y.resize(32);
      const double d = half64(b);
      const uint32_t h = u32le(b + 2);
      for (int j = 0; j < 16; ++j) {
        y[j] = d * (int((b[6 + j] & 15) | (((h >> j) & 1) << 4)) - 16);
        y[j + 16] = d * (int((b[6 + j] >> 4) | (((h >> (j + 16)) & 1) << 4)) - 16);
      }
      break;
    }
    case 7: {  // Q5_1: d, m, qh[4], qs[16]
      y.resize(32);
      const double d = half64(b), m = half64(b + 2);
      const uint32_t h = u32le(b + 4);
      for (int j = 0; j < 16; ++j) {
        y[j] = d * int((b[8 + j] & 15) | (((h >> j) & 1) << 4)) + m;
        y[j + 16] = d * int((b[8 + j] >> 4) | (((h >> (j + 16)) & 1) << 4)) + m;
      }
      break;
    }
    case 8: {  // Q8_0: d, qs[32]
      y.resize(32);
      const double d = half64(b);
      for (int j = 0; j < 32; ++j) y[j] = d * int8_t(b[2 + j]);
      break;
    }
    case 12: case 13: {  // Q4_K / Q5_K: d, dmin, scales[12], (qh[32]), qs[128]
      y.resize(256);
      const double d = half64(b), dmin = half64(b + 2);
      const uint8_t* S = b + 4;
      const uint8_t* qh = b + 16;
      const uint8_t* qs = type == 12 ? b + 16 : b + 48;
      int s[8], m[8];
      for (int j = 0; j < 8; ++j) {
        if (j < 4) { s[j] = S[j] & 63; m[j] = S[j + 4] & 63; }
        else { s[j] = (S[j + 4] & 15) | ((S[j - 4] >> 6) << 4); m[j] = (S[j + 4] >> 4) | ((S[j] >> 6) << 4); }
      }
      for (int c = 0; c < 4; ++c)
        for (int l = 0; l < 32; ++l) {
          const int q = qs[32 * c + l];
          int lo = q & 15, hi = q >> 4;
          if (type == 13) {
            lo += ((qh[l] >> (2 * c)) & 1) * 16;
            hi += ((qh[l] >> (2 * c + 1)) & 1) * 16;
          }
          y[64 * c + l] = d * s[2 * c] * lo - dmin * m[2 * c];
          y[64 * c + 32 + l] = d * s[2 * c + 1] * hi - dmin * m[2 * c + 1];
        }
      break;
    }
    case 14: {  // Q6_K: ql[128], qh[64], scales[16], d
      y.resize(256);
      const double d = half64(b + 208);
      for (int h = 0; h < 2; ++h) {
        const uint8_t* L = b + 64 * h;
        const uint8_t* H = b + 128 + 32 * h;
        const int8_t* S = reinterpret_cast<const int8_t*>(b + 192 + 8 * h);
        const int o = 128 * h;
        for (int l = 0; l < 32; ++l) {
          const int i = l / 16;
          y[o + l] = d * S[i] * (((L[l] & 15) | ((H[l] & 3) << 4)) - 32);
          y[o + l + 32] = d * S[i + 2] * (((L[l + 32] & 15) | (((H[l] >> 2) & 3) << 4)) - 32);
          y[o + l + 64] = d * S[i + 4] * (((L[l] >> 4) | (((H[l] >> 4) & 3) << 4)) - 32);
          y[o + l + 96] = d * S[i + 6] * (((L[l + 32] >> 4) | (((H[l] >> 6) & 3) << 4)) - 32);
        }
      }
      break;
    }
    default: FAIL("no naive reference for type " << type);
  }
  return y;
}

// Random block bytes; fp16 scale fields get random finite codes (normal and
// subnormal) so both sides stay finite. F32/BF16 values likewise finite.
std::vector<uint8_t> random_blocks(const TypeSpec& t, int n_blocks, Rng& rng) {
  std::vector<uint8_t> b(size_t(t.bytes) * n_blocks);
  for (auto& x : b) x = uint8_t(rng.next_u64());
  auto finite_half = [&](uint8_t* p) {
    uint16_t h;
    do h = uint16_t(rng.next_u64()); while (((h >> 10) & 31) == 31);
    p[0] = uint8_t(h);
    p[1] = uint8_t(h >> 8);
  };
  for (int i = 0; i < n_blocks; ++i) {
    uint8_t* p = b.data() + size_t(i) * t.bytes;
    switch (t.id) {
      case 0: { const float f = float(rng.gaussian()); std::memcpy(p, &f, 4); break; }
      case 1: finite_half(p); break;
      case 30: while (((p[1] & 0x7f) == 0x7f) && (p[0] & 0x80)) p[0] = uint8_t(rng.next_u64()); break;
      case 2: case 6: case 8: finite_half(p); break;
      case 3: case 7: case 12: case 13: finite_half(p); finite_half(p + 2); break;
      case 14: finite_half(p + 208); break;
    }
  }
  return b;
}

bool throws_tq(const std::vector<uint8_t>& bytes, std::string* msg = nullptr) {
  try {
    GgufFile::from_memory(bytes, "t.gguf");
  } catch (const Error& e) {
    if (msg) *msg = e.what();
    return true;
  }
  return false;
}

// A small valid file with every metadata kind and three tensors.
Writer sample_writer() {
  Writer w;
  w.str("general.architecture", "llama");
  w.u32("llama.block_count", 2);
  w.f32("llama.rope.freq_base", 10000.0f);
  w.boolean("tokenizer.ggml.add_bos_token", true);
  w.arr_str("tokenizer.ggml.tokens", {"a", "b", "\xe2\x96\x81hello"});
  w.arr_f32("tokenizer.ggml.scores", {0.0f, -1.5f, -2.0f});
  w.arr_i32("tokenizer.ggml.token_type", {1, 1, 3});
  std::vector<uint8_t> f32(4 * 8 * 2);
  for (size_t i = 0; i < f32.size(); ++i) f32[i] = uint8_t(i * 7);
  w.tensor("a.weight", {8, 2}, 0, f32);
  Rng rng(5);
  w.tensor("b.weight", {32, 3}, 2, random_blocks(kTypes[3], 3, rng));
  w.tensor("c.weight", {256}, 14, random_blocks(kTypes[10], 1, rng));
  return w;
}

}  // namespace

TEST_CASE("gguf: metadata of every type round-trips through the accessors", "[gguf]") {
  Writer w;
  w.u8("k.u8", 200);
  w.i8("k.i8", -100);
  w.u16("k.u16", 60000);
  w.i16("k.i16", -30000);
  w.u32("k.u32", 4000000000u);
  w.i32("k.i32", -2000000000);
  w.f32("k.f32", 1.25f);
  w.boolean("k.bool", true);
  w.str("k.str", "h\xc3\xa9llo");
  w.u64("k.u64", 1ull << 40);
  w.i64("k.i64", -(1ll << 40));
  w.f64("k.f64", 0.1);
  w.arr_str("k.astr", {"x", "", "yz"});
  w.arr_i32("k.ai32", {1, -2, 3});
  w.arr_f32("k.af32", {0.5f, -0.25f});
  w.u32("general.alignment", 64);
  const auto bytes = w.build(3, 64);
  const GgufFile f = GgufFile::from_memory(bytes, "m.gguf");
  CHECK(f.version() == 3);
  CHECK(f.alignment() == 64);
  CHECK(f.metadata().size() == 16);
  CHECK(f.get_u32("k.u8") == 200);
  CHECK(f.get_i64("k.i8") == -100);
  CHECK(f.get_u32("k.u16") == 60000);
  CHECK(f.get_i64("k.i16") == -30000);
  CHECK(f.get_u32("k.u32") == 4000000000u);
  CHECK(f.get_i64("k.i32") == -2000000000);
  CHECK(f.get_f32("k.f32") == 1.25f);
  CHECK(f.get_bool("k.bool"));
  CHECK(f.get_string("k.str") == "h\xc3\xa9llo");
  CHECK(f.get_i64("k.u64") == (1ll << 40));
  CHECK(f.get_i64("k.i64") == -(1ll << 40));
  CHECK(f.get_f32("k.f64") == 0.1f);
  CHECK(f.get_string_array("k.astr") == std::vector<std::string>{"x", "", "yz"});
  CHECK(f.get_i32_array("k.ai32") == std::vector<int32_t>{1, -2, 3});
  CHECK(f.get_f32_array("k.af32") == std::vector<float>{0.5f, -0.25f});
  CHECK(f.get_u32("missing", 7u) == 7u);
  CHECK(f.get_string("missing", "d") == "d");

  // Clear errors naming the file and key.
  CHECK_THROWS_WITH(f.get_string("missing"), Catch::Contains("m.gguf") && Catch::Contains("'missing' is missing"));
  CHECK_THROWS_WITH(f.get_string("k.u32"), Catch::Contains("'k.u32'") && Catch::Contains("expected string"));
  CHECK_THROWS_WITH(f.get_u32("k.i32"), Catch::Contains("does not fit in u32"));
  CHECK_THROWS_WITH(f.get_u32("k.str"), Catch::Contains("expected an integer"));
  CHECK_THROWS_WITH(f.get_f32_array("k.astr"), Catch::Contains("array of numbers"));
  CHECK_THROWS_AS(f.get_bool("k.u32"), Error);
  CHECK_THROWS_AS(f.get_u32("k.u32", 1u) == 0 || f.get_bool("k.u32", false), Error);

  // Version 2 is accepted too.
  Writer w2;
  w2.str("general.architecture", "x");
  CHECK(GgufFile::from_memory(w2.build(2), "v2.gguf").version() == 2);
}

TEST_CASE("gguf: tensors round-trip with offsets, shapes and row access", "[gguf]") {
  const auto bytes = sample_writer().build();
  const GgufFile f = GgufFile::from_memory(bytes, "s.gguf");
  REQUIRE(f.tensors().size() == 3);
  const GgufTensor& a = f.tensor("a.weight");
  CHECK(a.n_dims == 2);
  CHECK(a.ne[0] == 8);
  CHECK(a.ne[1] == 2);
  CHECK(a.n_rows() == 2);
  CHECK(a.shape_string() == "[8, 2]");
  CHECK(a.offset % 32 == 0);
  std::vector<float> row(8);
  f.dequantize_rows(a, 1, 1, row.data());
  for (int i = 0; i < 8; ++i) {
    float want;
    uint8_t raw[4];
    for (int k = 0; k < 4; ++k) raw[k] = uint8_t((32 + 4 * i + k) * 7);
    std::memcpy(&want, raw, 4);
    CHECK(std::memcmp(&row[i], &want, 4) == 0);
  }
  CHECK(f.tensor("b.weight").n_bytes == 3 * 18);
  CHECK(f.find_tensor("nope") == nullptr);
  CHECK_THROWS_WITH(f.tensor("nope"), Catch::Contains("tensor 'nope' is missing"));
  CHECK_THROWS_AS(f.dequantize_rows(a, 1, 2, row.data()), Error);
  const auto h = f.type_histogram();
  CHECK(h.at("f32").tensors == 1);
  CHECK(h.at("q4_0").elements == 96);
  CHECK(h.at("q6_k").bytes == 210);
  CHECK_THAT(f.type_histogram_text(), Catch::Contains("q6_k: 1 tensor"));
}

TEST_CASE("gguf: every block type matches a naive float64 dequantization", "[gguf]") {
  Rng rng(20240601);
  for (const TypeSpec& t : kTypes) {
    INFO("type " << t.name);
    REQUIRE(ggml_type_info(t.id) != nullptr);
    CHECK(ggml_type_info(t.id)->block_size == t.block);
    CHECK(ggml_type_info(t.id)->type_size == t.bytes);
    CHECK(ggml_type_name(t.id) == t.name);
    const int n_blocks = t.block == 1 ? 4096 : 64;
    const auto bytes = random_blocks(t, n_blocks, rng);
    std::vector<float> got(size_t(n_blocks) * t.block);
    dequantize_row(t.id, bytes.data(), got.data(), int64_t(got.size()));
    double max_err = 0, max_abs = 0;
    for (int i = 0; i < n_blocks; ++i) {
      const auto want = naive_block(t.id, bytes.data() + size_t(i) * t.bytes);
      REQUIRE(want.size() == size_t(t.block));
      for (int j = 0; j < t.block; ++j) {
        const double g = got[size_t(i) * t.block + j];
        REQUIRE(std::isfinite(g));
        max_err = std::max(max_err, std::fabs(g - want[j]) / std::max(1.0, std::fabs(want[j])));
        max_abs = std::max(max_abs, std::fabs(want[j]));
      }
    }
    // The library computes in float32: a few roundings of values that are exact
    // products of small integers and fp16 scales.
    CHECK(max_err <= 1e-6);
    CHECK(max_abs > 0);

    // And through a GGUF tensor, row by row.
    Writer w;
    w.tensor("t", {uint64_t(t.block) * 4, uint64_t(n_blocks / 4)}, t.id, bytes);
    const GgufFile f = GgufFile::from_memory(w.build(), "b.gguf");
    CHECK(f.dequantize(f.tensor("t")) == got);
  }
  CHECK(ggml_type_info(99) == nullptr);
  float y[32];
  const uint8_t zero[34] = {};
  CHECK_THROWS_AS(dequantize_row(99, zero, y, 32), Error);
  CHECK_THROWS_AS(dequantize_row(8, zero, y, 31), Error);
}

TEST_CASE("gguf: the integer codes of every quantized type reproduce its values", "[gguf]") {
  Rng rng(20261204);
  for (const TypeSpec& t : kTypes) {
    INFO("type " << t.name);
    if (t.block == 1) {  // float types have no codes
      CHECK_FALSE(ggml_type_has_codes(t.id));
      uint8_t c[16];
      float s[1], o[1];
      const uint8_t zero[4] = {};
      CHECK_THROWS_WITH(unpack_codes(t.id, zero, 1, c, s, o), Catch::Contains("has no integer codes"));
      continue;
    }
    REQUIRE(ggml_type_has_codes(t.id));
    const int n_blocks = 64, n = n_blocks * t.block;
    const auto bytes = random_blocks(t, n_blocks, rng);
    std::vector<uint8_t> code(static_cast<size_t>(n), 0xff);
    std::vector<float> scale(static_cast<size_t>(n / 16)), offset(static_cast<size_t>(n / 16), 1.0f), deq(static_cast<size_t>(n));
    const CodeMap map = unpack_codes(t.id, bytes.data(), n, code.data(), scale.data(), offset.data());
    dequantize_row(t.id, bytes.data(), deq.data(), n);
    // The code range: 2·zero values around a zero point, else the type's bits.
    const std::string name = t.name;
    const int range = map.zero ? 2 * map.zero : name.rfind("q4", 0) == 0 ? 16 : 32;
    CHECK(map.has_offset == (name == "q4_1" || name == "q5_1" || name == "q4_k" || name == "q5_k"));
    int max_code = 0;
    for (int b = 0; b < n_blocks; ++b) {
      const auto want = naive_block(t.id, bytes.data() + size_t(b) * t.bytes);
      for (int j = 0; j < t.block; ++j) {
        const int i = b * t.block + j, g = i / 16;
        REQUIRE(int(code[size_t(i)]) < range);
        max_code = std::max(max_code, int(code[size_t(i)]));
        if (!map.has_offset) REQUIRE(offset[size_t(g)] == 0.0f);
        // the float64 oracle, and dequantize_row's float32 bits
        const double v = double(scale[size_t(g)]) * (int(code[size_t(i)]) - map.zero) + double(offset[size_t(g)]);
        REQUIRE(std::fabs(v - want[size_t(j)]) <= 1e-6 * std::max(1.0, std::fabs(want[size_t(j)])));
        float f = scale[size_t(g)] * float(int(code[size_t(i)]) - map.zero);
        if (map.has_offset) f += offset[size_t(g)];
        REQUIRE(std::memcmp(&f, &deq[size_t(i)], 4) == 0);
      }
    }
    CHECK(max_code >= range / 2);  // random blocks reach the upper half
  }
  uint8_t c[32];
  float s[2], o[2];
  const uint8_t zero[34] = {};
  CHECK_THROWS_WITH(unpack_codes(8, zero, 31, c, s, o), Catch::Contains("not a multiple"));
}

TEST_CASE("gguf: fp16 scale subnormals are decoded exactly", "[gguf]") {
  // Q8_0 block with d = smallest positive subnormal (2^-24) and qs = 1..32.
  uint8_t b[34] = {1, 0};
  for (int j = 0; j < 32; ++j) b[2 + j] = uint8_t(j + 1);
  float y[32];
  dequantize_row(8, b, y, 32);
  for (int j = 0; j < 32; ++j) CHECK(double(y[j]) == std::ldexp(double(j + 1), -24));
}

TEST_CASE("gguf: every truncation of a valid file throws tq::Error", "[gguf]") {
  const auto bytes = sample_writer().build();
  REQUIRE_NOTHROW(GgufFile::from_memory(bytes, "s.gguf"));
  for (size_t n = 0; n < bytes.size(); ++n) {
    INFO("truncated to " << n << " of " << bytes.size() << " bytes");
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + ptrdiff_t(n));
    REQUIRE(throws_tq(cut));
  }
}

TEST_CASE("gguf: corrupt fields throw tq::Error naming the file, byte and field", "[gguf]") {
  std::string msg;
  auto header = [](uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    std::vector<uint8_t> b;
    Writer::put(b, 0x46554747u, 4);
    Writer::put(b, version, 4);
    Writer::put(b, n_tensors, 8);
    Writer::put(b, n_kv, 8);
    return b;
  };

  SECTION("wrong magic and versions") {
    auto b = sample_writer().build();
    b[0] = 'X';
    REQUIRE(throws_tq(b, &msg));
    CHECK_THAT(msg, Catch::Contains("t.gguf: byte 0: magic"));
    CHECK(throws_tq(sample_writer().build(1)));
    CHECK(throws_tq(sample_writer().build(4)));
    CHECK(throws_tq({}));
  }
  SECTION("huge counts are refused before allocating") {
    for (uint64_t n : {uint64_t(1) << 62, ~uint64_t(0), uint64_t(1000)}) {
      CHECK(throws_tq(header(3, 0, n)));
      CHECK(throws_tq(header(3, n, 0)));
    }
    Writer w;
    w.key("k", 9);
    Writer::put(w.kv, 4, 4);
    Writer::put(w.kv, uint64_t(1) << 61, 8);  // array of 2^61 u32
    REQUIRE(throws_tq(w.build(), &msg));
    CHECK_THAT(msg, Catch::Contains("metadata 'k'") && Catch::Contains("cannot fit"));
    Writer s;
    s.key("k", 9);
    Writer::put(s.kv, 8, 4);
    Writer::put(s.kv, uint64_t(1) << 40, 8);  // array of 2^40 strings
    CHECK(throws_tq(s.build()));
    Writer l;
    l.key("k", 8);
    Writer::put(l.kv, ~uint64_t(0), 8);  // string of 2^64-1 bytes
    CHECK(throws_tq(l.build()));
  }
  SECTION("bad metadata") {
    Writer w;
    w.key("k", 13);  // unknown value type
    Writer::put(w.kv, 0, 4);
    REQUIRE(throws_tq(w.build(), &msg));
    CHECK_THAT(msg, Catch::Contains("value type 13 unknown"));
    Writer d;
    d.u32("k", 1);
    d.u32("k", 2);
    REQUIRE(throws_tq(d.build(), &msg));
    CHECK_THAT(msg, Catch::Contains("duplicate key"));
    Writer e;
    e.u32("", 1);
    CHECK(throws_tq(e.build()));
    Writer n;
    n.key("k", 9);
    Writer::put(n.kv, 9, 4);  // nested array
    Writer::put(n.kv, 1, 8);
    REQUIRE(throws_tq(n.build(), &msg));
    CHECK_THAT(msg, Catch::Contains("nested"));
    Writer bo;
    bo.key("k", 7);
    Writer::put(bo.kv, 2, 1);
    CHECK(throws_tq(bo.build()));
    for (uint32_t al : {0u, 3u, 48u}) {
      Writer a;
      a.u32("general.alignment", al);
      CHECK(throws_tq(a.build()));
    }
    Writer at;
    at.u64("general.alignment", 32);
    CHECK(throws_tq(at.build()));
  }
  SECTION("bad tensor infos") {
    Rng rng(3);
    const auto q4 = random_blocks(kTypes[4], 2, rng);  // two q4_1 blocks
    auto one = [&](const std::string& name, std::vector<uint64_t> ne, uint32_t type) {
      Writer w;
      w.tensor(name, std::move(ne), type, q4);
      return w.build();
    };
    REQUIRE(throws_tq(one("blk.3.attn_q.weight", {64}, 99), &msg));
    CHECK_THAT(msg, Catch::Matches("t\\.gguf: byte \\d+: tensor 'blk\\.3\\.attn_q\\.weight': type 99 unknown"));
    CHECK(throws_tq(one(std::string(64, 'x'), {64}, 3)));
    CHECK_NOTHROW(GgufFile::from_memory(one(std::string(63, 'x'), {64}, 3), "ok"));
    CHECK(throws_tq(one("", {64}, 3)));
    CHECK(throws_tq(one("t", {}, 3)));
    CHECK(throws_tq(one("t", {32, 1, 1, 1, 2}, 3)));
    CHECK(throws_tq(one("t", {48}, 3)));      // not a multiple of 32
    CHECK(throws_tq(one("t", {64, 0}, 3)));   // empty dimension
    CHECK(throws_tq(one("t", {uint64_t(1) << 62, uint64_t(1) << 62}, 3)));  // element count overflow
    CHECK(throws_tq(one("t", {uint64_t(1) << 40, uint64_t(1) << 20}, 3)));  // lies outside the file
    REQUIRE(throws_tq(one("t", {96}, 3), &msg));  // 3 blocks, 2 present
    CHECK_THAT(msg, Catch::Contains("outside the file"));

    Writer dup;
    dup.tensor("t", {32}, 3, std::vector<uint8_t>(20));
    dup.tensor("t", {32}, 3, std::vector<uint8_t>(20));
    REQUIRE(throws_tq(dup.build(), &msg));
    CHECK_THAT(msg, Catch::Contains("duplicate tensor"));
  }
  SECTION("offsets: misaligned, out of range, overlapping") {
    Writer w;
    w.tensor("a", {32}, 3, std::vector<uint8_t>(20, 1));
    w.tensor("b", {32}, 3, std::vector<uint8_t>(20, 2));
    const auto b = w.build();
    REQUIRE_NOTHROW(GgufFile::from_memory(b, "ok"));
    const size_t pos = w.offset_pos.at(1);  // where b's relative offset (32) is stored
    REQUIRE(pos > 0);
    auto set = [&](uint64_t v) {
      auto c = b;
      for (int k = 0; k < 8; ++k) c[pos + k] = uint8_t(v >> (8 * k));
      return c;
    };
    REQUIRE(throws_tq(set(0), &msg));
    CHECK_THAT(msg, Catch::Contains("overlaps"));
    REQUIRE(throws_tq(set(33), &msg));
    CHECK_THAT(msg, Catch::Contains("alignment"));
    CHECK(throws_tq(set(64)));
    CHECK(throws_tq(set(~uint64_t(31))));
  }
}

TEST_CASE("gguf: random byte corruption throws tq::Error or parses, never crashes", "[gguf]") {
  const auto bytes = sample_writer().build();
  Rng rng(77);
  int parsed = 0, refused = 0;
  for (int it = 0; it < 3000; ++it) {
    auto b = bytes;
    const int flips = 1 + int(rng.below(4));
    for (int k = 0; k < flips; ++k) b[rng.below(b.size())] = uint8_t(rng.next_u64());
    try {
      const GgufFile f = GgufFile::from_memory(b, "r.gguf");
      for (const auto& t : f.tensors()) (void)f.dequantize(t);
      for (const auto& kv : f.metadata()) (void)kv.second.to_string();
      ++parsed;
    } catch (const Error&) {
      ++refused;
    }
  }
  CHECK(parsed > 0);
  CHECK(refused > 0);
}

TEST_CASE("gguf: a file on disk is memory-mapped; missing files are clear errors", "[gguf]") {
  const auto bytes = sample_writer().build();
  const std::string path = "tq_test_gguf_tmp.gguf";
  {
    std::ofstream o(path, std::ios::binary);
    o.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  }
  const GgufFile f = GgufFile::open(path);
  CHECK(f.path() == path);
  CHECK(f.get_string("general.architecture") == "llama");
  CHECK(f.get_string_array("tokenizer.ggml.tokens")[2] == "\xe2\x96\x81hello");
  std::remove(path.c_str());
  CHECK_THROWS_WITH(GgufFile::open("/nonexistent/x.gguf"), Catch::Contains("/nonexistent/x.gguf: cannot open"));
  CHECK_THROWS_WITH(GgufFile::open("/"), Catch::Contains("not a regular file"));
}

TEST_CASE("gguf: corpus regression files parse or throw tq::Error", "[gguf]") {
  const std::string dir = std::string(TQ_TEST_DATA) + "/gguf_corpus";
  DIR* d = opendir(dir.c_str());
  REQUIRE(d != nullptr);
  int n = 0, ok = 0;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() < 5 || name.substr(name.size() - 5) != ".gguf") continue;
    std::ifstream in(dir + "/" + name, std::ios::binary);
    std::vector<uint8_t> b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    INFO(name);
    ++n;
    try {
      const GgufFile f = GgufFile::from_memory(b, name);
      for (const auto& t : f.tensors()) (void)f.dequantize(t);
      ++ok;
      CHECK(name.rfind("ok_", 0) == 0);  // files named ok_* must parse
    } catch (const Error&) {
      CHECK(name.rfind("bad_", 0) == 0);  // files named bad_* must be refused
    }
  }
  closedir(d);
  CHECK(n >= 5);
  CHECK(ok >= 1);
}
