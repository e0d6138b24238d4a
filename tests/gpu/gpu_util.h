// Helpers of the GPU tests: device buffers, fp16 / bf16 test data, a paged layout.
#pragma once

#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include <cuda_runtime.h>

#include "tq/cuda/check.h"
#include "tq/cuda/kernel_format.h"
#include "tq/float_formats.h"
#include "tq/rng.h"

namespace tqtest {

class DevMem {
 public:
  explicit DevMem(size_t bytes) : n_(bytes) {
    if (bytes) TQ_CUDA_CHECK(cudaMalloc(&p_, bytes));
  }
  ~DevMem() {
    if (p_) cudaFree(p_);
  }
  DevMem(const DevMem&) = delete;
  DevMem& operator=(const DevMem&) = delete;
  template <class T = void>
  T* as() const { return static_cast<T*>(p_); }
  size_t size() const { return n_; }
  void fill(uint8_t byte) { TQ_CUDA_CHECK(cudaMemset(p_, byte, n_)); }
  void upload(const void* h, size_t bytes) { TQ_CUDA_CHECK(cudaMemcpy(p_, h, bytes, cudaMemcpyHostToDevice)); }
  template <class T>
  void upload(const std::vector<T>& v) { upload(v.data(), v.size() * sizeof(T)); }
  template <class T>
  std::vector<T> download(size_t count) const {
    std::vector<T> v(count);
    TQ_CUDA_CHECK(cudaMemcpy(v.data(), p_, count * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
  }

 private:
  void* p_ = nullptr;
  size_t n_;
};

inline void device_sync() {
  TQ_CUDA_CHECK(cudaGetLastError());
  TQ_CUDA_CHECK(cudaDeviceSynchronize());
}

// Fast approximate N(0,1) (Irwin–Hall of 4 uniforms, rescaled): test data only.
inline double fast_gauss(tq::Rng& rng) {
  double s = 0;
  for (int i = 0; i < 4; ++i) s += double(rng.next_u64() >> 11) * 0x1p-53;
  return (s - 2.0) * 1.7320508075688772;
}

// A float as fp16 or (bf16) bf16 bits, rounded to nearest even; and such bits back to float (exact).
inline uint16_t to_16(float x, bool bf16) { return bf16 ? tq::float_to_bf16(x) : tq::float_to_half(x); }
inline float from_16(uint16_t b, bool bf16) { return bf16 ? tq::bf16_to_float(b) : tq::half_to_float(b); }

// Rows of d fp16 (bf16: bf16) values: mean + sigma·N(0,1)·(per-row factor in [0.5, 2]).
inline std::vector<uint16_t> random_rows(tq::Rng& rng, size_t rows, int d, double mean, double sigma, bool bf16 = false) {
  std::vector<uint16_t> h(rows * size_t(d));
  for (size_t r = 0; r < rows; ++r) {
    const double f = sigma * (0.5 + 1.5 * double(rng.next_u64() >> 11) * 0x1p-53);
    for (int j = 0; j < d; ++j) {
      h[r * d + j] = to_16(float(mean + f * fast_gauss(rng)), bf16);
    }
  }
  return h;
}

inline std::vector<float> halves_to_floats(const std::vector<uint16_t>& h, bool bf16 = false) {
  std::vector<float> f(h.size());
  for (size_t i = 0; i < h.size(); ++i) f[i] = from_16(h[i], bf16);
  return f;
}

// A random permutation of 0 … n−1 (Fisher–Yates on rng.below).
template <class T>
inline std::vector<T> shuffled_iota(size_t n, tq::Rng& rng) {
  std::vector<T> v(n);
  std::iota(v.begin(), v.end(), T(0));
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[size_t(rng.below(i))]);
  return v;
}

// A store's slot_mapping: token t → a distinct random slot of [0, slots), about one
// token in ten skipped with a negative entry (−1, or −1 … −3 with varied_skips).
inline std::vector<int64_t> random_slot_mapping(tq::Rng& rng, int64_t slots, int n_tokens, bool varied_skips) {
  const std::vector<int64_t> perm = shuffled_iota<int64_t>(size_t(slots), rng);
  std::vector<int64_t> mapping(static_cast<size_t>(n_tokens));
  for (int t = 0; t < n_tokens; ++t)
    mapping[size_t(t)] = rng.below(10) == 0 ? (varied_skips ? -1 - int64_t(rng.below(3)) : -1) : perm[size_t(t)];
  return mapping;
}

// A paged layout for sequences of the given lengths: shuffled physical blocks,
// a few spare blocks nobody owns; table entries beyond a sequence are -1.
struct Paging {
  int block_size = 16, batch = 0, stride = 0;
  int64_t num_blocks = 0;
  std::vector<int32_t> table, lens;
  std::vector<int64_t> slot_of_token;  // all tokens of all sequences, in (sequence, position) order
  int64_t total_tokens = 0;
  int max_len = 0;
};

inline Paging make_paging(const std::vector<int>& lens, int block_size, tq::Rng& rng, int spare_blocks = 3) {
  Paging p;
  p.block_size = block_size;
  p.batch = int(lens.size());
  p.lens.assign(lens.begin(), lens.end());
  int64_t need = 0;
  for (int l : lens) {
    const int nb = (l + block_size - 1) / block_size;
    need += nb;
    p.stride = std::max(p.stride, std::max(nb, 1));
    p.max_len = std::max(p.max_len, l);
  }
  p.num_blocks = need + spare_blocks;
  const std::vector<int32_t> ids = shuffled_iota<int32_t>(size_t(p.num_blocks), rng);
  p.table.assign(size_t(p.batch) * size_t(p.stride), -1);
  size_t next = 0;
  for (int b = 0; b < p.batch; ++b) {
    const int nb = (lens[size_t(b)] + block_size - 1) / block_size;
    for (int i = 0; i < nb; ++i) p.table[size_t(b) * p.stride + i] = ids[next++];
    for (int t = 0; t < lens[size_t(b)]; ++t)
      p.slot_of_token.push_back(int64_t(p.table[size_t(b) * p.stride + t / block_size]) * block_size + t % block_size);
  }
  p.total_tokens = int64_t(p.slot_of_token.size());
  return p;
}

// Converts a whole quantized cache between the vLLM slot layout and the plane
// layout (tq/cuda/paged.h: planes per 16-token group): the same bytes per
// token-head, rearranged. to_planes:
// slots → planes; else planes → slots. Formats with planes_support only.
inline std::vector<uint8_t> convert_layout(const std::vector<uint8_t>& in, const tq::cuda::KernelFormat& f,
                                           int64_t num_blocks, int block_size, int hkv, bool to_planes) {
  const size_t S = size_t(f.slot_bytes), IB = size_t(f.key_bytes) - 2, VB = size_t(f.value_bytes) - 4;
  const size_t ph = 16 * size_t(hkv);  // token-heads of one 16-token group
  std::vector<uint8_t> out(in.size());
  for (int64_t g = 0; g < num_blocks * (block_size / 16); ++g) {
    const size_t page = size_t(g) * ph * S;  // group base (both layouts)
    for (int t = 0; t < 16; ++t)
      for (int h = 0; h < hkv; ++h) {
        const size_t slot = page + (size_t(t) * hkv + h) * S, th = size_t(h) * 16 + t;
        const size_t meta = page + ph * (IB + VB) + th * 6;
        const struct {
          size_t s, p, n;
        } parts[4] = {{slot, page + th * IB, IB},                   // key indices
                      {slot + IB, meta, 2},                         // key norm
                      {slot + IB + 2, page + ph * IB + th * VB, VB},  // value codes
                      {slot + IB + 2 + VB, meta + 2, 4}};           // scale, zero
        for (const auto& pt : parts) {
          if (to_planes) std::memcpy(&out[pt.p], &in[pt.s], pt.n);
          else std::memcpy(&out[pt.s], &in[pt.p], pt.n);
        }
      }
  }
  return out;
}

}  // namespace tqtest
