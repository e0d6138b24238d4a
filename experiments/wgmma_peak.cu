// Tensor-core throughput of the warpgroup MMA (wgmma.mma_async m64nNk16, fp16 inputs, fp32 accumulators)
// in the form a decode kernel would use it: A (64 token rows x 16) from registers, as the column kernels'
// key fragments are decoded today, and B (N query columns x 16) from shared memory. mma_peak.cu gives the
// same figure for the warp-level mma.sync the kernels use now (650 TFLOP/s on one H200); kernels.md bounds
// the multi-query decode with both.
//
// Before timing, one m64nNk16 product per N is checked against a float64 product on the host (exact:
// the inputs are multiples of 1/8 below 2), once with each reading of the shared-memory descriptor's two
// strides, so the output says which one the hardware uses for the no-swizzle layout below; then K = 64 in
// four k-steps (the value MMA's shape). Last, the value MMA with its P' written to shared memory first
// (pv_kernel): what that round trip costs against the bare MMA rows. (ptxas 13.0 injects a
// warpgroup.arrive before each of pv_kernel<64>'s MMAs, C7519: its accumulators and operands take ~130
// registers; a kernel of that design would meet the same.)
//   nvcc -O3 -gencode arch=compute_90a,code=sm_90a -o wgmma_peak experiments/wgmma_peak.cu && ./wgmma_peak
// (wgmma exists only in the architecture-specific target compute_90a; nvcc 13.0's -arch=sm_90a also
// builds a portable compute_90 PTX, which has no wgmma, and fails there.)
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "wgmma_common.cuh"

// B (n_cols x kk halves, row-major) into shared memory at b_offset.
__device__ void store_b(__half* sb, const __half* b, int n_cols, int kk) {
  for (int i = threadIdx.x; i < n_cols * kk; i += blockDim.x) sb[b_offset(i / kk, i % kk, kk) / 2] = b[i];
}

// This thread's A fragment of k-step ks of the 64 x kk row-major a: rows r0 = 16·warp + lane/4 and r0 + 8,
// columns c + 2t, c + 2t + 1 (a[0], a[1]) and c + 2t + 8, c + 2t + 9 (a[2], a[3]), c = 16·ks, t = lane % 4.
__device__ void load_a(uint32_t (&f)[4], const __half* a, int kk, int ks) {
  const int warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32, r0 = 16 * warp + lane / 4, c = 16 * ks + 2 * (lane % 4);
  auto pair = [&](int r, int col) {
    uint32_t v;
    std::memcpy(&v, a + r * kk + col, 4);
    return v;
  };
  f[0] = pair(r0, c);
  f[1] = pair(r0 + 8, c);
  f[2] = pair(r0, c + 8);
  f[3] = pair(r0 + 8, c + 8);
}

// One product D = A·B^T (64 x N, fp32) over K = 16·KS in KS k-steps (the descriptor's start advanced 256
// bytes a step), with the strides (leading, stride) in the descriptor; thread (warp w, lane l) writes its
// accumulators at the mma.sync C layout: rows 16w + l/4 (+8), columns 8j + 2(l%4) (+1).
template <int N, int KS>
__global__ void check_kernel(const __half* a, const __half* b, float* d, uint32_t leading, uint32_t stride) {
  // (room for 64 columns at either reading of the strides, so a wrong one reads wrong values, not past the array)
  __shared__ alignas(128) __half sb[2 * 64 * 16 * KS];
  store_b(sb, b, N, 16 * KS);
  proxy_fence();
  __syncthreads();
  uint32_t f[KS][4];
  for (int ks = 0; ks < KS; ++ks) load_a(f[ks], a, 16 * KS, ks);
  float acc[N / 2];
  for (float& x : acc) x = 0.f;
  wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < KS; ++ks) wgmma_rs<N>(acc, f[ks], smem_desc(sb + 128 * ks, leading, stride), ks > 0);
  wgmma_commit();
  wgmma_wait<0>();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r0 = 16 * warp + lane / 4, t = lane % 4;
  for (int j = 0; j < N / 8; ++j) {
    d[r0 * N + 8 * j + 2 * t] = acc[4 * j];
    d[r0 * N + 8 * j + 2 * t + 1] = acc[4 * j + 1];
    d[(r0 + 8) * N + 8 * j + 2 * t] = acc[4 * j + 2];
    d[(r0 + 8) * N + 8 * j + 2 * t + 1] = acc[4 * j + 3];
  }
}

