// The quad store kernel (store_quad_kernel: four lanes per token-head), launched by
// store_kv (store.cu) for the formats and layouts it supports (internal).
#pragma once

#include <cstdint>
#include <type_traits>

#include <cuda_fp8.h>

#include "bitexact.cuh"
#include "formats.cuh"
#include "store_common.cuh"

namespace tq::cuda {

namespace {

// ---- quad store: four lanes per token-head (mse or fp8 keys + uniform values) ----
// The warp-per-row kernel (store.cu) issues ~545 warp instructions per row (Nsight Compute):
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

// eight 16-bit activations (BF: bf16, else fp16) → floats (exact)
template <bool BF>
__device__ __forceinline__ void unpack8(uint4 u, float* f) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 v = dev::act2_to_float2<BF>(w[i]);
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

// BF: the keys and values are bf16, else fp16
template <class C, bool BF>
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
    for (int i = 0; i < NI; ++i) unpack8<BF>(kraw[i], x + 8 * i);
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
    for (int i = 0; i < NI; ++i) unpack8<BF>(vraw[i], v + 8 * i);
    quad_turbo_record<C>(v, lane, t, s_mid, s_cen, slot + C::kKeyBytes);
  } else {
    constexpr int qmax = (1 << C::kValueBits) - 1;
    float v[E];
#pragma unroll
    for (int i = 0; i < NI; ++i) unpack8<BF>(vraw[i], v + 8 * i);
    // min/max on the 16-bit pairs (exact; a zero extreme is fixed up below)
    using T2 = std::conditional_t<BF, __nv_bfloat162, __half2>;
    T2 mn2 = *reinterpret_cast<const T2*>(&vraw[0].x), mx2 = mn2;
#pragma unroll
    for (int i = 0; i < NI; ++i) {
      const uint32_t wv[4] = {vraw[i].x, vraw[i].y, vraw[i].z, vraw[i].w};
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        mn2 = __hmin2(mn2, *reinterpret_cast<const T2*>(&wv[u]));
        mx2 = __hmax2(mx2, *reinterpret_cast<const T2*>(&wv[u]));
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

}  // namespace tq::cuda
