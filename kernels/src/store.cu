// Fused store kernels; bytes equal KvFormat::encode_slots.
// - store_quad_kernel (mse or fp8 keys + uniform values — the turboquant_* presets —
//   and turbo2/3/4 or turbo4-qjl blocks; vLLM layout, 16-byte-aligned fp16 rows): four
//   lanes per token-head, see below.
// - store_kernel (everything else: the plane layout, unaligned rows):
//   one warp per token-head computes the key record (norm, Hadamard rotation,
//   bucketize, pack — or the fp8 cast, or turbo blocks) and the value record
//   (min/max quantize — or turbo blocks) in registers, builds the slot in shared
//   memory and writes it with 2-byte stores (slots are only 2-byte aligned: 134 B
//   at d=128). CacheLayout::planes (mse + uniform): the same bytes, key indices /
//   value codes / {norm, scale, zero} written to the page's three planes
//   (tq/cuda/paged.h).
#include <cstdlib>
#include <cstring>

#include <cuda_fp8.h>

#include "align.h"
#include "bitexact.cuh"
#include "formats.cuh"
#include "tq/cuda/store.h"

namespace tq::cuda {

namespace {

constexpr int kWarps = 8;

struct StoreTables {
  float centroids[16];
  float midpoints[16];
  float rot_scale;
  uint32_t s1[4], s2[4];
  uint32_t q1[4], q2[4];  // turbo4-qjl: the QJL rotation's signs (its scale: rot_scale too)
};

struct StoreArgs {
  const __half* key;
  const __half* value;
  int64_t ks_tok, ks_head, vs_tok, vs_head;
  const int64_t* slot_mapping;
  int64_t total;  // num_tokens · n_kv_heads
  int n_kv_heads;
  uint8_t* cache;
  int slot_bytes;
  int planes;  // CacheLayout::planes (mse keys + uniform values only; see paged.h)
};

// One turbo block (128 values, 4 per lane: element lane + 32k) → codes in smem; returns
// the corrected norm as fp16 bits. turbo4-qjl (QJL): returns the raw norm | rnorm << 16 (fp16
// bits) and sets bit 3 of codes[i] to element i's QJL sign. TurboCodec::encode_block.
template <int KB, bool QJL>
__device__ uint32_t turbo_block(float (&x)[4], int lane, const StoreTables& t, const float* s_mid,
                                const float* s_cen, uint8_t* codes) {
  const float n = __fsqrt_rn(dev::warp_tree_sum_squares(x));
  const float inv = n > 1e-10f ? __fdiv_rn(1.0f, n) : 0.0f;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int i = lane + 32 * k;
    float y = __fmul_rn(x[k], inv);
    if ((t.s1[i >> 5] >> (i & 31)) & 1u) y = -y;  // × (−1): exact
    x[k] = y;
  }
  dev::warp_fwht(x, lane);
  float c[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int i = lane + 32 * k;
    const float sc = ((t.s2[i >> 5] >> (i & 31)) & 1u) ? -t.rot_scale : t.rot_scale;  // scale·s2, exact
    const float y = __fmul_rn(x[k], sc);
    const int idx = dev::bucketize<1 << KB>(y, s_mid);
    codes[i] = uint8_t(idx);
    c[k] = s_cen[idx];
    if constexpr (QJL) x[k] = __fsub_rn(y, c[k]);  // the residual r = y − c
  }
  if constexpr (QJL) {
    const float rn = __fsqrt_rn(dev::warp_tree_sum_squares(x));
    // z = [Q2·(H/√128)·Q1·r ≥ 0] on the rounded products, as the CPU (−0 counts as ≥ 0)
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int i = lane + 32 * k;
      if ((t.q1[i >> 5] >> (i & 31)) & 1u) x[k] = -x[k];
    }
    dev::warp_fwht(x, lane);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int i = lane + 32 * k;
      const float sc = ((t.q2[i >> 5] >> (i & 31)) & 1u) ? -t.rot_scale : t.rot_scale;
      if (__fmul_rn(x[k], sc) >= 0.f) codes[i] |= 8;
    }
    return uint32_t(__half_as_ushort(__float2half_rn(n))) | uint32_t(__half_as_ushort(__float2half_rn(rn))) << 16;
  } else {
    const float recon = __fsqrt_rn(dev::warp_tree_sum_squares(c));
    return __half_as_ushort(__float2half_rn(recon > 1e-10f ? __fdiv_rn(n, recon) : n));
  }
}

__device__ __forceinline__ void store_u16(uint8_t* p, uint32_t v) { *reinterpret_cast<uint16_t*>(p) = uint16_t(v); }

