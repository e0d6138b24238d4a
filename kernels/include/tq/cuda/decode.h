// Paged decode attention over a quantized TurboQuant cache — one query token per sequence, or
// q_len ≥ 1 query tokens per sequence (multi-query: a chunked prompt, a later turn, speculative
// drafts) — and the FP16 baseline it is measured against (one query token).
//
// Split-KV in two stages (FlashDecoding): stage 1 — one CTA per (sequence,
// split, group of kv heads) streams its token range [all heads][slot] once
// through a shared-memory ring (quantized: TMA bulk copies on mbarriers; FP16:
// cp.async) and computes every query head of its kv
// heads (GQA: each slot is read once per query group of ≤ 8 heads; G > 8 query heads
// per kv head run ⌈G/8⌉ stage-1 launches of ≤ 8 heads, each reading the cache once:
// DecodePlan::query_passes — except at 8 < G ≤ 16 (quantized, G ≤ 12: for work items of
// ≤ 2048 tokens), whose CTAs compute both slices in one launch:
// DecodePlan::query_slices); stage 2 merges the splits by log-sum-exp. A single part
// writes the output directly.
//
//   query  fp16 or bf16 (DecodeParams::dtype; the FP16 baseline: fp16) [batch, n_q_heads, head_dim]:
//          (i, h, j) at i·q_stride_batch + h·q_stride_head + j
//   out    the query's type, [batch, n_q_heads, head_dim]: (i, h, j) at i·o_stride_batch + h·o_stride_head + j
//   q head h reads kv head h / (n_q_heads / n_kv_heads) (consecutive q heads share a kv head)
//   out = softmax(attn_scale · q·K̂ᵀ) V̂ over positions [0, seq_lens[i]) of sequence i,
//
// Multi-query (q_len > 1; the quantized decode in the vLLM layout, and the FP16 baseline): query
// j < q_len of sequence i is at i·q_stride_batch + j·q_stride_token + h·q_stride_head (out likewise)
// and attends to positions
// [0, seq_lens[i] − q_len + j] (seq_lens count the chunk's tokens, already stored: causal within the
// chunk; a sequence shorter than q_len gives zero rows for the queries that see no position).
// Variable query counts (DecodeParams::q_start, vLLM's query_start_loc; q_len is then the longest):
// sequence i has n_i = q_start[i+1] − q_start[i] queries, query j < n_i at row q_start[i] + j
// ((q_start[i] + j)·q_stride_token + h·q_stride_head; q_stride_batch unused), attending to
// positions [0, seq_lens[i] − n_i + j].
// The q_len · G query rows of a kv head are the columns of one kernel, so each cache page is
// read once per 16 columns (8 for the formats whose kernels have 8 warps; the FP16 decode: 16 at
// head_dim ≤ 128, else 8), not once per query.
//   K̂, V̂ = the CPU decode of the slots (mse keys scored in the rotated domain;
//   turbo2/3/4 blocks: scores and the value sum in the block's rotated domain).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <cuda_runtime.h>

#include "tq/cuda/kernel_format.h"
#include "tq/cuda/paged.h"

