// Paged decode over TurboQuant caches (mse keys + u values; fp8 keys + u values).
//
// Per CTA: a cp.async ring of `stages` stages, each [WPH sub-tiles][16 tokens]
// [HPC heads][slot] copied verbatim from the paged cache (16-byte chunks; the
// tail of a range is zero-filled), so every slot is read from HBM once per
// query group. The warps of sub-tile w copy sub-tile w (one block-table read
// per warp and stage; chunk offsets precomputed: the first version computed
// them per chunk with 64-bit divisions and spent ~680 of ~1400 SASS
// instructions per warp-iteration there, 28% of copy bandwidth at 32K).
// Per warp and 16-token sub-tile (d = 128, 4-bit keys, G = 4):
//   keys   : per pair of k-steps a lane loads the 4 index bytes it needs (two
//            2-byte loads: slots are only 2-byte aligned) and maps each byte —
//            two 4-bit indices — through a 256-entry LUT of half2(α·c[lo],
//            α·c[hi]): one PRMT (byte → zero-extended), one LEA and one 4-byte
//            load from 32 copies (one per lane: conflict-free) straight into the
//            MMA operand register. α (KernelFormat::lut_scale) makes α·c nearly
//            exact in fp16 (7.4e-5 instead of 4e-4 relative). The nc norm
//            Σ(α·c)² of each token comes from the tensor cores (4 m16n8k8 MMAs
//            per k-step whose B operand is the tile's own key registers; the
//            diagonal is the sum of squares of the same fp16 centroids the scores
//            use), so the correction 1/sqrt(Σ(αc)²) also divides α out.
//            (Run 6 and before: 8-byte {half2, fp32 Σc²} entries, 16 copies;
//            each lookup cost SHF + LOP3 + IADD + LDS.64 + a MOV + an FADD.)
//   scores : S^T = C · Q'^T, Q' = FWHT(q)/√d split into fp16 hi + lo (2 MMAs;
//            fp16 q' alone simulates to 1.5e-3). The head-dim order inside a
//            k-step is permuted so each lane's index bytes are contiguous; Q' is
//            built with the same permutation once in the prologue.
//   values : O^T += V^T · P'^T. 4-bit codes: A is the code nibble masked in
//            place (one LOP3 per register), i.e. the fp16 subnormal c·2^-24
//            (low nibble, output rows r) or c·2^-20 (high nibble, rows r+8):
//            exact and unbiased; the exact 2^24 / 2^20 scalings are applied at
//            the write-out. (Run 6 and before: A = 1 + c/16 = 0x3C00 | c << 6,
//            three instructions per register and a Σ P' correction.)
//            3-bit codes keep A = 1 + c/16 (Σ code·P' = 16·(acc − Σ P')).
//            B = P' = p·scale (movmatrix-transposed), hi + lo: codes are all
//            ≥ 0 with the zero point added outside, so fp16 rounding of
//            p·scale alone would cost ~8e-4 relative RMS on N(0,1) values.
//            Σ p·zero (and Σ P' for 3-bit) run on CUDA cores.
//   softmax: online, exp2 domain (ex2.approx.ftz; rsqrt.approx.ftz for the
//            norm); each value tile is computed from zero and folded into the
//            accumulators with one FFMA (see fold_tile).
// __launch_bounds__(256, 2) for d ≤ 128 (128 registers; without the min-blocks
// hint the run-7 code took 186 and 1 CTA per SM); d = 256 keeps 1 CTA/SM.
#include <algorithm>
#include <cmath>

#include <cuda_fp8.h>

#include "decode_common.cuh"
#include "formats.cuh"
#include "tq/cuda/decode.h"
#include "tq/cuda/device.h"

