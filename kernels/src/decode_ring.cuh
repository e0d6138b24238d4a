// The quantized decode's load pipeline (decode_kernel.cuh): a ring of `stages` stages in shared
// memory, each holding, per warp, the 32 tokens × (heads per CTA) slots that warp reads next.
//
// Stage s of CTA tile j: warps_per_head sub-tiles of 32 tokens, each two 16-token "pieces"
// (halves) of the heads' slot rows. The TMA engine fills them (cp.async.bulk, one instruction
// per contiguous run: a 16-token page slice of all the CTA's heads in the vLLM layout; 16
// per-token runs where the CTA holds some of the kv heads or the rows are padded
// (ring_row_bytes); the whole rows, one copy per half, where its heads' slots are not 16-byte runs
// (DecodeArgs::ring_heads); three plane runs in the plane layout; one tensor-map box per half where
// KernelTraits::kTensorMap) and each copy completes on the stage's "full" mbarrier. Every
// thread arrives on the stage's "empty" mbarrier when it has read it; the refills take turns
// among the first n_prod warps (warp (it − 1) % n_prod in iteration it), each with the
// block-table entries it loaded at its previous turn, so no warp waits on an L2 round trip for
// a table entry on the ring's critical path and no one warp carries every refill (four warps
// taking turns against one: k3v4_nc −2.4% at 32/8, 32K). Every slot is read from HBM once per
// query group. 16-token halves past the range end are not copied (their page may not exist);
// rows past it inside a copied half are read but masked by the consumer.
#pragma once

#include <cstdint>

#include "decode_cfg.cuh"
#include "tq/cuda/decode.h"
#include "tq/cuda/device.h"

namespace tq::cuda {

namespace {

// Where this warp's rows live in a 16-token half (byte offsets from the half's
// base): key indices, value codes, norm and value scale/zero of token u are at
// base + u · stride.
struct RowMap {
  int key, code, norm, scz, kst, cst, mst;
};
template <class C, bool P>
__device__ __forceinline__ RowMap row_map(int hl, int hpc) {
  constexpr int SLOT = QCfg<C>::kSlot, IB = C::kIdxBytes, VB = C::kValueCodeBytes;
  RowMap m;
  if constexpr (P) {  // [keys: hpc][16][IB] | [codes: hpc][16][VB] | [meta: hpc][16][6] (tq/cuda/paged.h)
    m.key = hl * 16 * IB;
    m.code = hpc * 16 * IB + hl * 16 * VB;
    m.norm = hpc * 16 * (IB + VB) + hl * 16 * 6;
    m.scz = m.norm + 2;
    m.kst = IB;
    m.cst = VB;
    m.mst = 6;
  } else if constexpr (QCfg<C>::kTurbo) {  // slot: key block {norm, qs[64]}, value block {norm, qs[64]}
    // (turbo4-qjl: {norm, rnorm, qs[48], signs[16]}, the codes 4 bytes on)
    constexpr int kHead = QCfg<C>::Keys::kHeadBytes;
    m.norm = hl * SLOT;
    m.key = m.norm + kHead;
    m.scz = m.norm + C::kKeyBytes;  // the value block's norm (no zero)
    m.code = m.scz + kHead;
    m.kst = m.cst = m.mst = ring_row_bytes<C, P>(hpc);
  } else {  // [16 tokens][hpc heads][slot]
    m.key = hl * SLOT;
    m.code = m.key + C::kKeyBytes;
    m.norm = m.key + (QCfg<C>::kMse ? IB : 0);
    m.scz = m.key + C::kKeyBytes + VB;
    m.kst = m.cst = m.mst = ring_row_bytes<C, P>(hpc);
  }
  return m;
}

// The ring of one CTA: shared addresses of its pieces, its barriers, and the page copies that
// fill a stage. T: the kernel's tables (the tensor map where K::kTensorMap).
template <class K, class T>
struct PageRing {
  using C = typename K::C;
  static constexpr int SLOT = K::kSlot;
  static constexpr int kPlaneRuns = 3;  // plane layout: index, code and meta runs per half

