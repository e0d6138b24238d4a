// Paged dequant to fp16 or bf16, four lanes per token-head. Keys are inverse-rotated to the
// original basis with the CPU decoder's exact float32 operation order, so
// k_out == half(MseCodec/TurboCodec/PlainCodec::decode) (or bf16(…)) bit for bit;
// values are code·scale16 + zero16 (one rounding each, as UniformCodec::decode), or turbo
// blocks like the keys.
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "bitexact.cuh"
#include "formats.cuh"
#include "tq/cuda/dequant.h"

namespace tq::cuda {

namespace {

struct DequantTables {
  float centroids[16];
  float rot_scale;
  uint32_t s1[4], s2[4];
  bool nc;
};

// turbo4-qjl's own tables: a separate kernel argument, so the other formats' kernels keep their
// parameters (and SASS) unchanged
struct QjlTables {
  uint32_t s1[4], s2[4];  // the QJL rotation's signs (bit i set = −1; its scale is rot_scale too)
  float scale;            // TurboCodec::qjl_scale()
};

struct DequantArgs {
  const uint8_t* cache;
  int block_size, n_kv_heads, slot_bytes;
  const int32_t* table;
  int table_stride;
  const int32_t* seq_lens;
  const int32_t* out_offsets;
  void* k_out;
  void* v_out;
};

// Centroids and turbo sign words → shared, then a block barrier. One thread with
// compile-time indices: indexing the parameter struct at run time (or copying by thread
// index) would copy it to a local-memory stack frame.
__device__ __forceinline__ void tables_to_shared(const DequantTables& t, float* s_cen, uint32_t* s_signs) {
  if (threadIdx.x == 0) {
#pragma unroll
    for (int i = 0; i < 16; ++i) s_cen[i] = t.centroids[i];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      s_signs[i] = t.s1[i];
      s_signs[4 + i] = t.s2[i];
    }
  }
  __syncthreads();
}

// turbo4-qjl: the QJL sign words → s_qjl (s1, then s2), before tables_to_shared's barrier.
__device__ __forceinline__ void qjl_to_shared(const QjlTables& qt, uint32_t* s_qjl) {
  if (threadIdx.x == 0) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      s_qjl[i] = qt.s1[i];
      s_qjl[4 + i] = qt.s2[i];
    }
  }
}

// float32 → the output type, round to nearest even (as tq::float_to_half / float_to_bf16)
template <class T>
__device__ __forceinline__ T to_out(float x) {
  if constexpr (std::is_same_v<T, __half>) return __float2half_rn(x);
  else return __float2bfloat16_rn(x);
}

// Four lanes per token-head. A warp per token-head spent most of its instructions
// on shuffles (FWHT lane stages and the norm tree with 4 values per lane) and 2-byte stores:
// 26–42% of copy bandwidth. As in the quad store, lane q of quad r holds elements
// j = 32i + 8q + e (e < 8) of row r: FWHT stages h = 1, 2, 4 and ≥ 32 inside the lane, 8 and
// 16 across the quad, the norm tree likewise (bitexact.cuh: the CPU's order, so the outputs
// are the same bits), one 16-byte store per 8 outputs when the outputs are 16-byte aligned,
// else 8 2-byte stores (streaming: the outputs are read later by another kernel). A warp's 8
// slots are staged in shared memory together (2-byte loads: slots are 2-byte aligned), not one
// after another, each a table then a cache round trip; rows past the range compute and are not
// stored. So the mse/fp8 formats' dequant reaches 80–88% of copy bandwidth at 32K (aligned);
// turbo3/turbo4 stay bound by instruction issue (two FWHTs per token-head).
constexpr int kQuadWarps = 4;

template <class C>
constexpr int quad_row_bytes() {  // a staged slot, padded to 4 bytes
  return (C::kKeyBytes + C::kValueBytes + 3) & ~3;
}