namespace tq::cuda {

namespace {

constexpr int kMaxThreads = 256;

struct DecodeTables {
  float centroids[16];
  float rot_scale;
  float lut_scale;  // α
  int nc;
};

template <class C>
struct QCfg {
  static constexpr int D = C::kD;
  static constexpr int kSlot = (C::kKeyBytes + C::kValueBytes + 1) & ~1;
  static constexpr int kKSteps = D / 16;
  static constexpr int kPairSteps = D / 32;
  static constexpr bool kMse = C::kKey == KeyKind::mse;
  static constexpr int kLutEntries = kMse ? 1 << (2 * C::kKeyBits) : 0;
  static constexpr int kLutCopies = 32;                       // one per lane: conflict-free
  static constexpr int kLutBytes = kLutEntries * kLutCopies * 4;  // half2 pair × 32 copies (static smem)
  static constexpr int kChunksPerThread = (kSlot + 31) / 32;
  static constexpr int kVChunk = D * C::kValueBits / 64;  // value-code bytes of D/8 dims (one lane row)
};

__device__ __forceinline__ uint32_t ld_u16(const uint8_t* p) { return *reinterpret_cast<const uint16_t*>(p); }
__device__ __forceinline__ float ld_f16(const uint8_t* p) {
  return __half2float(__ushort_as_half(*reinterpret_cast<const uint16_t*>(p)));
}

// The 8 key codes of pair-step ps for quad lane p (dims 32ps + 8p … +7) as one word:
// 4-bit: two 16-bit words (w[0]: codes 0, 1; w[1]: codes 2, 3); 3-bit: 24 bits in w[0];
// fp8: two words (w[0], w[1]).
template <class C, bool P>
__device__ __forceinline__ void key_words(const uint8_t* slot, int ps, int p, uint32_t (&w)[2], int kx = 0) {
  if constexpr (P && C::kKeyBits == 4) {
    // plane layout: 16-byte aligned index rows, so the 4 bytes are one 4-byte load
    // (kx: the lane's chunk swizzle, see PlaneSwz)
    w[0] = w[1] = *reinterpret_cast<const uint32_t*>(slot + ((16 * ps) ^ kx) + 4 * p);
  } else if constexpr (C::kKey == KeyKind::fp8) {
    const uint8_t* q = slot + 32 * ps + 8 * p;  // 4-byte aligned: fp8+u4 slots are 1.5·d + 4 bytes
    w[0] = *reinterpret_cast<const uint32_t*>(q);
    w[1] = *reinterpret_cast<const uint32_t*>(q + 4);
  } else if constexpr (C::kKeyBits == 4) {
    const uint8_t* q = slot + 16 * ps + 4 * p;
    w[0] = ld_u16(q);
    w[1] = ld_u16(q + 2);
  } else {
    const int odd = p & 1;
    const uint8_t* q = slot + 12 * ps + 3 * p - odd;
    w[0] = __byte_perm(ld_u16(q), ld_u16(q + 2), 0x5410) >> (8 * odd);
  }
}

// A fragment registers of k-step (2ps + h2) for one token: slots {2p, 2p+1} (lo)
// and {2p+8, 2p+9} (hi). mse: one 4-byte LUT load per pair code (32 copies, one per
// lane: conflict-free), straight into the MMA operand register (the earlier 8-byte
// {half2, Σc²} entries cost a MOV and an FADD per lookup; Σc² now comes from the
// tensor cores, see the main loop). 4-bit: the pair code is byte f of the word, so
// an entry address is one PRMT (byte → zero-extended) and one LEA.
template <class C, bool P>
__device__ __forceinline__ void key_frag(const uint32_t (&w)[2], int h2, uint32_t lut_lane,
                                         uint32_t& lo, uint32_t& hi) {
  if constexpr (C::kKey == KeyKind::fp8) {
    const uint32_t word = w[h2];
    const __half2_raw a = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(word & 0xffffu), __NV_E4M3);
    const __half2_raw b = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(word >> 16), __NV_E4M3);
    lo = uint32_t(a.x) | (uint32_t(a.y) << 16);
    hi = uint32_t(b.x) | (uint32_t(b.y) << 16);
  } else if constexpr (C::kKeyBits == 4) {
    // entry address = lut_lane + code·128 (PRMT + LEA)
    // plane layout: one word holds both k-steps' bytes (bytes 2·h2, 2·h2 + 1)
    const uint32_t sel = P ? 0x4440u + 2u * uint32_t(h2) : 0x4440u;
    lo = dev::lds_u32(lut_lane + (__byte_perm(w[P ? 0 : h2], 0u, sel) << 7));
    hi = dev::lds_u32(lut_lane + (__byte_perm(w[P ? 0 : h2], 0u, sel + 1u) << 7));
  } else {
    constexpr int PB = 2 * C::kKeyBits;  // bits of a pair code
    constexpr uint32_t M = (1u << PB) - 1u;
    lo = dev::lds_u32(lut_lane + (((w[0] >> (PB * 2 * h2)) & M) << 7));
    hi = dev::lds_u32(lut_lane + (((w[0] >> (PB * (2 * h2 + 1))) & M) << 7));
  }
}

// acc = acc·α + A·(P'hi + P'lo) for one m-tile. The tile product starts from zero
// and is folded in with FFMA (round-to-nearest) instead of accumulating in the
// MMA across the whole range: the tensor cores' fp32 accumulation is not RNE,
// and over thousands of tokens its bias, amplified ~3–5× by the 1 + c/16 bias
// cancellation, reached 1.03e-3 relative error (3bit_nc, 4097 tokens, one split;
// device run 3). The FFMA also applies the online-softmax rescale.
__device__ __forceinline__ void fold_tile(float (&acc)[4], const uint32_t (&af)[4], uint32_t bh0, uint32_t bh1,
                                          uint32_t bl0, uint32_t bl1, const float (&alpha)[2]) {
  float t[4] = {0.f, 0.f, 0.f, 0.f};
  dev::mma_16816(t, af, bh0, bh1);
  dev::mma_16816(t, af, bl0, bl1);
  acc[0] = fmaf(acc[0], alpha[0], t[0]);
  acc[1] = fmaf(acc[1], alpha[1], t[1]);
  acc[2] = fmaf(acc[2], alpha[0], t[2]);
  acc[3] = fmaf(acc[3], alpha[1], t[3]);
}

// 0x3C00 | c << 6 is the half 1 + c/16 (c < 16): codes in bits [0,4) and [16,20) of x.
__device__ __forceinline__ uint32_t biased_half2(uint32_t x) { return (x << 6) | 0x3c003c00u; }

