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
// group (≤ 8 columns; columns ≥ G are zero; the quantized kernel packs the
// fp16 hi and lo parts of G ≤ 4 queries into columns 0–3 and 4–7), so no M rows
// are wasted. G > 8 query heads per kv head run as ⌈G/8⌉ stage-1 launches of ≤ 8
// columns each (for_each_query_slice), so each such launch reads the cache once — or, in
// the quantized decode at 8 < G ≤ 16 (dual_slices_fit), as one launch whose CTA has a
// second set of HPC × WPH warps for columns 8 … G − 1, both sets on the same ring stages:
//   S^T[tok, g]  = K[tok, :] · Q'[g, :]^T          (A = keys, B = queries)
//   O^T[dim, g] += V^T[dim, tok] · P^T[tok, g]      (A = values, B = probabilities)
// Lane l (r = l/4, p = l%4) holds scores of tokens r, r+8 for query columns 2p, 2p+1,
// and output rows of the same two columns, so the softmax rescale is lane-local.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common.cuh"
#include "tq/cuda/check.h"
#include "tq/cuda/decode.h"

namespace tq::cuda {

struct DecodeArgs {
  const __half* q;
  int64_t q_sb, q_sh;
  __half* out;  // fp16, or bf16 bits where bf16 (below)
  int64_t o_sb, o_sh;
  float* o_part;    // [n_q_heads, items, part_warps, D] (parts > 1): item i's warp w's partial output (or the CTA's)
  float* lse_part;  // [n_q_heads, items, part_warps], log2 domain; −inf = empty part
  int2* seq_items;  // [batch] (items > batch, FP16 decode): sequence b's first work item and item count
  const int32_t* table;
  int table_stride;
  // out holds bf16 (DecodeParams::dtype; 0: fp16), read where an output is rounded. (q is always fp16:
  // the launcher converts bf16 queries first: stages_queries.) In the padding before seq_lens, so no
  // other field's parameter offset moves.
  int bf16;
  const int32_t* seq_lens;
  // group_stride: query heads per kv head (G): column g of kv head h is query head
  // h·group_stride + g of q, out and the parts. group: the columns of this launch — G when
  // G ≤ 8, else ≤ 8 (for_each_query_slice offsets q, out and the parts to the slice's first
  // column). (group_stride took n_q_heads' place, which only the host used: the
  // kernels' parameter layout stays as it was.)
  int block_size, log2_block_size, n_kv_heads, group_stride, group;
  int batch, heads_per_cta, warps_per_head, items, parts, stages;  // DecodePlan's
  int stage_bytes;  // WPH · sub-tile tokens · HPC · (bytes of one token-head)
  // quantized decode: ring pieces (16-token halves) 0 … ring_split−1 from the dynamic
  // shared-memory base, the rest from shared address ring_hi; q buffers at qbuf_addr
  // (0: right after the ring)
  int ring_split;
  uint32_t ring_hi, qbuf_addr;
  float scale_log2;  // attn_scale · log2(e)
  int part_warps;  // DecodePlan's: the parts of one work item (the merge's rows per item)
  // quantized decode, part_warps 1 with several warps per head: where the CTA merges its warps' parts after
  // the main loop (the ring is idle then): kMergeAtBase, the dynamic base; kMergeAtLut2, shared address
  // kLutAddr2 (the wide ring's second form, whose q buffers sit below it); 0: each warp writes its own part
  int merge;
  int ring_heads;  // DecodePlan's: kv heads per token row of a ring piece (heads_per_cta, or n_kv_heads)
};
static_assert(offsetof(DecodeArgs, seq_lens) == 88 && offsetof(DecodeArgs, ring_heads) == 168,
              "DecodeArgs: bf16 sits in the padding after table_stride, ring_heads last (the kernels' parameter "
              "offsets as without them)");
constexpr int kMergeAtBase = 1, kMergeAtLut2 = 2;
// Floats of one warp's staging area for the CTA merge (DecodeArgs::merge): its ≤ 8 columns' outputs (head_dim
// each), then their log-sum-exps.
template <class C>
constexpr int merge_stage_floats() {
  return 8 * C::kD + 8;
}

namespace dev {

// Query head of column g of kv head kvh. SLICED (a slice of G > 8 columns): kvh · group_stride
// + g; otherwise group (= group_stride = G): every kernel a G ≤ 8 decode launches reads only
// that parameter (also reading group_stride there moved ptxas's schedules; our FP16 kernel's
// by +5%). Evaluated at each use.
template <bool SLICED>
__device__ __forceinline__ int query_head(const DecodeArgs& a, int kvh, int g) {
  return kvh * (SLICED ? a.group_stride : a.group) + g;
}

// Sequence b's query tokens in a multi-query decode: q_len, or (DecodeParams::q_start) its q_start
// difference taken into 1 … q_len (a count out of range gives wrong results, never a wrong access).
__device__ __forceinline__ int query_count(const int32_t* q_start, int b, int q_len) {
  if (!q_start) return q_len;
  const int64_t n = int64_t(q_start[b + 1]) - q_start[b];
  return int(n < 1 ? 1 : n > q_len ? q_len : n);
}

// The element offset of query j of sequence b, head `head`, in the caller's query or output rows (strides sb,
// st, sh; with q_start, row q_start[b] + j, whose sb is unused): −1 where that row lies outside [0, rows).
__device__ __forceinline__ int64_t caller_row(const int32_t* q_start, int64_t rows, int b, int j, int64_t head,
                                              int64_t sb, int64_t st, int64_t sh) {
  if (!q_start) return int64_t(b) * sb + int64_t(j) * st + head * sh;
  const int64_t row = int64_t(q_start[b]) + j;
  return row < 0 || row >= rows ? -1 : row * st + head * sh;
}

// ---- Work items: which tokens of which sequence a CTA reads ----
// The grid has n_items ≥ batch CTAs per head group. Sequence b's t_b = ceil(len_b / tile)
// tiles are cut into count_b = max(1, ceil(t_b / L)) chunks of L tiles (the last one
// shorter), L the smallest chunk for which Σ count_b ≤ n_items, and sequence b's chunks
// are items first_b … first_b + count_b − 1 (first_b = Σ_{b' < b} count_b'); items past
// Σ count_b are unused. So the batch's tokens are dealt out evenly over the grid whatever
// the lengths (a long sequence among short ones gets most of the items), from the
// seq_lens on the device: the grid depends on n_items only, and a captured graph replayed
// with new lengths deals them out anew. An empty sequence still has one (empty) item, so
// every sequence's parts are written; the merge finds a sequence's (first_b, count_b) from
// seq_lens the same way (seq_items_of; our FP16 decode's CTA of a sequence's first item writes them
// to DecodeArgs::seq_items instead). n_items == batch: item b is
// all of sequence b.
// The functions are warp-collective: every lane of the warp calls them with the same
// arguments and gets the same result.
// A multi-query launch with a query count per sequence (DecodeParams::q_start) deals its items as if the
// sequences it computes nothing for were empty (QueryCut): those whose count is ≤ j0, the launch's first query.
// Its CTAs then go to the sequences with queries in it (a 16-query chunk among single-query decodes takes
// every item in the launches past the first, not its 1/32 of them). Empty, such a sequence still has its one
// item, and the merge repeats the launch's dealing for each row (MultiQuery::launch_col0).
struct QueryCut {
  const int32_t* q_start = nullptr;  // null: every sequence counts with its length
  int q_len = 1, j0 = 0;
};
__device__ __forceinline__ bool served(const QueryCut& qc, int b) {
  return !qc.q_start || query_count(qc.q_start, b, qc.q_len) > qc.j0;
}
struct Range {
  int begin, end, tiles;  // tokens [begin, end), tiles of `tile` tokens
};
struct WorkItem {
  int b;      // sequence; −1: an unused item
  int k;      // chunk of the sequence (0 … count − 1)
  int count;  // count_b
  Range r;
  int row;    // the item's number, first_b + k: its rows of the parts (the CTA's index but in work_item_balanced)
};

// A CTA's fixed cost in tiles (prologue, ring fill, write-out), in the balanced dealing's rule
// (dev::work_item_balanced) and the planner's model of it (balance_slots).
constexpr int kBalanceFixedTiles = 2;

__device__ __forceinline__ int tiles_of(int len, int tile) { return len > 0 ? (len - 1) / tile + 1 : 0; }
__device__ __forceinline__ int chunks_of(int t, int L) { return t > L ? (t - 1) / L + 1 : 1; }

// The dealing runs once per CTA before anything else, so its code is kept small: one
// body per loop (unrolled copies of each loop came to ~2000 SASS instructions per kernel and
// cost every stage 1 3–6 µs).
// Lane l keeps the lengths and tile counts of sequences l + 32j, j < kRegs, in registers
// (batches up to 128: one global round trip); later ones are re-read where used.
struct LaneLens {
  static constexpr int kRegs = 4;
  const int32_t* lens;
  int batch, tile, lane;
  int len_r[kRegs], t_r[kRegs];
  // cut: the sequences it leaves out count as empty (the first 32·kRegs only: later ones, re-read where used,
  // keep their lengths, which costs a launch some items but no result, and the code stays small)
  __device__ __forceinline__ LaneLens(const int32_t* l, int n, int tl, const QueryCut& cut)
      : lens(l), batch(n), tile(tl), lane(int(threadIdx.x & 31)) {
#pragma unroll
    for (int j = 0; j < kRegs; ++j) {
      const int b = lane + 32 * j;
      len_r[j] = b < batch && served(cut, b) ? max(lens[b], 0) : 0;
      t_r[j] = tiles_of(len_r[j], tile);
    }
  }
  // r[b / 32] without dynamic register indexing (b < 32·kRegs)
  __device__ __forceinline__ static int pick(const int (&r)[kRegs], int b) {
    int v = r[0];
#pragma unroll
    for (int j = 1; j < kRegs; ++j) v = b >= 32 * j ? r[j] : v;
    return v;
  }
  // the length and tile count of sequence b, one of this lane's (b ≡ lane mod 32)
  __device__ __forceinline__ int len(int b) const { return b < 32 * kRegs ? pick(len_r, b) : max(lens[b], 0); }
  __device__ __forceinline__ int tiles(int b) const { return b < 32 * kRegs ? pick(t_r, b) : tiles_of(len(b), tile); }
};

// Σ t_b over the batch, and the largest t_b (tmax). (chunk_tiles keeps its own copy of this loop:
// calling total_tiles from there changed our FP16 kernel's SASS, cuobjdump; so did a helper for the
// two-halves sums, and dropping the tmax that work_item_balanced does not use changed the quantized
// kernels' main loops.)
__device__ __forceinline__ long long total_tiles(const LaneLens& ll, int& tmax) {
  unsigned lo = 0, hi = 0;  // Σ t in two halves (t < 2^27: per-lane sums and the warp's fit in 32 bits)
  tmax = 0;
#pragma unroll 2
  for (int b = ll.lane; b < ll.batch; b += 32) {
    const int t = ll.tiles(b);
    lo += unsigned(t) & 0xffffu;
    hi += unsigned(t) >> 16;
    tmax = max(tmax, t);
  }
  const long long total = (static_cast<long long>(__reduce_add_sync(kFull, hi)) << 16) + __reduce_add_sync(kFull, lo);
  tmax = int(__reduce_max_sync(kFull, unsigned(tmax)));
  return total;
}

// L, the chunk in tiles (n_items > batch).
__device__ __forceinline__ int chunk_tiles(const LaneLens& ll, int n_items) {
  unsigned lo = 0, hi = 0;  // Σ t in two halves (t < 2^27: per-lane sums and the warp's fit in 32 bits)
  int tmax = 0;
#pragma unroll 2
  for (int b = ll.lane; b < ll.batch; b += 32) {
    const int t = ll.tiles(b);
    lo += unsigned(t) & 0xffffu;
    hi += unsigned(t) >> 16;
    tmax = max(tmax, t);
  }
  const long long total = (static_cast<long long>(__reduce_add_sync(kFull, hi)) << 16) + __reduce_add_sync(kFull, lo);
  tmax = int(__reduce_max_sync(kFull, unsigned(tmax)));
  // count(L) = Σ_b chunks_of(t_b, L) does not grow with L, and count(tmax) = batch ≤
  // n_items. The lower bound ceil(Σ t / n_items) is the answer when the lengths are equal
  // (and for one sequence): probed first.
  const int lo0 = int(max(1LL, (total + n_items - 1) / n_items));
  int a = lo0, z = max(lo0, tmax), mid = lo0;
#pragma unroll 1
  while (a < z) {
    int c = 0;  // capped, so the sum cannot overflow
#pragma unroll 2
    for (int b = ll.lane; b < ll.batch; b += 32) c = min(c + chunks_of(ll.tiles(b), mid), n_items + 1);
    if (int(__reduce_add_sync(kFull, unsigned(c))) <= n_items) z = mid;
    else a = mid + 1;
    mid = a + (z - a) / 2;
  }
  return a;
}

// The token range of chunk w.k of a sequence of len tokens.
__device__ __forceinline__ void set_range(WorkItem& w, int len, int chunk, int tile) {
  w.r.begin = w.k * chunk;
  w.r.end = min(len, w.r.begin + min(chunk, len));
  w.r.tiles = w.r.begin < w.r.end ? tiles_of(w.r.end - w.r.begin, tile) : 0;
}

__device__ __forceinline__ WorkItem work_item(const int32_t* lens, int batch, int n_items, int tile, int item,
                                              const QueryCut& qc = {}) {
  WorkItem w{-1, 0, 1, {0, 0, 0}, item};
  int chunk, len = 0;  // tokens
  if (n_items == batch) {
    w.b = item;
    chunk = 1 << 30;
    len = max(lens[item], 0);
  } else {
    const LaneLens ll(lens, batch, tile, qc);
    const int L = chunk_tiles(ll, n_items);
    chunk = L * tile;
    int base = 0;  // items of the sequences before b0
#pragma unroll 1
    for (int b0 = 0; b0 < batch; b0 += 32) {
      const int b = b0 + ll.lane;
      const int n = b < batch ? ll.len(b) : 0;
      const int c = b < batch ? chunks_of(ll.tiles(b), L) : 0;
      int incl = c;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const int v = __shfl_up_sync(kFull, incl, o);
        if (ll.lane >= o) incl += v;
      }
      const int first = base + incl - c;
      const unsigned m = __ballot_sync(kFull, c > 0 && item >= first && item < first + c);
      if (m) {
        const int src = __ffs(m) - 1;
        w.b = b0 + src;
        w.k = item - __shfl_sync(kFull, first, src);
        w.count = __shfl_sync(kFull, c, src);
        len = __shfl_sync(kFull, n, src);
        break;
      }
      base += __shfl_sync(kFull, incl, 31);
    }  // not found: an unused item
  }
  if (w.b >= 0) set_range(w, len, chunk, tile);
  return w;
}

// The balanced dealing's rule: true where it holds for these lengths (else the usual dealing over
// `slots` items), with its chunk L in tiles and n1 = Σ (count_b − 1).
__device__ __forceinline__ bool balanced_rule(const LaneLens& ll, int batch, int n_items, int slots, int& L, int& n1) {
  constexpr int kFixed = kBalanceFixedTiles;
  int tmax;
  const long long total = total_tiles(ll, tmax);
  L = int(max(1LL, (total + slots - 1) / slots));
  n1 = 0;
  unsigned rlo = 0, rhi = 0;  // Σ (r_b + kFixed) in two halves, as total_tiles
#pragma unroll 1
  for (int b = ll.lane; b < batch; b += 32) {
    const int t = ll.tiles(b), c = chunks_of(t, L), r = t - (c - 1) * L + kFixed;
    n1 += c - 1;
    rlo += unsigned(r) & 0xffffu;
    rhi += unsigned(r) >> 16;
  }
  n1 = int(__reduce_add_sync(kFull, unsigned(n1)));
  const long long rsum = (static_cast<long long>(__reduce_add_sync(kFull, rhi)) << 16) + __reduce_add_sync(kFull, rlo);
  return n1 < slots && n1 + batch <= n_items && rsum <= static_cast<long long>(slots - n1) * (L + kFixed);
}

// Balanced dealing (the quantized decode where DecodePlan::balance_slots > 0: one head group,
// `slots` = the CTAs the device runs at once, n_items = slots + batch). Chunks of
// L = ⌈Σ t_b / slots⌉ tiles; CTAs 0 … N1 − 1 (N1 = Σ (count_b − 1)) take every sequence's chunks but
// its last, all full, and CTA N1 + b takes sequence b's last chunk. CTAs start in index order, so
// the full chunks run in one wave and the short last chunks fill the slots left over, then the
// ones the short chunks free: at B 32 × 32K on 132 SMs, 128 chunks of 125 tiles and 32 of 12 tiles
// on the 4 idle SMs, where the usual dealing gives 128 chunks of 128 tiles. Items keep the usual
// sequence-major numbers (row = first_b + k), so the merge reads each sequence's parts as one run.
// Where the last chunks would not fit in the idle slots (Σ (r_b + 2) > (slots − N1) · (L + 2)
// tiles, r_b = t_b − (count_b − 1) · L: a ragged batch), the usual dealing over `slots` items.
__device__ __forceinline__ WorkItem work_item_balanced(const int32_t* lens, int batch, int n_items, int tile,
                                                       int item, int slots, const QueryCut& qc = {}) {
  {
    const LaneLens ll(lens, batch, tile, qc);
    int L, n1;
    if (balanced_rule(ll, batch, n_items, slots, L, n1)) {
      WorkItem w{-1, 0, 1, {0, 0, 0}, item};
      int len = 0, base = 0, base1 = 0;  // Σ count_b and Σ (count_b − 1) of the sequences before b0
#pragma unroll 1
      for (int b0 = 0; b0 < batch; b0 += 32) {
        const int b = b0 + ll.lane;
        const int n = b < batch ? ll.len(b) : 0;
        const int c = b < batch ? chunks_of(ll.tiles(b), L) : 0, c1 = max(c - 1, 0);
        int incl = c, incl1 = c1;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
          const int v = __shfl_up_sync(kFull, incl, o), v1 = __shfl_up_sync(kFull, incl1, o);
          if (ll.lane >= o) incl += v, incl1 += v1;
        }
        const int first = base + incl - c, first1 = base1 + incl1 - c1;
        const bool mine = item < n1 ? item >= first1 && item < first1 + c1 : b < batch && b == item - n1;
        const unsigned m = __ballot_sync(kFull, mine);
        if (m) {
          const int src = __ffs(m) - 1;
          w.b = b0 + src;
          w.count = __shfl_sync(kFull, c, src);
          w.k = item < n1 ? item - __shfl_sync(kFull, first1, src) : w.count - 1;
          w.row = __shfl_sync(kFull, first, src) + w.k;
          len = __shfl_sync(kFull, n, src);
          break;
        }
        base += __shfl_sync(kFull, incl, 31);
        base1 += __shfl_sync(kFull, incl1, 31);
      }  // not found: an unused CTA
      if (w.b >= 0) set_range(w, len, L * tile, tile);
      return w;
    }
  }
  if (item >= slots) return WorkItem{-1, 0, 1, {0, 0, 0}, item};
  return work_item(lens, batch, slots, tile, item, qc);
}