// Throughput: every warpgroup issues kBatch products into one accumulator per commit group, one group
// left in flight while the next is issued (as a GEMM main loop does); register operands, one B tile.
constexpr int kBatch = 4;
template <int N>
__global__ void loop_kernel(int iters, float* out) {
  __shared__ alignas(128) __half sb[64 * 16];
  for (int i = threadIdx.x; i < 64 * 16; i += blockDim.x) sb[i] = __float2half(0.001f * (i % 7));
  proxy_fence();
  __syncthreads();
  uint32_t f[4];
  for (int i = 0; i < 4; ++i) f[i] = 0x3c003c00u ^ (threadIdx.x + i);  // fp16 pairs near 1.0
  const uint64_t desc = smem_desc(sb, kLeadingBytes, stride_bytes(16));
  float acc[N / 2];
  for (float& x : acc) x = 0.f;
  for (int it = 0; it < iters; ++it) {
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < kBatch; ++k) wgmma_rs<N>(acc, f, desc, 1);
    wgmma_commit();
    wgmma_wait<1>();
  }
  wgmma_wait<0>();
  float s = 0.f;
  for (float x : acc) s += x;
  if (s == 12345.f) out[0] = s;  // keeps the loop alive
}

// The value MMA of a wgmma decode at d 128: O^T (2 x 64 dims x N columns) += V^T (registers) · P'^T over a
// 64-token tile, where P' (64 tokens x N columns, fp32 in the score accumulators' layout: each warp holds its
// own 16 tokens, and every warp's MMA needs all 64) first goes to shared memory as B (fp16, 2-byte stores at
// b_offset), then a proxy fence and a warpgroup barrier, then 2 x 4 k-steps of m64nNk16; the next tile's P'
// depends on O, so nothing overlaps across tiles. Against the m64nNk16 rows: what the P' round trip costs.
template <int N>
__global__ void pv_kernel(int iters, float* out) {
  __shared__ alignas(128) __half sp[4][N * 64];  // one P' tile per warpgroup (up to 4 per CTA)
  const int wg = threadIdx.x / 128, warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
  const int r0 = 16 * warp + lane / 4, t = lane % 4;
  __half* tile = sp[wg];
  uint32_t v[2][4][4];  // V^T fragments: 2 blocks of 64 dims x 4 k-steps of 16 tokens
  for (int m = 0; m < 2; ++m)
    for (int ks = 0; ks < 4; ++ks)
      for (int i = 0; i < 4; ++i) v[m][ks][i] = 0x3c003c00u ^ (threadIdx.x + 16 * m + 4 * ks + i);
  float p[N / 2], o[2][N / 2];
  for (int i = 0; i < N / 2; ++i) p[i] = 0.01f * (i + lane), o[0][i] = o[1][i] = 0.f;
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int j = 0; j < N / 8; ++j) {  // this thread's P' (tokens r0, r0 + 8; columns 8j + 2t, + 1) into B
      tile[b_offset(8 * j + 2 * t, r0, 64) / 2] = __float2half(p[4 * j]);
      tile[b_offset(8 * j + 2 * t + 1, r0, 64) / 2] = __float2half(p[4 * j + 1]);
      tile[b_offset(8 * j + 2 * t, r0 + 8, 64) / 2] = __float2half(p[4 * j + 2]);
      tile[b_offset(8 * j + 2 * t + 1, r0 + 8, 64) / 2] = __float2half(p[4 * j + 3]);
    }
    proxy_fence();
    asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");  // the warpgroup's P' tile is complete
    wgmma_fence();
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) wgmma_rs<N>(o[m], v[m][ks], smem_desc(tile + 128 * ks, kLeadingBytes, stride_bytes(64)), 1);
    wgmma_commit();
    wgmma_wait<0>();
    asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");  // every warp's MMAs have read the tile
#pragma unroll
    for (int i = 0; i < N / 2; ++i) p[i] = fmaf(o[0][i] + o[1][i], 1e-9f, p[i] * 0.5f);
  }
  float s = 0.f;
  for (float x : p) s += x;
  if (s == 12345.f) out[0] = s;  // keeps the loop alive
}

