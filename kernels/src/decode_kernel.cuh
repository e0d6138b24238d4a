// Paged decode over TurboQuant caches (mse keys + u values; fp8 keys + u values; turbo2/3/4
// blocks for keys and values — one block of 128 per head at d ≤ 128, two at d = 256: scores and
// the value sum in each block's rotated domain, keys and values through the pair LUT, the
// inverse rotation once per part at the write-out).
//
// Per CTA (work item: a chunk of one sequence's tokens, dev::work_item; a group of `heads` kv
// heads): heads × warps_per_head warps; warp (h, w) owns head h of 32-token sub-tile w of every
// ring stage and keeps its own softmax state (one "part" of the log-sum-exp merge). (8 < G ≤ 16
// query heads per kv head: a second heads × warps_per_head warps may compute columns 8 … G − 1
// from the same stages: QuerySlicing::both. Multi-query kernels with two N-tiles per warp,
// KernelTraits::kNTiles: 8 warps, one per kv head, each computing 16 query columns from every key
// and value fragment it decodes.)
//
// The pipeline, per CTA:
//   prologue  : block-table entries and query loads (decode_query.cuh), the ring's first stages
//               (decode_ring.cuh), the key LUT (decode_keys.cuh), the query fragments.
//   main loop : per 32-token sub-tile of a stage: key_scores (decode_keys.cuh) → the online
//               softmax and the P' fragments (below; decode_softmax.cuh) → accumulate_values
//               (decode_values.cuh); then the stage is released and a rotating warp refills it.
//   epilogue  : write_parts (decode_epilogue.cuh).
// A sub-tile with all 32 tokens valid runs a copy of the body without masks. Launch bounds: 16
// warps × 128 registers (wide LUT), else 8 warps, 2 CTAs per SM (d = 256: 1).
//
// What depends on the key and value codecs is in their KeyCodec and ValueCodec (decode_key_codecs.cuh,
// decode_value_codecs.cuh; QCfg::Keys, QCfg::Values), which the stages call.
// Every compile-time choice of an instantiation is in its KernelTraits (decode_cfg.cuh). This
// header holds the kernel and the choice of its instantiation (pick_kernel); it is included only
// by the per-format translation units decode_<format>.cu (generated from TQ_GPU_CODECS by
// kernels/CMakeLists.txt and python/setup.py), each of which instantiates
// decode_kernel_occupancy / decode_kernel_launch for its format (TQ_DECODE_INSTANTIATE). The
// planner, the launchers and the merge are in decode.cu.
#pragma once

#include <algorithm>
#include <cmath>
#include <type_traits>

#include <cuda_fp8.h>

#include "bitexact.cuh"
#include "decode_cfg.cuh"
#include "decode_epilogue.cuh"
#include "decode_keys.cuh"
#include "decode_query.cuh"
#include "decode_ring.cuh"
#include "decode_softmax.cuh"
#include "decode_values.cuh"
#include "decode_weights.cuh"
#include "tq/cuda/decode.h"
#include "tq/cuda/device.h"

// TQ_DECODE_TRACE (a diagnostic build, experiments/run_kernels.sh trace; never in the library's own builds): thread 0
// of each stage-1 CTA prints the %globaltimer (ns) at its entry, once the LUT is built, once its first stage has
// landed, after its main loop and at its exit, for experiments/trace_summary.py.
#ifdef TQ_DECODE_TRACE
#include <cstdio>
#define TQ_TRACE_AT(i) \
  if (tid == 0) asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(trace_ns[i]))
#else
#define TQ_TRACE_AT(i)
#endif

