// Internal: the one matrix product the forward passes need,
//   Y = X · Wᵀ  (X [n, k] rows of activations, queries or attention weights;
//               W [m, k] pre-packed: a weight matrix [out, in] as stored in
//               GGUF, or a KV head's keys or transposed values),
// on a hand-written register-blocked kernel: AVX-512 where the CPU has it,
// else AVX2+FMA (runtime dispatch; the project is built for baseline x86-64),
// else portable loops. The two kernels give the same bits (each output is one
// FMA chain per k-slice); the portable loops agree to float rounding. Each
// path is deterministic.
#pragma once

#include <cstdint>
#include <memory>

namespace tq::detail {

// A weight matrix W [m, k] (row r = output feature r) packed once, at model
// load, into the layout the GEMM kernel streams: panels of 16 rows, value p of
// row 16q + c at data[(q·k + p)·16 + c]; rows past m are zero. Packing per call
// cost a full strided pass over W per thread (about 15% of a Qwen2.5-1.5B
// prefill at n_ctx 512).
class PackedMatrix {
 public:
  static constexpr int64_t kPanel = 16;
  PackedMatrix() = default;
  PackedMatrix(int64_t m, int64_t k);  // zero-filled
  int64_t rows() const { return m_; }
  int64_t cols() const { return k_; }
  // Writes rows [r0, r0 + n) from row-major src (leading dimension lds).
  void set_rows(int64_t r0, int64_t n, const float* src, int64_t lds);
  void get_row(int64_t r, float* out) const;  // out[0, k)
  const float* panel(int64_t q) const { return data_.get() + q * k_ * kPanel; }

 private:
  struct Free { void operator()(float* p) const; };
  int64_t m_ = 0, k_ = 0;
  std::unique_ptr<float[], Free> data_;
};

// Rows of X [n, k] packed once per product for gemm_packed (all threads read
// it): k-slices of kSlice values, within a slice tiles of 6 rows, value p of
// row 6t + r at data[((s·tiles + t)·kSlice + p)·6 + r]; rows past n are zero.
// Packing per column chunk instead cost 7.7% of a prefill.
class PackedRows {
 public:
  static constexpr int64_t kSlice = 256, kTile = 6;
  PackedRows(int64_t n, const float* X, int64_t ldx, int64_t k);
  int64_t rows() const { return n_; }
  int64_t cols() const { return k_; }
  int64_t tiles() const { return tiles_; }
  const float* tile(int64_t slice, int64_t t) const { return data_.get() + (slice * tiles_ + t) * kSlice * kTile; }
  float at(int64_t i, int64_t p) const { return tile(p / kSlice, i / kTile)[(p % kSlice) * kTile + i % kTile]; }

 private:
  int64_t n_, k_, tiles_;
  std::unique_ptr<float[]> data_;
};

// Y[i, j − j0] = Σ_p X(i, p) · W(j, p_begin + p) for i < X.rows(), p < X.cols()
// and output columns j in [j0, j1), j0 a multiple of 16: Y points at column j0
// of row 0. (p_begin: X meets a window of W's columns, e.g. the keys a block of
// queries sees; the k-slices start at p_begin.)
void gemm_packed(const PackedRows& X, const PackedMatrix& W, int64_t j0, int64_t j1, float* Y, int64_t ldy,
                 int64_t p_begin = 0);

// Y[i, j − j0] = Σ_p X[i·ldx + p] · W(j, p) for i < n and output columns j in
// [j0, j1), j0 a multiple of 16 (threads split the columns at panel
// boundaries): Y points at column j0 of row 0.
void gemm_packed(int64_t n, const float* X, int64_t ldx, const PackedMatrix& W, int64_t j0, int64_t j1, float* Y,
                 int64_t ldy);

// Which path gemm_packed takes ("avx512", "avx2-fma" or "portable").
const char* gemm_packed_path();

// Forces the portable loops (tests compare them with the kernels).
void gemm_force_portable(bool on);
// Forces the AVX2 kernel where the CPU has AVX-512 (the two give the same
// bits; tests and benchmarks compare them).
void gemm_force_avx2(bool on);

}  // namespace tq::detail
