// Paged decode over TurboQuant caches: the planner (heads per CTA, ring depth, splits) and the
// launchers. The stage-1 kernel and its design are in decode_kernel.cuh, instantiated per format in
// the generated decode_<format>.cu; stage 2, the log-sum-exp merge of the parts, in decode_merge.cu.
#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "decode_cfg.cuh"
#include "tq/cuda/decode.h"
#include "tq/cuda/device.h"

namespace tq::cuda {

namespace {

// Smallest-time split count: time ∝ waves(S) · ceil(tiles/S), ties → fewer splits
// (each split adds a partial write and merge read); max_tiles: the longest sequence's tiles.
int auto_splits(int batch_groups, int max_tiles, int slots) {
  if (max_tiles <= 1 || slots <= 0) return 1;
  const int smax = std::min(max_tiles, 64);
  int best = 1;
  double best_cost = 1e300;
  for (int s = 1; s <= smax; ++s) {
    const double waves = std::ceil(double(batch_groups) * s / slots);
    const double cost = waves * std::ceil(double(max_tiles) / s) * (1.0 + 0.01 * s);
    if (cost < best_cost) {
      best_cost = cost;
      best = s;
    }
  }
  return best;
}

int decode_device_sms_impl() {
  int dev_id = 0, sms = 0;
  TQ_CUDA_CHECK(cudaGetDevice(&dev_id));
  TQ_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev_id));
  return sms;
}

int decode_device_smem_optin_impl() {
  int dev_id = 0, v = 0;
  TQ_CUDA_CHECK(cudaGetDevice(&dev_id));
  TQ_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev_id));
  return v;
}

}  // namespace

int decode_device_sms() { return decode_device_sms_impl(); }
int decode_device_smem_optin() { return decode_device_smem_optin_impl(); }

int memo_occupancy(const void* kernel, int threads, int smem_bytes) {
  int dev = 0;
  TQ_CUDA_CHECK(cudaGetDevice(&dev));
  using Key = std::tuple<const void*, int, int, int>;
  static std::mutex mu;
  static std::map<Key, int> memo;
  const Key key{kernel, threads, smem_bytes, dev};
  {
    const std::lock_guard<std::mutex> lock(mu);
    if (const auto it = memo.find(key); it != memo.end()) return it->second;
  }
  int blocks = 0;  // (outside the lock: the checks may throw)
  TQ_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  TQ_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, smem_bytes));
  const std::lock_guard<std::mutex> lock(mu);
  memo.emplace(key, blocks);
  return blocks;
}

// sm_90 (H100, H200): shared memory per SM and the most one block may opt in to
constexpr int kSmemPerSm = 228 * 1024, kSmemOptinSm90 = 227 * 1024;

// Heads per CTA, warps per head and ring depth shared by both decode planners.
// plan.smem_bytes is the dynamic part (ring + fixed_dyn); static_smem counts toward
// the limits. The planner picks the heads per CTA (decode_heads_per_cta, FP16:
// f16_heads_per_cta) and gets cta_warps/heads warps per head; with flexible_heads (FP16
// kernel) a shape whose stage does not fit twice (d = 256: 128 KB per 8-head stage) falls
// back to fewer warps per head, then to fewer heads per CTA (a divisor of n_kv_heads).
void plan_layout(int n_kv_heads, int first_heads, int sub_tokens, int token_head_bytes, int fixed_dyn,
                 int static_smem, int smem_optin, DecodePlan& plan, int& stage_bytes, int& stages,
                 bool flexible_heads, int two_cta_min_stages, int cta_warps, bool whole_rows) {
  constexpr int kReserved = 1024;
  const int h0 = first_heads;
  if (h0 < 1 || h0 > cta_warps || n_kv_heads % h0)
    throw_error("paged decode: heads per CTA do not fit this shape (internal: see decode_can_implement)");
  stages = 0;
  for (int hpc = h0; hpc >= 1 && !stages; --hpc) {
    if (n_kv_heads % hpc || (hpc != h0 && !flexible_heads)) continue;
    // (whole_rows: fewer warps per head where a stage of whole token rows is too large)
    const int row_heads = whole_rows ? n_kv_heads : hpc;
    for (int wph = std::max(1, cta_warps / hpc); wph >= 1 && !stages; wph = flexible_heads || whole_rows ? wph / 2 : 0) {
      const int sb = wph * sub_tokens * row_heads * token_head_bytes;
      // Prefer 2 CTAs per SM with ≥ 3 stages (latency hiding across CTAs), else
      // the deepest ring (≥ 3, then 2) one CTA can hold.
      for (int ctas = 2; ctas >= 1 && !stages; --ctas)
        for (int st = 4; st >= 2; --st) {
          if (st < two_cta_min_stages && ctas == 2) continue;
          if (st == 2 && flexible_heads && wph > 1) continue;
          const int bytes = st * sb + fixed_dyn + static_smem;
          if (bytes <= smem_optin && ctas * (bytes + kReserved) <= kSmemPerSm) {
            stages = st;
            plan.heads_per_cta = hpc;
            plan.ring_heads = row_heads;
            plan.warps_per_head = wph;
            stage_bytes = sb;
            break;
          }
        }
      if (!flexible_heads) break;
    }
  }
  if (!stages) throw_error("paged decode: a 2-stage ring does not fit in shared memory for this shape");
  plan.head_groups = n_kv_heads / plan.heads_per_cta;
  plan.threads = 32 * plan.heads_per_cta * plan.warps_per_head;
  plan.smem_bytes = stages * stage_bytes + fixed_dyn;
}

