// Pieces shared by the quantized and the FP16 paged decode kernels (internal):
// the argument block, the token range of a CTA, the online-softmax update and
// the write-out of a warp's result, and the stage-2 merge launcher.
//
// Work decomposition (both kernels): CTA (work item, head group) with
// heads_per_cta (HPC) kv heads × warps_per_head (WPH) warps; a work item is a chunk of
// one sequence's tokens (dev::work_item). One pipeline stage
// holds WPH sub-tiles of consecutive tokens (16 in the FP16 kernel, 32 in the
// quantized one) × HPC heads; warp (h, w) owns head h of sub-tile w in every
// stage and keeps its own softmax state; its result is one "part" (item·WPH + w)
// of the log-sum-exp merge.
//
// MMA orientation: M = tokens (keys) or head dims (values), N = the query
// group (G ≤ 8 columns; columns ≥ G are zero; the quantized kernel packs the
// fp16 hi and lo parts of G ≤ 4 queries into columns 0–3 and 4–7), so no M rows
// are wasted:
//   S^T[tok, g]  = K[tok, :] · Q'[g, :]^T          (A = keys, B = queries)
//   O^T[dim, g] += V^T[dim, tok] · P^T[tok, g]      (A = values, B = probabilities)
// Lane l (r = l/4, p = l%4) holds scores of tokens r, r+8 for query columns 2p, 2p+1,
// and output rows of the same two columns, so the softmax rescale is lane-local.
#pragma once

#include <cstdint>

#include "common.cuh"
#include "tq/cuda/decode.h"

