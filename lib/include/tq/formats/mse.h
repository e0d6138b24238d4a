// mse<b>: TurboQuant_mse (Zandieh et al. 2025, Alg. 1) — rotation + Lloyd-Max
// scalar codebook + stored norm; the key quantizer of the vLLM presets.
//
// Record (d coordinates, b bits, 1 ≤ b ≤ 8):
//   idx     ceil(d·b/8) bytes, LSB-first bit stream, coordinate j at bit b·j
//           (b=4: byte j>>1, even j low nibble; b=3: vLLM's 3-bit layout)
//   norm    fp16 LE
// Encode (float32):
//   ‖x‖  = sqrt(tree_sum_squares(x))            (fixed reduction order)
//   y    = R x, then y_j ·= 1/(‖x‖ + 1e-8)     (R: rot=, Hadamard by default)
//   idx_j = #{i : y_j ≥ m_i}                    (midpoint goes up)
//   norm = ‖x‖ (raw, "+nc") or ‖x‖/‖c‖ ("+fold", c = centroid vector)
// Decode: c_j = centroid[idx_j]; "+nc" rescales c to unit norm,
//   c ·= 1/sqrt(Σ c_j² + 1e-16) (vLLM norm correction, on read); x̂ = R⁻¹(norm16·c).
// "+nc" and "+fold" decode to the same vector up to fp16 rounding of the norm.
// Score: q·x̂ = norm16 · Σ (Rq)_j c_j (· the nc factor): keys never materialise.
// Bytes: ceil(d·b/8) + 2 (d=128: b=4 66 B, b=3 50 B).
#pragma once

#include <memory>

#include "tq/codec.h"
#include "tq/formats/layouts.h"
#include "tq/rotation.h"
#include "tq/scalar_codebook.h"

namespace tq {

enum class NormMode { raw, nc, fold };

class MseCodec final : public Codec {
 public:
  MseCodec(int bits, int d, std::shared_ptr<const Rotation> rot, std::shared_ptr<const ScalarCodebook> cb,
           NormMode norm, std::string name);
  size_t row_bytes() const override { return size_t(layout::mse_record_bytes(dim(), bits_)); }
  void encode(const float* x, int64_t n, uint8_t* out) const override;
  void decode(const uint8_t* in, int64_t n, float* out) const override;
  void prepare_query(const float* q, float* prepared) const override;
  void score(const float* prepared, const uint8_t* in, int64_t n, float* out) const override;
  bool reencode_stable() const override { return norm_ != NormMode::raw; }
  // The codebook's Gaussian distortion D_b (0.0095 for 4 bits) × kNmseSlack: the
  // rotated unit vector's coordinates are (nearly) N(0, 1/d); nc/fold change
  // the error by O(D²).
  double gaussian_nmse_bound() const override { return kNmseSlack * cb_->gaussian_distortion(dim()); }

  int bits() const { return bits_; }
  NormMode norm_mode() const { return norm_; }
  const Rotation& rotation() const { return *rot_; }
  const ScalarCodebook& codebook() const { return *cb_; }
  size_t index_bytes() const { return idx_bytes_; }

  // Rotated, normalised coordinates y of one row and its norm (the first
  // encode stage; exposed for tests against vLLM's intermediates).
  float rotate_unit(const float* x, float* y) const;
  // Packs indices of already-rotated unit coordinates y plus a norm.
  void pack(const float* y, float norm, uint8_t* rec) const;

 private:
  int bits_;
  size_t idx_bytes_;
  std::shared_ptr<const Rotation> rot_;
  std::shared_ptr<const ScalarCodebook> cb_;
  NormMode norm_;
};

}  // namespace tq