  const DecodeArgs& a;
  const T& t;
  const uint8_t* cache;
  int lane, heads, warps_per_head, hg, tile;
  int row_heads;   // kv heads per row of a piece: heads, or every kv head (DecodeArgs::ring_heads)
  dev::Range rg;
  uint32_t dyn_base;
  int row_pad;     // bytes after each 16-token row of a piece (ring_row_bytes: a pad where the stride
                   // would put the key loads on few banks)
  int half_bytes;  // bytes of a piece: 16 rows of heads' slots + pads
  int copy_bytes;  // of them, the bytes copied from the cache
  uint32_t full0, empty0;  // the mbarriers full[s] at full0 + 8s, empty[s] at empty0 + 8s
  bool contig;     // a half is one copy (the CTA holds every kv head, rows unpadded)
  int runs;        // copies per 16-token half
  int64_t row_bytes;  // a cache token row: every kv head's slot
  const int32_t* btab;  // this sequence's block table
  int bs_mask;
  int hw;          // halves per stage and head (2 · warps_per_head)

  __device__ __forceinline__ PageRing(const DecodeArgs& a_, const T& t_, const uint8_t* cache_, int lane_, int heads_,
                                      int wph_, int hg_, int b, const dev::Range& rg_, uint32_t dyn_base_, uint32_t bars)
      : a(a_), t(t_), cache(cache_), lane(lane_), heads(heads_), warps_per_head(wph_), hg(hg_), tile(kSub * wph_),
        rg(rg_), dyn_base(dyn_base_) {
    row_heads = K::kHeads > 0 || K::kPlanes ? heads : a.ring_heads;  // (compile-time heads: never whole rows)
    row_pad = ring_row_bytes<C, K::kPlanes>(row_heads) - row_heads * SLOT;
    half_bytes = 16 * row_heads * SLOT + 16 * row_pad;
    copy_bytes = 16 * row_heads * SLOT;
    full0 = bars;
    empty0 = full0 + 8u * kMaxStages;
    contig = row_heads == a.n_kv_heads && row_pad == 0;
    runs = K::kPlanes ? kPlaneRuns : contig || K::kTensorMap ? 1 : 16;
    row_bytes = int64_t(a.n_kv_heads) * SLOT;
    btab = a.table + int64_t(b) * a.table_stride;
    bs_mask = a.block_size - 1;
    hw = 2 * warps_per_head;
  }

  // shared address of ring piece k = 2·(s·warps_per_head + w) + h (stage s, sub-tile w, half h)
  __device__ __forceinline__ uint32_t piece(int k) const {
    return k < a.ring_split ? dyn_base + uint32_t(k * half_bytes) : a.ring_hi + uint32_t((k - a.ring_split) * half_bytes);
  }

  // every thread arrives on empty[s] once it has read stage s
  __device__ __forceinline__ void init_barriers(int stages, int nthreads) const {
    for (int s = 0; s < stages; ++s) {
      dev::mbar_init(full0 + 8u * s, 1);
      dev::mbar_init(empty0 + 8u * s, nthreads);
    }
    dev::mbar_fence_init();
  }
  __device__ __forceinline__ void wait_full(int s, uint32_t parity) const { dev::mbar_wait(full0 + 8u * s, parity); }
  __device__ __forceinline__ void wait_empty(int s, uint32_t parity) const { dev::mbar_wait(empty0 + 8u * s, parity); }
  __device__ __forceinline__ void release(int s) const { dev::mbar_arrive(empty0 + 8u * s); }

  // Block-table entries, loaded one turn ahead of the refill that needs them: lane x < lanes holds
  // the page of half x % hw of tile j + x / hw.
  __device__ __forceinline__ int load_pages(int j, int lanes) const {
    const int jj = j + lane / hw, tj = rg.begin + jj * tile + 16 * (lane % hw);
    return lane < lanes && jj < rg.tiles && tj < rg.end ? btab[tj >> a.log2_block_size] : 0;
  }