namespace tq::cuda {

struct DecodeArgs {
  const __half* q;
  int64_t q_sb, q_sh;
  __half* out;
  int64_t o_sb, o_sh;
  float* o_part;    // [n_q_heads, items, wph, D] (parts > 1): item i's warp w's partial output
  float* lse_part;  // [n_q_heads, items, wph], log2 domain; −inf = empty part
  int2* seq_items;  // [batch] (items > batch): sequence b's first work item and item count
  const int32_t* table;
  int table_stride;
  const int32_t* seq_lens;
  int block_size, log2_block_size, n_kv_heads, n_q_heads, group;
  int batch, hpc, wph, items, parts, stages;
  int stage_bytes;  // WPH · sub-tile tokens · HPC · (bytes of one token-head)
  // quantized decode: ring pieces (16-token halves) 0 … ring_split−1 from the dynamic
  // shared-memory base, the rest from shared address ring_hi; q buffers at qbuf_addr
  // (0: right after the ring)
  int ring_split;
  uint32_t ring_hi, qbuf_addr;
  float scale_log2;  // attn_scale · log2(e)
};

namespace dev {

// ---- Work items: which tokens of which sequence a CTA reads ----
// The grid has n_items ≥ batch CTAs per head group. Sequence b's t_b = ceil(len_b / tile)
// tiles are cut into count_b = max(1, ceil(t_b / L)) chunks of L tiles (the last one
// shorter), L the smallest chunk for which Σ count_b ≤ n_items, and sequence b's chunks
// are items first_b … first_b + count_b − 1 (first_b = Σ_{b' < b} count_b'); items past
// Σ count_b are unused. So the batch's tokens are dealt out evenly over the grid whatever
// the lengths (a long sequence among short ones gets most of the items), from the
// seq_lens on the device: the grid depends on n_items only, and a captured graph replayed
// with new lengths deals them out anew. An empty sequence still has one (empty) item, so
// every sequence's parts are written; the CTA of a sequence's first item writes
// (first_b, count_b) to DecodeArgs::seq_items for the merge. n_items == batch: item b is
// all of sequence b.
// The functions are warp-collective: every lane of the warp calls them with the same
// arguments and gets the same result.
struct Range {
  int begin, end, tiles;  // tokens [begin, end), tiles of `tile` tokens
};
struct WorkItem {
  int b;      // sequence; −1: an unused item
  int k;      // chunk of the sequence (0 … count − 1)
  int count;  // count_b
  Range r;
};

__device__ __forceinline__ int tiles_of(int len, int tile) { return len > 0 ? (len - 1) / tile + 1 : 0; }
__device__ __forceinline__ int chunks_of(int t, int L) { return t > L ? (t - 1) / L + 1 : 1; }

// The tile counts of this lane's sequences b = lane + 32j: j < kRegs read once into
// registers (batches up to 64: one global round trip), the rest re-read where used.
struct LaneTiles {
  static constexpr int kRegs = 2;
  const int32_t* lens;
  int batch, tile, lane;
  int t[kRegs];
  __device__ __forceinline__ LaneTiles(const int32_t* l, int n, int tl)
      : lens(l), batch(n), tile(tl), lane(int(threadIdx.x & 31)) {
#pragma unroll
    for (int j = 0; j < kRegs; ++j) t[j] = lane + 32 * j < batch ? tiles_of(max(lens[lane + 32 * j], 0), tile) : 0;
  }
  __device__ __forceinline__ int at(int b) const { return tiles_of(max(lens[b], 0), tile); }
  // f(b, t_b) over this lane's sequences, in order
  template <class F>
  __device__ __forceinline__ void each(F&& f) const {
#pragma unroll
    for (int j = 0; j < kRegs; ++j)
      if (lane + 32 * j < batch) f(lane + 32 * j, t[j]);
    for (int b = lane + 32 * kRegs; b < batch; b += 32) f(b, at(b));
  }
  // f(b0, t of sequence b0 + lane, or −1 past the batch) for b0 = 0, 32, 64, … (warp-uniform
  // calls, in order) while f returns false
  template <class F>
  __device__ __forceinline__ void chunks(F&& f) const {
#pragma unroll
    for (int j = 0; j < kRegs; ++j) {
      if (32 * j >= batch) return;
      if (f(32 * j, lane + 32 * j < batch ? t[j] : -1)) return;
    }
    for (int b0 = 32 * kRegs; b0 < batch; b0 += 32)
      if (f(b0, b0 + lane < batch ? at(b0 + lane) : -1)) return;
  }
};

// L, the chunk in tiles (n_items > batch).
__device__ __forceinline__ int chunk_tiles(const LaneTiles& lt, int n_items) {
  long long total = 0;
  int tmax = 0;
  lt.each([&](int, int t) {
    total += t;
    tmax = max(tmax, t);
  });
#pragma unroll
  for (int o = 16; o >= 1; o >>= 1) total += __shfl_xor_sync(kFull, total, o);
  tmax = int(__reduce_max_sync(kFull, unsigned(tmax)));
  // count(L) = Σ_b chunks_of(t_b, L) does not grow with L, and count(tmax) = batch ≤
  // n_items. The lower bound ceil(Σ t / n_items) is the answer when the lengths are equal
  // (and for one sequence): tried first.
  const int lo0 = int(max(1LL, (total + n_items - 1) / n_items));
  auto fits = [&](int L) {
    int c = 0;  // capped, so the sum cannot overflow
    lt.each([&](int, int t) { c = min(c + chunks_of(t, L), n_items + 1); });
    return int(__reduce_add_sync(kFull, unsigned(c))) <= n_items;
  };
  if (lt.batch == 1 || fits(lo0)) return lo0;
  int lo = lo0 + 1, hi = max(lo, tmax);
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    if (fits(mid)) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

__device__ __forceinline__ WorkItem work_item(const int32_t* lens, int batch, int n_items, int tile, int item) {
  WorkItem w{-1, 0, 1, {0, 0, 0}};
  int chunk;  // tokens
  if (n_items == batch) {
    w.b = item;
    chunk = 1 << 30;
  } else {
    const LaneTiles lt(lens, batch, tile);
    const int L = chunk_tiles(lt, n_items);
    chunk = L * tile;
    int base = 0;  // items of the sequences before b0
    lt.chunks([&](int b0, int t) {
      const int c = t >= 0 ? chunks_of(t, L) : 0;
      int incl = c;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int v = __shfl_up_sync(kFull, incl, o);
        if (lt.lane >= o) incl += v;
      }
      const int first = base + incl - c;
      const unsigned m = __ballot_sync(kFull, c > 0 && item >= first && item < first + c);
      if (m) {
        const int src = __ffs(m) - 1;
        w.b = b0 + src;
        w.k = item - __shfl_sync(kFull, first, src);
        w.count = __shfl_sync(kFull, c, src);
        return true;
      }
      base += __shfl_sync(kFull, incl, 31);
      return false;
    });  // not found: an unused item
  }
  if (w.b >= 0) {
    const int len = max(lens[w.b], 0);
    w.r.begin = w.k * chunk;
    w.r.end = min(len, w.r.begin + min(chunk, len));
    w.r.tiles = w.r.begin < w.r.end ? tiles_of(w.r.end - w.r.begin, tile) : 0;
  }
  return w;
}

// 2^x with one MUFU.EX2 (ex2.approx.ftz: ~2 ulp, −inf → 0, results below 2^-126 → 0);
// exp2f adds a range check and two multiplies around it (quantized decode).
__device__ __forceinline__ float ex2_fast(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float rsqrt_fast(float x) {
  float y;
  asm("rsqrt.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Online softmax over one 16-token sub-tile for the lane's two query columns (FP16 kernel;
// the quantized decode's 32-token version is Softmax32 in decode.cu).
// x[0..1]: token r, x[2..3]: token r+8 (log2-domain logits, −inf = masked).
// Returns α (rescale of the old state) per column and overwrites x with p.
struct Softmax {
  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.f, 0.f};  // per-lane partial sums (reduced over the 8 token lanes at the end)
  __device__ __forceinline__ static float e2(float v) { return exp2f(v); }
  __device__ __forceinline__ void update(float (&x)[4], float (&alpha)[2]) {
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      float mx = fmaxf(x[c], x[c + 2]);
      mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 4));
      mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 8));
      mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 16));
      const float mn = fmaxf(m[c], mx);  // finite: the sub-tile has ≥ 1 valid token
      alpha[c] = e2(m[c] - mn);          // m = −inf → 0
      m[c] = mn;
      x[c] = e2(x[c] - mn);
      x[c + 2] = e2(x[c + 2] - mn);
      l[c] = l[c] * alpha[c] + x[c] + x[c + 2];
    }
  }
};

