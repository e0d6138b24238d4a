// Multi-query decode (q_len > 1 query tokens per sequence, causal within the chunk) against the
// float64 causal reference (decode_fixture.h), its plans, CUDA-graph replays and argument checks.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "decode_fixture.h"
#include "tq/cuda/decode.h"
#include "tq/cuda/kernel_format.h"
#include "tq/format.h"

using namespace tqtest;
using tq::cuda::DecodePlan;

// Multi-query (q_len > 1): every query token against the float64 causal reference.
static void run_multi_query(const std::string& fmt, bool quick) {
  DecodeCase c;
  c.fmt = fmt;
  struct Shape {
    int hq, hkv, d;
    bool wide = false;  // G 12 / 16: q_len 2 and 7 only, contexts ≤ 700 (the float64 reference's time)
  };
  // G 4 (32/8: 16-column launches for q_len 4, two N-tiles per warp where the format has them), G 1 (MHA),
  // G 8, 2 kv heads (Qwen 2.5 1.5B), d 64 (8 kv heads: the two-tile kernel) / 256, G 12 (96/8: 24 or 84
  // columns, in launches of ≤ 16) and G 16 (Llama 3.1 405B's 128/8)
  const std::vector<Shape> shapes = quick ? std::vector<Shape>{{32, 8, 128}, {8, 2, 128}}
                                          : std::vector<Shape>{{32, 8, 128}, {8, 8, 128}, {64, 8, 128}, {12, 2, 128},
                                                               {16, 4, 64}, {32, 8, 64}, {16, 2, 256},
                                                               {96, 8, 128, true}, {128, 8, 128, true}};
  for (const auto& sh : shapes)
    for (const int q_len : quick     ? std::vector<int>{2, 5}
                           : sh.wide ? std::vector<int>{2, 7}
                                     : std::vector<int>{2, 4, 7, 16, 33}) {
      c.hq = sh.hq;
      c.hkv = sh.hkv;
      c.d = sh.d;
      c.q_len = q_len;
      // a sequence shorter than the chunk (its first queries see nothing), one of exactly q_len, chunks whose
      // causal tail crosses a 32-token sub-tile and a work item's end, a long one
      // each with the planner's tiles, then two N-tiles per warp forced (the planner takes one tile for
      // these short work items where the launch has both slices)
      for (const int tiles : {0, 2}) {
        if (tiles == 2 && fmt == "f16") continue;  // (our FP16 decode has no tile choice)
        c.tiles = tiles;
        c.lens = {3, q_len, 31 + q_len, 100, quick || sh.wide ? 700 : 2500};
        c.splits = 0;
        run_decode(c);
        c.splits = 3;
        c.lens = {q_len + 1, 64, 65};
        run_decode(c);
      }
    }
}

TEST_CASE("decode: multi-query (q_len 2 … 33, causal within the chunk), every format and our FP16 decode", "[decode][multi]") {
  for (const auto& fmt : kDecodeFormats) run_multi_query(fmt, false);
}

TEST_CASE("decode: multi-query quick subset", "[decode][multi][quick]") {
  for (const auto& fmt : {"turboquant_4bit_nc", "turboquant_k8v4", "turbo3", "turbo4-qjl", "f16"}) run_multi_query(fmt, true);
}

// Variable query counts (DecodeParams::q_start, vLLM's query_start_loc): sequences of 1 … 16 queries in
// one launch, flattened rows, against the float64 causal reference; with q_len 1 (one query each) the
// plain path.
static void run_varlen(const std::string& fmt, bool quick) {
  struct Shape {
    int hq, hkv, d;
  };
  const std::vector<Shape> shapes = quick ? std::vector<Shape>{{32, 8, 128}}
                                          : std::vector<Shape>{{32, 8, 128}, {8, 2, 128}, {32, 8, 64}, {16, 2, 256}};
  for (const auto& sh : shapes) {
    DecodeCase c;
    c.fmt = fmt;
    c.hq = sh.hq;
    c.hkv = sh.hkv;
    c.d = sh.d;
    // a sequence shorter than its queries (its first sees nothing), one query, the longest chunk on the
    // longest sequence, one whose causal tail crosses a 32-token sub-tile, two
    c.q_counts = {4, 1, 16, 7, 2};
    c.q_len = 16;
    c.lens = {3, 64, quick ? 700 : 2500, 100, 33};
    for (const int tiles : {0, 2}) {
      if (tiles == 2 && fmt == "f16") continue;
      c.tiles = tiles;
      for (const int splits : {0, 3}) {
        c.splits = splits;
        run_decode(c);
      }
    }
    c.tiles = 0;
    c.splits = 0;
    c.q_counts = {3, 1, 2};  // q_len 3 (one launch of 3 · G columns)
    c.q_len = 3;
    c.lens = {40, 1, 129};
    run_decode(c);
    c.q_counts = {1, 1, 1};  // q_len 1: q_start not read, the rows are the sequences
    c.q_len = 1;
    run_decode(c);
  }
  if (quick) return;
  // Each launch deals its items over the sequences with queries in it (dev::QueryCut) and the merge repeats
  // that dealing per row: one long chunk among single-query sequences (launches 2–4 serve it alone), and G 7
  // with q_len 3 (21 columns: launches of 11 + 10 columns where a CTA runs both slices, 16 + 5 with two
  // N-tiles per warp, so a launch starts inside a query's columns).
  DecodeCase c;
  c.fmt = fmt;
  c.q_counts = {1, 1, 16, 1, 1, 1};
  c.q_len = 16;
  c.lens = {300, 2000, 2600, 50, 1, 700};
  for (const int splits : {0, 4}) {
    c.splits = splits;
    run_decode(c);
  }
  c.hq = 14;
  c.hkv = 2;
  c.q_counts = {3, 1, 2, 3};
  c.q_len = 3;
  c.lens = {900, 40, 1300, 5};
  for (const int d : {128, 256}) {
    c.d = d;
    for (const int splits : {0, 3}) {
      c.splits = splits;
      run_decode(c);
    }
  }
}