// Makespans in tiles with a fixed cost of kFixed tiles per CTA (dev::kBalanceFixedTiles), every
// sequence at max_tiles: the usual dealing ⌈batch · S / slots⌉ waves of ⌈max_tiles / S⌉ + kFixed; the
// balanced one max(L + kFixed, ⌈batch / idle⌉ · (r + kFixed)), L = ⌈batch · max_tiles / slots⌉, r the
// last chunk's tiles, idle the slots the full chunks leave — where the device keeps it for these
// lengths (batch · (r + kFixed) ≤ idle · (L + kFixed)).
int balance_slots(int batch, int max_tiles, int slots, int splits) {
  constexpr int kFixed = dev::kBalanceFixedTiles;
  if (batch <= 0 || slots <= batch || max_tiles <= 1) return 0;
  const long long L = (static_cast<long long>(batch) * max_tiles + slots - 1) / slots;
  const long long c = (max_tiles + L - 1) / L, r = max_tiles - (c - 1) * L, n1 = batch * (c - 1);
  if (r == L || n1 >= slots) return 0;  // equal chunks already, or not one wave
  const long long idle = slots - n1;
  if (batch * (r + kFixed) > idle * (L + kFixed)) return 0;  // the device's test (work_item_balanced)
  const double usual = std::ceil(double(batch) * splits / slots) * (std::ceil(double(max_tiles) / splits) + kFixed);
  const double balanced = std::max<double>(L + kFixed, double((batch + idle - 1) / idle) * double(r + kFixed));
  return balanced <= 0.98 * usual ? slots : 0;
}

// The CTA merges its warps' parts (KernelTraits::kCtaMerge) from 4 warps per kv head (plan_stage1) and where a
// work item averages at least 256 tokens (finish_plan). In same-call A/Bs on one H100 (results/kernels/
// ab_cta_merge_h100.txt, ab_cta_merge_short_h100.txt) it gains with 8 warps per head and on items of 256 tokens and
// more (B 32, 4K, 16/2: 14%), and costs with 2 warps per head (32/8, 64/8) and on items of about 128 tokens (d 256,
// k8v4).
constexpr int kCtaMergeMinWarps = 4, kCtaMergeMinItemTokens = 256;
// 3bit_nc (3-bit mse keys, 3-bit values) merges at any item length: in the run-time-flag A/B of
// ab_cta_merge_h100.txt its batch-1 4K decodes at 16/2 and 32/4 gained from the merge (16/2: 13%).
template <class C>
constexpr int cta_merge_min_item_tokens() {
  return QCfg<C>::kMse && C::kKeyBits == 3 && C::kValueBits == 3 ? 0 : kCtaMergeMinItemTokens;
}

void finish_plan(const DecodeParams& p, int head_dim, int sm_count, int sub_tokens, DecodePlan& plan, bool balance,
                 int merge_min_item_tokens, int chunks) {
  const int tile = sub_tokens * plan.warps_per_head, batch = p.blocks.batch;
  const int groups = batch * plan.head_groups * chunks, slots = sm_count * plan.ctas_per_sm;
  const int max_tiles = std::max(1, (p.max_seq_len + tile - 1) / tile);
  plan.num_splits = p.num_splits > 0 ? p.num_splits : auto_splits(groups, max_tiles, slots);
  plan.items = plan.num_splits * batch;  // work items per head group (dev::work_item)
  plan.balance_slots = balance && !p.even_dealing && p.num_splits <= 0 && plan.head_groups == 1 && chunks == 1
                           ? balance_slots(batch, max_tiles, slots, plan.num_splits)
                           : 0;
  if (plan.balance_slots > 0) plan.items = plan.balance_slots + batch;  // dev::work_item_balanced
  // for_each_query_slice, or one launch for both slices (query_slices, set by the planner before)
  plan.query_passes = plan.query_slices == 2 ? 1 : query_passes(p.n_q_heads / (plan.head_groups * plan.heads_per_cta));
  // parts per (sequence, q head), at most (the merge's shared-memory weights): a sequence of
  // max_seq_len tokens gets ≤ max_tiles items, and every other sequence has ≥ 1. With more
  // items than sequences parts > 1 even so, so the parts always go through the workspace
  // and the merge (a sequence longer than max_seq_len may take several items).
  // (the CTA merge, where plan_stage1 chose it, only for long work items: max_seq_len tokens per sequence dealt
  // over its items; the kernel's occupancy was asked of the merging kernel, whose shared memory and threads are the
  // same)
  if (plan.part_warps == 1 && plan.warps_per_head > 1 &&
      int64_t(p.max_seq_len) * batch < int64_t(merge_min_item_tokens) * plan.items)
    plan.part_warps = plan.warps_per_head;
  if (plan.part_warps <= 0) plan.part_warps = plan.warps_per_head;
  plan.parts = plan.items == batch ? plan.part_warps
                                   : std::max(2, std::min(plan.items - batch + 1, max_tiles) * plan.part_warps);
  plan.workspace_bytes = 0;
  if (plan.parts > 1)
    plan.workspace_bytes = WorkspaceLayout(plan.items, p.n_q_heads, plan.part_warps, head_dim, batch).bytes;
}

