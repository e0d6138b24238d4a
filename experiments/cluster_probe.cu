// Can the split-KV decode merge a sequence's parts inside a thread-block cluster? Two questions for a one-CTA-per-SM
// kernel shaped like the G-8 decode (16 warps, 200 KB of dynamic shared memory): how many clusters of 1-16 CTAs the
// device holds at once (cudaOccupancyMaxActiveClusters), and what a 128-CTA grid costs when it reads 281 MB (the
// 16/2, B 32, 32K cache) and combines each cluster's sums over distributed shared memory, against the same grid
// launched plainly with a programmatic-dependent merge kernel.
//
//   nvcc -arch=sm_90 -O3 -std=c++17 -o /tmp/cluster_probe experiments/cluster_probe.cu && /tmp/cluster_probe
//
// Results: experiments/results/kernels/cluster_probe_h100.txt.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdio>

#include "cuda_check.h"

namespace cg = cooperative_groups;

template <bool Cluster>
__global__ void __launch_bounds__(512, 1)
    stream_kernel(const float4* __restrict__ in, size_t n_per, float* part, float* out) {
  extern __shared__ float4 sm[];
  const float4* p = in + size_t(blockIdx.x) * n_per;
  float4 acc = make_float4(0, 0, 0, 0);
  for (size_t i = threadIdx.x; i < n_per; i += blockDim.x) {
    float4 v = __ldcs(p + i);
    acc.x += v.x;
    acc.y += v.y;
    acc.z += v.z;
    acc.w += v.w;
  }
  float s = acc.x + acc.y + acc.z + acc.w;
  float* red = reinterpret_cast<float*>(sm);
  red[threadIdx.x] = s;
  __syncthreads();
  if constexpr (Cluster) {
    cg::cluster_group cl = cg::this_cluster();
    cl.sync();
    const unsigned r = cl.block_rank(), n = cl.num_blocks();
    // rank r reduces threads [r*512/n, (r+1)*512/n) over the cluster's CTAs
    for (unsigned t = threadIdx.x; t < 512 / n; t += blockDim.x) {
      float v = 0.f;
      for (unsigned c = 0; c < n; ++c) v += cl.map_shared_rank(red, c)[r * (512 / n) + t];
      out[(blockIdx.x / n) * 512 + r * (512 / n) + t] = v;
    }
    cl.sync();
  } else {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    part[size_t(blockIdx.x) * 512 + threadIdx.x] = s;
  }
}
__global__ void merge(const float* part, float* out, int splits) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  float v = 0.f;
  for (int c = 0; c < splits; ++c) v += part[(size_t(blockIdx.x) * splits + c) * 512 + threadIdx.x];
  out[blockIdx.x * 512 + threadIdx.x] = v;
}

// A launch of `grid` CTAs of 512 threads on stream st with one launch attribute (*attr).
cudaLaunchConfig_t config(dim3 grid, size_t smem, cudaStream_t st, cudaLaunchAttribute* attr) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(512);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = st;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cfg;
}
cudaLaunchAttribute cluster_attr(int cs) {
  cudaLaunchAttribute at = {};
  at.id = cudaLaunchAttributeClusterDimension;
  at.val.clusterDim.x = cs;
  at.val.clusterDim.y = 1;
  at.val.clusterDim.z = 1;
  return at;
}

int main() {
  cudaDeviceProp pr;
  CHECK(cudaGetDeviceProperties(&pr, 0));
  printf("%s, %d SMs\n", pr.name, pr.multiProcessorCount);
  const int smem = 200 * 1024;
  CHECK(cudaFuncSetAttribute(stream_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  CHECK(cudaFuncSetAttribute(stream_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  CHECK(cudaFuncSetAttribute(stream_kernel<true>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  for (int cs : {1, 2, 4, 8, 16}) {
    cudaLaunchAttribute at = cluster_attr(cs);
    const cudaLaunchConfig_t cfg = config(dim3(128), smem, nullptr, &at);
    int n = -1;
    cudaError_t e = cudaOccupancyMaxActiveClusters(&n, stream_kernel<true>, &cfg);
    printf("cluster %2d: max active clusters %d (%d CTAs) %s\n", cs, n, n * cs,
           e == cudaSuccess ? "" : cudaGetErrorString(e));
  }
  const size_t bytes = 281u << 20, n4 = bytes / 16;
  float4* in;
  float *part, *out;
  CHECK(cudaMalloc(&in, bytes));
  CHECK(cudaMemset(in, 0, bytes));
  CHECK(cudaMalloc(&part, 128 * 512 * 4));
  CHECK(cudaMalloc(&out, 128 * 512 * 4));
  cudaStream_t st;
  CHECK(cudaStreamCreate(&st));
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  for (int cs : {2, 4, 8}) {
    const size_t n_per = n4 / 128;
    // each returns its launches' error, so that a launch that failed is never timed as an empty one
    auto run_plain = [&]() -> cudaError_t {
      stream_kernel<false><<<128, 512, smem, st>>>(in, n_per, part, out);
      if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
      cudaLaunchAttribute at = {};
      at.id = cudaLaunchAttributeProgrammaticStreamSerialization;
      at.val.programmaticStreamSerializationAllowed = 1;
      const cudaLaunchConfig_t cfg = config(dim3(128 / cs), 0, st, &at);
      return cudaLaunchKernelEx(&cfg, merge, (const float*)part, out, cs);
    };
    auto run_cluster = [&]() -> cudaError_t {
      cudaLaunchAttribute at = cluster_attr(cs);
      const cudaLaunchConfig_t cfg = config(dim3(128), smem, st, &at);
      return cudaLaunchKernelEx(&cfg, stream_kernel<true>, (const float4*)in, n_per, part, out);
    };
    for (int rep = 0; rep < 3; ++rep) {
      for (int v = 0; v < 2; ++v) {
        for (int w = 0; w < 5; ++w) CHECK(v ? run_cluster() : run_plain());
        cudaEventRecord(e0, st);
        for (int w = 0; w < 50; ++w) CHECK(v ? run_cluster() : run_plain());
        cudaEventRecord(e1, st);
        CHECK(cudaEventSynchronize(e1));
        float ms;
        cudaEventElapsedTime(&ms, e0, e1);
        printf("splits %d %-8s %.2f us  %.1f GB/s\n", cs, v ? "cluster" : "plain", ms * 1000 / 50,
               bytes / (ms / 50 * 1e-3) / 1e9);
      }
    }
  }
  CHECK(cudaGetLastError());
  return 0;
}