// Sequence b's (first item row, item count) in the dealing stage 1 used (work_item; where slots > 0,
// work_item_balanced): the merge's rows, from seq_lens alone, so the merge kernel computes them
// before it waits for stage 1. (Both dealings number a sequence's items consecutively, first_b =
// Σ count of the sequences before b.)
__device__ __forceinline__ int2 seq_items_of(const int32_t* lens, int batch, int n_items, int tile, int slots, int b,
                                             const QueryCut& qc = {}) {
  if (n_items == batch) return make_int2(b, 1);
  const LaneLens ll(lens, batch, tile, qc);
  int L = 0, n1;
  if (!(slots > 0 && balanced_rule(ll, batch, n_items, slots, L, n1))) L = chunk_tiles(ll, slots > 0 ? slots : n_items);
  int before = 0;
#pragma unroll 1
  for (int b2 = ll.lane; b2 < b; b2 += 32) before += chunks_of(ll.tiles(b2), L);
  const int count = __shfl_sync(kFull, chunks_of(ll.tiles(b), L), b & 31);  // (lane b & 31 holds b's tiles)
  return make_int2(int(__reduce_add_sync(kFull, unsigned(before))), count);
}

// 2^x with one MUFU.EX2 (ex2.approx.ftz: ~2 ulp, −inf → 0, results below 2^-126 → 0);
// exp2f adds a range check and two multiplies around it (quantized decode).
__device__ __forceinline__ float ex2_fast(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
// 1/x with one MUFU.RCP (rcp.approx.ftz: ~1 ulp; 0 → +inf)
__device__ __forceinline__ float rcp_fast(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float rsqrt_fast(float x) {
  float y;
  asm("rsqrt.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Online softmax over one 16-token sub-tile for the lane's two query columns (FP16 kernel;
// the quantized decode's 32-token version is Softmax32 in decode_softmax.cuh).
// x[0..1]: token r, x[2..3]: token r+8 (log2-domain logits, −inf = masked).
// Returns α (rescale of the old state) per column and overwrites x with p.
// The value a softmax's exponents subtract: the running max m, or 0 where guard (causal kernels) and
// the column has no valid token yet (m = −inf: −inf − −inf would be NaN).
__device__ __forceinline__ float exp_base(float m, bool guard) { return guard && m == -INFINITY ? 0.f : m; }

struct Softmax {
  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.f, 0.f};  // per-lane partial sums (reduced over the 8 token lanes at the end)
  __device__ __forceinline__ static float e2(float v) { return exp2f(v); }
  template <bool kGuard = false>  // kGuard: causal kernels (exp_base)
  __device__ __forceinline__ void update(float (&x)[4], float (&alpha)[2]) {
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      float mx = fmaxf(x[c], x[c + 2]);
      mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 4));
      mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 8));
      mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, 16));
      const float mn = fmaxf(m[c], mx);  // finite: the sub-tile has ≥ 1 valid token (but kGuard)
      const float me = exp_base(mn, kGuard);
      alpha[c] = e2(m[c] - me);          // m = −inf → 0
      m[c] = mn;
      x[c] = e2(x[c] - me);
      x[c + 2] = e2(x[c + 2] - me);
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