// DecodePlan::ring_heads of a CTA holding hpc of the cache's n_kv_heads: hpc, or n_kv_heads where the CTA copies
// whole token rows because its heads' slots are not 16-byte runs in the cache (hpc · slot or the row, n_kv_heads ·
// slot, not a multiple of 16 bytes: a bulk copy's size and addresses must be; a half of whole rows, 16 of them,
// always is one run). The plane layout's runs are whole planes. Such rows are never padded (ring_row_bytes pads
// only rows ≡ 0 mod 64 bytes: with even slots that takes n_kv_heads a multiple of 8, whose CTAs of 8 are runs, or
// 16 | slot, where every CTA's slots are), so PageRing copies each half of them in one piece.
template <class C>
int ring_heads(bool planes, int n_kv_heads, int hpc) {
  constexpr int slot = QCfg<C>::kSlot;
  const bool runs = hpc == n_kv_heads || ((hpc * slot) % 16 == 0 && (n_kv_heads * slot) % 16 == 0);
  return planes || runs ? hpc : n_kv_heads;
}

// Static shared memory of the quantized decode kernel: LUT (not wide), sign LUT, barriers, centroids.
template <class Q>
constexpr int decode_static_smem() {
  return (Q::kWide ? 8 : Q::kLutBytes) + Q::kSignLutEntries * 8 + 8 * 2 * kMaxStages + 64;
}

// The dynamic bytes the device allows the quantized decode kernel (opt-in minus static): the
// planner and the launcher must lay the ring out against the same limit.
template <class Q>
int ring_limit() {
  return decode_device_smem_optin() - decode_static_smem<Q>();
}

// Bytes per token row of a ring piece (ring_row_bytes; the plane layout is never padded).
template <class C>
int ring_row(bool planes, int hpc) {
  return planes ? ring_row_bytes<C, true>(hpc) : ring_row_bytes<C, false>(hpc);
}

// The dynamic shared-memory layout of a quantized-decode plan with `stages` stages;
// `limit`: ring_limit; planes: the plane layout; row_heads: the kv heads of a piece's token row (DecodePlan::
// ring_heads).
struct RingLayout {
  int split = 1 << 30;  // pieces below ring_hi
  uint32_t hi = 0, qbuf = 0;
  int dyn_bytes = 0;
};
template <class C>
RingLayout ring_layout(bool planes, int row_heads, int wph, int stages, int limit) {
  using Q = QCfg<C>;
  const int half = 16 * ring_row<C>(planes, row_heads), pieces = 2 * wph * stages, qbytes = Q::kCtaWarps * Q::D * 4;
  RingLayout r;
  if constexpr (Q::kWide) {  // [pieces … | LUT at kLutAddr | pieces … | q buffers]
    r.split = int((kLutAddr - kBaseMax) / uint32_t(half));
    const int above = std::max(0, pieces - r.split);
    r.hi = kRingHi;
    r.qbuf = kRingHi + uint32_t(above * half);
    r.dyn_bytes = int(r.qbuf + uint32_t(qbytes) - kBaseMin);
    if (r.dyn_bytes > limit) {  // [pieces … | q buffers | LUT at kLutAddr2 | pieces …]
      RingLayout r2;
      r2.split = std::min(pieces, int((kLutAddr2 - kBaseMax - uint32_t(qbytes)) / uint32_t(half)));
      r2.qbuf = kBaseMax + uint32_t(r2.split * half);
      r2.hi = kLutAddr2 + kLutBytesWide;
      r2.dyn_bytes = int(r2.hi + uint32_t((pieces - r2.split) * half) - kBaseMin);
      if (r2.dyn_bytes < r.dyn_bytes) r = r2;
    }
  } else {
    r.dyn_bytes = pieces * half + qbytes;
  }
  return r;
}

// Where a CTA of this ring layout (planes, rows of row_heads kv heads, wph warps per head, `stages` stages; `warps`
// warps in all)
// merges its warps' parts (DecodeArgs::merge), or 0 where their staging areas (merge_stage_floats<C> per warp)
// do not fit in what the main loop no longer needs: the ring below the q buffers (kMergeAtBase: its pieces; the
// wide ring's first form: its low pieces and the LUT), or the LUT and the pieces above it (kMergeAtLut2: the
// second form, whose q buffers sit below the LUT).
template <class C>
int merge_site(bool planes, int row_heads, int wph, int stages, int warps) {
  const int need = warps * merge_stage_floats<C>() * 4;
  if constexpr (QCfg<C>::kWide) {
    const RingLayout rl = ring_layout<C>(planes, row_heads, wph, stages, ring_limit<QCfg<C>>());
    if (rl.hi == kRingHi) return int(rl.qbuf - kBaseMax) >= need ? kMergeAtBase : 0;
    return rl.dyn_bytes + int(kBaseMin) - int(kLutAddr2) >= need ? kMergeAtLut2 : 0;
  } else {
    return 2 * wph * stages * 16 * ring_row<C>(planes, row_heads) >= need ? kMergeAtBase : 0;
  }
}

