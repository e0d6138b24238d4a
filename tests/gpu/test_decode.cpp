// Paged decode (quantized and the FP16 baseline) against a float64 attention
// over the CPU-dequantized cache, and paged dequant against the CPU decoder.
// Every output is poisoned (NaN) first; every element must be written, finite
// and within 1e-3 relative error (per query row: ‖out − ref‖ / ‖ref‖).
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include "gpu_util.h"
#include "tq/cuda/decode.h"
#include "tq/cuda/dequant.h"
#include "tq/cuda/kernel_format.h"
#include "tq/cuda/store.h"
#include "tq/error.h"
#include "tq/format.h"
#include "tq/parallel.h"

using namespace tqtest;
using tq::cuda::DecodePlan;

namespace {

constexpr double kTol = 1e-3;

struct DecodeCase {
  std::string fmt;  // a KV format, or "f16" for the FP16 baseline kernel
  int d = 128, hq = 32, hkv = 8, bs = 16;
  std::vector<int> lens;
  int splits = 0;  // 0 = auto
  int tiles = 0;   // DecodeParams::column_tiles (0 = the planner's choice)
  bool even = false;  // DecodeParams::even_dealing
  double q_sigma = 2.0;
  // > 0: key t of a sequence of length n is scaled by 1 + key_ramp·t/n, so the largest
  // logit keeps growing along the sequence and the running maxima move again and again
  double key_ramp = 0.0;
  uint64_t seed = 1;
  bool planes = false;  // quantized cache in CacheLayout::planes
  int plan_max_len = 0;  // > 0: DecodeParams::max_seq_len (else the batch's longest sequence)
  // > 0: value rows (token-heads) ≡ 0 mod special_v are constant (0.5 … 2), ≡ 1 all zeros: a uniform value
  // scale that rounds to 0 in fp16 (vLLM presets), a zero value norm (turbo)
  int special_v = 0;
  // > 0: key rows ≡ 0 mod spike_k are one-hot (3 at dim row % d): after the rotation every coordinate
  // has the same magnitude, so a token's codes all fall in one or two magnitude classes (the case
  // where a per-code rounding of squares would add up instead of averaging out)
  int spike_k = 0;
  int sm_count = 0;  // > 0: the SM count the planner assumes (plan_decode*'s sm_count)
  // query tokens per sequence: query j attends to positions [0, len − q_len + j]; the queries and
  // outputs are [batch, q_len, hq, d] with a padded token stride (q_len > 1: strided rows)
  int q_len = 1;
  tq::cuda::CacheLayout layout() const { return planes ? tq::cuda::CacheLayout::planes : tq::cuda::CacheLayout::vllm; }
};

// A filled paged cache (GPU) plus its CPU-dequantized contents.
struct Filled {
  Paging pg;
  std::vector<float> k, v;  // [total_tokens, hkv, d] in (sequence, position) order: what the cache decodes to
  std::vector<int64_t> first;  // first token row of each sequence in k/v
  std::unique_ptr<DevMem> cache, kc, vc, table, lens;
  int slot_bytes = 0;
};

Filled fill_cache(const DecodeCase& c, tq::Rng& rng) {
  Filled F;
  F.pg = make_paging(c.lens, c.bs, rng);
  const auto& pg = F.pg;
  const size_t rows = size_t(pg.total_tokens) * c.hkv;
  auto kh = random_rows(rng, rows, c.d, 0.0, 1.0);
  auto vh = random_rows(rng, rows, c.d, 0.3, 1.0);
  auto fill_row = [&](std::vector<uint16_t>& m, size_t row, float v) {
    std::fill(m.begin() + std::ptrdiff_t(row * c.d), m.begin() + std::ptrdiff_t((row + 1) * c.d), tq::float_to_half(v));
  };
  if (c.spike_k > 0)
    for (size_t row = 0; row < rows; row += size_t(c.spike_k)) {
      fill_row(kh, row, 0.f);
      kh[row * c.d + row % size_t(c.d)] = tq::float_to_half(3.f);
    }
  if (c.special_v > 0)
    for (size_t row = 0; row < rows; row += size_t(c.special_v)) {
      fill_row(vh, row, float(0.5 + 0.25 * double(row % 7)));
      if (c.special_v > 1 && row + 1 < rows) fill_row(vh, row + 1, 0.f);
    }
  F.first.resize(size_t(pg.batch));
  for (int b = 0, acc = 0; b < pg.batch; acc += pg.lens[size_t(b)], ++b) F.first[size_t(b)] = acc;
  if (c.key_ramp > 0)
    for (int b = 0; b < pg.batch; ++b)
      for (int t = 0; t < pg.lens[size_t(b)]; ++t) {
        const float f = float(1.0 + c.key_ramp * t / pg.lens[size_t(b)]);
        const size_t row0 = size_t(F.first[size_t(b)] + t) * c.hkv * c.d;
        for (size_t j = row0; j < row0 + size_t(c.hkv) * c.d; ++j)
          kh[j] = tq::float_to_half(f * tq::half_to_float(kh[j]));
      }
  const size_t slots = size_t(pg.num_blocks) * pg.block_size * c.hkv;
  if (c.fmt == "f16") {
    std::vector<uint16_t> hk(slots * c.d, 0xffff), hv(slots * c.d, 0xffff);  // NaN poison in unused positions
    for (int64_t t = 0; t < pg.total_tokens; ++t)
      for (int h = 0; h < c.hkv; ++h)
        for (int j = 0; j < c.d; ++j) {
          const size_t src = (size_t(t) * c.hkv + h) * c.d + j;
          const size_t dst = (size_t(pg.slot_of_token[size_t(t)]) * c.hkv + h) * c.d + j;
          hk[dst] = kh[src];
          hv[dst] = vh[src];
        }
    F.kc = std::make_unique<DevMem>(hk.size() * 2);
    F.vc = std::make_unique<DevMem>(hv.size() * 2);
    F.kc->upload(hk);
    F.vc->upload(hv);
    F.k = halves_to_floats(kh);
    F.v = halves_to_floats(vh);
  } else {
    const tq::KvFormat f = tq::make_format(c.fmt, c.d);
    const auto kf = tq::cuda::kernel_format(f);
    F.slot_bytes = int(f.slot_bytes());
    F.cache = std::make_unique<DevMem>(slots * f.slot_bytes());
    F.cache->fill(0xff);  // fp16 fields of never-written slots read as NaN
    DevMem dk(kh.size() * 2), dv(vh.size() * 2), dmap(size_t(pg.total_tokens) * 8);
    dk.upload(kh);
    dv.upload(vh);
    dmap.upload(pg.slot_of_token);
    const auto sp = tq::cuda::StoreParams::contiguous(
        dk.as(), dv.as(), dmap.as<int64_t>(), int(pg.total_tokens), c.d,
        {F.cache->as<uint8_t>(), pg.num_blocks, pg.block_size, c.hkv, F.slot_bytes, c.layout()});
    tq::cuda::store_kv(kf, sp);
    device_sync();
    auto bytes = F.cache->download<uint8_t>(F.cache->size());
    if (c.planes) bytes = convert_layout(bytes, kf, pg.num_blocks, pg.block_size, c.hkv, /*to_planes=*/false);
    F.k.resize(rows * c.d);
    F.v.resize(rows * c.d);
    // the CPU decoder's K/V of every token (the reference's inputs), tokens over the CPU's threads
    tq::parallel_for(tq::resolve_threads(0), pg.total_tokens, [&](int64_t t) {
      for (int h = 0; h < c.hkv; ++h)
        f.decode_slots(bytes.data() + (size_t(pg.slot_of_token[size_t(t)]) * c.hkv + h) * f.slot_bytes(), 1,
                       &F.k[(size_t(t) * c.hkv + h) * c.d], &F.v[(size_t(t) * c.hkv + h) * c.d]);
    });
  }
  F.table = std::make_unique<DevMem>(pg.table.size() * 4);
  F.table->upload(pg.table);
  F.lens = std::make_unique<DevMem>(pg.lens.size() * 4);
  F.lens->upload(pg.lens);
  return F;
}

// float64 attention of one query row over positions [0, len) of sequence b, kv head h.
std::vector<double> reference(const Filled& F, const DecodeCase& c, const float* q, int b, int h, int len,
                              double scale) {
  std::vector<double> s(static_cast<size_t>(len)), o(static_cast<size_t>(c.d), 0.0);
  double mx = -INFINITY;
  for (int t = 0; t < len; ++t) {
    const float* kr = &F.k[((size_t(F.first[size_t(b)]) + t) * c.hkv + h) * c.d];
    double acc = 0;
    for (int j = 0; j < c.d; ++j) acc += double(q[j]) * kr[j];
    s[size_t(t)] = acc * scale;
    mx = std::max(mx, s[size_t(t)]);
  }
  double z = 0;
  for (int t = 0; t < len; ++t) {
    const double p = std::exp(s[size_t(t)] - mx);
    z += p;
    const float* vr = &F.v[((size_t(F.first[size_t(b)]) + t) * c.hkv + h) * c.d];
    for (int j = 0; j < c.d; ++j) o[size_t(j)] += p * vr[j];
  }
  for (auto& x : o) x /= z;
  return o;
}

struct DecodeRun {
  tq::cuda::DecodeParams p;
  tq::cuda::DecodePlan plan;
  std::unique_ptr<DevMem> q, out, ws;
  std::vector<float> qf;
};

// Elements between consecutive query tokens of a sequence (q_len > 1: 8 elements of padding, so a
// kernel that assumed dense rows would read the wrong ones), and between sequences.
int64_t token_stride(const DecodeCase& c) { return int64_t(c.hq) * c.d + (c.q_len > 1 ? 8 : 0); }
int64_t batch_stride(const DecodeCase& c) { return token_stride(c) * c.q_len; }
// Offset of query / output row (b, j, h).
size_t row_offset(const DecodeCase& c, int b, int j, int h) {
  return size_t(b * batch_stride(c) + j * token_stride(c) + int64_t(h) * c.d);
}

DecodeRun prepare(const DecodeCase& c, Filled& F, tq::Rng& rng) {
  DecodeRun R;
  const size_t n = size_t(F.pg.batch * batch_stride(c));
  const auto qh = random_rows(rng, (n + size_t(c.d) - 1) / size_t(c.d), c.d, 0.0, c.q_sigma);  // (padding: random too)
  R.qf = halves_to_floats(qh);
  R.q = std::make_unique<DevMem>(qh.size() * 2);
  R.q->upload(qh);
  R.out = std::make_unique<DevMem>(qh.size() * 2);
  R.p.query = R.q->as();
  R.p.q_stride_batch = batch_stride(c);
  R.p.q_stride_head = c.d;
  R.p.out = R.out->as();
  R.p.o_stride_batch = batch_stride(c);
  R.p.o_stride_head = c.d;
  R.p.q_len = c.q_len;
  R.p.q_stride_token = R.p.o_stride_token = c.q_len > 1 ? token_stride(c) : 0;
  R.p.n_q_heads = c.hq;
  R.p.attn_scale = float(1.0 / std::sqrt(double(c.d)));
  R.p.blocks = {F.table->as<int32_t>(), F.pg.stride, F.lens->as<int32_t>(), F.pg.batch};
  R.p.num_splits = c.splits;
  R.p.column_tiles = c.tiles;
  R.p.even_dealing = c.even;
  R.p.max_seq_len = c.plan_max_len > 0 ? c.plan_max_len : F.pg.max_len;
  if (c.fmt == "f16") {
    const tq::cuda::PagedCacheF16 kc{F.kc->as(), F.vc->as(), F.pg.num_blocks, c.bs, c.hkv, c.d};
    R.plan = tq::cuda::plan_decode_f16(kc, R.p, c.sm_count);
  } else {
    const auto kf = tq::cuda::kernel_format(tq::make_format(c.fmt, c.d));
    const tq::cuda::PagedCache pc{F.cache->as<uint8_t>(), F.pg.num_blocks, c.bs, c.hkv, F.slot_bytes, c.layout()};
    R.plan = tq::cuda::plan_decode(kf, pc, R.p, c.sm_count);
  }
  R.ws = std::make_unique<DevMem>(R.plan.workspace_bytes);
  return R;
}

void launch(const DecodeCase& c, Filled& F, DecodeRun& R, cudaStream_t stream = nullptr) {
  if (c.fmt == "f16") {
    const tq::cuda::PagedCacheF16 kc{F.kc->as(), F.vc->as(), F.pg.num_blocks, c.bs, c.hkv, c.d};
    tq::cuda::paged_decode_f16(kc, R.p, R.plan, R.ws->as(), stream);
  } else {
    const auto kf = tq::cuda::kernel_format(tq::make_format(c.fmt, c.d));
    const tq::cuda::PagedCache pc{F.cache->as<uint8_t>(), F.pg.num_blocks, c.bs, c.hkv, F.slot_bytes, c.layout()};
    tq::cuda::paged_decode(kf, pc, R.p, R.plan, R.ws->as(), stream);
  }
}

// Compares every output row with the float64 reference for the given lengths.
// (q_len > 1: query token qt of sequence b sees its first len − q_len + qt + 1 positions; the
// padding between token rows must stay poisoned.)
double check_output(const DecodeCase& c, const Filled& F, const DecodeRun& R, const std::vector<int>& lens) {
  const auto out = R.out->download<uint16_t>(R.out->size() / 2);
  const int g = c.hq / c.hkv;
  auto visible = [&](int b, int qt) { return std::max(0, lens[size_t(b)] - c.q_len + 1 + qt); };
  // The float64 references first, rows over the CPU's threads (each row's arithmetic is the same
  // whichever thread runs it); then the checks, in row order on this thread.
  const int64_t n_rows = int64_t(F.pg.batch) * c.q_len * c.hq;
  std::vector<std::vector<double>> refs(static_cast<size_t>(n_rows));
  tq::parallel_for(tq::resolve_threads(0), n_rows, [&](int64_t i) {
    const int qh = int(i % c.hq), qt = int(i / c.hq % c.q_len), b = int(i / (int64_t(c.hq) * c.q_len));
    const int len = visible(b, qt);
    if (len > 0) refs[size_t(i)] = reference(F, c, &R.qf[row_offset(c, b, qt, qh)], b, qh / g, len, double(R.p.attn_scale));
  });
  double worst = 0;
  for (int b = 0; b < F.pg.batch; ++b)
    for (int qt = 0; qt < c.q_len; ++qt)
    for (int qh = 0; qh < c.hq; ++qh) {
      const size_t row = row_offset(c, b, qt, qh);
      const int len = visible(b, qt);
      if (c.q_len > 1 && qh == c.hq - 1)
        for (int j = 0; j < 8; ++j) {
          INFO(c.fmt << " padding after sequence " << b << " query " << qt);
          REQUIRE(out[row + size_t(c.d) + size_t(j)] == 0xffff);
        }
      if (len == 0) {  // no tokens: the output row is zero
        for (int j = 0; j < c.d; ++j) {
          INFO(c.fmt << " empty sequence " << b << " query " << qt << " q head " << qh << " dim " << j);
          REQUIRE(out[row + size_t(j)] == 0);
        }
        continue;
      }
      const auto& ref = refs[size_t((int64_t(b) * c.q_len + qt) * c.hq + qh)];
      double e = 0, n = 0;
      bool finite = true;
      for (int j = 0; j < c.d; ++j) {
        const double o = tq::half_to_float(out[row + size_t(j)]);
        finite = finite && std::isfinite(o);
        e += (o - ref[size_t(j)]) * (o - ref[size_t(j)]);
        n += ref[size_t(j)] * ref[size_t(j)];
      }
      INFO(c.fmt << " d=" << c.d << " hq=" << c.hq << " hkv=" << c.hkv << " bs=" << c.bs << " q_len=" << c.q_len
                 << " splits=" << R.plan.num_splits << " parts=" << R.plan.parts << " passes=" << R.plan.query_passes
                 << " slices=" << R.plan.query_slices << " sequence " << b << " (len " << lens[size_t(b)]
                 << ") query " << qt << " q head " << qh << ": |ref| " << std::sqrt(n) << ", |out - ref| "
                 << std::sqrt(e));
      REQUIRE(finite);
      const double rel = std::sqrt(e / n);
      REQUIRE(rel <= kTol);
      worst = std::max(worst, rel);
    }
  return worst;
}

// check_plan (optional): assertions on the plan before the launch.
double run_decode(const DecodeCase& c,
                  const std::function<void(const DecodePlan&, const Filled&)>& check_plan = nullptr) {
  tq::Rng rng(c.seed);
  Filled F = fill_cache(c, rng);
  DecodeRun R = prepare(c, F, rng);
  if (check_plan) check_plan(R.plan, F);
  R.out->fill(0xff);
  R.ws->fill(0xff);
  launch(c, F, R);
  device_sync();
  return check_output(c, F, R, F.pg.lens);
}

// Every format the paged decode implements (the GPU codec table's decode rows), plus our FP16 baseline.
const std::vector<std::string> kDecodeFormats = [] {
  auto f = tq::cuda::gpu_formats(/*decode_only=*/true);
  f.push_back("f16");
  return f;
}();
const std::vector<int> kRagged = {1, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 1000, 4097};

}  // namespace

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

