// What the sm_90a experiments (wgmma_peak.cu, mq64_proto.cu) share: a CUDA error check, the warpgroup MMA's
// fence / commit / wait, and the no-swizzle shared-memory layout of a B tile with its descriptor, which
// wgmma_peak.cu checks against a float64 product.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include <cuda_runtime.h>

#define CHECK(x)                                                                       \
  do {                                                                                 \
    const cudaError_t e_ = (x);                                                        \
    if (e_ != cudaSuccess) {                                                           \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// The no-swizzle shared-memory descriptor: start address, the byte distance between core matrices
// (8 rows x 16 bytes, stored as 128 contiguous bytes) adjacent in K (leading) and in N (stride).
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr, uint32_t leading_bytes, uint32_t stride_bytes) {
  return uint64_t((addr >> 4) & 0x3fff) | uint64_t((leading_bytes >> 4) & 0x3fff) << 16 |
         uint64_t((stride_bytes >> 4) & 0x3fff) << 32;  // base offset 0, swizzle 0 (none)
}
__device__ __forceinline__ uint64_t smem_desc(const void* p, uint32_t leading_bytes, uint32_t stride_bytes) {
  return smem_desc(static_cast<uint32_t>(__cvta_generic_to_shared(p)), leading_bytes, stride_bytes);
}
// generic-proxy shared-memory writes → the tensor cores' (async proxy) reads
__device__ __forceinline__ void proxy_fence() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Byte offset of element (n, k) of a B tile of K = 16·ks columns (row n = query column n, k along K) stored
// as core matrices: core (n / 8, k / 8) at (n / 8) · (K / 8) · 128 + (k / 8) · 128, element (n % 8, k % 8) at
// 16 · (n % 8) + 2 · (k % 8) inside it: K-neighbour cores 128 bytes apart, N-neighbour cores K · 16 apart
// (256 at K = 16), and k-step s's 16 columns start 256 · s bytes in.
constexpr uint32_t kLeadingBytes = 128;  // b_offset's K-neighbour core distance
__host__ __device__ constexpr uint32_t stride_bytes(int kk) { return uint32_t(kk) * 16; }  // its N-neighbour distance
__host__ __device__ constexpr int b_offset(int n, int k, int kk) {
  return (n / 8) * int(stride_bytes(kk)) + (k / 8) * int(kLeadingBytes) + (n % 8) * 16 + (k % 8) * 2;
}