// One LSB-first stream of n B-bit codes (staged one per byte, 16-byte aligned)
// to dst (2-byte aligned) with 2-byte stores: lane-strided 16-bit words, each
// packed from one vector load of the codes it holds. (A generic bit loop building
// every byte held the store to ~15% of copy bandwidth.)
template <int B>
__device__ __forceinline__ void write_stream(const uint8_t* codes, int n, uint8_t* dst, int lane) {
  if constexpr (B == 8) {
    for (int w = lane; w < n / 2; w += 32) store_u16(dst + 2 * w, *reinterpret_cast<const uint16_t*>(codes + 2 * w));
  } else if constexpr (B == 4) {
    for (int w = lane; w < n / 4; w += 32) {
      const uint32_t x = *reinterpret_cast<const uint32_t*>(codes + 4 * w);
      store_u16(dst + 2 * w, (x & 0xfu) | ((x >> 4) & 0xf0u) | ((x >> 8) & 0xf00u) | ((x >> 12) & 0xf000u));
    }
  } else if constexpr (B == 2) {
    for (int w = lane; w < n / 8; w += 32) {
      const uint2 x = *reinterpret_cast<const uint2*>(codes + 8 * w);
      uint32_t v = 0;
#pragma unroll
      for (int i = 0; i < 4; ++i) v |= ((x.x >> (8 * i)) & 3u) << (2 * i) | ((x.y >> (8 * i)) & 3u) << (2 * i + 8);
      store_u16(dst + 2 * w, v);
    }
  } else if constexpr (B == 1) {
    for (int w = lane; w < n / 16; w += 32) {
      const uint4 x = *reinterpret_cast<const uint4*>(codes + 16 * w);
      const uint32_t q[4] = {x.x, x.y, x.z, x.w};
      uint32_t v = 0;
#pragma unroll
      for (int i = 0; i < 16; ++i) v |= ((q[i / 4] >> (8 * (i % 4))) & 1u) << i;
      store_u16(dst + 2 * w, v);
    }
  } else {
    static_assert(B == 3, "code widths 1, 2, 3, 4, 8");
    for (int g = lane; g < n / 16; g += 32) {  // 16 codes = 48 bits = three 16-bit words
      const uint4 x = *reinterpret_cast<const uint4*>(codes + 16 * g);
      const uint32_t q[4] = {x.x, x.y, x.z, x.w};
      uint64_t v = 0;
#pragma unroll
      for (int i = 0; i < 16; ++i) v |= uint64_t((q[i / 4] >> (8 * (i % 4))) & 7u) << (3 * i);
      store_u16(dst + 6 * g, uint32_t(v));
      store_u16(dst + 6 * g + 2, uint32_t(v >> 16));
      store_u16(dst + 6 * g + 4, uint32_t(v >> 32));
    }
  }
}

// turbo2/3/4 blocks: {fp16 norm, qs, [signs]} per 128 codes; turbo4-qjl (QJL): {fp16 norm,
// fp16 rnorm, qs[48], signs[16]} from fields = norm | rnorm << 16 and codes = idx | z << 3
// (tq/formats/turbo.h).
template <int KB, bool QJL, int BLOCKS, int BLOCK_BYTES>
__device__ __forceinline__ void write_turbo(uint8_t* codes, const uint32_t (&fields)[BLOCKS > 1 ? BLOCKS : 1],
                                            uint8_t* dst, int lane) {
#pragma unroll
  for (int b = 0; b < BLOCKS; ++b) {
    uint8_t* blk = dst + b * BLOCK_BYTES;
    const uint8_t* c = codes + 128 * b;
    if (lane == 0) store_u16(blk, fields[b]);
    if constexpr (QJL) {
      if (lane == 1) store_u16(blk + 2, fields[b] >> 16);
      write_stream<3>(c, 128, blk + 4, lane);  // the low 3 bits of each code
      for (int w = lane; w < 128 / 16; w += 32) {  // bit 3 of codes 16w … 16w+15 → one 2-byte word
        const uint4 x = *reinterpret_cast<const uint4*>(c + 16 * w);
        const uint32_t q[4] = {x.x, x.y, x.z, x.w};
        uint32_t v = 0;
#pragma unroll
        for (int i = 0; i < 16; ++i) v |= ((q[i / 4] >> (8 * (i % 4) + 3)) & 1u) << i;
        store_u16(blk + 52 + 2 * w, v);
      }
    } else if constexpr (KB == 4 || KB == 2) {
      write_stream<KB>(c, 128, blk + 2, lane);
    } else {
      // low 2 bits in qs[32], the third bit in signs[16]: split the codes in place
      for (int w = lane; w < 128 / 8; w += 32) {
        const uint2 x = *reinterpret_cast<const uint2*>(c + 8 * w);
        uint32_t lo = 0, hi = 0;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          lo |= ((x.x >> (8 * i)) & 3u) << (2 * i) | ((x.y >> (8 * i)) & 3u) << (2 * i + 8);
          hi |= ((x.x >> (8 * i + 2)) & 1u) << i | ((x.y >> (8 * i + 2)) & 1u) << (i + 4);
        }
        store_u16(blk + 2 + 2 * w, lo);
        // signs byte w (codes 8w … 8w+7): written as pairs of bytes by even lanes
        const uint32_t hn = __shfl_down_sync(0x0000ffffu, hi, 1);
        if (!(w & 1)) store_u16(blk + 34 + w, hi | (hn << 8));
      }
    }
  }
}

