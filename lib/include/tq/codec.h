// A Codec quantizes one side of a KV cache (keys or values): n rows of d
// floats ↔ fixed-size records, and scores a query against records without
// materialising the rows (q·k in the rotated domain, as the kernels do).
//
// Contract (every codec; tests/unit/test_formats.cpp loops over all of them):
//   encode(x, n, out)    out holds encoded_bytes(n) bytes, fully written
//   decode(in, n, out)   out holds n·d floats
//   encode(decode(r)) == r byte for byte (for finite, in-range inputs)
//   prepare_query(q, p)  p holds prepared_size() floats (rotation, QJL sketch)
//   score(p, in, n, s)   s[i] = q·decode(in)_i up to float rounding (1e-5 rel.)
// Inputs must be finite and within the fp16 range (|x| ≤ 65504): anything
// else throws tq::Error naming the codec, row and column.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tq {

// The largest finite fp16 value: the range every codec accepts (its stored norms and scales are fp16).
inline constexpr float kFp16Max = 65504.0f;
// The largest head_dim a CPU codec accepts (their per-row scratch buffers live on the stack).
inline constexpr int kMaxHeadDim = 4096;

class Codec {
 public:
  virtual ~Codec() = default;
  const std::string& name() const { return name_; }
  int dim() const { return d_; }

  // Bytes per row (steady state for codecs that encode rows in groups).
  virtual size_t row_bytes() const = 0;
  // Rows that share one record (KIVI keys: a group of tokens); 1 otherwise.
  virtual int group_rows() const { return 1; }
  virtual size_t encoded_bytes(int64_t n) const { return size_t(n) * row_bytes(); }
  // Whether encode(decode(r)) == r. False for codecs whose decode shrinks the
  // norm by design (raw-norm MSE, QJL estimators) or drops padding.
  virtual bool reencode_stable() const { return true; }
  // Documented NMSE bound E‖x − x̂‖²/E‖x‖² for rows of i.i.d. N(0,1) values
  // (each codec derives its own in its header); tests check it.
  virtual double gaussian_nmse_bound() const = 0;
  // The slack of the rotated codecs' bounds over their codebook's Gaussian distortion: the rotated
  // unit vector's coordinates are only nearly N(0, 1/d), and a finite sample of rows scatters.
  static constexpr double kNmseSlack = 1.15;
  double bits_per_value() const { return 8.0 * double(row_bytes()) / dim(); }

  virtual void encode(const float* x, int64_t n, uint8_t* out) const = 0;
  virtual void decode(const uint8_t* in, int64_t n, float* out) const = 0;

  virtual size_t prepared_size() const { return size_t(d_); }
  virtual void prepare_query(const float* q, float* prepared) const;
  // Default: decode and dot. Rotating codecs override with the rotated-domain score.
  virtual void score(const float* prepared, const uint8_t* in, int64_t n, float* out) const;

  // Expected-max envelope of |x| over m i.i.d. N(0,1) values, with slack:
  // sqrt(2 ln 2m) + 0.5 (used by the min/max-scaled codecs' bounds).
  static double gaussian_max_envelope(int m);

  // Convenience wrappers.
  std::vector<uint8_t> encode(const std::vector<float>& x) const;
  std::vector<float> decode(const std::vector<uint8_t>& r, int64_t n) const;

 protected:
  Codec(std::string name, int d) : name_(std::move(name)), d_(d) {}
  // Throws tq::Error if any value is NaN/Inf or beyond the fp16 range.
  void check_rows(const float* x, int64_t n) const;


 private:
  std::string name_;
  int d_;
};

using CodecPtr = std::shared_ptr<const Codec>;

}  // namespace tq