// Multi-query decode (DecodeParams::q_len > 1): the launch's columns are virtual query heads
// c = j·group + g (query j of the chunk, head g of the kv head's group), and column c sees the
// positions [0, seq_len − q_len + j]. col0: the launch's first column (a slice of the columns).
// q_start (DecodeParams'): null, or sequence b's query count is q_start's difference there
// (dev::query_count; q_len the longest), its columns j past the count skipped: no stage-1 CTA or merge
// row computes them, and the scatter does not write them back.
// chunk, chunk_rem: the launches' column counts (ColumnChunks: the first chunk_rem take chunk + 1, the rest
// chunk), from which the merge finds the launch of each row and repeats its dealing (dev::QueryCut).
struct MultiQuery {
  int q_len = 1, group = 1, col0 = 0;
  const int32_t* q_start = nullptr;
  int chunk = 0, chunk_rem = 0;
  // the dealing of the launch whose first column is c0: the sequences with no query from c0's on count as empty
  __device__ __forceinline__ dev::QueryCut cut(int c0) const { return {q_start, q_len, c0 / group}; }
  // the first column of the launch that computes column c (chunk 0: one launch)
  __device__ __forceinline__ int launch_col0(int c) const {
    if (chunk <= 0) return 0;
    const int wide = chunk_rem * (chunk + 1);
    return c < wide ? c - c % (chunk + 1) : c - (c - wide) % chunk;
  }
};
// The caller's output rows of a multi-query decode (DecodeParams::out and its strides; q_start's rows lie in
// [0, rows)), which the merge writes straight into (out null: the merge writes DecodeArgs::out).
struct UserRows {
  void* out = nullptr;
  int64_t sb = 0, st = 0, sh = 0, rows = 0;
};
// A decode's MultiQuery from column 0 (q_len 1: the default, which no single-query kernel or merge reads).
inline MultiQuery multi_query(const DecodeParams& p, int n_kv_heads) {
  return p.q_len > 1 ? MultiQuery{p.q_len, p.n_q_heads / n_kv_heads, 0, p.q_start} : MultiQuery{};
}

