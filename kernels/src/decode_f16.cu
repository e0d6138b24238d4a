// FP16 paged decode: the baseline the quantized kernel is measured against.
// Same structure (split-KV, GQA-aware CTA over all its kv heads, cp.async ring,
// m16n8k16 MMAs with the query group as N, online softmax, LSE merge); K and V
// tiles are read with ldmatrix from an XOR-swizzled layout (16-byte chunk
// q of token row t stored at q ^ (t & 7): the 8 rows of each 8x8 matrix hit 8
// different bank groups). P is a single fp16 MMA operand, as in FlashAttention.
#include <algorithm>
#include <string>
#include <type_traits>

#include "decode_common.cuh"
#include "tq/cuda/check.h"
#include "tq/cuda/decode.h"

namespace tq::cuda {

namespace {

// One CTA per SM (its ring fills shared memory). Saying so lets ptxas use the registers to keep
// the K and V fragment loads in flight; with __launch_bounds__(256) it loaded them all into one
// register quad, each load's latency on the MMA chain (12% slower).
// SLICED: one slice of ≤ 8 query columns of G > 8 (dev::query_head); NT = 2 (SLICED): all of
// 8 < G ≤ 16 in one launch, each K / V fragment feeding two MMAs (query columns 8t + …, t < NT),
// so the cache is read once (f16_tiles). CAUSAL (multi-query, SLICED): the launch's columns are the
// virtual query heads col0 … of q_len · G (MqLayout), column c seeing positions < seq_len − n + 1
// + c / group (n: the sequence's query count, dev::query_count of mq_start).
template <int D, bool SLICED, int NT = 1, bool CAUSAL = false>
__global__ void __launch_bounds__(256, 1) decode_f16_kernel(DecodeArgs a, const __half* __restrict__ kc,
                                                         const __half* __restrict__ vc, int mq_len, int mq_group,
                                                         int mq_col0, const int32_t* __restrict__ mq_start) {
  static_assert(NT == 1 || (NT == 2 && SLICED && D <= 128), "two column tiles: one launch of 8 < G ≤ 16, d ≤ 128");
  static_assert(!CAUSAL || SLICED, "multi-query launches are slices of the virtual heads");
  constexpr int CR = D / 8;  // 16-byte chunks per token-head row
  constexpr int KS = D / 16;
  extern __shared__ __align__(16) uint8_t smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int hpc = a.heads_per_cta, wph = a.warps_per_head;
  const int hl = warp % hpc, ws = warp / hpc;
  const int item = blockIdx.x, hg = blockIdx.y;
  const int tile = 16 * wph;
  const dev::WorkItem wi = dev::work_item(a.seq_lens, a.batch, a.items, tile, item);  // every warp: the same
  if (wi.b < 0) return;  // an unused item
  const int b = wi.b;
  if (wi.k == 0 && hg == 0 && tid == 0 && a.items != a.batch) a.seq_items[b] = make_int2(item, wi.count);  // for the merge
  if constexpr (CAUSAL) {  // every column of this launch past sequence b's queries (mq_start): nothing to compute
    if (mq_start && mq_col0 / mq_group >= dev::query_count(mq_start, b, mq_len)) return;
  }
  const dev::Range rg = wi.r;
  const int kvh = hg * hpc + hl;
  const int r = lane >> 2, p = lane & 3;
  const int half_sub = 16 * hpc * 2 * D;  // bytes of the K (or V) part of a sub-tile
  const int sub_bytes = 2 * half_sub;

  // Producer: the warps of sub-tile ws copy sub-tile ws: rows (kv·16 + tok)·hpc + h,
  // CR 16-byte chunks each; a thread keeps chunk column q = gt % CR and walks rows
  // gt/CR + i·(32·hpc/CR), so each cp.async instruction of a warp covers whole
  // contiguous rows (consecutive heads of one token are adjacent in the cache).
  // The block-table read and 64-bit base are per warp and stage; the per-chunk
  // offsets take ~10 instructions (dividing per chunk made the kernel issue-bound at
  // 41% of copy bandwidth).
  const int gt = hl * 32 + lane;
  const int q = gt % CR, row0 = gt / CR, row_step = 32 * hpc / CR;
  const int rows = 32 * hpc;
  const int magic = (65536 + hpc - 1) / hpc;
  const int32_t* btab = a.table + int64_t(b) * a.table_stride;
  const int bs_mask = a.block_size - 1;
  const int64_t v_minus_k = vc - kc;  // elements
  // The page of a warp's sub-tile is read from the block table one refill ahead (read in
  // the refill, its L2 round trip came before the refill's copies and this tile's MMAs).
  auto page_of = [&](int tidx) -> int {
    const int tj = rg.begin + tidx * tile + 16 * ws;
    return tj < rg.end ? btab[tj >> a.log2_block_size] : 0;
  };
  // Shared-memory addresses are 32-bit shared-window offsets from sbase, computed once and
  // kept in a register: ptxas otherwise recomputes the window base (S2R SR_CgaCtaId, a
  // variable-latency read) inside the main loop.
  uint32_t sbase;
  asm volatile("mov.u32 %0, %1;" : "=r"(sbase) : "r"(dev::smem_u32(smem)));
  auto issue = [&](int tidx, int page, uint32_t st) {
    const int tj = rg.begin + tidx * tile + 16 * ws;
    const int nvalid = min(max(rg.end - tj, 0), 16);
    const __half* kbase = kc;
    if (nvalid > 0)
      kbase = kc + (((int64_t(page) << a.log2_block_size) + (tj & bs_mask)) * a.n_kv_heads + hg * hpc) * int64_t(D) + 8 * q;
    const uint32_t sub = st + ws * sub_bytes;
    for (int row = row0; row < rows; row += row_step) {
      const int ah = dev::small_div(row, magic);  // kv·16 + tok
      const int h = row - ah * hpc, tok = ah & 15, kv = ah >> 4;
      const uint32_t dst = sub + kv * half_sub + (tok * hpc + h) * (2 * D) + 16 * (q ^ (tok & 7));
      if (nvalid == 16) {
        dev::cp_async16_full(dst, kbase + (kv ? v_minus_k : 0) + (tok * a.n_kv_heads + h) * D);
      } else {
        const bool ok = tok < nvalid;
        dev::cp_async16(dst, ok ? kbase + (kv ? v_minus_k : 0) + (tok * a.n_kv_heads + h) * D : kc, ok ? 16 : 0);
      }
    }
  };

  int wr = 0;
  int next_page = page_of(0);
  for (int s = 0; s < a.stages - 1; ++s) {
    const int page = next_page;
    next_page = page_of(s + 1);
    if (s < rg.tiles) issue(s, page, sbase + wr * a.stage_bytes);
    dev::cp_async_commit();
    wr = wr + 1 == a.stages ? 0 : wr + 1;
  }

  // Query fragments (B operand) of column tile t: dims 16ks + 2p, +1 and +8, +9 of query row g = 8t + r.
  uint32_t qf[NT][KS][2];
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    const bool has_q = 8 * t + r < a.group;
    const __half* qrow =
        a.q + int64_t(b) * a.q_sb + int64_t(dev::query_head<SLICED>(a, kvh, has_q ? 8 * t + r : 0)) * a.q_sh;
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
      qf[t][ks][0] = has_q ? *reinterpret_cast<const uint32_t*>(qrow + 16 * ks + 2 * p) : 0u;
      qf[t][ks][1] = has_q ? *reinterpret_cast<const uint32_t*>(qrow + 16 * ks + 2 * p + 8) : 0u;
    }
  }

