// Every registered format and codec, one loop: sizes against the documented
// formulas, re-encode stability, NMSE bounds, bits monotonicity, score vs
// decode, edge cases and refusals.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <map>

#include "tq/error.h"
#include "tq/format.h"
#include "tq/formats/kivi.h"
#include "tq/formats/mse.h"
#include "tq/formats/turbo.h"
#include "tq/formats/uniform.h"
#include "tq/rng.h"

using namespace tq;

namespace {

std::vector<float> gaussian_rows(int n, int d, uint64_t seed, double scale = 1.0) {
  Rng r(seed);
  std::vector<float> x(size_t(n) * size_t(d));
  for (auto& v : x) v = float(r.gaussian() * scale);
  return x;
}

double nmse(const std::vector<float>& x, const std::vector<float>& y) {
  double e = 0, s = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    e += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
    s += double(x[i]) * x[i];
  }
  return e / s;
}

// Independent size formulas, written from the layouts in the headers.
size_t expected_bytes(const std::string& codec, bool key, int d) {
  auto packed = [](size_t bits) { return (bits + 7) / 8; };
  if (codec == "f16") return 2 * size_t(d);
  if (codec == "f32") return 4 * size_t(d);
  if (codec == "fp8" || codec == "fp8e4b15") return size_t(d);
  if (codec == "q8_0") return size_t(d) / 32 * 34;
  if (codec == "q4_0") return size_t(d) / 32 * 18;
  if (codec == "int8") return size_t(d) + 2;
  if (codec == "int4") return size_t(d) / 2 + 2;
  const size_t blocks = (size_t(d) + 127) / 128;
  if (codec == "turbo2") return blocks * 34;
  if (codec == "turbo3") return blocks * 50;
  if (codec == "turbo4") return blocks * 66;
  if (codec == "turbo4-qjl") return blocks * 68;
  if (codec == "kivi2" || codec == "kivi4") {
    const size_t b = codec == "kivi2" ? 2 : 4;
    if (key) return (4 * size_t(d) + 32 * size_t(d) * b / 8) / 32;
    return size_t(d) / 32 * (4 + 32 * b / 8);
  }
  if (codec[0] == 'u') return packed(size_t(d) * size_t(codec[1] - '0')) + 4;
  if (codec.rfind("mse", 0) == 0) return packed(size_t(d) * size_t(codec[3] - '0')) + 2;
  if (codec.rfind("prod", 0) == 0) {
    const size_t b = size_t(codec[4] - '0');
    return packed(size_t(d) * (b - 1)) + 2 + packed(size_t(d)) + 2;
  }
  FAIL("no formula for " << codec);
  return 0;
}

std::string side(const std::string& spec, const char* key) {
  const std::string k = std::string(key) + "=";
  size_t p = spec.find(k);
  if (p == std::string::npos) return "f16";
  if (p > 0 && spec[p - 1] != ',') p = spec.find("," + k) + 1;
  const size_t e = spec.find(',', p);
  return spec.substr(p + k.size(), e == std::string::npos ? std::string::npos : e - p - k.size());
}

// Every codec spec the tests loop over: all registered presets' sides plus the
// research codecs.
const std::vector<std::string> kCodecs = {"f16",  "f32",   "fp8",     "fp8e4b15", "u2",     "u3",     "u4",
                                          "u8",   "q8_0",  "q4_0",    "int8",     "int4",   "kivi2",  "kivi4",
                                          "mse1", "mse2",  "mse3",    "mse4",     "mse8",   "mse3+nc", "mse4+nc",
                                          "mse3+fold", "prod1", "prod2", "prod3", "prod4", "turbo2", "turbo3",
                                          "turbo4", "turbo4-qjl"};

}  // namespace

