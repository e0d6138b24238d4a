// The kernels on real queries, keys and values (tests/data/kv: tq-dump files of SmolLM2-135M,
// head_dim 64, 9 q / 3 kv heads, and Gemma 3 270M, head_dim 256, 4 q / 1 kv head; 256
// tokens of the Jargon File; layers picked for their large logits, up to ~60 at SmolLM2
// layer 18, and key norms, up to ~160 at Gemma layer 11), through tq::cuda::check_dump_layer
// (what tq-bench --check-dump runs): store bytes == the CPU encoder, dequant == the CPU
// decoder bit for bit, decode of every position (causal) within 1e-3 of float64 attention.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "tq/cuda/kernel_format.h"
#include "tq/cuda/verify.h"
#include "tq/format.h"
#include "tq/kv_dump.h"

#ifdef TQ_HAVE_HDF5

namespace {

// Every format with GPU store, dequant and decode kernels (an independent list: the
// checks must run for each, none may be skipped as "no kernel").
const std::vector<std::string> kGpuFormats = {"turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc",
                                              "turboquant_k8v4",    "turbo2",             "turbo3",
                                              "turbo4",             "turbo4-qjl"};

void check_file(const std::string& file, const std::vector<std::string>& formats, int positions,
                const std::vector<int>& splits) {
  const tq::KvDump dump = tq::KvDump::open(std::string(TQ_TEST_DATA) + "/kv/" + file);
  const auto& h = dump.header();
  REQUIRE(!h.layers.empty());
  for (const int l : h.layers) {
    const tq::KvDumpLayer L = dump.read_layer(l);
    for (const int s : splits)
      for (size_t i = 0; i <= formats.size(); ++i) {  // i == size: the FP16 baseline decode
        const bool base = i == formats.size();
        const tq::KvFormat f = base ? tq::KvFormat{} : tq::make_format(formats[i], h.head_dim);
        tq::cuda::DumpCheckOptions o;
        o.positions = positions;
        o.splits = s;
        const auto c = tq::cuda::check_dump_layer(base ? nullptr : &f, L, h.n_heads, h.n_kv_heads, h.head_dim, o);
        INFO(file << " layer " << l << " " << c.format << " splits " << s << " (plan " << c.splits << ", parts "
                  << c.parts << "): " << c.not_run << " store " << c.store_mismatches << "/" << c.slots
                  << " (first: token " << c.bad_token << " head " << c.bad_head << " byte " << c.bad_byte
                  << "), dequant " << c.dequant_mismatches << "/" << c.dequant_values << ", decode " << c.decode_rel
                  << " at position " << c.worst_position << " q head " << c.worst_head);
        REQUIRE(c.not_run.empty());
        REQUIRE(c.tokens == h.n_tokens);  // 256 tokens: inside Gemma's 512-token sliding window
        REQUIRE(c.positions == std::min<int64_t>(positions, h.n_tokens));
        if (!base) {
          REQUIRE(c.slots == h.n_tokens * h.n_kv_heads);
          REQUIRE(c.store_mismatches == 0);
          REQUIRE(c.dequant_values == 4 * h.n_tokens * h.n_kv_heads * h.head_dim);  // K and V, fp16 and bf16
          REQUIRE(c.dequant_mismatches == 0);
        }
        REQUIRE(c.decoded);
        REQUIRE(c.decode_rel <= 1e-3);
        REQUIRE(c.passed(1e-3));
      }
  }
}

}  // namespace

TEST_CASE("real K/V (SmolLM2, Gemma 3 dumps): store bytes, dequant, decode of every position, every format",
          "[real]") {
  for (const char* file : {"smollm2_256.h5", "gemma3_256.h5"}) check_file(file, kGpuFormats, 256, {0, 3});
}

TEST_CASE("real K/V quick subset", "[real][quick]") {
  check_file("smollm2_256.h5", {"turboquant_4bit_nc", "turbo3"}, 48, {0});
  check_file("gemma3_256.h5", {"turboquant_k3v4_nc"}, 24, {2});
}

#endif
