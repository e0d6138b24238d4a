#include "tq/formats/prod.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "bytes.h"
#include "tq/bitpack.h"
#include "tq/error.h"
#include "tq/rng.h"

namespace tq {

namespace {
constexpr int kMaxD = kMaxHeadDim;
constexpr double kSqrtHalfPi = 1.2533141373155002512;  // √(π/2)

uint64_t qjl_seed(const std::string& spec, const std::string& s) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  TQ_CHECK(!s.empty() && errno == 0 && *end == '\0' && s[0] != '-', "qjl '{}': seed '{}' is not a non-negative integer",
           spec, s);
  return v;
}
}  // namespace

QjlProjection::QjlProjection(const std::string& spec, int d) : spec_(spec), d_(d) {
  const auto colon = spec.find(':');
  const std::string kind = spec.substr(0, colon);
  const uint64_t seed = colon == std::string::npos ? 1 : qjl_seed(spec, spec.substr(colon + 1));
  if (colon == std::string::npos) spec_ = kind + ":1";
  if (kind == "gauss") {
    Rng rng(mix_seed(seed, 0x51a));
    s_.resize(size_t(d) * size_t(d));
    for (auto& v : s_) v = float(rng.gaussian());
  } else if (kind == "haar") {
    HaarRotation q(d, mix_seed(seed, 0x51b));
    s_.resize(size_t(d) * size_t(d));
    const double sd = std::sqrt(double(d));
    for (size_t i = 0; i < s_.size(); ++i) s_[i] = float(q.q()[i] * sd);
  } else if (kind == "srht") {
    TQ_CHECK(is_power_of_two(d), "qjl '{}': srht needs a power-of-two head_dim, not {}", spec, d);
    srht_ = true;
    Rng rng(mix_seed(seed, 0x51c));
    s1_.resize(size_t(d));
    s2_.resize(size_t(d));
    for (auto& s : s1_) s = rng.coin() ? -1.f : 1.f;
    for (auto& s : s2_) s = rng.coin() ? -1.f : 1.f;
  } else {
    TQ_THROW("unknown qjl projection '{}' (expected gauss:SEED, haar:SEED or srht:SEED)", spec);
  }
}

void QjlProjection::apply(const float* r, float* p) const {
  if (srht_) {
    for (int j = 0; j < d_; ++j) p[j] = r[j] * s1_[size_t(j)];
    fwht(p, d_);
    for (int j = 0; j < d_; ++j) p[j] *= s2_[size_t(j)];
    return;
  }
  for (int i = 0; i < d_; ++i) {
    const float* row = &s_[size_t(i) * size_t(d_)];
    float acc = 0.f;
    for (int j = 0; j < d_; ++j) acc += row[j] * r[j];
    p[i] = acc;
  }
}

void QjlProjection::apply_transpose(const float* z, float* p) const {
  if (srht_) {
    for (int j = 0; j < d_; ++j) p[j] = z[j] * s2_[size_t(j)];
    fwht(p, d_);
    for (int j = 0; j < d_; ++j) p[j] *= s1_[size_t(j)];
    return;
  }
  for (int j = 0; j < d_; ++j) p[j] = 0.f;
  for (int i = 0; i < d_; ++i) {
    const float* row = &s_[size_t(i) * size_t(d_)];
    for (int j = 0; j < d_; ++j) p[j] += row[j] * z[i];
  }
}

std::vector<float> QjlProjection::matrix() const {
  if (!srht_) return s_;
  std::vector<float> m(size_t(d_) * size_t(d_)), e(static_cast<size_t>(d_)), col(static_cast<size_t>(d_));
  for (int j = 0; j < d_; ++j) {
    std::fill(e.begin(), e.end(), 0.f);
    e[size_t(j)] = 1.f;
    apply(e.data(), col.data());
    for (int i = 0; i < d_; ++i) m[size_t(i) * size_t(d_) + size_t(j)] = col[size_t(i)];
  }
  return m;
}

ProdCodec::ProdCodec(int bits, int d, std::shared_ptr<const Rotation> rot, std::shared_ptr<const ScalarCodebook> cb,
                     std::shared_ptr<const QjlProjection> qjl, std::string name)
    : Codec(std::move(name), d), bits_(bits), rot_(std::move(rot)), cb_(std::move(cb)), qjl_(std::move(qjl)) {
  TQ_CHECK(bits >= 1 && bits <= 8, "{}: bits {} must be 1..8", this->name(), bits);
  TQ_CHECK(d >= 2 && d <= kMaxD, "{}: head_dim {} must be in 2..{}", this->name(), d, kMaxD);
  TQ_CHECK(bits != 4 || d % 8 == 0, "{}: head_dim {} not supported: 3-bit packing needs head_dim % 8 == 0",
           this->name(), d);
  TQ_CHECK(rot_ && rot_->dim() == d, "{}: rotation dimension mismatch", this->name());
  TQ_CHECK(bits == 1 || (cb_ && cb_->levels() == (1 << (bits - 1))), "{}: codebook must have {} levels",
           this->name(), 1 << (bits - 1));
  idx_bytes_ = bits > 1 ? packed_bytes(size_t(d), bits - 1) : 0;
  qjl_bytes_ = packed_bytes(size_t(d), 1);
}