namespace tq::cuda {

namespace {

// The body of decode_kernel and decode_kernel_tm (K::kTensorMap), inlined into each. K: the
// instantiation's KernelTraits; T: its tables.
template <class K, class T>
__device__ __forceinline__ void decode_body(const DecodeArgs& a, const T& t, const uint8_t* __restrict__ cache) {
  using C = typename K::C;
  using Q = typename K::Q;
  constexpr int D = K::D;
  constexpr bool kPacked = K::kPacked, kValuePairs = K::kValuePairs;
  constexpr int kHeads = K::kHeads, kSlices = K::kSlices, kQSets = K::kQSets, kNT = K::kNTiles;
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ __align__(16) uint32_t lut_static[Q::kLut && !Q::kWide ? Q::kLutEntries * Q::kLutCopies : 2];
  // wide: the LUT sits 64 KB below ring_hi (at kLutAddr, or kLutAddr2 when the ring needs the room: RingLayout)
  uint32_t* lut = Q::kWide ? reinterpret_cast<uint32_t*>(smem + (a.ring_hi - kLutBytesWide - dev::smem_u32(smem))) : lut_static;
  __shared__ __align__(8) uint2 slut[Q::kSignLutEntries];  // sign nibble → ±1 halves (sign_frag)
  __shared__ __align__(8) uint64_t bars[2 * kMaxStages];  // full[s], empty[s]
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nthreads = blockDim.x, nwarps = nthreads >> 5;
  const int heads = kHeads > 0 ? kHeads : a.heads_per_cta, warps_per_head = kHeads > 0 ? K::kWarpsPerHead : a.warps_per_head;
#ifdef TQ_DECODE_TRACE
  unsigned long long trace_ns[5] = {};
#endif
  TQ_TRACE_AT(0);
  // the warp's head, sub-tile and first query column (kSlices = 2: warps heads·warps_per_head … compute columns 8 …)
  const int hl = warp % heads, ws = kSlices == 1 ? warp / heads : warp / heads % warps_per_head;
  const int g0 = kSlices == 1 ? 0 : 8 * (warp / (heads * warps_per_head));
  // the warp's columns (read from the parameters at each use where kSlices = 1: a copy kept in a
  // register moved ptxas's schedules)
  auto group = [&] { return kSlices == 1 ? a.group : min(8, a.group - g0); };
  // N-tile n's columns 8n … (kNT = 1: group())
  auto tile_group = [&](int n) { return kNT == 1 ? group() : min(8, group() - 8 * n); };
  // K::kCausal: the first column of this CTA's chunk of the launch's columns (ColumnChunks: chunk blockIdx.z of
  // a.group columns each; read where used, so that nothing is kept across the main loop)
  auto chunk_c0 = [&] { return K::kCausal ? int(blockIdx.z) * a.group : 0; };
  const int item = blockIdx.x, hg = blockIdx.y;
  const int tile = kSub * warps_per_head;
  // every warp: the same
  dev::QueryCut qcut{};  // (causal: the sequences with queries in this launch)
  if constexpr (K::kCausal) qcut = t.mq.cut(t.mq.col0 + chunk_c0());
  const dev::WorkItem wi = t.balance > 0
                               ? dev::work_item_balanced(a.seq_lens, a.batch, a.items, tile, item, t.balance, qcut)
                               : dev::work_item(a.seq_lens, a.batch, a.items, tile, item, qcut);
  // A launch that follows one of the decode's own kernels (the query gather, the previous column or
  // query-slice launch) is their programmatic dependent (decode_kernel_launch's pdl): its CTAs start
  // while that kernel drains and wait here before the first read of anything it wrote (the staged
  // queries, at query_prefetch); what is read before (sequence lengths, block table) is the caller's.
  // A CTA that leaves early waits too, so that this grid completes only after that kernel: the merge,
  // which waits for the last launch, then sees every launch's parts. Not launched so, the wait returns
  // at once.
  auto wait_prior = [] { asm volatile("griddepcontrol.wait;" ::: "memory"); };
  bool empty = wi.b < 0;  // an unused item (the lengths fit in fewer)
  if constexpr (K::kCausal) {  // every column of this launch past sequence wi.b's queries (q_start): nothing to compute
    empty = empty ||
            (t.mq.q_start && (t.mq.col0 + chunk_c0()) / t.mq.group >= dev::query_count(t.mq.q_start, wi.b, t.mq.q_len));
  }
  if (empty) {
    wait_prior();
    return;
  }
  const int b = wi.b;
  __shared__ int s_row;  // the parts' item row (wi.row), read back at the write-out
  if (tid == 0) s_row = wi.row;
  const dev::Range rg = wi.r;
  const int kvh = hg * heads + hl;
  const int r = lane >> 2, p = lane & 3;
  const int S = a.stages;
  // kCausal: positions < cut[n][c] are visible to the lane's column c of N-tile n (packed: heads
  // 2(p & 1) + c, else 2p + c of the tile's columns), positions < cut_lo to every column of the warp
  [[maybe_unused]] int cut[kNT][2] = {{0, 0}}, cut_lo = 0;
  if constexpr (K::kCausal) {
    const MultiQuery& mq = t.mq;
    const int end = a.seq_lens[b] - dev::query_count(mq.q_start, b, mq.q_len) + 1, c0 = mq.col0 + chunk_c0() + g0;
#pragma unroll
    for (int n = 0; n < kNT; ++n)
#pragma unroll
      for (int c = 0; c < 2; ++c) cut[n][c] = end + (c0 + 8 * n + (kPacked ? 2 * (p & 1) : 2 * p) + c) / mq.group;
    cut_lo = end + c0 / mq.group;
  }

  const uint32_t dyn_base = dev::smem_u32(smem);
  const PageRing<K, T> ring(a, t, cache, lane, heads, warps_per_head, hg, b, rg, dyn_base, dev::smem_u32(bars));
  const uint32_t qaddr = a.qbuf_addr ? a.qbuf_addr : dyn_base + uint32_t(S * a.stage_bytes);
  float* qbuf = reinterpret_cast<float*>(smem + (qaddr - dyn_base)) + warp * D;
  if constexpr (Q::kWide) {  // the layout the host planned must hold for this base
    uint32_t dyn_size;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn_size));
    if (dyn_base < kBaseMin || dyn_base > kBaseMax || qaddr + uint32_t(nwarps * D * 4) > dyn_base + dyn_size) __trap();
  }
  if constexpr (K::kTensorMap) {  // the boxes' shared destinations: 128-byte aligned (halves are 128 · slot bytes)
    if ((dyn_base | a.ring_hi) & 127u) __trap();
  }