  // CAUSAL: positions < cut[t][c] are visible to the lane's column c of tile t (columns 8t + 2p + c)
  [[maybe_unused]] int cut[NT][2] = {};
  if constexpr (CAUSAL) {
    const int end = a.seq_lens[b] - dev::query_count(mq_start, b, mq_len) + 1;
#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
      for (int c = 0; c < 2; ++c) cut[t][c] = end + (mq_col0 + 8 * t + 2 * p + c) / mq_group;
  }

  float acc[NT][KS][4];
#pragma unroll
  for (int t = 0; t < NT; ++t)
#pragma unroll
    for (int i = 0; i < KS; ++i) acc[t][i][0] = acc[t][i][1] = acc[t][i][2] = acc[t][i][3] = 0.f;
  dev::Softmax sm[NT];
  const int mq = lane >> 3, i8 = lane & 7;
  int rd = 0;
  for (int it = 0; it < rg.tiles; ++it) {
    dev::cp_async_wait_dyn(a.stages - 2);
    __syncthreads();
    if (it + a.stages - 1 < rg.tiles) issue(it + a.stages - 1, next_page, sbase + wr * a.stage_bytes);
    next_page = page_of(it + a.stages);
    dev::cp_async_commit();
    wr = wr + 1 == a.stages ? 0 : wr + 1;
    const uint32_t ks_base = sbase + rd * a.stage_bytes + ws * sub_bytes;
    const uint32_t vs_base = ks_base + half_sub;
    rd = rd + 1 == a.stages ? 0 : rd + 1;
    const int t0 = rg.begin + it * tile + 16 * ws;
    const int nvalid = min(rg.end - t0, 16);
    if (nvalid <= 0) continue;

    float s[NT][4] = {};
    {
      const int tok = i8 + 8 * (mq & 1);
      const uint32_t row = ks_base + (tok * hpc + hl) * (2 * D);
#pragma unroll
      for (int ks = 0; ks < KS; ++ks) {
        uint32_t af[4];
        dev::ldmatrix_x4(af, row + 16 * ((2 * ks + (mq >> 1)) ^ (tok & 7)));
#pragma unroll
        for (int t = 0; t < NT; ++t) dev::mma_16816(s[t], af, qf[t][ks][0], qf[t][ks][1]);
      }
    }
    float alpha[NT][2];
    uint32_t b0[NT], b1[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      float x[4] = {s[t][0] * a.scale_log2, s[t][1] * a.scale_log2, s[t][2] * a.scale_log2, s[t][3] * a.scale_log2};
      if (r >= nvalid) x[0] = x[1] = -INFINITY;
      if (r + 8 >= nvalid) x[2] = x[3] = -INFINITY;
      if constexpr (CAUSAL) {
#pragma unroll
        for (int i = 0; i < 4; ++i)
          if (t0 + r + (i < 2 ? 0 : 8) >= cut[t][i & 1]) x[i] = -INFINITY;
      }
      sm[t].template update<CAUSAL>(x, alpha[t]);
      b0[t] = dev::movmatrix_trans(dev::pack_half2(x[0], x[1]));
      b1[t] = dev::movmatrix_trans(dev::pack_half2(x[2], x[3]));
    }
    {
      const int tok = i8 + 8 * (mq >> 1);
      const uint32_t row = vs_base + (tok * hpc + hl) * (2 * D);
#pragma unroll
      for (int i = 0; i < KS; ++i) {
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          acc[t][i][0] *= alpha[t][0];
          acc[t][i][1] *= alpha[t][1];
          acc[t][i][2] *= alpha[t][0];
          acc[t][i][3] *= alpha[t][1];
        }
        uint32_t af[4];
        dev::ldmatrix_x4_trans(af, row + 16 * ((2 * i + (mq & 1)) ^ (tok & 7)));
#pragma unroll
        for (int t = 0; t < NT; ++t) dev::mma_16816(acc[t][i], af, b0[t], b1[t]);
      }
    }
  }
  dev::cp_async_wait<0>();

