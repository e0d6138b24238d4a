// Tensor-core throughput of the warp-level MMA the decode kernels use
// (mma.sync m16n8k16, fp16 inputs, fp32 accumulators) on the current GPU:
// every warp runs independent MMA chains on register operands (no memory
// traffic), so the figure is the ceiling for any kernel built from this
// instruction. kernels.md uses it to bound the multi-query decode.
//   nvcc -O3 -arch=sm_90 -o mma_peak experiments/mma_peak.cu && ./mma_peak
#include <cstdint>
#include <cstdio>
#include <cuda_runtime.h>

constexpr int kChains = 8;  // independent accumulators per warp (covers the MMA latency)

__global__ void mma_loop(int iters, float* out) {
  uint32_t a[4], b[2];
  for (int i = 0; i < 4; ++i) a[i] = 0x3c003c00u ^ (threadIdx.x + i);  // fp16 pairs near 1.0
  for (int i = 0; i < 2; ++i) b[i] = 0x3c003c00u ^ (threadIdx.x * 3 + i);
  float c[kChains][4] = {};
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int k = 0; k < kChains; ++k) {
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
          "{%0,%1,%2,%3};\n"
          : "+f"(c[k][0]), "+f"(c[k][1]), "+f"(c[k][2]), "+f"(c[k][3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
  }
  float s = 0.f;
  for (int k = 0; k < kChains; ++k) s += c[k][0] + c[k][1] + c[k][2] + c[k][3];
  if (s == 12345.f) out[0] = s;  // keeps the loop alive
}

int main() {
  int dev = 0, sms = 0, clock_khz = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev);
  float* out;
  cudaMalloc(&out, 4);
  const int iters = 20000;
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::printf("SMs %d, max SM clock %.2f GHz\n", sms, clock_khz / 1e6);
  for (int warps : {4, 8, 16, 32}) {
    const int blocks = sms * 2;
    mma_loop<<<blocks, 32 * warps>>>(100, out);  // warm-up (clocks up)
    float best = 1e30f;
    for (int rep = 0; rep < 5; ++rep) {
      cudaEventRecord(e0);
      mma_loop<<<blocks, 32 * warps>>>(iters, out);
      cudaEventRecord(e1);
      cudaEventSynchronize(e1);
      float ms;
      cudaEventElapsedTime(&ms, e0, e1);
      best = ms < best ? ms : best;
    }
    const double flops = 2.0 * 16 * 8 * 16 * double(iters) * kChains * blocks * warps;
    std::printf("warps/CTA %2d x 2 CTAs/SM: %.1f TFLOP/s (%.3f ms)\n", warps, flops / (best * 1e-3) / 1e12, best);
  }
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    std::printf("CUDA error: %s\n", cudaGetErrorString(err));
    return 1;
  }
  return 0;
}