  // ---- prologue ----
  // The refills rotate over warps 0 … n_prod − 1 (one per scheduler). The first fill_tiles tiles'
  // block-table entries are loaded at once (lane x: tile x / hw), before the barriers are set up;
  // each refilling warp takes its first turn's pages from them or loads them before the LUT barrier.
  const int hw = ring.hw, fill_tiles = 32 / hw;
  const int n_prod = nwarps >= 4 ? 4 : 1;
  const int fill_pages = warp < n_prod ? ring.load_pages(0, fill_tiles * hw) : 0;  // tiles 0 … fill_tiles − 1
  int next_pages = 0;
  auto q_row = [&](int g) {
    const __half* q = a.q + int64_t(b) * a.q_sb + int64_t(dev::query_head<K::kSliced>(a, kvh, g0 + g)) * a.q_sh;
    if constexpr (K::kCausal) q += int64_t(chunk_c0()) * a.q_sh;
    return q;
  };
  wait_prior();  // the staged queries are read from here on
  typename K::QRaw qraw;
  query_prefetch<K>(a, q_row, group, lane, ws, qraw);

  // Centroids → shared (indexing the parameter array at run time would copy it to the
  // local-memory stack), set up with the barriers, before warp 0 waits for its pages.
  __shared__ float s_cen[16];
  if (tid == 0) {
    ring.init_barriers(S, nthreads);
    if constexpr (Q::kLut) {
#pragma unroll
      for (int i = 0; i < 16; ++i) s_cen[i] = t.lut_scale * t.centroids[i];
    }
  }
  __syncthreads();
  if (warp == 0) {
    for (int j = 0; j < S && j < rg.tiles; ++j)
      ring.issue(j, j, j < fill_tiles ? fill_pages : ring.load_pages(j, hw), j < fill_tiles ? j * hw : 0);
  }
  // the LUTs and the rotated query fragments (overlap the first loads)
  build_key_lut<C>(lut, s_cen, tid, nthreads, nwarps);
  build_sign_lut<C>(slut, tid, nthreads);
  typename K::QFrags qf[kNT];  // per N-tile
#pragma unroll
  for (int n = 0; n < kNT; ++n)
#pragma unroll
    for (int j = 0; j < kQSets; ++j)
#pragma unroll
      for (int ks = 0; ks < Q::kKSteps; ++ks) qf[n][j][ks][0] = qf[n][j][ks][1] = 0u;
  [[maybe_unused]] typename K::QjlFrags q2f = {};  // turbo4-qjl: the fragments of q″ = R q′, as qf
#pragma unroll
  for (int n = 0; n < kNT; ++n) {
    auto tile_row = [&](int g) { return q_row(8 * n + g); };
    auto tile_cols = [&] { return tile_group(n); };
    // (a launch's last tile may have no columns: its rows would lie past the launch's, even past q)
    if (n == 0 || tile_group(n) > 0) query_frags<K>(t, tile_row, tile_cols, qraw, n, lane, r, p, qbuf, qf[n], q2f);
  }