// Plane layout (P, tq/cuda/paged.h): a 16-token sub-tile is one contiguous
// 16-token group [key: H][16][IB] | [codes: H][16][VB] | [meta: H][16][6] at the
// same address as the vLLM layout's 16 slots; the stage holds this CTA's hpc heads
// in the same order: [key: hpc][16][IB] | [codes: hpc][16][VB] | [meta: hpc][16][6]
// (same bytes as the slot-major stage). Chunk ck of the sub-tile: goff = offset
// from the group base (heads h0 … h0+hpc−1), rb = row bytes of its plane, hoff =
// offset within its head's 16-row run (tail zero-fill: valid = nvalid·rb − hoff).
// Optional shared-memory swizzle of the plane stage (d = 128): a 64-byte row
// stride puts rows r, r+2, r+4, r+6 in the same banks, so the plane loads are
// 4-way bank conflicted (run 8a: 0.5565 ms vs 0.5527 ms for the vLLM layout). Within each
// 128-byte line L (8 chunks) of a head's plane the chunk column is XORed with
// swz_k(L) = L (key indices: lane (r, p) reads chunk 4r + ps, word p) or with
// swz_v(L) = 4·(L&1) + ((L>>1)&3) (value codes: lane (r, p) reads chunk
// 4·tok + r/2, tok ∈ {2p, 2p+1, 2p+8, 2p+9}, word 2·(r&1) + w2).
// Measured (run 8b): conflict-free keys / 2-way values, but +32 SASS instructions
// per warp-tile for the lane-dependent addresses (XOR on the k-step offset, four
// value bases), and the decode got slower (32K: 0.586 ms vs 0.557 ms unswizzled):
// the loop is issue-bound, not shared-memory-bound. Off by default
// (-DTQ_PLANES_SWIZZLE=1 turns it on; the tests pass either way).
#ifndef TQ_PLANES_SWIZZLE
#define TQ_PLANES_SWIZZLE 0
#endif
template <class C>
struct PlaneSwz {
  static constexpr bool kKey = TQ_PLANES_SWIZZLE && C::kKeyBits == 4 && C::kIdxBytes == 64;
  static constexpr bool kVal = TQ_PLANES_SWIZZLE && C::kValueCodeBytes == 64;
};
__device__ __forceinline__ int swz_v(int L) { return ((L & 1) << 2) | ((L >> 1) & 3); }

template <class C>
struct PlaneChunk {
  int goff, rb, hoff, sc;  // sc: chunk index in the stage (swizzled)
};
template <class C>
__device__ __forceinline__ PlaneChunk<C> plane_chunk(int ck, int hpc, int h0, int nkv) {
  constexpr int bs = 16;
  constexpr int IB = C::kIdxBytes, VB = C::kValueCodeBytes;
  if (ck < hpc * IB) {
    const int h = ck / IB, j = ck - h * IB;
    const int js = PlaneSwz<C>::kKey ? (j & ~7) | ((j & 7) ^ ((j >> 3) & 7)) : j;
    return {(h0 + h) * bs * IB + 16 * j, IB, 16 * j, h * IB + js};
  }
  ck -= hpc * IB;
  if (ck < hpc * VB) {
    const int h = ck / VB, j = ck - h * VB;
    const int js = PlaneSwz<C>::kVal ? (j & ~7) | ((j & 7) ^ swz_v(j >> 3)) : j;
    return {bs * nkv * IB + (h0 + h) * bs * VB + 16 * j, VB, 16 * j, hpc * IB + h * VB + js};
  }
  ck -= hpc * VB;
  const int h = ck / 6, j = ck - h * 6;
  return {bs * nkv * (IB + VB) + (h0 + h) * bs * 6 + 16 * j, 6, 16 * j, hpc * (IB + VB) + h * 6 + j};
}