// The 8 B-bit codes of elements j0 … j0+7 (j0 a multiple of 8: they start on a byte) at
// byte offset `off` of row s, code e at bits B·e of the result (B ≤ 4).
template <int B>
__device__ __forceinline__ uint32_t codes8(const uint8_t* s, int off) {
  if constexpr (B == 4) {  // off even (all callers): two 2-byte loads
    return uint32_t(*reinterpret_cast<const uint16_t*>(s + off)) |
           (uint32_t(*reinterpret_cast<const uint16_t*>(s + off + 2)) << 16);
  } else if constexpr (B == 2) {
    return *reinterpret_cast<const uint16_t*>(s + off);
  } else {
    uint32_t w = 0;
#pragma unroll
    for (int b = 0; b < B; ++b) w |= uint32_t(s[off + b]) << (8 * b);
    return w;
  }
}

// 8 outputs: one 16-byte store when the outputs are 16-byte aligned (V), else 8 2-byte stores
template <class T, bool V>
__device__ __forceinline__ void store8(T* dst, const float* x) {
  if constexpr (V) {
    uint32_t w[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const T a = to_out<T>(x[2 * u]), b = to_out<T>(x[2 * u + 1]);
      w[u] = uint32_t(*reinterpret_cast<const uint16_t*>(&a)) | (uint32_t(*reinterpret_cast<const uint16_t*>(&b)) << 16);
    }
    __stcs(reinterpret_cast<uint4*>(dst), make_uint4(w[0], w[1], w[2], w[3]));
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const T a = to_out<T>(x[e]);
      __stcs(reinterpret_cast<unsigned short*>(dst + e), *reinterpret_cast<const unsigned short*>(&a));
    }
  }
}

// turbo4-qjl's QJL term of one block (TurboCodec::block_centroids), element 32i + 8q + e in
// st[8i + e]: k·R⁻¹(2z − 1) with k = qjl_scale·rnorm, R⁻¹ = Q1·(H/√128)·Q2 — ±1 signs, the
// FWHT (integer sums: exact in any order), then one rounding per product in the CPU's order.
__device__ __forceinline__ void quad_qjl_term(const uint8_t* blk, int lane, float rot_scale, float qjl_scale,
                                              const uint32_t* s_qjl, float (&st)[32]) {
  const int q = lane & 3;
  const float k = __fmul_rn(qjl_scale, __half2float(__ushort_as_half(*reinterpret_cast<const uint16_t*>(blk + 2))));
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    // signs byte 4i + q: z of elements 32i + 8q + e at bit e; ×Q2 makes ±1 of it: +1 where z ≠ Q2's bit
    const uint32_t v = uint32_t(blk[52 + 4 * i + q]) ^ (s_qjl[4 + i] >> (8 * q));
#pragma unroll
    for (int e = 0; e < 8; ++e) st[8 * i + e] = (v >> e) & 1u ? 1.f : -1.f;
  }
  dev::fwht<3, 2>(st, lane);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t neg = s_qjl[i] >> (8 * q);
#pragma unroll
    for (int e = 0; e < 8; ++e)
      st[8 * i + e] = __fmul_rn(k, __fmul_rn(st[8 * i + e], (neg >> e) & 1u ? -rot_scale : rot_scale));
  }
}

// TurboCodec::decode of one block in the quad layout (block element 32i + 8q + e in
// y[8i + e]): the CPU's operations in the CPU's order (bitexact.cuh), so the same bits.
// QJL (turbo4-qjl): ŷ = c + the QJL term before the norm.
template <int KB, bool QJL>
__device__ __forceinline__ void quad_turbo_block(const uint8_t* blk, int lane, float rot_scale, float qjl_scale,
                                                 const float* s_cen, const uint32_t* s_signs, const uint32_t* s_qjl,
                                                 float (&y)[32]) {
  const int q = lane & 3;
  const float norm = __half2float(__ushort_as_half(*reinterpret_cast<const uint16_t*>(blk)));
  float st[QJL ? 32 : 1];
  if constexpr (QJL) quad_qjl_term(blk, lane, rot_scale, qjl_scale, s_qjl, st);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    // KB = 4: 4-bit codes at byte 2 + j/2; KB = 3 and 2: 2-bit codes at byte 2 + j/4 (KB = 3:
    // their third bits at byte 34 + j/8); turbo4-qjl: 3-bit codes at bit 3j of byte 4 on
    const uint32_t w = QJL ? codes8<3>(blk + 4, 3 * (4 * i + q))
                           : codes8<KB == 4 ? 4 : 2>(blk + 2, (KB == 4 ? 4 : 2) * (4 * i + q));
    const uint32_t hi = KB == 3 && !QJL ? uint32_t(blk[34 + 4 * i + q]) : 0u;
    const uint32_t neg = s_signs[4 + i] >> (8 * q);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const uint32_t idx = QJL       ? (w >> (3 * e)) & 7u
                           : KB == 4 ? (w >> (4 * e)) & 15u
                                     : ((w >> (2 * e)) & 3u) | (((hi >> e) & 1u) << 2);
      float cj = s_cen[idx];
      if constexpr (QJL) cj = __fadd_rn(cj, st[8 * i + e]);
      const float c = __fmul_rn(cj, norm);
      y[8 * i + e] = (neg >> e) & 1u ? -c : c;
    }
  }
  dev::fwht<3, 2>(y, lane);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t neg = s_signs[i] >> (8 * q);
