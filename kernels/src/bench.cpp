// GPU timing harness of tq-bench (see tq/cuda/bench.h).
#include "tq/cuda/bench.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <numeric>
#include <vector>

#include <cuda_runtime.h>

#include "buffer.h"
#include "tq/cuda/check.h"
#include "tq/cuda/dequant.h"
#include "tq/cuda/kernel_format.h"
#include "tq/cuda/store.h"
#include "tq/error.h"
#include "tq/format.h"
#include "tq/rng.h"

namespace tq::cuda {

namespace {

// Warm-up, then `reps` launches each between two events; launch(i) gets the rep index.
Timing time_launches(const BenchOptions& o, const std::function<void(int)>& launch) {
  for (int i = 0; i < o.warmup; ++i) launch(i);
  TQ_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<cudaEvent_t> ev(size_t(2 * o.reps));
  for (auto& e : ev) TQ_CUDA_CHECK(cudaEventCreate(&e));
  for (int i = 0; i < o.reps; ++i) {
    TQ_CUDA_CHECK(cudaEventRecord(ev[size_t(2 * i)]));
    launch(i);
    TQ_CUDA_CHECK(cudaEventRecord(ev[size_t(2 * i + 1)]));
  }
  TQ_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<double> ms(size_t(o.reps));
  for (int i = 0; i < o.reps; ++i) {
    float t = 0;
    TQ_CUDA_CHECK(cudaEventElapsedTime(&t, ev[size_t(2 * i)], ev[size_t(2 * i + 1)]));
    ms[size_t(i)] = t;
  }
  for (auto& e : ev) cudaEventDestroy(e);
  std::sort(ms.begin(), ms.end());
  Timing t;
  t.reps = o.reps;
  t.median_ms = o.reps % 2 ? ms[size_t(o.reps / 2)] : 0.5 * (ms[size_t(o.reps / 2 - 1)] + ms[size_t(o.reps / 2)]);
  t.min_ms = ms.front();
  t.max_ms = ms.back();
  return t;
}

size_t free_device_bytes() {
  size_t free = 0, total = 0;
  TQ_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return free;
}

size_t l2_bytes() {
  int dev = 0, l2 = 0;
  TQ_CUDA_CHECK(cudaGetDevice(&dev));
  TQ_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  return size_t(l2);
}

// Enough copies that the working set is ≥ 4× L2 (at least 2), within half the free memory.
int cache_copies(size_t bytes) {
  const size_t want = (4 * l2_bytes() + bytes - 1) / bytes;
  int n = int(std::clamp<size_t>(want, 2, 8));
  while (n > 1 && size_t(n) * bytes > free_device_bytes() / 2) --n;
  TQ_CHECK(size_t(n) * bytes <= free_device_bytes(), "tq-bench: a {:.2f} GB cache does not fit in device memory",
           double(bytes) / 1e9);
  return n;
}

// The block table of every sequence, in the order BenchShape::pages asks for (shuffled:
// a fixed seed, so every run reads the same pages).
std::vector<int32_t> block_tables(const BenchShape& s, int pages_per_seq) {
  std::vector<int32_t> t(size_t(s.batch) * size_t(pages_per_seq));
  std::iota(t.begin(), t.end(), 0);
  if (s.pages == BenchShape::Pages::resident)
    for (auto& v : t) v %= BenchShape::kResidentBlocks;
  if (s.pages != BenchShape::Pages::shuffled) return t;
  Rng rng(1);
  shuffle(t, rng);
  return t;
}

void check_shape(const BenchShape& s) {
  TQ_CHECK(s.batch >= 1 && s.ctx >= 1 && s.n_kv_heads >= 1 && s.n_q_heads >= 1,
           "tq-bench: batch, ctx and head counts must be ≥ 1");
  TQ_CHECK(s.seq_lens.empty() || s.seq_lens.size() == size_t(s.batch),
           "tq-bench: {} sequence lengths for a batch of {}", s.seq_lens.size(), s.batch);
  for (size_t b = 0; b < s.seq_lens.size(); ++b)
    TQ_CHECK(s.seq_lens[b] >= 1 && s.seq_lens[b] <= s.ctx, "tq-bench: sequence {} has {} tokens (must be 1 … {})", b,
             s.seq_lens[b], s.ctx);
}

// The shape's block tables (host copy and device) and seq_lens (BenchShape::len).
struct TableSetup {
  std::vector<int32_t> host;
  std::unique_ptr<Buf> table, lens;
  BlockTable blocks;
};

TableSetup table_setup(const BenchShape& s, int pages_per_seq) {
  TableSetup t;
  t.host = block_tables(s, pages_per_seq);
  t.table = std::make_unique<Buf>(t.host.size() * 4);
  TQ_CUDA_CHECK(cudaMemcpy(t.table->p, t.host.data(), t.host.size() * 4, cudaMemcpyHostToDevice));
  std::vector<int32_t> lens(size_t(s.batch));
  for (int b = 0; b < s.batch; ++b) lens[size_t(b)] = s.len(b);
  t.lens = std::make_unique<Buf>(lens.size() * 4);
  TQ_CUDA_CHECK(cudaMemcpy(t.lens->p, lens.data(), lens.size() * 4, cudaMemcpyHostToDevice));
  t.blocks = {t.table->as<int32_t>(), pages_per_seq, t.lens->as<int32_t>(), s.batch};
  return t;
}

struct DecodeSetup {
  std::unique_ptr<Buf> q, out, ws;
  DecodeParams p;
};

// Queries, output and parameters of a decode over the given block tables (q_len query tokens per
// sequence, [batch, q_len, n_q_heads, head_dim]).
DecodeSetup decode_setup(const BenchShape& s, const BlockTable& blocks, int q_len = 1) {
  DecodeSetup d;
  const size_t qn = size_t(s.batch) * size_t(q_len) * s.n_q_heads * s.head_dim;
  d.q = std::make_unique<Buf>(qn * 2);
  d.out = std::make_unique<Buf>(qn * 2);
  fill_random_16(d.q->p, qn, 7, 0.f, 1.f, s.dtype);
  d.p.query = d.q->p;
  d.p.q_len = q_len;
  d.p.q_stride_token = d.p.o_stride_token = q_len > 1 ? int64_t(s.n_q_heads) * s.head_dim : 0;
  d.p.q_stride_batch = d.p.o_stride_batch = int64_t(q_len) * s.n_q_heads * s.head_dim;
  d.p.q_stride_head = d.p.o_stride_head = s.head_dim;
  d.p.out = d.out->p;
  d.p.n_q_heads = s.n_q_heads;
  d.p.dtype = s.dtype;
  d.p.attn_scale = float(1.0 / std::sqrt(double(s.head_dim)));
  d.p.blocks = blocks;
  d.p.num_splits = s.num_splits;
  d.p.column_tiles = s.column_tiles;
  d.p.even_dealing = s.even_dealing;
  d.p.max_seq_len = s.ctx;
  return d;
}

// pages per sequence
int seq_pages(const BenchShape& s) { return (s.ctx + s.block_size - 1) / s.block_size; }

// bytes of one copy of the shape's quantized cache (whole pages)
size_t paged_cache_bytes(const KernelFormat& kf, const BenchShape& s) {
  return size_t(s.batch) * size_t(seq_pages(s)) * s.block_size * s.n_kv_heads * kf.slot_bytes;
}

// Fills a paged cache through the store kernel (random fp16 K/V, chunk by chunk), at the
// slots the block tables `tab` (host) give: the tokens [0, len(b)) of every sequence (a
// ragged batch's shorter sequences leave the rest of their pages unwritten; nothing reads it).
void fill_paged_cache(const KernelFormat& kf, const BenchShape& s, const PagedCache& cache,
                      const std::vector<int32_t>& tab) {
  const int pages = seq_pages(s);
  const int64_t total = s.total_tokens();
  const int64_t chunk = std::min<int64_t>(total, 32768);
  const size_t elems = size_t(chunk) * s.n_kv_heads * s.head_dim;
  Buf k(elems * 2), v(elems * 2), map(size_t(chunk) * 8);
  std::vector<int64_t> slots(static_cast<size_t>(chunk));
  StoreParams sp = StoreParams::contiguous(k.p, v.p, map.as<int64_t>(), 0, s.head_dim, cache);
  int64_t b = 0, pos = 0;  // the next token to store
  for (int64_t t0 = 0; t0 < total; t0 += chunk) {
    const int64_t n = std::min(chunk, total - t0);
    for (int64_t i = 0; i < n; ++i, ++pos) {
      while (pos == s.len(int(b))) ++b, pos = 0;
      slots[size_t(i)] = int64_t(tab[size_t(b * pages + pos / s.block_size)]) * s.block_size + pos % s.block_size;
    }
    TQ_CUDA_CHECK(cudaMemcpy(map.p, slots.data(), size_t(n) * 8, cudaMemcpyHostToDevice));
    fill_random_16(k.p, size_t(n) * s.n_kv_heads * s.head_dim, uint64_t(2 * t0 + 11), 0.f, 1.f);
    fill_random_16(v.p, size_t(n) * s.n_kv_heads * s.head_dim, uint64_t(2 * t0 + 12), 0.3f, 1.f);
    sp.num_tokens = int(n);
    store_kv(kf, sp);
  }
}

// The shape's quantized paged cache in `copies` equal copies (as many as cache_copies
// allows, so launches rotating among them read from HBM, not L2): copy 0 filled through
// the store kernel at the slots of `tables`, the others copied from it.
struct Caches {
  int copies = 0;
  TableSetup tables;
  std::vector<std::unique_ptr<Buf>> bufs;
  PagedCache cache;  // copy 0
  PagedCache view(int i) const {  // copy i % copies
    PagedCache c = cache;
    c.data = bufs[size_t(i % copies)]->as<uint8_t>();
    return c;
  }
};

Caches filled_caches(const KernelFormat& kf, const BenchShape& s) {
  Caches c;
  const int pages = seq_pages(s);
  c.tables = table_setup(s, pages);
  const size_t bytes = paged_cache_bytes(kf, s);
  c.copies = cache_copies(bytes);
  for (int i = 0; i < c.copies; ++i) c.bufs.push_back(std::make_unique<Buf>(bytes));
  c.cache = {c.bufs[0]->as<uint8_t>(), int64_t(s.batch) * pages, s.block_size, s.n_kv_heads, kf.slot_bytes,
             s.planes ? CacheLayout::planes : CacheLayout::vllm};
  fill_paged_cache(kf, s, c.cache, c.tables.host);
  for (int i = 1; i < c.copies; ++i)
    TQ_CUDA_CHECK(cudaMemcpy(c.bufs[size_t(i)]->p, c.bufs[0]->p, bytes, cudaMemcpyDeviceToDevice));
  TQ_CUDA_CHECK(cudaDeviceSynchronize());
  return c;
}

// The shape's fp16 paged K and V (random, as a model's) in `copies` copies, as Caches.
struct F16Caches {
  int copies = 0;
  int64_t num_blocks = 0;
  TableSetup tables;
  std::vector<std::unique_ptr<Buf>> ks, vs;
  int block_size = 0, n_kv_heads = 0, head_dim = 0;
  PagedCacheF16 view(int i) const {  // copy i % copies
    return {ks[size_t(i % copies)]->p, vs[size_t(i % copies)]->p, num_blocks, block_size, n_kv_heads, head_dim};
  }
};

F16Caches filled_f16_caches(const BenchShape& s) {
  F16Caches c;
  const int pages = seq_pages(s);
  c.num_blocks = int64_t(s.batch) * pages;
  c.block_size = s.block_size;
  c.n_kv_heads = s.n_kv_heads;
  c.head_dim = s.head_dim;
  const size_t elems = size_t(c.num_blocks) * s.block_size * s.n_kv_heads * s.head_dim;
  c.copies = cache_copies(4 * elems);  // K and V of one copy
  for (int i = 0; i < c.copies; ++i) {
    c.ks.push_back(std::make_unique<Buf>(2 * elems));
    c.vs.push_back(std::make_unique<Buf>(2 * elems));
    fill_random_16(c.ks.back()->p, elems, uint64_t(100 + 2 * i), 0.f, 1.f);
    fill_random_16(c.vs.back()->p, elems, uint64_t(101 + 2 * i), 0.3f, 1.f);
  }
  c.tables = table_setup(s, pages);
  return c;
}

// Our FP16 decode of q_len queries per sequence (fp16 whatever s.dtype), timed over a fresh fp16 cache of the shape.
DecodeBench f16_decode(const BenchShape& s_in, int q_len, const BenchOptions& o) {
  BenchShape s = s_in;
  s.dtype = Dtype16::f16;
  const F16Caches caches = filled_f16_caches(s);
  DecodeBench r;
  r.copies = caches.copies;
  DecodeSetup d = decode_setup(s, caches.tables.blocks, q_len);
  r.plan = plan_decode_f16(caches.view(0), d.p);
  d.ws = std::make_unique<Buf>(r.plan.workspace_bytes);
  r.t = time_launches(o, [&](int i) { paged_decode_f16(caches.view(i), d.p, r.plan, d.ws->p); });
  r.kv_bytes = size_t(s.total_tokens()) * s.n_kv_heads * s.head_dim * 4;
  r.gbps = double(r.kv_bytes) / (r.t.median_ms * 1e6);
  return r;
}

}  // namespace

CopyBench bench_copy(size_t bytes, const BenchOptions& o) {
  Buf a(bytes), b(bytes);
  TQ_CUDA_CHECK(cudaMemset(a.p, 1, bytes));
  TQ_CUDA_CHECK(cudaMemset(b.p, 2, bytes));
  BenchOptions oo = o;
  oo.reps = std::max(10, std::min(o.reps, 20));
  CopyBench r;
  r.bytes = bytes;
  r.t = time_launches(oo, [&](int i) {
    if (i % 2) TQ_CUDA_CHECK(cudaMemcpyAsync(a.p, b.p, bytes, cudaMemcpyDeviceToDevice));
    else TQ_CUDA_CHECK(cudaMemcpyAsync(b.p, a.p, bytes, cudaMemcpyDeviceToDevice));
  });
  r.gbps = 2.0 * double(bytes) / (r.t.median_ms * 1e6);
  return r;
}

DecodeBench bench_decode(const KvFormat& f, const BenchShape& s, const BenchOptions& o) {
  check_shape(s);
  const KernelFormat kf = kernel_format(f);
  const Caches caches = filled_caches(kf, s);
  DecodeBench r;
  r.copies = caches.copies;
  DecodeSetup d = decode_setup(s, caches.tables.blocks);
  r.plan = plan_decode(kf, caches.cache, d.p);
  d.ws = std::make_unique<Buf>(r.plan.workspace_bytes);
  r.t = time_launches(o, [&](int i) { paged_decode(kf, caches.view(i), d.p, r.plan, d.ws->p); });
  r.kv_bytes = size_t(s.total_tokens()) * s.n_kv_heads * kf.slot_bytes;
  r.gbps = double(r.kv_bytes) / (r.t.median_ms * 1e6);
  return r;
}

MultiQueryBench bench_multi_query(const KvFormat& f, const BenchShape& s, int q_len, const BenchOptions& o) {
  check_shape(s);
  TQ_CHECK(q_len >= 2 && q_len <= kMaxQueryLen, "tq-bench: --q-len {} must be 2 … {}", q_len, kMaxQueryLen);
  const KernelFormat kf = kernel_format(f);
  const Caches caches = filled_caches(kf, s);
  MultiQueryBench r;
  r.q_len = q_len;
  r.copies = caches.copies;
  DecodeSetup one = decode_setup(s, caches.tables.blocks), many = decode_setup(s, caches.tables.blocks, q_len);
  const DecodePlan p1 = plan_decode(kf, caches.cache, one.p);
  r.plan = plan_decode(kf, caches.cache, many.p);
  one.ws = std::make_unique<Buf>(p1.workspace_bytes);
  many.ws = std::make_unique<Buf>(r.plan.workspace_bytes);
  r.single = time_launches(o, [&](int i) { paged_decode(kf, caches.view(i), one.p, p1, one.ws->p); });
  r.fused = time_launches(o, [&](int i) { paged_decode(kf, caches.view(i), many.p, r.plan, many.ws->p); });
  // q_len single-query decodes, each over the whole sequence (query j needs len − q_len + 1 + j positions:
  // at most q_len − 1 tokens fewer), each on the next cache copy
  r.separate = time_launches(o, [&](int i) {
    for (int j = 0; j < q_len; ++j) paged_decode(kf, caches.view(i * q_len + j), one.p, p1, one.ws->p);
  });
  if (!s.q_counts.empty()) {  // the same launch with each sequence's own count: rows q_start[b] … (vLLM's layout)
    TQ_CHECK(s.q_counts.size() == size_t(s.batch) &&
                 *std::max_element(s.q_counts.begin(), s.q_counts.end()) == q_len &&
                 *std::min_element(s.q_counts.begin(), s.q_counts.end()) >= 1,
             "tq-bench: {} query counts for a batch of {}: each 1 … q_len {}, the largest q_len", s.q_counts.size(),
             s.batch, q_len);
    DecodeSetup vl = decode_setup(s, caches.tables.blocks, q_len);
    std::vector<int32_t> starts(size_t(s.batch) + 1, 0);
    for (int b = 0; b < s.batch; ++b) starts[size_t(b) + 1] = starts[size_t(b)] + s.q_counts[size_t(b)];
    Buf qs(starts.size() * 4);
    TQ_CUDA_CHECK(cudaMemcpy(qs.p, starts.data(), starts.size() * 4, cudaMemcpyHostToDevice));
    vl.p.q_stride_batch = vl.p.o_stride_batch = 0;
    vl.p.q_start = qs.as<int32_t>();
    vl.p.q_rows = starts.back();
    const DecodePlan pv = plan_decode(kf, caches.cache, vl.p);
    vl.ws = std::make_unique<Buf>(pv.workspace_bytes);
    r.varlen = time_launches(o, [&](int i) { paged_decode(kf, caches.view(i), vl.p, pv, vl.ws->p); });
    // every query a single-query row of its own: sequence b's block-table row and len − count + 1 + j positions
    const int pages = caches.tables.blocks.stride;
    std::vector<int32_t> rtab, rlens;
    for (int b = 0; b < s.batch; ++b) {
      const int n = s.q_counts[size_t(b)];
      for (int j = 0; j < n; ++j) {
        rtab.insert(rtab.end(), caches.tables.host.begin() + int64_t(b) * pages,
                    caches.tables.host.begin() + int64_t(b + 1) * pages);
        rlens.push_back(std::max(1, s.len(b) - n + 1 + j));  // (a query that sees nothing: one position)
      }
    }
    Buf rt(rtab.size() * 4), rl(rlens.size() * 4);
    rt.upload(rtab);
    rl.upload(rlens);
    BenchShape rs = s;
    rs.batch = int(rlens.size());
    rs.seq_lens.clear();  // (the rows' lengths are rl's)
    rs.q_counts.clear();
    DecodeSetup rw = decode_setup(rs, BlockTable{rt.as<int32_t>(), pages, rl.as<int32_t>(), rs.batch});
    const DecodePlan pr = plan_decode(kf, caches.cache, rw.p);
    rw.ws = std::make_unique<Buf>(pr.workspace_bytes);
    r.rows = time_launches(o, [&](int i) { paged_decode(kf, caches.view(i), rw.p, pr, rw.ws->p); });
  }
  r.kv_bytes = size_t(s.total_tokens()) * s.n_kv_heads * kf.slot_bytes;
  r.gbps = double(r.kv_bytes) / (r.fused.median_ms * 1e6);
  const DecodeBench f16 = f16_decode(s, q_len, o);  // our FP16 decode of the same q_len
  r.f16 = f16.t;
  r.f16_plan = f16.plan;
  return r;
}

DecodeBench bench_decode_f16(const BenchShape& s, const BenchOptions& o) {
  check_shape(s);
  return f16_decode(s, 1, o);
}

DequantBench bench_dequant(const KvFormat& f, const BenchShape& s, DequantDtype dtype, const BenchOptions& o) {
  check_shape(s);
  TQ_CHECK(!s.planes, "tq-bench: dequant reads the vLLM cache layout only");
  const KernelFormat kf = kernel_format(f);
  const size_t rows = size_t(s.total_tokens()), out_bytes = rows * s.n_kv_heads * s.head_dim * 2;
  TQ_CHECK(2 * out_bytes + 2 * paged_cache_bytes(kf, s) <= free_device_bytes(),  // outputs + two cache copies
           "tq-bench: the dequant's output ({:.2f} GB for K and V) does not fit in device memory "
           "(--dequant none skips the dequant)",
           2e-9 * double(out_bytes));
  Buf ko(out_bytes), vo(out_bytes);  // written, not read: one pair (allocated first: cache_copies sees the rest)
  const Caches caches = filled_caches(kf, s);
  DequantBench r;
  r.copies = caches.copies;
  std::vector<int32_t> offs(size_t(s.batch));  // sequence b → output rows Σ_{b' < b} len(b') …
  for (int b = 1; b < s.batch; ++b) offs[size_t(b)] = offs[size_t(b - 1)] + s.len(b - 1);
  Buf doffs(offs.size() * 4);
  TQ_CUDA_CHECK(cudaMemcpy(doffs.p, offs.data(), offs.size() * 4, cudaMemcpyHostToDevice));
  DequantParams p;
  p.blocks = caches.tables.blocks;
  p.out_offsets = doffs.as<int32_t>();
  p.k_out = ko.p;
  p.v_out = vo.p;
  p.max_seq_len = s.ctx;
  p.dtype = dtype;
  r.t = time_launches(o, [&](int i) {
    p.cache = caches.view(i);
    dequant_paged(kf, p);
  });
  r.bytes = rows * s.n_kv_heads * kf.slot_bytes + 2 * out_bytes;
  r.gbps = double(r.bytes) / (r.t.median_ms * 1e6);
  return r;
}

StoreBench bench_store(const KvFormat& f, const BenchShape& s, int64_t tokens, const BenchOptions& o) {
  check_shape(s);
  const KernelFormat kf = kernel_format(f);
  const int64_t num_blocks = (tokens + s.block_size - 1) / s.block_size;
  const size_t elems = size_t(tokens) * s.n_kv_heads * s.head_dim;
  const size_t cache_bytes = size_t(num_blocks) * s.block_size * s.n_kv_heads * kf.slot_bytes;
  Buf k(elems * 2), v(elems * 2), map(size_t(tokens) * 8), cache(cache_bytes);
  fill_random_16(k.p, elems, 21, 0.f, 1.f, s.dtype);
  fill_random_16(v.p, elems, 22, 0.3f, 1.f, s.dtype);
  std::vector<int64_t> slots(static_cast<size_t>(tokens));
  std::iota(slots.begin(), slots.end(), 0);
  Rng rng(3);
  shuffle(slots, rng);
  TQ_CUDA_CHECK(cudaMemcpy(map.p, slots.data(), slots.size() * 8, cudaMemcpyHostToDevice));
  const StoreParams sp = StoreParams::contiguous(
      k.p, v.p, map.as<int64_t>(), int(tokens), s.head_dim,
      {cache.as<uint8_t>(), num_blocks, s.block_size, s.n_kv_heads, kf.slot_bytes,
       s.planes ? CacheLayout::planes : CacheLayout::vllm},
      s.dtype);
  StoreBench r;
  r.tokens = tokens;
  r.t = time_launches(o, [&](int) { store_kv(kf, sp); });
  r.bytes = elems * 4 + size_t(tokens) * s.n_kv_heads * kf.slot_bytes + size_t(tokens) * 8;
  r.gbps = double(r.bytes) / (r.t.median_ms * 1e6);
  r.tokens_per_s = double(tokens) / (r.t.median_ms * 1e-3);
  return r;
}

}  // namespace tq::cuda