// kern<<<grid, block, smem, stream>>>(args…), as a programmatic dependent launch where pdl is set: its
// CTAs may start once every CTA of the previous kernel on the stream has signalled
// (griddepcontrol.launch_dependents) or exited, and must wait (griddepcontrol.wait) before reading what
// that kernel wrote. The decode sets pdl only where that kernel is one of its own.
template <class... P, class... A>
void launch_programmatic(void (*kern)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, bool pdl,
                         const A&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr;
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = pdl ? 1 : 0;
  TQ_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kern, P(args)...));
}

// Stage 2: out[b, h, :] = Σ_parts 2^(lse_i − max) o_i / Σ 2^(lse_i − max); parts
// with lse = −inf (empty ranges) are skipped; a sequence with no tokens gives 0.
// tile, balance: the dealing of stage 1 (tokens per tile, DecodePlan::balance_slots), which the merge
// repeats for its rows (dev::seq_items_of); tile 0: stage 1 wrote them to a.seq_items (FP16 decode).
// mq: a multi-query decode's (its q_start's padding rows are skipped; default: every row merged); user:
// where it writes the rows (StagedQueries::merge_rows; default: a.out).
void launch_decode_merge(const DecodeArgs& a, int batch, int head_dim, int tile, int balance, const MultiQuery& mq,
                         cudaStream_t stream, const UserRows& user = {});