#pragma unroll
    for (int e = 0; e < 8; ++e) y[8 * i + e] = __fmul_rn(y[8 * i + e], (neg >> e) & 1u ? -rot_scale : rot_scale);
  }
}

// A record of C::kTurboBlocks blocks → the first D outputs; out points at the lane's 8q.
template <class C, int KB, class T, bool V>
__device__ __forceinline__ void quad_turbo_record(const uint8_t* rec, T* out, bool live, int lane, float rot_scale,
                                                  float qjl_scale, const float* s_cen, const uint32_t* s_signs,
                                                  const uint32_t* s_qjl) {
#pragma unroll
  for (int b = 0; b < C::kTurboBlocks; ++b) {
    float y[32];
    quad_turbo_block<KB, C::kQjl>(rec + b * C::kTurboBlockBytes, lane, rot_scale, qjl_scale, s_cen, s_signs, s_qjl,
                                  y);
    if (live) {
#pragma unroll
      for (int i = 0; i < 4; ++i)
        if (128 * b + 32 * i < C::kD) store8<T, V>(out + 128 * b + 32 * i, y + 8 * i);
    }
  }
}

// A row's key (staged slot s) → its D outputs; out points at the lane's 8q.
template <class C, class T, bool V>
__device__ __forceinline__ void quad_keys(const uint8_t* s, T* out, bool live, int lane, const DequantTables& t,
                                          const QjlTables& qt, const float* s_cen, const uint32_t* s_signs,
                                          const uint32_t* s_qjl) {
  constexpr int NI = C::kD / 32;
  const int q = lane & 3;
  if constexpr (C::kTurbo) {
    quad_turbo_record<C, C::kKeyBits, T, V>(s, out, live, lane, t.rot_scale, qt.scale, s_cen, s_signs, s_qjl);
  } else {
    float x[C::kD / 4];  // element 32i + 8q + e in x[8i + e]
    if constexpr (C::kKey == KeyKind::mse) {
      constexpr int KB = C::kKeyBits;
#pragma unroll
      for (int i = 0; i < NI; ++i) {
        const uint32_t w = codes8<KB>(s, KB * (4 * i + q));
#pragma unroll
        for (int e = 0; e < 8; ++e) x[8 * i + e] = s_cen[(w >> (KB * e)) & ((1u << KB) - 1u)];
      }
      float scale = __half2float(__ushort_as_half(*reinterpret_cast<const uint16_t*>(s + C::kIdxBytes)));
      if (t.nc)
        scale = __fmul_rn(scale, __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(dev::tree_sum_squares<3, 2>(x), 1e-16f))));
#pragma unroll
      for (int k = 0; k < C::kD / 4; ++k) x[k] = __fmul_rn(x[k], scale);
      dev::fwht<3, 2>(x, lane);
#pragma unroll
      for (int k = 0; k < C::kD / 4; ++k) x[k] = __fmul_rn(x[k], t.rot_scale);
    } else {  // fp8 E4M3: exact in fp16 and bf16
#pragma unroll
      for (int i = 0; i < NI; ++i) {
        const uint8_t* b = s + 32 * i + 8 * q;
#pragma unroll
        for (int e = 0; e < 8; ++e)
          x[8 * i + e] = __half2float(__half(__nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(b[e]), __NV_E4M3)));
      }
    }
    if (live) {
#pragma unroll
      for (int i = 0; i < NI; ++i) store8<T, V>(out + 32 * i, x + 8 * i);
    }
  }
}