template <class C>
__global__ void __launch_bounds__(kWarps * 32) store_kernel(StoreArgs a, StoreTables t) {
  constexpr int D = C::kD;
  constexpr int E = D / 32;
  constexpr int kCodes = C::kTurbo ? C::kTurboBlocks * 128 : D;
  __shared__ float s_mid[16], s_cen[16];
  __shared__ __align__(16) uint8_t s_kc[kWarps][kCodes];
  __shared__ __align__(16) uint8_t s_vc[kWarps][kCodes];
  if (threadIdx.x == 0) {  // one thread, compile-time indices: no local copy of the parameters
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      s_mid[i] = t.midpoints[i];
      s_cen[i] = t.centroids[i];
    }
  }
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  uint8_t* kc = s_kc[warp];
  uint8_t* vc = s_vc[warp];

  {
    // One token-head per warp and no early exit: the warp's lanes stay provably
    // converged, so nvcc emits plain SHFL (a grid-stride loop with `continue`
    // wrapped each of ~45 shuffles in WARPSYNC/ENDCOLLECTIVE emulation).
    const int64_t th_raw = int64_t(blockIdx.x) * kWarps + warp;
    const bool active = th_raw < a.total;
    const int64_t th = active ? th_raw : a.total - 1;
    const int64_t tok = th / a.n_kv_heads;
    const int h = int(th - tok * a.n_kv_heads);
    // Padding tokens (slot < 0) are computed but not written: a `continue` here
    // made every later shuffle a collective-emulation block (WARPSYNC/BRA).
    const int64_t dst_slot = a.slot_mapping[tok];
    const bool write = active && dst_slot >= 0;
    float x[E], v[E];
    const __half* kp = a.key + tok * a.ks_tok + h * a.ks_head;
    const __half* vp = a.value + tok * a.vs_tok + h * a.vs_head;
#pragma unroll
    for (int k = 0; k < E; ++k) {
      x[k] = __half2float(kp[lane + 32 * k]);
      v[k] = __half2float(vp[lane + 32 * k]);
    }

    // ---- key record ----
    uint32_t knorm[C::kTurboBlocks > 1 ? C::kTurboBlocks : 1] = {};  // fp16 bits (turbo4-qjl: | rnorm << 16)
    if constexpr (C::kKey == KeyKind::mse) {
      // MseCodec::rotate_unit + pack
      const float norm = __fsqrt_rn(dev::warp_tree_sum_squares(x));
      dev::warp_fwht(x, lane);
      const float inv = __fdiv_rn(1.0f, __fadd_rn(norm, 1e-8f));
#pragma unroll
      for (int k = 0; k < E; ++k)
        kc[lane + 32 * k] = uint8_t(dev::bucketize<C::kLevels>(__fmul_rn(__fmul_rn(x[k], t.rot_scale), inv), s_mid));
      knorm[0] = __half_as_ushort(__float2half_rn(norm));
    } else if constexpr (C::kKey == KeyKind::fp8) {
#pragma unroll
      for (int k = 0; k < E; ++k) kc[lane + 32 * k] = uint8_t(__nv_cvt_float_to_fp8(x[k], __NV_SATFINITE, __NV_E4M3));
    } else {
#pragma unroll
      for (int b = 0; b < C::kTurboBlocks; ++b) {
        float xb[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) xb[k] = 4 * b + k < E ? x[4 * b + k] : 0.f;  // d=64: zero padding
        knorm[b] = turbo_block<C::kKeyBits, C::kQjl>(xb, lane, t, s_mid, s_cen, kc + 128 * b);
      }
    }

    // ---- value record ----
    uint32_t vf0[C::kTurboBlocks > 1 ? C::kTurboBlocks : 1] = {}, vf1 = 0;
    if constexpr (C::kValue == ValueKind::uniform) {
      // UniformCodec::encode
      constexpr int qmax = (1 << C::kValueBits) - 1;
      float mn, mx;
      dev::warp_min_max(v, mn, mx);
      float scale = __fdiv_rn(__fsub_rn(mx, mn), float(qmax));
      if (!(scale > 1e-8f)) scale = 1e-8f;
#pragma unroll
      for (int k = 0; k < E; ++k) {
        const float q = floorf(__fadd_rn(__fdiv_rn(__fsub_rn(v[k], mn), scale), 0.5f));
        vc[lane + 32 * k] = uint8_t(min(max(int(q), 0), qmax));
      }
      vf0[0] = __half_as_ushort(__float2half_rn(scale));
      vf1 = __half_as_ushort(__float2half_rn(mn));
    } else {
#pragma unroll
      for (int b = 0; b < C::kTurboBlocks; ++b) {
        float vb[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) vb[k] = 4 * b + k < E ? v[4 * b + k] : 0.f;
        vf0[b] = turbo_block<C::kValueBits, C::kQjl>(vb, lane, t, s_mid, s_cen, vc + 128 * b);
      }
    }
    __syncwarp();

    // ---- plane layout: the same records, split over the page's three planes ----
    if constexpr (C::kKey == KeyKind::mse && C::kValue == ValueKind::uniform) {
      if (a.planes) {
        if (write) {
          // 16-token group of the slot (block sizes are multiples of 16), row in its planes
          const int th = h * 16 + int(dst_slot & 15);
          const int ph = 16 * a.n_kv_heads;  // token-heads per group
          uint8_t* page = a.cache + (dst_slot & ~int64_t(15)) * a.n_kv_heads * a.slot_bytes;
          uint8_t* meta = page + ph * (C::kIdxBytes + C::kValueCodeBytes) + th * 6;
          write_stream<C::kKeyBits>(kc, D, page + th * C::kIdxBytes, lane);
          write_stream<C::kValueBits>(vc, D, page + ph * C::kIdxBytes + th * C::kValueCodeBytes, lane);
          if (lane < 3) store_u16(meta + 2 * lane, lane == 0 ? knorm[0] : lane == 1 ? vf0[0] : vf1);
        }
        return;
      }
    }
    // ---- write the slot: code streams straight from the staged codes, 2-byte stores ----
    uint8_t* dst = a.cache + (dst_slot * a.n_kv_heads + h) * int64_t(a.slot_bytes);
    if (write) {
    if constexpr (C::kKey == KeyKind::mse) {
      write_stream<C::kKeyBits>(kc, D, dst, lane);
      if (lane == 0) store_u16(dst + C::kIdxBytes, knorm[0]);
    } else if constexpr (C::kKey == KeyKind::fp8) {
      write_stream<8>(kc, D, dst, lane);
    } else {
      write_turbo<C::kKeyBits, C::kQjl, C::kTurboBlocks, C::kTurboBlockBytes>(kc, knorm, dst, lane);
    }
    uint8_t* vdst = dst + C::kKeyBytes;
    if constexpr (C::kValue == ValueKind::uniform) {
      write_stream<C::kValueBits>(vc, D, vdst, lane);
      if (lane == 0) store_u16(vdst + C::kValueCodeBytes, vf0[0]);
      if (lane == 1) store_u16(vdst + C::kValueCodeBytes + 2, vf1);
    } else {
      write_turbo<C::kValueBits, C::kQjl, C::kTurboBlocks, C::kTurboBlockBytes>(vc, vf0, vdst, lane);
    }
    if (C::kKeyBytes + C::kValueBytes < a.slot_bytes && lane == 2) dst[a.slot_bytes - 1] = 0;  // pad byte
    }
  }
}