TEST_CASE("decode: GQA group sizes 1, 4, 8, 12, 13, 16, 20, 24 and head layouts", "[decode]") {
  struct H {
    int hq, hkv, splits;
  };
  // (8,8) G=1; (32,8) G=4; (8,1) G=8 (8 warps share one head); (12,3) 3 heads/CTA;
  // (16,16) two head groups (segmented copies); (64,8) G=8. G > 8: column slices of ≤ 8 — for
  // 8 < G ≤ 16 one launch with two N-tiles per warp (mse / fp8 keys with uniform values at 8 heads
  // per CTA), or both slices in one launch where the CTA has twice its heads' warps (the quantized
  // 16-warp kernels at 8 heads per CTA, any of them at ≤ 4: query_slices 2), else ⌈G/8⌉
  // stage-1 launches; at 8 < G ≤ 12 one launch only while a work item is ≤ 2048 tokens (with
  // these lengths, ≤ 2049, every auto split count; one split of 2049 is not). The two-tile kernels
  // take single-query decodes whose work items are longer than 256 tokens (here one split; the
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
      const bool two_tile_fmt = fmt == "turboquant_4bit_nc" || fmt == "turboquant_k8v4";
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
          // 8 < G ≤ 16 with two N-tiles per warp (mse / fp8 keys with uniform values, 8 heads per CTA:
          // 8 warps) where work items exceed 256 tokens, the tiles are forced to 2 or the CTA has no
          // warps for a second slice (k8v4), else where the CTA has a second set of warps for the second
          // slice — at G ≤ 12 only with short work items (not one split of 2049 tokens)
          const bool tiles2 = two_tile_fmt && g > 8 && g <= 16 && plan.heads_per_cta == 8 &&
                              (tiles == 2 || (tiles == 0 && (2049 > 256 * plan.num_splits || warps == 8)));
          const bool dual = f16 ? g > 8 && g <= 16
                                : !tiles2 && g > 8 && g <= 16 && 2 * plan.heads_per_cta <= warps &&
                                      (g > 12 || h.splits != 1);
          REQUIRE(plan.column_tiles == (tiles2 ? 2 : 1));
          REQUIRE(plan.query_slices == (dual ? 2 : 1));
          REQUIRE(plan.query_passes == (dual || tiles2 ? 1 : (g + 7) / 8));
          REQUIRE(plan.threads == 32 * (f16 ? 1 : plan.query_slices) * plan.heads_per_cta * plan.warps_per_head);
          if (h.hkv % 8 == 0) REQUIRE(plan.threads == 32 * (tiles2 ? 8 : warps));  // every warp of the kernel
          if (h.splits == 1 && plan.warps_per_head == 1) REQUIRE(plan.parts == 1);
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

TEST_CASE("launchers: n_kv_heads the decode kernels cannot stream are refused by name", "[api][quick]") {
  // 8-warp kernels (fp8 keys, turbo4-qjl, head_dim 256) take ≤ 8 heads per CTA, and 5 or 2
  // heads' slots are not 16-byte runs; 17 heads exceed the 16-warp kernels' warps.
  struct R {
    const char* fmt;
    int d, hkv;
  };
  for (const R r : {R{"turboquant_k8v4", 128, 10}, R{"turbo4-qjl", 128, 10}, R{"turboquant_4bit_nc", 256, 10},
                    R{"turboquant_4bit_nc", 128, 17}, R{"turbo4", 128, 20}}) {
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
                 << " warps per head " << plan.warps_per_head);
        if (splits > 0)  // the long sequence's items outnumber the parts a pass holds
          REQUIRE(plan.parts < (plan.items - F.pg.batch + 1) * plan.warps_per_head);
      });
    }
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
// make new maxima appear all along the sequence, so both paths alternate in every part.
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
    if (fmt != "turboquant_k8v4" && fmt != "turbo4-qjl") {  // 10 kv heads in one CTA (the 8-warp kernels refuse)
      c.hq = 40;
      c.hkv = 10;
      c.lens = {17, 40};
      run_decode(c);
    }
    c.hq = 28;  // 4 kv heads, G = 7 (Qwen 2.5 7B): the 4-head kernels, even / odd token rows
    c.hkv = 4;
    c.lens = {17, 40};
    run_decode(c);
    c.hq = 32;  // 16 kv heads: one CTA of 16 (mse / turbo keys at d 128: the LUT at 128 KB for 134-byte
    c.hkv = 16;  // slots), else two of 8
    run_decode(c);
  }
}