  // score → log2-domain logit (LogitConsts)
  float qjl_k = 0.f;
  if constexpr (Q::Keys::kSignTerm) qjl_k = a.scale_log2 * t.qjl_scale;
  const LogitConsts lc{Q::kLut && !t.nc ? a.scale_log2 / t.lut_scale : a.scale_log2, 1e-16f * t.lut_scale * t.lut_scale,
                       qjl_k, 4 * r + (r >> 1)};
  // wide: the LUT's 64 KB-aligned address | 4·lane (the PRMT/LOP3 operand giving the entry address); else the
  // lane's copy
  const uint32_t lut_lane = (Q::kWide ? a.ring_hi - kLutBytesWide : dev::smem_u32(lut)) + 4u * uint32_t(lane);
  [[maybe_unused]] const uint32_t slut_lane = dev::smem_u32(slut) + 8u * uint32_t(lane);
  // (whole token rows in the ring, ring.row_heads > heads: this CTA's heads are heads hg · heads … of a row)
  const RowMap rm = row_map<C, K::kPlanes>(ring.row_heads == heads ? hl : hg * heads + hl, ring.row_heads);
  // token of row r / of k-slot 2p (KernelTraits::kEvenOddRows, kSpreadRows)
  const int tr = K::kEvenOddRows ? 2 * r : K::kSpreadRows ? (r >> 1) + 4 * (r & 1) : r;
  const int tv = K::kEvenOddRows ? 4 * p : K::kSpreadRows ? p : 2 * p;
  // kKeyRuns: the byte offset (0 or 2) of this lane's key runs in their first aligned word — the same
  // in every piece (16-row pieces of even rows, 128-byte aligned) and in rows r and r + d8 (d8 · kst ≡ 0 mod 4)
  [[maybe_unused]] const uint32_t run_off = uint32_t(rm.key + tr * rm.kst + 12 * p) & 2u;
  // kValueWords, kValuePairs: this warp's codes start 2 bytes past a word (v_s); lane row 7 then reads
  // unit 0 as its last (v_wrap)
  [[maybe_unused]] const int v_s = K::kValueWords || kValuePairs ? (rm.code >> 1) & 1 : 0;
  [[maybe_unused]] const bool v_wrap = v_s && r == 7;
  [[maybe_unused]] const int key_mod = rm.key & 3;  // kKeyOffBodies: where the warp's key slots start in a word
  // kValuePairs: this lane's value word offsets (slots p, p + 4) in a half's row set 0, the P' sources (the
  // lanes holding those rows' p of query heads 2(r/2 & 1), +1 in half 0) and the PRMT that puts head
  // r & 3's P' in half r >> 2 of the B register (the other half 0)
  [[maybe_unused]] int v_off[2] = {0, 0}, p_src[2] = {0, 0};
  [[maybe_unused]] uint32_t p_sel = 0u;
  if constexpr (kValuePairs) {
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const int row = K::kValueRowStep == 2 ? 2 * p + u : p + 4 * u;
      v_off[u] = rm.code + 2 * v_s + 4 * r + row * rm.cst;
      p_src[u] = 4 * row + ((r >> 1) & 1);
    }
    p_sel = r < 4 ? (r & 1 ? 0x4432u : 0x4410u) : (r & 1 ? 0x3244u : 0x1044u);
  }
  if (warp < n_prod) {  // the pages of this warp's first refill (iteration warp + 1: tile warp + S)
    const int j = warp + S;
    next_pages = j < fill_tiles ? __shfl_sync(dev::kFull, fill_pages, (j * hw + lane) & 31) : ring.load_pages(j, hw);
  }
  __syncthreads();  // LUT complete
  TQ_TRACE_AT(1);

  // ---- main loop ----
  typename K::Acc acc[kNT];  // per N-tile
#pragma unroll
  for (int n = 0; n < kNT; ++n)