// ---- quad store: four lanes per token-head (mse or fp8 keys + uniform values) ----
// The warp-per-row kernel above issues ~545 warp instructions per row (Nsight Compute):
// with 4 values per lane most of them are shuffles (FWHT lane stages, reductions),
// per-lane IEEE divisions and byte staging. A thread per row needs 255
// registers and stalls. Here a quad of lanes owns a row, a lane holds the D/4
// elements j = 32i + 8q + e (q = lane % 4, e < 8): one 16-byte load per i (a
// quad's loads are 64 contiguous bytes), FWHT stages h = 1, 2, 4 and ≥ 32 inside
// the lane, h = 8, 16 across the quad; the norm tree likewise (CPU order kept:
// every level is elementwise, so where a pair lives does not matter). u4/u3 codes
// come from (v − mn)·RN(1/scale) with an exact-division redo for any lane whose
// values land within 1e-5 of a rounding boundary. Slots are staged in shared
// memory and copied out per token run (a token's heads are adjacent in the cache)
// with 16-, 4- or 2-byte stores.
constexpr int kQuadWarps = 4;

template <class C>
constexpr bool quad_store_supported() {
  return ((C::kKey == KeyKind::mse || C::kKey == KeyKind::fp8) && C::kValue == ValueKind::uniform) ||
         (C::kKey == KeyKind::turbo && C::kValue == ValueKind::turbo) ||
         (C::kKey == KeyKind::turbo_qjl && C::kValue == ValueKind::turbo_qjl);
}
template <class C>
constexpr int quad_slot() {
  return (C::kKeyBytes + C::kValueBytes + 1) & ~1;
}

__device__ __forceinline__ void unpack8(uint4 u, float* f) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 v = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
    f[2 * i] = v.x;
    f[2 * i + 1] = v.y;
  }
}

