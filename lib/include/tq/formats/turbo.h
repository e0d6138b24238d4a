// turboquant_plus / llama.cpp-fork blocks (TheTom/llama-cpp-turboquant,
// ggml-common.h): 128 values per block, one rotation group per block. A head
// of d values is zero-padded to a multiple of 128 (the fork's PR #24), so
// d = 64 occupies one block and d = 256 two.
//
//   turbo2      { fp16 norm; u8 qs[32]; }                 34 B  2.125 bits/value
//               2-bit index j at bits 2·(j%4) of qs[j/4]
//   turbo3      { fp16 norm; u8 qs[32]; u8 signs[16]; }   50 B  3.125 bits/value
//               idx = (low 2 bits as turbo2) | (bit j%8 of signs[j/8]) << 2
//   turbo4      { fp16 norm; u8 qs[64]; }                 66 B  4.125 bits/value
//               nibbles, even j in the low nibble
//   turbo4-qjl  { fp16 norm; fp16 rnorm; u8 qs[48]; u8 signs[16]; } 68 B (legacy)
//               3-bit indices (LSB-first stream, j at bit 3j) + 1-bit QJL signs
//               of the residual, bit j = [(S r)_j ≥ 0], S = Q2·H·Q1 (±1 entries)
// Per block (float32): n = ‖x‖ (tree order); u = x·(1/n) (0 if n ≤ 1e-10);
//   y = D2·(H/√128)·D1·u with the fork's fixed sign tables (its "seed 42"
//   WHT_S1/S2; QJL tables "seed 1042"); idx_j = #{i : y_j ≥ m_i} with the
//   fork's centroid and midpoint tables; stored norm = n/‖c‖, the corrected
//   norm (raw n if ‖c‖ ≤ 1e-10), so the block decodes with norm exactly n.
//   turbo4-qjl stores the raw n (a corrected norm would bias the QJL estimate)
//   and rnorm = ‖y − c‖; ŷ = c + √(π/2)/128·rnorm·Sᵀz.
// Decode: x̂ = D1·(H/√128)·D2·(norm16·ŷ), the first d values of the padded head.
// The block structs are in tq/formats/layouts.h (shared with the GPU kernels).
#pragma once

#include <memory>

#include "tq/codec.h"
#include "tq/formats/layouts.h"
#include "tq/rotation.h"
#include "tq/scalar_codebook.h"

namespace tq {

enum class TurboKind { turbo2, turbo3, turbo4, turbo4_qjl };

class TurboCodec final : public Codec {
 public:
  TurboCodec(TurboKind kind, int d);
  // The same codec with another codebook of as many levels: decodes a TurboCodec(kind, d)
  // record's indices to these centroids (tq-bench --simulate-lut: the GPU LUT's fp16-rounded
  // ones). Its own encode corrects the norm with these centroids, so its bytes can differ.
  TurboCodec(TurboKind kind, int d, std::shared_ptr<const ScalarCodebook> codebook);
  size_t row_bytes() const override { return size_t(blocks_) * block_bytes_; }
  void encode(const float* x, int64_t n, uint8_t* out) const override;
  void decode(const uint8_t* in, int64_t n, float* out) const override;
  size_t prepared_size() const override { return size_t(blocks_) * 128 * 2; }
  void prepare_query(const float* q, float* prepared) const override;
  void score(const float* prepared, const uint8_t* in, int64_t n, float* out) const override;
  // Corrected-norm blocks are stable unless padding was dropped (d % 128 != 0).
  bool reencode_stable() const override { return kind_ != TurboKind::turbo4_qjl && dim() % 128 == 0; }
  // The fork table's Gaussian distortion at d = 128 × kNmseSlack (turbo4's table is
  // about 2× the Lloyd-Max optimum; turbo4-qjl's QJL term lowers its 3-bit error).
  double gaussian_nmse_bound() const override { return kNmseSlack * cb_->gaussian_distortion(128); }

  TurboKind kind() const { return kind_; }
  const ScalarCodebook& codebook() const { return *cb_; }
  const RandomizedHadamard& rotation() const { return *rot_; }
  // turbo4-qjl (the GPU kernels read these): R, the normalised QJL rotation (S = √128·R;
  // null for the other kinds), and float(√(π/2)/128·√128), so that the decode computes
  // ŷ = c + (qjl_scale()·rnorm)·R⁻¹(2z − 1), each product and the sum rounded to float.
  const RandomizedHadamard* qjl_rotation() const { return qjl_.get(); }
  float qjl_scale() const;

 private:
  void encode_block(const float* x, uint8_t* blk) const;   // x: 128 values
  void block_centroids(const uint8_t* blk, float* c) const;  // rotated-domain ŷ before the norm
  TurboKind kind_;
  int blocks_;
  size_t block_bytes_;
  std::shared_ptr<const ScalarCodebook> cb_;
  std::shared_ptr<const RandomizedHadamard> rot_, qjl_;
};

}  // namespace tq