#pragma unroll
  for (int t = 0; t < NT; ++t)
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const float l = dev::sum_over_token_lanes(sm[t].l[c]);
      const int g = 8 * t + 2 * p + c;
      if (g >= a.group) continue;
      const int qh = dev::query_head<SLICED>(a, kvh, g);
      const float inv = l > 0.f ? 1.f / l : 0.f;
      if (a.parts == 1) {
        __half* o = a.out + int64_t(b) * a.o_sb + int64_t(qh) * a.o_sh;
#pragma unroll
        for (int i = 0; i < KS; ++i) {
          o[16 * i + r] = __float2half_rn(acc[t][i][c] * inv);
          o[16 * i + r + 8] = __float2half_rn(acc[t][i][c + 2] * inv);
        }
      } else {
        const int64_t rowi = (int64_t(qh) * a.items + item) * wph + ws;
        float* o = a.o_part + rowi * D;
#pragma unroll
        for (int i = 0; i < KS; ++i) {
          o[16 * i + r] = acc[t][i][c] * inv;
          o[16 * i + r + 8] = acc[t][i][c + 2] * inv;
        }
        if (r == 0) a.lse_part[rowi] = l > 0.f ? sm[t].m[c] + __log2f(l) : -INFINITY;
      }
    }
}

template <class Fn>
void dispatch_f16(int d, Fn&& fn) {
  switch (d) {
    case 64: fn(std::integral_constant<int, 64>{}); break;
    case 128: fn(std::integral_constant<int, 128>{}); break;
    case 256: fn(std::integral_constant<int, 256>{}); break;
    default: throw_error("paged_decode_f16: head_dim must be 64, 128 or 256");
  }
}