TEST_CASE("decode: variable query counts per sequence (query_start_loc), every format and our FP16 decode",
          "[decode][multi][varlen]") {
  for (const auto& fmt : kDecodeFormats) run_varlen(fmt, false);
}

TEST_CASE("decode: variable query counts quick subset", "[decode][multi][varlen][quick]") {
  for (const auto& fmt : {"turboquant_4bit_nc", "turbo3", "f16"}) run_varlen(fmt, true);
}

// Captures one decode of c in a CUDA graph, then replays it once per entry of `replays` (new lengths over
// the same pages and, for variable query counts, new counts of the same rows, uploaded before the replay
// as an engine's graph reads its metadata buffers), each output against the float64 reference.
struct Replay {
  std::vector<int> lens, q_counts;  // q_counts: empty = c's
};
static void check_graph_replays(const DecodeCase& c, uint64_t seed, const std::vector<Replay>& replays) {
  tq::Rng rng(seed);
  Filled F = fill_cache(c, rng);
  DecodeRun R = prepare(c, F, rng);
  cudaStream_t s;
  TQ_CUDA_CHECK(cudaStreamCreate(&s));
  cudaGraph_t graph;
  TQ_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  launch(c, F, R, s);
  TQ_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec;
  TQ_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (const Replay& rp : replays) {
    DecodeCase r = c;
    if (!rp.q_counts.empty()) r.q_counts = rp.q_counts;
    if (!r.q_counts.empty()) R.q_start->upload(query_starts(r));
    F.lens->upload(rp.lens);
    R.out->fill(0xff);
    TQ_CUDA_CHECK(cudaGraphLaunch(exec, s));
    TQ_CUDA_CHECK(cudaStreamSynchronize(s));
    check_output(r, F, R, rp.lens);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

TEST_CASE("decode: fixed splits replay from a CUDA graph with new seq_lens", "[decode][graph]") {
  DecodeCase c;
  c.fmt = "turboquant_4bit_nc";
  c.lens = {700, 3000, 64};
  c.splits = 4;
  check_graph_replays(c, 31, {{c.lens, {}}, {{1, 2999, 17}, {}}});  // the captured lengths, then new ones on the same pages
}

TEST_CASE("decode: multi-query from a CUDA graph, replayed with new seq_lens", "[decode][graph][multi][quick]") {
  for (const char* fmt : {"turboquant_k3v4_nc", "f16"}) {
    DecodeCase c;
    c.fmt = fmt;
    c.q_len = 4;
    c.lens = {700, 3000, 64};
    c.splits = 4;
    check_graph_replays(c, 37, {{c.lens, {}}, {{2, 2999, 17}, {}}});
  }
}

// A captured decode with variable query counts replayed with other counts of the same rows and new lengths.
TEST_CASE("decode: variable query counts from a CUDA graph, replayed with new counts", "[decode][graph][multi][varlen][quick]") {
  for (const char* fmt : {"turboquant_4bit_nc", "f16"}) {
    DecodeCase c;
    c.fmt = fmt;
    c.q_counts = {4, 2, 3};
    c.q_len = 4;
    c.lens = {700, 3000, 64};
    c.splits = 4;
    check_graph_replays(c, 41, {{c.lens, {}}, {{2, 2999, 17}, {1, 4, 4}}, {{3, 5, 64}, {3, 3, 3}}});
  }
}

// Which multi-query kernels the planner takes: two 8-column N-tiles per warp in CTAs of 8 warps (one
// per kv head) for every quantized format but turbo4-qjl at 8 heads per CTA and more than 8 columns per kv head,
// launches of ≤ 16 columns, where work items stream more than 128 tokens (or one tile would take more
// launches); else the one-tile kernels.
TEST_CASE("decode: multi-query plans take two N-tiles per warp where the format has them", "[decode][multi][quick]") {
  struct Want {
    const char* fmt;
    int d, hq, hkv, q_len, tiles, passes;
    int force = 0;   // DecodeParams::column_tiles
    int splits = 1;  // 1: work items of 300 tokens (two_tile_items); 0: auto, items of ≤ 32 tokens
  };
  const Want wants[] = {
      {"turboquant_4bit_nc", 128, 32, 8, 4, 2, 1},   // 16 columns: one launch
      {"turboquant_k3v4_nc", 128, 32, 8, 5, 2, 2},   // 20: 16 + 4
      {"turboquant_3bit_nc", 64, 32, 8, 16, 2, 4},   // 64: four passes of 16 (one launch)
      {"turboquant_k8v4", 128, 64, 8, 2, 2, 1},      // G 8, 16 columns
      {"turboquant_4bit_nc", 128, 32, 8, 2, 1, 1},   // 8 columns: one tile
      {"turboquant_4bit_nc", 128, 8, 2, 4, 1, 1},    // 2 kv heads per CTA: the one-tile kernels, both slices
      {"turbo3", 128, 32, 8, 4, 2, 1},               // turbo keys and values: two tiles as well
      {"turbo4-qjl", 128, 32, 8, 4, 1, 2},           // QJL sign term (second accumulators): one tile, 8 warps
      {"turboquant_4bit_nc", 128, 32, 8, 4, 1, 1, 1},  // one tile asked for: both slices, 16 warps
      {"turboquant_k8v4", 128, 32, 8, 4, 1, 2, 1},     // one tile asked for, 8-warp kernel: two launches
      {"turboquant_4bit_nc", 128, 32, 8, 4, 1, 1, 0, 0},   // short items: one tile, both slices, one launch
      {"turboquant_3bit_nc", 64, 32, 8, 16, 1, 4, 0, 0},   // short items: four passes of both slices
      {"turboquant_4bit_nc", 128, 32, 8, 4, 2, 1, 2, 0},   // short items, two tiles asked for
      {"turboquant_k8v4", 128, 64, 8, 2, 2, 1, 0, 0},      // short items, 8-warp kernel: two tiles (one launch)
  };
  for (const Want& w : wants) {
    DecodeCase c;
    c.fmt = w.fmt;
    c.d = w.d;
    c.hq = w.hq;
    c.hkv = w.hkv;
    c.q_len = w.q_len;
    c.tiles = w.force;
    c.splits = w.splits;
    c.lens = {w.q_len + 40, 300};
    INFO(w.fmt << " d " << w.d << " " << w.hq << "/" << w.hkv << " q_len " << w.q_len << " tiles asked " << w.force
               << " splits " << w.splits);
    run_decode(c, [&](const DecodePlan& plan, const Filled&) {
      INFO("plan: splits " << plan.num_splits << " items " << plan.items << " threads " << plan.threads);
      if (w.splits == 0 && w.tiles == 1) REQUIRE(plan.num_splits * 128 >= 300);  // the short items the row is about
      REQUIRE(plan.column_tiles == w.tiles);
      REQUIRE(plan.query_passes == w.passes);
      if (w.tiles == 2) REQUIRE((plan.threads == 256 && plan.heads_per_cta == 8 && plan.warps_per_head == 1));
    });
  }
  // 32/8, B 32 of 32K tokens on 132 SMs, two N-tiles (CTAs of 8 warps, one per SM, 8 kv heads each): q_len 4's
  // 16 columns are one pass of 32 · 4 splits = 128 CTAs; q_len 16's four passes of 16 run side by side in one
  // launch, 4 · 32 CTAs, so one split each and no parts to merge (the staged queries and outputs alone)
  const auto kf = tq::cuda::kernel_format(tq::make_format("turboquant_4bit_nc", 128));
  DevMem cache(1 << 20), tab(32 * 4 * 4), lens(32 * 4), q(32 * 16 * 32 * 128 * 2), out(32 * 16 * 32 * 128 * 2);
  const tq::cuda::PagedCache pc{cache.as<uint8_t>(), 32, 16, 8, kf.slot_bytes};
  tq::cuda::DecodeParams p;
  p.query = q.as();
  p.out = out.as();
  p.q_stride_head = p.o_stride_head = 128;
  p.q_stride_token = p.o_stride_token = 32 * 128;
  p.n_q_heads = 32;
  p.attn_scale = 0.1f;
  p.blocks = {tab.as<int32_t>(), 4, lens.as<int32_t>(), 32};  // (table, stride, seq_lens, batch)
  p.max_seq_len = 32768;
  p.q_len = 4;
  p.q_stride_batch = p.o_stride_batch = 4 * 32 * 128;
  const DecodePlan q4 = tq::cuda::plan_decode(kf, pc, p, 132);
  INFO("q_len 4: splits " << q4.num_splits << " items " << q4.items << " parts " << q4.parts);
  REQUIRE((q4.column_tiles == 2 && q4.query_passes == 1 && q4.num_splits == 4 && q4.items == 128 && q4.parts > 1));
  p.q_len = 16;
  p.q_stride_batch = p.o_stride_batch = 16 * 32 * 128;
  const DecodePlan q16 = tq::cuda::plan_decode(kf, pc, p, 132);
  INFO("q_len 16: splits " << q16.num_splits << " items " << q16.items << " parts " << q16.parts);
  REQUIRE((q16.column_tiles == 2 && q16.query_passes == 4 && q16.num_splits == 1 && q16.items == 32 && q16.parts == 1));
}

TEST_CASE("launchers: multi-query arguments are checked by name", "[api][multi][quick]") {
  DecodeCase c;
  c.fmt = "turboquant_4bit_nc";
  c.lens = {40};
  c.q_len = 3;
  tq::Rng rng(5);
  Filled F = fill_cache(c, rng);
  DecodeRun R = prepare(c, F, rng);
  const auto kf = tq::cuda::kernel_format(tq::make_format(c.fmt, c.d));
  const tq::cuda::PagedCache pc{F.cache->as<uint8_t>(), F.pg.num_blocks, c.bs, c.hkv, F.slot_bytes, c.layout()};
  using Catch::Matchers::Contains;
  auto p = R.p;
  p.q_len = 0;
  REQUIRE_THROWS_WITH(tq::cuda::plan_decode(kf, pc, p), Contains("q_len 0 must be 1"));
  p.q_len = tq::cuda::kMaxQueryLen + 1;
  REQUIRE_THROWS_WITH(tq::cuda::plan_decode(kf, pc, p), Contains("dense"));
  p = R.p;
  p.q_stride_token = 0;
  REQUIRE_THROWS_WITH(tq::cuda::plan_decode(kf, pc, p), Contains("q_stride_token"));
  p = R.p;
  p.q_len = 2;  // a plan for q_len 3 used for q_len 2
  REQUIRE_THROWS_WITH(tq::cuda::paged_decode(kf, pc, p, R.plan, R.ws->as()), Contains("plan is for q_len 3"));
  const tq::cuda::PagedCache planes{F.cache->as<uint8_t>(), F.pg.num_blocks, c.bs, c.hkv, F.slot_bytes,
                                    tq::cuda::CacheLayout::planes};
  REQUIRE_THROWS_WITH(tq::cuda::plan_decode(kf, planes, R.p), Contains("vLLM cache layout"));
  // our FP16 decode: the same checks (plans only: its K/V here are the quantized cache's bytes)
  const tq::cuda::PagedCacheF16 f16{F.cache->as(), F.cache->as(), F.pg.num_blocks, c.bs, c.hkv, c.d};
  const DecodePlan pf = tq::cuda::plan_decode_f16(f16, R.p);
  REQUIRE((pf.q_len == 3 && pf.query_passes == 1 && pf.workspace_bytes > 0));  // 12 columns: one launch
  p = R.p;
  p.q_len = tq::cuda::kMaxQueryLen + 1;
  REQUIRE_THROWS_WITH(tq::cuda::plan_decode_f16(f16, p), Contains("dense"));
  p = R.p;
  p.o_stride_token = 0;
  REQUIRE_THROWS_WITH(tq::cuda::plan_decode_f16(f16, p), Contains("o_stride_token"));
  p = R.p;
  p.q_len = 2;
  REQUIRE_THROWS_WITH(tq::cuda::paged_decode_f16(f16, p, pf, R.ws->as()), Contains("plan is for q_len 3"));
  // query / output types: bf16 is the quantized decode's; a plan is for one type; unknown values are refused
  p = R.p;
  p.dtype = tq::cuda::Dtype16::bf16;
  REQUIRE_THROWS_WITH(tq::cuda::plan_decode_f16(f16, p), Contains("FP16 baseline takes fp16 only"));
  REQUIRE_THROWS_WITH(tq::cuda::paged_decode(kf, pc, p, R.plan, R.ws->as()), Contains("plan is for fp16 queries"));
  REQUIRE(tq::cuda::plan_decode(kf, pc, p).dtype == tq::cuda::Dtype16::bf16);
  p.dtype = static_cast<tq::cuda::Dtype16>(5);
  REQUIRE_THROWS_WITH(tq::cuda::plan_decode(kf, pc, p), Contains("unknown query/out dtype 5"));
}