// ---- Multi-query decode (DecodeParams::q_len > 1) ----
// The q_len · G query rows of a kv head become the columns of one launch ("virtual query heads",
// column c = j·G + g: query j, head g of the group), so the kernel's GQA machinery reads each page
// once for all of them; the causal kernels (MultiQuery) mask each column at its own limit. The
// queries are first gathered into column order [batch, n_kv_heads · q_len · G, head_dim] (a small
// kernel: 2 · q_len · n_q_heads · head_dim · 2 bytes per sequence, against the cache's megabytes);
// the merge writes the outputs to the caller's rows (UserRows), or, where stage 1 writes them (one
// part per sequence), a second such kernel scatters them back.
// bf16 queries (DecodeParams::dtype) take the same gather with q_len 1 (the order stays), converted
// to the fp16 the kernels read: exact for every bf16 value of magnitude 2^-17 … 65280 (and 0), smaller
// ones round to fp16 subnormals (≤ 2^-25 off), larger ones become ±inf. (Reading bf16 in the kernels
// instead made ptxas spill two 128-register kernels in their main loops.)
inline bool stages_queries(const DecodeParams& p) { return p.q_len > 1 || p.dtype == Dtype16::bf16; }
struct MqLayout {
  size_t rows = 0, piece = 0;  // virtual query rows; bytes of each buffer (256-aligned)
  int pieces = 0;              // 2: the queries and the outputs in column order (q_len > 1); 1: the queries
  MqLayout(const DecodeParams& p, int head_dim)
      : rows(size_t(p.blocks.batch) * size_t(p.n_q_heads) * size_t(p.q_len)),
        piece((rows * size_t(head_dim) * 2 + 255) / 256 * 256),
        pieces(p.q_len > 1 ? 2 : stages_queries(p) ? 1 : 0) {}
  size_t bytes() const { return size_t(pieces) * piece; }
};