TEST_CASE("formats: registered slot sizes (vLLM table) and documented formulas", "[formats]") {
  const std::map<std::string, std::vector<size_t>> vllm = {{"turboquant_k8v4", {100, 196, 388}},
                                                           {"turboquant_4bit_nc", {70, 134, 262}},
                                                           {"turboquant_k3v4_nc", {62, 118, 230}},
                                                           {"turboquant_3bit_nc", {54, 102, 198}}};
  const int dims[] = {64, 128, 256};
  for (int di = 0; di < 3; ++di) {
    const int d = dims[di];
    for (const auto& e : registered_formats()) {
      INFO(e.name << " d=" << d);
      const KvFormat f = make_format(e.name, d);
      const std::string spec = e.spec;
      REQUIRE(f.key_bytes() == expected_bytes(side(spec, "k"), true, d));
      REQUIRE(f.value_bytes() == expected_bytes(side(spec, "v"), false, d));
      const size_t sum = f.key_bytes() + f.value_bytes();
      REQUIRE(f.slot_bytes() == (f.vllm_slot ? sum + (sum & 1) : sum));
      REQUIRE(f.bits_per_value() == Approx(8.0 * f.slot_bytes() / (2.0 * d)));
      auto it = vllm.find(e.name);
      if (it != vllm.end()) REQUIRE(f.slot_bytes() == it->second[size_t(di)]);
    }
  }
  for (const auto& c : kCodecs)
    for (int d : {64, 128, 256}) {
      const KvFormat f = make_format("k=" + c + ",v=" + c, d);
      INFO(c << " d=" << d);
      REQUIRE(f.key_bytes() == expected_bytes(c, true, d));
      REQUIRE(f.value_bytes() == expected_bytes(c, false, d));
      REQUIRE(f.key->encoded_bytes(64) == 64 * f.key_bytes());  // 64 rows: whole KIVI groups
    }
}

TEST_CASE("formats: encode→decode→encode gives identical bytes", "[formats]") {
  for (const auto& c : kCodecs)
    for (int d : {64, 128, 256}) {
      const KvFormat f = make_format("k=" + c + ",v=" + c, d);
      for (const CodecPtr& codec : {f.key, f.value}) {
        INFO(c << " d=" << d);
        auto x = gaussian_rows(64, d, 11, 0.7);
        const auto r1 = codec->encode(x);
        const auto y = codec->decode(r1, 64);
        const auto r2 = codec->encode(y);
        if (codec->reencode_stable()) {
          REQUIRE(r1 == r2);
        } else {
          // Norm-shrinking decoders: the second encoding must still decode close to the first.
          const auto y2 = codec->decode(r2, 64);
          REQUIRE(nmse(y, y2) < codec->gaussian_nmse_bound());
        }
      }
    }
}

TEST_CASE("formats: NMSE on Gaussian rows is under each codec's documented bound", "[formats]") {
  for (const auto& c : kCodecs)
    for (int d : {64, 128, 256}) {
      const KvFormat f = make_format("k=" + c + ",v=" + c, d);
      for (const CodecPtr& codec : {f.key, f.value}) {
        auto x = gaussian_rows(1024, d, 12);
        const double e = nmse(x, codec->decode(codec->encode(x), 1024));
        INFO(c << " d=" << d << " nmse " << e << " bound " << codec->gaussian_nmse_bound());
        REQUIRE(e <= codec->gaussian_nmse_bound());
        if (c != "f32") REQUIRE(e > 0);
      }
    }
}

