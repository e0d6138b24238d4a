// Paged dequant against the CPU decoder (bit for bit), and the launchers' argument checks.
#include <catch2/catch.hpp>

#include <array>
#include <cstdio>
#include <string>
#include <vector>

#include "decode_fixture.h"
#include "tq/cuda/decode.h"
#include "tq/cuda/dequant.h"
#include "tq/cuda/kernel_format.h"
#include "tq/cuda/store.h"
#include "tq/error.h"
#include "tq/format.h"

using namespace tqtest;
using tq::cuda::DecodePlan;

namespace {

// dequant_paged of a store_kv-filled cache (fp16 and bf16, 16- and 2-byte aligned outputs) ==
// the CPU decoder's output rounded to the type, bit for bit; rows between sequences stay
// poisoned. bad_dtype: also an output type the kernel does not have, refused by name.
void check_dequant_bitexact(const std::string& fmt, int d, int hkv, int bs, uint64_t seed, bool bad_dtype = false) {
  using tq::cuda::DequantDtype;
  DecodeCase c;
  c.fmt = fmt;
  c.d = d;
  c.hkv = hkv;
  c.bs = bs;
  c.lens = {1, 16, 17, 250};
  INFO(fmt << " d=" << d << " kv heads " << c.hkv << " block size " << c.bs);
  tq::Rng rng(seed);
  Filled F = fill_cache(c, rng);
  const tq::cuda::KernelFormat kf = tq::cuda::kernel_format(tq::make_format(fmt, d));
  // output rows: sequence b starts at first[b] + 3b, leaving 3 poisoned rows between sequences
  std::vector<int32_t> offs(size_t(F.pg.batch));
  for (int b = 0; b < F.pg.batch; ++b) offs[size_t(b)] = int32_t(F.first[size_t(b)] + 3 * b);
  const size_t rows = size_t(F.pg.total_tokens + 3 * F.pg.batch);
  const size_t n = rows * c.hkv * d;
  DevMem doffs(offs.size() * 4), ko(n * 2 + 16), vo(n * 2 + 16);
  doffs.upload(offs);
  // sh: output offset in elements; 0 keeps K/V 16-byte aligned (16-byte stores), 1 makes them
  // 2-byte aligned (2-byte stores)
  auto params = [&](DequantDtype dt, size_t sh) {
    tq::cuda::DequantParams p;
    p.cache = {F.cache->as<uint8_t>(), F.pg.num_blocks, c.bs, c.hkv, F.slot_bytes};
    p.blocks = {F.table->as<int32_t>(), F.pg.stride, F.lens->as<int32_t>(), F.pg.batch};
    p.out_offsets = doffs.as<int32_t>();
    p.k_out = static_cast<uint16_t*>(ko.as()) + sh;
    p.v_out = static_cast<uint16_t*>(vo.as()) + sh;
    p.max_seq_len = F.pg.max_len;
    p.dtype = dt;
    return p;
  };
  for (const int pass : {0, 1, 2, 3}) {
    const DequantDtype dt = pass & 1 ? DequantDtype::bf16 : DequantDtype::f16;
    const bool bf = dt == DequantDtype::bf16;
    const size_t sh = pass >= 2 ? 1 : 0;
    ko.fill(0xff);
    vo.fill(0xff);
    tq::cuda::dequant_paged(kf, params(dt, sh));
    device_sync();
    const auto kg = ko.download<uint16_t>(n + sh), vg = vo.download<uint16_t>(n + sh);
    // every element compared; the first mismatch (if any) is reported with its place (one assertion per
    // element with its message took ~1 µs each, most of this test's time)
    std::vector<uint8_t> written(rows, 0);
    int64_t mismatches = 0;
    std::string first;
    for (int b = 0; b < F.pg.batch; ++b)
      for (int t = 0; t < F.pg.lens[size_t(b)]; ++t) {
        written[size_t(offs[size_t(b)] + t)] = 1;
        for (int h = 0; h < c.hkv; ++h)
          for (int j = 0; j < d; ++j) {
            const size_t src = ((size_t(F.first[size_t(b)]) + t) * c.hkv + h) * d + j;
            const size_t dst = ((size_t(offs[size_t(b)]) + t) * c.hkv + h) * d + j;
            const bool k_ok = kg[sh + dst] == to_16(F.k[src], bf), v_ok = vg[sh + dst] == to_16(F.v[src], bf);
            if (k_ok && v_ok) continue;
            if (!mismatches++) {
              char buf[128];
              std::snprintf(buf, sizeof buf, "sequence %d position %d head %d dim %d: %s 0x%04x, want 0x%04x", b, t,
                            h, j, k_ok ? "V" : "K", unsigned(k_ok ? vg[sh + dst] : kg[sh + dst]),
                            unsigned(k_ok ? to_16(F.v[src], bf) : to_16(F.k[src], bf)));
              first = buf;
            }
          }
      }
    int64_t overwritten = 0;  // rows between sequences stay poisoned
    for (size_t r = 0; r < rows; ++r)
      if (!written[r])
        for (size_t i = 0; i < size_t(c.hkv) * d; ++i)
          overwritten += (kg[sh + r * c.hkv * d + i] != 0xffff) + (vg[sh + r * c.hkv * d + i] != 0xffff);
    INFO((bf ? "bf16" : "fp16") << (sh ? " unaligned" : "") << ": " << mismatches << " elements differ from the "
                                << "CPU decoder's; first " << first);
    REQUIRE(mismatches == 0);
    REQUIRE(overwritten == 0);
  }
  if (bad_dtype)
    REQUIRE_THROWS_WITH(tq::cuda::dequant_paged(kf, params(static_cast<DequantDtype>(7), 0)),
                        Catch::Matchers::Contains("unknown output dtype 7"));
}

}  // namespace

