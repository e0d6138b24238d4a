// The GPU codec table (TQ_GPU_CODECS, tq/cuda/kernel_format.h) against the CPU formats it names.
// Host code only ([host]: runs without a CUDA device, in CI too): every row's format maps to
// exactly that row, the decode support follows the row, and formats outside the table are refused
// with the table's names in the message. Also the launchers' checks of the activation types.
#include <catch2/catch.hpp>

#include <string>

#include "formats.cuh"  // kernels/src: the dispatch (host code)
#include "tq/cuda/decode.h"
#include "tq/cuda/kernel_format.h"
#include "tq/cuda/store.h"
#include "tq/error.h"
#include "tq/format.h"

using Catch::Matchers::Contains;

TEST_CASE("format table: every row's format maps to that row at d 64, 128, 256", "[host][formats]") {
  for (const auto& row : tq::cuda::kGpuCodecs)
    for (const int d : {64, 128, 256}) {
      INFO(row.format << " d=" << d);
      const tq::KvFormat f = tq::make_format(row.format, d);
      const tq::cuda::KernelFormat k = tq::cuda::kernel_format(f);
      REQUIRE(k.key == row.key);
      REQUIRE(k.key_bits == row.key_bits);
      REQUIRE(k.value == row.value);
      REQUIRE(k.value_bits == row.value_bits);
      REQUIRE(tq::cuda::gpu_codec(k) == &row);
      REQUIRE(tq::cuda::decode_support(k).empty() == row.decode);
      // the slot the kernels address is the CPU format's slot (key + value records, padded to even)
      REQUIRE(k.slot_bytes == int(f.slot_bytes()));
      REQUIRE(k.key_bytes + k.value_bytes <= k.slot_bytes);
    }
}

TEST_CASE("format table: rows are distinct and the decode rows are the registered GPU presets", "[host][formats]") {
  const auto all = tq::cuda::gpu_formats(), dec = tq::cuda::gpu_formats(true);
  REQUIRE(all.size() == std::size(tq::cuda::kGpuCodecs));
  for (size_t i = 0; i < all.size(); ++i)
    for (size_t j = i + 1; j < all.size(); ++j) {
      const auto &a = tq::cuda::kGpuCodecs[i], &b = tq::cuda::kGpuCodecs[j];
      INFO(a.format << " vs " << b.format);
      REQUIRE(!(a.key == b.key && a.key_bits == b.key_bits && a.value == b.value && a.value_bits == b.value_bits));
    }
  // the decode rows are named by registered formats (tq-bench --check-dump and the tests loop over them)
  for (const auto& name : dec) {
    bool registered = false;
    for (const auto& e : tq::registered_formats()) registered = registered || e.name == name;
    INFO(name);
    REQUIRE(registered);
  }
  REQUIRE(dec.size() == 8);  // the four vLLM presets, turbo2/3/4, turbo4-qjl
}

TEST_CASE("format table: formats without a row are refused, naming the supported ones", "[host][formats]") {
  for (const char* spec : {"q8_0", "k=mse2+nc,v=u4", "k=mse4+nc,v=u2", "k=fp8,v=u2", "k=mse4+nc,v=u4,rot=haar:1"}) {
    INFO(spec);
    REQUIRE_THROWS_WITH(tq::cuda::kernel_format(tq::make_format(spec, 128)),
                        Contains("not supported") && Contains("turboquant_4bit_nc") && Contains("turbo4-qjl"));
  }
  // a row the store has but the decode has not
  const auto k = tq::cuda::kernel_format(tq::make_format("k=fp8,v=u3", 128));
  const std::string why = tq::cuda::decode_support(k);
  REQUIRE_THAT(why, Contains("format 'k=fp8,v=u3'") && Contains("paged decode kernel implements"));
  const std::string list = why.substr(why.find("implements"));  // the decode rows only
  REQUIRE_THAT(list, Contains("turboquant_k8v4") && Contains("turbo4-qjl") && !Contains("k=fp8") && !Contains("u3"));
}

