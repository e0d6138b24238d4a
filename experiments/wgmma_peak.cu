// Tensor-core throughput of the warpgroup MMA (wgmma.mma_async m64nNk16, fp16 inputs, fp32 accumulators)
// in the form a decode kernel would use it: A (64 token rows x 16) from registers, as the column kernels'
// key fragments are decoded today, and B (N query columns x 16) from shared memory. mma_peak.cu gives the
// same figure for the warp-level mma.sync the kernels use now (650 TFLOP/s on one H200); kernels.md bounds
// the multi-query decode with both.
//
// Before timing, one m64nNk16 product per N is checked against a float64 product on the host (exact:
// the inputs are multiples of 1/8 below 2), once with each reading of the shared-memory descriptor's two
// strides, so the output says which one the hardware uses for the no-swizzle layout below.
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

#define CHECK(x)                                                                       \
  do {                                                                                 \
    const cudaError_t e_ = (x);                                                        \
    if (e_ != cudaSuccess) {                                                           \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

// d (+)= A·B^T for one warpgroup: a = this thread's A fragment (the mma.sync m16n8k16 A layout, warp w
// holding rows 16w … 16w + 15), b_desc = B's shared-memory descriptor, accumulate = 0: d = A·B^T.
template <int N>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b_desc, int accumulate);

template <>
__device__ __forceinline__ void wgmma_rs<8>(float (&d)[4], const uint32_t (&a)[4], uint64_t b_desc, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(accumulate));
}

template <>
__device__ __forceinline__ void wgmma_rs<16>(float (&d)[8], const uint32_t (&a)[4], uint64_t b_desc, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(accumulate));
}

template <>
__device__ __forceinline__ void wgmma_rs<32>(float (&d)[16], const uint32_t (&a)[4], uint64_t b_desc, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, %20, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(accumulate));
}

template <>
__device__ __forceinline__ void wgmma_rs<64>(float (&d)[32], const uint32_t (&a)[4], uint64_t b_desc, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(accumulate));
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// The no-swizzle shared-memory descriptor: start address, the byte distance between core matrices
// (8 rows x 16 bytes, stored as 128 contiguous bytes) adjacent in K (leading) and in N (stride).
__device__ uint64_t smem_desc(const void* p, uint32_t leading_bytes, uint32_t stride_bytes) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  return uint64_t((addr >> 4) & 0x3fff) | uint64_t((leading_bytes >> 4) & 0x3fff) << 16 |
         uint64_t((stride_bytes >> 4) & 0x3fff) << 32;  // base offset 0, swizzle 0 (none)
}

// B (N x 16 halves, row n = query column n) into shared memory as core matrices: core (n / 8, k / 8) at
// byte (n / 8) * 256 + (k / 8) * 128, element (n % 8, k % 8) at 16 * (n % 8) + 2 * (k % 8) inside it:
// K-neighbour cores 128 bytes apart, N-neighbour cores 256 apart.
__device__ void store_b(__half* sb, const __half* b, int n_cols) {
  for (int i = threadIdx.x; i < n_cols * 16; i += blockDim.x) {
    const int n = i / 16, k = i % 16;
    sb[((n / 8) * 256 + (k / 8) * 128 + (n % 8) * 16 + (k % 8) * 2) / 2] = b[i];
  }
}

// This thread's A fragment of the 64 x 16 row-major a: rows r0 = 16·warp + lane/4 and r0 + 8, columns
// 2t, 2t + 1 (a[0], a[1]) and 2t + 8, 2t + 9 (a[2], a[3]), t = lane % 4.
__device__ void load_a(uint32_t (&f)[4], const __half* a) {
  const int warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32, r0 = 16 * warp + lane / 4, t = lane % 4;
  auto pair = [&](int r, int c) {
    uint32_t v;
    std::memcpy(&v, a + r * 16 + c, 4);
    return v;
  };
  f[0] = pair(r0, 2 * t);
  f[1] = pair(r0 + 8, 2 * t);
  f[2] = pair(r0, 2 * t + 8);
  f[3] = pair(r0 + 8, 2 * t + 8);
}