template <class C, bool P>
__global__ void __launch_bounds__(kMaxThreads, C::kD >= 256 ? 1 : 2) decode_kernel(DecodeArgs a, DecodeTables t,
                                                             const uint8_t* __restrict__ cache) {
  using Q = QCfg<C>;
  static_assert(!P || (Q::kMse && C::kValueBits == 4 && Q::kSlot == C::kIdxBytes + C::kValueCodeBytes + 6),
                "plane layout: mse keys, 4-bit values, no pad byte");
  constexpr int D = Q::D, SLOT = Q::kSlot, KS = Q::kKSteps, CPT = Q::kChunksPerThread;
  extern __shared__ __align__(16) uint8_t smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nthreads = blockDim.x;
  const int hpc = a.hpc, wph = a.wph;
  const int hl = warp % hpc, ws = warp / hpc;
  const int split = blockIdx.x, hg = blockIdx.y, b = blockIdx.z;
  const int kvh = hg * hpc + hl;
  const int r = lane >> 2, p = lane & 3;
  const int tile = 16 * wph;
  const dev::Range rg = dev::split_range(a.seq_lens[b], split, a.num_splits, tile);

  uint8_t* ring = smem;
  float* qbuf = reinterpret_cast<float*>(smem + a.stages * a.stage_bytes) + warp * D;
  __shared__ __align__(16) uint32_t lut[Q::kMse ? Q::kLutEntries * Q::kLutCopies : 2];

  // ---- producer: the warps of sub-tile ws copy sub-tile ws (hpc·SLOT chunks) ----
  const bool contig = hpc == a.n_kv_heads;
  const int sub_bytes = 16 * hpc * SLOT;
  const int gt = hl * 32 + lane;  // thread within the sub-tile's warps
  int soff[CPT], goff[CPT];      // chunk offsets in the sub-tile (smem) and from its global base
#pragma unroll
  for (int i = 0; i < CPT; ++i) {
    const int ck = gt + i * 32 * hpc;
    soff[i] = ck < hpc * SLOT ? 16 * ck : -1;
    if constexpr (P) {
      const PlaneChunk<C> pc = plane_chunk<C>(ck, hpc, hg * hpc, a.n_kv_heads);
      goff[i] = pc.goff;
      if (soff[i] >= 0 && (PlaneSwz<C>::kKey || PlaneSwz<C>::kVal)) soff[i] = 16 * pc.sc;  // else sc == ck
    } else {
      const int tok = ck / (SLOT / 2);  // segmented mode: hpc = 8, a token's segment is SLOT/2 chunks
      goff[i] = contig ? 16 * ck : tok * a.n_kv_heads * SLOT + 16 * (ck - tok * (SLOT / 2));
    }
  }
  const int32_t* btab = a.table + int64_t(b) * a.table_stride;
  const int bs_mask = a.block_size - 1;
  const int64_t row_bytes = int64_t(a.n_kv_heads) * SLOT;
  const int group_off = contig ? 0 : hg * hpc * SLOT;
  const uint32_t ring_u32 = dev::smem_u32(ring) + ws * sub_bytes;
  auto issue = [&](int tidx, int stage) {
    const int tj = rg.begin + tidx * tile + 16 * ws;
    const int nv = min(max(rg.end - tj, 0), 16);
    const int nvb = nv * hpc * SLOT;  // valid bytes (token-major)
    const uint8_t* gbase = cache;
    if (nvb > 0) {  // (plane layout: the 16-token group's base; the head offset is in goff)
      const int64_t page = btab[tj >> a.log2_block_size];
      gbase = cache + ((page << a.log2_block_size) + (tj & bs_mask)) * row_bytes + (P ? 0 : group_off);
    }
    const uint32_t sub = ring_u32 + stage * a.stage_bytes;
    if (nvb == sub_bytes) {  // all 16 tokens valid (warp-uniform): plain copies
#pragma unroll
      for (int i = 0; i < CPT; ++i)
        if (soff[i] >= 0) dev::cp_async16_full(sub + soff[i], gbase + goff[i]);
    } else {  // range tail: zero-fill what lies beyond it
#pragma unroll
      for (int i = 0; i < CPT; ++i) {
        if (soff[i] < 0) continue;
        int bytes;
        if constexpr (P) {
          const PlaneChunk<C> pc = plane_chunk<C>(gt + i * 32 * hpc, hpc, hg * hpc, a.n_kv_heads);
          bytes = min(max(nv * pc.rb - pc.hoff, 0), 16);
        } else {
          bytes = min(max(nvb - soff[i], 0), 16);
        }
        dev::cp_async16(sub + soff[i], bytes ? gbase + goff[i] : cache, bytes);
      }
    }
  };

  int wr = 0;  // next stage to fill
  for (int s = 0; s < a.stages - 1; ++s) {
    if (s < rg.tiles) issue(s, wr);
    dev::cp_async_commit();
    wr = wr + 1 == a.stages ? 0 : wr + 1;
  }

  // ---- prologue: LUT and the rotated query fragments (overlaps the first loads) ----
  if constexpr (Q::kMse) {
    // Centroids → shared first (indexing the parameter array at run time would
    // copy it to the local-memory stack).
    __shared__ float s_cen[16];
    if (tid == 0) {
#pragma unroll
      for (int i = 0; i < 16; ++i) s_cen[i] = t.lut_scale * t.centroids[i];
    }
    __syncthreads();
    constexpr int KB = C::kKeyBits;
    for (int i = tid; i < Q::kLutEntries * Q::kLutCopies; i += nthreads) {
      const int e = i >> 5;
      lut[i] = dev::pack_half2(s_cen[e & ((1 << KB) - 1)], s_cen[e >> KB]);
    }
  }
  uint32_t qh[KS][2], ql[KS][2];
#pragma unroll
  for (int ks = 0; ks < KS; ++ks) qh[ks][0] = qh[ks][1] = ql[ks][0] = ql[ks][1] = 0u;
  for (int g = 0; g < a.group; ++g) {
    const __half* qrow = a.q + int64_t(b) * a.q_sb + int64_t(kvh * a.group + g) * a.q_sh;
    for (int j = lane; j < D; j += 32) qbuf[j] = __half2float(qrow[j]);
    __syncwarp();
    float sc = 1.f;
    if constexpr (Q::kMse) {
      for (int h = 1; h < D; h <<= 1) {  // FWHT: any order is fine here (not bit-exact code)
        for (int i = lane; i < D / 2; i += 32) {
          const int j = (i / h) * 2 * h + i % h;
          const float x = qbuf[j], y = qbuf[j + h];
          qbuf[j] = x + y;
          qbuf[j + h] = x - y;
        }
        __syncwarp();
      }
      sc = t.rot_scale;
    }
    if (r == g) {
#pragma unroll
      for (int ks = 0; ks < KS; ++ks) {
        const int base = 32 * (ks >> 1) + 8 * p + 4 * (ks & 1);
#pragma unroll
        for (int u = 0; u < 2; ++u) {  // u = 0: slots 2p, 2p+1; u = 1: slots 2p+8, 2p+9
          const float v0 = qbuf[base + 2 * u] * sc, v1 = qbuf[base + 2 * u + 1] * sc;
          const __half h0 = __float2half_rn(v0), h1 = __float2half_rn(v1);
          qh[ks][u] = dev::pack_half2_raw(h0, h1);
          ql[ks][u] = dev::pack_half2(v0 - __half2float(h0), v1 - __half2float(h1));
        }
      }
    }
    __syncwarp();
  }
  // score → log2-domain logit: · norm16 · (nc ? 1/sqrt(Σ(αc)²) : 1/α) · attn_scale · log2 e
  const float raw_scale = Q::kMse && !t.nc ? a.scale_log2 / t.lut_scale : a.scale_log2;
  const uint32_t lut_lane = dev::smem_u32(lut) + 4u * uint32_t(lane);
  const int diag_src = 4 * r + (r >> 1);  // lane holding the Σc² diagonal entries of tokens r, r+8

  // ---- main loop ----
  float acc[D / 16][4];
#pragma unroll
  for (int i = 0; i < D / 16; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
  dev::SoftmaxT<true> sm;
  float zs[2] = {0.f, 0.f}, ps[2] = {0.f, 0.f};  // Σ p·zero, Σ p·scale (per-lane partials)
  int rd = 0;
  for (int it = 0; it < rg.tiles; ++it) {
    dev::cp_async_wait_dyn(a.stages - 2);
    __syncthreads();  // stage `rd` visible to all; stage `wr` (read last iteration) free
    if (it + a.stages - 1 < rg.tiles) issue(it + a.stages - 1, wr);
    dev::cp_async_commit();
    wr = wr + 1 == a.stages ? 0 : wr + 1;
    const uint8_t* sub = ring + rd * a.stage_bytes + ws * sub_bytes;
    rd = rd + 1 == a.stages ? 0 : rd + 1;
    const int t0 = rg.begin + it * tile + 16 * ws;
    const int nvalid = min(rg.end - t0, 16);
    if (nvalid <= 0) continue;  // warp-uniform

    // plane layout: this warp's head in each plane (see PlaneChunk)
    constexpr int IB = C::kIdxBytes, VB = C::kValueCodeBytes;
    const uint8_t* kpl = sub + hl * 16 * IB;
    const uint8_t* vpl = sub + hpc * 16 * IB + hl * 16 * VB;
    const uint8_t* mpl = sub + hpc * 16 * (IB + VB) + hl * 16 * 6;
    const uint8_t* k0 = P ? kpl + r * IB : sub + (r * hpc + hl) * SLOT;
    // swizzled keys (PlaneSwz): token r+8's chunks sit in row (r+8)^1, columns ps ^ r/2
    const uint8_t* k1 = P ? kpl + (PlaneSwz<C>::kKey ? (r + 8) ^ 1 : r + 8) * IB : sub + ((r + 8) * hpc + hl) * SLOT;
    const int kx = P && PlaneSwz<C>::kKey ? 16 * (r >> 1) : 0;
    // Σ(αc)² per token (nc) on the tensor cores: m16n8k8 with A = {af[0], af[1]}
    // (tokens r, r+8 × the k-step's first 8 slots) and B = af[0] (tokens 0–7 as
    // columns) or af[1] (tokens 8–15); likewise af[2], af[3] for the last 8 slots.
    // The diagonal of A·B is each token's sum of squares of the fp16 centroids the
    // scores use (products exact in fp32); no register moves are needed.
    // Score accumulators: one chain (mse: the Σc² chains run beside it; two chains
    // spill at 128 registers), two for fp8 keys (q' hi / lo).
    constexpr int NCH = Q::kMse ? 1 : 2;
    float sa[NCH][4] = {}, qa[4] = {}, qb[4] = {};
#pragma unroll
    for (int pst = 0; pst < Q::kPairSteps; ++pst) {
      uint32_t w0[2], w1[2];
      key_words<C, P>(k0, pst, p, w0, kx);
      key_words<C, P>(k1, pst, p, w1, kx);
#pragma unroll
      for (int h2 = 0; h2 < 2; ++h2) {
        const int ks = 2 * pst + h2;
        uint32_t af[4];
        key_frag<C, P>(w0, h2, lut_lane, af[0], af[2]);
        key_frag<C, P>(w1, h2, lut_lane, af[1], af[3]);
        dev::mma_16816(sa[0], af, qh[ks][0], qh[ks][1]);
        dev::mma_16816(sa[NCH - 1], af, ql[ks][0], ql[ks][1]);
        if constexpr (Q::kMse) {
          dev::mma_1688(qa, af[0], af[1], af[0]);
          dev::mma_1688(qb, af[0], af[1], af[1]);
          dev::mma_1688(qa, af[2], af[3], af[2]);
          dev::mma_1688(qb, af[2], af[3], af[3]);
        }
      }
    }
    float s[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) s[i] = NCH == 1 ? sa[0][i] : sa[0][i] + sa[NCH - 1][i];
    float fr = raw_scale, fr8 = raw_scale;
    if constexpr (Q::kMse) {
      fr *= ld_f16(P ? mpl + 6 * r : k0 + C::kIdxBytes);
      fr8 *= ld_f16(P ? mpl + 6 * (r + 8) : k1 + C::kIdxBytes);
      if (t.nc) {  // token r: qa[r&1] of lane (r, r/2); token r+8: qb[2 + (r&1)] there
        const float sq0 = __shfl_sync(dev::kFull, (r & 1) ? qa[1] : qa[0], diag_src);
        const float sq1 = __shfl_sync(dev::kFull, (r & 1) ? qb[3] : qb[2], diag_src);
        fr *= dev::rsqrt_fast(sq0 + 1e-16f * t.lut_scale * t.lut_scale);
        fr8 *= dev::rsqrt_fast(sq1 + 1e-16f * t.lut_scale * t.lut_scale);
      }
    }
    float x[4] = {s[0] * fr, s[1] * fr, s[2] * fr8, s[3] * fr8};
    if (r >= nvalid) x[0] = x[1] = -INFINITY;
    if (r + 8 >= nvalid) x[2] = x[3] = -INFINITY;
    float alpha[2];
    sm.update(x, alpha);
    // value scale/zero of tokens r and r+8 (zero-filled beyond the range, and p = 0 there)
    const uint8_t* vf0 = P ? mpl + 6 * r + 2 : k0 + C::kKeyBytes + C::kValueCodeBytes;
    const uint8_t* vf1 = P ? mpl + 6 * (r + 8) + 2 : k1 + C::kKeyBytes + C::kValueCodeBytes;
    const float sc0 = ld_f16(vf0), z0 = ld_f16(vf0 + 2), sc1 = ld_f16(vf1), z1 = ld_f16(vf1 + 2);
    const float pv[4] = {x[0] * sc0, x[1] * sc0, x[2] * sc1, x[3] * sc1};
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      zs[c] = zs[c] * alpha[c] + x[c] * z0 + x[c + 2] * z1;
      if constexpr (C::kValueBits != 4) ps[c] = ps[c] * alpha[c] + pv[c] + pv[c + 2];
    }
    const __half2 ph01 = __floats2half2_rn(pv[0], pv[1]), ph23 = __floats2half2_rn(pv[2], pv[3]);
    const float2 pf01 = __half22float2(ph01), pf23 = __half22float2(ph23);
    const uint32_t bh0 = dev::movmatrix_trans(*reinterpret_cast<const uint32_t*>(&ph01));
    const uint32_t bh1 = dev::movmatrix_trans(*reinterpret_cast<const uint32_t*>(&ph23));
    const uint32_t bl0 = dev::movmatrix_trans(dev::pack_half2(pv[0] - pf01.x, pv[1] - pf01.y));
    const uint32_t bl1 = dev::movmatrix_trans(dev::pack_half2(pv[2] - pf23.x, pv[3] - pf23.y));

    // value codes of tokens 2p, 2p+1 (k-slots 2p..) and 2p+8, 2p+9 (k-slots 2p+8..), lane row r
    const int vstride = P ? VB : hpc * SLOT;  // next token's codes
    const uint8_t* va = P ? vpl + 2 * p * VB + r * Q::kVChunk : sub + ((2 * p) * hpc + hl) * SLOT + C::kKeyBytes + r * Q::kVChunk;
    const uint8_t* vb = va + vstride;
    const uint8_t* vc = va + 8 * vstride;
    const uint8_t* vd = vc + vstride;
    if constexpr (P && PlaneSwz<C>::kVal) {  // swizzled codes: chunk 8L + (col ^ swz_v(L)), L = tok / 2
      const int sv0 = swz_v(p), sv8 = swz_v(p + 4), rh = r >> 1, rl = 8 * (r & 1);
      va = vpl + 16 * (8 * p + (rh ^ sv0)) + rl;
      vb = vpl + 16 * (8 * p + ((4 + rh) ^ sv0)) + rl;
      vc = vpl + 16 * (8 * (p + 4) + (rh ^ sv8)) + rl;
      vd = vpl + 16 * (8 * (p + 4) + ((4 + rh) ^ sv8)) + rl;
    }
    if constexpr (P) {
      // plane layout: each token's code bytes are 4-byte aligned: one 4-byte load per
      // token and pair of u16 words (loading a whole 8-byte chunk up front spilled)
#pragma unroll
      for (int w2 = 0; w2 < Q::kVChunk / 4; ++w2) {
        const uint32_t xa = *reinterpret_cast<const uint32_t*>(va + 4 * w2);
        const uint32_t xb = *reinterpret_cast<const uint32_t*>(vb + 4 * w2);
        const uint32_t xc = *reinterpret_cast<const uint32_t*>(vc + 4 * w2);
        const uint32_t xd = *reinterpret_cast<const uint32_t*>(vd + 4 * w2);
#pragma unroll
        for (int hw = 0; hw < 2; ++hw) {
          const int w = 2 * w2 + hw;
          const uint32_t sel = hw ? 0x7632u : 0x5410u;
          const uint32_t wab = __byte_perm(xa, xb, sel), wcd = __byte_perm(xc, xd, sel);
#pragma unroll
          for (int m = 0; m < 2; ++m) {
            const uint32_t xab = m ? wab >> 8 : wab, xcd = m ? wcd >> 8 : wcd;
            const uint32_t af[4] = {xab & 0x000f000fu, xab & 0x00f000f0u, xcd & 0x000f000fu, xcd & 0x00f000f0u};
            fold_tile(acc[2 * w + m], af, bh0, bh1, bl0, bl1, alpha);
          }
        }
      }
    } else if constexpr (C::kValueBits == 4) {
#pragma unroll
      for (int w = 0; w < Q::kVChunk / 2; ++w) {  // u16 word w: chunk dims 4w … 4w+3 → m-tiles 2w, 2w+1
        const uint32_t wab = __byte_perm(ld_u16(va + 2 * w), ld_u16(vb + 2 * w), 0x5410);
        const uint32_t wcd = __byte_perm(ld_u16(vc + 2 * w), ld_u16(vd + 2 * w), 0x5410);
#pragma unroll
        for (int m = 0; m < 2; ++m) {
          // nibble n = 2m (row r) and 2m+1 (row r+8) of both tokens, masked in place:
          // fp16 subnormals c·2^-24 (row r) and c·2^-20 (row r+8), exact and
          // unbiased, one LOP3 each (the biased 1 + c/16 form took three).
          const uint32_t xab = m ? wab >> 8 : wab, xcd = m ? wcd >> 8 : wcd;
          const uint32_t af[4] = {xab & 0x000f000fu, xab & 0x00f000f0u, xcd & 0x000f000fu, xcd & 0x00f000f0u};
          fold_tile(acc[2 * w + m], af, bh0, bh1, bl0, bl1, alpha);
        }
      }
    } else {
      // 3-bit codes: chunk of 3·d/64 bytes at any byte offset (d = 64 makes it odd).
      constexpr int NB = Q::kVChunk;
      constexpr int NH = NB / 2 + 2;  // u16 words covering NB bytes from the even base
      unsigned __int128 xs[4];
      const uint8_t* vp[4] = {va, vb, vc, vd};
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int odd = int(reinterpret_cast<uintptr_t>(vp[u]) & 1);
        const uint8_t* q = vp[u] - odd;
        unsigned __int128 v = 0;
#pragma unroll
        for (int i = 0; i < NH; ++i) v |= (unsigned __int128)ld_u16(q + 2 * i) << (16 * i);
        xs[u] = v >> (8 * odd);
      }
      auto pair = [&](int u0, int cd) {
        const uint32_t lo = uint32_t(xs[u0] >> (3 * cd)) & 7u, hi = uint32_t(xs[u0 + 1] >> (3 * cd)) & 7u;
        return biased_half2(lo | (hi << 16));
      };
#pragma unroll
      for (int i = 0; i < D / 16; ++i) {
        const uint32_t af[4] = {pair(0, 2 * i), pair(0, 2 * i + 1), pair(2, 2 * i), pair(2, 2 * i + 1)};
        fold_tile(acc[i], af, bh0, bh1, bl0, bl1, alpha);
      }
    }
  }
  dev::cp_async_wait<0>();

  // ---- write this warp's part: O = (16·(acc − Σ P') + Σ p·zero) / Σ p ----
  const int part = split * wph + ws;