// Heads per CTA the FP16 planner starts from: min(n_kv_heads, 8) when that divides it, else the
// divisor ≤ 8 whose CTA has the most of its 8 warps, the larger on a tie (10: 2 heads × 4 warps;
// 5 × 1 ran at 63% of copy).
int f16_heads_per_cta(int n_kv_heads) {
  if (n_kv_heads <= 8 || n_kv_heads % 8 == 0) return std::min(n_kv_heads, 8);
  int heads = 1, best = 0;
  for (int d = 8; d >= 1; --d)
    if (n_kv_heads % d == 0 && d * (8 / d) > best) best = d * (8 / d), heads = d;
  return heads;
}

// Column tiles of one stage-1 launch of the FP16 decode: 2 for 8 < G ≤ 16 at head_dim ≤ 128 (one
// launch: the cache read once, as SDPA reads it; the quantized decode's query_slices), else 1
// (G > 8: launches of ≤ 8 columns; d = 256's two tiles of accumulators would not fit the registers).
int f16_tiles(int group, int head_dim) { return two_query_slices(group) && head_dim <= 128 ? 2 : 1; }

// Columns per multi-query launch (q_len > 1): the q_len · G virtual heads of a kv head in launches of
// 16 (two column tiles, d ≤ 128) or 8, each reading the cache once.
int f16_mq_columns(int head_dim) { return head_dim <= 128 ? 2 * kQueryCols : kQueryCols; }

}  // namespace

DecodePlan plan_decode_f16(const PagedCacheF16& cache, const DecodeParams& p_in, int sm_count) {
  const std::string why = decode_f16_can_implement(cache, p_in);
  if (!why.empty()) throw_error(why.c_str());
  const StagedQueries sq(p_in, cache.n_kv_heads, cache.head_dim, nullptr);
  const DecodeParams& p = sq.p;  // q_len > 1: the virtual heads
  if (sm_count <= 0) sm_count = decode_device_sms();
  DecodePlan plan;
  dispatch_f16(cache.head_dim, [&](auto dc) {
    constexpr int D = decltype(dc)::value;
    int stage_bytes = 0, stages = 0;
    plan_layout(cache.n_kv_heads, f16_heads_per_cta(cache.n_kv_heads), 16, 4 * D, 0, 0, decode_device_smem_optin(),
                plan, stage_bytes, stages, true, 3, 8);
    plan.ctas_per_sm = memo_occupancy(reinterpret_cast<const void*>(decode_f16_kernel<D, false>), plan.threads,
                                      plan.smem_bytes);
  });
  const int cols = p.n_q_heads / cache.n_kv_heads;  // q_len > 1: q_len · G virtual heads per kv head
  plan.query_slices = p_in.q_len > 1 ? 1 : f16_tiles(cols, cache.head_dim);
  finish_plan(p, cache.head_dim, sm_count, 16, plan);
  if (p_in.q_len > 1) {  // column launches
    const int per = f16_mq_columns(cache.head_dim);
    plan.query_passes = (cols + per - 1) / per;
  }
  plan.q_len = p_in.q_len;
  sq.reserve(plan);
  return plan;
}

