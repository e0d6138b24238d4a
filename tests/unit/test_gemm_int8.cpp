// The int8 weight product (lib/src/model/gemm_int8.h, internal) against float64
// oracles: the same integer quantities summed in double, and the exact product
// of the unquantized activations within the activation-rounding bound; the
// kernel's bits against the portable loops' and across column splits.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "../../lib/src/model/gemm_int8.h"
#include "tq/float_formats.h"
#include "tq/gguf.h"
#include "tq/rng.h"

using namespace tq;

namespace {

void put_half(uint8_t* p, float f) {
  const uint16_t h = float_to_half(f);
  p[0] = uint8_t(h), p[1] = uint8_t(h >> 8);
}

// Rows of random ggml blocks with plausible scales (a weight magnitude of about 0.02).
std::vector<uint8_t> random_rows(GgmlType type, int rows, int k, Rng& rng) {
  const GgmlTypeInfo* info = ggml_type_info(uint32_t(type));
  const int nb = k / info->block_size;
  std::vector<uint8_t> b(size_t(rows) * nb * info->type_size);
  for (auto& x : b) x = uint8_t(rng.next_u64());
  for (int i = 0; i < rows * nb; ++i) {
    uint8_t* p = b.data() + size_t(i) * info->type_size;
    switch (type) {
      case GgmlType::Q8_0: put_half(p, float(rng.uniform(1e-4, 3e-4))); break;
      case GgmlType::Q5_0: put_half(p, float(rng.uniform(1e-3, 3e-3))); break;
      case GgmlType::Q4_K: put_half(p, float(rng.uniform(1e-4, 1e-3))), put_half(p + 2, float(rng.uniform(1e-4, 1e-3))); break;
      case GgmlType::Q6_K: put_half(p + 208, float(rng.uniform(1e-5, 1e-4))); break;
      default: FAIL("type not generated");
    }
  }
  return b;
}

struct Case {
  int n, m, k;
  GgmlType type;
};

// The int8 path on one shape: W from `type` blocks, X Gaussian with one outlier channel.
void check_case(const Case& cs, Rng& rng) {
  INFO("n " << cs.n << " m " << cs.m << " k " << cs.k << " type " << ggml_type_name(uint32_t(cs.type)));
  const int64_t rb = int64_t(ggml_type_info(uint32_t(cs.type))->type_size) * cs.k /
                     ggml_type_info(uint32_t(cs.type))->block_size;
  const auto raw = random_rows(cs.type, cs.m, cs.k, rng);
  std::vector<float> W(size_t(cs.m) * cs.k);
  for (int j = 0; j < cs.m; ++j) dequantize_row(uint32_t(cs.type), raw.data() + j * rb, W.data() + size_t(j) * cs.k, cs.k);
  detail::Int8Matrix M(cs.m, cs.k);
  M.set_rows(0, cs.m, uint32_t(cs.type), raw.data(), rb);
  M.finish();
  CHECK(M.group() == (cs.type == GgmlType::Q6_K ? 16 : 32));
  const int G = M.group(), ldx = cs.k + 3, ldy = cs.m + 5;
  std::vector<float> X(size_t(cs.n) * ldx);
  for (auto& x : X) x = float(rng.gaussian());
  for (int i = 0; i < cs.n; ++i) X[size_t(i) * ldx + 7] *= 300.0f;  // an outlier channel, as in real activations
  const detail::Int8Rows R(cs.n, X.data(), ldx, cs.k, G);

  std::vector<float> Y(size_t(cs.n) * ldy, 7.0f);
  detail::gemm_int8(R, M, 0, cs.m, Y.data(), ldy);
  double worst_int = 0, worst_bound = 0;
  for (int i = 0; i < cs.n; ++i) {
    for (int j = 0; j < cs.m; ++j) {
      double ref = 0, mag = 0, exact = 0, bound = 0;
      for (int g = 0; g < cs.k / G; ++g) {
        const float* x = X.data() + size_t(i) * ldx + size_t(g) * G;
        double amax = 0;
        for (int p = 0; p < G; ++p) amax = std::max(amax, std::fabs(double(x[p])));
        const double ax = double(float(amax) / 127.0f);
        double dot = 0, wabs = 0;
        for (int p = 0; p < G; ++p) {
          const double w = W[size_t(j) * cs.k + g * G + p];
          dot += w * std::nearbyint(double(x[p]) * (127.0 / amax));
          exact += w * double(x[p]);
          wabs += std::fabs(w);
        }
        ref += ax * dot;
        mag += ax * 127.0 * wabs;
        bound += wabs * ax * 0.5;  // each x moves at most half a step
      }
      const double y = Y[size_t(i) * ldy + j];
      worst_int = std::max(worst_int, std::fabs(y - ref) / mag);
      worst_bound = std::max(worst_bound, std::fabs(y - exact) / (bound + 1e-6 * mag));
    }
    for (int j = cs.m; j < ldy; ++j) REQUIRE(Y[size_t(i) * ldy + j] == 7.0f);
  }
  CHECK(worst_int < 2e-6);    // float epilogue over ≤ k/16 groups
  CHECK(worst_bound <= 1.0);  // within the activation-rounding bound
  CHECK(worst_bound > 0.05);  // and the quantization is visible (the check can fail)

  // The portable loops, and any split of the columns at panel boundaries, give the same bits.
  std::vector<float> P(Y.size(), 7.0f), S(Y.size(), 7.0f);
  detail::gemm_int8_force_portable(true);
  detail::gemm_int8(R, M, 0, cs.m, P.data(), ldy);
  detail::gemm_int8_force_portable(false);
  for (int c = 0; c < cs.m; c += 48) detail::gemm_int8(R, M, c, std::min(cs.m, c + 48), S.data() + c, ldy);
  CHECK(std::memcmp(P.data(), Y.data(), Y.size() * 4) == 0);
  CHECK(std::memcmp(S.data(), Y.data(), Y.size() * 4) == 0);
}

}  // namespace