#pragma unroll
    for (int i = 0; i < K::kAccTiles; ++i) acc[n][i][0] = acc[n][i][1] = acc[n][i][2] = acc[n][i][3] = 0.f;
  [[maybe_unused]] typename K::QjlAcc acc2 = {};  // turbo4-qjl: Σ P″ · (±1), rotated by R⁻¹ at the end
  Softmax32 sm[kNT];
  float zs[kNT][2] = {{0.f, 0.f}};  // Σ p·zero (per-lane partials)
  int s = 0, sp = S - 1;            // stage of this iteration, of the previous one
  uint32_t ph = 0u, php = 1u;        // their use parities
  for (int it = 0; it < rg.tiles; ++it) {
    if (it >= 1 && warp == ((it - 1) & (n_prod - 1)) && it - 1 + S < rg.tiles) {  // refill the stage read in iteration it − 1
      const int pages = next_pages;
      // (tiles < fill_tiles are in fill_pages already; reloading them here keeps the producer path short)
      next_pages = ring.load_pages(it + n_prod - 1 + S, hw);
      ring.wait_empty(sp, php);
      ring.issue(it - 1 + S, sp, pages, 0);
    }
    ring.wait_full(s, ph);
#ifdef TQ_DECODE_TRACE
    if (it == 0) TQ_TRACE_AT(2);
#endif
    const int t0 = rg.begin + it * tile + kSub * ws;
    const int nvalid = min(rg.end - t0, kSub);
    // the sub-tile's work; kFullTile: all 32 tokens valid (every sub-tile but a range's
    // last), so no masks (instantiated twice, selected per sub-tile, warp-uniform)
    auto tile_body = [&](auto full_tile, auto key_off) {
      constexpr bool kFullTile = decltype(full_tile)::value;
      // KO ≥ 0: this body is for warps whose key slots start at KO (mod 4) bytes into a word (kKeyOffBodies)
      constexpr int KO = decltype(key_off)::value;
      [[maybe_unused]] const uint32_t ro = KO < 0 ? run_off : uint32_t(KO);
      [[maybe_unused]] const int vs =
          KO < 0 || !(K::kValueWords || kValuePairs) ? v_s : ((KO + C::kKeyBytes) >> 1) & 1;  // rm.code >> 1 & 1
      [[maybe_unused]] const bool vw = KO < 0 ? v_wrap : vs && r == 7;
      const uint8_t* hb[2] = {smem + (ring.piece(2 * (s * warps_per_head + ws)) - dyn_base),
                              smem + (ring.piece(2 * (s * warps_per_head + ws) + 1) - dyn_base)};  // the two halves

      // ---- scores of both halves ----
      typename K::Scores sa[kNT] = {};
      [[maybe_unused]] typename K::QjlScores sq = {};
      [[maybe_unused]] float qa[2][4] = {}, qb[2][4] = {};  // Σc² (mse keys)
      key_scores<K, KO>(hb, rm, tr, p, ro, lut_lane, slut_lane, qf, q2f, sa, sq, qa, qb);

      // ---- softmax and the P' fragments ----
      [[maybe_unused]] typename K::PFrags pb[kNT];  // P' fragments (per N-tile)
      [[maybe_unused]] typename K::PairPFrags pbv;  // kValuePairs: the B of k-step j
      [[maybe_unused]] typename K::QjlPFrags pq;    // turbo4-qjl: P″ fragments
      // two N-tiles: the per-token logit and value factors once for both (logit_factors, value_factors)
      [[maybe_unused]] LogitFactors lf;
      [[maybe_unused]] ValueFactors vf;
      if constexpr (!kPacked && kNT > 1) {
        lf = logit_factors<K>(t, lc, hb, rm, tr, r, qa, qb);
        vf = value_factors<K, kFullTile>(hb, rm, tr, nvalid);
      }
      float alpha[kNT][2];
#pragma unroll
      for (int n = 0; n < kNT; ++n) alpha[n][0] = alpha[n][1] = 1.f;
      [[maybe_unused]] int ccut[kNT][2];  // kCausal: rows < ccut[n][c] visible to column c of N-tile n
#pragma unroll
      for (int n = 0; n < kNT; ++n) ccut[n][0] = cut[n][0] - t0, ccut[n][1] = cut[n][1] - t0;
      // The value codes are exact fp16 subnormals (no bias), so the tensor cores accumulate
      // straight into acc and the rescale runs only when a running max moved (α ≠ 1
      // somewhere in the warp: rare after the first tiles). Called where the softmax took its
      // slow path (warp-uniform).
      auto rescale = [&](const float (&al)[kNT][2]) {
        bool moved = false;
#pragma unroll
        for (int n = 0; n < kNT; ++n) moved = moved || al[n][0] != 1.f || al[n][1] != 1.f;
        if (__any_sync(dev::kFull, moved)) {
#pragma unroll
          for (int n = 0; n < kNT; ++n) rescale_acc(acc[n], al[n]);
          if constexpr (Q::Values::kSignTerm) rescale_acc(acc2, al[0]);  // (one N-tile: mq_column_tiles)
        }
      };
      bool fast;
      if constexpr (kPacked) {
        static_assert(kNT == 1, "packed kernels: one N-tile");
        fast = packed_weights<K, kFullTile>(t, lc, hb, rm, tr, r, p, nvalid, ccut[0], p_src, p_sel, sa[0], sq, qa, qb, sm[0],
                                            zs[0], alpha[0], pb[0], pq, pbv);
      } else {
        fast = column_weights<K, kFullTile, (kNT > 1)>(t, lc, hb, rm, tr, r, p, nvalid, ccut, p_src, p_sel, sa, sq, qa, qb,
                                                       sm, zs, alpha, pb, pq, pbv, lf, vf, rescale);
      }
      // (kNT > 1: column_weights rescaled in its slow path, so no branch separates the P' fragments from the values)
      if (kNT == 1 && !fast) rescale(alpha);
      // ---- values: acc = acc·α + Σ_halves A·P' (each decoded fragment into every N-tile) ----
      accumulate_values<K>(hb, rm, tv, r, vs, vw, v_off, lut_lane, slut_lane, pb, pq, pbv, acc, acc2);
    };
    using RunTime = std::integral_constant<int, -1>;
    if (nvalid == kSub && (!K::kCausal || t0 + kSub <= cut_lo)) {
      if constexpr (K::kKeyOffBodies) {
        if (key_mod == 0)
          tile_body(std::true_type{}, std::integral_constant<int, 0>{});
        else if (key_mod == 2)
          tile_body(std::true_type{}, std::integral_constant<int, 2>{});
        else  // never (slots are even); without this branch ptxas scheduled both bodies differently
          tile_body(std::false_type{}, RunTime{});
      } else {
        tile_body(std::true_type{}, RunTime{});
      }
    } else if (nvalid > 0) {
      tile_body(std::false_type{}, RunTime{});
    }
    // Every lane releases its own reads of the stage (the empty barrier counts all the CTA's
    // threads; lane 0 alone after __syncwarp left compute-sanitizer racecheck hazards between the
    // refill's bulk copy and the other lanes' reads).
    ring.release(s);
    sp = s;
    php = ph;
    if (++s == S) {
      s = 0;
      ph ^= 1u;
    }
  }

  // The merge kernel (a programmatic dependent launch) may start launching now: its CTAs
  // wait in griddepcontrol.wait until this grid has finished and its writes are visible,
  // so its launch overlaps the write-out instead of following the last CTA's exit.
  // (Signalled at the start of the main loop, the waiting merge CTAs would take SM slots from it.)
  TQ_TRACE_AT(3);
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");

  // K::kCtaMerge: the warps' parts to a staging area over the idle ring (DecodeArgs::merge says where), then one
  // part per item (merge_warp_parts); else each warp's to the workspace or the output
  float *stage0 = nullptr, *stage = nullptr;  // warp 0's staging area, this warp's
  if constexpr (K::kCtaMerge) {
    constexpr int kStage = merge_stage_floats<typename K::C>();
    const uint32_t merge_at = a.merge == kMergeAtLut2 ? kLutAddr2 : dyn_base;
    uint32_t dyn_size;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn_size));
    if (a.merge == 0 || merge_at + uint32_t(nwarps * kStage * 4) > dyn_base + dyn_size) __trap();  // (merge_site's)
    __syncthreads();  // every warp is done reading the ring
    stage0 = reinterpret_cast<float*>(smem + (merge_at - dyn_base));
    stage = stage0 + warp * kStage;
  }
  // K::kCausal: the outputs and parts of this CTA's chunk of columns (through a pointer, so that the other kernels
  // keep their code: a copy of the arguments in every kernel moved ptxas's schedules of 44 of 4bit_nc's 81)
  const DecodeArgs* ao = &a;
  [[maybe_unused]] DecodeArgs chunk;
  if constexpr (K::kCausal) {
    chunk = column_slice(a, C::kD, chunk_c0(), a.group);
    ao = &chunk;
  }