__device__ __forceinline__ float sum_over_token_lanes(float v) {
  v += __shfl_xor_sync(kFull, v, 4);
  v += __shfl_xor_sync(kFull, v, 8);
  v += __shfl_xor_sync(kFull, v, 16);
  return v;
}

}  // namespace dev

// Stage 2: out[b, h, :] = Σ_parts 2^(lse_i − max) o_i / Σ 2^(lse_i − max); parts
// with lse = −inf (empty ranges) are skipped; a sequence with no tokens gives 0.
void launch_decode_merge(const DecodeArgs& a, int batch, int head_dim, cudaStream_t stream);

// The split-KV workspace: partial outputs [rows, head_dim] fp32, their LSEs [rows], each
// sequence's (first item, item count) [batch]; rows = items · n_q_heads · wph; 256-byte aligned pieces.
struct WorkspaceLayout {
  size_t lse_off, items_off, bytes;
  WorkspaceLayout(int items, int n_q_heads, int wph, int head_dim, int batch) {
    const size_t rows = size_t(items) * size_t(n_q_heads) * size_t(wph);
    lse_off = (rows * size_t(head_dim) * 4 + 255) / 256 * 256;
    items_off = lse_off + (rows * 4 + 255) / 256 * 256;
    bytes = items_off + size_t(batch) * 8;
  }
};

// The launch arguments both paged decodes share (queries, outputs, split-KV
// workspace: per-part partial outputs then their LSEs, 256-byte aligned; block
// table; GQA shape; plan).
inline DecodeArgs make_decode_args(const DecodeParams& p, const DecodePlan& plan, void* workspace, int head_dim,
                                   int block_size, int n_kv_heads) {
  DecodeArgs a{};
  a.q = static_cast<const __half*>(p.query);
  a.q_sb = p.q_stride_batch;
  a.q_sh = p.q_stride_head;
  a.out = static_cast<__half*>(p.out);
  a.o_sb = p.o_stride_batch;
  a.o_sh = p.o_stride_head;
  const WorkspaceLayout wl(plan.items, p.n_q_heads, plan.warps_per_head, head_dim, p.blocks.batch);
  uint8_t* ws = static_cast<uint8_t*>(workspace);
  a.o_part = static_cast<float*>(workspace);
  a.lse_part = ws ? reinterpret_cast<float*>(ws + wl.lse_off) : nullptr;
  a.seq_items = ws ? reinterpret_cast<int2*>(ws + wl.items_off) : nullptr;
  a.table = p.blocks.table;
  a.table_stride = p.blocks.stride;
  a.seq_lens = p.blocks.seq_lens;
  a.block_size = block_size;
  a.log2_block_size = __builtin_ctz(unsigned(block_size));
  a.n_kv_heads = n_kv_heads;
  a.n_q_heads = p.n_q_heads;
  a.group = p.n_q_heads / n_kv_heads;
  a.hpc = plan.heads_per_cta;
  a.wph = plan.warps_per_head;
  a.batch = p.blocks.batch;
  a.items = plan.items;
  a.parts = plan.parts;
  a.scale_log2 = p.attn_scale * 1.4426950408889634f;
  return a;
}

struct DecodePlan;
struct DecodeParams;
// Heads per CTA, warps per head, ring depth and shared memory of a plan: a stage
// holds warps_per_head sub-tiles of sub_tokens tokens × heads_per_cta heads
// (heads_per_cta · warps_per_head ≤ cta_warps); two CTAs per SM need
// ≥ two_cta_min_stages stages, else one CTA takes the deepest ring.
void plan_layout(int n_kv_heads, int sub_tokens, int token_head_bytes, int fixed_dyn, int static_smem,
                 int smem_optin, DecodePlan& plan, int& stage_bytes, int& stages, bool flexible_heads,
                 int two_cta_min_stages, int cta_warps);
// Split count (fixed or auto), parts and workspace size of a plan.
void finish_plan(const DecodeParams& p, int head_dim, int sm_count, int sub_tokens, DecodePlan& plan);
int decode_device_sms();
int decode_device_smem_optin();

namespace dev {
// x / n for x < 8192, 1 ≤ n ≤ 8: (x·ceil(2^16/n)) >> 16 (error < x/2^16 < 1/8 ≤ 1 − (n−1)/n).
__device__ __forceinline__ int small_div(int x, int magic) { return (x * magic) >> 16; }
}  // namespace dev

}  // namespace tq::cuda
