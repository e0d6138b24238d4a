// CUDA error checks usable from .cu files without pulling fmt into nvcc.
#pragma once

namespace tq::cuda {

// Throws tq::Error("<call> failed at file:line: <cuda error string>").
[[noreturn]] void throw_cuda_error(const char* call, int err, const char* file, int line);
// Throws tq::Error(message) — for launcher shape checks.
[[noreturn]] void throw_error(const char* message);

}  // namespace tq::cuda

#define TQ_CUDA_CHECK(call)                                                          \
  do {                                                                               \
    const int tq_err_ = static_cast<int>(call);                                      \
    if (tq_err_ != 0) ::tq::cuda::throw_cuda_error(#call, tq_err_, __FILE__, __LINE__); \
  } while (0)
