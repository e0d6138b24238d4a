// Catch2 runner for the GPU tests: exits 77 (ctest: skipped) when there is no
// CUDA device, so CI machines without a GPU report the suite as skipped; `tq_gpu_tests "[host]"`
// runs the test cases that need no device (the format table) anywhere.
#include <cstdio>
#include <string>

#include "run.h"  // tests/catch: Catch2's session
#include "tq/cuda/device.h"

int main(int argc, char** argv) {
  // "[host]" alone: the host-only test cases (no device needed), e.g. ctest's gpu_host_tests
  if (argc == 2 && std::string(argv[1]) == "[host]") return tq::test::run_catch(argc, argv);
  if (tq::cuda::device_count() == 0) {
    std::puts("tq_gpu_tests: no CUDA device: skipped");
    return 77;
  }
  const auto info = tq::cuda::device_info(0);
  std::printf("tq_gpu_tests: %s (sm_%d%d, %d SMs)\n", info.name.c_str(), info.major, info.minor, info.sm_count);
  return tq::test::run_catch(argc, argv);
}
