#include "tq/cuda/device.h"

#include <cuda_runtime.h>

#include "tq/cuda/check.h"

namespace tq::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

DeviceInfo device_info(int device) {
  cudaDeviceProp p{};
  TQ_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  DeviceInfo info;
  info.name = p.name;
  info.sm_count = p.multiProcessorCount;
  info.major = p.major;
  info.minor = p.minor;
  info.l2_bytes = size_t(p.l2CacheSize);
  info.global_bytes = p.totalGlobalMem;
  info.smem_per_block_optin = p.sharedMemPerBlockOptin;
  return info;
}

}  // namespace tq::cuda
