// Pieces shared by the quantized and the FP16 paged decode kernels (internal):
// the argument block, the token range of a CTA, the online-softmax update and
// the write-out of a warp's result, and the stage-2 merge launcher.
//
// Work decomposition (both kernels): CTA (split, head group, sequence) with
// heads_per_cta (HPC) kv heads × warps_per_head (WPH) warps. One pipeline stage
// holds WPH sub-tiles of consecutive tokens (16 in the FP16 kernel, 32 in the
// quantized one) × HPC heads; warp (h, w) owns head h of sub-tile w in every
// stage and keeps its own softmax state; its result is one "part" (split·WPH + w)
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
  float* o_part;    // [batch, n_q_heads, parts, D] (parts > 1)
  float* lse_part;  // [batch, n_q_heads, parts], log2 domain; −inf = empty part
  const int32_t* table;
  int table_stride;
  const int32_t* seq_lens;
  int block_size, log2_block_size, n_kv_heads, n_q_heads, group;
  int hpc, wph, num_splits, parts, stages;
  int stage_bytes;  // WPH · sub-tile tokens · HPC · (bytes of one token-head)
  // quantized decode: ring pieces (16-token halves) 0 … ring_split−1 from the dynamic
  // shared-memory base, the rest from shared address ring_hi; q buffers at qbuf_addr
  // (0: right after the ring)
  int ring_split;
  uint32_t ring_hi, qbuf_addr;
  float scale_log2;  // attn_scale · log2(e)
};

namespace dev {

// Token range [begin, end) of this CTA's split: chunk = ceil(len / splits)
// rounded up to whole stages, so the grid depends only on num_splits.
struct Range {
  int begin, end, tiles;
};
__device__ __forceinline__ Range split_range(int len, int split, int num_splits, int tile) {
  int chunk = (len + num_splits - 1) / num_splits;
  chunk = (chunk + tile - 1) / tile * tile;
  Range r;
  r.begin = split * chunk;
  r.end = min(len, r.begin + chunk);
  r.tiles = r.begin < r.end ? (r.end - r.begin + tile - 1) / tile : 0;
  return r;
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
  const size_t rows = size_t(p.blocks.batch) * size_t(p.n_q_heads) * size_t(plan.parts);
  a.o_part = static_cast<float*>(workspace);
  a.lse_part = workspace ? reinterpret_cast<float*>(static_cast<uint8_t*>(workspace) +
                                                   (rows * size_t(head_dim) * 4 + 255) / 256 * 256)
                         : nullptr;
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
  a.num_splits = plan.num_splits;
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