// A row's value (vs: the staged slot's value part) → its D outputs.
template <class C, class T, bool V>
__device__ __forceinline__ void quad_values(const uint8_t* vs, T* out, bool live, int lane, const DequantTables& t,
                                            const QjlTables& qt, const float* s_cen, const uint32_t* s_signs,
                                            const uint32_t* s_qjl) {
  if constexpr (C::kValue == ValueKind::turbo || C::kValue == ValueKind::turbo_qjl) {
    quad_turbo_record<C, C::kValueBits, T, V>(vs, out, live, lane, t.rot_scale, qt.scale, s_cen, s_signs, s_qjl);
  } else {
    constexpr int VB = C::kValueBits;
    const float scale = __half2float(__ushort_as_half(*reinterpret_cast<const uint16_t*>(vs + C::kValueCodeBytes)));
    const float zero = __half2float(__ushort_as_half(*reinterpret_cast<const uint16_t*>(vs + C::kValueCodeBytes + 2)));
#pragma unroll
    for (int i = 0; i < C::kD / 32; ++i) {
      const uint32_t w = codes8<VB>(vs, VB * (4 * i + (lane & 3)));
      float v[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = __fadd_rn(__fmul_rn(float((w >> (VB * e)) & ((1u << VB) - 1u)), scale), zero);
      if (live) store8<T, V>(out + 32 * i, v);
    }
  }
}

template <class C, class T, bool V>
__global__ void __launch_bounds__(kQuadWarps * 32) dequant_quad_kernel(DequantArgs a, DequantTables t, QjlTables qt) {
  constexpr int D = C::kD, RB = quad_row_bytes<C>();
  __shared__ float s_cen[16];
  __shared__ uint32_t s_signs[8], s_qjl[C::kQjl ? 8 : 1];
  __shared__ __align__(16) uint8_t s_rows[kQuadWarps][8 * RB];
  if constexpr (C::kQjl) qjl_to_shared(qt, s_qjl);
  tables_to_shared(t, s_cen, s_signs);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, r = lane >> 2, q = lane & 3;
  const int seq = blockIdx.y, len = a.seq_lens[seq];
  const int64_t th0 = (int64_t(blockIdx.x) * kQuadWarps + warp) * 8;
  if (th0 >= int64_t(len) * a.n_kv_heads) return;  // warp-uniform; no block barrier follows
  const int32_t* table = a.table + int64_t(seq) * a.table_stride;
  uint8_t* rows = s_rows[warp];
  // stage the 8 slots with every load independent: lane u < 8 finds slot u (rows past the
  // range: row 0's), the 8·SW 2-byte words are spread over the warp, each lane fetching its
  // row's address by shuffle (one table and one cache latency per warp, not 8 of each)
  constexpr int SW = (C::kKeyBytes + C::kValueBytes) / 2;  // == slot_bytes / 2 (validated)
  const uint16_t* mine;
  {
    int64_t th = th0 + (lane & 7);
    if (th >= int64_t(len) * a.n_kv_heads) th = th0;
    const int64_t pos = th / a.n_kv_heads;
    const int h = int(th - pos * a.n_kv_heads);
    const int page = table[pos / a.block_size];
    mine = reinterpret_cast<const uint16_t*>(
        a.cache + ((int64_t(page) * a.block_size + pos % a.block_size) * a.n_kv_heads + h) * a.slot_bytes);
  }
  const uint64_t mine_addr = reinterpret_cast<uint64_t>(mine);
#pragma unroll
  for (int k = 0; k < (8 * SW + 31) / 32; ++k) {
    const int w = lane + 32 * k, u = min(w / SW, 7), j = w - u * SW;
    const auto src = reinterpret_cast<const uint16_t*>(__shfl_sync(0xffffffffu, mine_addr, u));
    if (w < 8 * SW) reinterpret_cast<uint16_t*>(rows + u * RB)[j] = __ldcs(src + j);
  }
  __syncwarp();
  const uint8_t* s = rows + r * RB;
  const int64_t th = th0 + r;
  const bool live = th < int64_t(len) * a.n_kv_heads;
  const int64_t pos = th / a.n_kv_heads;
  const int h = int(th - pos * a.n_kv_heads);
  const int64_t row = (int64_t(a.out_offsets[seq]) + pos) * a.n_kv_heads + h;
  T* ko = static_cast<T*>(a.k_out) + row * D + 8 * q;
  T* vo = static_cast<T*>(a.v_out) + row * D + 8 * q;

  quad_keys<C, T, V>(s, ko, live, lane, t, qt, s_cen, s_signs, s_qjl);
  quad_values<C, T, V>(s + C::kKeyBytes, vo, live, lane, t, qt, s_cen, s_signs, s_qjl);
}

}  // namespace

