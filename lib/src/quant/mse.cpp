#include "tq/formats/mse.h"

#include <cmath>
#include <cstring>

#include "bytes.h"
#include "tq/bitpack.h"
#include "tq/error.h"
#include "tq/simd.h"

namespace tq {

namespace {
constexpr int kMaxD = kMaxHeadDim;
}

MseCodec::MseCodec(int bits, int d, std::shared_ptr<const Rotation> rot, std::shared_ptr<const ScalarCodebook> cb,
                   NormMode norm, std::string name)
    : Codec(std::move(name), d), bits_(bits), rot_(std::move(rot)), cb_(std::move(cb)), norm_(norm) {
  TQ_CHECK(bits >= 1 && bits <= 8, "{}: bits {} must be 1..8", this->name(), bits);
  TQ_CHECK(d >= 2 && d <= kMaxD, "{}: head_dim {} must be in 2..{}", this->name(), d, kMaxD);
  TQ_CHECK(bits != 3 || d % 8 == 0, "{}: head_dim {} not supported: 3-bit packing needs head_dim % 8 == 0",
           this->name(), d);
  TQ_CHECK(rot_ && rot_->dim() == d, "{}: rotation dimension does not match head_dim {}", this->name(), d);
  TQ_CHECK(cb_ && cb_->levels() == (1 << bits), "{}: codebook has {} levels, {} bits need {}", this->name(),
           cb_ ? cb_->levels() : 0, bits, 1 << bits);
  idx_bytes_ = packed_bytes(size_t(d), bits);
}

float MseCodec::rotate_unit(const float* x, float* y) const {
  const int d = dim();
  const float norm = std::sqrt(is_power_of_two(d) ? tree_sum_squares_pow2(x, d) : tree_sum_squares(x, d));
  const float inv = 1.0f / (norm + 1e-8f);
  if (const auto* h = dynamic_cast<const HadamardRotation*>(rot_.get())) {
    // Same two roundings as apply() then ·inv, in one pass from x (no copy):
    // (H x · 1/√d) · inv.
    fwht_scale2(x, y, d, h->scale(), inv);
    return norm;
  }
  std::memcpy(y, x, sizeof(float) * size_t(d));
  rot_->apply(y);
  for (int j = 0; j < d; ++j) y[j] *= inv;
  return norm;
}

void MseCodec::pack(const float* y, float norm, uint8_t* rec) const {
  const int d = dim();
  uint8_t idx[kMaxD];
  cb_->index(y, d, idx);
  float stored = norm;
  if (norm_ == NormMode::fold) {
    float c[kMaxD];
    const auto& cen = cb_->centroids();
    for (int j = 0; j < d; ++j) c[j] = cen[idx[j]];
    const float cn = std::sqrt(tree_sum_squares(c, d));
    if (cn > 0.f) stored = norm / cn;
  }
  pack_bits(idx, size_t(d), bits_, rec);
  detail::put_f16(rec + idx_bytes_, stored);
}

void MseCodec::encode(const float* x, int64_t n, uint8_t* out) const {
  check_rows(x, n);
  const int d = dim();
  float y[kMaxD];
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x + size_t(r) * size_t(d);
    const float norm = rotate_unit(xr, y);
    TQ_CHECK(norm <= kFp16Max, "{}: row {} has norm {} beyond the fp16 range of the stored norm", name(), r, norm);
    pack(y, norm, out + size_t(r) * row_bytes());
  }
}

void MseCodec::decode(const uint8_t* in, int64_t n, float* out) const {
  const int d = dim();
  uint8_t idx[kMaxD];
  const auto& cen = cb_->centroids();
  for (int64_t r = 0; r < n; ++r) {
    const uint8_t* rec = in + size_t(r) * row_bytes();
    unpack_bits(rec, size_t(d), bits_, idx);
    float* o = out + size_t(r) * size_t(d);
    for (int j = 0; j < d; ++j) o[j] = cen[idx[j]];
    float scale = detail::get_f16(rec + idx_bytes_);
    if (norm_ == NormMode::nc) scale *= 1.0f / std::sqrt(tree_sum_squares(o, d) + 1e-16f);
    for (int j = 0; j < d; ++j) o[j] *= scale;
    rot_->apply_inverse(o);
  }
}

void MseCodec::prepare_query(const float* q, float* prepared) const {
  std::memcpy(prepared, q, sizeof(float) * size_t(dim()));
  rot_->apply(prepared);
}

void MseCodec::score(const float* qr, const uint8_t* in, int64_t n, float* out) const {
  const int d = dim();
  uint8_t idx[kMaxD];
  const auto& cen = cb_->centroids();
  for (int64_t r = 0; r < n; ++r) {
    const uint8_t* rec = in + size_t(r) * row_bytes();
    unpack_bits(rec, size_t(d), bits_, idx);
    float acc = 0.f;
    for (int j = 0; j < d; ++j) acc += qr[j] * cen[idx[j]];
    float scale = detail::get_f16(rec + idx_bytes_);
    if (norm_ == NormMode::nc) {
      float c[kMaxD];
      for (int j = 0; j < d; ++j) c[j] = cen[idx[j]];
      scale *= 1.0f / std::sqrt(tree_sum_squares(c, d) + 1e-16f);
    }
    out[r] = scale * acc;
  }
}

}  // namespace tq
