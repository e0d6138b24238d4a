// Paged decode (quantized and the FP16 baseline), one query token per sequence, against a float64
// attention over the CPU-dequantized cache (decode_fixture.h). Every output is poisoned (NaN) first;
// every element must be written, finite and within 1e-3 relative error (per query row:
// ‖out − ref‖ / ‖ref‖).
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "decode_fixture.h"
#include "tq/cuda/decode.h"
#include "tq/cuda/kernel_format.h"
#include "tq/error.h"
#include "tq/format.h"

using namespace tqtest;
using tq::cuda::DecodePlan;

TEST_CASE("decode: ragged batch, every format, fixed and auto splits", "[decode]") {
  for (const auto& fmt : kDecodeFormats)
    for (int splits : {0, 1, 3}) {
      DecodeCase c;
      c.fmt = fmt;
      c.lens = kRagged;
      c.splits = splits;
      c.seed = 11 + splits;
      const double e = run_decode(c);
      WARN(fmt << " ragged, splits " << splits << ": max rel error " << e);
    }
}

TEST_CASE("decode: plane layout (4bit_nc, k3v4_nc): ragged, head dims, block sizes, GQA, 32K", "[decode][planes]") {
  for (const std::string fmt : {"turboquant_4bit_nc", "turboquant_k3v4_nc"}) {
    for (int splits : {0, 1, 3}) {
      DecodeCase c;
      c.fmt = fmt;
      c.planes = true;
      c.lens = kRagged;
      c.splits = splits;
      c.seed = 511 + splits;
      const double e = run_decode(c);
      WARN(fmt << " planes ragged, splits " << splits << ": max rel error " << e);
    }
    for (int d : {64, 128, 256})
      for (int bs : {16, 32, 128}) {
        DecodeCase c;
        c.fmt = fmt;
        c.planes = true;
        c.d = d;
        c.bs = bs;
        c.hq = 16;
        c.hkv = 4;
        c.lens = {1, 17, bs - 1, bs, bs + 1, 700};
        c.seed = uint64_t(7000 + d * 10 + bs);
        run_decode(c);
      }
    struct H {
      int hq, hkv;
    };
    // (96,8) G = 12 and (40,2) G = 20: stage 1 in slices of ≤ 8 query columns
    for (const H h : {H{8, 8}, H{8, 1}, H{12, 3}, H{16, 16}, H{64, 8}, H{96, 8}, H{40, 2}}) {
      DecodeCase c;
      c.fmt = fmt;
      c.planes = true;
      c.hq = h.hq;
      c.hkv = h.hkv;
      c.lens = {5, 16, 300, 2049};
      c.seed = uint64_t(900 + h.hq + h.hkv);
      run_decode(c);
    }
    DecodeCase c;
    c.fmt = fmt;
    c.planes = true;
    c.lens = {32768, 20001};
    c.seed = 97;
    const double e = run_decode(c);
    WARN(fmt << " planes 32K: max rel error " << e);
  }
}

TEST_CASE("decode: plane layout quick subset", "[decode][planes][quick]") {
  for (const std::string fmt : {"turboquant_4bit_nc", "turboquant_k3v4_nc"}) {
    DecodeCase c;
    c.fmt = fmt;
    c.planes = true;
    c.hq = 8;
    c.hkv = 2;
    c.lens = {1, 17, 40};
    c.seed = 4242;
    run_decode(c);
  }
}

TEST_CASE("launchers: the plane layout is refused where there is no kernel", "[api][planes][quick]") {
  DecodeCase c;
  c.fmt = "turboquant_k8v4";
  c.lens = {20};
  tq::Rng rng(1);
  Filled F = fill_cache(c, rng);
  DecodeRun R = prepare(c, F, rng);
  const auto kf = tq::cuda::kernel_format(tq::make_format(c.fmt, c.d));
  const tq::cuda::PagedCache pc{F.cache->as<uint8_t>(), F.pg.num_blocks, c.bs, c.hkv, F.slot_bytes,
                                tq::cuda::CacheLayout::planes};
  REQUIRE_THROWS_AS(tq::cuda::plan_decode(kf, pc, R.p), tq::Error);
  REQUIRE_THROWS_AS(tq::cuda::paged_decode(kf, pc, R.p, R.plan, R.ws->as()), tq::Error);
}

TEST_CASE("decode: head dims 64 and 256, block sizes 32..128", "[decode]") {
  for (const auto& fmt : kDecodeFormats)
    for (int d : {64, 256})
      for (int bs : {32, 64, 128}) {
        DecodeCase c;
        c.fmt = fmt;
        c.d = d;
        c.bs = bs;
        c.hq = 16;
        c.hkv = 4;
        c.lens = {1, 17, bs - 1, bs, bs + 1, 700};
        c.splits = bs == 64 ? 2 : 0;
        c.seed = uint64_t(d * 1000 + bs);
        run_decode(c);
      }
}