__device__ __forceinline__ float lds_f32(uint32_t addr) {
  float v;
  asm("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(addr));
  return v;
}
// a += inc where y ≥ m, as one predicated add in place (written in C, nvcc emitted an add
// into a new register plus a predicated move: two instructions per search level)
__device__ __forceinline__ void add_if_ge(uint32_t& a, float y, float m, uint32_t inc) {
  asm("{\n .reg .pred p;\n setp.ge.f32 p, %1, %2;\n @p add.u32 %0, %0, %3;\n}\n" : "+r"(a) : "f"(y), "f"(m), "r"(inc));
}
// dev::bucketize (binary search, exact y ≥ m) with the running index kept as the
// shared address base + 4·idx: the first two levels compare against midpoints held
// in registers (m_top; m_lo2 or m_hi2 by one select), each further level is one load
// at an immediate offset, one compare and one predicated add. (A uniform-grid lookup
// with one 16-byte entry per cell, tried instead, measured slower: bank conflicts.)
template <int LEVELS>
__device__ __forceinline__ uint32_t bucket_addr(float y, uint32_t base, float m_top, float m_lo2, float m_hi2) {
  const bool p1 = y >= m_top;
  uint32_t a = p1 ? base + 4u * (LEVELS / 2) : base;
  if constexpr (LEVELS >= 4) {
    if (y >= (p1 ? m_hi2 : m_lo2)) a += 4u * (LEVELS / 4);
  }
#pragma unroll
  for (int step = LEVELS / 8; step >= 1; step >>= 1) add_if_ge(a, y, lds_f32(a + 4u * (step - 1)), 4u * step);
  return a;
}

// bytes of code group g (8 codes, B bits each, LSB first) at staging offset B·g
template <int B>
__device__ __forceinline__ void stage_codes(uint8_t* dst, int g, uint32_t w) {
  if constexpr (B == 4) {  // 4 bytes at 4g: two 2-byte stores (rows are 2-byte aligned)
    store_u16(dst + 4 * g, w);
    store_u16(dst + 4 * g + 2, w >> 16);
  } else {  // 3 bytes at 3g
    static_assert(B == 3, "u3/u4 value codes, mse3/mse4 keys, turbo4-qjl indices");
    dst[3 * g] = uint8_t(w);
    dst[3 * g + 1] = uint8_t(w >> 8);
    dst[3 * g + 2] = uint8_t(w >> 16);
  }
}

// TurboCodec::encode_block in the quad layout: one block's 128 values (32 per lane,
// j = 32i + 8q + e; d = 64: zeros past the head) → {fp16 corrected norm, qs[, signs]}
// staged at blk — turbo4-qjl (QJL): {fp16 norm, fp16 rnorm, qs[48], signs[16]}. The same
// operations as turbo_block, level by level (bitexact.cuh); the codes' centroids (QJL: the
// residuals y − c) replace x in place for the norm correction's (the residual norm's) tree.
template <int KB, bool QJL>
__device__ __forceinline__ void quad_turbo_block(float (&x)[32], int lane, const StoreTables& t, uint32_t mid_base,
                                                 uint32_t cen_base, float m_top, float m_lo2, float m_hi2,
                                                 uint8_t* blk) {
  constexpr int L = 1 << KB;
  const int q = lane & 3;
  const float n = __fsqrt_rn(dev::tree_sum_squares<3, 2>(x));
  const float inv = n > 1e-10f ? __fdiv_rn(1.0f, n) : 0.0f;
#pragma unroll
  for (int k = 0; k < 32; ++k) {  // element 32(k/8) + 8q + k%8: sign word k/8, bit 8q + k%8
    const float y = __fmul_rn(x[k], inv);
    x[k] = (t.s1[k >> 3] >> (8 * q + (k & 7))) & 1u ? -y : y;
  }
  dev::fwht<3, 2>(x, lane);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    // turbo4: 8 nibbles; turbo3: 8 two-bit codes and 8 sign bits; turbo2: 8 two-bit codes;
    // turbo4-qjl: 8 three-bit codes
    uint32_t lo = 0, hi = 0;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float sc = (t.s2[i] >> (8 * q + e)) & 1u ? -t.rot_scale : t.rot_scale;  // scale·s2, exact
      const float y = __fmul_rn(x[8 * i + e], sc);
      const uint32_t off = bucket_addr<L>(y, mid_base, m_top, m_lo2, m_hi2) - mid_base;
      const uint32_t idx = off >> 2;
      const float c = lds_f32(cen_base + off);
      if constexpr (QJL) {
        x[8 * i + e] = __fsub_rn(y, c);  // the residual r = y − c
        lo |= idx << (3 * e);
      } else if constexpr (KB == 4) {
        x[8 * i + e] = c;
        lo |= idx << (4 * e);
      } else {
        x[8 * i + e] = c;
        lo |= (idx & 3u) << (2 * e);
        hi |= (idx >> 2) << e;  // turbo3's sign plane (turbo2: idx < 4, none is stored)
      }
    }
    if constexpr (QJL) {
      stage_codes<3>(blk + 4, 4 * i + q, lo);
    } else if constexpr (KB == 4) {
      stage_codes<4>(blk + 2, 4 * i + q, lo);
    } else {
      store_u16(blk + 2 + 2 * (4 * i + q), lo);
      if constexpr (KB == 3) blk[34 + 4 * i + q] = uint8_t(hi);
    }
  }
  if constexpr (QJL) {
    const float rn = __fsqrt_rn(dev::tree_sum_squares<3, 2>(x));
    // z = [Q2·(H/√128)·Q1·r ≥ 0] on the rounded products, as the CPU (−0 counts as ≥ 0)
#pragma unroll
    for (int k = 0; k < 32; ++k)
      if ((t.q1[k >> 3] >> (8 * q + (k & 7))) & 1u) x[k] = -x[k];
    dev::fwht<3, 2>(x, lane);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      uint32_t z = 0;  // signs byte 4i + q: elements 32i + 8q + e at bit e
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float sc = (t.q2[i] >> (8 * q + e)) & 1u ? -t.rot_scale : t.rot_scale;
        z |= (__fmul_rn(x[8 * i + e], sc) >= 0.f ? 1u : 0u) << e;
      }
      blk[52 + 4 * i + q] = uint8_t(z);
    }
    if (q == 0) store_u16(blk, __half_as_ushort(__float2half_rn(n)));
    if (q == 1) store_u16(blk + 2, __half_as_ushort(__float2half_rn(rn)));
  } else {
    const float recon = __fsqrt_rn(dev::tree_sum_squares<3, 2>(x));
    if (q == 0) store_u16(blk, __half_as_ushort(__float2half_rn(recon > 1e-10f ? __fdiv_rn(n, recon) : n)));
  }
}

