// The GPU kernels on a tq-dump layer against CPU oracles (see tq/cuda/verify.h).
#include "tq/cuda/verify.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include <cuda_runtime.h>

#include "buffer.h"
#include "tq/cuda/decode.h"
#include "tq/cuda/dequant.h"
#include "tq/cuda/kernel_format.h"
#include "tq/cuda/store.h"
#include "tq/error.h"
#include "tq/float_formats.h"
#include "tq/format.h"
#include "tq/formats/mse.h"
#include "tq/formats/turbo.h"
#include "tq/kv_dump.h"
#include "tq/parallel.h"
#include "tq/rng.h"

namespace tq::cuda {

namespace {

// rows × width floats (a dump tensor's first `rows` rows) rounded to fp16 — what the
// kernels take — refusing NaN/Inf (also values beyond fp16's range).
std::vector<uint16_t> to_half(const std::vector<float>& x, int64_t rows, int64_t width, int layer, const char* what) {
  std::vector<uint16_t> h(size_t(rows * width));
  for (size_t i = 0; i < h.size(); ++i) {
    h[i] = float_to_half(x[i]);
    TQ_CHECK(std::isfinite(half_to_float(h[i])), "layer {} {}: element {} (token {}) is {} — not finite in fp16",
             layer, what, i, int64_t(i) / width, x[i]);
  }
  return h;
}

std::vector<float> to_float(const std::vector<uint16_t>& h) {
  std::vector<float> f(h.size());
  for (size_t i = 0; i < h.size(); ++i) f[i] = half_to_float(h[i]);
  return f;
}

// What both checks take from a layer: its fp16 K/V (the first T tokens: a sliding-window
// layer's window), P query positions (i + 1)·T / P − 1 — increasing, the last one T − 1 —
// with their fp16 query rows and causal lengths. Fills c's layer, window, tokens, positions.
struct LayerInputs {
  int64_t T = 0;
  std::vector<uint16_t> kh, vh, qh;
  std::vector<int32_t> pos, lens;
};
LayerInputs layer_inputs(const KvDumpLayer& L, int n_heads, int H, int D, const DumpCheckOptions& o, DumpCheck& c) {
  c.layer = L.layer;
  c.window = L.sliding_window;
  TQ_CHECK(D > 0 && H > 0 && n_heads > 0 && n_heads % H == 0, "layer {}: {} query heads over {} kv heads", L.layer,
           n_heads, H);
  const int64_t T_all = int64_t(L.k.size()) / (int64_t(H) * D);
  TQ_CHECK(T_all > 0 && L.k.size() == size_t(T_all * H * D) && L.v.size() == L.k.size() &&
               L.q.size() == size_t(T_all * n_heads * D),
           "layer {}: q/k/v sizes {}/{}/{} do not match {} tokens of {} / {} heads × {}", L.layer, L.q.size(),
           L.k.size(), L.v.size(), T_all, n_heads, H, D);
  TQ_CHECK(o.positions >= 1, "positions: {} (must be ≥ 1)", o.positions);
  LayerInputs in;
  const int64_t T = L.sliding_window > 0 ? std::min<int64_t>(T_all, L.sliding_window) : T_all;
  in.T = c.tokens = T;
  const int P = c.positions = int(std::min<int64_t>(o.positions, T));
  in.kh = to_half(L.k, T * H, D, L.layer, "k");
  in.vh = to_half(L.v, T * H, D, L.layer, "v");
  in.pos.resize(size_t(P));
  in.lens.resize(size_t(P));
  std::vector<float> qrows(size_t(P) * n_heads * D);
  for (int i = 0; i < P; ++i) {
    in.pos[size_t(i)] = int32_t((int64_t(i) + 1) * T / P - 1);
    in.lens[size_t(i)] = in.pos[size_t(i)] + 1;
    std::copy_n(&L.q[size_t(in.pos[size_t(i)]) * n_heads * D], size_t(n_heads) * D, &qrows[size_t(i) * n_heads * D]);
  }
  in.qh = to_half(qrows, int64_t(P) * n_heads, D, L.layer, "q (checked positions)");
  return in;
}

// Float64 attention of every (position, q head) row of qh over k / v [T, H, D] (position i
// attends to tokens 0 … lens[i] − 1; q head h reads kv head h / G): [P, n_heads, D].
std::vector<double> attention_f64(const std::vector<uint16_t>& qh, const std::vector<int32_t>& lens,
                                  const std::vector<float>& k, const std::vector<float>& v, int n_heads, int H, int D,
                                  double scale) {
  const int P = int(lens.size()), G = n_heads / H;
  std::vector<double> out(size_t(P) * n_heads * D);
  parallel_for(resolve_threads(0), int64_t(P) * n_heads, [&](int64_t task) {
    const int i = int(task);
    const int pi = i / n_heads, qhd = i % n_heads, kvh = qhd / G, n = lens[size_t(pi)];
    std::vector<double> qd(static_cast<size_t>(D)), s(static_cast<size_t>(n)), acc(static_cast<size_t>(D), 0.0);
    for (int j = 0; j < D; ++j) qd[size_t(j)] = half_to_float(qh[size_t(i) * D + j]);
    double mx = -INFINITY;
    for (int t = 0; t < n; ++t) {
      const float* kr = &k[size_t(int64_t(t) * H + kvh) * D];
      double dot = 0;
      for (int j = 0; j < D; ++j) dot += qd[size_t(j)] * kr[j];
      s[size_t(t)] = dot * scale;
      mx = std::max(mx, s[size_t(t)]);
    }
    double z = 0;
    for (int t = 0; t < n; ++t) {
      const double w = std::exp(s[size_t(t)] - mx);
      z += w;
      const float* vr = &v[size_t(int64_t(t) * H + kvh) * D];
      for (int j = 0; j < D; ++j) acc[size_t(j)] += w * vr[j];
    }
    for (int j = 0; j < D; ++j) out[size_t(i) * D + j] = acc[size_t(j)] / z;
  });
  return out;
}

// The largest ‖got − ref‖ / ‖ref‖ over rows of D (a non-finite got: ∞) into c.decode_rel,
// and its (position, q head).
template <class Got>
void worst_row(const std::vector<double>& ref, Got got, const std::vector<int32_t>& pos, int n_heads, int D,
               DumpCheck& c) {
  const int rows = int(ref.size() / size_t(D));
  c.decode_rel = -1;
  for (int i = 0; i < rows; ++i) {
    double e = 0, nn = 0;
    bool finite = true;
    for (int j = 0; j < D; ++j) {
      const double g = got(size_t(i) * D + j), r = ref[size_t(i) * D + j];
      finite = finite && std::isfinite(g);
      e += (g - r) * (g - r);
      nn += r * r;
    }
    const double rel = !finite ? INFINITY : nn > 0 ? std::sqrt(e / nn) : std::sqrt(e);
    if (rel > c.decode_rel) {
      c.decode_rel = rel;
      c.worst_position = pos[size_t(i / n_heads)];
      c.worst_head = i % n_heads;
    }
  }
}

}  // namespace

DumpCheck check_dump_layer(const KvFormat* format, const KvDumpLayer& L, int n_heads, int n_kv_heads, int head_dim,
                           const DumpCheckOptions& o) {
  DumpCheck c;
  c.format = format ? format->name : "f16";
  const int D = head_dim, H = n_kv_heads;
  const LayerInputs in = layer_inputs(L, n_heads, H, D, o, c);
  const int64_t T = in.T;
  const int P = c.positions;
  const auto &kh = in.kh, &vh = in.vh, &qh = in.qh;
  const auto &pos = in.pos, &lens = in.lens;

  KernelFormat kf;
  if (format) {
    try {
      kf = kernel_format(*format);
    } catch (const Error& e) {
      c.not_run = e.what();
      return c;
    }
  }

  // Pages: the T tokens in shuffled physical blocks; every position's block table is the same row.
  const int bs = o.block_size;
  const int pages = int((T + bs - 1) / bs);
  std::vector<int32_t> row(static_cast<size_t>(pages));
  std::iota(row.begin(), row.end(), 0);
  Rng rng(o.seed);
  shuffle(row, rng);
  auto slot_of = [&](int64_t t) { return int64_t(row[size_t(t / bs)]) * bs + t % bs; };
  std::vector<int32_t> table(size_t(P) * pages);
  for (int i = 0; i < P; ++i) std::copy(row.begin(), row.end(), table.begin() + ptrdiff_t(i) * pages);
  Buf d_table(table.size() * 4), d_lens(lens.size() * 4), d_q(qh.size() * 2), d_out(qh.size() * 2);
  d_table.upload(table);
  d_lens.upload(lens);
  d_q.upload(qh);
  const size_t total_slots = size_t(pages) * bs * H;

  // ---- store (quantized formats) ----
  std::vector<float> kref, vref;  // what the cache holds, [T, H, D]
  std::unique_ptr<Buf> d_cache;
  PagedCache pc{nullptr, pages, bs, H, 0, CacheLayout::vllm};
  if (format) {
    const size_t sb = format->slot_bytes();
    kref = to_float(kh);
    vref = to_float(vh);
    std::vector<uint8_t> cpu(size_t(T * H) * sb);
    format->encode_slots(kref.data(), vref.data(), T * H, cpu.data());
    d_cache = std::make_unique<Buf>(total_slots * sb);
    TQ_CUDA_CHECK(cudaMemset(d_cache->p, 0xff, d_cache->bytes));  // unwritten slots: NaN fields
    pc.data = d_cache->as<uint8_t>();
    pc.slot_bytes = int(sb);
    std::vector<int64_t> map(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) map[size_t(t)] = slot_of(t);
    Buf d_k(kh.size() * 2), d_v(vh.size() * 2), d_map(map.size() * 8);
    d_k.upload(kh);
    d_v.upload(vh);
    d_map.upload(map);
    store_kv(kf, StoreParams::contiguous(d_k.p, d_v.p, d_map.as<int64_t>(), int(T), D, pc));
    TQ_CUDA_CHECK(cudaDeviceSynchronize());
    const auto gpu = d_cache->download<uint8_t>(d_cache->bytes);
    c.slots = T * H;
    for (int64_t t = 0; t < T; ++t)
      for (int h = 0; h < H; ++h) {
        const uint8_t* want = &cpu[size_t(t * H + h) * sb];
        const uint8_t* got = &gpu[size_t(slot_of(t) * H + h) * sb];
        if (std::equal(want, want + sb, got)) continue;
        if (c.store_mismatches++ == 0) {
          c.bad_token = t;
          c.bad_head = h;
          c.bad_byte = int(std::mismatch(want, want + sb, got).first - want);
        }
      }
    // the oracle's cache contents: the CPU decode of the CPU encoder's bytes
    format->decode_slots(cpu.data(), T * H, kref.data(), vref.data());

    // ---- dequant: the whole range as one sequence, fp16 and bf16 ----
    Buf d_len1(4), d_off(4), d_ko(kh.size() * 2), d_vo(vh.size() * 2);
    d_len1.upload(std::vector<int32_t>{int32_t(T)});
    d_off.upload(std::vector<int32_t>{0});
    for (const DequantDtype dt : {DequantDtype::f16, DequantDtype::bf16}) {
      DequantParams dp;
      dp.cache = pc;
      dp.blocks = {d_table.as<int32_t>(), pages, d_len1.as<int32_t>(), 1};
      dp.out_offsets = d_off.as<int32_t>();
      dp.k_out = d_ko.p;
      dp.v_out = d_vo.p;
      dp.dtype = dt;
      dp.max_seq_len = int(T);
      TQ_CUDA_CHECK(cudaMemset(d_ko.p, 0xff, d_ko.bytes));
      TQ_CUDA_CHECK(cudaMemset(d_vo.p, 0xff, d_vo.bytes));
      dequant_paged(kf, dp);
      TQ_CUDA_CHECK(cudaDeviceSynchronize());
      const auto ko = d_ko.download<uint16_t>(kh.size()), vo = d_vo.download<uint16_t>(vh.size());
      for (size_t i = 0; i < ko.size(); ++i) {
        const uint16_t wk = dt == DequantDtype::f16 ? float_to_half(kref[i]) : float_to_bf16(kref[i]);
        const uint16_t wv = dt == DequantDtype::f16 ? float_to_half(vref[i]) : float_to_bf16(vref[i]);
        c.dequant_mismatches += (ko[i] != wk) + (vo[i] != wv);
      }
      c.dequant_values += int64_t(2 * ko.size());
    }
  } else {
    kref = to_float(kh);
    vref = to_float(vh);
  }

  // ---- decode ----
  DecodeParams p;
  p.query = d_q.p;
  p.q_stride_batch = p.o_stride_batch = int64_t(n_heads) * D;
  p.q_stride_head = p.o_stride_head = D;
  p.out = d_out.p;
  p.n_q_heads = n_heads;
  p.attn_scale = float(L.attn_scale);
  p.blocks = {d_table.as<int32_t>(), pages, d_lens.as<int32_t>(), P};
  p.num_splits = o.splits;
  p.max_seq_len = int(T);
  std::unique_ptr<Buf> d_kc, d_vc;
  PagedCacheF16 fc;
  DecodePlan plan;
  if (format) {
    std::string why = decode_support(kf);
    if (why.empty()) why = decode_can_implement(kf, pc, p);
    if (!why.empty()) {
      c.not_run = "decode: " + why;
      return c;
    }
    plan = plan_decode(kf, pc, p);
  } else {
    std::vector<uint16_t> kc(total_slots * D, 0xffff), vc(total_slots * D, 0xffff);  // NaN in unused rows
    for (int64_t t = 0; t < T; ++t)
      for (int h = 0; h < H; ++h) {
        const size_t src = size_t(t * H + h) * D, dst = size_t(slot_of(t) * H + h) * D;
        std::copy_n(&kh[src], D, &kc[dst]);
        std::copy_n(&vh[src], D, &vc[dst]);
      }
    d_kc = std::make_unique<Buf>(kc.size() * 2);
    d_vc = std::make_unique<Buf>(vc.size() * 2);
    d_kc->upload(kc);
    d_vc->upload(vc);
    fc = {d_kc->p, d_vc->p, pages, bs, H, D};
    const std::string why = decode_f16_can_implement(fc, p);
    if (!why.empty()) {
      c.not_run = "decode: " + why;
      return c;
    }
    plan = plan_decode_f16(fc, p);
  }
  Buf ws(plan.workspace_bytes);
  TQ_CUDA_CHECK(cudaMemset(d_out.p, 0xff, d_out.bytes));
  if (format) paged_decode(kf, pc, p, plan, ws.p);
  else paged_decode_f16(fc, p, plan, ws.p);
  TQ_CUDA_CHECK(cudaDeviceSynchronize());
  const auto out = d_out.download<uint16_t>(qh.size());
  c.decoded = true;
  c.splits = plan.num_splits;
  c.parts = plan.parts;

  // float64 attention per (position, q head) over kref / vref
  const auto ref = attention_f64(qh, lens, kref, vref, n_heads, H, D, L.attn_scale);
  worst_row(ref, [&](size_t e) { return double(half_to_float(out[e])); }, pos, n_heads, D, c);
  return c;
}

DumpCheck simulate_lut_layer(const KvFormat& format, const KvDumpLayer& L, int n_heads, int n_kv_heads, int head_dim,
                             const DumpCheckOptions& o) {
  DumpCheck c;
  c.format = format.name;
  const int D = head_dim, H = n_kv_heads;
  const LayerInputs in = layer_inputs(L, n_heads, H, D, o, c);
  const auto* mse = dynamic_cast<const MseCodec*>(format.key.get());
  const auto* tk = dynamic_cast<const TurboCodec*>(format.key.get());
  const auto* tv = dynamic_cast<const TurboCodec*>(format.value.get());
  if (!mse && !(tk && tv && tk->kind() == tv->kind())) {
    c.not_run = "its keys are neither mse codes nor turbo blocks (the decode's LUT holds those)";
    return c;
  }
  KernelFormat kf;
  try {
    kf = kernel_format(format);
  } catch (const Error& e) {
    c.not_run = e.what();
    return c;
  }
  // The decode's LUT: half(α·c) (α·c in float, as the kernel computes it), the α undone.
  auto lut_codebook = [&](const ScalarCodebook& cb) {
    std::vector<float> lut_c(size_t(cb.levels()));
    for (int i = 0; i < cb.levels(); ++i)
      lut_c[size_t(i)] = float(double(half_to_float(float_to_half(kf.lut_scale * cb.centroids()[size_t(i)]))) /
                               double(kf.lut_scale));
    return std::make_shared<const ScalarCodebook>("fp16 LUT of " + cb.source(), lut_c, cb.midpoints());
  };
  KvFormat lut_format = format;
  if (mse) {  // keys only (the values' codes are exact in the MMA)
    lut_format.key = std::make_shared<MseCodec>(
        mse->bits(), mse->dim(), std::shared_ptr<const Rotation>(&mse->rotation(), [](const Rotation*) {}),
        lut_codebook(mse->codebook()), mse->norm_mode(), mse->name());
  } else {  // turbo: keys and values through the same LUT (one kind: one codebook)
    const auto cb = lut_codebook(tk->codebook());
    lut_format.key = std::make_shared<TurboCodec>(tk->kind(), tk->dim(), cb);
    lut_format.value = std::make_shared<TurboCodec>(tv->kind(), tv->dim(), cb);
  }
  const int64_t n = in.T * H;
  std::vector<float> k = to_float(in.kh), v = to_float(in.vh), k_lut(k.size()), v_lut(v.size());
  std::vector<uint8_t> slots(size_t(n) * format.slot_bytes());
  format.encode_slots(k.data(), v.data(), n, slots.data());
  format.decode_slots(slots.data(), n, k.data(), v.data());
  lut_format.decode_slots(slots.data(), n, k_lut.data(), v_lut.data());
  const auto ref = attention_f64(in.qh, in.lens, k, v, n_heads, H, D, L.attn_scale);
  const auto sim = attention_f64(in.qh, in.lens, k_lut, v_lut, n_heads, H, D, L.attn_scale);
  worst_row(ref, [&](size_t e) { return sim[e]; }, in.pos, n_heads, D, c);
  c.decoded = true;
  return c;
}

}  // namespace tq::cuda