// turbo at d = 256: two blocks of 128 per head, each with its own key norm and value norm
// (the score is norm0 · block 0's dot + norm1 · block 1's; P' takes each block's value norm).
// Group sizes 1, 4 (packed query columns) and 8, one kv head with 8 query heads, fixed
// splits, and a 32K sequence.
TEST_CASE("decode: turbo2/turbo3/turbo4/turbo4-qjl at head_dim 256 (two blocks per head)", "[decode]") {
  struct H {
    int hq, hkv;
  };
  for (const std::string fmt : {"turbo2", "turbo3", "turbo4", "turbo4-qjl"}) {
    for (const H h : {H{8, 8}, H{32, 8}, H{64, 8}, H{8, 1}}) {
      DecodeCase c;
      c.fmt = fmt;
      c.d = 256;
      c.hq = h.hq;
      c.hkv = h.hkv;
      c.lens = {5, 16, 300, 2049};
      c.splits = h.hkv == 1 ? 3 : 0;
      c.seed = uint64_t(h.hq * 100 + h.hkv + 7);
      run_decode(c);
    }
    DecodeCase c;
    c.fmt = fmt;
    c.d = 256;
    c.hq = 16;
    c.hkv = 4;
    c.lens = {32768, 1, 4097};
    c.seed = 11;
    const double e = run_decode(c);
    WARN(fmt << " d=256 32K: max rel error " << e);
  }
}

// DecodePlan::part_warps: every warp's part per work item, or one where the CTA merges them (may_merge: a kernel
// that can; the planner merges only from 4 warps per head, where it saves more than it costs).
static bool parts_per_item(const DecodePlan& plan, bool may_merge) {
  return plan.part_warps == plan.warps_per_head || (may_merge && plan.warps_per_head >= 4 && plan.part_warps == 1);
}

TEST_CASE("decode: GQA group sizes 1, 4, 8, 12, 13, 16, 20, 24 and head layouts", "[decode]") {
  struct H {
    int hq, hkv, splits;
  };
  // (8,8) G=1; (32,8) G=4; (8,1) G=8 (8 warps share one head); (12,3) 3 heads/CTA;
  // (16,16) two head groups (segmented copies); (64,8) G=8. G > 8: column slices of ≤ 8 — for
  // 8 < G ≤ 16 one launch with two N-tiles per warp (every quantized format but turbo4-qjl, at 8
  // heads per CTA), or both slices in one launch where the CTA has twice its heads' warps (the quantized
  // 16-warp kernels at 8 heads per CTA, any of them at ≤ 4: query_slices 2), else ⌈G/8⌉
  // stage-1 launches; at 8 < G ≤ 12 one launch only while a work item is ≤ 2048 tokens (with
  // these lengths, ≤ 2049, every auto split count; one split of 2049 is not). The two-tile kernels
  // take single-query decodes whose work items are longer than 128 tokens (here one split; the
  // auto split counts give shorter ones) or whose format has no dual-slice launch (k8v4), and every
  // such shape is also run with the tiles forced to 1 and 2 (DecodeParams::column_tiles): (96,8) G=12 (8 + 4;
  // with one split two launches, the second packed; two-tile formats: one launch), (128,8) G=16
  // (turbo4-qjl: two launches), also with one split (parts = 1 where a head has one warp: the slices write out
  // directly), (26,2) G=13 (8 + 5, run-time heads), (20,1) G=20 (8 + 8 + 4), (192,8) G=24 (three
  // launches of 8-head CTAs).
  for (const auto& fmt :
       {std::string("turboquant_4bit_nc"), std::string("turboquant_k8v4"), std::string("turbo2"), std::string("turbo3"),
        std::string("turbo4"), std::string("turbo4-qjl"), std::string("f16")})
    for (const H h : {H{8, 8, 0}, H{32, 8, 0}, H{8, 1, 0}, H{12, 3, 0}, H{16, 16, 0}, H{64, 8, 0}, H{96, 8, 0},
                      H{96, 8, 1}, H{128, 8, 0}, H{128, 8, 1}, H{26, 2, 0}, H{20, 1, 0}, H{192, 8, 0}}) {
      const int g = h.hq / h.hkv;
      const bool two_tile_fmt = fmt != "f16" && fmt != "turbo4-qjl";
      for (const int tiles : two_tile_fmt && g > 8 && g <= 16 ? std::vector<int>{0, 1, 2} : std::vector<int>{0}) {
        DecodeCase c;
        c.fmt = fmt;
        c.hq = h.hq;
        c.hkv = h.hkv;
        c.splits = h.splits;
        c.tiles = tiles;
        c.lens = {5, 16, 300, 2049};
        c.seed = uint64_t(h.hq * 100 + h.hkv);
        run_decode(c, [&](const DecodePlan& plan, const Filled&) {
          INFO(fmt << " hq=" << h.hq << " hkv=" << h.hkv << " tiles " << tiles << " splits " << plan.num_splits);
          // warps per CTA: 16 for mse / turbo2/3/4 keys at head_dim ≤ 128, 8 for the rest (and FP16)
          const bool f16 = fmt == "f16";
          const int warps = f16 || fmt == "turboquant_k8v4" || fmt == "turbo4-qjl" ? 8 : 16;
          // one launch: FP16 at 8 < G ≤ 16 (two column tiles per warp); the quantized decode at
          // 8 < G ≤ 16 with two N-tiles per warp (every quantized format but turbo4-qjl, 8 heads per CTA:
          // 8 warps) where work items exceed 128 tokens, the tiles are forced to 2 or the CTA has no
          // warps for a second slice (k8v4), else where the CTA has a second set of warps for the second
          // slice — at G ≤ 12 only with short work items (not one split of 2049 tokens)
          const bool tiles2 = two_tile_fmt && g > 8 && g <= 16 && plan.heads_per_cta == 8 &&
                              (tiles == 2 || (tiles == 0 && (2049 > 128 * plan.num_splits || warps == 8)));
          const bool dual = f16 ? g > 8 && g <= 16
                                : !tiles2 && g > 8 && g <= 16 && 2 * plan.heads_per_cta <= warps &&
                                      (g > 12 || h.splits != 1);
          REQUIRE(plan.column_tiles == (tiles2 ? 2 : 1));
          REQUIRE(plan.query_slices == (dual ? 2 : 1));
          REQUIRE(plan.query_passes == (dual || tiles2 ? 1 : (g + 7) / 8));
          REQUIRE(plan.threads == 32 * (f16 ? 1 : plan.query_slices) * plan.heads_per_cta * plan.warps_per_head);
          if (h.hkv % 8 == 0) REQUIRE(plan.threads == 32 * (tiles2 ? 8 : warps));  // every warp of the kernel
          REQUIRE(parts_per_item(plan, /*may_merge=*/!f16 && !tiles2));  // (the CTA merge: quantized, one N-tile)
          if (h.splits == 1 && plan.part_warps == 1) REQUIRE(plan.parts == 1);
        });
      }
    }
}

