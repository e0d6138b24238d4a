#include "tq/scalar_codebook.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>
#include <mutex>
#include <tuple>

#include "tq/codebook.h"
#include "tq/codebook_io.h"
#include "tq/error.h"
#include "tq/simd.h"

namespace tq {

ScalarCodebook::ScalarCodebook(std::string source, std::vector<float> centroids)
    : source_(std::move(source)), c_(std::move(centroids)) {
  TQ_CHECK(c_.size() >= 2 && c_.size() <= 256, "codebook {}: {} levels (need 2..256)", source_, c_.size());
  for (size_t i = 1; i < c_.size(); ++i)
    TQ_CHECK(c_[i] > c_[i - 1], "codebook {}: centroids not strictly ascending at {}", source_, i);
  m_.resize(c_.size() - 1);
  for (size_t i = 0; i + 1 < c_.size(); ++i) m_[i] = (c_[i] + c_[i + 1]) / 2.0f;
  build_lut();
}

ScalarCodebook::ScalarCodebook(std::string source, std::vector<float> centroids, std::vector<float> midpoints)
    : source_(std::move(source)), c_(std::move(centroids)), m_(std::move(midpoints)) {
  TQ_CHECK(c_.size() >= 2 && c_.size() <= 256 && m_.size() + 1 == c_.size(), "codebook {}: {} levels, {} midpoints",
           source_, c_.size(), m_.size());
  for (size_t i = 1; i < c_.size(); ++i)
    TQ_CHECK(c_[i] > c_[i - 1], "codebook {}: centroids not strictly ascending at {}", source_, i);
  for (size_t i = 0; i < m_.size(); ++i)
    TQ_CHECK(m_[i] > c_[i] && m_[i] < c_[i + 1], "codebook {}: midpoint {} not between its centroids", source_, i);
  build_lut();
}

void ScalarCodebook::build_lut() {
  bucketizer_ = Bucketizer(m_.data(), int(m_.size()));
  // Bins of width ≤ half the smallest gap between midpoints: a computed bin
  // that is off by one still brackets y between prev and next (see index()).
  float min_gap = INFINITY;
  for (size_t i = 1; i < m_.size(); ++i) min_gap = std::min(min_gap, m_[i] - m_[i - 1]);
  lo_ = m_.front();
  const float span = m_.back() - m_.front();
  bins_ = m_.size() == 1 ? 1 : std::min(1 << 20, int(std::ceil(span / min_gap * 2)) + 2);
  inv_w_ = span > 0 ? float(bins_ - 1) / span : 0.0f;
  bins_lut_.resize(size_t(bins_));
  for (int t = 0; t < bins_; ++t) {
    const float left = m_.size() == 1 ? lo_ : lo_ + float(t) / inv_w_;
    const int base = int(std::upper_bound(m_.begin(), m_.end(), left) - m_.begin());
    Bin& b = bins_lut_[size_t(t)];
    b.base = base;
    b.prev = base > 0 ? m_[size_t(base - 1)] : -INFINITY;
    b.next = base < int(m_.size()) ? m_[size_t(base)] : INFINITY;
  }
}

double ScalarCodebook::gaussian_distortion(int d) const {
  Codebook cb;
  cb.d = d;
  cb.bits = 0;
  cb.centroids.assign(c_.begin(), c_.end());
  cb.midpoints.assign(m_.begin(), m_.end());
  evaluate_codebook(cb, Distribution::gauss);
  return cb.distortion;
}

// Exact #{i : y ≥ m_i}: the computed bin t is the true bin or a neighbour;
// base counts midpoints ≤ left(t), and at most one midpoint lies between y and
// left(t) on either side, so one comparison each way fixes the count.
uint8_t ScalarCodebook::index(float y) const {
  float tf = (y - lo_) * inv_w_;
  tf = std::min(std::max(tf, 0.0f), float(bins_ - 1));
  const Bin& b = bins_lut_[size_t(int(tf))];
  return uint8_t(b.base - int(y < b.prev) + int(y >= b.next));
}

void ScalarCodebook::index(const float* y, int n, uint8_t* idx) const {
  if (m_.size() <= 15) {  // up to 4 bits: vectorized search
    bucketizer_(y, n, idx);
    return;
  }
  for (int j = 0; j < n; ++j) idx[j] = index(y[j]);
}

namespace {
// The quantizers' float32 table of a solved codebook.
std::shared_ptr<const ScalarCodebook> to_scalar_codebook(const std::string& source, const Codebook& cb) {
  std::vector<float> c(cb.centroids.size());
  for (size_t i = 0; i < c.size(); ++i) c[i] = float(cb.centroids[i]);
  return std::make_shared<const ScalarCodebook>(source, std::move(c));
}
}  // namespace

std::shared_ptr<const ScalarCodebook> get_scalar_codebook(const std::string& name, int d, int bits) {
  static std::mutex mu;
  static std::map<std::tuple<std::string, int, int>, std::shared_ptr<const ScalarCodebook>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto key = std::make_tuple(name, d, bits);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  auto sc = to_scalar_codebook(name, solve_codebook(name, d, bits));
  cache.emplace(key, sc);
  return sc;
}

CodebookSource empirical_codebooks(std::vector<double> samples, std::string source) {
  struct State {
    std::mutex mu;
    std::vector<double> samples;
    std::string source;
    std::map<std::pair<int, int>, std::shared_ptr<const ScalarCodebook>> cache;
  };
  auto st = std::make_shared<State>();
  st->samples = std::move(samples);
  st->source = std::move(source);
  return [st](int d, int bits) {
    std::lock_guard<std::mutex> lock(st->mu);
    auto& sc = st->cache[{d, bits}];
    if (!sc) sc = to_scalar_codebook(st->source, lloyd_max_empirical(st->samples, d, bits));
    return sc;
  };
}

}  // namespace tq