#pragma unroll
  for (int n = 0; n < kNT; ++n) {
    auto tile_cols = [&] { return tile_group(n); };
    write_parts<K>(*ao, t, acc[n], acc2, sm[n], zs[n], qbuf, s_row, tile_cols, lane, r, p, v_s, warps_per_head, ws, kvh,
                   g0 + 8 * n, stage);
  }
  if constexpr (K::kCtaMerge) {
    __syncthreads();
    merge_warp_parts<K>(a, stage0, s_row, heads, warps_per_head, hg);
  }
#ifdef TQ_DECODE_TRACE
  TQ_TRACE_AT(4);
  if (tid == 0) {
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    printf("TQT %u %u %u %u %d %d %llu %llu %llu %llu %llu\n", blockIdx.x, blockIdx.y, gridDim.x, sm, b, rg.tiles,
           trace_ns[0], trace_ns[1], trace_ns[2], trace_ns[3], trace_ns[4]);
  }
#endif
}

// CTAs per SM the kernel's registers are sized for (__launch_bounds__)
template <class K>
constexpr int decode_min_ctas() {
  using C = typename K::C;
  return QCfg<C>::kWide || QCfg<C>::kQjl || C::kD >= 256 || K::kNTiles > 1 ? 1 : 2;
}
template <class K>
__global__ void __launch_bounds__(32 * K::kCtaWarps, decode_min_ctas<K>())
    decode_kernel(DecodeArgs a, TablesFor<typename K::C> t, const uint8_t* __restrict__ cache) {
  static_assert(!K::kTensorMap && !K::kCausal, "decode_kernel_tm / decode_kernel_causal");
  decode_body<K>(a, t, cache);
}
// The multi-query variant (K::kCausal): the tables carry MultiQuery.
template <class K>
__global__ void __launch_bounds__(32 * K::kCtaWarps, decode_min_ctas<K>())
    decode_kernel_causal(DecodeArgs a, CausalTables<TablesFor<typename K::C>> t, const uint8_t* __restrict__ cache) {
  static_assert(K::kCausal && !K::kTensorMap, "decode_kernel / decode_kernel_tm");
  decode_body<K>(a, t, cache);
}
// The tensor-map variant: the map is read by address, so the parameter is __grid_constant__ (a
// separate kernel: on every kernel's tables it moved ptxas's schedules).
template <class K>
__global__ void __launch_bounds__(32 * K::kCtaWarps, decode_min_ctas<K>())
    decode_kernel_tm(DecodeArgs a, const __grid_constant__ DecodeTablesTm t, const uint8_t* __restrict__ cache) {
  static_assert(K::kTensorMap, "decode_kernel");
  decode_body<K>(a, t, cache);
}