TEST_CASE("formats: fewer bits never give less error within a family", "[formats]") {
  const std::vector<std::vector<std::string>> families = {
      {"mse1", "mse2", "mse3", "mse4", "mse5", "mse6", "mse8"},
      {"mse2+nc", "mse3+nc", "mse4+nc"},
      {"prod1", "prod2", "prod3", "prod4", "prod5"},
      {"u2", "u3", "u4", "u8"},
      {"int4", "int8"},
      {"q4_0", "q8_0"},
      {"turbo2", "turbo3", "turbo4"},
      {"kivi2", "kivi4"},
      {"fp8", "f16", "f32"}};
  for (int d : {64, 128}) {
    auto x = gaussian_rows(512, d, 13);
    for (const auto& fam : families) {
      double prev = INFINITY;
      for (const auto& c : fam) {
        const KvFormat f = make_format("k=" + c, d);
        const double e = nmse(x, f.key->decode(f.key->encode(x), 512));
        INFO(c << " d=" << d << " nmse " << e << " previous " << prev);
        REQUIRE(e < prev);
        prev = e;
      }
    }
    // vLLM presets: total K+V error ordered by bits.
    double prev = INFINITY;
    for (const char* p : {"turboquant_3bit_nc", "turboquant_k3v4_nc", "turboquant_4bit_nc"}) {
      const KvFormat f = make_format(p, d);
      const double e = nmse(x, f.key->decode(f.key->encode(x), 512)) + nmse(x, f.value->decode(f.value->encode(x), 512));
      REQUIRE(e < prev);
      prev = e;
    }
  }
}

TEST_CASE("formats: score(q, record) equals q·decode(record) to 1e-5", "[formats]") {
  for (const auto& c : kCodecs)
    for (int d : {64, 128, 256}) {
      const KvFormat f = make_format("k=" + c + ",v=" + c, d);
      for (const CodecPtr& codec : {f.key, f.value}) {
        const int n = 64;
        auto x = gaussian_rows(n, d, 14, 3.0);
        auto q = gaussian_rows(1, d, 15);
        const auto rec = codec->encode(x);
        const auto y = codec->decode(rec, n);
        std::vector<float> prepared(codec->prepared_size()), s(static_cast<size_t>(n));
        codec->prepare_query(q.data(), prepared.data());
        codec->score(prepared.data(), rec.data(), n, s.data());
        for (int i = 0; i < n; ++i) {
          double dot = 0, yn = 0, qn = 0;
          for (int j = 0; j < d; ++j) {
            dot += double(q[size_t(j)]) * y[size_t(i) * d + j];
            yn += double(y[size_t(i) * d + j]) * y[size_t(i) * d + j];
            qn += double(q[size_t(j)]) * q[size_t(j)];
          }
          INFO(c << " d=" << d << " row " << i);
          REQUIRE(std::fabs(s[size_t(i)] - dot) <= 1e-5 * std::sqrt(qn * yn) + 1e-30);
        }
      }
    }
}

TEST_CASE("formats: zero rows, tiny and huge norms, bad values", "[formats]") {
  for (const auto& c : kCodecs) {
    const int d = 128;
    const KvFormat f = make_format("k=" + c + ",v=" + c, d);
    for (const CodecPtr& codec : {f.key, f.value}) {
      INFO(c);
      std::vector<float> zero(size_t(64) * d, 0.f);
      for (float v : codec->decode(codec->encode(zero), 64)) REQUIRE(v == 0.f);
      // Norms from 1e-6 to 1e4 (per-element std 1e-6/√d … 1e4/√d): relative error as at unit scale,
      // except formats with an absolute floor (fp8 and fp16 subnormals, vLLM's 1e-8 scale floor).
      const bool absolute_floor = c == "f16" || c.rfind("fp8", 0) == 0 || c[0] == 'u' || c.rfind("kivi", 0) == 0 ||
                                  c == "q8_0" || c == "q4_0" || c.rfind("int", 0) == 0;
      for (double norm : {1e-6, 1e-3, 1.0, 1e2, 1e4}) {
        if (c == "fp8e4b15" && norm > 1.0) continue;  // clamps at ±1.75 by design
        if (c == "fp8" && norm > 1e3) continue;       // 1e4/√128·4σ > 448: saturates by design
        auto x = gaussian_rows(64, d, 16, norm / std::sqrt(double(d)));
        const double e = nmse(x, codec->decode(codec->encode(x), 64));
        INFO("norm " << norm << " nmse " << e);
        // Stored fp16 norms/scales below 2^-14 are subnormal: absolute spacing 2^-24.
        const double fp16_floor = std::pow(0x1p-24 / (0.7 * norm), 2);
        if (!absolute_floor || norm >= 1.0) REQUIRE(e <= 1.5 * codec->gaussian_nmse_bound() + fp16_floor);
        REQUIRE(std::isfinite(e));
      }
      auto x = gaussian_rows(4, d, 17);
      x[size_t(2 * d + 5)] = NAN;
      REQUIRE_THROWS_WITH(codec->encode(x), Catch::Contains("row 2 column 5") && Catch::Contains("not finite"));
      x[size_t(2 * d + 5)] = INFINITY;
      REQUIRE_THROWS_WITH(codec->encode(x), Catch::Contains("not finite"));
      x[size_t(2 * d + 5)] = 1e6f;
      REQUIRE_THROWS_WITH(codec->encode(x), Catch::Contains("fp16 range"));
    }
  }
}

