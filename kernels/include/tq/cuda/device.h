// Device discovery shared by tq-bench and the GPU tests.
#pragma once

#include <string>

namespace tq::cuda {

// Number of usable CUDA devices; 0 when there is no driver or no GPU
// (never throws: "no GPU" is an expected state on CI machines).
int device_count();

struct DeviceInfo {
  std::string name;
  int sm_count = 0, major = 0, minor = 0;
  size_t l2_bytes = 0, global_bytes = 0, smem_per_block_optin = 0;
};
DeviceInfo device_info(int device = 0);

}  // namespace tq::cuda