// The cache's tensor map for the TM kernels (tm_copies): 2-D, 8-byte elements; x: the bytes of
// a token row (n_kv_heads slots) / 8, y: the cache's token rows (num_blocks · block_size);
// box: hpc slots × 16 rows (a row a multiple of 16 bytes and ≤ 256 elements: tm_rows). False
// where it cannot be encoded (no driver entry point, a stride or base the TMA cannot take, 2^31
// rows or more): the launch copies per token then.
bool encode_cache_map(const PagedCache& cache, int slot, int hpc, CUtensorMap& map) {
  using Encode = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*, const cuuint64_t*,
                              const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                              CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
  static const Encode encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return Encode(nullptr);
    }
    return reinterpret_cast<Encode>(fn);
  }();
  const int64_t row = int64_t(cache.n_kv_heads) * slot, rows = cache.num_blocks * cache.block_size;
  if (!encode || row % 16 || rows >= (int64_t(1) << 31) || reinterpret_cast<uintptr_t>(cache.data) % 16) return false;
  const cuuint64_t dims[2] = {cuuint64_t(row / 8), cuuint64_t(rows)}, strides[1] = {cuuint64_t(row)};
  const cuuint32_t box[2] = {cuuint32_t(hpc * slot / 8), 16u}, elem_strides[2] = {1u, 1u};
  return encode(&map, CU_TENSOR_MAP_DATA_TYPE_UINT64, 2, cache.data, dims, strides, box, elem_strides,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

int decode_cta_warps(const KernelFormat& f) {
  int warps = 0;
  dispatch_decode_format(f, [&](auto cfg) { warps = QCfg<decltype(cfg)>::kCtaWarps; });
  return warps;
}

// Heads per CTA of the quantized decode (0: it cannot stream n_kv_heads): all n_kv_heads ≤ the
// kernel's warps (8; 16 for the wide-LUT kernels: Phi-3-medium / Phi-4 10, Gemma 2/3 27B 16) in
// one copy of the page, one warp each; else 8 when they divide n_kv_heads (8 heads' slots: a
// multiple of 16 bytes for even slots — 5 or 2 heads' runs of 134-byte slots are not, and TMA
// cannot copy them). Every bulk copy costs the CTA, so fewer, larger copies win: at 16 kv heads one CTA of
// 16 heads (one copy per 16-token page, where CTAs of 8 heads take 16 copies of 1072 bytes) runs at 80% of copy
// bandwidth (4bit_nc, 32K), and 16-head CTAs lead at 32 kv heads (MHA) too.
// (Where ring_row_bytes pads the rows — turbo slots at 16 heads — a page takes 16 per-token
// copies even in one CTA: the 4-way bank conflicts they avoid cost more.) Above the
// kernel's warps, CTAs of 8 heads: the wide-LUT formats' 8-head rows are unpadded (tm_rows, which
// pick_kernel asserts), so each 16-token page slice is one tensor-map box (the TM kernels,
// tm_copies), which measured faster than per-token copies at 40 kv heads and than 16-head CTAs with
// padded rows at 32.
// The 8-warp kernels copy per token.
// Other counts (Phi-4's 10 kv heads for the 8-warp kernels: fp8 keys, turbo4-qjl, head_dim 256) take the largest
// divisor of n_kv_heads that the warps hold: preferably one whose slots the cache holds as 16-byte runs (k8v4's
// 196-byte slots at 12 heads: CTAs of 4, per-token copies), else one that copies whole token rows (ring_heads:
// 10 heads of 196 bytes in CTAs of 5) where two stages of such rows fit, one warp per head.
int decode_heads_per_cta(const KernelFormat& f, int n_kv_heads) {
  int hpc = 0;
  dispatch_decode_format(f, [&](auto cfg) {
    using C = decltype(cfg);
    using Q = QCfg<C>;
    constexpr int warps = Q::kCtaWarps;
    if (n_kv_heads <= warps || n_kv_heads % 8 == 0) {
      hpc = n_kv_heads <= warps ? n_kv_heads : 8;
      return;
    }
    int whole = 0;  // the largest divisor (whole token rows)
    for (int h = warps; h >= 1 && !hpc; --h)
      if (n_kv_heads % h == 0) {
        whole = whole ? whole : h;
        if (ring_heads<C>(false, n_kv_heads, h) == h) hpc = h;
      }
    // (the sm_90 opt-in limit: a smaller device's plan_layout then says that the ring does not fit)
    const int limit = kSmemOptinSm90 - decode_static_smem<Q>();
    if (!hpc && ring_layout<C>(false, n_kv_heads, 1, 2, limit).dyn_bytes <= limit) hpc = whole;
  });
  return hpc;
}

// Columns of a multi-query launch set: with two N-tiles per warp (tiles = 2), launches of ≤ 16
// columns, each warp computing all of them (the cache read ⌈cols / 16⌉ times); else both slices per
// CTA (16 columns per launch) where the CTA has the warps for a second slice and every launch gets
// more than 8 columns; else launches of ≤ 8 columns. Chunks of one width are one launch, chunk z of it
// at blockIdx.z (grid_chunks): at 32/8, q_len 16 (4 chunks of 16 columns) the CTAs of all four share
// the SMs, so the split count can drop from 4 to 1 (no merge) and one prologue and tail serve them all.
struct ColumnChunks {
  int cols = 0;
  bool dual = false;
  int n = 1, base = 0, rem = 0;  // n chunks: the first rem of base + 1 columns, the rest of base (the last ≤)
  // the chunks of one launch for the caller's params p: all n where they have one width, else 1 (a launch per
  // chunk). Not with query counts per sequence (p.q_start), which the planner cannot read: a chunk past most
  // sequences' counts keeps only its split count's items, dealt over the few sequences left (a 16-query chunk
  // among single-query decodes would get 1 split for all four chunks).
  int grid_chunks(const DecodeParams& p) const { return !p.q_start && rem == 0 && n * base == cols ? n : 1; }
  ColumnChunks(int columns, int hpc, int cta_warps, int tiles) : cols(columns) {
    const int n16 = (cols + 2 * kQueryCols - 1) / (2 * kQueryCols);
    if (tiles == 2) {  // tile 0 takes columns 0 … 7 of each launch, tile 1 the rest
      n = n16;
      base = 2 * kQueryCols;
      return;
    }
    dual = cols > kQueryCols && 2 * hpc <= cta_warps && cols / n16 > kQueryCols;
    n = dual ? n16 : (cols + kQueryCols - 1) / kQueryCols;
    base = dual ? cols / n : kQueryCols;
    rem = dual ? cols % n : 0;
  }
  // fn(first column, columns per chunk, chunks) once per launch for the caller's params p: one launch of all n
  // chunks where grid_chunks(p) takes them, else one launch per chunk
  template <class Fn>
  void for_each_launch(const DecodeParams& p, Fn&& fn) const {
    if (grid_chunks(p) > 1) return fn(0, base, n);
    for (int i = 0, c0 = 0; i < n; ++i) {
      const int w = std::min(cols - c0, base + (i < rem ? 1 : 0));
      fn(c0, w, 1);
      c0 += w;
    }
  }
};

// dir 0: queries → column order; dir 1: column-order outputs → out. Thread x of row (b, j, h): the
// element pairs x, x + blockDim.x, … of that row.
// bf16: src holds bf16 queries (dir 0), written as fp16.
// q_start, q_rows: DecodeParams' (variable query counts; null: q_len each).
__global__ void mq_reorder_kernel(const __half* __restrict__ src, __half* __restrict__ dst, int dir, int bf16, int q_len,
                                  int n_q_heads, int group, int head_dim, int64_t s_b, int64_t s_t, int64_t s_h,
                                  const int32_t* __restrict__ q_start, int64_t q_rows) {
  // stage 1, a programmatic dependent of this kernel, may launch once every CTA of it has started: its
  // CTAs wait for this grid to complete before reading the rows
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const int row = blockIdx.x, h = row % n_q_heads, j = row / n_q_heads % q_len, b = row / (n_q_heads * q_len);
  const int kvh = h / group, g = h % group;
  const int64_t vrow = int64_t(b) * n_q_heads * q_len + int64_t(kvh) * q_len * group + int64_t(j) * group + g;
  const int64_t user = dev::caller_row(q_len > 1 ? q_start : nullptr, q_rows, b, j, h, s_b, s_t, s_h);
  if (q_start && q_len > 1 && (j >= dev::query_count(q_start, b, q_len) || user < 0)) {  // no query here
    if (dir == 0)
      for (int x = 2 * int(threadIdx.x); x < head_dim; x += 2 * int(blockDim.x))
        *reinterpret_cast<uint32_t*>(dst + vrow * head_dim + x) = 0u;
    return;
  }
  const int64_t from = dir == 0 ? user : vrow * head_dim, to = dir == 0 ? vrow * head_dim : user;
  for (int x = 2 * int(threadIdx.x); x < head_dim; x += 2 * int(blockDim.x)) {
    const uint32_t w = *reinterpret_cast<const uint32_t*>(src + from + x);
    if (bf16) {
      const float2 f = dev::act2_to_float2<true>(w);
      *reinterpret_cast<__half2*>(dst + to + x) = __floats2half2_rn(f.x, f.y);
    } else {
      *reinterpret_cast<uint32_t*>(dst + to + x) = w;
    }
  }
}
void launch_mq_reorder(const void* src, void* dst, int dir, const DecodeParams& p, int n_kv_heads, int head_dim,
                       int64_t s_b, int64_t s_t, int64_t s_h, cudaStream_t stream) {
  const unsigned rows = unsigned(int64_t(p.blocks.batch) * p.q_len * p.n_q_heads);
  const int bf16 = dir == 0 && p.dtype == Dtype16::bf16 ? 1 : 0;
  mq_reorder_kernel<<<rows, unsigned(head_dim / 2), 0, stream>>>(static_cast<const __half*>(src), static_cast<__half*>(dst),
                                                                 dir, bf16, p.q_len, p.n_q_heads,
                                                                 p.n_q_heads / n_kv_heads, head_dim, s_b, s_t, s_h,
                                                                 p.q_start, p.q_rows);
  TQ_CUDA_CHECK(cudaGetLastError());
}

DecodeParams virtual_params(const DecodeParams& p, int head_dim, const MqLayout& l, uint8_t* mq) {
  DecodeParams v = p;
  if (p.q_len <= 1) {
    if (stages_queries(p)) {  // bf16: the fp16 copy, dense rows
      v.query = mq;
      v.q_stride_batch = int64_t(p.n_q_heads) * head_dim;
      v.q_stride_head = head_dim;
    }
    return v;
  }
  v.n_q_heads = p.n_q_heads * p.q_len;
  v.q_len = 1;
  v.query = mq;
  v.out = mq ? mq + l.piece : nullptr;
  v.q_stride_batch = v.o_stride_batch = int64_t(v.n_q_heads) * head_dim;
  v.q_stride_head = v.o_stride_head = head_dim;
  v.q_stride_token = v.o_stride_token = 0;
  return v;
}

// The multi-query kernels' N-tiles per warp for a plan (KernelTraits::kNTiles): 2 where the format
// has the two-tile kernel (mq_column_tiles), its CTAs hold 8 kv heads and a kv head has
// more than 8 columns; else 1.
template <class C>
int column_tiles(int heads_per_cta, int columns, bool planes) {
  return mq_column_tiles<C>() == 2 && heads_per_cta == 8 && columns > kQueryCols && !planes ? 2 : 1;
}
int plan_column_tiles(const KernelFormat& f, int heads_per_cta, int columns, bool planes) {
  int tiles = 1;
  dispatch_decode_format(f, [&](auto cfg) { tiles = column_tiles<decltype(cfg)>(heads_per_cta, columns, planes); });
  return tiles;
}

namespace {

// plan_decode's stage-1 layout (sq.p: the problem stage 1 runs; the staged buffers are sq.reserve's)
DecodePlan plan_stage1(const KernelFormat& f, const PagedCache& cache, const StagedQueries& sq, int sm_count) {
  if (sm_count <= 0) sm_count = decode_device_sms();
  const DecodeParams& p_in = sq.in;
  const DecodeParams& p = sq.p;
  const bool multi = p_in.q_len > 1;
  const int group = p.n_q_heads / cache.n_kv_heads, heads = decode_heads_per_cta(f, cache.n_kv_heads);
  const int kernel_warps = decode_cta_warps(f);  // a CTA of the format's one-tile kernels
  const bool planes = cache.layout == CacheLayout::planes, sliced = multi || sliced_launches(group);
  // dual: both query slices of 8 < G ≤ 16 in one launch (query_slices); the ring then holds half
  // the sub-tiles per stage (warps_per_head is per slice)
  // tiles: N-tiles per warp of the multi-query kernels (2: CTAs of 8 warps)
  auto plan_for = [&](bool dual, int tiles = 1, int chunks = 1) {
    DecodePlan plan;
    int merge_min_item_tokens = kCtaMergeMinItemTokens;
    dispatch_decode_format(f, [&](auto cfg) {
      using C = decltype(cfg);
      using Q = QCfg<C>;
      merge_min_item_tokens = cta_merge_min_item_tokens<C>();
      int stage_bytes = 0, stages = 0;
      // dynamic: ring, q buffers (one per warp), wide: the LUT (see ring_layout); static:
      // LUT (not wide), barriers, centroids
      const int fixed_dyn = (Q::kWide ? int(kLutBytesWide) : 0) + Q::kCtaWarps * Q::D * 4;
      const int static_smem = decode_static_smem<Q>();
      const int cta_warps = tiles == 2 ? kMqTileWarps : dual ? Q::kCtaWarps / 2 : Q::kCtaWarps;
      plan_layout(cache.n_kv_heads, heads, kSub, Q::kSlot, fixed_dyn, static_smem, decode_device_smem_optin(), plan,
                  stage_bytes, stages, false, 2, cta_warps, ring_heads<C>(planes, cache.n_kv_heads, heads) > heads);
      plan.column_tiles = tiles;
      if (dual) {
        plan.query_slices = 2;
        plan.threads *= 2;
      }
      if constexpr (Q::kWide) {  // the deepest ring whose split layout fits
        const int limit = ring_limit<Q>();
        for (stages = kMaxStages; stages >= 2; --stages)
          if (ring_layout<C>(planes, plan.ring_heads, plan.warps_per_head, stages, limit).dyn_bytes <= limit) break;
        if (stages < 2) throw_error("paged decode: a 2-stage ring does not fit in shared memory for this shape");
        plan.smem_bytes = ring_layout<C>(planes, plan.ring_heads, plan.warps_per_head, stages, limit).dyn_bytes;
      }
      plan.tensor_map = tm_copies<C>(planes, sliced, plan.heads_per_cta, cache.n_kv_heads);
      const QuerySlicing slicing = dual ? QuerySlicing::both : sliced ? QuerySlicing::one : QuerySlicing::whole;
      // single-query, ≥ 4 warps per kv head: the CTA merges their parts where the staging fits (merge_site), so
      // the workspace and the merge kernel see one part per work item (kCtaMergeMinWarps; finish_plan may undo it)
      if (!multi && !planes && !plan.tensor_map && slicing == QuerySlicing::whole &&
          plan.warps_per_head >= kCtaMergeMinWarps &&
          merge_site<C>(planes, plan.ring_heads, plan.warps_per_head, stages, plan.threads / 32))
        plan.part_warps = 1;
      const DecodeKernelSel sel{planes, dual ? group : std::min(group, kQueryCols * tiles), plan.heads_per_cta,
                                plan.warps_per_head, slicing, plan.tensor_map, multi, tiles, plan.part_warps == 1};
      plan.ctas_per_sm = decode_kernel_occupancy<C>(sel, plan.threads, plan.smem_bytes);
    });
    // the balanced dealing only at G ≤ 4 query columns per kv head: its fixed cost per CTA fits G ≤ 4 CTAs, and at
    // 64/8, 96/8 and 128/8 even chunks measured up to 11% ahead (planner_ab.py, one H100, B 32, 32K)
    finish_plan(p, f.head_dim, sm_count, kSub, plan, /*balance=*/group <= 4, merge_min_item_tokens, chunks);
    return plan;
  };
  if (multi) {  // launches of ColumnChunks
    int tiles = p.column_tiles == 1 ? 1 : plan_column_tiles(f, heads, group, planes);
    ColumnChunks ch(group, heads, kernel_warps, tiles);
    DecodePlan plan = plan_for(ch.dual, tiles, ch.grid_chunks(p_in));
    // short work items (two_tile_items, as single-query decodes at 8 < G ≤ 16): one tile per warp and
    // both slices per launch, where that takes as many launches
    if (tiles == 2 && p.column_tiles == 0 && !two_tile_items(p.max_seq_len, plan.num_splits)) {
      const ColumnChunks one(group, heads, kernel_warps, 1);
      if (one.dual && one.n == ch.n) {
        ch = one;
        tiles = 1;
        plan = plan_for(ch.dual, tiles, ch.grid_chunks(p_in));
      }
    }
    plan.query_passes = ch.n;
    return plan;
  }
  const bool dual_fits = dual_slices_fit(group, heads, kernel_warps, planes);
  if (two_query_slices(group) && p.column_tiles != 1 && plan_column_tiles(f, heads, group, planes) == 2) {
    DecodePlan plan = plan_for(false, 2);  // one launch, 16 columns per warp
    plan.query_passes = 1;
    if (p.column_tiles == 2 || !dual_fits || two_tile_items(p.max_seq_len, plan.num_splits)) return plan;
  }
  if (!dual_fits) return plan_for(false);
  if (group > kQueryCols + 4) return plan_for(true);
  const DecodePlan two = plan_for(false);  // 8 < G ≤ 12: one launch only for short work items
  return dual_short_items(p.max_seq_len, two.num_splits) ? plan_for(true) : two;
}

}  // namespace

DecodePlan plan_decode(const KernelFormat& f, const PagedCache& cache, const DecodeParams& p, int sm_count) {
  const std::string why = decode_can_implement(f, cache, p);
  if (!why.empty()) throw_error(why.c_str());
  const StagedQueries sq(p, cache.n_kv_heads, f.head_dim, nullptr);
  DecodePlan plan = plan_stage1(f, cache, sq, sm_count);
  plan.q_len = p.q_len;
  plan.dtype = p.dtype;
  sq.reserve(plan);
  return plan;
}

void paged_decode(const KernelFormat& f, const PagedCache& cache, const DecodeParams& p_in, const DecodePlan& plan,
                  void* workspace, cudaStream_t stream) {
  const std::string why = decode_can_implement(f, cache, p_in);
  if (!why.empty()) throw_error(why.c_str());
  if (plan.workspace_bytes > 0 && !workspace) throw_error("paged_decode: the plan needs a workspace (plan.workspace_bytes)");
  if (p_in.blocks.batch > 65535 || plan.items < p_in.blocks.batch) throw_error("paged_decode: batch must be ≤ 65535 and the plan valid");
  if (plan.q_len != p_in.q_len)
    throw_error(("paged_decode: the plan is for q_len " + std::to_string(plan.q_len) + " but the call has q_len " +
                 std::to_string(p_in.q_len) + " (use plan_decode)").c_str());
  if (plan.dtype != p_in.dtype)
    throw_error((std::string("paged_decode: the plan is for ") + dtype16_name(plan.dtype) + " queries but the call has " +
                 dtype16_name(p_in.dtype) + " (use plan_decode)").c_str());
  const bool multi = p_in.q_len > 1;
  const StagedQueries sq(p_in, cache.n_kv_heads, f.head_dim, workspace);
  const DecodeParams& p = sq.p;
  sq.gather(stream);
  DecodeArgs a = make_decode_args(p, plan, sq.parts(workspace, plan), f.head_dim, cache.block_size, cache.n_kv_heads);
  DecodeTablesQjl t{};  // (the other kernels take its DecodeTables part)
  for (int i = 0; i < 16; ++i) t.centroids[i] = f.centroids[i];
  t.rot_scale = f.rot_scale;
  t.lut_scale = f.lut_scale;
  t.nc = f.norm_correction ? 1 : 0;
  t.balance = plan.balance_slots;
  t.qjl_scale = f.qjl_scale;
  for (int w = 0; w < 4; ++w) {
    t.s1[w] = f.turbo_s1[w];
    t.s2[w] = f.turbo_s2[w];
    t.qs1[w] = f.qjl_s1[w];
    t.qs2[w] = f.qjl_s2[w];
  }
  MultiQuery mq = multi_query(p_in, cache.n_kv_heads);  // (the launches' columns set below, for the merge)
  // the stage-1 launches: programmatic dependents where the kernel before them is the decode's own (the gather,
  // the previous column or slice launch; decode_body waits before reading the staged queries)
  bool pdl = sq.staged;
  dispatch_decode_format(f, [&](auto cfg) {
    using C = decltype(cfg);
    using Q = QCfg<C>;
    const bool planes = cache.layout == CacheLayout::planes;
    if (plan.ring_heads != ring_heads<C>(planes, cache.n_kv_heads, plan.heads_per_cta))
      throw_error("paged_decode: plan does not match this shape (use plan_decode)");
    a.stage_bytes = plan.warps_per_head * kSub * ring_row<C>(planes, plan.ring_heads);
    a.stages = 0;
    const int limit = ring_limit<Q>();
    for (int st = 2; st <= kMaxStages; ++st)
      if (ring_layout<C>(planes, plan.ring_heads, plan.warps_per_head, st, limit).dyn_bytes == plan.smem_bytes) a.stages = st;
    if (!a.stages) throw_error("paged_decode: plan does not match this format (use plan_decode)");
    const RingLayout rl = ring_layout<C>(planes, plan.ring_heads, plan.warps_per_head, a.stages, limit);
    a.ring_split = rl.split;
    a.ring_hi = rl.hi;
    a.qbuf_addr = rl.qbuf;
    a.merge = 0;
    if (plan.part_warps == 1 && plan.warps_per_head > 1) {
      a.merge = merge_site<C>(planes, plan.ring_heads, plan.warps_per_head, a.stages, plan.threads / 32);
      if (!a.merge) throw_error("paged_decode: plan does not match this format (use plan_decode)");
    }
    const dim3 grid(unsigned(plan.items), unsigned(plan.head_groups));
    CUtensorMap map{};
    const bool tm = plan.tensor_map && encode_cache_map(cache, Q::kSlot, plan.heads_per_cta, map);
    if (multi) {  // ColumnChunks launches of the causal kernels
      const ColumnChunks ch(a.group_stride, plan.heads_per_cta, Q::kCtaWarps, plan.column_tiles);
      if (ch.dual != (plan.query_slices == 2) ||
          plan.column_tiles > column_tiles<C>(plan.heads_per_cta, a.group_stride, planes))
        throw_error("paged_decode: plan does not match this shape (use plan_decode)");
      mq.chunk = ch.base;
      mq.chunk_rem = ch.rem;
      // columns c0 … c0 + chunks · cols − 1 in one launch (chunk z of it at blockIdx.z)
      auto launch = [&](int c0, int cols, int chunks) {
        const DecodeKernelSel sel{false, cols, plan.heads_per_cta, plan.warps_per_head,
                                  ch.dual ? QuerySlicing::both : QuerySlicing::one, false, true, plan.column_tiles};
        MultiQuery m = mq;
        m.col0 = c0;
        decode_kernel_launch<C>(sel, column_slice(a, f.head_dim, c0, cols), t, m, cache.data, &map,
                                dim3(grid.x, grid.y, unsigned(chunks)), plan.threads, plan.smem_bytes, stream, pdl);
        pdl = true;
      };
      ch.for_each_launch(p_in, launch);
    } else if (plan.column_tiles == 2) {  // 8 < G ≤ 16 in one launch, each warp both 8-column tiles (a.group = G)
      if (!two_query_slices(a.group) || column_tiles<C>(plan.heads_per_cta, a.group, planes) != 2 ||
          plan.threads != 32 * plan.heads_per_cta * plan.warps_per_head)
        throw_error("paged_decode: plan does not match this shape (use plan_decode)");
      const DecodeKernelSel sel{false, a.group, plan.heads_per_cta, plan.warps_per_head, QuerySlicing::one, false, false, 2};
      decode_kernel_launch<C>(sel, a, t, MultiQuery{}, cache.data, &map, grid, plan.threads, plan.smem_bytes, stream, pdl);
    } else if (plan.query_slices == 2) {  // both slices of 8 < G ≤ 16 in one launch (a.group = G)
      // (the planner's own test, dual_slices_fit, and its thread count)
      if (!dual_slices_fit(a.group, plan.heads_per_cta, Q::kCtaWarps, planes) ||
          plan.threads != 2 * 32 * plan.heads_per_cta * plan.warps_per_head)
        throw_error("paged_decode: plan does not match this shape (use plan_decode)");
      const DecodeKernelSel sel{planes, a.group, plan.heads_per_cta, plan.warps_per_head, QuerySlicing::both, false};
      decode_kernel_launch<C>(sel, a, t, MultiQuery{}, cache.data, &map, grid, plan.threads, plan.smem_bytes, stream, pdl);
    } else {
      for_each_query_slice(a, f.head_dim, [&](const DecodeArgs& s, bool sliced) {  // one launch unless G > 8
        const DecodeKernelSel sel{planes, s.group, plan.heads_per_cta, plan.warps_per_head,
                                  sliced ? QuerySlicing::one : QuerySlicing::whole, tm, false, 1, a.merge != 0};
        decode_kernel_launch<C>(sel, s, t, MultiQuery{}, cache.data, &map, grid, plan.threads, plan.smem_bytes, stream, pdl);
        pdl = true;
      });
    }
  });
  if (plan.parts > 1)
    launch_decode_merge(a, p.blocks.batch, f.head_dim, kSub * plan.warps_per_head, plan.balance_slots, mq, stream,
                        sq.merge_rows(plan));
  sq.scatter(plan, stream);
}

}  // namespace tq::cuda