#pragma unroll
  for (int c = 0; c < 2; ++c) {
    const float l = dev::sum_over_token_lanes(sm.l[c]);
    const float z = dev::sum_over_token_lanes(zs[c]);
    const float pp = C::kValueBits == 4 ? 0.f : dev::sum_over_token_lanes(ps[c]);
    const int g = 2 * p + c;
    if (g >= a.group) continue;
    const int qh_idx = kvh * a.group + g;
    const float inv = l > 0.f ? 1.f / l : 0.f;
    // 4-bit values: acc rows r hold Σ c·P'·2^-24, rows r+8 Σ c·P'·2^-20 (exact scalings);
    // 3-bit values: Σ (1 + c/16)·P'.
    auto val = [&](float v, bool row8) {
      if constexpr (C::kValueBits == 4) return (v * (row8 ? 1048576.f : 16777216.f) + z) * inv;
      return (16.f * (v - pp) + z) * inv;
    };
    if (a.parts == 1) {
      __half* o = a.out + int64_t(b) * a.o_sb + int64_t(qh_idx) * a.o_sh + r * (D / 8);
#pragma unroll
      for (int i = 0; i < D / 16; ++i)
        *reinterpret_cast<__half2*>(o + 2 * i) = __floats2half2_rn(val(acc[i][c], false), val(acc[i][c + 2], true));
    } else {
      const int64_t row = (int64_t(b) * a.n_q_heads + qh_idx) * a.parts + part;
      float* o = a.o_part + row * D + r * (D / 8);
#pragma unroll
      for (int i = 0; i < D / 16; ++i)
        *reinterpret_cast<float2*>(o + 2 * i) = make_float2(val(acc[i][c], false), val(acc[i][c + 2], true));
      if (r == 0) a.lse_part[row] = l > 0.f ? sm.m[c] + __log2f(l) : -INFINITY;
    }
  }
}