void paged_decode_f16(const PagedCacheF16& cache, const DecodeParams& p_in, const DecodePlan& plan, void* workspace,
                      cudaStream_t stream) {
  const std::string why = decode_f16_can_implement(cache, p_in);
  if (!why.empty()) throw_error(why.c_str());
  if (plan.workspace_bytes > 0 && !workspace) throw_error("paged_decode_f16: the plan needs a workspace (plan.workspace_bytes)");
  if (p_in.blocks.batch > 65535 || plan.items < p_in.blocks.batch) throw_error("paged_decode_f16: batch must be ≤ 65535 and the plan valid");
  if (plan.q_len != p_in.q_len)
    throw_error(("paged_decode_f16: the plan is for q_len " + std::to_string(plan.q_len) + " but the call has q_len " +
                 std::to_string(p_in.q_len) + " (use plan_decode_f16)").c_str());
  const int D = cache.head_dim;
  const bool multi = p_in.q_len > 1;
  const StagedQueries sq(p_in, cache.n_kv_heads, D, workspace);
  const DecodeParams& p = sq.p;
  sq.gather(stream);
  DecodeArgs a = make_decode_args(p, plan, sq.parts(workspace, plan), D, cache.block_size, cache.n_kv_heads);
  a.stage_bytes = plan.warps_per_head * 16 * plan.heads_per_cta * 4 * D;
  a.stages = plan.smem_bytes / a.stage_bytes;
  if (a.stages < 2 || a.stages > 4) throw_error("paged_decode_f16: plan does not match this cache (use plan_decode_f16)");
  dispatch_f16(D, [&](auto dc) {
    constexpr int DD = decltype(dc)::value;
    const dim3 grid(unsigned(plan.items), unsigned(plan.head_groups));
    auto launch = [&](auto kern, const DecodeArgs& s, int col0 = 0) {
      TQ_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, plan.smem_bytes));
      kern<<<grid, plan.threads, plan.smem_bytes, stream>>>(s, static_cast<const __half*>(cache.k),
                                                          static_cast<const __half*>(cache.v), p_in.q_len,
                                                          p_in.n_q_heads / cache.n_kv_heads, col0, p_in.q_start);
      TQ_CUDA_CHECK(cudaGetLastError());
    };
    if (multi) {  // launches of f16_mq_columns columns (the last may have fewer), causal per column
      const int per = f16_mq_columns(DD);
      if (plan.query_passes != (a.group_stride + per - 1) / per)
        throw_error("paged_decode_f16: plan does not match this shape (use plan_decode_f16)");
      for (int c0 = 0; c0 < a.group_stride; c0 += per) {
        const int cols = std::min(per, a.group_stride - c0);
        const DecodeArgs s = column_slice(a, D, c0, cols);
        if constexpr (DD <= 128) {
          if (cols > kQueryCols) {
            launch(decode_f16_kernel<DD, true, 2, true>, s, c0);
            continue;
          }
        }
        launch(decode_f16_kernel<DD, true, 1, true>, s, c0);
      }
      return;
    }
    if constexpr (DD <= 128) {
      if (f16_tiles(a.group_stride, DD) == 2) return launch(decode_f16_kernel<DD, true, 2>, a);  // 8 < G ≤ 16
    }
    for_each_query_slice(a, D, [&](const DecodeArgs& s, bool sliced) {  // one launch unless G > 8
      launch(sliced ? decode_f16_kernel<DD, true> : decode_f16_kernel<DD, false>, s);
    });
  });
  if (plan.parts > 1)  // (tile 0: stage 1 wrote seq_items)
    launch_decode_merge(a, p.blocks.batch, D, 0, 0, multi_query(p_in, cache.n_kv_heads), stream, sq.merge_rows(plan));
  sq.scatter(plan, stream);
}

}  // namespace tq::cuda
