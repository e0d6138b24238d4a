// A device allocation owned by the host code of the kernels library (internal).
#pragma once

#include <cstddef>
#include <vector>

#include <cuda_runtime.h>

#include "tq/cuda/check.h"

namespace tq::cuda {

struct Buf {
  void* p = nullptr;
  size_t bytes = 0;
  explicit Buf(size_t n) : bytes(n) {
    if (n) TQ_CUDA_CHECK(cudaMalloc(&p, n));
  }
  ~Buf() {
    if (p) cudaFree(p);
  }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  template <class T>
  T* as() const { return static_cast<T*>(p); }
  template <class T>
  void upload(const std::vector<T>& v) {
    TQ_CUDA_CHECK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  template <class T>
  std::vector<T> download(size_t count) const {
    std::vector<T> v(count);
    TQ_CUDA_CHECK(cudaMemcpy(v.data(), p, count * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
  }
};

}  // namespace tq::cuda