// Multi-query (q_len > 1): every query token against the float64 causal reference.
static void run_multi_query(const std::string& fmt, bool quick) {
  DecodeCase c;
  c.fmt = fmt;
  struct Shape {
    int hq, hkv, d;
  };
  // G 4 (32/8: 16-column launches for q_len 4, two N-tiles per warp where the format has them), G 1 (MHA),
  // G 8, 2 kv heads (Qwen 2.5 1.5B), d 64 (8 kv heads: the two-tile kernel) / 256
  const std::vector<Shape> shapes = quick ? std::vector<Shape>{{32, 8, 128}, {8, 2, 128}}
                                          : std::vector<Shape>{{32, 8, 128}, {8, 8, 128}, {64, 8, 128}, {12, 2, 128},
                                                               {16, 4, 64}, {32, 8, 64}, {16, 2, 256}};
  for (const auto& sh : shapes)
    for (const int q_len : quick ? std::vector<int>{2, 5} : std::vector<int>{2, 4, 7, 16, 33}) {
      c.hq = sh.hq;
      c.hkv = sh.hkv;
      c.d = sh.d;
      c.q_len = q_len;
      // a sequence shorter than the chunk (its first queries see nothing), one of exactly q_len, chunks whose
      // causal tail crosses a 32-token sub-tile and a work item's end, a long one
      c.lens = {3, q_len, 31 + q_len, 100, quick ? 700 : 2500};
      c.splits = 0;
      run_decode(c);
      c.splits = 3;
      c.lens = {q_len + 1, 64, 65};
      run_decode(c);
    }
}