template <int N, int KS = 1>
bool check(uint32_t leading, uint32_t stride) {
  constexpr int K = 16 * KS;
  std::vector<__half> a(64 * K), b(N * K);
  std::vector<float> ah(64 * K), bh(N * K), d(64 * N);
  uint32_t s = 12345u + N;
  auto next = [&] {  // multiples of 1/8 in (-2, 2): every product and sum (K ≤ 64 terms) exact in fp32
    s = s * 1664525u + 1013904223u;
    return float(int(s >> 24) % 31 - 15) / 8.f;
  };
  for (size_t i = 0; i < a.size(); ++i) a[i] = __float2half(ah[i] = next());
  for (size_t i = 0; i < b.size(); ++i) b[i] = __float2half(bh[i] = next());
  __half *da, *db;
  float* dd;
  CHECK(cudaMalloc(&da, a.size() * 2));
  CHECK(cudaMalloc(&db, b.size() * 2));
  CHECK(cudaMalloc(&dd, d.size() * 4));
  CHECK(cudaMemcpy(da, a.data(), a.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, b.data(), b.size() * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(dd, 0xff, d.size() * 4));
  check_kernel<N, KS><<<1, 128>>>(da, db, dd, leading, stride);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(d.data(), dd, d.size() * 4, cudaMemcpyDeviceToHost));
  double worst = 0;
  for (int m = 0; m < 64; ++m)
    for (int n = 0; n < N; ++n) {
      double ref = 0;
      for (int k = 0; k < K; ++k) ref += double(ah[m * K + k]) * double(bh[n * K + k]);
      const double err = std::fabs(ref - double(d[m * N + n]));
      if (!(err <= worst)) worst = std::isnan(err) ? INFINITY : err;
    }
  CHECK(cudaFree(da));
  CHECK(cudaFree(db));
  CHECK(cudaFree(dd));
  std::printf("check m64n%dk16 x %d k-steps, leading %u / stride %u bytes: largest error %g (%s)\n", N, KS, leading,
              stride, worst, worst == 0 ? "exact" : "WRONG");
  return worst == 0;
}

// Best of 5 timed launches of kern(iters, out) at 2 CTAs per SM of 1, 2 and 4 warpgroups (those its registers
// allow: pv_kernel<64> takes more than 128 per thread, so no 4-warpgroup CTA), as TFLOP/s from the flops one
// warpgroup does per iteration.
template <class Kern>
void timed(const char* what, Kern kern, int sms, double flops_per_iter) {
  float* out;
  CHECK(cudaMalloc(&out, 4));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  const int iters = 20000, blocks = sms * 2;
  cudaFuncAttributes attr;
  CHECK(cudaFuncGetAttributes(&attr, kern));
  for (int groups : {1, 2, 4}) {
    if (128 * groups > attr.maxThreadsPerBlock) {
      std::printf("%s, %d warpgroup(s)/CTA: not launchable (%d registers per thread)\n", what, groups, attr.numRegs);
      continue;
    }
    kern<<<blocks, 128 * groups>>>(100, out);  // warm-up (clocks up)
    float best = 1e30f;
    for (int rep = 0; rep < 5; ++rep) {
      CHECK(cudaEventRecord(e0));
      kern<<<blocks, 128 * groups>>>(iters, out);
      CHECK(cudaEventRecord(e1));
      CHECK(cudaEventSynchronize(e1));
      float ms;
      CHECK(cudaEventElapsedTime(&ms, e0, e1));
      best = ms < best ? ms : best;
    }
    CHECK(cudaGetLastError());
    const double flops = flops_per_iter * double(iters) * blocks * groups;
    std::printf("%s, %d warpgroup(s)/CTA x 2 CTAs/SM: %.1f TFLOP/s (%.3f ms)\n", what, groups,
                flops / (best * 1e-3) / 1e12, best);
  }
  CHECK(cudaFree(out));
}

int main() {
  int dev = 0, sms = 0, clock_khz = 0;
  CHECK(cudaGetDevice(&dev));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev));
  std::printf("SMs %d, max SM clock %.2f GHz\n", sms, clock_khz / 1e6);
  // the layout store_b writes at K = 16: K-neighbour cores 128 bytes apart, N-neighbour cores 256 apart (tried
  // as both strides); at K = 64 (the value MMA's B, four k-steps) N-neighbour cores are 1024 apart
  bool ok = true;
  constexpr uint32_t lead = kLeadingBytes, s16 = stride_bytes(16), s64 = stride_bytes(64);
  ok &= check<8>(lead, s16) | check<8>(s16, lead);
  ok &= check<16>(lead, s16) | check<16>(s16, lead);
  ok &= check<64>(lead, s16) | check<64>(s16, lead);
  ok &= check<16, 4>(lead, s64);
  ok &= check<64, 4>(lead, s64);
  timed("m64n8k16", loop_kernel<8>, sms, 2.0 * 64 * 8 * 16 * kBatch);
  timed("m64n16k16", loop_kernel<16>, sms, 2.0 * 64 * 16 * 16 * kBatch);
  timed("m64n32k16", loop_kernel<32>, sms, 2.0 * 64 * 32 * 16 * kBatch);
  timed("m64n64k16", loop_kernel<64>, sms, 2.0 * 64 * 64 * 16 * kBatch);
  timed("P' via shared memory + O (128 x 16) over 64 tokens", pv_kernel<16>, sms, 2.0 * 128 * 16 * 64);
  timed("P' via shared memory + O (128 x 64) over 64 tokens", pv_kernel<64>, sms, 2.0 * 128 * 64 * 64);
  return ok ? 0 : 1;
}