TEST_CASE("decode: more than 8 kv heads: up to 16 in one CTA (Phi-4: 10; Gemma 2/3 27B: 16), then 8 or 16 per CTA", "[decode]") {
  struct H {
    int hq, hkv, d;
  };
  // The 16-warp kernels (mse / turbo keys, head_dim ≤ 128) stream all heads of a page in
  // one copy, one warp each: (40,10) = Phi-4's G=4, (12,12) G=1, (160,10) G=16 (two slices),
  // (30,10) at d 64, (26,13), (32,16) = Gemma 2/3 27B's G=2, (64,16) G=4, (15,15) — 15 and 16
  // heads of 134-byte slots fit a 2-stage ring only with the LUT at 128 KB (RingLayout) —, and
  // (32,32) (MHA) in four CTAs of 8 heads, each 16-token page slice one tensor-map box (unpadded
  // rows: the TM kernels), also G = 5 (160,32) and at d 64 (64,32); (24,24) and G = 5 (120,24),
  // also at d 64 (48,24), (120,24): three CTAs of 8 heads, TM as well; the FP16 baseline takes the
  // largest divisor of n_kv_heads with 8 warps per CTA: 10 → 2 heads × 4 warps, 12 → 4 × 2, 13
  // and 15 → 1 × 8, 16, 24 and 32 → 8 × 1.
  for (const auto& fmt : {std::string("turboquant_4bit_nc"), std::string("turboquant_k3v4_nc"),
                          std::string("turboquant_3bit_nc"), std::string("turbo2"), std::string("turbo3"),
                          std::string("turbo4"), std::string("f16")})
    for (const H h : {H{40, 10, 128}, H{12, 12, 128}, H{160, 10, 128}, H{30, 10, 64}, H{26, 13, 128}, H{32, 16, 128},
                      H{64, 16, 128}, H{15, 15, 128}, H{32, 32, 128}, H{160, 32, 128}, H{64, 32, 64}, H{24, 24, 128},
                      H{120, 24, 128}, H{48, 24, 64}, H{120, 24, 64}}) {
      DecodeCase c;
      c.fmt = fmt;
      c.hq = h.hq;
      c.hkv = h.hkv;
      c.d = h.d;
      c.lens = {5, 17, 47, 300, 2049};  // ends inside either 16-token half (16 heads: rows r/2 + 4·(r & 1))
      c.seed = uint64_t(h.hq * 100 + h.hkv + h.d);
      run_decode(c, [&](const DecodePlan& plan, const Filled&) {
        INFO(fmt << " hq=" << h.hq << " hkv=" << h.hkv << " d=" << h.d);
        if (fmt != "f16") {
          // more than 16 kv heads: CTAs of 8 whose rows need no pad take tensor-map boxes (8 slots
          // not a multiple of 64 bytes: every format here), else 16 heads per CTA where they divide
          // n_kv_heads, else 8
          const int slot = tq::cuda::kernel_format(tq::make_format(fmt, h.d)).slot_bytes;
          const bool boxes = h.hkv > 16 && (8 * slot) % 64 != 0;
          const int hpc = h.hkv <= 16 ? h.hkv : boxes || h.hkv % 16 != 0 ? 8 : 16;
          REQUIRE(plan.heads_per_cta == hpc);
          REQUIRE(plan.warps_per_head == 16 / hpc);
          REQUIRE(plan.tensor_map == boxes);
        } else {
          REQUIRE(plan.heads_per_cta == (h.hkv == 10 ? 2 : h.hkv == 12 ? 4 : h.hkv % 8 == 0 ? 8 : 1));
          REQUIRE(plan.heads_per_cta * plan.warps_per_head == 8);
        }
        REQUIRE(plan.heads_per_cta * plan.head_groups == h.hkv);
        // (160,10) G = 16: the FP16 decode in one launch (two column tiles); 10 heads leave the
        // quantized kernel no second set of warps: two launches
        const bool one = fmt == "f16" && h.hq / h.hkv > 8 && h.d <= 128;
        REQUIRE(plan.query_passes == (one ? 1 : (h.hq / h.hkv + 7) / 8));
      });
    }
  // the plane layout
  for (const auto& fmt : {std::string("turboquant_4bit_nc"), std::string("turboquant_k3v4_nc")}) {
    DecodeCase c;
    c.fmt = fmt;
    c.hq = 40;
    c.hkv = 10;
    c.planes = true;
    c.lens = {17, 1000};
    run_decode(c);
  }
}