// ---- stage 2 ----
__global__ void merge_kernel(DecodeArgs a, int head_dim) {
  const int b = blockIdx.y, h = blockIdx.x;
  const int64_t row0 = (int64_t(b) * a.n_q_heads + h) * a.parts;
  float mx = -INFINITY;
  for (int i = 0; i < a.parts; ++i) mx = fmaxf(mx, a.lse_part[row0 + i]);
  __half* o = a.out + int64_t(b) * a.o_sb + int64_t(h) * a.o_sh;
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float num = 0.f, den = 0.f;
    if (mx != -INFINITY) {
      for (int i = 0; i < a.parts; ++i) {
        const float lse = a.lse_part[row0 + i];
        if (lse == -INFINITY) continue;  // empty part: its o_part is not meaningful
        const float w = exp2f(lse - mx);
        num += w * a.o_part[(row0 + i) * head_dim + d];
        den += w;
      }
    }
    o[d] = __float2half_rn(den > 0.f ? num / den : 0.f);
  }
}

// Smallest-time split count: time ∝ waves(S) · ceil(len/S), ties → fewer splits
// (each split adds a partial write and merge read).
int auto_splits(int batch_groups, int max_seq_len, int slots, int tile) {
  const int max_tiles = (max_seq_len + tile - 1) / tile;
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

// The kernel for a layout: planes only for the formats planes_support accepts
// (checked by decode_can_implement before we get here).
template <class C, class Fn>
void with_kernel(bool planes, Fn&& fn) {
  if constexpr (QCfg<C>::kMse && C::kValueBits == 4) {
    if (planes) return fn(decode_kernel<C, true>);
  }
  if (planes) throw_error("paged_decode: no plane-layout kernel for this format (internal)");
  fn(decode_kernel<C, false>);
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

void launch_decode_merge(const DecodeArgs& a, int batch, int head_dim, cudaStream_t stream) {
  merge_kernel<<<dim3(unsigned(a.n_q_heads), unsigned(batch)), head_dim / 2, 0, stream>>>(a, head_dim);
  TQ_CUDA_CHECK(cudaGetLastError());
}

// Heads per CTA, warps per head and ring depth shared by both decode planners.
// plan.smem_bytes is the dynamic part (ring + fixed_dyn); static_smem counts toward
// the limits. The quantized kernel streams min(n_kv_heads, 8) heads per CTA with
// 8/heads warps per head; with flexible_heads (FP16 kernel) a shape whose stage
// does not fit twice (d = 256: 128 KB per 8-head stage) falls back to fewer warps
// per head, then to fewer heads per CTA (a divisor of n_kv_heads).
void plan_layout(int n_kv_heads, int token_head_bytes, int fixed_dyn, int static_smem, int smem_optin,
                 DecodePlan& plan, int& stage_bytes, int& stages, bool flexible_heads) {
  constexpr int kSmemPerSm = 228 * 1024, kReserved = 1024;  // H200: 228 KB per SM, 227 KB per block
  const int h0 = n_kv_heads <= 8 ? n_kv_heads : 8;
  stages = 0;
  for (int hpc = h0; hpc >= 1 && !stages; --hpc) {
    if (n_kv_heads % hpc || (hpc != h0 && !flexible_heads)) continue;
    for (int wph = std::max(1, 8 / hpc); wph >= 1 && !stages; wph = flexible_heads ? wph / 2 : 0) {
      const int sb = wph * 16 * hpc * token_head_bytes;
      // Prefer 2 CTAs per SM with ≥ 3 stages (latency hiding across CTAs), else
      // the deepest ring (≥ 3, then 2) one CTA can hold.
      for (int ctas = 2; ctas >= 1 && !stages; --ctas)
        for (int st = 4; st >= 2; --st) {
          if (st == 2 && (ctas == 2 || (flexible_heads && wph > 1))) continue;
          const int bytes = st * sb + fixed_dyn + static_smem;
          if (bytes <= smem_optin && ctas * (bytes + kReserved) <= kSmemPerSm) {
            stages = st;
            plan.heads_per_cta = hpc;
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

void finish_plan(const DecodeParams& p, int head_dim, int sm_count, DecodePlan& plan) {
  const int tile = 16 * plan.warps_per_head;
  const int groups = p.blocks.batch * plan.head_groups;
  plan.num_splits = p.num_splits > 0 ? p.num_splits
                                     : auto_splits(groups, p.max_seq_len, sm_count * plan.ctas_per_sm, tile);
  plan.parts = plan.num_splits * plan.warps_per_head;
  plan.workspace_bytes = 0;
  if (plan.parts > 1) {
    const size_t rows = size_t(p.blocks.batch) * size_t(p.n_q_heads) * size_t(plan.parts);
    plan.workspace_bytes = (rows * size_t(head_dim) * 4 + 255) / 256 * 256 + rows * 4;
  }
}

DecodePlan plan_decode(const KernelFormat& f, const PagedCache& cache, const DecodeParams& p, int sm_count) {
  const std::string why = decode_can_implement(f, cache, p);
  if (!why.empty()) throw_error(why.c_str());
  if (sm_count <= 0) sm_count = decode_device_sms();
  DecodePlan plan;
  dispatch_decode_format(f, [&](auto cfg) {
    using C = decltype(cfg);
    using Q = QCfg<C>;
    int stage_bytes = 0, stages = 0;
    plan_layout(cache.n_kv_heads, Q::kSlot, 8 * Q::D * 4, Q::kLutBytes + 64, decode_device_smem_optin(), plan,
                stage_bytes, stages, false);
    with_kernel<C>(cache.layout == CacheLayout::planes, [&](auto kern) {
      TQ_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, plan.smem_bytes));
      int occ = 0;
      TQ_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kern, plan.threads, plan.smem_bytes));
      plan.ctas_per_sm = occ;
    });
  });
  finish_plan(p, f.head_dim, sm_count, plan);
  return plan;
}

void paged_decode(const KernelFormat& f, const PagedCache& cache, const DecodeParams& p, const DecodePlan& plan,
                  void* workspace, cudaStream_t stream) {
  const std::string why = decode_can_implement(f, cache, p);
  if (!why.empty()) throw_error(why.c_str());
  if (plan.parts > 1 && !workspace) throw_error("paged_decode: the plan needs a workspace (plan.workspace_bytes)");
  if (p.blocks.batch > 65535 || plan.num_splits < 1) throw_error("paged_decode: batch must be ≤ 65535 and the plan valid");
  DecodeArgs a = make_decode_args(p, plan, workspace, f.head_dim, cache.block_size, cache.n_kv_heads);
  DecodeTables t{};
  for (int i = 0; i < 16; ++i) t.centroids[i] = f.centroids[i];
  t.rot_scale = f.rot_scale;
  t.lut_scale = f.lut_scale;
  t.nc = f.norm_correction ? 1 : 0;
  dispatch_decode_format(f, [&](auto cfg) {
    using C = decltype(cfg);
    using Q = QCfg<C>;
    if (Q::kSlot != f.slot_bytes) throw_error("paged_decode: compiled slot size disagrees with the format (internal)");
    a.stage_bytes = plan.warps_per_head * 16 * plan.heads_per_cta * Q::kSlot;
    a.stages = (plan.smem_bytes - 8 * Q::D * 4) / a.stage_bytes;
    if (a.stages < 2 || a.stages > 4) throw_error("paged_decode: plan does not match this format (use plan_decode)");
    const dim3 grid(unsigned(plan.num_splits), unsigned(plan.head_groups), unsigned(p.blocks.batch));
    with_kernel<C>(cache.layout == CacheLayout::planes, [&](auto kern) {
      TQ_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, plan.smem_bytes));
      kern<<<grid, plan.threads, plan.smem_bytes, stream>>>(a, t, cache.data);
      TQ_CUDA_CHECK(cudaGetLastError());
    });
  });
  if (plan.parts > 1) launch_decode_merge(a, p.blocks.batch, f.head_dim, stream);
}

}  // namespace tq::cuda