// The C::kTurboBlocks blocks of one head (E values per lane in the quad layout) → dst.
template <class C, int E>
__device__ __forceinline__ void quad_turbo_record(const float (&x)[E], int lane, const StoreTables& t,
                                                  const float* s_mid, const float* s_cen, uint8_t* dst) {
  constexpr int L = 1 << C::kKeyBits;
  const float m_top = t.midpoints[L / 2 - 1], m_lo2 = t.midpoints[L / 4 - 1], m_hi2 = t.midpoints[3 * L / 4 - 1];
#pragma unroll
  for (int b = 0; b < C::kTurboBlocks; ++b) {
    float xb[32];
#pragma unroll
    for (int k = 0; k < 32; ++k) xb[k] = 32 * b + k < E ? x[32 * b + k] : 0.f;
    quad_turbo_block<C::kKeyBits, C::kQjl>(xb, lane, t, dev::smem_u32(s_mid), dev::smem_u32(s_cen), m_top, m_lo2,
                                           m_hi2, dst + b * C::kTurboBlockBytes);
  }
}

template <class C>
__global__ void __launch_bounds__(kQuadWarps * 32, C::kD >= 256 ? 4 : C::kTurbo ? 6 : 8)
    store_quad_kernel(StoreArgs a, StoreTables t) {
  constexpr int D = C::kD, NI = D / 32, E = D / 4, SB = quad_slot<C>();
  constexpr bool kTurbo = C::kTurbo;
  __shared__ float s_mid[16], s_cen[kTurbo ? 16 : 1];
  __shared__ __align__(16) uint8_t s_slot[kQuadWarps][8 * SB];
  if (threadIdx.x == 0) {  // compile-time indices: no local copy of the parameters
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      s_mid[i] = t.midpoints[i];
      if constexpr (kTurbo) s_cen[i] = t.centroids[i];
    }
  }
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, r = lane >> 2, q = lane & 3;
  const uint32_t total = uint32_t(a.total), nkv = uint32_t(a.n_kv_heads);
  const uint32_t th0 = (blockIdx.x * kQuadWarps + warp) * 8u;
  if (th0 >= total) return;  // warp-uniform; no block barrier follows
  const uint32_t nrows = min(8u, total - th0);
  const uint32_t th = th0 + min(uint32_t(r), nrows - 1);  // rows past the end redo the last one, unwritten
  const uint32_t tok = th / nkv, hh = th - tok * nkv;
  const uint4* kp = reinterpret_cast<const uint4*>(a.key + int64_t(tok) * a.ks_tok + int64_t(hh) * a.ks_head + 8 * q);
  const uint4* vp = reinterpret_cast<const uint4*>(a.value + int64_t(tok) * a.vs_tok + int64_t(hh) * a.vs_head + 8 * q);
  uint4 kraw[NI], vraw[NI];