TEST_CASE("gemm_int8: GGUF codes × int8 activations against float64 oracles", "[gemm]") {
  Rng rng(20261205);
  INFO("path " << detail::gemm_int8_path());
  // Every edge of the blocking: row tiles of 6, panels of 16 and pairs of them, k-slices of 512.
  for (const Case& cs : {Case{1, 16, 256, GgmlType::Q4_K}, Case{7, 40, 768, GgmlType::Q4_K},
                         Case{13, 33, 1024, GgmlType::Q6_K}, Case{6, 64, 512, GgmlType::Q6_K},
                         Case{20, 50, 544, GgmlType::Q8_0}, Case{5, 17, 96, GgmlType::Q5_0}})
    check_case(cs, rng);
}

TEST_CASE("gemm_int8: stacked types take the finer group; NaN stays in its row", "[gemm]") {
  Rng rng(7);
  const int k = 256;
  const auto a = random_rows(GgmlType::Q4_K, 16, k, rng), b = random_rows(GgmlType::Q6_K, 16, k, rng);
  detail::Int8Matrix M(32, k);
  M.set_rows(0, 16, uint32_t(GgmlType::Q4_K), a.data(), 144);
  M.set_rows(16, 16, uint32_t(GgmlType::Q6_K), b.data(), 210);
  M.finish();
  CHECK(M.group() == 16);

  std::vector<float> X(3 * k);
  for (auto& x : X) x = float(rng.gaussian());
  X[size_t(k) + 100] = NAN;
  const detail::Int8Rows R(3, X.data(), k, k, 16);
  std::vector<float> Y(3 * 32);
  detail::gemm_int8(R, M, 0, 32, Y.data(), 32);
  for (int j = 0; j < 32; ++j) {
    CHECK(std::isfinite(Y[size_t(j)]));
    CHECK(std::isnan(Y[32 + size_t(j)]));
    CHECK(std::isfinite(Y[64 + size_t(j)]));
  }
  CHECK_THROWS_WITH(detail::Int8Matrix(4, 100), Catch::Contains("multiple of 32"));
}