// Every pattern of the codec table builds the codec it names (suffixes, the key / value split of KIVI).
TEST_CASE("formats: the codec table's patterns build their codecs", "[formats]") {
  const KvFormat nc = make_format("k=mse3+nc,v=u2", 64), fold = make_format("k=mse3+fold,v=mse2", 64);
  REQUIRE(dynamic_cast<const MseCodec&>(*nc.key).norm_mode() == NormMode::nc);
  REQUIRE(dynamic_cast<const MseCodec&>(*nc.key).bits() == 3);
  REQUIRE(dynamic_cast<const MseCodec&>(*fold.key).norm_mode() == NormMode::fold);
  REQUIRE(dynamic_cast<const MseCodec&>(*fold.value).norm_mode() == NormMode::raw);
  REQUIRE(dynamic_cast<const UniformCodec&>(*nc.value).bits() == 2);
  REQUIRE(nc.key_bytes() == 64 * 3 / 8 + 2);    // indices + fp16 norm
  REQUIRE(nc.value_bytes() == 64 * 2 / 8 + 4);  // codes + fp16 scale + fp16 zero
  const KvFormat kivi = make_format("k=kivi2,v=kivi2", 128);
  REQUIRE(dynamic_cast<const KiviKeyCodec*>(kivi.key.get()) != nullptr);
  REQUIRE(dynamic_cast<const KiviValueCodec*>(kivi.value.get()) != nullptr);
  for (const char* c : {"f16", "f32", "fp8", "fp8e4b15", "q8_0", "q4_0", "int8", "int4", "turbo2", "turbo3", "turbo4",
                        "turbo4-qjl", "u4", "prod3"}) {
    INFO(c);
    REQUIRE(make_format(std::string("k=") + c, 128).key->name().find(c) != std::string::npos);
  }
}