TEST_CASE("decode: 2 and 4 kv heads (Qwen 2.5 3B: 16 / 2, 7B: 28 / 4): compile-time heads, even / odd token rows", "[decode]") {
  // The 16-warp kernels (mse / turbo keys, head_dim 128) take 2 or 4 kv heads in one CTA with 8
  // or 4 warps per head, heads per CTA known at compile time; where 4 slots are 8 mod 16 bytes
  // (134-, 118-byte slots) MMA row r reads token 2r and row r + 8 token 2r + 1 (bank-conflict-free
  // key loads), so lengths that end inside a 16-token half (5, 17, 31, 47) mask odd and even rows.
  // G = 1, 4 (packed), 6, 7, 8 and 12 (heads per CTA at run time; both slices in one launch, the
  // CTA's warps split between them: work items here are ≤ 2049 tokens at every auto split count).
  struct H {
    int hq, hkv;
  };
  for (const auto& fmt : kDecodeFormats)
    for (const H h : {H{4, 4}, H{16, 4}, H{28, 4}, H{32, 4}, H{48, 4}, H{12, 2}, H{16, 2}}) {
      DecodeCase c;
      c.fmt = fmt;
      c.hq = h.hq;
      c.hkv = h.hkv;
      c.lens = {5, 17, 31, 47, 300, 2049};
      c.splits = h.hq == 28 ? 3 : 0;
      c.seed = uint64_t(h.hq * 100 + h.hkv + 7);
      run_decode(c, [&](const DecodePlan& plan, const Filled&) {
        INFO(fmt << " hq=" << h.hq << " hkv=" << h.hkv);
        REQUIRE(plan.heads_per_cta * plan.head_groups == h.hkv);
        if (fmt != "f16" && fmt != "turboquant_k8v4" && fmt != "turbo4-qjl") {  // the 16-warp kernels
          const int slices = h.hq / h.hkv > 8 ? 2 : 1;
          REQUIRE(plan.heads_per_cta == h.hkv);
          REQUIRE(plan.query_slices == slices);
          REQUIRE(plan.warps_per_head == 16 / (h.hkv * slices));
          REQUIRE(plan.threads == 512);
        }
      });
    }
}

TEST_CASE("decode: kv head counts split unevenly (Phi-4: 10 of k8v4), as 16-byte runs or whole token rows", "[decode]") {
  // Above the kernel's warps and not a multiple of 8, a CTA holds the largest divisor of n_kv_heads whose slots lie
  // in the cache as 16-byte runs (hpc · slot and the row n_kv_heads · slot multiples of 16: per-token copies), else
  // the largest whose CTA copies whole token rows (ring_heads = n_kv_heads) and reads its heads' slots in them.
  // The plans below are worked out by hand from the slot bytes (checked first); each decode is checked against
  // the float64 attention, single- and multi-query.
  struct H {
    const char* fmt;
    int d, slot, hq, hkv, hpc, ring_heads;
  };
  for (const H h : {H{"turboquant_k8v4", 128, 196, 40, 10, 5, 10},  // Phi-4: 5 · 196 = 980, 2 · 196 = 392, not 16k
                    H{"turboquant_k8v4", 128, 196, 12, 12, 4, 4},    // 4 · 196 = 784 = 49 · 16, 12 · 196 = 147 · 16
                    H{"turboquant_k8v4", 128, 196, 36, 9, 3, 9},     // 3 · 196 = 588: whole rows
                    H{"turbo4-qjl", 128, 136, 40, 10, 2, 2},        // 2 · 136 = 17 · 16, 10 · 136 = 85 · 16
                    H{"turboquant_4bit_nc", 256, 262, 40, 10, 5, 10},  // d 256's 8-warp kernels
                    H{"turboquant_3bit_nc", 256, 198, 20, 10, 5, 10}}) {
    REQUIRE(tq::cuda::kernel_format(tq::make_format(h.fmt, h.d)).slot_bytes == h.slot);
    for (int q_len : {1, 4}) {
      DecodeCase c;
      c.fmt = h.fmt;
      c.d = h.d;
      c.hq = h.hq;
      c.hkv = h.hkv;
      c.q_len = q_len;
      c.lens = {5, 17, 47, 300, 2049};  // ends inside either 16-token half
      c.seed = uint64_t(h.hkv * 100 + h.hpc * 10 + q_len);
      run_decode(c, [&](const DecodePlan& plan, const Filled&) {
        INFO(h.fmt << " d=" << h.d << " hkv=" << h.hkv << " q_len=" << q_len);
        REQUIRE(plan.heads_per_cta == h.hpc);
        REQUIRE(plan.ring_heads == h.ring_heads);
        REQUIRE(plan.head_groups == h.hkv / h.hpc);
        REQUIRE(plan.threads == 32 * plan.query_slices * h.hpc * plan.warps_per_head);
      });
    }
  }
}