// One product D = A·B^T (64 x N, fp32) with the strides (leading, stride) in the descriptor; thread
// (warp w, lane l) writes its accumulators at the mma.sync C layout: rows 16w + l/4 (+8), columns
// 8j + 2(l%4) (+1).
template <int N>
__global__ void check_kernel(const __half* a, const __half* b, float* d, uint32_t leading, uint32_t stride) {
  // (room for 64 columns at either reading of the strides, so a wrong one reads wrong values, not past the array)
  __shared__ alignas(128) __half sb[2 * 64 * 16];
  store_b(sb, b, N);
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // generic-proxy writes → wgmma's reads
  __syncthreads();
  uint32_t f[4];
  load_a(f, a);
  float acc[N / 2];
  for (float& x : acc) x = 0.f;
  wgmma_fence();
  wgmma_rs<N>(acc, f, smem_desc(sb, leading, stride), 0);
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
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  uint32_t f[4];
  for (int i = 0; i < 4; ++i) f[i] = 0x3c003c00u ^ (threadIdx.x + i);  // fp16 pairs near 1.0
  const uint64_t desc = smem_desc(sb, 128, 256);
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

template <int N>
bool check(uint32_t leading, uint32_t stride) {
  std::vector<__half> a(64 * 16), b(N * 16);
  std::vector<float> ah(64 * 16), bh(N * 16), d(64 * N);
  uint32_t s = 12345u + N;
  auto next = [&] {  // multiples of 1/8 in (-2, 2): every product and sum exact in fp32
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
  check_kernel<N><<<1, 128>>>(da, db, dd, leading, stride);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(d.data(), dd, d.size() * 4, cudaMemcpyDeviceToHost));
  double worst = 0;
  for (int m = 0; m < 64; ++m)
    for (int n = 0; n < N; ++n) {
      double ref = 0;
      for (int k = 0; k < 16; ++k) ref += double(ah[m * 16 + k]) * double(bh[n * 16 + k]);
      const double err = std::fabs(ref - double(d[m * N + n]));
      worst = std::isnan(err) || err > worst ? (std::isnan(err) ? INFINITY : err) : worst;
    }
  CHECK(cudaFree(da));
  CHECK(cudaFree(db));
  CHECK(cudaFree(dd));
  std::printf("check m64n%dk16, leading %u / stride %u bytes: largest error %g (%s)\n", N, leading, stride, worst,
              worst == 0 ? "exact" : "WRONG");
  return worst == 0;
}

template <int N>
void timed(int sms) {
  float* out;
  CHECK(cudaMalloc(&out, 4));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  const int iters = 20000;
  for (int groups : {1, 2, 4}) {
    const int blocks = sms * 2;
    loop_kernel<N><<<blocks, 128 * groups>>>(100, out);  // warm-up (clocks up)
    float best = 1e30f;
    for (int rep = 0; rep < 5; ++rep) {
      CHECK(cudaEventRecord(e0));
      loop_kernel<N><<<blocks, 128 * groups>>>(iters, out);
      CHECK(cudaEventRecord(e1));
      CHECK(cudaEventSynchronize(e1));
      float ms;
      CHECK(cudaEventElapsedTime(&ms, e0, e1));
      best = ms < best ? ms : best;
    }
    CHECK(cudaGetLastError());
    const double flops = 2.0 * 64 * N * 16 * double(iters) * kBatch * blocks * groups;
    std::printf("m64n%dk16, %d warpgroup(s)/CTA x 2 CTAs/SM: %.1f TFLOP/s (%.3f ms)\n", N, groups,
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
  // the layout store_b writes: K-neighbour cores 128 bytes apart, N-neighbour cores 256 apart
  bool ok = true;
  ok &= check<8>(128, 256) | check<8>(256, 128);
  ok &= check<16>(128, 256) | check<16>(256, 128);
  ok &= check<64>(128, 256) | check<64>(256, 128);
  timed<8>(sms);
  timed<16>(sms);
  timed<32>(sms);
  timed<64>(sms);
  return ok ? 0 : 1;
}