TEST_CASE("formats: unknown names and unsupported head_dims are refused by name", "[formats]") {
  REQUIRE_THROWS_WITH(make_format("turboquant_5bit", 128), Catch::Contains("unknown format 'turboquant_5bit'"));
  REQUIRE_THROWS_WITH(make_format("turboquant_3bit_nc", 20), Catch::Contains("turboquant_3bit_nc") &&
                                                                  Catch::Contains("head_dim 20"));
  REQUIRE_THROWS_WITH(make_format("turboquant_4bit_nc", 96), Catch::Contains("power of two"));
  REQUIRE_THROWS_WITH(make_format("k=mse3", 20), Catch::Contains("% 8"));
  REQUIRE_THROWS_WITH(make_format("q8_0", 48), Catch::Contains("head_dim % 32"));
  REQUIRE_THROWS_WITH(make_format("k=mse9", 128), Catch::Contains("bits"));
  REQUIRE_THROWS_WITH(make_format("k=zstd", 128), Catch::Contains("unknown codec 'zstd'"));
  // the codec table's patterns: the message lists them; a <b> row claims one digit, its suffixes only
  REQUIRE_THROWS_WITH(make_format("k=mse10", 128), Catch::Contains("unknown codec 'mse10'") &&
                                                       Catch::Contains("mse<b>[+nc|+fold]") && Catch::Contains("kivi<b>"));
  REQUIRE_THROWS_WITH(make_format("k=mse4+xy", 128), Catch::Contains("unknown codec 'mse4+xy'"));
  REQUIRE_THROWS_WITH(make_format("k=u0", 128), Catch::Contains("codec 'u0': bits must be a digit 1..8"));
  REQUIRE_THROWS_WITH(make_format("k=mse4,rot=spin", 128), Catch::Contains("unknown rotation 'spin'"));
  REQUIRE_THROWS_WITH(make_format("k=mse4,color=red", 128), Catch::Contains("unknown option 'color'"));
  REQUIRE_THROWS_WITH(make_format("k=prod3,qjl=cauchy", 128), Catch::Contains("qjl"));
  // Non-power-of-two head_dims work through the dense Haar rotation (rot=auto).
  for (int d : {80, 96, 160, 192, 320}) {
    const KvFormat f = make_format("k=mse4+nc,v=u4", d);
    auto x = gaussian_rows(256, d, 18);
    REQUIRE(nmse(x, f.key->decode(f.key->encode(x), 256)) <= f.key->gaussian_nmse_bound());
    REQUIRE(dynamic_cast<const MseCodec&>(*f.key).rotation().name() == "haar:0");
  }
  REQUIRE(expand_format_names({"all"}).size() == registered_formats().size());
  REQUIRE(expand_format_names({"q8_0", "all", "q8_0"}).front() == "q8_0");
}

TEST_CASE("formats: norm correction on read equals the norm folded in at write", "[formats]") {
  for (int d : {64, 128, 256})
    for (int b : {2, 3, 4}) {
      const KvFormat nc = make_format(fmt::format("k=mse{}+nc", b), d), fold = make_format(fmt::format("k=mse{}+fold", b), d);
      auto x = gaussian_rows(128, d, 19, 2.0);
      const auto a = nc.key->decode(nc.key->encode(x), 128), c = fold.key->decode(fold.key->encode(x), 128);
      for (int i = 0; i < 128; ++i) {
        double e = 0, s = 0;
        for (int j = 0; j < d; ++j) {
          const size_t k = size_t(i) * d + j;
          e += (double(a[k]) - c[k]) * (double(a[k]) - c[k]);
          s += double(a[k]) * a[k];
        }
        REQUIRE(std::sqrt(e / s) < 1e-3);  // two fp16 roundings of the norm (2^-11 each)
      }
    }
}

TEST_CASE("formats: a turbo codec with another codebook decodes the same records with its centroids", "[formats]") {
  tq::Rng rng(7);
  std::vector<float> x(4 * 128);
  for (auto& v : x) v = float(rng.gaussian());
  const tq::TurboCodec base(tq::TurboKind::turbo3, 128);
  const auto& cb = base.codebook();
  std::vector<float> scaled(cb.centroids());
  for (auto& c : scaled) c *= 1.001f;  // same midpoints: same indices; the decode, linear in the centroids, × 1.001
  const tq::TurboCodec other(tq::TurboKind::turbo3, 128,
                             std::make_shared<const tq::ScalarCodebook>("x1.001", scaled, cb.midpoints()));
  std::vector<uint8_t> a(4 * base.row_bytes());
  base.encode(x.data(), 4, a.data());
  std::vector<float> ya(x.size()), yb(x.size());
  base.decode(a.data(), 4, ya.data());
  other.decode(a.data(), 4, yb.data());
  for (size_t i = 0; i < ya.size(); ++i) CHECK(yb[i] == Approx(1.001 * ya[i]).epsilon(1e-5).margin(1e-6));
  REQUIRE_THROWS_WITH(tq::TurboCodec(tq::TurboKind::turbo3, 128,
                                     std::make_shared<const tq::ScalarCodebook>("4", std::vector<float>{-1, -0.5f, 0.5f, 1})),
                      Catch::Matchers::Contains("a codebook of 8 levels is needed, not 4"));
}