// dir 0: the queries (strides s_b, s_t, s_h) → column order in dst, as fp16 (from bf16 where p.dtype
// says so); dir 1: column-order outputs → out (bits copied). With p.q_start (q_len > 1), query j of
// sequence b is row q_start[b] + j (stride s_t; s_b unused) for j < its count: the columns of the other
// j are zeros (dir 0) and not written back (dir 1), nor are rows outside [0, p.q_rows).
void launch_mq_reorder(const void* src, void* dst, int dir, const DecodeParams& p, int n_kv_heads, int head_dim,
                       int64_t s_b, int64_t s_t, int64_t s_h, cudaStream_t stream);
// The single-query problem a multi-query decode runs: q_len · n_q_heads query heads in column order
// in the workspace (mq: its first bytes; null while planning); q_len 1 with bf16 queries: p with the
// fp16 queries there; else p itself.
DecodeParams virtual_params(const DecodeParams& p, int head_dim, const MqLayout& l, uint8_t* mq);

// One decode call's staged queries, for both paged decodes' planners and launchers: the buffers at the
// workspace's start (MqLayout; none unless stages_queries), the problem stage 1 runs (p), the gather
// before it and, for q_len > 1, the scatter of the outputs after the merge. workspace: null while planning.
struct StagedQueries {
  const DecodeParams& in;
  int n_kv_heads, head_dim;
  MqLayout ml;
  bool staged;
  uint8_t* mq;     // the staged buffers (the workspace's start), else null
  DecodeParams p;  // virtual_params
  StagedQueries(const DecodeParams& in_, int n_kv_heads_, int head_dim_, void* workspace)
      : in(in_), n_kv_heads(n_kv_heads_), head_dim(head_dim_), ml(in_, head_dim_), staged(stages_queries(in_)),
        mq(staged ? static_cast<uint8_t*>(workspace) : nullptr), p(virtual_params(in_, head_dim_, ml, mq)) {}
  // plan.workspace_bytes (the split-KV part, 0 when parts == 1) with the staged buffers ahead of it
  void reserve(DecodePlan& plan) const {
    if (staged) plan.workspace_bytes = ml.bytes() + (plan.parts > 1 ? plan.workspace_bytes : 0);
  }
  // the split-KV workspace for make_decode_args: after the staged buffers (none where a part is the output)
  void* parts(void* workspace, const DecodePlan& plan) const {
    return staged ? (plan.parts == 1 ? nullptr : mq + ml.bytes()) : workspace;
  }
  void gather(cudaStream_t stream) const {
    if (staged)  // (q_len 1: the rows are the sequences, q_start or not)
      launch_mq_reorder(in.query, mq, 0, in, n_kv_heads, head_dim, in.q_stride_batch, in.q_stride_token,
                        in.q_stride_head, stream);
  }
  // q_len > 1: the rows the merge writes (the caller's), where the plan has one (parts > 1); else none
  UserRows merge_rows(const DecodePlan& plan) const {
    if (in.q_len <= 1 || plan.parts <= 1) return {};
    return {in.out, in.o_stride_batch, in.o_stride_token, in.o_stride_head, in.q_rows};
  }
  // the column-order outputs back to the caller's rows, where stage 1 wrote them (no merge_rows)
  void scatter(const DecodePlan& plan, cudaStream_t stream) const {
    if (in.q_len > 1 && !merge_rows(plan).out)
      launch_mq_reorder(mq + ml.piece, in.out, 1, in, n_kv_heads, head_dim, in.o_stride_batch, in.o_stride_token,
                        in.o_stride_head, stream);
  }
};

