// prod<b>: TurboQuant_prod (Zandieh et al. 2025, Alg. 2) — (b−1)-bit
// TurboQuant_mse plus a 1-bit QJL sketch of the residual, unbiased for inner
// products.
//
// Record (d coordinates):
//   idx     ceil(d·(b−1)/8) bytes, LSB-first, (b−1)-bit MSE indices (none for b=1)
//   norm    fp16 LE, ‖x‖ (raw: a corrected norm would bias the estimator)
//   qjl     ceil(d/8) bytes, bit j = [ (S r)_j ≥ 0 ], LSB-first
//   gamma   fp16 LE, γ = ‖r‖, r = y − c the residual of the unit vector in the
//           rotated domain (y = R x/(‖x‖+1e-8), c = centroids[idx])
// Estimator (paper): ŷ = c + √(π/2)/d · γ · Sᵀ z, z_j = ±1; x̂ = ‖x‖ · R⁻¹ ŷ.
// S (qjl=):  gauss:SEED  i.i.d. N(0,1) d×d (the paper's choice, default seed 1)
//            haar:SEED   √d · Q, Q Haar-orthogonal
//            srht:SEED   D2·H·D1 with ±1 entries (power-of-two d)
// Score: prepared query = (Rq, S·Rq); q·x̂ = norm·(Rq·c + √(π/2)/d·γ·(S Rq)·z).
// E[q·x̂] = q·x over S; Var ≤ π/(2d)·‖q‖²·‖x‖²·γ² (paper, Thm. 2).
// Bytes: ceil(d(b−1)/8) + ceil(d/8) + 4 (d=128, b=3: 32 + 16 + 4 = 52).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tq/codec.h"
#include "tq/rotation.h"
#include "tq/scalar_codebook.h"

namespace tq {

class QjlProjection {
 public:
  // spec: gauss:SEED | haar:SEED | srht:SEED
  QjlProjection(const std::string& spec, int d);
  const std::string& spec() const { return spec_; }
  void apply(const float* r, float* p) const;            // p = S r
  void apply_transpose(const float* z, float* p) const;  // p = Sᵀ z
  std::vector<float> matrix() const;                     // row-major S (for GPU upload/tests)

 private:
  std::string spec_;
  int d_;
  std::vector<float> s_;         // dense S (gauss, haar)
  std::vector<float> s1_, s2_;   // srht signs
  bool srht_ = false;
};

class ProdCodec final : public Codec {
 public:
  ProdCodec(int bits, int d, std::shared_ptr<const Rotation> rot, std::shared_ptr<const ScalarCodebook> cb,
            std::shared_ptr<const QjlProjection> qjl, std::string name);
  size_t row_bytes() const override { return idx_bytes_ + 2 + qjl_bytes_ + 2; }
  void encode(const float* x, int64_t n, uint8_t* out) const override;
  void decode(const uint8_t* in, int64_t n, float* out) const override;
  size_t prepared_size() const override { return 2 * size_t(dim()); }
  void prepare_query(const float* q, float* prepared) const override;
  void score(const float* prepared, const uint8_t* in, int64_t n, float* out) const override;
  bool reencode_stable() const override { return false; }
  // The QJL estimate of the residual adds (π/2 − 1)·γ²: NMSE ≈ π/2·D_{b−1}
  // (D_0 = 1), bound kNmseSlack·π/2·D_{b−1}.
  double gaussian_nmse_bound() const override;

 private:
  int bits_;
  size_t idx_bytes_, qjl_bytes_;
  std::shared_ptr<const Rotation> rot_;
  std::shared_ptr<const ScalarCodebook> cb_;  // null for b = 1
  std::shared_ptr<const QjlProjection> qjl_;
};

}  // namespace tq