TEST_CASE("dequant: fp16 and bf16 K and V equal the CPU decoder bit for bit", "[dequant]") {
  uint64_t seed = 40;
  for (const std::string fmt : {"turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc", "turboquant_k8v4",
                                "turbo2", "turbo3", "turbo4", "turbo4-qjl"})
    for (int d : {64, 128, 256}) {
      // block sizes and kv-head counts vary over the cases: a warp of the quad kernel takes
      // 8 consecutive token-heads, so with 1, 2 or 3 heads its rows span tokens (and pages)
      const int k = int(seed - 40);
      check_dequant_bitexact(fmt, d, std::array{2, 1, 3, 8}[size_t(k % 4)], std::array{16, 32, 64, 128}[size_t(k / 4 % 4)],
                             seed, fmt == "turbo4" && d == 256);
      ++seed;
    }
}

TEST_CASE("dequant: quick subset", "[dequant][quick]") {
  check_dequant_bitexact("turboquant_4bit_nc", 128, 2, 16, 150);
  check_dequant_bitexact("turbo4-qjl", 128, 2, 16, 151);
  check_dequant_bitexact("turbo4-qjl", 64, 3, 32, 152);
}

TEST_CASE("launchers: invalid arguments throw tq::Error naming the problem", "[api][quick]") {
  using Catch::Matchers::Contains;
  REQUIRE_THROWS_WITH(tq::cuda::kernel_format(tq::make_format("k=mse4+nc,v=u4,rot=haar:1", 128)),
                      Contains("rotation 'haar:1'"));
  REQUIRE_THROWS_WITH(tq::cuda::kernel_format(tq::make_format("q8_0", 128)), Contains("not supported"));
  const auto kf = tq::cuda::kernel_format(tq::make_format("turboquant_4bit_nc", 128));
  DevMem cache(1 << 20), tab(64), lens(64), q(4096), out(4096);
  tq::cuda::PagedCache pc{cache.as<uint8_t>(), 4, 16, 2, kf.slot_bytes};
  tq::cuda::DecodeParams p;
  p.query = q.as();
  p.out = out.as();
  p.q_stride_batch = p.o_stride_batch = 4 * 128;
  p.q_stride_head = p.o_stride_head = 128;
  p.n_q_heads = 4;
  p.attn_scale = 0.1f;
  p.blocks = {tab.as<int32_t>(), 4, lens.as<int32_t>(), 1};
  REQUIRE(tq::cuda::decode_can_implement(kf, pc, p).empty());
  auto bad = pc;
  bad.slot_bytes = 132;
  REQUIRE_THROWS_WITH(tq::cuda::plan_decode(kf, bad, p), Contains("slot_bytes 132"));
  bad = pc;
  bad.block_size = 8;
  REQUIRE_THROWS_WITH(tq::cuda::plan_decode(kf, bad, p), Contains("block_size 8"));
  auto pg = p;
  pg.n_q_heads = 40;  // 20 per kv head: three stage-1 launches of 8, 8 and 4 query columns
  REQUIRE(tq::cuda::decode_can_implement(kf, pc, pg).empty());
  REQUIRE(tq::cuda::plan_decode(kf, pc, pg).query_passes == 3);
  REQUIRE(tq::cuda::plan_decode(kf, pc, p).query_passes == 1);
  pg.n_q_heads = 28;  // 14 per kv head: both slices (8 + 6 columns) in one launch, 2 × 2 heads × 4 warps
  const auto pd = tq::cuda::plan_decode(kf, pc, pg);
  REQUIRE((pd.query_passes == 1 && pd.query_slices == 2 && pd.threads == 512 && pd.warps_per_head == 4));
  pg.n_q_heads = 24;  // 12: one launch while each work item is ≤ 2048 tokens, else two (the second packed)
  pg.max_seq_len = 4096;  // 8 sequences of ≤ 4096 tokens: ≥ 2 splits
  const auto p12 = tq::cuda::plan_decode(kf, pc, pg);
  REQUIRE((p12.query_passes == 1 && p12.query_slices == 2 && p12.num_splits >= 2 && p12.warps_per_head == 4));
  pg.num_splits = 1;
  const auto p12l = tq::cuda::plan_decode(kf, pc, pg);
  REQUIRE((p12l.query_passes == 2 && p12l.query_slices == 1 && p12l.threads == 512 && p12l.warps_per_head == 8));
  pg.num_splits = 2;  // 2 × 2048
  REQUIRE(tq::cuda::plan_decode(kf, pc, pg).query_slices == 2);
  pg.max_seq_len = 4097;
  REQUIRE(tq::cuda::plan_decode(kf, pc, pg).query_slices == 1);
  REQUIRE(tq::cuda::plan_decode(kf, pc, p).query_slices == 1);
  pg = p;
  pg.n_q_heads = 3;
  REQUIRE_THROWS_WITH(tq::cuda::plan_decode(kf, pc, pg), Contains("multiple of n_kv_heads"));
  pg = p;
  pg.column_tiles = 3;
  REQUIRE_THROWS_WITH(tq::cuda::plan_decode(kf, pc, pg), Contains("column_tiles 3"));
  const auto t3 = tq::cuda::kernel_format(tq::make_format("turbo3", 256));  // two blocks per head
  REQUIRE(tq::cuda::decode_support(t3).empty());
  tq::cuda::PagedCache pt{cache.as<uint8_t>(), 4, 16, 2, t3.slot_bytes};
  auto p256 = p;  // q and out rows of 256 values (only validated here, never launched)
  p256.q_stride_batch = p256.o_stride_batch = 4 * 256;
  p256.q_stride_head = p256.o_stride_head = 256;
  REQUIRE(tq::cuda::decode_can_implement(t3, pt, p256).empty());
  pt.slot_bytes = t3.slot_bytes - 2;
  REQUIRE_THROWS_WITH(tq::cuda::plan_decode(t3, pt, p256), Contains("slot_bytes " + std::to_string(t3.slot_bytes - 2)));
  const auto qjl = tq::cuda::kernel_format(tq::make_format("turbo4-qjl", 128));  // decoded too
  REQUIRE(tq::cuda::decode_support(qjl).empty());
  tq::cuda::StoreParams sp;
  sp.num_tokens = 5;
  sp.cache = pc;
  REQUIRE_THROWS_WITH(tq::cuda::store_kv(kf, sp), Contains("null"));
}
