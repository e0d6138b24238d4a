// Internal: the int8 path of the forward's weight products, Y = X · Wᵀ, as
// llama.cpp computes them on the CPU: W keeps the GGUF's integer codes, X is
// quantized to int8 per group of G values of a row (G = 16 or 32), and the
// group dot products are exact integer sums (AVX-512 VNNI vpdpbusd: 64 u8×s8
// products per instruction, four times the fp32 FMA's 16; portable loops give
// the same bits elsewhere). Opt-in (MatmulMode::int8): it trades the exact
// fp32 forward for speed; docs/models.md §10 states its cost in perplexity.
//
// Per row i, column j and group g of k values (w = S·(c − zero) + offset is
// the GGUF's exact dequantization, folded into w = S·c + O):
//   Y[i, j] = Σ_g ax[i, g] · (S[j, g] · Σ_k c[j, k] · q[i, k] + O[j, g] · Σ_k q[i, k])
// with x[i, k] ≈ ax[i, g] · q[i, k], ax = max|x| / 127 over the group.
#pragma once

#include <cstdint>
#include <memory>

namespace tq::detail {

// A weight matrix W [m, k] (row r = output feature r) as u8 codes with a
// scale S and offset O per group, packed into the layout the kernel streams:
// panels of 16 rows; in panel q, code of row 16q + c at k value p lies at
// codes[((q·k/4 + p/4)·16 + c)·4 + p % 4] (four consecutive k of one row form
// the 32-bit lane vpdpbusd reads); S and O of group g at [(q·groups + g)·16 + c].
class Int8Matrix {
 public:
  static constexpr int64_t kPanel = 16;
  Int8Matrix() = default;
  Int8Matrix(int64_t m, int64_t k);  // k a multiple of 32; rows past m are zero
  int64_t rows() const { return m_; }
  int64_t cols() const { return k_; }
  bool empty() const { return m_ == 0; }
  // Rows [r0, r0 + n) of ggml `type` (one with integer codes: ggml_type_has_codes),
  // row r at src + (r − r0)·row_bytes.
  void set_rows(int64_t r0, int64_t n, uint32_t type, const uint8_t* src, int64_t row_bytes);
  // After the last set_rows: groups of 32 where every pair of 16-value groups
  // shares S and O (q4_k, q5_0, q8_0, …), else 16 (q6_k).
  void finish();
  int group() const { return group_; }
  const uint8_t* codes(int64_t q) const { return codes_.get() + q * k_ * kPanel; }
  const float* scale(int64_t q) const { return s_.get() + q * (k_ / group_) * kPanel; }
  const float* offset(int64_t q) const { return o_.get() + q * (k_ / group_) * kPanel; }

 private:
  int64_t m_ = 0, k_ = 0;
  int group_ = 16;
  std::unique_ptr<uint8_t[]> codes_;
  std::unique_ptr<float[]> s_, o_;  // per 16 values until finish(), then per group
};

// Rows of X [n, k] quantized to int8 per group of `group` values, in tiles of
// kTile rows: the four int8 of row 6t + r at k values 4u … 4u + 3 form
// word[(t·k/4 + u)·kTile + r]; ax and ax·Σq of group g at [(t·groups + g)·kTile + r].
// A group with a NaN or infinite value gets ax = NaN, so its outputs are NaN
// as in the fp32 product.
class Int8Rows {
 public:
  static constexpr int64_t kTile = 6;
  Int8Rows(int64_t n, const float* X, int64_t ldx, int64_t k, int group, int n_threads = 1);
  int64_t rows() const { return n_; }
  int64_t cols() const { return k_; }
  int group() const { return group_; }
  const int32_t* words(int64_t t) const { return q_.get() + t * (k_ / 4) * kTile; }
  const float* ax(int64_t t) const { return ax_.get() + t * (k_ / group_) * kTile; }
  const float* ax_sum(int64_t t) const { return as_.get() + t * (k_ / group_) * kTile; }

 private:
  int64_t n_, k_, tiles_;
  int group_;
  std::unique_ptr<int32_t[]> q_;
  std::unique_ptr<float[]> ax_, as_;
};

// Y[i, j − j0] = the int8 product above, for i < X.rows() and output columns j
// in [j0, j1), j0 a multiple of 16; X's group must be W's. Deterministic: the
// same bits on every path and for any split of the columns.
void gemm_int8(const Int8Rows& X, const Int8Matrix& W, int64_t j0, int64_t j1, float* Y, int64_t ldy);

// "avx512-vnni" or "portable".
const char* gemm_int8_path();
// Forces the portable loops (tests compare them with the kernel).
void gemm_int8_force_portable(bool on);

}  // namespace tq::detail