// The split-KV workspace: partial outputs [rows, head_dim] fp32, their LSEs [rows], each
// sequence's (first item, item count) [batch] (FP16 decode); rows = items · n_q_heads · part_warps;
// 256-byte aligned pieces.
struct WorkspaceLayout {
  size_t lse_off, items_off, bytes;
  WorkspaceLayout(int items, int n_q_heads, int part_warps, int head_dim, int batch) {
    const size_t rows = size_t(items) * size_t(n_q_heads) * size_t(part_warps);
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
  const WorkspaceLayout wl(plan.items, p.n_q_heads, plan.part_warps, head_dim, p.blocks.batch);
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
  a.group = a.group_stride = p.n_q_heads / n_kv_heads;
  a.heads_per_cta = plan.heads_per_cta;
  a.warps_per_head = plan.warps_per_head;
  a.ring_heads = plan.ring_heads;
  a.batch = p.blocks.batch;
  a.items = plan.items;
  a.parts = plan.parts;
  a.part_warps = plan.part_warps;
  a.scale_log2 = p.attn_scale * 1.4426950408889634f;
  a.bf16 = p.dtype == Dtype16::bf16 ? 1 : 0;
  return a;
}

// Query columns one stage-1 launch computes (the MMA's N tile); G query heads per kv head
// take query_passes(G) launches, each reading the cache.
constexpr int kQueryCols = 8;
constexpr int query_passes(int group) { return (group + kQueryCols - 1) / kQueryCols; }
// Whether G query heads per kv head take sliced launches (more than one pass: the SLICED kernels).
constexpr bool sliced_launches(int group) { return group > kQueryCols; }
// Whether G query heads per kv head make exactly two slices (8 < G ≤ 16): those one launch can
// compute together (the quantized decode's dual_slices_fit, the FP16 decode's f16_tiles).
constexpr bool two_query_slices(int group) { return group > kQueryCols && group <= 2 * kQueryCols; }
// Whether a quantized decode of G query heads per kv head can take both slices of 8 < G ≤ 16 in
// one launch (query_slices 2: two warps per kv head and sub-tile, one per slice, on the same ring
// stage, so the cache is read once): where the CTA has the warps for it (2 · heads per CTA ≤ its
// warps; not the plane layout). The planner takes it at 12 < G, and at 8 < G ≤ 12 where
// dual_short_items: there two launches run the second slice's ≤ 4 columns in the packed kernel
// (hi and lo in one MMA), which one CTA's warps cannot mix with the other slice's, and that wins
// once a work item's tokens outweigh a launch's fixed cost: two launches measured 4% faster at
// 8192 tokens per item (B 32, 96 / 8, 32K), equal at 2048 and slower below; at 16 columns one
// launch is faster.
constexpr bool dual_slices_fit(int group, int hpc, int cta_warps, bool planes) {
  return two_query_slices(group) && 2 * hpc <= cta_warps && !planes;
}
// 8 < G ≤ 12: one launch when the longest sequence's work items (max_seq_len over the
// two-launch plan's splits) are ≤ 2048 tokens
constexpr bool dual_short_items(int max_seq_len, int num_splits) {
  return int64_t(max_seq_len) <= int64_t(2048) * num_splits;
}
// 8 < G ≤ 16, one query: the two-tile kernels (8 warps, each computing both 8-column tiles from
// one decode of the keys and values) where the longest sequence's work items stream more than
// 128 tokens; shorter items take the dual-slice launch where the format has one (16-warp kernels),
// whose two warps per kv head halve an item's latency. planner_ab.py (4bit_nc, k3v4_nc, 3bit_nc at
// 128/8 and 96/8; results/kernels/planner_ab.txt) puts the break-even at 128 tokens per item (two
// tiles within ±3% there, slower below, faster above). k8v4 (8-warp kernel, no dual-slice launch)
// keeps two tiles, faster than its two launches even at B 1 4K.
constexpr bool two_tile_items(int max_seq_len, int num_splits) {
  return int64_t(max_seq_len) > int64_t(128) * num_splits;
}

// Stage 1 for G > 8 query heads per kv head: fn(slice, true) once per slice of ≤ 8
// consecutive columns (query heads g0 … g0 + slice.group − 1 of every kv head), with q, out
// and the parts' rows offset to column g0 (the merge runs once, on `a`, over all query
// heads). G ≤ 8: fn(a, false), unchanged. The flag picks the SLICED kernels (dev::query_head).
// The arguments of a launch over columns g0 … g0 + n − 1 of every kv head: q, out and the parts'
// rows offset to column g0 (on the device: the column chunk of a multi-query launch's blockIdx.z).
__host__ __device__ inline DecodeArgs column_slice(const DecodeArgs& a, int head_dim, int g0, int n) {
  DecodeArgs s = a;
  s.group = n;
  s.q += int64_t(g0) * a.q_sh;
  s.out += int64_t(g0) * a.o_sh;
  const int64_t rows = int64_t(g0) * a.items * a.warps_per_head;  // the parts of query heads < g0 (of kv head 0)
  if (a.o_part) s.o_part += rows * head_dim;
  if (a.lse_part) s.lse_part += rows;
  return s;
}
template <class Fn>
void for_each_query_slice(const DecodeArgs& a, int head_dim, Fn&& fn) {
  const bool sliced = sliced_launches(a.group_stride);
  for (int g0 = 0; g0 < a.group_stride; g0 += kQueryCols)
    fn(column_slice(a, head_dim, g0, a.group_stride - g0 < kQueryCols ? a.group_stride - g0 : kQueryCols), sliced);
}

struct DecodePlan;
struct DecodeParams;
// Heads per CTA, warps per head, ring depth and shared memory of a plan: a stage
// holds warps_per_head sub-tiles of sub_tokens tokens × heads_per_cta heads
// (heads_per_cta · warps_per_head ≤ cta_warps; heads_per_cta = first_heads, the planner's
// choice, or with flexible_heads a smaller divisor of n_kv_heads); two CTAs per SM need
// ≥ two_cta_min_stages stages, else one CTA takes the deepest ring. whole_rows: a stage's rows hold all
// n_kv_heads (DecodePlan::ring_heads), and fewer warps per head are tried where two such stages do not fit.
void plan_layout(int n_kv_heads, int first_heads, int sub_tokens, int token_head_bytes, int fixed_dyn, int static_smem,
                 int smem_optin, DecodePlan& plan, int& stage_bytes, int& stages, bool flexible_heads,
                 int two_cta_min_stages, int cta_warps, bool whole_rows = false);
// Split count (fixed or auto), query passes (from query_slices), parts and workspace size of a plan;
// balance: the kernel can deal the tokens out by dev::work_item_balanced (DecodePlan::balance_slots);
// merge_min_item_tokens: where plan_stage1 chose the CTA merge (part_warps 1), the shortest average work item
// that keeps it (shorter: one part per warp again); chunks: the column chunks one launch runs side by side
// (blockIdx.z), whose CTAs the split count spreads over the SMs with the head groups'.
void finish_plan(const DecodeParams& p, int head_dim, int sm_count, int sub_tokens, DecodePlan& plan,
                 bool balance = false, int merge_min_item_tokens = 0, int chunks = 1);
// DecodePlan::balance_slots for a one-head-group decode of batch sequences of max_tiles tiles over
// `slots` CTA slots with the auto split count `splits`: slots where the balanced dealing's makespan
// model is ≥ 2% below the usual one's, else 0.
int balance_slots(int batch, int max_tiles, int slots, int splits);
int decode_device_sms();
int decode_device_smem_optin();
// Blocks per SM of `kernel` at `threads` and `smem_bytes` on the current device, computed once per
// (kernel, threads, bytes, device) (cudaFuncSetAttribute + cudaOccupancyMaxActiveBlocksPerMultiprocessor):
// both decode planners ask on every plan, and the torch op plans on every call.
int memo_occupancy(const void* kernel, int threads, int smem_bytes);

namespace dev {
// x / n for x < 8192, 1 ≤ n ≤ 8: (x·ceil(2^16/n)) >> 16 (error < x/2^16 < 1/8 ≤ 1 − (n−1)/n).
__device__ __forceinline__ int small_div(int x, int magic) { return (x * magic) >> 16; }
}  // namespace dev

}  // namespace tq::cuda