TEST_CASE("launchers: n_kv_heads the decode kernels cannot stream are refused by name", "[api][quick]") {
  // The two counts of the host test "decode heads: counts whose whole token rows exceed shared memory" (why, there),
  // and 4bit_nc's 34 at d 128 (no divisor ≤ 16 with 16-byte runs; two stages of whole rows, 34 · 134 · 64 bytes,
  // beside the 16-warp kernels' 64 KB key LUT): the launcher's check and plan_decode refuse them.
  struct R {
    const char* fmt;
    int d, hkv;
  };
  for (const R r : {R{"turboquant_k8v4", 128, 19}, R{"turboquant_4bit_nc", 256, 14}, R{"turboquant_4bit_nc", 128, 34}}) {
    const auto kf = tq::cuda::kernel_format(tq::make_format(r.fmt, r.d));
    DevMem cache(16 * 16 * size_t(r.hkv) * size_t(kf.slot_bytes)), q(2 * size_t(r.hkv) * r.d * 2), tab(64), lens(64);
    const tq::cuda::PagedCache pc{cache.as<uint8_t>(), 16, 16, r.hkv, kf.slot_bytes, tq::cuda::CacheLayout::vllm};
    tq::cuda::DecodeParams p;
    p.query = p.out = q.as();
    p.q_stride_batch = p.o_stride_batch = int64_t(2 * r.hkv) * r.d;
    p.q_stride_head = p.o_stride_head = r.d;
    p.n_q_heads = 2 * r.hkv;
    p.attn_scale = 0.1f;
    p.blocks = {tab.as<int32_t>(), 4, lens.as<int32_t>(), 1};
    p.max_seq_len = 16;
    INFO(r.fmt << " d=" << r.d << " hkv=" << r.hkv);
    const std::string why = tq::cuda::decode_can_implement(kf, pc, p);
    REQUIRE_THAT(why, Catch::Matchers::Contains("n_kv_heads " + std::to_string(r.hkv) + " not supported") &&
                          Catch::Matchers::Contains(r.fmt));
    REQUIRE_THROWS_WITH(tq::cuda::plan_decode(kf, pc, p), Catch::Matchers::Contains("n_kv_heads"));
  }
}

TEST_CASE("decode: long contexts up to 32K and batch 64", "[decode]") {
  for (const auto& fmt : kDecodeFormats) {
    DecodeCase c;
    c.fmt = fmt;
    c.lens = {32768, 20001};
    c.seed = 5;
    const double e = run_decode(c);
    WARN(fmt << " 32K: max rel error " << e);
  }
  tq::Rng rng(9);
  DecodeCase c;
  c.fmt = "turboquant_4bit_nc";
  for (int i = 0; i < 64; ++i) c.lens.push_back(1 + int(rng.below(1500)));
  for (int splits : {0, 2}) {
    c.splits = splits;
    run_decode(c);
  }
}

// The batch's tokens are dealt out over the grid from the device's seq_lens (work items,
// decode_common.cuh): a long sequence among short and empty ones takes most of the items,
// with auto, one (one item per sequence) and fixed split counts, and in a batch of 200.
TEST_CASE("decode: ragged batches dealt out over the grid (long, short and empty sequences)", "[decode]") {
  for (const std::string fmt : {"turboquant_4bit_nc", "turboquant_k3v4_nc", "turbo4", "f16"})
    for (int splits : {0, 1, 2, 7}) {
      DecodeCase c;
      c.fmt = fmt;
      c.lens = {5000, 1, 0, 33, 0, 700, 17, 2, 2049};
      c.splits = splits;
      c.seed = uint64_t(300 + splits);
      run_decode(c);
    }
  tq::Rng rng(77);
  for (const std::string fmt : {"turboquant_4bit_nc", "f16"}) {
    DecodeCase c;
    c.fmt = fmt;
    c.hq = 16;
    c.hkv = 4;
    c.lens = {6000};
    for (int i = 0; i < 199; ++i) c.lens.push_back(int(rng.below(100)));  // some empty
    c.splits = 2;  // 400 items: sequences past the 128 whose lengths a lane keeps in registers (LaneLens)
    c.seed = 303;
    run_decode(c);
  }
}