#pragma unroll
  for (int i = 0; i < NI; ++i) {
    kraw[i] = __ldcs(kp + 4 * i);
    vraw[i] = __ldcs(vp + 4 * i);
  }
  uint8_t* slot = s_slot[warp] + r * SB;

  // ---- key record ----
  {
    float x[E];
#pragma unroll
    for (int i = 0; i < NI; ++i) unpack8(kraw[i], x + 8 * i);
    if constexpr (kTurbo) {
      quad_turbo_record<C>(x, lane, t, s_mid, s_cen, slot);
    } else if constexpr (C::kKey == KeyKind::mse) {
      // MseCodec::rotate_unit: the CPU's norm tree and FWHT in the quad layout (bitexact.cuh)
      const float norm = __fsqrt_rn(dev::tree_sum_squares<3, 2>(x));
      dev::fwht<3, 2>(x, lane);
      const float inv = __fdiv_rn(1.0f, __fadd_rn(norm, 1e-8f));
      // code word of 8 indices from the addresses a_e = base + 4·idx_e:
      // (a_0 − base)/4 + Σ_{e≥1} (a_e − base)·2^(B·e−2), the base terms folded into one constant
      constexpr int KB = C::kKeyBits, L = C::kLevels;
      uint32_t kconst = 0;
#pragma unroll
      for (int e = 1; e < 8; ++e) kconst += 1u << (KB * e - 2);
      const uint32_t base = dev::smem_u32(s_mid), base_k = base * kconst;
      const float m_top = t.midpoints[L / 2 - 1];
      const float m_lo2 = t.midpoints[L >= 4 ? L / 4 - 1 : 0], m_hi2 = t.midpoints[L >= 4 ? 3 * L / 4 - 1 : 0];
#pragma unroll
      for (int i = 0; i < NI; ++i) {
        auto code_addr = [&](int e) {
          return bucket_addr<L>(__fmul_rn(__fmul_rn(x[8 * i + e], t.rot_scale), inv), base, m_top, m_lo2, m_hi2);
        };
        uint32_t w = (code_addr(0) - base) >> 2;
#pragma unroll
        for (int e = 1; e < 8; ++e) w += code_addr(e) << (KB * e - 2);
        stage_codes<KB>(slot, 4 * i + q, w - base_k);
      }
      if (q == 0) store_u16(slot + C::kIdxBytes, __half_as_ushort(__float2half_rn(norm)));
    } else {  // fp8 E4M3 (satfinite, RNE): 8 bytes per group at 8g
#pragma unroll
      for (int i = 0; i < NI; ++i) {
        uint32_t b[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) b[e] = __nv_cvt_float_to_fp8(x[8 * i + e], __NV_SATFINITE, __NV_E4M3);
        uint8_t* d8 = slot + 8 * (4 * i + q);
#pragma unroll
        for (int u = 0; u < 4; ++u) store_u16(d8 + 2 * u, b[2 * u] | (b[2 * u + 1] << 8));
      }
    }
  }

  // ---- value record (UniformCodec::encode, or turbo blocks) ----
  if constexpr (kTurbo) {
    float v[E];
#pragma unroll
    for (int i = 0; i < NI; ++i) unpack8(vraw[i], v + 8 * i);
    quad_turbo_record<C>(v, lane, t, s_mid, s_cen, slot + C::kKeyBytes);
  } else {
    constexpr int qmax = (1 << C::kValueBits) - 1;
    float v[E];
#pragma unroll
    for (int i = 0; i < NI; ++i) unpack8(vraw[i], v + 8 * i);
    // min/max on the fp16 pairs (exact; a zero extreme is fixed up below)
    __half2 mn2 = *reinterpret_cast<const __half2*>(&vraw[0].x), mx2 = mn2;
#pragma unroll
    for (int i = 0; i < NI; ++i) {
      const uint32_t wv[4] = {vraw[i].x, vraw[i].y, vraw[i].z, vraw[i].w};
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        mn2 = __hmin2(mn2, *reinterpret_cast<const __half2*>(&wv[u]));
        mx2 = __hmax2(mx2, *reinterpret_cast<const __half2*>(&wv[u]));
      }
    }
    float mn = fminf(__low2float(mn2), __high2float(mn2)), mx = fmaxf(__low2float(mx2), __high2float(mx2));
#pragma unroll
    for (int m = 1; m <= 2; m <<= 1) {
      mn = fminf(mn, __shfl_xor_sync(dev::kFull, mn, m));
      mx = fmaxf(mx, __shfl_xor_sync(dev::kFull, mx, m));
    }
    // std::min/std::max keep the first (index order) of equal values: only a zero
    // extreme can tell — it takes the sign of the row's first zero (rare: warp-uniform branch)
    if (__any_sync(dev::kFull, mn == 0.f || mx == 0.f)) {
      int first = 1 << 30;  // index j = 32i + 8q + e of the lane's first zero, ×2, + sign
#pragma unroll
      for (int k = E - 1; k >= 0; --k)
        if (v[k] == 0.f) first = 2 * (32 * (k / 8) + 8 * q + k % 8) + (signbit(v[k]) ? 1 : 0);
#pragma unroll
      for (int m = 1; m <= 2; m <<= 1) first = min(first, __shfl_xor_sync(dev::kFull, first, m));
      const float zero = (first & 1) ? -0.f : 0.f;
      if (mn == 0.f) mn = zero;
      if (mx == 0.f) mx = zero;
    }
    float scale = __fdiv_rn(__fsub_rn(mx, mn), float(qmax));
    if (!(scale > 1e-8f)) scale = 1e-8f;
    const float inv_scale = __fdiv_rn(1.0f, scale);
    // t = fma(v − mn, RN(1/scale), 0.5) differs from the CPU's RN(RN((v − mn)/scale) + 0.5) by
    // at most 2⁻²⁴·16 (the reciprocal) + 3 half-ulps of 16 (the three roundings) < 2.5e-6, so
    // it floors to the CPU's integer unless it lies within 1e-5 of one: such lanes (and NaN)
    // redo exactly (~0.06% of lanes on random data; a 1e-4 margin sent ~19% of warps there).
    // No clamp: v ≥ mn gives t ≥ 0.5, and (mx − mn)/scale ≤ 15·(1 + 2⁻²²) keeps
    // floor(t) ≤ qmax (the exact path clamps as the CPU does).
    uint32_t w[NI];
    bool exact = false;
#pragma unroll
    for (int i = 0; i < NI; ++i) {
      w[i] = 0u;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float tq = __fmaf_rn(__fsub_rn(v[8 * i + e], mn), inv_scale, 0.5f);
        exact |= !(fabsf(__fsub_rn(tq, rintf(tq))) > 1e-5f);
        w[i] |= uint32_t(__float2int_rd(tq)) << (C::kValueBits * e);
      }
    }
    if (exact) {
#pragma unroll
      for (int i = 0; i < NI; ++i) {
        w[i] = 0u;
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          const float qf = floorf(__fadd_rn(__fdiv_rn(__fsub_rn(v[8 * i + e], mn), scale), 0.5f));
          w[i] |= uint32_t(min(max(int(qf), 0), qmax)) << (C::kValueBits * e);
        }
      }
    }
    uint8_t* vs = slot + C::kKeyBytes;