namespace tq::cuda {

struct DecodeParams {
  const void* query = nullptr;
  int64_t q_stride_batch = 0, q_stride_head = 0;
  void* out = nullptr;
  int64_t o_stride_batch = 0, o_stride_head = 0;
  Dtype16 dtype = Dtype16::f16;  // of query and out (the quantized decode; the FP16 baseline takes fp16)
  int n_q_heads = 0;
  float attn_scale = 0.f;
  BlockTable blocks;
  // Split-KV: the grid has num_splits · batch CTAs per head group ("work items"), and the
  // batch's tokens are dealt out over them in equal chunks from the seq_lens on the device
  // (a long sequence among short ones gets more than num_splits of them, a short one
  // fewer, every sequence ≥ 1). > 0: fixed (the grid is independent of seq_lens: CUDA-graph
  // capturable, and a replay with new lengths deals them out anew); 0: auto, from
  // max_seq_len, batch and SM count.
  int num_splits = 0;
  int max_seq_len = 0;  // ≥ every seq_lens[i]; sizes the auto split count and the merge
  int q_len = 1;        // query tokens per sequence (1 … kMaxQueryLen); with q_start the most of any sequence
  int64_t q_stride_token = 0, o_stride_token = 0;  // q_len > 1: query j's offset from query 0 (elements)
  // Variable query counts (q_len > 1; with q_len 1 every sequence has its one query at row i and q_start
  // is not read): device int32 [batch + 1], non-decreasing from 0, each difference 1 … q_len, and q_rows
  // (the query and output rows, q_start[batch] of them). Rows are read and written only inside
  // [0, q_rows), and a count outside 1 … q_len is taken as the nearest of those (wrong results, never an
  // access out of bounds); tqkit_torch.validate_query_start checks the values.
  const int32_t* q_start = nullptr;
  int64_t q_rows = 0;
  // 8-column N-tiles per warp where the format has the two-tile kernels (DecodePlan::column_tiles):
  // 0 = the planner's choice, 1 = one tile per warp, 2 = two wherever they apply (A/B timing, tests)
  int column_tiles = 0;
  // true: never the balanced dealing (DecodePlan::balance_slots stays 0; A/B timing of the planner's choice)
  bool even_dealing = false;
};

// The longest chunk the fused multi-query decode takes: its workspace and partial results grow
// with q_len · n_q_heads; longer chunks belong to a dequant + dense attention path.
constexpr int kMaxQueryLen = 128;

// How a decode launch is laid out; from plan_decode*, passed back to the launcher.
struct DecodePlan {
  int num_splits = 1;      // work items per sequence, on average (fixed or auto)
  int items = 1;           // work items (CTAs) per head group: num_splits · batch (balance_slots: see there)
  int heads_per_cta = 1;   // kv heads one CTA streams: n_kv_heads when ≤ the kernel's warps, else 8 (n_kv_heads a
                           // multiple of 8; mse and turbo keys at head_dim ≤ 128: tensor_map), else the largest
                           // divisor of n_kv_heads the kernel's warps and ring take (FP16: a divisor ≤ 8)
  int ring_heads = 1;      // kv heads per token row of a ring stage: heads_per_cta, or n_kv_heads where this CTA's
                           // slots are not 16-byte runs in the cache (Phi-4's 10 heads of 196-byte k8v4 slots in
                           // CTAs of 5): the CTA then copies whole token rows and reads its heads' slots in them
  int warps_per_head = 1;  // warps sharing one kv head, one sub-tile each (FP16: 16 tokens, 8 warps per CTA;
                           // quantized: 32 tokens, 16 warps per CTA for mse keys at d ≤ 128, else 8)
  int head_groups = 1;     // n_kv_heads / heads_per_cta
  int parts = 1;           // partial results per (sequence, q head), at most (sizes the merge); 1: every
                           // sequence is one item, written straight to out
  int part_warps = 0;      // partial results per work item: warps_per_head, or 1 where a CTA merges its warps'
                           // parts in shared memory first (quantized single-query decodes with ≥ 4 warps per
                           // kv head and items of ≥ 256 tokens, where the idle ring holds them); 0 before
                           // finish_plan (= warps_per_head)
  int threads = 0;
  int smem_bytes = 0;
  int ctas_per_sm = 0;     // occupancy of the stage-1 kernel
  int query_passes = 1;    // stage-1 passes, each reading the whole cache range once: ⌈G / 8⌉, G = query
                           // heads per kv head (the MMA's N tile holds 8 query columns); 1 with query_slices 2.
                           // Each pass is a launch, except multi-query passes of one width: one launch, their
                           // CTAs side by side (the split count spreads all of them over the SMs)
  int query_slices = 1;    // 8 < G ≤ 16: 2 when a CTA computes both slices of 8 columns and G − 8 (quantized at G ≤ 12:
                           // only when a work item streams ≤ 2048 tokens, else the second launch is packed); a second
                           // set of heads_per_cta · warps_per_head warps on the same ring stages (threads counts
                           // both), where the kernel has the warps (2 · heads_per_cta ≤ 16, or 8: mse/turbo keys
                           // at head_dim ≤ 128, or the rest) and the layout is vLLM's; FP16: 2 at 8 < G ≤ 16 and
                           // head_dim ≤ 128, one launch whose warps compute two tiles of 8 columns
  bool tensor_map = false;  // quantized: a CTA holding some of the kv heads takes each 16-token page slice
                            // as one tensor-map box instead of 16 per-token copies (the launch falls back to
                            // those if the driver cannot encode the map)
  size_t workspace_bytes = 0;  // fp32 partial outputs, their log-sum-exp, each sequence's items; 0 when parts == 1
                               // (q_len > 1: preceded by the queries and outputs in column order; bf16
                               // queries: preceded by their fp16 copy)
  int q_len = 1;               // the DecodeParams::q_len planned for
  Dtype16 dtype = Dtype16::f16;  // the DecodeParams::dtype planned for
  int column_tiles = 1;        // 8-column N-tiles per warp (2: 16 query columns per warp from each decoded key
                               // and value, CTAs of 8 warps: mse or fp8 keys with uniform values at head_dim
                               // ≤ 128, 8 heads per CTA, and 8 < G ≤ 16 or q_len · G > 8 columns per kv head)
  int balance_slots = 0;  // quantized, auto splits, one head group: > 0 when the planner deals the tokens out in
                          // chunks of ⌈Σ tiles / balance_slots⌉ with every sequence's short last chunk on the CTA
                          // slots a one-wave grid leaves idle (B 32 on 132 SMs: 128 CTAs leave 4); items is then
                          // balance_slots + batch (the CTAs past the chunks return at once)
};

std::string decode_can_implement(const KernelFormat& f, const PagedCache& cache, const DecodeParams& p);
// The head-count part of decode_can_implement, for a format decode_support accepts: empty when
// its kernel streams n_kv_heads kv heads (≤ its warps: 16 for mse / turbo keys at head_dim ≤ 128, else 8;
// a multiple of 8; CTAs of a divisor whose slots are 16-byte runs in the cache; or, where two ring stages of
// whole token rows fit, CTAs that copy those rows), else why not.
std::string decode_heads_support(const KernelFormat& f, int n_kv_heads);
// sm_count 0: read from the current device.
DecodePlan plan_decode(const KernelFormat& f, const PagedCache& cache, const DecodeParams& p, int sm_count = 0);
// workspace: plan.workspace_bytes of device memory (may be null when 0), 16-byte aligned.
void paged_decode(const KernelFormat& f, const PagedCache& cache, const DecodeParams& p, const DecodePlan& plan,
                  void* workspace, cudaStream_t stream = nullptr);

// FP16 baseline: the same split-KV / GQA / cp.async / MMA structure over
// separate fp16 K and V caches.
std::string decode_f16_can_implement(const PagedCacheF16& cache, const DecodeParams& p);
DecodePlan plan_decode_f16(const PagedCacheF16& cache, const DecodeParams& p, int sm_count = 0);
void paged_decode_f16(const PagedCacheF16& cache, const DecodeParams& p, const DecodePlan& plan, void* workspace,
                      cudaStream_t stream = nullptr);

}  // namespace tq::cuda