double ProdCodec::gaussian_nmse_bound() const {
  const double d_mse = bits_ > 1 ? cb_->gaussian_distortion(dim()) : 1.0;
  return kNmseSlack * 1.5707963267948966 * d_mse;
}

void ProdCodec::encode(const float* x, int64_t n, uint8_t* out) const {
  check_rows(x, n);
  const int d = dim();
  float y[kMaxD], p[kMaxD];
  uint8_t idx[kMaxD], z[kMaxD];
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x + size_t(r) * size_t(d);
    uint8_t* rec = out + size_t(r) * row_bytes();
    const float norm = std::sqrt(tree_sum_squares(xr, d));
    TQ_CHECK(norm <= kFp16Max, "{}: row {} has norm {} beyond the fp16 range of the stored norm", name(), r, norm);
    std::memcpy(y, xr, sizeof(float) * size_t(d));
    rot_->apply(y);
    const float inv = 1.0f / (norm + 1e-8f);
    for (int j = 0; j < d; ++j) y[j] *= inv;
    if (bits_ > 1) {
      cb_->index(y, d, idx);
      const auto& cen = cb_->centroids();
      for (int j = 0; j < d; ++j) y[j] -= cen[idx[j]];  // residual
      pack_bits(idx, size_t(d), bits_ - 1, rec);
    }
    const float gamma = std::sqrt(tree_sum_squares(y, d));
    qjl_->apply(y, p);
    for (int j = 0; j < d; ++j) z[j] = p[j] >= 0.f ? 1 : 0;
    detail::put_f16(rec + idx_bytes_, norm);
    pack_bits(z, size_t(d), 1, rec + idx_bytes_ + 2);
    detail::put_f16(rec + idx_bytes_ + 2 + qjl_bytes_, gamma);
  }
}

void ProdCodec::decode(const uint8_t* in, int64_t n, float* out) const {
  const int d = dim();
  uint8_t idx[kMaxD], z[kMaxD];
  float zs[kMaxD], st[kMaxD];
  for (int64_t r = 0; r < n; ++r) {
    const uint8_t* rec = in + size_t(r) * row_bytes();
    float* o = out + size_t(r) * size_t(d);
    if (bits_ > 1) {
      unpack_bits(rec, size_t(d), bits_ - 1, idx);
      const auto& cen = cb_->centroids();
      for (int j = 0; j < d; ++j) o[j] = cen[idx[j]];
    } else {
      for (int j = 0; j < d; ++j) o[j] = 0.f;
    }
    const float norm = detail::get_f16(rec + idx_bytes_);
    unpack_bits(rec + idx_bytes_ + 2, size_t(d), 1, z);
    const float gamma = detail::get_f16(rec + idx_bytes_ + 2 + qjl_bytes_);
    for (int j = 0; j < d; ++j) zs[j] = z[j] ? 1.f : -1.f;
    qjl_->apply_transpose(zs, st);
    const float k = float(kSqrtHalfPi / d) * gamma;
    for (int j = 0; j < d; ++j) o[j] = (o[j] + k * st[j]) * norm;
    rot_->apply_inverse(o);
  }
}

void ProdCodec::prepare_query(const float* q, float* prepared) const {
  const int d = dim();
  std::memcpy(prepared, q, sizeof(float) * size_t(d));
  rot_->apply(prepared);
  qjl_->apply(prepared, prepared + d);
}

void ProdCodec::score(const float* pq, const uint8_t* in, int64_t n, float* out) const {
  const int d = dim();
  const float* qr = pq;
  const float* sq = pq + d;
  uint8_t idx[kMaxD], z[kMaxD];
  for (int64_t r = 0; r < n; ++r) {
    const uint8_t* rec = in + size_t(r) * row_bytes();
    float mse = 0.f;
    if (bits_ > 1) {
      unpack_bits(rec, size_t(d), bits_ - 1, idx);
      const auto& cen = cb_->centroids();
      for (int j = 0; j < d; ++j) mse += qr[j] * cen[idx[j]];
    }
    unpack_bits(rec + idx_bytes_ + 2, size_t(d), 1, z);
    float qjl = 0.f;
    for (int j = 0; j < d; ++j) qjl += z[j] ? sq[j] : -sq[j];
    const float norm = detail::get_f16(rec + idx_bytes_);
    const float gamma = detail::get_f16(rec + idx_bytes_ + 2 + qjl_bytes_);
    out[r] = norm * (mse + float(kSqrtHalfPi / d) * gamma * qjl);
  }
}

}  // namespace tq
