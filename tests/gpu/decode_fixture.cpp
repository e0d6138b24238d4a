#include "decode_fixture.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

#include "tq/cuda/store.h"
#include "tq/format.h"
#include "tq/parallel.h"

namespace tqtest {

Filled fill_cache(const DecodeCase& c, tq::Rng& rng) {
  Filled F;
  F.pg = make_paging(c.lens, c.bs, rng);
  const auto& pg = F.pg;
  const size_t rows = size_t(pg.total_tokens) * c.hkv;
  auto kh = random_rows(rng, rows, c.d, 0.0, 1.0, c.bf16);
  auto vh = random_rows(rng, rows, c.d, 0.3, 1.0, c.bf16);
  auto fill_row = [&](std::vector<uint16_t>& m, size_t row, float v) {
    std::fill(m.begin() + std::ptrdiff_t(row * c.d), m.begin() + std::ptrdiff_t((row + 1) * c.d), to_16(v, c.bf16));
  };
  if (c.spike_k > 0)
    for (size_t row = 0; row < rows; row += size_t(c.spike_k)) {
      fill_row(kh, row, 0.f);
      kh[row * c.d + row % size_t(c.d)] = to_16(3.f, c.bf16);
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
          kh[j] = to_16(f * from_16(kh[j], c.bf16), c.bf16);
      }
  const size_t slots = size_t(pg.num_blocks) * pg.block_size * c.hkv;
  if (c.fmt == "f16") {
    REQUIRE(!c.bf16);  // our FP16 baseline is fp16 only
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
        {F.cache->as<uint8_t>(), pg.num_blocks, pg.block_size, c.hkv, F.slot_bytes, c.layout()}, c.dtype());
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

int64_t token_stride(const DecodeCase& c) { return int64_t(c.hq) * c.d + (c.q_len > 1 ? 8 : 0); }
int64_t batch_stride(const DecodeCase& c) { return token_stride(c) * c.q_len; }
int query_count(const DecodeCase& c, int b) { return c.q_counts.empty() ? c.q_len : c.q_counts[size_t(b)]; }
int64_t query_start(const DecodeCase& c, int b) {
  int64_t s = 0;
  for (int i = 0; i < b; ++i) s += c.q_counts[size_t(i)];
  return s;
}
std::vector<int32_t> query_starts(const DecodeCase& c) {
  std::vector<int32_t> starts(c.q_counts.size() + 1, 0);
  for (size_t b = 0; b < c.q_counts.size(); ++b) starts[b + 1] = starts[b] + c.q_counts[b];
  return starts;
}
size_t row_offset(const DecodeCase& c, int b, int j, int h) {
  if (!c.q_counts.empty()) return size_t((query_start(c, b) + j) * token_stride(c) + int64_t(h) * c.d);
  return size_t(b * batch_stride(c) + j * token_stride(c) + int64_t(h) * c.d);
}

DecodeRun prepare(const DecodeCase& c, Filled& F, tq::Rng& rng) {
  DecodeRun R;
  const bool varlen = !c.q_counts.empty();
  // varlen: the rows, and one more that must stay poisoned
  const int64_t q_rows = varlen ? query_start(c, F.pg.batch) : 0;
  const size_t n = size_t(varlen ? (q_rows + 1) * token_stride(c) : F.pg.batch * batch_stride(c));
  const auto qh = random_rows(rng, (n + size_t(c.d) - 1) / size_t(c.d), c.d, 0.0, c.q_sigma, c.bf16);  // (padding: random too)
  R.qf = halves_to_floats(qh, c.bf16);
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
  if (varlen) {
    const std::vector<int32_t> starts = query_starts(c);
    R.q_start = std::make_unique<DevMem>(starts.size() * 4);
    R.q_start->upload(starts);
    R.p.q_start = R.q_start->as<int32_t>();
    R.p.q_rows = q_rows;
    R.p.q_stride_batch = R.p.o_stride_batch = c.q_len > 1 ? 0 : token_stride(c);  // (unused above q_len 1)
  }
  R.p.n_q_heads = c.hq;
  R.p.dtype = c.dtype();
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

void launch(const DecodeCase& c, Filled& F, DecodeRun& R, cudaStream_t stream) {
  if (c.fmt == "f16") {
    const tq::cuda::PagedCacheF16 kc{F.kc->as(), F.vc->as(), F.pg.num_blocks, c.bs, c.hkv, c.d};
    tq::cuda::paged_decode_f16(kc, R.p, R.plan, R.ws->as(), stream);
  } else {
    const auto kf = tq::cuda::kernel_format(tq::make_format(c.fmt, c.d));
    const tq::cuda::PagedCache pc{F.cache->as<uint8_t>(), F.pg.num_blocks, c.bs, c.hkv, F.slot_bytes, c.layout()};
    tq::cuda::paged_decode(kf, pc, R.p, R.plan, R.ws->as(), stream);
  }
}

double check_output(const DecodeCase& c, const Filled& F, const DecodeRun& R, const std::vector<int>& lens) {
  const auto out = R.out->download<uint16_t>(R.out->size() / 2);
  const int g = c.hq / c.hkv;
  auto visible = [&](int b, int qt) { return std::max(0, lens[size_t(b)] - query_count(c, b) + 1 + qt); };
  // The float64 references first, rows over the CPU's threads (each row's arithmetic is the same
  // whichever thread runs it); then the checks, in row order on this thread.
  const int64_t n_rows = int64_t(F.pg.batch) * c.q_len * c.hq;
  std::vector<std::vector<double>> refs(static_cast<size_t>(n_rows));
  tq::parallel_for(tq::resolve_threads(0), n_rows, [&](int64_t i) {
    const int qh = int(i % c.hq), qt = int(i / c.hq % c.q_len), b = int(i / (int64_t(c.hq) * c.q_len));
    if (qt >= query_count(c, b)) return;
    const int len = visible(b, qt);
    if (len > 0) refs[size_t(i)] = reference(F, c, &R.qf[row_offset(c, b, qt, qh)], b, qh / g, len, double(R.p.attn_scale));
  });
  double worst = 0;
  if (!c.q_counts.empty()) {  // the row past the last: no write reached it
    const size_t past = size_t(query_start(c, F.pg.batch) * token_stride(c));
    for (int64_t j = 0; j < token_stride(c); ++j) {
      INFO(c.fmt << " the row past the last query, element " << j);
      REQUIRE(out[past + size_t(j)] == 0xffff);
    }
  }
  for (int b = 0; b < F.pg.batch; ++b)
    for (int qt = 0; qt < query_count(c, b); ++qt)
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
        const double o = from_16(out[row + size_t(j)], c.bf16);
        finite = finite && std::isfinite(o);
        // bf16: the output's own rounding (at most half an ulp, ≤ 2^-8 · |o| · (1 + 2^-8)) is not the kernel's error
        const double err = std::fabs(o - ref[size_t(j)]);
        const double x = c.bf16 ? std::max(0.0, err - std::ldexp(std::fabs(o), -8) * (1 + 0x1p-8)) : err;
        e += x * x;
        n += ref[size_t(j)] * ref[size_t(j)];
      }
      INFO(c.fmt << (c.bf16 ? " bf16" : "") << " d=" << c.d << " hq=" << c.hq << " hkv=" << c.hkv << " bs=" << c.bs << " q_len=" << c.q_len
                 << " splits=" << R.plan.num_splits << " parts=" << R.plan.parts << " passes=" << R.plan.query_passes
                 << " slices=" << R.plan.query_slices << " sequence " << b << " (len " << lens[size_t(b)]
                 << ", " << query_count(c, b) << " queries) query " << qt << " q head " << qh << ": |ref| " << std::sqrt(n) << ", |out - ref| "
                 << std::sqrt(e));
      REQUIRE(finite);
      const double rel = std::sqrt(e / n);
      REQUIRE(rel <= kTol);
      worst = std::max(worst, rel);
    }
  return worst;
}

double run_decode(const DecodeCase& c, const std::function<void(const DecodePlan&, const Filled&)>& check_plan) {
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

}  // namespace tqtest