void dequant_paged(const KernelFormat& f, const DequantParams& p, cudaStream_t stream) {
  const std::string why = dequant_can_implement(f, p);
  if (!why.empty()) throw_error(why.c_str());
  if (p.max_seq_len == 0) return;
  DequantTables t{};
  for (int i = 0; i < 16; ++i) t.centroids[i] = f.centroids[i];
  t.rot_scale = f.rot_scale;
  for (int w = 0; w < 4; ++w) {
    t.s1[w] = f.turbo_s1[w];
    t.s2[w] = f.turbo_s2[w];
  }
  t.nc = f.norm_correction;
  QjlTables qt{};
  for (int w = 0; w < 4; ++w) {
    qt.s1[w] = f.qjl_s1[w];
    qt.s2[w] = f.qjl_s2[w];
  }
  qt.scale = f.qjl_scale;
  DequantArgs a{};
  a.cache = p.cache.data;
  a.block_size = p.cache.block_size;
  a.n_kv_heads = p.cache.n_kv_heads;
  a.slot_bytes = p.cache.slot_bytes;
  a.table = p.blocks.table;
  a.table_stride = p.blocks.stride;
  a.seq_lens = p.blocks.seq_lens;
  a.out_offsets = p.out_offsets;
  a.k_out = p.k_out;
  a.v_out = p.v_out;
  const int64_t rows = int64_t(p.max_seq_len) * p.cache.n_kv_heads;  // token-heads, 8 per warp
  constexpr int kRowsPerBlock = 8 * kQuadWarps;
  if ((rows + kRowsPerBlock - 1) / kRowsPerBlock > 0x7fffffff)
    throw_error("dequant_paged: max_seq_len · n_kv_heads too large");
  if (p.blocks.batch > 65535) throw_error("dequant_paged: batch must be ≤ 65535");
  const dim3 grid(unsigned((rows + kRowsPerBlock - 1) / kRowsPerBlock), unsigned(p.blocks.batch));
  // rows are D ≥ 64 values: 16-byte stores when both outputs start 16-byte aligned
  const bool out16 = reinterpret_cast<uintptr_t>(p.k_out) % 16 == 0 && reinterpret_cast<uintptr_t>(p.v_out) % 16 == 0;
  dispatch_format(f, [&](auto cfg) {
    using C = decltype(cfg);
    const bool bf = p.dtype == DequantDtype::bf16;
    if (out16 && bf) dequant_quad_kernel<C, __nv_bfloat16, true><<<grid, kQuadWarps * 32, 0, stream>>>(a, t, qt);
    else if (out16) dequant_quad_kernel<C, __half, true><<<grid, kQuadWarps * 32, 0, stream>>>(a, t, qt);
    else if (bf) dequant_quad_kernel<C, __nv_bfloat16, false><<<grid, kQuadWarps * 32, 0, stream>>>(a, t, qt);
    else dequant_quad_kernel<C, __half, false><<<grid, kQuadWarps * 32, 0, stream>>>(a, t, qt);
    TQ_CUDA_CHECK(cudaGetLastError());
  });
}

}  // namespace tq::cuda
