// Device-side random fp16 / bf16 fill for benchmarks (hash of the index: no state).
#include "common.cuh"
#include "tq/cuda/bench.h"
#include "tq/cuda/check.h"

namespace tq::cuda {

namespace {

__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

__global__ void fill_kernel(uint16_t* dst, size_t n, uint64_t seed, float mean, float sigma, int bf16) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint64_t h = splitmix64(seed ^ (i * 0xd1b54a32d192ed03ull));
    // Irwin–Hall of 4 uniform 16-bit draws, rescaled to unit variance
    const float s = float(h & 0xffff) + float((h >> 16) & 0xffff) + float((h >> 32) & 0xffff) + float(h >> 48);
    const float g = (s * (1.f / 65536.f) - 2.f) * 1.7320508f;
    dst[i] = dev::act_from_float(mean + sigma * g, bf16 != 0);
  }
}

}  // namespace

void fill_random_16(void* dst, size_t n, uint64_t seed, float mean, float sigma, Dtype16 dtype, cudaStream_t stream) {
  if (n == 0) return;
  const size_t blocks = (n + 255) / 256;
  fill_kernel<<<unsigned(blocks < 8192 ? blocks : 8192), 256, 0, stream>>>(
      static_cast<uint16_t*>(dst), n, seed, mean, sigma, dtype == Dtype16::bf16 ? 1 : 0);
  TQ_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tq::cuda
