// A codebook as the quantizers use it: float32 centroids (ascending) and
// float32 midpoints m_i = (c_i + c_{i+1})/2 computed in float32 (as vLLM's
// backend does). Index of y: #{i : y ≥ m_i} — a value on a midpoint goes up.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tq/simd.h"

namespace tq {

class ScalarCodebook {
 public:
  ScalarCodebook(std::string source, std::vector<float> centroids);
  // Explicit midpoints (a published table that rounds them its own way).
  ScalarCodebook(std::string source, std::vector<float> centroids, std::vector<float> midpoints);
  const std::string& source() const { return source_; }
  int levels() const { return int(c_.size()); }
  const std::vector<float>& centroids() const { return c_; }
  const std::vector<float>& midpoints() const { return m_; }

  // Per-vector distortion d·E[(x − Q(x))²] for x ~ N(0, 1/d).
  double gaussian_distortion(int d) const;

  uint8_t index(float y) const;                            // exact, via a LUT + fix-up
  void index(const float* y, int n, uint8_t* idx) const;   // bulk

 private:
  std::string source_;
  std::vector<float> c_, m_;
  // Uniform grid over [m_0, m_last]: per bin, base = #{i : m_i ≤ left edge}
  // and the midpoints just below and above that edge.
  struct Bin {
    int base;
    float prev, next;
  };
  float lo_ = 0, inv_w_ = 0;
  int bins_ = 0;
  std::vector<Bin> bins_lut_;
  Bucketizer bucketizer_;
  void build_lut();
};

// Codebooks by name for `cb=`: gauss | sphere | vllm | uniform | empirical:FILE,
// solved once per (name, d, bits) and cached (thread-safe).
std::shared_ptr<const ScalarCodebook> get_scalar_codebook(const std::string& name, int d, int bits);

// A codebook for (d, bits), as a format's codecs ask for one (FormatOverrides).
using CodebookSource = std::function<std::shared_ptr<const ScalarCodebook>(int d, int bits)>;

// Codebooks Lloyd-fitted to samples of rotated coordinates (lloyd_max_empirical,
// as `cb=empirical:FILE` does with the file's numbers), solved on first use per
// (d, bits) and kept by the returned source (thread-safe). `source` names the
// tables (ScalarCodebook::source()).
CodebookSource empirical_codebooks(std::vector<double> samples, std::string source);

}  // namespace tq
