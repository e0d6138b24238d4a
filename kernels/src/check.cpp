#include "tq/cuda/check.h"

#include <cuda_runtime.h>

#include "tq/error.h"

namespace tq::cuda {

void throw_cuda_error(const char* call, int err, const char* file, int line) {
  TQ_THROW("{} failed at {}:{}: {}", call, file, line, cudaGetErrorString(static_cast<cudaError_t>(err)));
}

void throw_error(const char* message) { throw Error(message); }

}  // namespace tq::cuda