// DecodePlan::balance_slots: where a one-wave grid would leave CTA slots idle, the quantized decode
// deals the tokens out in chunks of ⌈Σ tiles / slots⌉ with every sequence's short last chunk on those
// slots (dev::work_item_balanced), and falls back to the usual dealing on the device where the
// lengths leave the short chunks too long. The planner is made to choose it by a small SM count
// (4 sequences of ≤ 4000 tokens: the first count it takes); then equal lengths, ragged ones that
// still fit and ragged ones that fall back (an empty sequence among them), each against the
// float64 reference. Our FP16 kernel never balances.
TEST_CASE("decode: balanced dealing, short last chunks on the idle CTA slots (equal, ragged, fall-back lengths)",
          "[decode]") {
  const std::vector<std::vector<int>> lens_sets = {{4000, 4000, 4000, 4000}, {4000, 3000, 4000, 17},
                                                   {4000, 1500, 1500, 1500}, {4000, 0, 1, 4000},
                                                   {2500, 2500, 2500, 2500}};
  // whether dev::work_item_balanced keeps the balanced dealing for these lengths (its rule, in tiles)
  auto fits = [](const std::vector<int>& lens, int tile, int slots) {
    long long total = 0;
    for (int n : lens) total += (n + tile - 1) / tile;
    const long long L = std::max(1LL, (total + slots - 1) / slots);
    long long n1 = 0, rsum = 0;
    for (int n : lens) {
      const long long t = (n + tile - 1) / tile, c = t > L ? (t - 1) / L + 1 : 1;
      n1 += c - 1;
      rsum += t - (c - 1) * L + 2;
    }
    return n1 < slots && rsum <= (slots - n1) * (L + 2);
  };
  for (const std::string fmt : {"turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc", "turboquant_k8v4",
                                "turbo3", "turbo4-qjl", "f16"}) {
    INFO(fmt);
    int sm = 0;
    DecodePlan plan;
    {
      DecodeCase c;
      c.fmt = fmt;
      c.lens = lens_sets[0];
      tq::Rng rng(1);
      Filled F = fill_cache(c, rng);
      for (int n = 5; n <= 64 && !sm; ++n) {
        c.sm_count = n;
        plan = prepare(c, F, rng).plan;
        if (plan.balance_slots > 0) sm = n;
      }
      if (sm > 0) {  // DecodeParams::even_dealing turns it off: num_splits equal chunks per sequence
        c.sm_count = sm;
        c.even = true;
        const DecodePlan even = prepare(c, F, rng).plan;
        REQUIRE(even.balance_slots == 0);
        REQUIRE(even.num_splits == plan.num_splits);
        REQUIRE(even.items == even.num_splits * 4);
      }
    }
    if (fmt == "f16") {
      REQUIRE(sm == 0);
      continue;
    }
    REQUIRE(sm > 0);
    INFO("sm_count " << sm << " items " << plan.items << " balance_slots " << plan.balance_slots);
    REQUIRE(plan.items == plan.balance_slots + 4);
    REQUIRE(plan.balance_slots == sm * plan.ctas_per_sm);
    int kept = 0, fell_back = 0;
    for (size_t i = 0; i < lens_sets.size(); ++i) {
      DecodeCase c;
      c.fmt = fmt;
      c.lens = lens_sets[i];
      c.plan_max_len = 4000;
      c.sm_count = sm;
      c.seed = 900 + i;
      const double e = run_decode(c, [&](const DecodePlan& p, const Filled&) { REQUIRE(p.balance_slots == plan.balance_slots); });
      (fits(c.lens, 32 * plan.warps_per_head, plan.balance_slots) ? kept : fell_back)++;
      WARN(fmt << " balanced dealing on " << sm << " SMs, lengths set " << i << ": max rel error " << e);
    }
    REQUIRE(fits(lens_sets[0], 32 * plan.warps_per_head, plan.balance_slots));  // the planner's own case
    REQUIRE(kept >= 1);
    REQUIRE(fell_back >= 1);
  }
}

// DecodeParams::max_seq_len must bound every seq_len; a caller who plans for shorter sequences
// (a graph captured early, say) still gets exact results: a sequence may then take more
// work items than the plan's parts bound, and the merge walks its parts in several passes.
TEST_CASE("decode: sequences longer than the plan's max_seq_len (merge in several passes)", "[decode]") {
  for (const std::string fmt : {"turboquant_4bit_nc", "turboquant_k3v4_nc", "f16"})
    for (int splits : {0, 8}) {
      DecodeCase c;
      c.fmt = fmt;
      c.lens = {5000, 3, 700};
      c.plan_max_len = 40;
      c.splits = splits;
      c.seed = uint64_t(600 + splits);
      run_decode(c, [&](const DecodePlan& plan, const Filled& F) {
        INFO(fmt << " splits " << plan.num_splits << " items " << plan.items << " parts " << plan.parts
                 << " parts per item " << plan.part_warps);
        if (splits > 0)  // the long sequence's items outnumber the parts a pass holds
          REQUIRE(plan.parts < (plan.items - F.pg.batch + 1) * plan.part_warps);
      });
    }
}

