// Bit packing against a naive bit-by-bit writer (LSB-first, code i at bit b·i),
// and the fixed-order tree reductions against their definition.
#include <catch2/catch.hpp>

#include "tq/bitpack.h"
#include "tq/rng.h"

using namespace tq;

TEST_CASE("bitpack: every width and length matches a naive bit writer", "[bitpack]") {
  Rng r(51);
  for (int bits = 1; bits <= 8; ++bits)
    for (size_t n : {size_t(1), size_t(7), size_t(8), size_t(31), size_t(64), size_t(128), size_t(129), size_t(256)}) {
      std::vector<uint8_t> codes(n);
      for (auto& c : codes) c = uint8_t(r.below(1u << bits));
      std::vector<uint8_t> naive(packed_bytes(n, bits), 0);
      for (size_t i = 0; i < n; ++i)
        for (int b = 0; b < bits; ++b)
          if ((codes[i] >> b) & 1) naive[(i * bits + size_t(b)) / 8] |= uint8_t(1u << ((i * bits + size_t(b)) % 8));
      std::vector<uint8_t> packed(packed_bytes(n, bits), 0xAB), back(n);
      pack_bits(codes.data(), n, bits, packed.data());
      INFO("bits " << bits << " n " << n);
      REQUIRE(packed == naive);
      unpack_bits(packed.data(), n, bits, back.data());
      REQUIRE(back == codes);
    }
}

TEST_CASE("tree sums follow the documented halving order", "[bitpack]") {
  Rng r(52);
  for (int n : {1, 2, 3, 5, 64, 100, 128, 256, 4096}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = float(r.gaussian());
    int p = 1;
    while (p < n) p <<= 1;
    std::vector<float> s(size_t(p), 0.f), q(size_t(p), 0.f);
    for (int i = 0; i < n; ++i) { s[size_t(i)] = x[size_t(i)] * x[size_t(i)]; q[size_t(i)] = x[size_t(i)]; }
    for (int h = p / 2; h >= 1; h /= 2)
      for (int i = 0; i < h; ++i) { s[size_t(i)] += s[size_t(i + h)]; q[size_t(i)] += q[size_t(i + h)]; }
    REQUIRE(tree_sum_squares(x.data(), n) == s[0]);  // bit-exact
    REQUIRE(tree_sum(x.data(), n) == q[0]);
  }
}