// The kernel for a launch (sel) of slicing S: the plane layout only for the formats
// planes_support accepts (checked by decode_can_implement before we get here), with run-time
// heads; packed hi/lo query columns for G ≤ 4 (never for two slices); for the wide-LUT formats,
// heads per CTA known at compile time (HS) where the plan has one of them (their plans use all
// 16 warps, so warps per head too), else at run time: with run-time heads the G > 4 kernels
// spill and every row offset is computed (at 8 kv heads 4–12% slower).
template <class C, QuerySlicing S, int... HS, class Fn>
void pick_kernel(const DecodeKernelSel& sel, Fn&& fn) {
  static_assert(!QCfg<C>::kWide || tm_rows<C>(8),
                "decode_heads_per_cta gives the wide-LUT formats CTAs of 8 heads above 16 kv heads: their rows must take boxes");
  auto packed_or_not = [&](auto planes, auto heads, auto tensor_map) {
    constexpr bool P = decltype(planes)::value, TM = decltype(tensor_map)::value;
    constexpr int H = decltype(heads)::value;
    if constexpr (TM) {
      using Packed = KernelTraits<C, P, true, H, S, true>;
      using Unpacked = KernelTraits<C, P, false, H, S, true>;
      return sel.group <= 4 ? fn(decode_kernel_tm<Packed>) : fn(decode_kernel_tm<Unpacked>);
    } else if constexpr (S == QuerySlicing::both) {  // group = G > 8
      return fn(decode_kernel<KernelTraits<C, P, false, H, S, false>>);
    } else {
      if constexpr (!P && S == QuerySlicing::whole && (H == 0 || H == 2 || H == 4)) {
        if (sel.cta_merge) {
          using PackedM = KernelTraits<C, false, true, H, S, false, false, 1, true>;
          using UnpackedM = KernelTraits<C, false, false, H, S, false, false, 1, true>;
          return sel.group <= 4 ? fn(decode_kernel<PackedM>) : fn(decode_kernel<UnpackedM>);
        }
      }
      if (sel.cta_merge) throw_error("paged_decode: no CTA-merge kernel for this plan (internal)");
      using Packed = KernelTraits<C, P, true, H, S, false>;
      using Unpacked = KernelTraits<C, P, false, H, S, false>;
      return sel.group <= 4 ? fn(decode_kernel<Packed>) : fn(decode_kernel<Unpacked>);
    }
  };
  using No = std::false_type;
  using RunTimeHeads = std::integral_constant<int, 0>;
  if constexpr (QCfg<C>::kMse && C::kValueBits == 4 && S != QuerySlicing::both) {
    if (sel.planes) return packed_or_not(std::true_type{}, RunTimeHeads{}, No{});
  }
  if (sel.planes) throw_error("paged_decode: no plane-layout kernel for this format (internal)");
  if constexpr (QCfg<C>::kWide) {
    bool done = false;
    auto try_heads = [&](auto h) {
      constexpr int H = decltype(h)::value, slices = S == QuerySlicing::both ? 2 : 1;
      if (done || sel.heads_per_cta != H || sel.warps_per_head != QCfg<C>::kCtaWarps / (slices * H)) return;
      constexpr bool kTmVariant = S == QuerySlicing::whole && H == 8 && tm_rows<C>(H);  // (tm_copies' kernels)
      if (sel.tensor_map && !kTmVariant) return;                                         // refused below
      done = true;
      if constexpr (kTmVariant)
        if (sel.tensor_map) return packed_or_not(No{}, h, std::true_type{});
      packed_or_not(No{}, h, No{});
    };
    (try_heads(std::integral_constant<int, HS>{}), ...);
    if (done) return;
  }
  if (sel.tensor_map) throw_error("paged_decode: no tensor-map kernel for these heads per CTA (internal)");
  packed_or_not(No{}, RunTimeHeads{}, No{});
}
// The multi-query kernels (sel.causal): sliced columns (a launch's columns are a slice of the
// virtual heads), unpacked, one or both slices per CTA; 8 heads per CTA at compile time for the
// wide-LUT formats (the 8-kv-head models' CTAs), else at run time; no plane layout, no tensor map.
// The two-tile kernels (KernelTraits::kNTiles = 2, 8 < columns ≤ 16 per kv head): 8 warps, one per
// kv head of the CTA, 16 columns per warp; the causal one for multi-query launches.
template <class C, class Fn>
void pick_two_tile_kernel(const DecodeKernelSel& sel, Fn&& fn) {
  if constexpr (mq_column_tiles<C>() == 2) {
    if (sel.column_tiles == 2 && sel.heads_per_cta == 8 && sel.warps_per_head == 1 &&
        sel.slicing == QuerySlicing::one && !sel.planes && !sel.tensor_map) {
      if (sel.causal) return fn(decode_kernel_causal<KernelTraits<C, false, false, 8, QuerySlicing::one, false, true, 2>>);
      return fn(decode_kernel<KernelTraits<C, false, false, 8, QuerySlicing::one, false, false, 2>>);
    }
  }
  throw_error("paged_decode: no two-tile kernel for this format or plan (internal)");
}