// With ≥ 4 warps per kv head (≤ 4 kv heads per CTA of 16 warps, ≤ 2 of 8) and work items of ≥ 256 tokens (3bit_nc:
// any length), the CTA merges its warps' parts in shared memory (DecodePlan::part_warps 1): with one split each
// sequence is one item and goes straight to out, with two its item parts go through the workspace and the merge
// kernel; with the auto split count the items are a few hundred tokens, merged where they average ≥ 256 (3bit_nc:
// always). Every format, d 64 / 128 / 256, 1–4 kv heads, G 1–8, against float64 attention; the 17-token sequence
// leaves most warps' parts empty.
TEST_CASE("decode: the CTA merges its warps' parts (few kv heads, items of 256 tokens and more)", "[decode]") {
  struct H {
    int hq, hkv, d;
  };
  int merged = 0;
  for (const std::string& fmt : tq::cuda::gpu_formats(/*decode_only=*/true))  // (the quantized ones)
    for (const H h : {H{16, 2, 128}, H{32, 4, 128}, H{8, 1, 128}, H{12, 3, 128}, H{4, 4, 128}, H{16, 2, 64},
                      H{16, 2, 256}})
      for (const int splits : {1, 2, 0}) {
        DecodeCase c;
        c.fmt = fmt;
        c.hq = h.hq;
        c.hkv = h.hkv;
        c.d = h.d;
        c.lens = {3000, 17, 4100};
        c.splits = splits;
        c.seed = uint64_t(700 + 10 * h.hkv + splits);
        run_decode(c, [&](const DecodePlan& plan, const Filled& F) {
          INFO(fmt << " hq=" << h.hq << " hkv=" << h.hkv << " d=" << h.d << " splits " << plan.num_splits
                   << " warps per head " << plan.warps_per_head << " parts per item " << plan.part_warps);
          REQUIRE(parts_per_item(plan, /*may_merge=*/true));
          if (plan.part_warps == 1 && plan.warps_per_head > 1) {
            ++merged;
            // one part per item: a sequence of one item writes out directly, else the merge's bound
            if (splits > 0) REQUIRE(plan.parts == (splits == 1 ? 1 : plan.items - F.pg.batch + 1));
          }
          // (the path runs: finish_plan's average item length, the longest sequence's tokens per item, ≥ 256)
          if (fmt == "turboquant_4bit_nc" && h.d == 128 && h.hkv == 2 && c.lens[2] * F.pg.batch >= 256 * plan.items)
            REQUIRE(plan.part_warps == 1);
          // 3bit_nc merges short work items too (the auto split count's, a few hundred tokens each)
          if (fmt == "turboquant_3bit_nc" && h.d == 128 && h.hkv == 2) REQUIRE(plan.part_warps == 1);
        });
      }
  REQUIRE(merged >= 40);
}

// A constant value vector stores scale 0 (the vLLM presets: (max − min)/15 floored at 1e-8, which is 0
// in fp16) and a zero vector a zero norm (turbo): P' = p·scale is 0 for those tokens whatever their
// weight p, which must still count in Σp (and, for a constant, Σp·zero). One token-head in five of
// each kind, so a kernel that dropped their weight would be off by ~20%; every query-column layout
// (G 1 and 4 packed, 8 unpacked with compile-time and run-time heads, 12 in two launches, 16 in one).
TEST_CASE("decode: constant and zero value vectors (zero value scale / norm)", "[decode]") {
  struct H {
    int hq, hkv, splits;
  };
  for (const auto& fmt : kDecodeFormats)
    for (const H h : {H{8, 8, 0}, H{32, 8, 0}, H{64, 8, 0}, H{16, 2, 0}, H{24, 3, 2}, H{96, 8, 1}, H{128, 8, 0}}) {
      DecodeCase c;
      c.fmt = fmt;
      c.hq = h.hq;
      c.hkv = h.hkv;
      c.splits = h.splits;
      c.lens = {5, 40, 700};
      c.special_v = 5;
      c.q_sigma = 0.5;
      c.seed = 41 + uint64_t(h.hq);
      const double e = run_decode(c);
      WARN(fmt << " " << h.hq << "/" << h.hkv << " constant / zero values: max rel error " << e);
    }
}

// Keys that are one-hot before the rotation (half the token-heads) with peaked logits: every
// coordinate of such a key lands in the same magnitude class, so any per-code error in the nc
// norm's Σc² is multiplied by the dimension instead of averaging out (Σc² from plain fp16 squares
// reached 1.24e-3 here, above the 1e-3 bound).
TEST_CASE("decode: flat keys (one-hot before the rotation) at large logits", "[decode]") {
  for (const auto& fmt : {std::string("turboquant_4bit_nc"), std::string("turboquant_k3v4_nc"),
                          std::string("turboquant_3bit_nc"), std::string("f16")})
    for (int hq : {32, 64}) {
      DecodeCase c;
      c.fmt = fmt;
      c.hq = hq;
      c.lens = {100, 3000};
      c.q_sigma = 8.0;
      c.spike_k = 2;
      c.seed = 51 + uint64_t(hq);
      const double e = run_decode(c);
      WARN(fmt << " G=" << hq / 8 << " flat keys, large logits: max rel error " << e);
    }
}

TEST_CASE("decode: large logits (peaked softmax)", "[decode]") {
  for (const auto& fmt : {std::string("turboquant_4bit_nc"), std::string("turboquant_k3v4_nc"), std::string("turbo4"),
                          std::string("f16")}) {
    DecodeCase c;
    c.fmt = fmt;
    c.lens = {100, 3000};
    c.q_sigma = 8.0;
    c.seed = 21;
    run_decode(c);
  }
}