#pragma unroll
    for (int i = 0; i < NI; ++i) stage_codes<C::kValueBits>(vs, 4 * i + q, w[i]);
    if (q == 0) store_u16(vs + C::kValueCodeBytes, __half_as_ushort(__float2half_rn(scale)));
    if (q == 1) store_u16(vs + C::kValueCodeBytes + 2, __half_as_ushort(__float2half_rn(mn)));
    if (C::kKeyBytes + C::kValueBytes < SB && q == 2) slot[SB - 1] = 0;  // pad byte
  }
  __syncwarp();

  // ---- copy out: the rows of one token are adjacent slots ----
  const uint32_t tok_first = __shfl_sync(dev::kFull, tok, 0), tok_last = __shfl_sync(dev::kFull, tok, 4 * (nrows - 1));
  for (uint32_t tk = tok_first; tk <= tok_last; ++tk) {
    const int64_t dst_slot = a.slot_mapping[tk];
    if (dst_slot < 0) continue;  // padding token (warp-uniform)
    const uint32_t tb = tk * nkv, hb = max(th0, tb), he = min(th0 + nrows, tb + nkv);
    uint8_t* dst = a.cache + (dst_slot * nkv + (hb - tb)) * SB;
    const uint8_t* src = s_slot[warp] + (hb - th0) * SB;
    const int n = int(he - hb) * SB;
    const uintptr_t al = reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) | uintptr_t(n);
    if ((al & 15) == 0) {
      for (int o = 16 * lane; o < n; o += 512)
        *reinterpret_cast<uint4*>(dst + o) = *reinterpret_cast<const uint4*>(src + o);
    } else if ((al & 3) == 0) {
      for (int o = 4 * lane; o < n; o += 128)
        *reinterpret_cast<uint32_t*>(dst + o) = *reinterpret_cast<const uint32_t*>(src + o);
    } else {
      for (int o = 2 * lane; o < n; o += 64) store_u16(dst + o, *reinterpret_cast<const uint16_t*>(src + o));
    }
  }
}

}  // namespace

void store_kv(const KernelFormat& f, const StoreParams& p, cudaStream_t stream) {
  const std::string why = store_can_implement(f, p);
  if (!why.empty()) throw_error(why.c_str());
  if (p.num_tokens == 0) return;
  StoreTables t{};
  for (int i = 0; i < 16; ++i) {
    t.centroids[i] = f.centroids[i];
    t.midpoints[i] = i < 15 ? f.midpoints[i] : 0.f;
  }
  t.rot_scale = f.rot_scale;
  for (int w = 0; w < 4; ++w) {
    t.s1[w] = f.turbo_s1[w];
    t.s2[w] = f.turbo_s2[w];
    t.q1[w] = f.qjl_s1[w];
    t.q2[w] = f.qjl_s2[w];
  }
  StoreArgs a{};
  a.key = static_cast<const __half*>(p.key);
  a.value = static_cast<const __half*>(p.value);
  a.ks_tok = p.key_stride_token;
  a.ks_head = p.key_stride_head;
  a.vs_tok = p.value_stride_token;
  a.vs_head = p.value_stride_head;
  a.slot_mapping = p.slot_mapping;
  a.total = int64_t(p.num_tokens) * p.cache.n_kv_heads;
  a.n_kv_heads = p.cache.n_kv_heads;
  a.cache = p.cache.data;
  a.slot_bytes = p.cache.slot_bytes;
  a.planes = p.cache.layout == CacheLayout::planes ? 1 : 0;
  dispatch_format(f, [&](auto cfg) {
    using C = decltype(cfg);
    if (C::kKeyBytes != f.key_bytes || C::kValueBytes != f.value_bytes)
      throw_error("store_kv: compiled record sizes disagree with the format (internal error)");
    if constexpr (quad_store_supported<C>()) {
      // quad kernel: vLLM layout, 16-byte aligned fp16 rows, 32-bit row indices
      const bool rows16 = is_aligned(p.key, 16) && is_aligned(p.value, 16) && p.key_stride_token % 8 == 0 &&
                          p.key_stride_head % 8 == 0 && p.value_stride_token % 8 == 0 && p.value_stride_head % 8 == 0;
      if (!a.planes && rows16 && a.slot_bytes == quad_slot<C>() && a.total < (int64_t(1) << 31)) {
        const int64_t grid = (a.total + 8 * kQuadWarps - 1) / (8 * kQuadWarps);
        store_quad_kernel<C><<<unsigned(grid), kQuadWarps * 32, 0, stream>>>(a, t);
        TQ_CUDA_CHECK(cudaGetLastError());
        return;
      }
    }
    const int64_t grid = (a.total + kWarps - 1) / kWarps;
    if (grid > 0x7fffffff) throw_error("store_kv: num_tokens · n_kv_heads too large");
    store_kernel<C><<<unsigned(grid), kWarps * 32, 0, stream>>>(a, t);
    TQ_CUDA_CHECK(cudaGetLastError());
  });
}

}  // namespace tq::cuda