// The launchers' runtime → compile-time dispatch (kernels/src/formats.cuh) picks, for every row and
// head_dim, the FormatCfg of exactly that row, whose compile-time record sizes are the CPU format's;
// the decode dispatch takes the decode rows and refuses the others.
TEST_CASE("format table: the dispatch reaches each row's FormatCfg, with the CPU format's record sizes",
          "[host][formats]") {
  for (const auto& row : tq::cuda::kGpuCodecs)
    for (const int d : {64, 128, 256}) {
      INFO(row.format << " d=" << d);
      const tq::cuda::KernelFormat k = tq::cuda::kernel_format(tq::make_format(row.format, d));
      int calls = 0;
      auto check = [&](auto cfg) {
        using C = decltype(cfg);
        ++calls;
        REQUIRE(C::kKey == row.key);
        REQUIRE(C::kKeyBits == row.key_bits);
        REQUIRE(C::kValue == row.value);
        REQUIRE(C::kValueBits == row.value_bits);
        REQUIRE(C::kD == d);
        REQUIRE(C::kKeyBytes == k.key_bytes);
        REQUIRE(C::kValueBytes == k.value_bytes);
        REQUIRE(size_t(C::kKeyBytes) == tq::make_format(row.format, d).key_bytes());  // the CPU codec's row_bytes
      };
      tq::cuda::dispatch_format(k, check);
      REQUIRE(calls == 1);
      if (row.decode) {
        tq::cuda::dispatch_decode_format(k, check);
        REQUIRE(calls == 2);
      } else {
        REQUIRE_THROWS_WITH(tq::cuda::dispatch_decode_format(k, check), Contains("no kernel"));
      }
    }
}

// The record sizes at d = 128 as literals (vLLM's slot sizes for its presets: key | value | pad to even;
// turboquant_plus's 34 / 50 / 66 / 68-byte blocks), and a hand-built KernelFormat whose sizes are not its
// codecs' layout refused by name before any launch.
TEST_CASE("format table: record sizes at d 128, and KernelFormats with other sizes refused", "[host][formats]") {
  struct Expect {
    const char* format;
    int key, value, slot;
  };
  for (const Expect& e : {Expect{"turboquant_4bit_nc", 66, 68, 134}, Expect{"turboquant_k3v4_nc", 50, 68, 118},
                          Expect{"turboquant_3bit_nc", 50, 52, 102}, Expect{"turboquant_k8v4", 128, 68, 196},
                          Expect{"turbo2", 34, 34, 68}, Expect{"turbo3", 50, 50, 100}, Expect{"turbo4", 66, 66, 132},
                          Expect{"turbo4-qjl", 68, 68, 136}}) {
    INFO(e.format);
    tq::cuda::KernelFormat k = tq::cuda::kernel_format(tq::make_format(e.format, 128));
    REQUIRE(k.key_bytes == e.key);
    REQUIRE(k.value_bytes == e.value);
    REQUIRE(k.slot_bytes == e.slot);
    REQUIRE(tq::cuda::layout_support(k).empty());
    k.key_bytes += 2;
    REQUIRE_THAT(tq::cuda::layout_support(k),
                 Contains(std::string("format '") + e.format) && Contains("do not match its codecs' layout"));
    k.key_bytes -= 2;
    k.slot_bytes += 2;
    REQUIRE_THAT(tq::cuda::layout_support(k), Contains("do not match its codecs' layout"));
  }
}