// The quantized decode skips the cross-lane max while no logit exceeds the running
// maxima (Softmax32::try_keep*) and takes the full update when one does: growing key norms
// make new maxima appear all along the sequence (over the 9000 tokens the largest logit grows from
// about 1.5 to about 10 log2 units, several times Softmax32::kHeadroom), so both paths alternate.
// q_sigma 0.5 keeps the last keys' logits at the scale of the other cases: with q_sigma 2
// they reach ~4× it and the G = 8 kernel measured 1.1e-3 relative error on one head of the
// 9000-token sequence (errors proportional to the logits, such as the fp16 centroids'
// 7.4e-5, grow with them; the G = 4 kernel stayed at 6.9e-4).
TEST_CASE("decode: running maxima that keep rising (lazy softmax rescale)", "[decode]") {
  for (const auto& fmt : kDecodeFormats)
    for (int hq : {32, 64}) {  // packed (G = 4) and unpacked (G = 8) query columns
      DecodeCase c;
      c.fmt = fmt;
      c.hq = hq;
      c.lens = {77, 1500, 9000};
      c.key_ramp = 3.0;
      c.q_sigma = 0.5;
      c.seed = 31 + uint64_t(hq);
      const double e = run_decode(c);
      WARN(fmt << " G=" << hq / 8 << " rising maxima: max rel error " << e);
    }
}

// bf16 queries and outputs (and bf16 keys and values stored into the cache): the single-part write-out, the
// merge, the turbo formats' rotated write-out, multi-query launches (one and two N-tiles) and G 16.
static void run_bf16(const std::string& fmt, bool quick) {
  DecodeCase c;
  c.fmt = fmt;
  c.bf16 = true;
  c.hq = 8;
  c.hkv = 2;
  c.lens = {1, 17, 40};
  c.splits = 2;
  run_decode(c);
  c.lens = {33};  // one part per sequence at splits 1 and one warp's tokens: the output written by stage 1
  c.splits = 1;
  c.hkv = 1;
  run_decode(c);
  c.lens = {0, 300, 2};
  c.splits = 3;
  run_decode(c);
  c.hq = 32;  // 32/8, q_len 4: 16 columns per kv head
  c.hkv = 8;
  c.q_len = 4;
  c.lens = {3, 4, 35, 700};
  c.splits = 0;
  for (const int tiles : {0, 2}) {
    c.tiles = tiles;
    run_decode(c);
  }
  if (quick) return;
  c.tiles = 0;
  c.q_len = 1;
  c.hq = 128;  // G 16
  c.lens = kRagged;
  run_decode(c);
  c.hq = 64;  // G 8, q_len 7, ragged
  c.q_len = 7;
  c.lens = {5, 7, 64, 65, 2500};
  run_decode(c);
}

TEST_CASE("decode: bf16 queries and outputs, every quantized format", "[decode][bf16]") {
  for (const auto& fmt : kDecodeFormats)
    if (fmt != "f16") run_bf16(fmt, false);
}

TEST_CASE("decode: bf16 quick subset", "[decode][bf16][quick]") {
  for (const auto& fmt : {"turboquant_4bit_nc", "turboquant_k8v4", "turbo3"}) run_bf16(fmt, true);
}

TEST_CASE("decode: quick subset", "[decode][quick]") {
  for (const auto& fmt : kDecodeFormats) {
    DecodeCase c;
    c.fmt = fmt;
    c.hq = 8;
    c.hkv = 2;
    c.lens = {1, 17, 40};
    c.splits = 2;
    run_decode(c);
    c.lens = {33};
    c.splits = 1;
    c.hkv = 1;
    run_decode(c);
    c.lens = {0, 300, 2};  // an empty sequence, and items the lengths leave unused
    c.splits = 3;
    run_decode(c);
    c.hq = 24;  // G = 12 over 2 kv heads: both slices (8 + 4 query columns) in one launch (short items)
    c.hkv = 2;
    c.lens = {1, 17, 40};
    c.splits = 2;
    run_decode(c);
    c.splits = 1;  // one work item of 2100 tokens: two stage-1 launches, the second packed
    c.lens = {2100, 17};
    run_decode(c);
    c.lens = {1, 17, 40};
    c.splits = 2;
    c.hq = 128;  // G = 16 over 8 kv heads (8 heads per CTA: mse / fp8 keys with uniform values two N-tiles
                 // per warp; turbo keys both slices in one launch, compile-time heads; turbo4-qjl: two launches)
    c.hkv = 8;
    run_decode(c);
    c.hq = 40;  // 10 kv heads: one CTA (16-warp kernels), else CTAs of 5 reading whole token rows or of 2
    c.hkv = 10;
    c.lens = {17, 40};
    run_decode(c);
    c.hq = 28;  // 4 kv heads, G = 7 (Qwen 2.5 7B): the 4-head kernels, even / odd token rows
    c.hkv = 4;
    c.lens = {17, 40};
    run_decode(c);
    c.hq = 32;  // 16 kv heads: one CTA of 16 (mse / turbo keys at d 128: the LUT at 128 KB for 134-byte
    c.hkv = 16;  // slots), else two of 8
    run_decode(c);
  }
}
