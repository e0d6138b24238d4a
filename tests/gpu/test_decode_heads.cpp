// Which kv head counts the quantized decode streams (decode_heads_support: the check paged_decode and the PyTorch
// op make before planning). Host code only ([host]: runs without a CUDA device, in CI too); the GPU test
// "decode: kv head counts split unevenly" runs these plans against the float64 attention.
#include <catch2/catch.hpp>

#include <string>

#include "tq/cuda/decode.h"
#include "tq/cuda/kernel_format.h"
#include "tq/format.h"
#include "tq/model_shapes.h"

using Catch::Matchers::Contains;

namespace {

tq::cuda::KernelFormat kformat(const std::string& name, int d) {
  return tq::cuda::kernel_format(tq::make_format(name, d));
}

}  // namespace

TEST_CASE("decode heads: every model of tq-bench's table runs in every decode format", "[host][api]") {
  // Phi-4 (40 / 10, d 128) among them: 5 or 2 of k8v4's 196-byte slots are no 16-byte run, so its CTAs copy whole
  // token rows.
  int checked = 0;
  for (const tq::ModelShape& m : tq::model_shapes()) {
    if (m.head_dim != 64 && m.head_dim != 128 && m.head_dim != 256) continue;  // (Phi-3-mini's 96: no format)
    for (const std::string& name : tq::cuda::gpu_formats(/*decode_only=*/true)) {
      INFO(m.name << " (kv heads " << m.kv_heads << ", d " << m.head_dim << ") in " << name);
      REQUIRE(tq::cuda::decode_heads_support(kformat(name, m.head_dim), m.kv_heads).empty());
      ++checked;
    }
  }
  REQUIRE(checked >= 27 * 8);
}

TEST_CASE("decode heads: a count with a divisor ≤ 8 whose slots are 16-byte runs is streamed", "[host][api]") {
  // Every kernel has ≥ 8 warps, and CTAs of h heads copy h slots per token with one bulk copy (its size and
  // addresses multiples of 16 bytes) wherever h · slot and the row n · slot are.
  for (const std::string& name : tq::cuda::gpu_formats(/*decode_only=*/true))
    for (const int d : {64, 128, 256}) {
      const auto kf = kformat(name, d);
      for (int n = 1; n <= 64; ++n)
        for (int h = 1; h <= 8; ++h)
          if (n % h == 0 && (h * kf.slot_bytes) % 16 == 0 && (n * kf.slot_bytes) % 16 == 0) {
            INFO(name << " d " << d << ": " << n << " kv heads in CTAs of " << h);
            REQUIRE(tq::cuda::decode_heads_support(kf, n).empty());
            break;
          }
    }
}

TEST_CASE("decode heads: counts whose whole token rows exceed shared memory are refused by name", "[host][api]") {
  // No divisor of these within the kernel's warps has 16-byte runs (k8v4 196 = 4 · 49 at 19 = prime; 262 at d 256
  // over 14's divisors ≤ 8: 1, 2, 7), and two ring stages of 32 whole token rows exceed the 227 KB an sm_90 CTA
  // may opt into: 19 · 196 · 64 = 238,336 and 14 · 262 · 64 = 234,752 bytes.
  struct R {
    const char* fmt;
    int d, n, slot;
  };
  for (const R r : {R{"turboquant_k8v4", 128, 19, 196}, R{"turboquant_4bit_nc", 256, 14, 262}}) {
    const auto kf = kformat(r.fmt, r.d);
    REQUIRE(kf.slot_bytes == r.slot);
    REQUIRE(2 * 32 * r.n * r.slot > 227 * 1024);
    INFO(r.fmt << " d " << r.d << ", " << r.n << " kv heads");
    REQUIRE_THAT(tq::cuda::decode_heads_support(kf, r.n),
                 Contains("n_kv_heads " + std::to_string(r.n) + " not supported") && Contains(r.fmt) &&
                     Contains(std::to_string(r.n * r.slot) + " bytes each"));
  }
}
