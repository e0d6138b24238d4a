#include "tq/rotation.h"

#include <cmath>
#include <cerrno>
#include <cstdlib>

#include "tq/error.h"
#include "tq/rng.h"
#include "tq/simd.h"

namespace tq {

bool is_power_of_two(int64_t d) { return d > 0 && (d & (d - 1)) == 0; }

void Rotation::apply_rows(float* x, int64_t n) const {
  for (int64_t i = 0; i < n; ++i) apply(x + i * d_);
}

std::vector<float> Rotation::matrix() const {
  // Column j of M is M e_j.
  std::vector<float> m(size_t(d_) * d_), e(d_);
  for (int j = 0; j < d_; ++j) {
    std::fill(e.begin(), e.end(), 0.f);
    e[j] = 1.f;
    apply(e.data());
    for (int i = 0; i < d_; ++i) m[size_t(i) * d_ + j] = e[i];
  }
  return m;
}

IdentityRotation::IdentityRotation(int d) : Rotation(d) {
  TQ_CHECK(d >= 1, "rotation none: head_dim {} must be ≥ 1", d);
}

HadamardRotation::HadamardRotation(int d) : Rotation(d) {
  TQ_CHECK(is_power_of_two(d),
           "rotation hadamard: head_dim {} is not a power of two (use rot=haar:SEED or rot=auto)", d);
  scale_ = float(1.0 / std::sqrt(double(d)));
}

void HadamardRotation::apply(float* x) const {
  fwht(x, d_);
  for (int i = 0; i < d_; ++i) x[i] *= scale_;
}

RandomizedHadamard::RandomizedHadamard(int d, uint64_t seed) : Rotation(d), seed_(seed) {
  TQ_CHECK(is_power_of_two(d),
           "rotation rht:{}: head_dim {} is not a power of two (use rot=haar:SEED or rot=auto)", seed, d);
  scale_ = float(1.0 / std::sqrt(double(d)));
  Rng rng(seed);
  s1_.resize(d);
  s2_.resize(d);
  for (auto& s : s1_) s = rng.coin() ? -1.f : 1.f;
  for (auto& s : s2_) s = rng.coin() ? -1.f : 1.f;
}

RandomizedHadamard::RandomizedHadamard(int d, std::vector<float> s1, std::vector<float> s2, std::string name)
    : Rotation(d), seed_(0), s1_(std::move(s1)), s2_(std::move(s2)), fixed_name_(std::move(name)) {
  TQ_CHECK(is_power_of_two(d), "rotation {}: head_dim {} is not a power of two", fixed_name_, d);
  TQ_CHECK(int(s1_.size()) == d && int(s2_.size()) == d, "rotation {}: sign tables must have {} entries", fixed_name_, d);
  scale_ = float(1.0 / std::sqrt(double(d)));
}

std::string RandomizedHadamard::name() const {
  return fixed_name_.empty() ? fmt::format("rht:{}", seed_) : fixed_name_;
}

void RandomizedHadamard::apply(float* x) const {
  for (int i = 0; i < d_; ++i) x[i] *= s1_[i];
  fwht(x, d_);
  for (int i = 0; i < d_; ++i) x[i] *= scale_ * s2_[i];
}

void RandomizedHadamard::apply_inverse(float* x) const {
  for (int i = 0; i < d_; ++i) x[i] *= s2_[i];
  fwht(x, d_);
  for (int i = 0; i < d_; ++i) x[i] *= scale_ * s1_[i];
}

HaarRotation::HaarRotation(int d, uint64_t seed) : Rotation(d), seed_(seed) {
  TQ_CHECK(d >= 2, "rotation haar:{}: head_dim {} must be ≥ 2", seed, d);
  // A: d×d Gaussian, row-major. Householder QR in float64; Q = H_0 H_1 … H_{d-2}.
  const size_t n = size_t(d);
  std::vector<double> a(n * n);
  Rng rng(seed);
  for (auto& v : a) v = rng.gaussian();
  std::vector<double> vs(n * n, 0.0);  // Householder vectors, column k in vs[k*n ..]
  std::vector<double> rdiag(n);
  for (size_t k = 0; k < n; ++k) {
    double norm2 = 0;
    for (size_t i = k; i < n; ++i) norm2 += a[i * n + k] * a[i * n + k];
    const double norm = std::sqrt(norm2);
    const double alpha = a[k * n + k] > 0 ? -norm : norm;  // avoid cancellation
    double* v = &vs[k * n];
    for (size_t i = k; i < n; ++i) v[i] = a[i * n + k];
    v[k] -= alpha;
    double vn2 = 0;
    for (size_t i = k; i < n; ++i) vn2 += v[i] * v[i];
    rdiag[k] = alpha;
    if (vn2 == 0) continue;
    for (size_t j = k; j < n; ++j) {  // A ← (I − 2vvᵀ/vᵀv) A
      double dot = 0;
      for (size_t i = k; i < n; ++i) dot += v[i] * a[i * n + j];
      const double f = 2 * dot / vn2;
      for (size_t i = k; i < n; ++i) a[i * n + j] -= f * v[i];
    }
    rdiag[k] = a[k * n + k];
  }
  // Q = H_0 … H_{n-1} applied to I: build column by column.
  q_.assign(n * n, 0.0);
  for (size_t i = 0; i < n; ++i) q_[i * n + i] = 1.0;
  for (size_t kk = n; kk-- > 0;) {
    const double* v = &vs[kk * n];
    double vn2 = 0;
    for (size_t i = kk; i < n; ++i) vn2 += v[i] * v[i];
    if (vn2 == 0) continue;
    for (size_t j = 0; j < n; ++j) {
      double dot = 0;
      for (size_t i = kk; i < n; ++i) dot += v[i] * q_[i * n + j];
      const double f = 2 * dot / vn2;
      for (size_t i = kk; i < n; ++i) q_[i * n + j] -= f * v[i];
    }
  }
  // Sign fix: Q ← Q · diag(sign(R_kk)) so the factorization is unique (Haar measure).
  for (size_t j = 0; j < n; ++j) {
    if (rdiag[j] < 0)
      for (size_t i = 0; i < n; ++i) q_[i * n + j] = -q_[i * n + j];
  }
}

std::string HaarRotation::name() const { return fmt::format("haar:{}", seed_); }

// Thread-safe: the scratch vector is local (rotations are shared across threads).
void HaarRotation::apply(float* x) const {
  const size_t n = size_t(d_);
  std::vector<double> tmp(n);
  for (size_t i = 0; i < n; ++i) {
    double s = 0;
    for (size_t j = 0; j < n; ++j) s += q_[i * n + j] * double(x[j]);
    tmp[i] = s;
  }
  for (size_t i = 0; i < n; ++i) x[i] = float(tmp[i]);
}

void HaarRotation::apply_inverse(float* x) const {
  const size_t n = size_t(d_);
  std::vector<double> tmp(n, 0.0);
  for (size_t j = 0; j < n; ++j) {
    const double xj = x[j];
    for (size_t i = 0; i < n; ++i) tmp[i] += q_[j * n + i] * xj;
  }
  for (size_t i = 0; i < n; ++i) x[i] = float(tmp[i]);
}

namespace {
uint64_t parse_seed(const std::string& spec, const std::string& s) {
  TQ_CHECK(!s.empty(), "rotation '{}': missing seed after ':'", spec);
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  TQ_CHECK(errno == 0 && end && *end == '\0' && s[0] != '-', "rotation '{}': seed '{}' is not a non-negative integer", spec, s);
  return v;
}
}  // namespace

std::unique_ptr<Rotation> make_rotation(const std::string& spec, int d) {
  TQ_CHECK(d >= 1, "rotation '{}': head_dim {} must be positive", spec, d);
  if (spec == "none") return std::make_unique<IdentityRotation>(d);
  if (spec == "hadamard") return std::make_unique<HadamardRotation>(d);
  if (spec == "auto") {
    if (is_power_of_two(d)) return std::make_unique<HadamardRotation>(d);
    return std::make_unique<HaarRotation>(d, 0);
  }
  const auto colon = spec.find(':');
  const std::string kind = spec.substr(0, colon);
  if (colon != std::string::npos && kind == "rht")
    return std::make_unique<RandomizedHadamard>(d, parse_seed(spec, spec.substr(colon + 1)));
  if (colon != std::string::npos && kind == "haar")
    return std::make_unique<HaarRotation>(d, parse_seed(spec, spec.substr(colon + 1)));
  TQ_THROW("unknown rotation '{}' (expected none, hadamard, rht:SEED, haar:SEED or auto)", spec);
}

}  // namespace tq