template <class C, class Fn>
void pick_causal_kernel(const DecodeKernelSel& sel, Fn&& fn) {
  if (sel.planes || sel.tensor_map) throw_error("paged_decode: no multi-query kernel for this layout (internal)");
  auto with_heads = [&](auto slicing, auto heads) {
    constexpr QuerySlicing S = decltype(slicing)::value;
    constexpr int H = decltype(heads)::value;
    return fn(decode_kernel_causal<KernelTraits<C, false, false, H, S, false, true>>);
  };
  using Both = std::integral_constant<QuerySlicing, QuerySlicing::both>;
  using One = std::integral_constant<QuerySlicing, QuerySlicing::one>;
  constexpr int kSlicesBoth = 2;
  if constexpr (QCfg<C>::kWide) {
    if (sel.heads_per_cta == 8) {
      if (sel.slicing == QuerySlicing::both && sel.warps_per_head == QCfg<C>::kCtaWarps / (kSlicesBoth * 8))
        return with_heads(Both{}, std::integral_constant<int, 8>{});
      if (sel.slicing != QuerySlicing::both && sel.warps_per_head == QCfg<C>::kCtaWarps / 8)
        return with_heads(One{}, std::integral_constant<int, 8>{});
    }
  }
  if (sel.slicing == QuerySlicing::both) return with_heads(Both{}, std::integral_constant<int, 0>{});
  with_heads(One{}, std::integral_constant<int, 0>{});
}

template <class C, class Fn>
void with_kernel(const DecodeKernelSel& sel, Fn&& fn) {
  if (sel.column_tiles != 1) return pick_two_tile_kernel<C>(sel, fn);
  if (sel.causal) return pick_causal_kernel<C>(sel, fn);
  if (sel.slicing == QuerySlicing::both) return pick_kernel<C, QuerySlicing::both, 8>(sel, fn);
  if (sel.slicing == QuerySlicing::one) return pick_kernel<C, QuerySlicing::one, 8>(sel, fn);
  pick_kernel<C, QuerySlicing::whole, 8, 4, 16, 2>(sel, fn);
}

}  // namespace

template <class C>
int decode_kernel_occupancy(const DecodeKernelSel& sel, int threads, int smem_bytes) {
  int occ = 0;
  with_kernel<C>(sel, [&](auto kern) { occ = memo_occupancy(reinterpret_cast<const void*>(kern), threads, smem_bytes); });
  return occ;
}

// The tables parameter a kernel of type K takes (K: its function pointer type).
template <class K>
struct KernelTables;
template <class T>
struct KernelTables<void (*)(DecodeArgs, T, const uint8_t*)> {
  using type = T;
};

// map: the cache's tensor map (sel.tensor_map; else unused).
template <class C>
void decode_kernel_launch(const DecodeKernelSel& sel, const DecodeArgs& a, const DecodeTablesQjl& t,
                          const MultiQuery& mq, const uint8_t* cache, const CUtensorMap* map, dim3 grid, int threads,
                          int smem_bytes, cudaStream_t stream, bool pdl) {
  with_kernel<C>(sel, [&](auto kern) {
    TQ_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
    using Tables = typename KernelTables<decltype(kern)>::type;
    Tables tt{};
    if constexpr (std::is_same_v<Tables, CausalTables<TablesFor<C>>>) {
      static_cast<TablesFor<C>&>(tt) = static_cast<const TablesFor<C>&>(t);
      tt.mq = mq;
    } else if constexpr (std::is_same_v<Tables, DecodeTablesTm>) {
      static_cast<DecodeTables&>(tt) = t;
      tt.map = *map;
    } else {
      tt = static_cast<const TablesFor<C>&>(t);
    }
    launch_programmatic(kern, grid, dim3(unsigned(threads)), size_t(smem_bytes), stream, pdl, a, tt, cache);
  });
}

}  // namespace tq::cuda

// Explicit instantiations for one format at head dims 64, 128 and 256 (the cases of
// dispatch_head_dim); the build generates one decode_<format>.cu per decode row of TQ_GPU_CODECS.
#define TQ_DECODE_INSTANTIATE_D(KK, KB, VK, VB, D)                                                          \
  template int tq::cuda::decode_kernel_occupancy<tq::cuda::FormatCfg<KK, KB, VK, VB, D>>(                  \
      const tq::cuda::DecodeKernelSel&, int, int);                                                          \
  template void tq::cuda::decode_kernel_launch<tq::cuda::FormatCfg<KK, KB, VK, VB, D>>(                    \
      const tq::cuda::DecodeKernelSel&, const tq::cuda::DecodeArgs&, const tq::cuda::DecodeTablesQjl&,     \
      const tq::cuda::MultiQuery&, const uint8_t*, const CUtensorMap*, dim3, int, int, cudaStream_t, bool);
#define TQ_DECODE_INSTANTIATE(KK, KB, VK, VB)   \
  TQ_DECODE_INSTANTIATE_D(KK, KB, VK, VB, 64)  \
  TQ_DECODE_INSTANTIATE_D(KK, KB, VK, VB, 128) \
  TQ_DECODE_INSTANTIATE_D(KK, KB, VK, VB, 256)
