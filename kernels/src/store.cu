// Fused store kernels; bytes equal KvFormat::encode_slots. Both are compiled for fp16 and for bf16
// keys and values (StoreParams::dtype; the kernels' BF), which they read as floats.
// - store_quad_kernel (mse or fp8 keys + uniform values — the turboquant_* presets —
//   and turbo2/3/4 or turbo4-qjl blocks; vLLM layout, 16-byte-aligned rows): four
//   lanes per token-head, see store_quad.cuh.
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
#include "store_common.cuh"
#include "store_quad.cuh"
#include "tq/cuda/store.h"

namespace tq::cuda {

namespace {

constexpr int kWarps = 8;

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

// BF: the keys and values are bf16, else fp16
template <class C, bool BF>
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
    const uint16_t* kp = a.key + tok * a.ks_tok + h * a.ks_head;
    const uint16_t* vp = a.value + tok * a.vs_tok + h * a.vs_head;
#pragma unroll
    for (int k = 0; k < E; ++k) {
      x[k] = dev::act_to_float<BF>(kp[lane + 32 * k]);
      v[k] = dev::act_to_float<BF>(vp[lane + 32 * k]);
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
  a.key = static_cast<const uint16_t*>(p.key);
  a.value = static_cast<const uint16_t*>(p.value);
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
  const bool bf16 = p.dtype == Dtype16::bf16;
  dispatch_format(f, [&](auto cfg) {
    using C = decltype(cfg);
    if constexpr (quad_store_supported<C>()) {
      // quad kernel: vLLM layout, 16-byte aligned rows, 32-bit row indices
      const bool rows16 = is_aligned(p.key, 16) && is_aligned(p.value, 16) && p.key_stride_token % 8 == 0 &&
                          p.key_stride_head % 8 == 0 && p.value_stride_token % 8 == 0 && p.value_stride_head % 8 == 0;
      if (!a.planes && rows16 && a.slot_bytes == quad_slot<C>() && a.total < (int64_t(1) << 31)) {
        const int64_t grid = (a.total + 8 * kQuadWarps - 1) / (8 * kQuadWarps);
        auto quad = bf16 ? store_quad_kernel<C, true> : store_quad_kernel<C, false>;
        quad<<<unsigned(grid), kQuadWarps * 32, 0, stream>>>(a, t);
        TQ_CUDA_CHECK(cudaGetLastError());
        return;
      }
    }
    const int64_t grid = (a.total + kWarps - 1) / kWarps;
    if (grid > 0x7fffffff) throw_error("store_kv: num_tokens · n_kv_heads too large");
    auto general = bf16 ? store_kernel<C, true> : store_kernel<C, false>;
    general<<<unsigned(grid), kWarps * 32, 0, stream>>>(a, t);
    TQ_CUDA_CHECK(cudaGetLastError());
  });
}

}  // namespace tq::cuda