  // the cache row of token tj of a page (rb: the row stride)
  __device__ __forceinline__ const uint8_t* half_src(int64_t page, int tj, int64_t rb) const {
    return cache + ((page << a.log2_block_size) + (tj & bs_mask)) * rb;
  }

  // The copies of CTA tile j into stage s, completing on full[s] (the whole warp calls it).
  // pages: lane src0 + x holds the page of half x of tile j.
  __device__ __forceinline__ void issue(int j, int s, int pages, int src0) const {
    const int t_first = rg.begin + j * tile;
    const int halves = min(2 * warps_per_head, (rg.end - t_first + 15) >> 4);  // halves with ≥ 1 token in range
    const uint32_t bar = full0 + 8u * uint32_t(s);
    if (lane == 0) dev::mbar_arrive_expect_tx(bar, uint32_t(halves * copy_bytes));
    const uint64_t pol = dev::l2_evict_first();  // the cache is read once per decode (made per refill: one
                                                 // instruction, no register pair held through the main loop)
    __syncwarp();
    if (!K::kTensorMap && !K::kPlanes && contig) {  // one copy per half: lane x copies half x (all the kv heads' rows)
      const int64_t page = __shfl_sync(dev::kFull, pages, (src0 + lane) & 31);
      if (lane < halves) {
        const uint8_t* g = half_src(page, t_first + 16 * lane, K::kHeads > 0 ? int64_t(K::kHeads) * SLOT : row_bytes);
        dev::bulk_copy_g2s(piece(2 * s * warps_per_head + lane), g, uint32_t(copy_bytes), bar, pol);
      }
      return;
    }
    // not unrolled: the compiler unrolls this loop where runs folds to 16, ~800 SASS instructions per
    // kernel in a path taken once per refill, and at 16 heads per CTA the allocation then spills
#pragma unroll 1
    for (int c0 = 0; c0 < halves * runs; c0 += 32) {
      const int c = c0 + lane;
      const int hx = min(c / runs, halves - 1), k = c - hx * runs;  // half (sub-tile hx/2, half hx%2), run k
      const int64_t page = __shfl_sync(dev::kFull, pages, src0 + hx);
      if (c >= halves * runs) continue;
      const int tj = t_first + 16 * hx;
      const uint8_t* g = half_src(page, tj, row_bytes);
      const uint32_t dst = piece(2 * s * warps_per_head + hx);
      if constexpr (K::kTensorMap) {  // box (this CTA's heads' bytes / 8, the half's 16 token rows)
        dev::tensor_copy_g2s_2d(dst, &t.map, hg * (K::kHeads * SLOT / 8), int(page << a.log2_block_size) + (tj & bs_mask),
                                bar, pol);
      } else if constexpr (K::kPlanes) {  // plane runs of heads h0 … h0+heads−1 (k: indices, codes, meta)
        constexpr int IB = C::kIdxBytes, VB = C::kValueCodeBytes;
        const int h0 = hg * heads, nkv = a.n_kv_heads;
        const int goff = k == 0 ? h0 * 16 * IB : k == 1 ? 16 * nkv * IB + h0 * 16 * VB : 16 * nkv * (IB + VB) + h0 * 96;
        const int soff = k == 0 ? 0 : k == 1 ? heads * 16 * IB : heads * 16 * (IB + VB);
        const int len = k == 0 ? heads * 16 * IB : k == 1 ? heads * 16 * VB : heads * 96;
        dev::bulk_copy_g2s(dst + soff, g + goff, uint32_t(len), bar, pol);
      } else {  // token k's run of this CTA's heads (to a padded row, or heads < n_kv_heads)
        dev::bulk_copy_g2s(dst + k * (heads * SLOT + row_pad), g + k * row_bytes + hg * heads * SLOT, uint32_t(heads * SLOT),
                           bar, pol);
      }
    }
  }
};

}  // namespace

}  // namespace tq::cuda