TEST_CASE("launchers: activation types (fp16, bf16) are checked by name", "[host][api]") {
  using tq::cuda::Dtype16;
  alignas(16) static uint8_t mem[1 << 16];  // validated only, never launched
  const auto kf = tq::cuda::kernel_format(tq::make_format("turboquant_4bit_nc", 128));
  const tq::cuda::PagedCache pc{mem, 4, 16, 2, kf.slot_bytes};
  static const int64_t slots[1] = {0};
  auto sp = tq::cuda::StoreParams::contiguous(mem, mem, slots, 1, 128, pc, Dtype16::bf16);
  REQUIRE(tq::cuda::store_can_implement(kf, sp).empty());
  sp.dtype = static_cast<Dtype16>(2);
  REQUIRE_THAT(tq::cuda::store_can_implement(kf, sp), Contains("unknown key/value dtype 2"));

  tq::cuda::DecodeParams p;
  p.query = p.out = mem;
  p.q_stride_batch = p.o_stride_batch = 8 * 128;
  p.q_stride_head = p.o_stride_head = 128;
  p.n_q_heads = 8;
  p.attn_scale = 0.1f;
  static const int32_t table[4] = {0, 1, 2, 3}, lens[1] = {64};
  p.blocks = {table, 4, lens, 1};
  p.max_seq_len = 64;
  p.dtype = Dtype16::bf16;
  REQUIRE(tq::cuda::decode_can_implement(kf, pc, p).empty());
  const tq::cuda::PagedCacheF16 f16{mem, mem, 4, 16, 2, 128};
  REQUIRE_THAT(tq::cuda::decode_f16_can_implement(f16, p), Contains("FP16 baseline takes fp16 only"));
  p.dtype = static_cast<Dtype16>(3);
  REQUIRE_THAT(tq::cuda::decode_can_implement(kf, pc, p), Contains("unknown query/out dtype 3"));
  p.dtype = Dtype16::f16;
  REQUIRE(tq::cuda::decode_f16_can_implement(f16, p).empty());
}

TEST_CASE("launchers: variable query counts (q_start, q_rows) are checked by name", "[host][api][multi]") {
  alignas(16) static uint8_t mem[1 << 16];  // validated only, never launched
  const auto kf = tq::cuda::kernel_format(tq::make_format("turboquant_4bit_nc", 128));
  const tq::cuda::PagedCache pc{mem, 4, 16, 2, kf.slot_bytes};
  const tq::cuda::PagedCacheF16 f16{mem, mem, 4, 16, 2, 128};
  static const int32_t table[8] = {0, 1, 2, 3, 0, 1, 2, 3}, lens[2] = {64, 9}, starts[4] = {0, 4, 6, 0};
  tq::cuda::DecodeParams p;
  p.query = p.out = mem;
  p.q_stride_head = p.o_stride_head = 128;
  p.q_stride_token = p.o_stride_token = 8 * 128;
  p.n_q_heads = 8;
  p.attn_scale = 0.1f;
  p.blocks = {table, 4, lens, 2};
  p.max_seq_len = 64;
  p.q_len = 4;
  p.q_start = starts;  // 4 and 2 queries
  p.q_rows = 6;
  REQUIRE(tq::cuda::decode_can_implement(kf, pc, p).empty());
  REQUIRE(tq::cuda::decode_f16_can_implement(f16, p).empty());
  for (const int64_t rows : {int64_t(0), int64_t(9)}) {  // none; more than 2 sequences of ≤ 4 queries hold
    p.q_rows = rows;
    const std::string want = "q_rows " + std::to_string(rows) + " must be 1 … batch 2 · q_len 4";
    REQUIRE_THAT(tq::cuda::decode_can_implement(kf, pc, p), Contains(want));
    REQUIRE_THAT(tq::cuda::decode_f16_can_implement(f16, p), Contains(want));
  }
  p.q_rows = 6;
  p.q_start = reinterpret_cast<const int32_t*>(mem + 2);
  REQUIRE_THAT(tq::cuda::decode_can_implement(kf, pc, p), Contains("q_start must be 4-byte aligned"));
  p.q_start = starts;
  p.q_len = 1;  // one query per sequence: q_start is not read, nor q_rows checked
  p.q_rows = 0;
  p.q_stride_batch = p.o_stride_batch = 8 * 128;
  REQUIRE(tq::cuda::decode_can_implement(kf, pc, p).empty());
}