TEST_CASE("decode: multi-query (q_len 2 … 33, causal within the chunk), every format", "[decode][multi]") {
  for (const auto& fmt : kDecodeFormats)
    if (fmt != "f16") run_multi_query(fmt, false);
}

TEST_CASE("decode: multi-query quick subset", "[decode][multi][quick]") {
  for (const auto& fmt : {"turboquant_4bit_nc", "turboquant_k8v4", "turbo3", "turbo4-qjl"}) run_multi_query(fmt, true);
}

// Captures one decode of c in a CUDA graph, then replays it once per entry of `lens` (new lengths over
// the same pages, uploaded before the replay), each output against the float64 reference.
static void check_graph_replays(const DecodeCase& c, uint64_t seed, const std::vector<std::vector<int>>& lens) {
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
  for (const auto& l : lens) {
    F.lens->upload(l);
    R.out->fill(0xff);
    TQ_CUDA_CHECK(cudaGraphLaunch(exec, s));
    TQ_CUDA_CHECK(cudaStreamSynchronize(s));
    check_output(c, F, R, l);
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
  check_graph_replays(c, 31, {c.lens, {1, 2999, 17}});  // the captured lengths, then new ones on the same pages
}

TEST_CASE("decode: multi-query from a CUDA graph, replayed with new seq_lens", "[decode][graph][multi][quick]") {
  DecodeCase c;
  c.fmt = "turboquant_k3v4_nc";
  c.q_len = 4;
  c.lens = {700, 3000, 64};
  c.splits = 4;
  check_graph_replays(c, 37, {c.lens, {2, 2999, 17}});
}

// Which multi-query kernels the planner takes: two 8-column N-tiles per warp in CTAs of 8 warps (one
// per kv head) for the mse / fp8-key formats at 8 heads per CTA and more than 8 columns per kv head,
// launches of ≤ 16 columns; else the one-tile kernels.
TEST_CASE("decode: multi-query plans take two N-tiles per warp where the format has them", "[decode][multi][quick]") {
  struct Want {
    const char* fmt;
    int d, hq, hkv, q_len, tiles, passes;
    int force = 0;  // DecodeParams::column_tiles
  };
  const Want wants[] = {
      {"turboquant_4bit_nc", 128, 32, 8, 4, 2, 1},   // 16 columns: one launch
      {"turboquant_k3v4_nc", 128, 32, 8, 5, 2, 2},   // 20: 16 + 4
      {"turboquant_3bit_nc", 64, 32, 8, 16, 2, 4},   // 64: four launches of 16
      {"turboquant_k8v4", 128, 64, 8, 2, 2, 1},      // G 8, 16 columns
      {"turboquant_4bit_nc", 128, 32, 8, 2, 1, 1},   // 8 columns: one tile
      {"turboquant_4bit_nc", 128, 8, 2, 4, 1, 1},    // 2 kv heads per CTA: the one-tile kernels, both slices
      {"turbo3", 128, 32, 8, 4, 1, 1},               // turbo values: one tile (both slices, 16 warps)
      {"turboquant_4bit_nc", 128, 32, 8, 4, 1, 1, 1},  // one tile asked for: both slices, 16 warps
      {"turboquant_k8v4", 128, 32, 8, 4, 1, 2, 1},     // one tile asked for, 8-warp kernel: two launches
  };
  for (const Want& w : wants) {
    DecodeCase c;
    c.fmt = w.fmt;
    c.d = w.d;
    c.hq = w.hq;
    c.hkv = w.hkv;
    c.q_len = w.q_len;
    c.tiles = w.force;
    c.lens = {w.q_len + 40, 300};
    INFO(w.fmt << " d " << w.d << " " << w.hq << "/" << w.hkv << " q_len " << w.q_len << " tiles asked " << w.force);
    run_decode(c, [&](const DecodePlan& plan, const Filled&) {
      REQUIRE(plan.column_tiles == w.tiles);
      REQUIRE(plan.query_passes == w.passes);
      if (w.tiles == 2) REQUIRE((plan.threads == 256 && plan.heads_per_cta == 8 && plan.warps_per_head == 1));
    });
  }
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
  const tq::cuda::PagedCacheF16 f16{F.cache->as(), F.cache->as(), F.pg.num_blocks, c.bs, c.hkv, c.d};
  REQUIRE_THROWS_WITH(tq::cuda::plan_decode_f16(f16, R.p), Contains("q_len 3 not supported"));
}

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
    auto want = [&](float x) { return bf ? tq::float_to_bf16(x) : tq::float_to_half(x); };
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
            const bool k_ok = kg[sh + dst] == want(F.k[src]), v_ok = vg[sh + dst] == want(F.v[src]);
            if (k_ok && v_ok) continue;
            if (!mismatches++) {
              char buf[128];
              std::snprintf(buf, sizeof buf, "sequence %d position %d head %d dim %d: %s 0x%04x, want 0x%04x", b, t,
                            h, j, k_ok ? "V" : "K", unsigned(k_ok ? vg[sh + dst] : kg[sh + dst]),
                            unsigned(k_ok ? want(F.v[src]) : want(F.k[src])));
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

